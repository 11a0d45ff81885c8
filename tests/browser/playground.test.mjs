// Browser test of the attnd playground page (GET /).
//
// Loads the page from a running attnd in Debian's headless Chromium
// (/usr/bin/chromium, driven by playwright-core), runs real requests through
// the page against POST /v1/attention, and checks what the page drew: the
// state it exposes (window.attndLastRender) and the canvas pixels themselves.
// Saves screenshots to docs/playground.png and docs/playground-phone.png.
//
//   ATTND_URL=http://127.0.0.1:8000 node playground.test.mjs
//
// run.sh starts build/attnd on an ephemeral port and sets ATTND_URL.
// Prints "browser: N passed, N failed" and exits non-zero on a failure.

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const BASE = (process.env.ATTND_URL || '').replace(/\/$/, '');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOT_DIR = process.env.ATTND_SCREENSHOT_DIR || path.join(ROOT, 'docs');

if (!BASE) {
  console.error('set ATTND_URL to a running attnd, e.g. http://127.0.0.1:8000 (run.sh does this)');
  console.log('browser: 0 passed, 1 failed');
  process.exit(1);
}

// ------------------------------------------------------------- tiny runner

const results = [];
async function test(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    results.push({ name, ok: true });
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    results.push({ name, ok: false });
    console.log(`FAIL ${name}\n     ${String(e && e.stack || e).split('\n').slice(0, 4).join('\n     ')}`);
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
function near(a, b, tol, what) {
  assert(Math.abs(a - b) <= tol, `${what}: ${a} vs ${b} (tolerance ${tol})`);
}

// ------------------------------------------------------------- page helpers

async function fill(page, values) {
  for (const [id, v] of Object.entries(values)) {
    const el = page.locator('#' + id);
    const tag = await el.evaluate((n) => n.tagName);
    if (tag === 'SELECT') await el.selectOption(String(v));
    else await el.fill(String(v));
  }
}

// Clicks Run and waits for a new successful render.
async function runOk(page) {
  const before = await page.evaluate(() => (window.attndLastRender ? window.attndLastRender.run : 0));
  await page.click('#run');
  await page.waitForFunction(
    (b) => (window.attndLastRender && window.attndLastRender.run > b) ||
      !document.getElementById('error').hidden,
    before, { timeout: 15000 });
  const err = await page.locator('#error');
  if (await err.isVisible()) throw new Error('page shows an error: ' + (await err.textContent()));
  return page.evaluate(() => ({
    render: {
      run: window.attndLastRender.run, batch: window.attndLastRender.batch,
      head: window.attndLastRender.head, Lq: window.attndLastRender.Lq,
      Lk: window.attndLastRender.Lk, max: window.attndLastRender.max,
      weights: window.attndLastRender.weights, drawnCells: window.attndLastRender.drawnCells,
      geometry: window.attndLastRender.geometry, emptyColour: window.attndLastRender.emptyColour,
    },
    response: window.attndLastResponse,
  }));
}

// Clicks Run and waits for the error box; returns its text.
async function runErr(page) {
  await page.click('#run');
  await page.locator('#error').waitFor({ state: 'visible', timeout: 15000 });
  return page.locator('#error').textContent();
}

// Reads the canvas pixels at the centre of each listed cell.
async function cellPixels(page, cells) {
  return page.evaluate((cs) => {
    const r = window.attndLastRender;
    const g = r.geometry;
    const canvas = document.getElementById('heatmap');
    const img = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
    return cs.map(([i, j]) => {
      const x = Math.floor((g.left + (j + 0.5) * g.cw) * g.dpr);
      const y = Math.floor((g.top + (i + 0.5) * g.ch) * g.dpr);
      const k = 4 * (y * img.width + x);
      const p = img.data;
      return { i, j, rgb: [p[k], p[k + 1], p[k + 2]], expect: r.weights[i][j] === 0 ? null : r.colourOf(r.weights[i][j]) };
    });
  }, cells);
}

const sameRgb = (a, b, tol = 0) => a.every((v, k) => Math.abs(v - b[k]) <= tol);

// Weights of one (batch, head) from a response in nested or flat form.
function responseSlice(resp, b, h) {
  const w = resp.weights;
  if (Array.isArray(w)) return Array.isArray(w[0][0][0]) ? w[b][h] : w[b];
  const s = w.shape;
  const [H, Lq, Lk] = s.length === 4 ? [s[1], s[2], s[3]] : [1, s[1], s[2]];
  const rows = [];
  for (let i = 0; i < Lq; i++) rows.push(w.data.slice(((b * H + h) * Lq + i) * Lk, ((b * H + h) * Lq + i + 1) * Lk));
  return rows;
}

// Checks that exactly the non-zero cells were drawn, that the zero cells
// show the empty background and the drawn ones the colour scale, and that
// the page drew what the server returned.
async function checkDrawing(page, r, resp, allowed) {
  const { weights, drawnCells, Lq, Lk } = r;
  const fromServer = responseSlice(resp, r.batch, r.head);
  assert(fromServer.length === Lq && fromServer[0].length === Lk, 'rendered shape differs from the response');
  const drawn = new Set(drawnCells.map(([i, j]) => i + ',' + j));
  const all = [];
  for (let i = 0; i < Lq; i++) {
    let sum = 0;
    for (let j = 0; j < Lk; j++) {
      const w = weights[i][j];
      assert(w === fromServer[i][j], `cell (${i}, ${j}) drawn from ${w}, server sent ${fromServer[i][j]}`);
      sum += w;
      if (!allowed(i, j)) {
        assert(w === 0, `masked cell (${i}, ${j}) has weight ${w}, not exactly 0`);
        assert(!drawn.has(i + ',' + j), `masked cell (${i}, ${j}) was drawn`);
      } else {
        assert(w > 0, `allowed cell (${i}, ${j}) has weight ${w}`);
        assert(drawn.has(i + ',' + j), `allowed cell (${i}, ${j}) was not drawn`);
      }
      all.push([i, j]);
    }
    near(sum, 1, 1e-5, `row ${i} sum`);
  }
  assert(drawn.size === drawnCells.length, 'a cell was drawn twice');
  const px = await cellPixels(page, all);
  for (const p of px) {
    if (p.expect === null) {
      assert(sameRgb(p.rgb, r.emptyColour), `blank cell (${p.i}, ${p.j}) has pixel ${p.rgb}, background is ${r.emptyColour}`);
    } else {
      assert(!sameRgb(p.rgb, r.emptyColour, 6), `drawn cell (${p.i}, ${p.j}) looks like the background: ${p.rgb}`);
      assert(sameRgb(p.rgb, p.expect, 3), `drawn cell (${p.i}, ${p.j}) has pixel ${p.rgb}, colour scale says ${p.expect}`);
    }
  }
}

function softmaxRef(scores) {
  const m = Math.max(...scores);
  const e = scores.map((s) => Math.exp(s - m));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / z);
}

