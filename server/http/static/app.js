/* attnd playground: builds a POST /v1/attention request, sends it to the
 * server that served this page, and draws the returned attention weights.
 * Plain browser JavaScript, no dependencies.
 *
 * For automated checks the last drawing is exposed as
 * window.attndLastRender (see publishRender below) and as data-* attributes
 * on the heatmap canvas; window.attndLastResponse holds the parsed response.
 */
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);

  // Random tensors, the wire forms, number text, colours: tensors.js.
  const {
    gaussianSource, randomNested, toFlat, shapeText, formatNested, fmt,
    colour, EMPTY_BG, CANVAS_BG, rgb,
  } = window.attndTensors;

  // ---------------------------------------------------------------- state

  const state = {
    response: null,   // parsed JSON of the last successful response
    weights: null,    // {B, H, Lq, Lk, data}
    output: null,     // {B, H, Lq, Dv, data}
    diag: null,       // {name: {data}} per diagnostics field, or null
    lse: null,        // {B, H, L: 1, X: Lq, data} (null for -inf), or null
    sinks: null,      // the request's sinks (one per head), or null
    seqs: null,       // {q: cu_seqlens_q, k: cu_seqlens_k}, or null
    geom: null,       // heatmap geometry of the last drawing
    focus: null,      // [i, j] cell chosen with the keyboard
    runs: 0,
  };

  // Views a (B, [H,] L, X) tensor as 4-D.
  function as4d(t, what) {
    const s = t.shape;
    if (s.length === 4) return { B: s[0], H: s[1], L: s[2], X: s[3], data: t.data };
    if (s.length === 3) return { B: s[0], H: 1, L: s[1], X: s[2], data: t.data };
    if (s.length === 2) return { B: 1, H: 1, L: s[0], X: s[1], data: t.data };
    throw new Error(what + ': unexpected shape ' + shapeText(s));
  }

  // ---------------------------------------------------------------- request

  function readJson(id, label, optional) {
    const text = $(id).value.trim();
    if (text === '') {
      if (optional) return undefined;
      throw new Error(label + ': empty (paste JSON or press "Generate random")');
    }
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new Error(label + ': not valid JSON (' + e.message + ')');
    }
  }

  function readValidLens() {
    const text = $('valid_lens').value.trim();
    if (text === '') return undefined;
    if (text[0] === '[' || text[0] === '{') {
      try { return JSON.parse(text); } catch (e) {
        throw new Error('valid_lens: not valid JSON (' + e.message + ')');
      }
    }
    return text.split(/[\s,]+/).filter((s) => s !== '').map((s) => {
      const n = Number(s);
      if (!Number.isFinite(n)) throw new Error('valid_lens: "' + s + '" is not a number');
      return n;
    });
  }

  // A list of numbers typed as "0.5, -1" or as JSON; undefined when blank.
  function readNumbers(id, label) {
    const text = $(id).value.trim();
    if (text === '') return undefined;
    if (text[0] === '[') {
      try { return JSON.parse(text); } catch (e) {
        throw new Error(label + ': not valid JSON (' + e.message + ')');
      }
    }
    return text.split(/[\s,]+/).filter((x) => x !== '').map((x) => {
      const n = Number(x);
      if (!Number.isFinite(n)) throw new Error(label + ': "' + x + '" is not a number');
      return n;
    });
  }

  function readWindowSide(id) {
    const text = $(id).value.trim();
    if (text === '') return null;
    const n = Number(text);
    if (!Number.isFinite(n)) throw new Error('window ' + id.replace('window_', '') + ': "' + text + '" is not a number');
    return n;
  }

  // The request body exactly as design.md names the fields.
  function buildRequest() {
    const req = {
      query: readJson('query', 'query'),
      key: readJson('key', 'key'),
      value: readJson('value', 'value'),
    };
    const vl = readValidLens();
    if (vl !== undefined) req.valid_lens = vl;
    const causal = $('causal').value;
    if (causal === 'upper_left') req.causal = true;
    else if (causal === 'lower_right') req.causal = 'lower_right';
    const left = readWindowSide('window_left');
    const right = readWindowSide('window_right');
    if (left !== null || right !== null) req.window = [left, right];
    if ($('window_align').value === 'lower_right') req.window_align = 'lower_right';
    const sinks = readNumbers('sinks', 'sinks');
    if (sinks !== undefined) req.sinks = sinks;
    if ($('precision').value === 'bf16') req.precision = 'bf16';
    const capText = $('softcap').value.trim();
    if (capText !== '') {
      const c = Number(capText);
      if (!Number.isFinite(c)) throw new Error('softcap: "' + capText + '" is not a number');
      req.softcap = c;
    }
    const slopes = readNumbers('alibi_slopes', 'alibi_slopes');
    if (slopes !== undefined) req.alibi_slopes = slopes;
    const cuq = readNumbers('cu_seqlens_q', 'cu_seqlens_q');
    const cuk = readNumbers('cu_seqlens_k', 'cu_seqlens_k');
    if (cuq !== undefined) req.cu_seqlens_q = cuq;
    if (cuk !== undefined) req.cu_seqlens_k = cuk;
    // the sink column is drawn from the lse: mass = exp(sink - lse)
    if ($('return_lse').checked || sinks !== undefined) req.return_lse = true;
    const scaleText = $('scale').value.trim();
    if (scaleText !== '') {
      const s = Number(scaleText);
      if (!Number.isFinite(s)) throw new Error('scale: "' + scaleText + '" is not a number');
      req.scale = s;
    }
    const mask = readJson('mask', 'mask', true);
    if (mask !== undefined) req.mask = mask;
    req.return_weights = true;
    if ($('diagnostics').checked) req.diagnostics = true;
    req.id = 'playground-' + (state.runs + 1);
    return req;
  }

  // ---------------------------------------------------------------- ui bits

  function showError(msg) {
    const box = $('error');
    box.textContent = msg;
    box.hidden = false;
  }
  function clearError() {
    const box = $('error');
    box.textContent = '';
    box.hidden = true;
  }
  function setStatus(msg) { $('status').textContent = msg; }

  function intField(id, lo, hi) {
    const v = Number($(id).value);
    if (!Number.isInteger(v) || v < lo || v > hi) {
      throw new Error(id + ': must be an integer in [' + lo + ', ' + hi + ']');
    }
    return v;
  }

  function updateShapeLabels() {
    const parts = [];
    for (const id of ['query', 'key', 'value']) {
      const el = $(id + '-shape');
      const text = $(id).value.trim();
      if (text === '') el.textContent = '(empty)';
      else {
        try {
          el.textContent = shapeText(toFlat(JSON.parse(text), id).shape);
        } catch (e) {
          el.textContent = '(not valid JSON)';
        }
      }
      parts.push(id + ' ' + el.textContent);
    }
    $('tensor-summary').textContent = parts.join(' · ');
  }

  function generate() {
    const B = intField('B', 1, 64), H = intField('H', 1, 64);
    const Lq = intField('Lq', 1, 4096), Lk = intField('Lk', 1, 4096);
    const D = intField('D', 1, 4096), Dv = intField('Dv', 1, 4096);
    const seed = Number($('seed').value) || 0;
    const next = gaussianSource(seed);
    const lead = H > 1 ? [B, H] : [B];
    $('query').value = formatNested(randomNested(next, lead.concat([Lq, D])));
    $('key').value = formatNested(randomNested(next, lead.concat([Lk, D])));
    $('value').value = formatNested(randomNested(next, lead.concat([Lk, Dv])));
    updateShapeLabels();
  }

  // ---------------------------------------------------------------- presets

  function setShape(B, H, Lq, Lk, D, Dv) {
    $('B').value = B; $('H').value = H; $('Lq').value = Lq;
    $('Lk').value = Lk; $('D').value = D; $('Dv').value = Dv;
  }
  function setMasking(o) {
    $('valid_lens').value = o.valid_lens || '';
    $('causal').value = o.causal || 'off';
    $('window_left').value = o.left === undefined ? '' : o.left;
    $('window_right').value = o.right === undefined ? '' : o.right;
    $('scale').value = o.scale === undefined ? '' : o.scale;
    $('mask').value = o.mask || '';
    $('diagnostics').checked = !!o.diagnostics;
    $('window_align').value = o.align || 'upper_left';
    $('sinks').value = o.sinks || '';
    $('softcap').value = o.softcap === undefined ? '' : o.softcap;
    $('precision').value = o.precision || 'fp32';
    $('alibi_slopes').value = o.alibi || '';
    $('cu_seqlens_q').value = o.cuq || '';
    $('cu_seqlens_k').value = o.cuk || '';
    $('return_lse').checked = !!o.lse;
  }

  const PRESETS = {
    d2l() {
      setShape(1, 1, 2, 3, 2, 2);
      setMasking({});
      $('query').value = formatNested([[[1, 0], [0, 2]]]);
      $('key').value = formatNested([[[1, 1], [2, 0], [0, 3]]]);
      $('value').value = formatNested([[[1, 0], [0, 1], [1, 1]]]);
      updateShapeLabels();
    },
    causal8() { setShape(1, 1, 8, 8, 16, 8); setMasking({ causal: 'upper_left' }); generate(); },
    padding() { setShape(2, 1, 4, 6, 8, 4); setMasking({ valid_lens: '3, 5' }); generate(); },
    perquery() { setShape(2, 1, 2, 4, 8, 4); setMasking({ valid_lens: '[[1, 3], [2, 4]]' }); generate(); },
    kvcache() { setShape(1, 1, 3, 8, 8, 4); setMasking({ causal: 'lower_right' }); generate(); },
    window() { setShape(1, 1, 12, 12, 8, 4); setMasking({ causal: 'upper_left', left: 3 }); generate(); },
    mask() {
      setShape(1, 1, 4, 6, 8, 4);
      setMasking({
        mask: formatNested([
          [true, true, false, true, false, true],
          [false, true, true, true, true, false],
          [false, false, false, false, false, false],
          [true, false, false, false, false, true],
        ]),
      });
      generate();
    },
    heads() { setShape(2, 4, 6, 6, 8, 4); setMasking({ causal: 'upper_left' }); generate(); },
    saturation() { setShape(1, 1, 4, 64, 256, 4); setMasking({ scale: '1', diagnostics: true }); generate(); },
    // head 3's sink stands far above the scores and takes most of each row
    sinks() { setShape(1, 4, 8, 8, 8, 4); setMasking({ causal: 'upper_left', sinks: '-2, 0, 1, 4' }); generate(); },
    // unscaled scores of D = 64 reach +-20; a cap of 3 flattens the rows
    softcap() { setShape(1, 1, 10, 10, 64, 4); setMasking({ scale: '1', softcap: 3, lse: true }); generate(); },
    alibi() {
      setShape(1, 4, 10, 10, 8, 4);
      setMasking({ causal: 'upper_left', alibi: '0.5, 0.25, 0.125, 0.0625' });
      generate();
    },
    packed() {
      setShape(1, 1, 10, 12, 8, 4);
      setMasking({ causal: 'lower_right', cuq: '0, 3, 7, 10', cuk: '0, 4, 8, 12', lse: true });
      generate();
    },
    gptoss() {
      setShape(1, 4, 12, 12, 8, 4);
      setMasking({ causal: 'upper_left', left: 3, right: 0, sinks: '0.5, 1, 1.5, 2', diagnostics: true });
      generate();
    },
  };

  // ---------------------------------------------------------------- heatmap

  function selected() {
    return { b: Number($('sel-batch').value) || 0, h: Number($('sel-head').value) || 0 };
  }

  function fillSelect(sel, n) {
    const keep = Number(sel.value) || 0;
    sel.textContent = '';
    for (let i = 0; i < n; i++) {
      const o = document.createElement('option');
      o.value = String(i);
      o.textContent = String(i);
      sel.appendChild(o);
    }
    sel.value = String(keep < n ? keep : 0);
    sel.disabled = n <= 1;
  }

  function sliceOffset(t, b, h, rowLen) { return ((b * t.H) + h) * t.L * rowLen; }

  function drawHeatmap() {
    const canvas = $('heatmap');
    const w = state.weights;
    if (!w) return;
    const { b, h } = selected();
    const Lq = w.L, Lk = w.X;
    const off = sliceOffset(w, b, h, Lk);

    let max = 0;
    for (let k = 0; k < Lq * Lk; k++) if (w.data[off + k] > max) max = w.data[off + k];
    // The sink's share of each row, exp(sink - lse), in a column of its
    // own right of the keys, on the same colour scale.
    const sinkMass = sinkColumn(b, h, Lq);
    if (sinkMass) for (const m of sinkMass) if (m > max) max = m;
    const scaleMax = max > 0 ? max : 1;

    // Geometry: margins for the tick labels and axis titles.
    const ctx0 = canvas.getContext('2d');
    ctx0.font = '12px system-ui, sans-serif';
    const labelW = Math.ceil(ctx0.measureText(String(Lq - 1)).width);
    const left = 22 + labelW + 6, top = 6, bottom = 36;
    const right = sinkMass ? 40 : 6;   // room for the sink column
    const avail = Math.max(60, $('heatmap-wrap').clientWidth - left - right);
    const maxH = Math.max(160, Math.min(560, window.innerHeight * 0.7));
    // Square cells when they fit; a few queries against many keys get
    // taller rows (up to 24 px) so that the rows stay readable.
    let cw = Math.min(avail / Lk, maxH / Lq, 56);
    if (cw >= 2) cw = Math.floor(cw);
    let ch = Math.max(cw, Math.min(maxH / Lq, 24));
    if (ch >= 2) ch = Math.floor(ch);
    const gap = Math.min(cw, ch) >= 10 ? 1 : 0;
    const sinkX = left + Lk * cw + 8;  // the sink column's left edge
    const cssW = Math.ceil(left + Lk * cw + (sinkMass ? 8 + Math.max(cw, 12) + 6 : right));
    const cssH = Math.ceil(top + Lq * ch + bottom);
    const dpr = window.devicePixelRatio || 1;
    canvas.style.width = cssW + 'px';
    canvas.style.height = cssH + 'px';
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);

    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = rgb(CANVAS_BG);
    ctx.fillRect(0, 0, cssW, cssH);
    ctx.fillStyle = rgb(EMPTY_BG);
    ctx.fillRect(left, top, Lk * cw, Lq * ch);

    const drawn = new Uint8Array(Lq * Lk);
    const drawnCells = [];
    const rows = [];
    for (let i = 0; i < Lq; i++) {
      const row = new Array(Lk);
      for (let j = 0; j < Lk; j++) {
        const v = w.data[off + i * Lk + j];
        row[j] = v;
        if (v === 0) continue;          // exactly 0: masked, left blank
        ctx.fillStyle = rgb(colour(v / scaleMax));
        ctx.fillRect(left + j * cw, top + i * ch, cw - gap, ch - gap);
        drawn[i * Lk + j] = 1;
        drawnCells.push([i, j]);
      }
      rows.push(row);
    }

    // The sink column, blank where the sink takes nothing.
    const sinkW = Math.max(cw, 12);
    if (sinkMass) {
      ctx.fillStyle = rgb(EMPTY_BG);
      ctx.fillRect(sinkX, top, sinkW, Lq * ch);
      for (let i = 0; i < Lq; i++) {
        if (!(sinkMass[i] > 0)) continue;
        ctx.fillStyle = rgb(colour(sinkMass[i] / scaleMax));
        ctx.fillRect(sinkX, top + i * ch, sinkW - gap, ch - gap);
      }
    }

    // Frame, tick labels and axis titles.
    ctx.strokeStyle = '#c9ced6';
    ctx.lineWidth = 1;
    ctx.strokeRect(left - 0.5, top - 0.5, Lk * cw + 1 - gap, Lq * ch + 1 - gap);
    // Packed sequences: each sequence's block of queries and keys outlined.
    const blocks = seqBlocks(Lq, Lk);
    if (blocks) {
      ctx.strokeStyle = '#d6604d';
      ctx.lineWidth = 2;
      for (const [q0, q1, k0, k1] of blocks) {
        if (q1 > q0 && k1 > k0) ctx.strokeRect(left + k0 * cw, top + q0 * ch, (k1 - k0) * cw - gap, (q1 - q0) * ch - gap);
      }
      ctx.lineWidth = 1;
    }
    ctx.fillStyle = '#3b4350';
    ctx.font = '12px system-ui, sans-serif';
    const rowStep = Math.max(1, Math.ceil(14 / ch));
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (let i = 0; i < Lq; i += rowStep) {
      ctx.fillText(String(i), left - 5, top + (i + 0.5) * ch);
    }
    const colStep = Math.max(1, Math.ceil((ctx.measureText(String(Lk - 1)).width + 8) / cw));
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    for (let j = 0; j < Lk; j += colStep) {
      ctx.fillText(String(j), left + (j + 0.5) * cw, top + Lq * ch + 3);
    }
    ctx.font = '600 12px system-ui, sans-serif';
    ctx.fillText('keys j', left + (Lk * cw) / 2, top + Lq * ch + 19);
    if (sinkMass) ctx.fillText('sink', sinkX + sinkW / 2, top + Lq * ch + 3);
    ctx.save();
    ctx.translate(10, top + (Lq * ch) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = 'middle';
    ctx.fillText('queries i', 0, 0);
    ctx.restore();

    state.geom = { left, top, cw, ch, gap, dpr, Lq, Lk, off, max, sinkX: sinkMass ? sinkX : null, sinkW, sinkMass };
    drawLegend(max);
    placeFocus();
    publishRender(b, h, rows, drawn, drawnCells, max, sinkMass, blocks);
    canvas.setAttribute('aria-label', 'Attention weights of batch item ' + b + ', head ' + h +
      ': ' + Lq + ' queries by ' + Lk + ' keys, ' + drawnCells.length + ' non-zero cells, max ' + fmt(max));
  }

  // The sink's probability mass per query row of (b, h): exp(sink - lse),
  // or null without sinks (or without the lse to compute it from).
  function sinkColumn(b, h, Lq) {
    if (!state.sinks || !state.lse) return null;
    const s = state.sinks[h];
    const t = state.lse;
    const out = new Array(Lq);
    for (let i = 0; i < Lq; i++) {
      const l = t.data[((b * t.H) + h) * t.X + i];
      out[i] = l === null ? 0 : Math.exp(s - l);
    }
    return out;
  }

  // [q0, q1, k0, k1] of each packed sequence, or null when not packed.
  function seqBlocks(Lq, Lk) {
    const s = state.seqs;
    if (!s || !Array.isArray(s.q) || !Array.isArray(s.k) || s.q.length !== s.k.length) return null;
    const out = [];
    for (let n = 0; n + 1 < s.q.length; n++) out.push([s.q[n], s.q[n + 1], s.k[n], s.k[n + 1]]);
    return out;
  }

  // What the page drew, for tests and for anyone curious in the console.
  function publishRender(b, h, rows, drawn, drawnCells, max, sinkMass, blocks) {
    const g = state.geom;
    const canvas = $('heatmap');
    window.attndLastRender = {
      run: state.runs,
      batch: b,
      head: h,
      Lq: g.Lq,
      Lk: g.Lk,
      max,
      weights: rows,                 // [Lq][Lk] of this (batch, head)
      drawnCells,                    // [[i, j], ...] cells filled with a colour
      isDrawn: (i, j) => drawn[i * g.Lk + j] === 1,
      // Cell (i, j) covers CSS pixels [left + j*cw, +cw) x [top + i*ch, +ch)
      // of the canvas; the canvas backing store is dpr times larger.
      geometry: { left: g.left, top: g.top, cw: g.cw, ch: g.ch, gap: g.gap, dpr: g.dpr, sinkX: g.sinkX, sinkW: g.sinkW },
      sinkMass: sinkMass ? sinkMass.slice() : null,   // [Lq], or null: no sink column
      seqBlocks: blocks,             // [[q0, q1, k0, k1], ...] outlined, or null
      emptyColour: EMPTY_BG.slice(),
      colourOf: (v) => colour(v / (max > 0 ? max : 1)),
    };
    canvas.dataset.run = String(state.runs);
    canvas.dataset.batch = String(b);
    canvas.dataset.head = String(h);
    canvas.dataset.lq = String(g.Lq);
    canvas.dataset.lk = String(g.Lk);
    canvas.dataset.drawnCount = String(drawnCells.length);
  }

  function drawLegend(max) {
    const c = $('legend');
    const ctx = c.getContext('2d');
    for (let x = 0; x < c.width; x++) {
      ctx.fillStyle = rgb(colour(x / (c.width - 1)));
      ctx.fillRect(x, 0, 1, c.height);
    }
    $('legend-min').textContent = '0';
    $('legend-max').textContent = fmt(max);
  }

  function cellAt(clientX, clientY) {
    const g = state.geom;
    if (!g) return null;
    const r = $('heatmap').getBoundingClientRect();
    const x = clientX - r.left - g.left, y = clientY - r.top - g.top;
    if (x < 0 || y < 0) return null;
    const i = Math.floor(y / g.ch);
    if (i >= g.Lq) return null;
    // the sink column answers as j = Lk
    if (g.sinkX !== null && clientX - r.left >= g.sinkX && clientX - r.left < g.sinkX + g.sinkW) return [i, g.Lk];
    const j = Math.floor(x / g.cw);
    if (j >= g.Lk) return null;
    return [i, j];
  }

  function showTooltip(i, j) {
    const g = state.geom;
    const sink = j === g.Lk;
    const v = sink ? g.sinkMass[i] : state.weights.data[g.off + i * g.Lk + j];
    const tip = $('tooltip');
    tip.textContent = sink ? '(i, sink) = (' + i + ')  the sink takes ' + fmt(v)
      : '(i, j) = (' + i + ', ' + j + ')  weight ' + (v === 0 ? '0 (blank)' : fmt(v));
    tip.dataset.i = String(i);
    tip.dataset.j = String(j);
    tip.dataset.weight = String(v);
    tip.hidden = false;
    const wrap = $('heatmap-wrap');
    const canvas = $('heatmap');
    // Right of the cell, else left of it, else above it (narrow screens).
    const cx = canvas.offsetLeft + (sink ? g.sinkX : g.left + j * g.cw), cy = canvas.offsetTop + g.top + i * g.ch;
    const tw = tip.offsetWidth, th = tip.offsetHeight;
    const lo = wrap.scrollLeft, hi = wrap.scrollLeft + wrap.clientWidth;
    let x = cx + g.cw + 6, y = cy - 4;
    if (x + tw > hi) {
      x = cx - tw - 6;
      if (x < lo) {
        x = Math.max(lo + 2, Math.min(hi - tw - 2, cx + g.cw / 2 - tw / 2));
        y = cy - th - 6;
        if (y < 0) y = cy + g.ch + 6;
      }
    }
    if (y < 0) y = 0;
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }
  function hideTooltip() { $('tooltip').hidden = true; }

  function placeFocus() {
    const hl = $('cell-focus');
    const g = state.geom;
    if (!state.focus || !g || state.focus[0] >= g.Lq || state.focus[1] >= g.Lk) {
      hl.hidden = true;
      return;
    }
    const [i, j] = state.focus;
    const canvas = $('heatmap');
    hl.style.left = (canvas.offsetLeft + g.left + j * g.cw - 2) + 'px';
    hl.style.top = (canvas.offsetTop + g.top + i * g.ch - 2) + 'px';
    hl.style.width = (g.cw + 3 - g.gap) + 'px';
    hl.style.height = (g.ch + 3 - g.gap) + 'px';
    hl.hidden = false;
    showTooltip(i, j);
  }

  // ---------------------------------------------------------------- tables

  function table(headers, rows, caption) {
    const t = document.createElement('table');
    if (caption) {
      const c = document.createElement('caption');
      c.textContent = caption;
      t.appendChild(c);
    }
    const thead = document.createElement('thead');
    const tr = document.createElement('tr');
    for (const h of headers) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.textContent = h;
      tr.appendChild(th);
    }
    thead.appendChild(tr);
    t.appendChild(thead);
    const tbody = document.createElement('tbody');
    for (const row of rows) {
      const r = document.createElement('tr');
      row.forEach((cell, k) => {
        const td = document.createElement(k === 0 ? 'th' : 'td');
        if (k === 0) td.scope = 'row';
        if (cell && typeof cell === 'object') {
          td.textContent = cell.text;
          if (cell.background) td.style.background = cell.background;
        } else {
          td.textContent = cell;
        }
        r.appendChild(td);
      });
      tbody.appendChild(r);
    }
    t.appendChild(tbody);
    return t;
  }

  const MAX_ROWS = 128, MAX_COLS = 24;

  function drawOutput() {
    const wrap = $('output-wrap');
    wrap.textContent = '';
    const o = state.output;
    if (!o) return;
    const { b, h } = selected();
    const off = sliceOffset(o, b, h, o.X);
    const rows = Math.min(o.L, MAX_ROWS), cols = Math.min(o.X, MAX_COLS);
    let maxAbs = 0;
    for (let k = 0; k < o.L * o.X; k++) maxAbs = Math.max(maxAbs, Math.abs(o.data[off + k]));
    const headers = ['i \\ v'];
    for (let c = 0; c < cols; c++) headers.push(String(c));
    const body = [];
    for (let i = 0; i < rows; i++) {
      const r = [String(i)];
      for (let c = 0; c < cols; c++) {
        const v = o.data[off + i * o.X + c];
        const a = maxAbs > 0 ? (0.45 * Math.abs(v)) / maxAbs : 0;
        const tint = v >= 0 ? 'rgba(33,144,141,' + a.toFixed(3) + ')' : 'rgba(214,96,77,' + a.toFixed(3) + ')';
        r.push({ text: fmt(v), background: tint });
      }
      body.push(r);
    }
    let caption = 'output[' + b + (o.H > 1 || state.weights && state.weights.H > 1 ? ', ' + h : '') +
      '] — ' + o.L + ' queries x ' + o.X + ' value dims';
    if (rows < o.L || cols < o.X) caption += ' (first ' + rows + ' x ' + cols + ' shown)';
    wrap.appendChild(table(headers, body, caption));
  }

  const DIAG_FIELDS = [
    ['allowed_keys', 'allowed keys'],
    ['entropy', 'entropy (nats)'],
    ['max_weight', 'max weight'],
    ['jacobian_norm', 'Jacobian norm'],
  ];

  function drawDiagnostics() {
    const sec = $('diag-section');
    const wrap = $('diag-wrap');
    wrap.textContent = '';
    const d = state.diag;
    if (!d) { sec.hidden = true; return; }
    const { b, h } = selected();
    const names = DIAG_FIELDS.filter(([f]) => d[f]);
    const any = d[names[0][0]];
    const n = Math.min(any.L * any.X, MAX_ROWS * 4);
    const body = [];
    for (let i = 0; i < n; i++) {
      const r = [String(i)];
      for (const [f] of names) {
        const t = d[f];
        r.push(fmt(t.data[((b * t.H) + h) * t.L * t.X + i]));
      }
      body.push(r);
    }
    wrap.appendChild(table(['query i'].concat(names.map(([, label]) => label)), body,
      'per query row of batch item ' + b + ', head ' + h));
    sec.hidden = false;
  }

  // Diagnostics fields are shaped like the output without its last axis:
  // (B, [H,] Lq).  View each as (B, H, 1, Lq) through as4d's rank rules.
  function readDiagnostics(resp, qrank) {
    const src = resp.diagnostics;
    if (!src || typeof src !== 'object') return null;
    const out = {};
    let found = false;
    for (const [f] of DIAG_FIELDS) {
      if (src[f] === undefined) continue;
      const t = toFlat(src[f], 'diagnostics.' + f);
      const s = t.shape;
      if (qrank === 4 && s.length === 3) out[f] = { B: s[0], H: s[1], L: 1, X: s[2], data: t.data };
      else if (s.length === 2) out[f] = { B: s[0], H: 1, L: 1, X: s[1], data: t.data };
      else if (s.length === 1) out[f] = { B: 1, H: 1, L: 1, X: s[0], data: t.data };
      else throw new Error('diagnostics.' + f + ': unexpected shape ' + shapeText(s));
      found = true;
    }
    return found ? out : null;
  }

  // The rows' log-sum-exp (and, with sinks, the sink's share of each row).
  function drawLse() {
    const sec = $('lse-section');
    const wrap = $('lse-wrap');
    wrap.textContent = '';
    const t = state.lse;
    if (!t) { sec.hidden = true; return; }
    const { b, h } = selected();
    const n = Math.min(t.X, MAX_ROWS * 4);
    const mass = sinkColumn(b, h, t.X);
    const body = [];
    for (let i = 0; i < n; i++) {
      const l = t.data[((b * t.H) + h) * t.X + i];
      const r = [String(i), l === null ? '\u2212\u221e (nothing allowed)' : fmt(l)];
      if (mass) r.push(fmt(mass[i]));
      body.push(r);
    }
    const headers = ['query i', 'lse'].concat(mass ? ['sink takes'] : []);
    wrap.appendChild(table(headers, body, 'per query row of batch item ' + b + ', head ' + h));
    sec.hidden = false;
  }

  // The lse is shaped like the output without its last axis, (B, [H,] Lq),
  // with null for -inf.  View it as (B, H, 1, Lq).
  function readLse(resp, qrank) {
    if (resp.lse === undefined) return null;
    const t = toFlat(resp.lse, 'lse');
    const s = t.shape;
    if (qrank === 4 && s.length === 3) return { B: s[0], H: s[1], L: 1, X: s[2], data: t.data };
    if (s.length === 2) return { B: s[0], H: 1, L: 1, X: s[1], data: t.data };
    throw new Error('lse: unexpected shape ' + shapeText(s));
  }

  function redraw() {
    hideTooltip();
    drawHeatmap();
    drawOutput();
    drawLse();
    drawDiagnostics();
  }

  // ---------------------------------------------------------------- run

  async function run() {
    clearError();
    let req;
    try {
      req = buildRequest();
    } catch (e) {
      showError('Not sent: ' + e.message);
      setStatus('');
      return;
    }
    const body = JSON.stringify(req);
    $('request-json').textContent = body.length > 20000 ? body.slice(0, 20000) + ' …' : body;
    const btn = $('run');
    btn.disabled = true;
    setStatus('running…');
    const t0 = performance.now();
    let res, text;
    try {
      const headers = { 'Content-Type': 'application/json' };
      const token = $('token').value.trim();
      if (token) headers.Authorization = 'Bearer ' + token;
      // relative, so that the page works behind a proxy's path prefix
      res = await fetch('v1/attention', { method: 'POST', headers, body });
      text = await res.text();
    } catch (e) {
      btn.disabled = false;
      setStatus('');
      showError('Request failed: ' + e.message + ' (is attnd running?)');
      return;
    }
    btn.disabled = false;
    const ms = performance.now() - t0;
    $('response-json').textContent = text.length > 20000 ? text.slice(0, 20000) + ' …' : text;
    let json = null;
    try { json = JSON.parse(text); } catch (e) { /* shown below */ }
    if (!res.ok) {
      setStatus('');
      const msg = json && typeof json.error === 'string' ? json.error : text.slice(0, 500);
      showError('HTTP ' + res.status + (res.statusText ? ' ' + res.statusText : '') + ': ' + msg);
      return;
    }
    if (!json) {
      showError('HTTP ' + res.status + ' but the body is not JSON: ' + text.slice(0, 200));
      setStatus('');
      return;
    }
    try {
      if (json.weights === undefined) throw new Error('the response has no "weights"');
      const q = toFlat(req.query, 'query');
      const wt = as4d(toFlat(json.weights, 'weights'), 'weights');
      const ot = as4d(toFlat(json.output, 'output'), 'output');
      state.response = json;
      state.weights = wt;
      state.output = ot;
      state.diag = readDiagnostics(json, q.shape.length);
      state.lse = readLse(json, q.shape.length);
      state.sinks = Array.isArray(req.sinks) ? req.sinks : null;
      state.seqs = req.cu_seqlens_q ? { q: req.cu_seqlens_q, k: req.cu_seqlens_k } : null;
    } catch (e) {
      showError('Unexpected response: ' + e.message);
      setStatus('');
      return;
    }
    state.runs += 1;
    window.attndLastResponse = json;
    fillSelect($('sel-batch'), state.weights.B);
    fillSelect($('sel-head'), state.weights.H);
    $('shape-info').textContent = 'weights ' + shapeText(toFlat(json.weights, 'weights').shape);
    const diagNote = req.diagnostics && !state.diag ? ' (no diagnostics in the response)' : '';
    setStatus('HTTP ' + res.status + ' in ' + ms.toFixed(0) + ' ms' + diagNote);
    redraw();
    // One column (phones): bring the result into view.
    const top = $('results-title').getBoundingClientRect().top;
    if (window.matchMedia('(max-width: 860px)').matches && (top < 0 || top > window.innerHeight * 0.8)) {
      $('results-title').scrollIntoView({ block: 'start' });
    }
  }

  // ---------------------------------------------------------------- wiring

  function init() {
    const focusBox = document.createElement('div');
    focusBox.id = 'cell-focus';
    focusBox.className = 'cell-focus';
    focusBox.hidden = true;
    $('heatmap-wrap').appendChild(focusBox);

    $('form').addEventListener('submit', (ev) => { ev.preventDefault(); run(); });
    $('generate').addEventListener('click', () => {
      clearError();
      try { generate(); } catch (e) { showError(e.message); }
    });
    $('preset').addEventListener('change', () => {
      const p = PRESETS[$('preset').value];
      if (!p) return;
      clearError();
      p();
      run();
    });
    for (const id of ['query', 'key', 'value']) $(id).addEventListener('change', updateShapeLabels);
    $('sel-batch').addEventListener('change', redraw);
    $('sel-head').addEventListener('change', redraw);

    const canvas = $('heatmap');
    canvas.addEventListener('pointermove', (ev) => {
      const c = cellAt(ev.clientX, ev.clientY);
      if (c) showTooltip(c[0], c[1]); else hideTooltip();
    });
    canvas.addEventListener('pointerdown', (ev) => {
      const c = cellAt(ev.clientX, ev.clientY);
      if (c) showTooltip(c[0], c[1]);
    });
    canvas.addEventListener('pointerleave', (ev) => {
      if (ev.pointerType === 'touch') return;   // a tapped cell keeps its tooltip
      if (!state.focus) hideTooltip(); else placeFocus();
    });
    canvas.addEventListener('keydown', (ev) => {
      const g = state.geom;
      if (!g) return;
      const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
      const m = moves[ev.key];
      if (!m) {
        if (ev.key === 'Escape') { state.focus = null; placeFocus(); hideTooltip(); }
        return;
      }
      ev.preventDefault();
      const f = state.focus || [0, 0];
      const i = Math.min(g.Lq - 1, Math.max(0, f[0] + (state.focus ? m[0] : 0)));
      const j = Math.min(g.Lk - 1, Math.max(0, f[1] + (state.focus ? m[1] : 0)));
      state.focus = [i, j];
      placeFocus();
    });
    canvas.addEventListener('blur', () => { state.focus = null; placeFocus(); hideTooltip(); });

    let pending = 0;
    window.addEventListener('resize', () => {
      clearTimeout(pending);
      pending = setTimeout(() => { if (state.weights) { hideTooltip(); drawHeatmap(); } }, 120);
    });

    // Start with something on screen: the causal example the docs talk about.
    setShape(1, 1, 6, 6, 8, 4);
    setMasking({ causal: 'upper_left' });
    generate();
    drawLegend(1);
    $('legend-max').textContent = 'max';
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
