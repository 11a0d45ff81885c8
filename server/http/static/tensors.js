/* attnd playground: its tensors and numbers, apart from the page: seeded
 * random tensors, the two wire forms of a tensor, numbers as text and the
 * colour scale of the heatmap.  Nothing here touches the document; app.js
 * (loaded after this file) takes these from window.attndTensors.
 * Plain browser JavaScript, no dependencies.
 */
'use strict';

window.attndTensors = (function () {
  // ---------------------------------------------------------------- random

  // mulberry32: a small seeded 32-bit generator, same sequence everywhere.
  function mulberry32(seed) {
    let a = seed >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  // Standard normal values by the Box-Muller transform.
  function gaussianSource(seed) {
    const u = mulberry32(seed);
    let spare = null;
    return function () {
      if (spare !== null) { const s = spare; spare = null; return s; }
      let u1 = 0;
      while (u1 === 0) u1 = u();
      const r = Math.sqrt(-2 * Math.log(u1));
      const th = 2 * Math.PI * u();
      spare = r * Math.sin(th);
      return r * Math.cos(th);
    };
  }

  function randomNested(next, shape) {
    if (shape.length === 0) return Math.round(next() * 1e4) / 1e4;
    const out = new Array(shape[0]);
    for (let i = 0; i < shape[0]; i++) out[i] = randomNested(next, shape.slice(1));
    return out;
  }

  // ---------------------------------------------------------------- tensors

  // A tensor in either wire form (nested arrays or {"shape","data"}) as
  // {shape, data} with data flat and row-major.  Throws on ragged input.
  function toFlat(x, name) {
    if (x && typeof x === 'object' && !Array.isArray(x)) {
      if (!Array.isArray(x.shape) || !Array.isArray(x.data)) {
        throw new Error(name + ': expected nested arrays or {"shape", "data"}');
      }
      return { shape: x.shape.slice(), data: x.data };
    }
    const shape = [];
    let probe = x;
    while (Array.isArray(probe)) { shape.push(probe.length); probe = probe[0]; }
    const data = [];
    (function walk(v, depth, path) {
      if (depth === shape.length) {
        if (Array.isArray(v)) throw new Error(name + ': ragged array at ' + path);
        data.push(v);
        return;
      }
      if (!Array.isArray(v) || v.length !== shape[depth]) {
        throw new Error(name + ': ragged array at ' + path);
      }
      for (let i = 0; i < v.length; i++) walk(v[i], depth + 1, path + '[' + i + ']');
    })(x, 0, '');
    return { shape, data };
  }

  function shapeText(shape) { return '(' + shape.join(', ') + ')'; }

  // JSON with one innermost row per line: readable and still valid JSON.
  function formatNested(x) {
    if (!Array.isArray(x)) return JSON.stringify(x);
    if (x.length === 0 || !Array.isArray(x[0])) return '[' + x.map((v) => JSON.stringify(v)).join(', ') + ']';
    return '[' + x.map(formatNested).join(',\n ') + ']';
  }

  function fmt(v) {
    if (typeof v !== 'number') return String(v);
    if (v === 0) return '0';
    if (!Number.isFinite(v)) return String(v);
    const a = Math.abs(v);
    if (a >= 1e4 || a < 1e-3) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }

  // ---------------------------------------------------------------- colours

  // viridis, 9 stops: dark blue-violet (small) to yellow (large).  No stop
  // is close to the empty-cell background, so a tiny but non-zero weight
  // stays distinguishable from an exact zero.
  const VIRIDIS = [
    [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
    [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
  ];
  function colour(t) {
    if (!(t > 0)) t = 0;
    if (t > 1) t = 1;
    const x = t * (VIRIDIS.length - 1);
    const k = Math.min(Math.floor(x), VIRIDIS.length - 2);
    const f = x - k;
    const a = VIRIDIS[k], b = VIRIDIS[k + 1];
    return [0, 1, 2].map((c) => Math.round(a[c] + (b[c] - a[c]) * f));
  }
  const EMPTY_BG = [246, 247, 249];   // grid area: cells with weight exactly 0
  const CANVAS_BG = [255, 255, 255];  // margins
  const rgb = (c) => 'rgb(' + c[0] + ',' + c[1] + ',' + c[2] + ')';

  return {
    gaussianSource, randomNested, toFlat, shapeText, formatNested, fmt,
    colour, EMPTY_BG, CANVAS_BG, rgb,
  };
})();