// A float64 reference of one (batch 0, head h) slice of a /v1 request with
// the attention variants (docs/api.md): {w: [Lq][Lk], lse: [Lq]}.
function variantsRef(req, h) {
  const q4 = (t) => (Array.isArray(t[0][0][0]) ? t : t.map((x) => [x]));
  const Q = q4(req.query)[0][h], K = q4(req.key)[0], V = q4(req.value)[0];
  const kv = K[Math.floor(h / (q4(req.query)[0].length / K.length))];
  const Lq = Q.length, Lk = kv.length, D = Q[0].length;
  const scale = req.scale === undefined ? 1 / Math.sqrt(D) : req.scale;
  const causal = req.causal === true ? 'upper_left' : req.causal;
  const cuq = req.cu_seqlens_q || [0, Lq], cuk = req.cu_seqlens_k || [0, Lk];
  const w = [], lse = [];
  void V;
  for (let i = 0; i < Lq; i++) {
    let n = 0;
    while (!(i >= cuq[n] && i < cuq[n + 1])) n++;
    const il = i - cuq[n], lq = cuq[n + 1] - cuq[n], lk = cuk[n + 1] - cuk[n];
    const s = new Array(Lk).fill(null);
    for (let j = cuk[n]; j < cuk[n + 1]; j++) {
      const jl = j - cuk[n];
      if (causal === 'upper_left' && jl > il) continue;
      if (causal === 'lower_right' && jl > il + lk - lq) continue;
      if (req.window) {
        const c = req.window_align === 'lower_right' ? il + lk - lq : il;
        if (req.window[0] !== null && jl < c - req.window[0]) continue;
        if (req.window[1] !== null && jl > c + req.window[1]) continue;
      }
      let x = 0;
      for (let d = 0; d < D; d++) x += Q[i][d] * kv[j][d];
      x *= scale;
      if (req.softcap !== undefined) x = req.softcap * Math.tanh(x / req.softcap);
      if (req.alibi_slopes) x -= req.alibi_slopes[h] * Math.abs(il + lk - lq - jl);
      s[j] = x;
    }
    const sink = req.sinks ? req.sinks[h] : -Infinity;
    let m = sink;
    for (const x of s) if (x !== null && x > m) m = x;
    let den = req.sinks ? Math.exp(sink - m) : 0;
    for (const x of s) if (x !== null) den += Math.exp(x - m);
    w.push(s.map((x) => (x === null ? 0 : Math.exp(x - m) / den)));
    lse.push(den > 0 ? m + Math.log(den) : -Infinity);
  }
  return { w, lse };
}

// Runs a preset and waits for its drawing; returns the render, the
// response and the request the page sent.
async function runPreset(page, name, check) {
  const before = await page.evaluate(() => (window.attndLastRender ? window.attndLastRender.run : 0));
  await page.selectOption('#preset', name);
  await page.waitForFunction((b) => (window.attndLastRender && window.attndLastRender.run > b) ||
    !document.getElementById('error').hidden, before, { timeout: 15000 });
  const err = page.locator('#error');
  if (await err.isVisible()) throw new Error('page shows an error: ' + (await err.textContent()));
  void check;
  return page.evaluate(() => ({
    render: { ...window.attndLastRender, isDrawn: undefined, colourOf: undefined },
    response: window.attndLastResponse,
    request: JSON.parse(document.getElementById('request-json').textContent),
  }));
}

