// The memory page's scripts without a browser, under Node's test runner
// (`node --test tests/page/`): draw.js's pure parts (decoding the ledger's series, fitting
// frames to pixel columns, stacking, spikes, units), a painter on a recording canvas, and
// data.js (a run decoded into its tree; a live game's frames appended).
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const D = require('../../src/ledger/page/draw.js');
const Data = require('../../src/ledger/page/data.js');

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

// A run as the crate writes it (ledger::page's data): `frames` are steps, series coded.
const run = (frames, lines) => ({ name: 'r', frames, lines: lines.map(([tag, live]) =>
  ({ tag, depth: tag.split('/').length - 1, budgets: [], held: [0, -(D.count(live) - 1)], live, peak: live,
     alloc: live, calls: live, rising: live, flags: live })) });

test('a run decodes into its tree of lines', () => {
  const r = Data.decodeRun(run([1, 1, -1], [['a', [5, -2]], ['a/x', [2, 3, 4]], ['a/y', [3, -2]], ['b', [0, -2]]]));
  Data.link(r);
  assert.deepStrictEqual(Array.from(r.frames), [1, 2, 3]);
  const a = r.byTag.get('a');
  assert.deepStrictEqual(a.children.map((k) => r.lines[k].tag), ['a/x', 'a/y']);
  assert.strictEqual(r.byTag.get('a/x').parent, a.k);
  assert.strictEqual(r.byTag.get('b').parent, -1);
  assert.deepStrictEqual(Array.from(r.byTag.get('a/x').live), [2, 3, 4]);
});

test('a live reply appends the frames after the last one held, once each', () => {
  const r = Data.decodeRun(run([1, 1], [['a', [5, 6]]]));
  Data.link(r);
  // Frames 2 to 4: 2 is held already; a new line appears, `a` goes on.
  const added = Data.append(r, run([2, 1, -1], [['a', [6, 7, 8]], ['n', [1, 1, 9]]]));
  assert.strictEqual(added, 2);
  assert.deepStrictEqual(Array.from(r.frames.subarray(0, r.n)), [1, 2, 3, 4]);
  assert.deepStrictEqual(Array.from(r.byTag.get('a').live.subarray(0, r.n)), [5, 6, 7, 8]);
  // The new line is zero before it came.
  assert.deepStrictEqual(Array.from(r.byTag.get('n').live.subarray(0, r.n)), [0, 0, 1, 9]);
  // A line the reply no longer has reads zero in the frames it missed.
  Data.append(r, run([5], [['n', [2]]]));
  assert.deepStrictEqual(Array.from(r.byTag.get('a').live.subarray(0, r.n)), [5, 6, 7, 8, 0]);
  // Nothing new: nothing appended.
  assert.strictEqual(Data.append(r, run([5], [['n', [2]]])), 0);
});
