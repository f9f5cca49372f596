// The memory page: what a person does with it (hover, zoom, fold, choose, compare,
// follow a game), over the drawing of draw.js (NMDraw).
(function () {
  'use strict';
  const D = window.NMDraw;
  const { decodeRun, link, append } = window.NMData;
  const $ = (id) => document.getElementById(id);
  const doc = JSON.parse($('nm-data').textContent);
  const RISING = doc.rising_windows || 3;
  const OVER_WARN = 1, OVER_LIMIT = 2, CROSSED = 4;
  const S = {
    runs: [], run: null, measure: 'both', i0: 0, i1: 0, zoomed: false,
    open: new Set(), allOpen: false, chosen: -1, cursor: -1, a: -1, b: -1,
    drag: null, geo: {}, bands: [], marks: [], spikes: [], painted: false,
  };

  // ---- figures of a line ----
  const value = (l, f) => S.measure === 'heap' ? l.live[f] : S.measure === 'arena' ? l.held[f] : l.held[f] + l.live[f];
  const peakOf = (l, f) => {
    const heap = Math.max(l.peak[f], l.live[f]);
    return S.measure === 'heap' ? heap : S.measure === 'arena' ? l.held[f] : l.held[f] + heap;
  };
  const budgetAt = (l, frame) => {
    let b = null;
    for (const x of l.budgets) if (x[0] <= frame) b = x;
    return b;
  };

  // The chart's bands: each top-level line, unfolded into its children (and what it holds
  // itself) where the person opened it.
  function bands(run) {
    const out = [];
    const n = run.n;
    const visit = (l) => {
      if (l.children.length && (S.allOpen || S.open.has(l.tag))) {
        const own = new Float64Array(n), ownAlloc = new Float64Array(n);
        for (let f = 0; f < n; f++) {
          let v = value(l, f), a = l.alloc[f];
          for (const c of l.children) { v -= value(run.lines[c], f); a -= run.lines[c].alloc[f]; }
          own[f] = Math.max(0, v);
          ownAlloc[f] = Math.max(0, a);
        }
        if (own.some((v) => v > 0) || ownAlloc.some((v) => v > 0)) out.push({ line: l, own: true, values: own, alloc: ownAlloc });
        for (const c of l.children) visit(run.lines[c]);
      } else {
        const values = new Float64Array(n);
        for (let f = 0; f < n; f++) values[f] = value(l, f);
        out.push({ line: l, own: false, values, alloc: l.alloc.subarray(0, n) });
      }
    };
    for (const l of run.lines) if (l.parent < 0) visit(l);
    return out;
  }

  function totals(run) {
    const peak = new Float64Array(run.n), calls = new Float64Array(run.n);
    for (const l of run.lines) {
      if (l.parent >= 0) continue;
      for (let f = 0; f < run.n; f++) { peak[f] += peakOf(l, f); calls[f] += l.calls[f]; }
    }
    return { peak, calls };
  }

  function findMarks(run) {
    const marks = [];
    for (const l of run.lines) {
      let wasRising = false;
      for (let f = 0; f < run.n; f++) {
        if (l.flags[f] & CROSSED) {
          const b = budgetAt(l, run.frames[f]);
          const what = b ? [b[1] != null ? 'warn ' + D.bytes(b[1]) : '', b[2] != null ? 'limit ' + D.bytes(b[2]) : ''].filter(Boolean).join(', ') : '';
          marks.push({ kind: 'crossed', f, tag: l.tag, text: 'crossed its budget (' + what + ')' });
        }
        const rising = l.rising[f] >= RISING;
        if (rising && !wasRising) marks.push({ kind: 'rising', f, tag: l.tag, text: 'heap RISING (' + l.rising[f] + ' growth windows)' });
        wasRising = rising;
      }
    }
    for (const [a, b] of D.runs(S.spikes)) {
      marks.push({ kind: 'spike', f: a, tag: '', text: (b > a ? (b - a + 1) + ' frames' : 'peak ' + D.bytes(S.total.peak[a])) });
    }
    marks.sort((p, q) => p.f - q.f);
    return marks;
  }

  // ---- the views ----
  // Unfolded when a run is first shown: each top-level line, and down a chain of single
  // children (apps/0/systems opens to the systems).
  function unfold(run, l) {
    S.open.add(l.tag);
    if (l.children.length === 1 && run.lines[l.children[0]].children.length) unfold(run, run.lines[l.children[0]]);
  }

  function setRun(run) {
    if (!run.unfolded) {
      run.unfolded = true;
      for (const l of run.lines) if (l.depth === 0 && l.children.length) unfold(run, l);
    }
    S.run = run;
    S.i0 = 0; S.i1 = run.n; S.zoomed = false; S.chosen = -1; S.a = S.b = S.cursor = -1;
    refresh();
  }

  function refresh() {
    const run = S.run;
    S.bands = bands(run);
    S.total = totals(run);
    S.spikes = D.spikes(S.total.peak, 0, run.n);
    S.marks = findMarks(run);
    if (!S.zoomed) { S.i0 = 0; S.i1 = run.n; }
    legend();
    markList();
    summary();
    render();
  }

  function summary() {
    const run = S.run;
    const el = document.documentElement.dataset;
    el.frames = run.n; el.lines = run.lines.length;
    el.lastFrame = run.n ? run.frames[run.n - 1] : '';
    if (!run.n) { $('summary').textContent = 'No frames recorded.'; return; }
    const f = run.n - 1;
    let live = 0, held = 0;
    for (const l of run.lines) if (l.parent < 0) { live += l.live[f]; held += l.held[f]; }
    const count = (k) => S.marks.filter((m) => m.kind === k).length;
    $('summary').textContent = 'frames ' + D.exact(run.frames[0]) + '–' + D.exact(run.frames[f]) + ' · ' +
      run.lines.length + ' lines · at the last frame: heap live ' + D.bytes(live) + ', arena held ' +
      D.bytes(held) + ', peak ' + D.bytes(S.total.peak[f]) + ' · ' + count('crossed') + ' budget crossings · ' +
      count('rising') + ' RISING · ' + S.spikes.length + ' spike frames';
  }

  function legend() {
    const run = S.run;
    const body = $('legend').tBodies[0];
    body.textContent = '';
    for (const l of run.lines) {
      const tr = document.createElement('tr');
      tr.className = 'series' + (l.k === S.chosen ? ' chosen' : '');
      tr.dataset.tag = l.tag;
      const fold = document.createElement('td');
      fold.className = 'fold';
      if (l.children.length) {
        fold.textContent = S.allOpen || S.open.has(l.tag) ? '▾' : '▸';
        fold.title = 'fold or unfold in the chart';
        fold.onclick = () => { S.allOpen = false; S.open.has(l.tag) ? S.open.delete(l.tag) : S.open.add(l.tag); refresh(); };
      }
      const name = document.createElement('td');
      name.className = 'name';
      name.style.paddingLeft = 4 + 12 * l.depth + 'px';
      name.innerHTML = '<span class="swatch"></span>';
      name.firstChild.style.background = l.colour;
      name.appendChild(document.createTextNode(l.tag.slice(l.tag.lastIndexOf('/') + 1)));
      name.title = l.tag + ' (choose to see its own history)';
      name.onclick = () => { S.chosen = S.chosen === l.k ? -1 : l.k; legend(); render(); };
      const val = document.createElement('td');
      val.className = 'val';
      const marks = document.createElement('td');
      tr.append(fold, name, val, marks);
      body.appendChild(tr);
    }
    values();
  }

  // The legend's figures at the cursor's frame (the last frame when none).
  function values() {
    const run = S.run;
    if (!run.n) return;
    const f = S.cursor >= 0 ? S.cursor : run.n - 1;
    $('legend-title').textContent = 'lines at frame ' + D.exact(run.frames[f]) + ' (' + $('measure').selectedOptions[0].text + ')';
    for (const tr of $('legend').tBodies[0].rows) {
      const l = run.byTag.get(tr.dataset.tag);
      const v = value(l, f);
      tr.cells[2].textContent = D.exact(v) + ' B';
      tr.cells[2].dataset.bytes = v;
      tr.cells[2].title = D.bytes(v);
      let m = '';
      if (l.rising[f] >= RISING) m += '<span class="mark rising">RISING</span>';
      if (l.flags[f] & (OVER_WARN | OVER_LIMIT)) m += '<span class="mark over">OVER</span>';
      tr.cells[3].innerHTML = m;
    }
  }

  function markList() {
    const ul = $('marks');
    ul.textContent = '';
    const shown = S.marks.slice(0, 300);
    for (const m of shown) {
      const li = document.createElement('li');
      li.className = m.kind;
      li.dataset.kind = m.kind; li.dataset.frame = S.run.frames[m.f]; li.dataset.tag = m.tag;
      li.innerHTML = '<span class="k"></span>';
      li.firstChild.textContent = m.kind;
      li.appendChild(document.createTextNode('frame ' + D.exact(S.run.frames[m.f]) + ' ' + (m.tag ? m.tag + ': ' : '') + m.text));
      li.onclick = () => {
        const half = Math.max(30, Math.round((S.i1 - S.i0) / 8));
        zoom(m.f - half, m.f + half);
        if (m.tag) { S.chosen = S.run.byTag.get(m.tag).k; legend(); render(); }
      };
      ul.appendChild(li);
    }
    if (S.marks.length > shown.length) {
      const li = document.createElement('li');
      li.textContent = '… and ' + (S.marks.length - shown.length) + ' more';
      ul.appendChild(li);
    }
    if (!S.marks.length) ul.innerHTML = '<li>none: no budget crossed, nothing RISING, no spike</li>';
  }

  function zoom(a, b) {
    const run = S.run;
    S.i0 = Math.max(0, Math.min(a, run.n - 1));
    S.i1 = Math.max(S.i0 + 1, Math.min(b, run.n));
    S.zoomed = S.i0 > 0 || S.i1 < run.n;
    $('unzoom').disabled = !S.zoomed;
    render();
  }

  let pending = false;
  function render() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      paint();
      if (!S.painted) {
        S.painted = true;
        document.documentElement.dataset.firstPaint = Math.round(performance.now());
      }
    });
  }

  function paint() {
    const run = S.run;
    if (!run.n) return;
    paintMain(run);
    paintAllocs(run);
    paintLine(run);
    compare(run);
  }

  function paintMain(run) {
    const { ctx, rect } = D.prepare($('main'));
    const cols = D.columns(S.i0, S.i1, rect.w);
    const levels = D.stack(S.bands.map((b) => b.values), cols);
    const peaks = S.measure === 'arena' ? null : D.columnMax(S.total.peak, cols);
    let max = 0;
    for (const v of levels.length ? levels[levels.length - 1] : []) max = Math.max(max, v);
    if (peaks) for (const v of peaks) max = Math.max(max, v);
    const ticks = D.ticks(max * 1.04, 5, true);
    const top = ticks[ticks.length - 1] || 1;
    D.paintBands(ctx, rect, D.runs(S.spikes), S.i0, S.i1, 'rgba(150,150,150,0.28)');
    D.paintStack(ctx, rect, levels, S.bands.map((b) => b.line.colour), top);
    if (peaks) D.paintLine(ctx, rect, peaks, top, '#222', 1, [3, 2]);
    D.paintMarks(ctx, rect, S.marks.filter((m) => m.kind === 'rising').map((m) => m.f), S.i0, S.i1, '#e67e22');
    D.paintMarks(ctx, rect, S.marks.filter((m) => m.kind === 'crossed').map((m) => m.f), S.i0, S.i1, '#c0392b');
    D.paintAxes(ctx, rect, ticks, top, D.bytes, run.frames, S.i0, S.i1);
    rules(ctx, rect);
    S.geo.main = { rect, cols, levels, top };
  }

  function rules(ctx, rect) {
    if (S.a >= 0) D.paintRule(ctx, rect, S.a, S.i0, S.i1, '#2471a3', 'A');
    if (S.b >= 0) D.paintRule(ctx, rect, S.b, S.i0, S.i1, '#7d3c98', 'B');
    if (S.cursor >= 0) D.paintRule(ctx, rect, S.cursor, S.i0, S.i1, 'rgba(0,0,0,0.55)');
    if (S.drag && S.drag.x1 != null) {
      ctx.fillStyle = 'rgba(36,113,163,0.15)';
      ctx.fillRect(Math.min(S.drag.x0, S.drag.x1), rect.y, Math.abs(S.drag.x1 - S.drag.x0), rect.h);
    }
  }

  function paintAllocs(run) {
    const { ctx, rect } = D.prepare($('allocs'), { l: 64, r: 12, t: 16, b: 22 });
    const cols = D.columns(S.i0, S.i1, rect.w);
    const levels = D.stack(S.bands.map((b) => b.alloc), cols);
    const calls = D.columnMax(S.total.calls, cols);
    let most = 0;
    for (const v of calls) most = Math.max(most, v);
    // A burst (the first frame's setup) would flatten the rest: the scale fits all but
    // the highest 0.5% of columns, which are cut at the top.
    const tops = levels.length ? levels[levels.length - 1] : new Float64Array(0);
    const max = D.fit(tops, 0.995);
    const ticks = D.ticks(max * 1.04, 3, true);
    const top = ticks[ticks.length - 1] || 1;
    D.paintStack(ctx, rect, levels, S.bands.map((b) => b.line.colour), top);
    if (most > 0) D.paintLine(ctx, rect, Array.from(calls, (c) => (c / most) * top), top, '#222', 1);
    D.paintAxes(ctx, rect, ticks, top, D.bytes, run.frames, S.i0, S.i1);
    ctx.fillStyle = '#333';
    ctx.font = '11px system-ui, sans-serif';
    let highest = 0;
    for (const v of tops) highest = Math.max(highest, v);
    ctx.fillText('heap bytes allocated per frame (areas' + (highest > top ? ', cut at the top: most ' + D.bytes(highest) : '') +
      ') · calls (line, most ' + D.exact(most) + ')', rect.x + 4, rect.y - 4);
    rules(ctx, rect);
    S.geo.allocs = { rect };
  }

  function paintLine(run) {
    const box = $('detail');
    if (S.chosen < 0) { box.hidden = true; return; }
    box.hidden = false;
    const l = run.lines[S.chosen];
    $('detail-title').textContent = l.tag + ' — heap live (solid), arena held (dashed), heap peak in the frame (grey)' +
      (l.budgets.length ? ', budgets (red: limit, orange: warn), frames over them shaded' : '');
    const { ctx, rect } = D.prepare($('line'));
    const cols = D.columns(S.i0, S.i1, rect.w);
    const reached = new Float64Array(run.n);
    for (let f = 0; f < run.n; f++) reached[f] = l.held[f] + Math.max(l.peak[f], l.live[f]);
    const live = D.columnMax(l.live, cols), held = D.columnMax(l.held, cols), peak = D.columnMax(reached, cols);
    let max = 0;
    for (const v of peak) max = Math.max(max, v);
    for (const x of l.budgets) for (const v of [x[1], x[2]]) if (v != null && v < max * 4) max = Math.max(max, v);
    const ticks = D.ticks(max * 1.05, 4, true);
    const top = ticks[ticks.length - 1] || 1;
    const over = [], rising = [];
    for (let f = S.i0; f < S.i1; f++) {
      if (l.flags[f] & (OVER_WARN | OVER_LIMIT)) over.push(f);
      if (l.rising[f] >= RISING) rising.push(f);
    }
    D.paintBands(ctx, rect, D.runs(rising), S.i0, S.i1, 'rgba(230,126,34,0.16)');
    D.paintBands(ctx, rect, D.runs(over), S.i0, S.i1, 'rgba(192,57,43,0.18)');
    D.paintLine(ctx, rect, peak, top, '#999', 1);
    D.paintLine(ctx, rect, held, top, l.colour, 2, [5, 3]);
    D.paintLine(ctx, rect, live, top, l.colour, 2);
    for (const [k, colour] of [[1, '#e67e22'], [2, '#c0392b']]) {
      const line = new Float64Array(cols.width);
      let any = false;
      for (let c = 0; c < cols.width; c++) {
        const x = budgetAt(l, run.frames[cols.start[c]]);
        line[c] = x && x[k] != null ? (any = true, x[k]) : NaN;
      }
      if (any) D.paintLine(ctx, rect, line, top, colour, 1.5, [6, 3]);
    }
    const crossed = [];
    for (let f = S.i0; f < S.i1; f++) if (l.flags[f] & CROSSED) crossed.push(f);
    D.paintMarks(ctx, rect, crossed, S.i0, S.i1, '#c0392b');
    D.paintAxes(ctx, rect, ticks, top, D.bytes, run.frames, S.i0, S.i1);
    rules(ctx, rect);
    S.geo.line = { rect };
    const sites = $('sites');
    if (l.sites && l.sites.length) {
      sites.innerHTML = '<b>top call sites</b> (sampled heap, estimates: what the line holds at exit, and allocates a frame)';
      const ol = document.createElement('ol');
      for (const s of l.sites.slice(0, 10)) {
        const li = document.createElement('li');
        li.textContent = s.kind + ' ~' + D.bytes(s.bytes || 0) + (s.kind === 'churns' ? '/frame' : '') +
          ' (' + Math.round((s.share || 0) * 100) + '%, ' + D.exact(s.calls || 0) + ' samples): ' + s.site;
        ol.appendChild(li);
      }
      sites.appendChild(ol);
    } else {
      sites.textContent = 'Call sites: none sampled for this line (NEBULA_MEMORY_SAMPLE=512K turns sampling on).';
    }
  }

  function compare(run) {
    const box = $('compare');
    if (S.a < 0 || S.b < 0) { box.hidden = true; return; }
    box.hidden = false;
    const rows = run.lines.map((l) => ({ l, a: value(l, S.a), b: value(l, S.b) }))
      .filter((r) => r.a !== r.b).sort((p, q) => Math.abs(q.b - q.a) - Math.abs(p.b - p.a));
    let total = 0;
    for (const l of run.lines) if (l.parent < 0) total += value(l, S.b) - value(l, S.a);
    $('compare-title').textContent = 'frame ' + D.exact(run.frames[S.a]) + ' (A) → frame ' + D.exact(run.frames[S.b]) +
      ' (B): the top-level lines gained ' + (total >= 0 ? '+' : '') + D.bytes(total) + '; lines that changed, most first';
    const body = $('compare-rows');
    body.textContent = '';
    for (const r of rows.slice(0, 40)) {
      const tr = body.insertRow();
      tr.dataset.tag = r.l.tag;
      tr.dataset.gained = r.b - r.a;
      tr.insertCell().textContent = r.l.tag;
      tr.insertCell().textContent = D.bytes(r.a);
      tr.insertCell().textContent = D.bytes(r.b);
      const g = tr.insertCell();
      g.textContent = (r.b >= r.a ? '+' : '') + D.bytes(r.b - r.a);
      g.className = r.b > r.a ? 'up' : 'down';
      g.title = (r.b >= r.a ? '+' : '') + D.exact(r.b - r.a) + ' B';
    }
  }

  // ---- the pointer ----
  function at(ev, geo) {
    const box = ev.target.getBoundingClientRect();
    return { x: ev.clientX - box.left, y: ev.clientY - box.top, geo };
  }

  function tip(ev, html) {
    const t = $('tip');
    if (!html) { t.hidden = true; return; }
    t.innerHTML = html;
    t.hidden = false;
    t.style.left = Math.min(ev.clientX + 14, window.innerWidth - t.offsetWidth - 8) + 'px';
    t.style.top = Math.min(ev.clientY + 14, window.innerHeight - t.offsetHeight - 8) + 'px';
  }

  const esc = (s) => s.replace(/[&<>"]/g, (c) => '&#' + c.charCodeAt(0) + ';');

  function hover(ev, which) {
    const g = S.geo[which];
    if (!g || !S.run.n) return;
    const p = at(ev, g);
    if (S.drag) { S.drag.x1 = p.x; render(); }
    if (p.x < g.rect.x || p.x > g.rect.x + g.rect.w) { S.cursor = -1; tip(ev, null); values(); render(); return; }
    const f = D.indexAt(p.x, S.i0, S.i1, g.rect);
    S.cursor = f;
    values();
    render();
    let band = null;
    if (which === 'main' && g.levels.length) {
      const yv = ((g.rect.y + g.rect.h - p.y) / g.rect.h) * g.top;
      let acc = 0;
      for (const b of S.bands) { acc += b.values[f]; if (yv <= acc) { band = b; break; } }
    }
    const l = band ? band.line : S.chosen >= 0 ? S.run.lines[S.chosen] : null;
    let html = '<b>frame ' + D.exact(S.run.frames[f]) + '</b>';
    if (l) {
      html += '<br><b>' + esc(l.tag) + (band && band.own ? ' (its own, children apart)' : '') + '</b>' +
        '<br>heap live ' + D.exact(l.live[f]) + ' B · arena held ' + D.exact(l.held[f]) + ' B' +
        '<br>heap peak in the frame ' + D.exact(Math.max(l.peak[f], l.live[f])) + ' B' +
        '<br>allocated ' + D.exact(l.alloc[f]) + ' B in ' + D.exact(l.calls[f]) + ' calls';
      const b = budgetAt(l, S.run.frames[f]);
      if (b) html += '<br>budget: ' + (b[1] != null ? 'warn ' + D.exact(b[1]) + ' B ' : '') + (b[2] != null ? 'limit ' + D.exact(b[2]) + ' B' : '') + (l.flags[f] & (OVER_WARN | OVER_LIMIT) ? ' — OVER' : '');
      if (l.rising[f] >= RISING) html += '<br>RISING for ' + l.rising[f] + ' growth windows';
    }
    html += '<br>all lines: peak ' + D.exact(S.total.peak[f]) + ' B, ' + D.exact(S.total.calls[f]) + ' calls';
    tip(ev, html);
  }

  function press(ev, which) {
    const g = S.geo[which];
    if (!g) return;
    S.drag = { x0: at(ev, g).x, x1: null, which };
  }

  function release(ev, which) {
    const g = S.geo[which];
    const d = S.drag;
    S.drag = null;
    if (!g || !d) return;
    const x = at(ev, g).x;
    if (d.x1 != null && Math.abs(x - d.x0) > 4) {
      const a = D.indexAt(Math.min(x, d.x0), S.i0, S.i1, g.rect);
      const b = D.indexAt(Math.max(x, d.x0), S.i0, S.i1, g.rect);
      zoom(a, b + 1);
      return;
    }
    const f = D.indexAt(x, S.i0, S.i1, g.rect);
    if (ev.shiftKey && S.a >= 0) S.b = f; else { S.a = f; S.b = -1; }
    render();
  }

  for (const which of ['main', 'allocs', 'line']) {
    const c = $(which);
    c.addEventListener('mousemove', (ev) => hover(ev, which));
    c.addEventListener('mouseleave', (ev) => { S.cursor = -1; tip(ev, null); values(); render(); });
    c.addEventListener('mousedown', (ev) => press(ev, which));
    c.addEventListener('mouseup', (ev) => release(ev, which));
  }

  // ---- the controls ----
  $('measure').onchange = (ev) => { S.measure = ev.target.value; refresh(); };
  $('unzoom').onclick = () => { S.zoomed = false; zoom(0, S.run.n); };
  $('expand').onclick = () => {
    S.allOpen = !S.allOpen;
    if (!S.allOpen) S.open.clear();
    $('expand').textContent = S.allOpen ? 'fold all' : 'unfold all';
    refresh();
  };
  $('run').onchange = (ev) => setRun(S.runs[+ev.target.value]);
  window.addEventListener('resize', render);

  function runPicker() {
    const sel = $('run');
    sel.textContent = '';
    S.runs.forEach((r, i) => sel.add(new Option(r.name, i, false, r === S.run)));
    $('run-pick').hidden = S.runs.length < 2;
  }

  // ---- following a game over Bevy's remote protocol ----
  const live = { addr: '', timer: 0, seq: 0, run: null, busy: false };
  async function call(method, params) {
    const res = await fetch('http://' + live.addr + '/', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: ++live.seq, method, params }),
    });
    const reply = await res.json();
    if (reply.error) throw new Error(reply.error.message);
    return reply.result;
  }

  async function poll() {
    if (live.busy || !live.addr) return;
    live.busy = true;
    try {
      const since = live.run && live.run.n ? live.run.frames[live.run.n - 1] : null;
      const r = await call('nebula_memory.ledger.frames', since == null ? {} : { since });
      if (!live.run) {
        live.run = decodeRun(r);
        live.run.name = 'live: ' + live.addr;
        link(live.run);
        S.runs.push(live.run);
        setRun(live.run);
        runPicker();
      } else if (append(live.run, r) > 0 && S.run === live.run) {
        const sel = S.chosen >= 0 ? S.run.lines[S.chosen].tag : null;
        refresh();
        if (sel) S.chosen = S.run.byTag.get(sel).k;
      }
      $('live-status').textContent = 'following ' + live.addr + ': frame ' + D.exact(r.last == null ? 0 : r.last);
      document.documentElement.dataset.live = 'on';
    } catch (e) {
      $('live-status').textContent = 'cannot reach ' + live.addr + ': ' + e.message + ' (is the game running with the remote plugin?)';
    } finally {
      live.busy = false;
    }
  }

  function follow(addr) {
    clearInterval(live.timer);
    live.addr = addr.replace(/^https?:\/\//, '').replace(/\/$/, '');
    live.run = null;
    if (!live.addr) { $('follow').textContent = 'follow a game'; return; }
    $('live-addr').value = live.addr;
    $('follow').textContent = 'stop';
    poll();
    live.timer = setInterval(poll, 500);
  }
  $('follow').onclick = () => {
    if (live.addr) { live.addr = ''; clearInterval(live.timer); $('follow').textContent = 'follow a game'; $('live-status').textContent = 'stopped'; return; }
    follow($('live-addr').value.trim() || '127.0.0.1:15702');
  };

  // ---- start ----
  for (const r of doc.runs || []) {
    const run = decodeRun(r);
    link(run);
    S.runs.push(run);
  }
  if (!S.runs.length) S.runs.push({ name: 'no run', frames: new Float64Array(0), n: 0, lines: [], byTag: new Map() });
  runPicker();
  setRun(S.runs[0]);
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get('live')) follow(hash.get('live'));
  window.NMPage = { state: S, follow };
})();