// Every head's weights (and, with sinks, its sink column) against the
// reference, through the head selector.
async function checkHeads(page, req, H) {
  for (let h = 0; h < H; h++) {
    if (H > 1) {
      await page.selectOption('#sel-head', String(h));
      await page.waitForFunction((hh) => window.attndLastRender.head === hh, h);
    }
    const r = await page.evaluate(() => ({ weights: window.attndLastRender.weights,
      sinkMass: window.attndLastRender.sinkMass }));
    const ref = variantsRef(req, h);
    for (let i = 0; i < ref.w.length; i++) {
      let sum = 0;
      for (let j = 0; j < ref.w[i].length; j++) {
        near(r.weights[i][j], ref.w[i][j], 1e-5, `head ${h} weight (${i}, ${j})`);
        if (ref.w[i][j] === 0) assert(r.weights[i][j] === 0, `head ${h} (${i}, ${j}) must be exactly 0`);
        sum += r.weights[i][j];
      }
      if (req.sinks) {
        near(r.sinkMass[i], Math.exp(req.sinks[h] - ref.lse[i]), 1e-5, `head ${h} sink mass row ${i}`);
        near(sum + r.sinkMass[i], 1, 1e-5, `head ${h} row ${i}: keys and sink sum to 1`);
      }
    }
  }
  if (H > 1) await page.selectOption('#sel-head', '0');
}

