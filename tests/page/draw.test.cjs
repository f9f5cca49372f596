// The memory page's drawing code (src/ledger/page/draw.js) under Node's test runner:
// `node --test tests/page/`. Its pure parts: decoding the ledger's series, fitting frames
// to pixel columns, stacking, spikes, units; and a painter on a recording canvas.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const D = require('../../src/ledger/page/draw.js');

test('a run-length coded series decodes to its values', () => {
  assert.deepStrictEqual(Array.from(D.decode([4, -3, 5, 0, -1])), [4, 4, 4, 4, 5, 0, 0]);
  assert.deepStrictEqual(Array.from(D.decode([])), []);
  assert.strictEqual(D.count([1, -999]), 1000);
  assert.deepStrictEqual(Array.from(D.decode([7, -2], Uint8Array)), [7, 7, 7]);
  // Frame numbers from their steps, the first from 0.
  assert.deepStrictEqual(Array.from(D.frameNumbers([5, 1, -3, 10])), [5, 6, 7, 8, 9, 19]);
});

test('columns cover every frame once, at least one frame each', () => {
  for (const [i0, i1, w] of [[0, 10000, 900], [0, 7, 900], [100, 400, 300], [3, 4, 50]]) {
    const c = D.columns(i0, i1, w);
    assert.strictEqual(c.width, w);
    let seen = new Set();
    for (let k = 0; k < c.width; k++) {
      assert.ok(c.end[k] > c.start[k], 'column ' + k + ' has a frame');
      assert.ok(c.start[k] >= i0 && c.end[k] <= Math.max(i1, c.start[k] + 1));
      for (let f = c.start[k]; f < c.end[k]; f++) seen.add(f);
    }
    assert.strictEqual(seen.size, i1 - i0, 'every frame of ' + i0 + '..' + i1 + ' in a column');
  }
});

test('a stack tops at the most the total reached, not a sum of maxima', () => {
  // Two bands that peak at different frames of one column: the top is 10, not 18.
  const a = Float64Array.from([9, 1]);
  const b = Float64Array.from([1, 9]);
  const cols = D.columns(0, 2, 1);
  const levels = D.stack([a, b], cols);
  assert.strictEqual(levels[1][0], 10);
  assert.strictEqual(levels[0][0], 9);
  // One frame a column: the levels are the running sums.
  const l2 = D.stack([a, b], D.columns(0, 2, 2));
  assert.deepStrictEqual(Array.from(l2[1]), [10, 10]);
  assert.deepStrictEqual(Array.from(l2[0]), [9, 1]);
});

test('spikes are the frames far above the median', () => {
  const peaks = new Float64Array(100).fill(1 << 20);
  peaks[40] = 5 << 20;
  peaks[41] = 5 << 20;
  peaks[70] = (1 << 20) + 1000; // a little above: no spike
  assert.deepStrictEqual(D.spikes(peaks, 0, 100), [40, 41]);
  assert.deepStrictEqual(D.runs([40, 41, 43]), [[40, 41], [43, 43]]);
  // Small figures never spike: 64 KiB above the median at least.
  const small = new Float64Array(10).fill(10);
  small[5] = 1000;
  assert.deepStrictEqual(D.spikes(small, 0, 10), []);
});

test('figures are printed in the units and exactness a person reads', () => {
  assert.strictEqual(D.bytes(512), '512 B');
  assert.strictEqual(D.bytes(1536), '1.5 KiB');
  assert.strictEqual(D.bytes(3 * 1024 * 1024), '3.0 MiB');
  assert.strictEqual(D.exact(1234567), '1,234,567');
  assert.strictEqual(D.exact(-1000), '-1,000');
  const t = D.ticks(3000000, 5, true);
  assert.ok(t[t.length - 1] >= 3000000 && t.length <= 8, String(t));
});

test('x and frame index agree both ways', () => {
  const rect = { x: 60, y: 0, w: 800, h: 100 };
  for (const [i0, i1] of [[0, 10], [0, 10000], [250, 260]]) {
    for (const i of [i0, Math.floor((i0 + i1) / 2), i1 - 1]) {
      assert.strictEqual(D.indexAt(D.xOf(i, i0, i1, rect), i0, i1, rect), i);
    }
  }
});

test('the stack painter fills one area a band, from the top band down', () => {
  const calls = [];
  const ctx = new Proxy({}, {
    get: (_, name) => (name in ctx_state ? ctx_state[name] : (...args) => calls.push([name, ...args])),
    set: (_, name, v) => { ctx_state[name] = v; if (name === 'fillStyle') calls.push(['fillStyle', v]); return true; },
  });
  const ctx_state = {};
  const rect = { x: 0, y: 0, w: 4, h: 100 };
  D.paintStack(ctx, rect, [Float64Array.from([1, 2, 3, 4]), Float64Array.from([2, 4, 6, 8])], ['red', 'blue'], 8);
  assert.deepStrictEqual(calls.filter((c) => c[0] === 'fillStyle').map((c) => c[1]), ['blue', 'red']);
  assert.strictEqual(calls.filter((c) => c[0] === 'fill').length, 2);
  // The top band's highest point is the top of the plot (8 of 8).
  const ys = calls.filter((c) => c[0] === 'lineTo').map((c) => c[2]);
  assert.strictEqual(Math.min(...ys), 0);
});

test('a scale fits all but a burst far above the rest', () => {
  const v = new Float64Array(1000).fill(100);
  assert.strictEqual(D.fit(v, 0.995), 100);
  v[0] = 1e6; // the first frame's setup
  assert.strictEqual(D.fit(v, 0.995), 100);
  v.fill(300, 1, 11); // ten columns at 300: they fit, the burst is still cut
  assert.strictEqual(D.fit(v, 0.995), 300);
  v.fill(1e6, 0, 20); // 2% of the columns that high: no burst, the scale is their most
  assert.strictEqual(D.fit(v, 0.995), 1e6);
  assert.strictEqual(D.fit(new Float64Array(0), 0.995), 0);
});
