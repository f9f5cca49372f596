// The memory page's data: the ledger's runs as the page holds them (a typed array a
// series), decoded from the JSON the crate writes, and the frames a live game sends
// appended. No DOM: tested under Node (tests/page/page.test.cjs).
(function (root) {
  'use strict';
  const D = root.NMDraw || require('./draw.js');
  function sized(a, n, Type) {
    if (a.length === n) return a;
    const b = new Type(n);
    b.set(a.subarray(0, Math.min(n, a.length)));
    return b;
  }
  const SERIES = [['held', Float64Array], ['live', Float64Array], ['peak', Float64Array],
    ['alloc', Float64Array], ['calls', Float64Array], ['rising', Uint16Array], ['flags', Uint8Array]];

  function decodeRun(r) {
    const frames = D.frameNumbers(r.frames);
    const run = { name: r.name, frames, n: frames.length, lines: [], byTag: new Map() };
    for (const l of r.lines) addLine(run, l, 0);
    return run;
  }

  // A line of the data into `run`, its values placed from frame index `at` (zeros before).
  function addLine(run, l, at) {
    let line = run.byTag.get(l.tag);
    if (!line) {
      line = { tag: l.tag, depth: l.depth, budgets: [], sites: null, parent: -1, children: [], k: run.lines.length };
      for (const [key, Type] of SERIES) line[key] = new Type(Math.max(16, run.n));
      run.lines.push(line);
      run.byTag.set(l.tag, line);
    }
    for (const [key, Type] of SERIES) {
      const v = D.decode(l[key] || [], Type);
      line[key] = D.grow(line[key], at, at + v.length);
      line[key].set(v.subarray(0, Math.max(0, run.n - at)), at);
    }
    for (const b of l.budgets || []) {
      const last = line.budgets[line.budgets.length - 1];
      if (!last || last[0] !== b[0] || last[1] !== b[1] || last[2] !== b[2]) line.budgets.push(b);
    }
    if (l.sites) line.sites = l.sites;
    return line;
  }

  // Parents, children and colours, after lines were added.
  function link(run) {
    run.lines.sort((p, q) => treeOrder(p.tag, q.tag));
    run.lines.forEach((l, k) => { l.k = k; l.children = []; l.parent = -1; });
    for (const l of run.lines) {
      const cut = l.tag.lastIndexOf('/');
      const p = cut > 0 ? run.byTag.get(l.tag.slice(0, cut)) : null;
      if (p) { l.parent = p.k; p.children.push(l.k); }
      l.colour = D.colour(l.k, l.depth);
    }
    for (const l of run.lines) {
      for (const [key, Type] of SERIES) l[key] = sized(l[key], Math.max(run.n, 1), Type);
    }
  }

  function treeOrder(a, b) {
    const x = a.split('/'), y = b.split('/');
    for (let i = 0; i < Math.min(x.length, y.length); i++) {
      if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
    }
    return x.length - y.length;
  }

  // Appends a reply of the remote method (frames after the last one held) to `run`.
  function append(run, r) {
    const frames = D.frameNumbers(r.frames);
    let skip = 0;
    const last = run.n ? run.frames[run.n - 1] : -1;
    while (skip < frames.length && frames[skip] <= last) skip++;
    const add = frames.length - skip;
    if (add <= 0) return 0;
    const at = run.n;
    run.frames = D.grow(run.frames, at, at + add);
    run.frames.set(frames.subarray(skip), at);
    run.n = at + add;
    for (const l of r.lines) {
      const trimmed = Object.assign({}, l);
      for (const [key, Type] of SERIES) trimmed[key] = Array.from(D.decode(l[key] || [], Type).subarray(skip));
      addLine(run, trimmed, at);
    }
    for (const l of run.lines) for (const [key] of SERIES) {
      if (!r.lines.some((x) => x.tag === l.tag)) { l[key] = D.grow(l[key], at, run.n); l[key].fill(0, at, run.n); }
    }
    link(run);
    return add;
  }

  const NMData = { decodeRun, link, append, treeOrder };
  root.NMData = NMData;
  if (typeof module === 'object' && module.exports) module.exports = NMData;
})(typeof globalThis !== 'undefined' ? globalThis : this);