// A reverse proxy on loopback that serves attnd under a path prefix, as a
// proxy in front of it may (https://example.com/attnd/ -> attnd's /), and
// answers 404 to anything outside the prefix.  seen: every path asked for.
async function prefixProxy(prefix) {
  const target = new URL(BASE);
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push(req.url);
    if (!req.url.startsWith(prefix + '/')) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":"outside the proxy prefix"}');
      return;
    }
    const up = http.request({
      host: target.hostname, port: target.port, method: req.method,
      path: req.url.slice(prefix.length), headers: req.headers,
    }, (r) => { res.writeHead(r.statusCode, r.headers); r.pipe(res); });
    up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
    req.pipe(up);
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${server.address().port}${prefix}/`,
    seen,
    close: () => { server.closeAllConnections(); return new Promise((ok) => server.close(ok)); },
  };
}

// ------------------------------------------------------------- tests

const launchArgs = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];
// playwright-core gives every launch a new empty --user-data-dir of its
// own and adds --headless; it never downloads a browser here.
let browser;
try {
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: launchArgs });
} catch (e) {
  console.error('cannot start ' + CHROMIUM + ': ' + e.message);
  console.log('browser: 0 passed, 1 failed');
  process.exit(1);
}
const pageErrors = [];
fs.mkdirSync(SHOT_DIR, { recursive: true });

async function newPage(opts) {
  const ctx = await browser.newContext(opts);
  const page = await ctx.newPage();
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) pageErrors.push(m.text());
  });
  page.on('requestfailed', (r) => pageErrors.push('request failed: ' + r.url()));
  return page;
}

try {
  await test('GET /, /app.js, /tensors.js, /style.css serve the files of server/http/static byte for byte', async () => {
    const files = { '/': 'index.html', '/index.html': 'index.html', '/app.js': 'app.js', '/tensors.js': 'tensors.js', '/style.css': 'style.css' };
    const types = { 'index.html': 'text/html', 'app.js': 'javascript', 'tensors.js': 'javascript', 'style.css': 'text/css' };
    for (const [url, file] of Object.entries(files)) {
      const res = await fetch(BASE + url);
      assert(res.status === 200, `GET ${url}: status ${res.status}`);
      const ct = res.headers.get('content-type') || '';
      assert(ct.includes(types[file]), `GET ${url}: content-type "${ct}"`);
      const got = Buffer.from(await res.arrayBuffer());
      const want = fs.readFileSync(path.join(ROOT, 'server', 'http', 'static', file));
      assert(got.equals(want), `GET ${url}: ${got.length} bytes differ from server/http/static/${file} (${want.length} bytes); rebuild attnd`);
    }
    const res = await fetch(BASE + '/no-such-asset.js');
    assert(res.status === 404, `GET /no-such-asset.js: status ${res.status}, want 404`);
  });

  const page = await newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(BASE + '/', { waitUntil: 'load' });

  await test('page loads with its links, labelled inputs and no script errors', async () => {
    assert((await page.title()) === 'attnd playground', 'title: ' + (await page.title()));
    for (const href of ['openapi.json', 'metrics']) {
      assert(await page.locator(`a[href="${href}"]`).count() === 1, 'no link to ' + href);
    }
    // Every form control has an accessible name.
    const unnamed = await page.evaluate(() => [...document.querySelectorAll('input, select, textarea')]
      .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
      .map((el) => el.id));
    assert(unnamed.length === 0, 'controls without a label: ' + unnamed.join(', '));
    assert(pageErrors.length === 0, 'errors: ' + pageErrors.join('; '));
  });

  await test('causal 1x1x6x6: upper triangle exactly 0 and blank, diagonal drawn', async () => {
    await fill(page, { preset: '', B: 1, H: 1, Lq: 6, Lk: 6, D: 8, Dv: 4, seed: 11, causal: 'upper_left',
      valid_lens: '', window_left: '', window_right: '', scale: '', mask: '' });
    await page.click('#generate');
    const q = JSON.parse(await page.inputValue('#query'));
    assert(q.length === 1 && q[0].length === 6 && q[0][0].length === 8, 'generated query is not (1, 6, 8)');
    const { render: r, response } = await runOk(page);
    assert(r.Lq === 6 && r.Lk === 6, `rendered ${r.Lq}x${r.Lk}`);
    await checkDrawing(page, r, response, (i, j) => j <= i);
    for (let i = 0; i < 6; i++) {
      assert(r.drawnCells.some(([a, b]) => a === i && b === i), `diagonal (${i}, ${i}) not drawn`);
    }
    assert(r.drawnCells.length === 21, `${r.drawnCells.length} cells drawn, want 21`);
    const ds = await page.locator('#heatmap').evaluate((c) => ({ ...c.dataset }));
    assert(ds.drawnCount === '21' && ds.lq === '6' && ds.lk === '6', 'canvas data-* ' + JSON.stringify(ds));
  });

  await test('hover tooltip shows (i, j, weight) and is blank for a masked cell', async () => {
    const g = await page.evaluate(() => window.attndLastRender.geometry);
    await page.locator('#heatmap').scrollIntoViewIfNeeded();
    const box = await page.locator('#heatmap').boundingBox();
    const at = async (i, j) => {
      await page.mouse.move(box.x + g.left + (j + 0.5) * g.cw, box.y + g.top + (i + 0.5) * g.ch);
      const tip = page.locator('#tooltip');
      await tip.waitFor({ state: 'visible', timeout: 3000 });
      return { text: await tip.textContent(), ...(await tip.evaluate((t) => ({ ...t.dataset }))) };
    };
    const w32 = await page.evaluate(() => window.attndLastRender.weights[3][2]);
    const t = await at(3, 2);
    assert(t.text.includes('(3, 2)'), 'tooltip: ' + t.text);
    assert(t.i === '3' && t.j === '2' && Number(t.weight) === w32, 'tooltip data ' + JSON.stringify(t));
    assert(t.text.includes(String(Number(w32.toPrecision(4)))), `tooltip "${t.text}" lacks weight ${w32}`);
    const m = await at(1, 4);
    assert(m.text.includes('(1, 4)') && /weight 0\b/.test(m.text), 'masked tooltip: ' + m.text);
    await page.mouse.move(0, 0);
  });

  await test('keyboard: arrow keys on the focused heatmap move a cell cursor with its tooltip', async () => {
    await page.locator('#heatmap').focus();
    await page.keyboard.press('ArrowDown');            // first press selects (0, 0)
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowRight');
    const tip = page.locator('#tooltip');
    await tip.waitFor({ state: 'visible', timeout: 3000 });
    const d = await tip.evaluate((t) => ({ ...t.dataset }));
    assert(d.i === '2' && d.j === '1', 'cursor at ' + JSON.stringify(d));
    assert(await page.locator('#cell-focus').isVisible(), 'no visible cell cursor');
    await page.keyboard.press('Escape');
    assert(!(await page.locator('#cell-focus').isVisible()), 'Escape left the cursor on');
    await page.locator('#run').focus();
  });

  await test('causal 1x1x128x128: only the lower triangle is drawn at small cell sizes', async () => {
    await fill(page, { preset: '', B: 1, H: 1, Lq: 128, Lk: 128, D: 8, Dv: 2, seed: 8, causal: 'upper_left',
      valid_lens: '', window_left: '', window_right: '', scale: '', mask: '' });
    await page.click('#generate');
    const { render: r, response } = await runOk(page);
    assert(r.drawnCells.length === (128 * 129) / 2, `${r.drawnCells.length} cells drawn`);
    await checkDrawing(page, r, response, (i, j) => j <= i);
  });

  await test('d2l example: weights and output match a float64 reference', async () => {
    await page.selectOption('#preset', 'd2l');
    await page.waitForFunction(() => window.attndLastResponse && window.attndLastResponse.id &&
      window.attndLastRender.Lk === 3 && window.attndLastRender.Lq === 2, null, { timeout: 15000 });
    const { render: r, response } = await page.evaluate(() => ({
      render: { weights: window.attndLastRender.weights, drawnCells: window.attndLastRender.drawnCells },
      response: window.attndLastResponse,
    }));
    const q = [[1, 0], [0, 2]], k = [[1, 1], [2, 0], [0, 3]], v = [[1, 0], [0, 1], [1, 1]];
    for (let i = 0; i < 2; i++) {
      const a = softmaxRef(k.map((kk) => (q[i][0] * kk[0] + q[i][1] * kk[1]) / Math.sqrt(2)));
      for (let j = 0; j < 3; j++) near(r.weights[i][j], a[j], 1e-5, `weight (${i}, ${j})`);
      for (let c = 0; c < 2; c++) {
        const o = a.reduce((s, aj, j) => s + aj * v[j][c], 0);
        near(response.output[0][i][c], o, 1e-5, `output (${i}, ${c})`);
      }
    }
    assert(r.drawnCells.length === 6, 'all 6 cells should be drawn');
    const cells = await page.locator('#output-wrap tbody td').allTextContents();
    assert(cells.length === 4, `output table has ${cells.length} cells, want 4`);
    near(Number(cells[0]), response.output[0][0][0], 1e-3, 'output table (0, 0)');
  });

  await test('padding with valid_lens and per-query valid_lens leave the padded keys blank', async () => {
    await fill(page, { preset: '', B: 2, H: 1, Lq: 3, Lk: 5, D: 4, Dv: 2, seed: 5, causal: 'off',
      valid_lens: '2, 4', window_left: '', window_right: '', scale: '', mask: '' });
    await page.click('#generate');
    let { render: r, response } = await runOk(page);
    await checkDrawing(page, r, response, (i, j) => j < 2);
    await page.selectOption('#sel-batch', '1');
    r = await page.evaluate(() => ({ ...window.attndLastRender }));
    assert(r.batch === 1, 'batch selector did not switch the heatmap');
    await checkDrawing(page, r, response, (i, j) => j < 4);
    await fill(page, { valid_lens: '[[1, 2, 3], [5, 0, 4]]' });
    ({ render: r, response } = await runOk(page));
    assert(r.batch === 1, 'selection lost after a new run');
    const lens = [5, 0, 4];
    // Row 1 of batch 1 has no allowed key: all-zero weights, nothing drawn.
    const row1 = r.weights[1];
    assert(row1.every((w) => w === 0), 'empty row has weights ' + row1);
    const rowsWithout1 = (i, j) => j < lens[i];
    const { drawnCells } = r;
    assert(!drawnCells.some(([i]) => i === 1), 'a cell of the empty row was drawn');
    for (const [i, j] of drawnCells) assert(rowsWithout1(i, j), `cell (${i}, ${j}) drawn beyond valid_len`);
    const px = await cellPixels(page, [[1, 0], [1, 4], [0, 0], [2, 3], [2, 4]]);
    assert(sameRgb(px[0].rgb, r.emptyColour) && sameRgb(px[1].rgb, r.emptyColour), 'empty row pixels not blank');
    assert(!sameRgb(px[2].rgb, r.emptyColour, 6) && !sameRgb(px[3].rgb, r.emptyColour, 6), 'allowed pixels blank');
    assert(sameRgb(px[4].rgb, r.emptyColour), 'cell (2, 4) beyond valid_len 4 not blank');
  });

  await test('heads: batch and head selectors pick the (batch, head) slice', async () => {
    await fill(page, { preset: '', B: 2, H: 3, Lq: 4, Lk: 7, D: 4, Dv: 3, seed: 9, causal: 'lower_right',
      valid_lens: '', window_left: '', window_right: '', scale: '', mask: '' });
    await page.click('#generate');
    const { response } = await runOk(page);
    assert(await page.locator('#sel-head option').count() === 3, 'head selector should list 3 heads');
    await page.selectOption('#sel-batch', '1');
    await page.selectOption('#sel-head', '2');
    const r = await page.evaluate(() => ({ ...window.attndLastRender }));
    assert(r.batch === 1 && r.head === 2, `rendered (${r.batch}, ${r.head})`);
    // lower_right: query i sees keys j <= i + Lk - Lq.
    await checkDrawing(page, r, response, (i, j) => j <= i + 3);
  });

  await test('window [2, 1] composes with the mask: only the band is drawn', async () => {
    await fill(page, { preset: '', B: 1, H: 1, Lq: 7, Lk: 7, D: 4, Dv: 2, seed: 21, causal: 'off',
      valid_lens: '', window_left: '2', window_right: '1', scale: '',
      mask: JSON.stringify([true, true, true, true, true, false, true]) });
    await page.click('#generate');
    const { render: r, response } = await runOk(page);
    const body = JSON.parse(await page.locator('#request-json').textContent());
    assert(JSON.stringify(body.window) === '[2,1]', 'request window ' + JSON.stringify(body.window));
    assert(body.return_weights === true, 'return_weights not sent');
    await checkDrawing(page, r, response, (i, j) => j >= i - 2 && j <= i + 1 && j !== 5);
  });

  await test('diagnostics: the per-row table matches the rendered weights, hidden when not asked', async () => {
    await fill(page, { preset: '', B: 1, H: 1, Lq: 5, Lk: 5, D: 8, Dv: 2, seed: 4, causal: 'upper_left',
      valid_lens: '', window_left: '', window_right: '', scale: '', mask: '' });
    await page.check('#diagnostics');
    await page.click('#generate');
    let got;
    try {
      got = await runOk(page);
    } finally {
      await page.uncheck('#diagnostics');
    }
    const { render: r, response } = got;
    const body = JSON.parse(await page.locator('#request-json').textContent());
    assert(body.diagnostics === true, 'diagnostics not requested');
    assert(response.diagnostics, 'the response has no diagnostics');
    assert(await page.locator('#diag-section').isVisible(), 'the diagnostics table is hidden');
    const d = response.diagnostics;
    for (const f of ['allowed_keys', 'entropy', 'max_weight', 'jacobian_norm']) {
      assert(Array.isArray(d[f]) && d[f].length === 1 && d[f][0].length === 5,
        `diagnostics.${f} is not shaped (B, Lq) = (1, 5): ${JSON.stringify(d[f])}`);
    }
    const rows = await page.locator('#diag-wrap tbody tr').allInnerTexts();
    assert(rows.length === 5, `${rows.length} diagnostics rows, want 5`);
    for (let i = 0; i < 5; i++) {
      // causal: row i may attend to keys 0..i
      assert(d.allowed_keys[0][i] === i + 1, `allowed_keys[${i}] = ${d.allowed_keys[0][i]}`);
      const a = r.weights[i];
      const s2 = a.reduce((s, w) => s + w * w, 0);
      const s3 = a.reduce((s, w) => s + w * w * w, 0);
      const want = [i + 1, -a.reduce((s, w) => s + (w > 0 ? w * Math.log(w) : 0), 0), Math.max(...a),
        Math.sqrt(Math.max(0, s2 - 2 * s3 + s2 * s2))];
      const cells = await page.locator('#diag-wrap tbody tr').nth(i).locator('td').allTextContents();
      assert(cells.length === 4, `row ${i}: ${cells.length} cells`);
      ['allowed keys', 'entropy', 'max weight', 'Jacobian norm'].forEach((what, k) => {
        near(Number(cells[k]), want[k], 1e-3 + 1e-3 * Math.abs(want[k]), `${what} of row ${i} in the table`);
      });
    }
    // row 0 sees one key: one-hot, entropy 0, Jacobian norm 0
    assert(d.entropy[0][0] === 0 && d.max_weight[0][0] === 1 && d.jacobian_norm[0][0] === 0,
      'row 0 with one allowed key: ' + JSON.stringify([d.entropy[0][0], d.max_weight[0][0], d.jacobian_norm[0][0]]));
    await runOk(page);
    assert(!(await page.locator('#diag-section').isVisible()), 'diagnostics table shown without diagnostics');
    assert(!('diagnostics' in JSON.parse(await page.locator('#request-json').textContent())),
      'diagnostics sent while unchecked');
  });

  await test('window preset with diagnostics: allowed keys follow the band', async () => {
    await page.selectOption('#preset', 'window');
    await page.waitForFunction(() => window.attndLastRender && window.attndLastRender.Lq === 12 &&
      window.attndLastRender.Lk === 12, null, { timeout: 15000 });
    await page.check('#diagnostics');
    let got;
    try {
      got = await runOk(page);
    } finally {
      await page.uncheck('#diagnostics');
    }
    const { render: r, response } = got;
    const body = JSON.parse(await page.locator('#request-json').textContent());
    assert(JSON.stringify(body.window) === '[3,null]', 'request window ' + JSON.stringify(body.window));
    await checkDrawing(page, r, response, (i, j) => j <= i && j >= i - 3);
    const allowed = response.diagnostics.allowed_keys[0];
    for (let i = 0; i < 12; i++) assert(allowed[i] === Math.min(i + 1, 4), `allowed_keys[${i}] = ${allowed[i]}`);
  });

  await test('saturation preset: unscaled scores give near one-hot rows, a tiny scale near-uniform ones', async () => {
    await page.selectOption('#preset', 'saturation');
    await page.waitForFunction(() => window.attndLastRender && window.attndLastRender.Lk === 64, null,
      { timeout: 15000 });
    let { response } = await runOk(page);
    const hard = response.diagnostics;
    for (let i = 0; i < 4; i++) {
      assert(hard.allowed_keys[0][i] === 64, `allowed_keys[${i}] = ${hard.allowed_keys[0][i]}`);
      assert(hard.entropy[0][i] < 0.5 && hard.max_weight[0][i] > 0.8,
        `row ${i} is not saturated at scale 1: entropy ${hard.entropy[0][i]}, max ${hard.max_weight[0][i]}`);
    }
    await fill(page, { scale: '0.0001' });
    ({ response } = await runOk(page));
    const soft = response.diagnostics;
    const uniformJ = Math.sqrt(1 / 64 - 1 / 64 / 64);
    for (let i = 0; i < 4; i++) {
      near(soft.entropy[0][i], Math.log(64), 1e-3, `entropy of row ${i} at scale 1e-4`);
      near(soft.jacobian_norm[0][i], uniformJ, 1e-3, `Jacobian norm of row ${i} at scale 1e-4`);
      assert(soft.jacobian_norm[0][i] > 2 * hard.jacobian_norm[0][i], `row ${i}: the saturated Jacobian is not smaller`);
    }
    const cells = await page.locator('#diag-wrap tbody tr').nth(0).locator('td').allTextContents();
    near(Number(cells[1]), Math.log(64), 2e-3, 'entropy in the table');
    await page.uncheck('#diagnostics');
  });

  await test('a validation error from the server is shown with its status and message', async () => {
    await fill(page, { preset: '', B: 1, H: 1, Lq: 4, Lk: 6, D: 4, Dv: 2, seed: 2, causal: 'off',
      valid_lens: '9', window_left: '', window_right: '', scale: '', mask: '' });
    await page.click('#generate');
    const text = await runErr(page);
    assert(/HTTP 400/.test(text), 'error text lacks the status: ' + text);
    assert(/valid_lens/.test(text), 'error text does not name the field: ' + text);
    // The previous drawing stays; the error goes away on the next good run.
    await fill(page, { valid_lens: '' });
    await runOk(page);
    assert(!(await page.locator('#error').isVisible()), 'error box still shown after a good run');
    // A mistake the page catches before sending.
    await page.click('#tensors summary');
    await fill(page, { query: '[[1, 2' });
    const local = await runErr(page);
    assert(/query/.test(local) && /JSON/.test(local), 'client-side error: ' + local);
  });

  await test('screenshot: desktop (docs/playground.png)', async () => {
    await page.goto(BASE + '/', { waitUntil: 'load' });
    await page.selectOption('#preset', 'causal8');
    await page.waitForFunction(() => window.attndLastRender && window.attndLastRender.Lq === 8 &&
      window.attndLastRender.drawnCells.length === 36, null, { timeout: 15000 });
    // with the per-row diagnostics table under the output
    await page.check('#diagnostics');
    await runOk(page);
    assert(await page.locator('#diag-section').isVisible(), 'diagnostics table hidden in the screenshot');
    const g = await page.evaluate(() => window.attndLastRender.geometry);
    await page.evaluate(() => window.scrollTo(0, 0));
    const box = await page.locator('#heatmap').boundingBox();
    await page.mouse.move(box.x + g.left + 2.5 * g.cw, box.y + g.top + 5.5 * g.ch);
    await page.locator('#tooltip').waitFor({ state: 'visible' });
    const file = path.join(SHOT_DIR, 'playground.png');
    await page.screenshot({ path: file, fullPage: true });
    assert(fs.statSync(file).size > 10000, 'screenshot too small');
  });

  await test('phone viewport: no horizontal overflow, heatmap fits, screenshot', async () => {
    const phone = await newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2,
      isMobile: true, hasTouch: true });
    await phone.goto(BASE + '/', { waitUntil: 'load' });
    await phone.selectOption('#preset', 'causal8');
    await phone.waitForFunction(() => window.attndLastRender && window.attndLastRender.Lq === 8, null,
      { timeout: 15000 });
    await phone.check('#diagnostics');
    await runOk(phone);
    assert(await phone.locator('#diag-section').isVisible(), 'no diagnostics table on the phone');
    const m = await phone.evaluate(() => ({
      sw: document.documentElement.scrollWidth, iw: window.innerWidth,
      cw: document.getElementById('heatmap').getBoundingClientRect().right,
    }));
    assert(m.sw <= m.iw, `page is ${m.sw}px wide in a ${m.iw}px viewport`);
    assert(m.cw <= m.iw, `heatmap ends at ${m.cw}px in a ${m.iw}px viewport`);
    const r = await phone.evaluate(() => ({ ...window.attndLastRender }));
    await checkDrawing(phone, r, await phone.evaluate(() => window.attndLastResponse), (i, j) => j <= i);
    // A tap shows the tooltip too.
    await phone.locator('#heatmap').scrollIntoViewIfNeeded();
    const box = await phone.locator('#heatmap').boundingBox();
    await phone.touchscreen.tap(box.x + r.geometry.left + 1.5 * r.geometry.cw, box.y + r.geometry.top + 6.5 * r.geometry.ch);
    await phone.locator('#tooltip').waitFor({ state: 'visible', timeout: 3000 });
    assert((await phone.locator('#tooltip').textContent()).includes('(6, 1)'), 'tap tooltip');
    await phone.locator('#results-title').scrollIntoViewIfNeeded();
    await phone.screenshot({ path: path.join(SHOT_DIR, 'playground-phone.png'), fullPage: true });
    await phone.context().close();
  });

  await test('behind a path prefix: the page, its assets and its requests stay under it', async () => {
    const proxy = await prefixProxy('/attnd');
    const p = await newPage({ viewport: { width: 1280, height: 900 } });
    try {
      await p.goto(proxy.url, { waitUntil: 'load' });
      assert((await p.title()) === 'attnd playground', 'title: ' + (await p.title()));
      const sheets = await p.evaluate(() => document.styleSheets.length &&
        document.styleSheets[0].cssRules.length);
      assert(sheets > 0, 'style.css did not load through the prefix');
      // every link resolves under the prefix, and answers there
      const links = await p.evaluate(() => [...document.querySelectorAll('a[href], link[href], script[src]')]
        .map((el) => el.href || el.src).filter((u) => !u.startsWith('data:')));
      assert(links.length >= 5, 'links: ' + links.join(', '));
      for (const u of links) {
        assert(u.startsWith(proxy.url), `${u} is outside ${proxy.url}`);
        const res = await fetch(u);
        assert(res.status === 200, `GET ${u}: status ${res.status}`);
      }
      await fill(p, { preset: '', B: 1, H: 1, Lq: 4, Lk: 4, D: 4, Dv: 2, seed: 3, causal: 'upper_left',
        valid_lens: '', window_left: '', window_right: '', scale: '', mask: '' });
      await p.click('#generate');
      const { render: r } = await runOk(p);
      assert(r.Lq === 4 && r.Lk === 4 && r.weights[0][1] === 0, 'render through the prefix');
      const outside = proxy.seen.filter((u) => !u.startsWith('/attnd/'));
      assert(outside.length === 0, 'asked outside the prefix: ' + outside.join(', '));
      assert(proxy.seen.includes('/attnd/v1/attention'), 'no POST through the prefix: ' +
        proxy.seen.join(', '));
    } finally {
      await p.context().close();
      await proxy.close();
    }
  });

  await test('sinks preset: each row\'s sink mass is drawn in a sink column, the keys get the rest', async () => {
    await page.goto(BASE + '/', { waitUntil: 'load' });
    const { render: r, request: req } = await runPreset(page, 'sinks');
    assert(req.sinks.length === 4 && req.return_lse === true, 'request: ' + JSON.stringify(req.sinks));
    assert(r.sinkMass && r.sinkMass.length === r.Lq, 'no sink column');
    await checkHeads(page, req, 4);
    // the sink column's pixels are its mass on the colour scale
    const px = await page.evaluate(() => {
      const r = window.attndLastRender, g = r.geometry;
      const canvas = document.getElementById('heatmap');
      const img = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
      return r.sinkMass.map((m, i) => {
        const x = Math.floor((g.sinkX + g.sinkW / 2) * g.dpr), y = Math.floor((g.top + (i + 0.5) * g.ch) * g.dpr);
        const k = 4 * (y * img.width + x);
        return { got: [img.data[k], img.data[k + 1], img.data[k + 2]], want: r.colourOf(m) };
      });
    });
    for (const [i, p] of px.entries()) assert(sameRgb(p.got, p.want, 3), `sink cell ${i}: ${p.got} vs ${p.want}`);
    // head 3's sink (4) stands above every score: it takes most of row 0
    await page.selectOption('#sel-head', '3');
    const m3 = await page.evaluate(() => window.attndLastRender.sinkMass);
    assert(m3[0] > 0.5, 'head 3 sink mass ' + m3[0]);
    const lse = await page.locator('#lse-wrap tbody tr').count();
    assert(lse === 8, `lse table has ${lse} rows`);
    // the tooltip names the sink
    const g = await page.evaluate(() => window.attndLastRender.geometry);
    const box = await page.locator('#heatmap').boundingBox();
    await page.mouse.move(box.x + g.sinkX + g.sinkW / 2, box.y + g.top + 0.5 * g.ch);
    await page.locator('#tooltip').waitFor({ state: 'visible' });
    assert((await page.locator('#tooltip').textContent()).includes('sink'), 'sink tooltip');
    await page.selectOption('#sel-head', '0');
  });

  await test('softcap and ALiBi presets: weights match a float64 reference, every head', async () => {
    let { request: req } = await runPreset(page, 'softcap');
    assert(req.softcap === 3 && req.scale === 1, 'softcap request');
    await checkHeads(page, req, 1);
    ({ request: req } = await runPreset(page, 'alibi'));
    assert(req.alibi_slopes.length === 4, 'alibi request');
    await checkHeads(page, req, 4);
    const r = await page.evaluate(() => window.attndLastRender);
    assert(r.sinkMass === null, 'a sink column without sinks');
  });

  await test('packed preset: zeros across sequences stay blank, each sequence is outlined', async () => {
    const { render: r, response, request: req } = await runPreset(page, 'packed');
    assert(req.cu_seqlens_q.length === 4, 'packed request');
    assert(JSON.stringify(r.seqBlocks) === JSON.stringify([[0, 3, 0, 4], [3, 7, 4, 8], [7, 10, 8, 12]]),
      'blocks ' + JSON.stringify(r.seqBlocks));
    const seqOf = (i) => (i < 3 ? 0 : i < 7 ? 1 : 2);
    const cq = req.cu_seqlens_q, ck = req.cu_seqlens_k;
    const allowed = (i, j) => {
      const n = seqOf(i);
      if (j < ck[n] || j >= ck[n + 1]) return false;
      const il = i - cq[n], jl = j - ck[n];
      return jl <= il + (ck[n + 1] - ck[n]) - (cq[n + 1] - cq[n]);
    };
    const full = await page.evaluate(() => ({ ...window.attndLastRender }));
    await checkDrawing(page, full, response, allowed);
    await checkHeads(page, req, 1);
    assert(Array.isArray(response.lse) && response.lse[0].length === 10, 'lse in the response');
  });

  await test('gpt-oss preset: window [3, 0] with causal shows 4 keys a row, and a sink', async () => {
    const { render: r, response, request: req } = await runPreset(page, 'gptoss');
    assert(JSON.stringify(req.window) === '[3,0]' && req.causal === true, 'gpt-oss request');
    const allowed = response.diagnostics.allowed_keys[0][0];
    assert(JSON.stringify(allowed) === JSON.stringify([1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4]),
      'allowed keys ' + allowed);
    for (let i = 0; i < r.Lq; i++) {
      for (let j = 0; j < r.Lk; j++) {
        const inBand = j <= i && j >= i - 3;
        assert((r.weights[i][j] > 0) === inBand, `cell (${i}, ${j}) ${r.weights[i][j]}`);
      }
    }
    await checkHeads(page, req, 4);
  });

  await test('a bad packing is the server\'s 400, naming the field', async () => {
    await fill(page, { cu_seqlens_q: '0, 7, 3, 12', cu_seqlens_k: '0, 4, 8, 12' });
    const text = await runErr(page);
    assert(/HTTP 400/.test(text) && /cu_seqlens_q\[2\]=3 is less than/.test(text), 'error: ' + text);
    await fill(page, { cu_seqlens_q: '', cu_seqlens_k: '' });
  });

  await test('no script errors during the run', async () => {
    assert(pageErrors.length === 0, 'errors: ' + pageErrors.join('; '));
  });
} finally {
  await browser.close();
}

const passed = results.filter((r) => r.ok).length;
const failed = results.length - passed;
console.log(`browser: ${passed} passed, ${failed} failed`);
if (process.env.ATTND_BROWSER_RESULT) fs.writeFileSync(process.env.ATTND_BROWSER_RESULT, `${passed} ${failed}\n`);
process.exit(failed === 0 ? 0 : 1);
