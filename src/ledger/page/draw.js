// The memory page's drawing: decoding the ledger's series, fitting frames to pixel
// columns, stacking, finding spikes, and painting on a canvas. No library: small pure
// functions (tested under Node: tests/page/page.test.cjs) and a few painters.
(function (root) {
  'use strict';
  const NM = {};

  // How many values a run-length coded series holds (-k repeats the value before k times).
  NM.count = function (rle) {
    let n = 0;
    for (const v of rle) n += v < 0 ? -v : 1;
    return n;
  };

  // A run-length coded series as a typed array (Float64Array unless told).
  NM.decode = function (rle, Type) {
    const out = new (Type || Float64Array)(NM.count(rle));
    let i = 0;
    let last = 0;
    for (const v of rle) {
      if (v < 0) {
        out.fill(last, i, i - v);
        i -= v;
      } else {
        out[i++] = v;
        last = v;
      }
    }
    return out;
  };

  // Frame numbers from their coded steps (the first from 0).
  NM.frameNumbers = function (rle) {
    const steps = NM.decode(rle);
    let f = 0;
    for (let i = 0; i < steps.length; i++) {
      f += steps[i];
      steps[i] = f;
    }
    return steps;
  };

  // `a` with room for `need` values, its first `used` kept (doubling).
  NM.grow = function (a, used, need) {
    if (need <= a.length) return a;
    const b = new a.constructor(Math.max(need, a.length * 2, 16));
    b.set(a.subarray(0, used));
    return b;
  };

  const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  // Bytes in binary units, one decimal (as the ledger's table prints them).
  NM.bytes = function (v) {
    let u = 0;
    let x = Math.abs(v);
    while (x >= 1024 && u < UNITS.length - 1) {
      x /= 1024;
      u++;
    }
    const s = u === 0 ? String(Math.round(x)) + ' B' : x.toFixed(1) + ' ' + UNITS[u];
    return v < 0 ? '-' + s : s;
  };

  // A whole number with thousands separators: the exact figure.
  NM.exact = function (v) {
    const s = String(Math.round(Math.abs(v))).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
    return v < 0 ? '-' + s : s;
  };

  // Round tick values from 0 to at least `max`, about `n` of them; each step 1, 2 or 5
  // times a power of 2^10 for bytes, else of 10.
  NM.ticks = function (max, n, binary) {
    if (!(max > 0)) return [0, 1];
    const raw = max / Math.max(1, n);
    let base = 1;
    if (binary) {
      while (base * 1024 <= raw) base *= 1024;
    }
    let p = base;
    while (p * 10 <= raw) p *= 10;
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) || p * 10;
    const out = [];
    for (let t = 0; t < max + step; t += step) {
      out.push(t);
      if (t >= max) break;
    }
    return out;
  };

  // The frames of each pixel column: column c covers [start[c], end[c]) of the frames
  // [i0, i1), at least one frame each (frames wider than a pixel repeat).
  NM.columns = function (i0, i1, width) {
    const w = Math.max(1, Math.floor(width));
    const n = Math.max(1, i1 - i0);
    const start = new Int32Array(w);
    const end = new Int32Array(w);
    for (let c = 0; c < w; c++) {
      const a = i0 + Math.floor((c * n) / w);
      const b = i0 + Math.floor(((c + 1) * n) / w);
      start[c] = Math.min(a, i1 - 1);
      end[c] = Math.max(b, start[c] + 1);
    }
    return { start, end, width: w };
  };

  // Stacked bands by column: for band k, the most that bands 0..k together reached in each
  // column's frames (so the top is the exact most of the total, never a sum of maxima).
  NM.stack = function (bands, cols) {
    const levels = bands.map(() => new Float64Array(cols.width));
    for (let c = 0; c < cols.width; c++) {
      for (let f = cols.start[c]; f < cols.end[c]; f++) {
        let acc = 0;
        for (let k = 0; k < bands.length; k++) {
          acc += bands[k][f];
          if (acc > levels[k][c]) levels[k][c] = acc;
        }
      }
    }
    return levels;
  };

  // The most of `values` in each column.
  NM.columnMax = function (values, cols) {
    const out = new Float64Array(cols.width);
    for (let c = 0; c < cols.width; c++) {
      let m = 0;
      for (let f = cols.start[c]; f < cols.end[c]; f++) if (values[f] > m) m = values[f];
      out[c] = m;
    }
    return out;
  };

  // A scale's top for `values`: their most, unless a few (the highest `1 - q` of them) are
  // far above the rest (over twice the q-quantile), when the quantile is.
  NM.fit = function (values, q) {
    if (!values.length) return 0;
    const sorted = Float64Array.from(values).sort();
    const most = sorted[sorted.length - 1];
    const at = sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
    return most > 2 * at && at > 0 ? at : most;
  };

  NM.median = function (values, i0, i1) {
    const a = Array.from(values.subarray(i0, i1)).sort((x, y) => x - y);
    if (a.length === 0) return 0;
    const m = a.length >> 1;
    return a.length % 2 ? a[m] : (a[m - 1] + a[m]) / 2;
  };

  // Spike frames: a frame whose total peak is over twice the median of the frames shown
  // and at least 64 KiB above it. Returns their indices.
  NM.spikes = function (peaks, i0, i1) {
    const med = NM.median(peaks, i0, i1);
    const out = [];
    for (let i = i0; i < i1; i++) {
      if (peaks[i] > 2 * med && peaks[i] - med >= 65536) out.push(i);
    }
    return out;
  };

  // Runs of consecutive indices as [first, last] pairs.
  NM.runs = function (indices) {
    const out = [];
    for (const i of indices) {
      const r = out[out.length - 1];
      if (r && r[1] === i - 1) r[1] = i;
      else out.push([i, i]);
    }
    return out;
  };

  // The colour of line `k` of `n`, lighter with depth.
  NM.colour = function (k, depth) {
    const hue = (k * 137.508) % 360;
    const light = Math.min(72, 42 + depth * 9);
    return 'hsl(' + hue.toFixed(0) + ',62%,' + light + '%)';
  };

  // The x of frame index i in `rect` showing [i0, i1), and the frame index at x.
  NM.xOf = function (i, i0, i1, rect) {
    return rect.x + ((i - i0 + 0.5) * rect.w) / Math.max(1, i1 - i0);
  };
  NM.indexAt = function (x, i0, i1, rect) {
    const i = i0 + Math.floor(((x - rect.x) * (i1 - i0)) / rect.w);
    return Math.max(i0, Math.min(i1 - 1, i));
  };

  // A canvas ready to paint at the device's resolution, and its plot area.
  NM.prepare = function (canvas, margins) {
    const dpr = root.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    const h = canvas.clientHeight;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const m = margins || { l: 64, r: 12, t: 14, b: 22 };
    return { ctx, rect: { x: m.l, y: m.t, w: Math.max(10, w - m.l - m.r), h: Math.max(10, h - m.t - m.b) } };
  };

  const y = (v, max, rect) => rect.y + rect.h - (Math.min(v, max) / max) * rect.h;

  // Stacked areas: band k between levels[k-1] and levels[k], one column a pixel.
  NM.paintStack = function (ctx, rect, levels, colours, max) {
    const w = levels.length ? levels[0].length : 0;
    const dx = rect.w / Math.max(1, w);
    for (let k = levels.length - 1; k >= 0; k--) {
      ctx.fillStyle = colours[k];
      ctx.beginPath();
      ctx.moveTo(rect.x, y(0, max, rect));
      for (let c = 0; c < w; c++) {
        ctx.lineTo(rect.x + c * dx, y(levels[k][c], max, rect));
        ctx.lineTo(rect.x + (c + 1) * dx, y(levels[k][c], max, rect));
      }
      ctx.lineTo(rect.x + rect.w, y(0, max, rect));
      ctx.closePath();
      ctx.fill();
    }
  };

  // A line through one value a column.
  NM.paintLine = function (ctx, rect, values, max, colour, width, dash) {
    const dx = rect.w / Math.max(1, values.length);
    ctx.save();
    ctx.strokeStyle = colour;
    ctx.lineWidth = width || 1;
    ctx.setLineDash(dash || []);
    ctx.beginPath();
    for (let c = 0; c < values.length; c++) {
      const yy = y(values[c], max, rect);
      if (c === 0) ctx.moveTo(rect.x, yy);
      ctx.lineTo(rect.x + (c + 1) * dx, yy);
    }
    ctx.stroke();
    ctx.restore();
  };

  // Vertical bands over the frames of `runs` ([first, last] index pairs).
  NM.paintBands = function (ctx, rect, runs, i0, i1, colour) {
    const fw = rect.w / Math.max(1, i1 - i0);
    ctx.fillStyle = colour;
    for (const [a, b] of runs) {
      if (b < i0 || a >= i1) continue;
      const x0 = rect.x + (Math.max(a, i0) - i0) * fw;
      const x1 = rect.x + (Math.min(b, i1 - 1) - i0 + 1) * fw;
      ctx.fillRect(x0, rect.y, Math.max(1.5, x1 - x0), rect.h);
    }
  };

  // Small triangles on the plot's top edge at the frames `indices`.
  NM.paintMarks = function (ctx, rect, indices, i0, i1, colour) {
    ctx.fillStyle = colour;
    for (const i of indices) {
      if (i < i0 || i >= i1) continue;
      const x = NM.xOf(i, i0, i1, rect);
      ctx.beginPath();
      ctx.moveTo(x - 4, rect.y - 6);
      ctx.lineTo(x + 4, rect.y - 6);
      ctx.lineTo(x, rect.y + 2);
      ctx.closePath();
      ctx.fill();
    }
  };

  // Axes: the y ticks (`fmt` labels) with grid lines, and frame numbers along x.
  NM.paintAxes = function (ctx, rect, ticks, max, fmt, frames, i0, i1) {
    ctx.save();
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = '#555';
    ctx.strokeStyle = '#e6e6e6';
    ctx.lineWidth = 1;
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (const t of ticks) {
      if (t > max) break;
      const yy = Math.round(y(t, max, rect)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(rect.x, yy);
      ctx.lineTo(rect.x + rect.w, yy);
      ctx.stroke();
      ctx.fillText(fmt(t), rect.x - 5, yy);
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    const n = i1 - i0;
    const every = NM.ticks(n, Math.max(2, Math.floor(rect.w / 90)), false);
    const step = every.length > 1 ? every[1] : 1;
    for (let k = 0; k * step < n; k++) {
      const i = i0 + k * step;
      ctx.fillText(String(frames[i]), NM.xOf(i, i0, i1, rect), rect.y + rect.h + 4);
    }
    ctx.strokeStyle = '#999';
    ctx.strokeRect(rect.x + 0.5, rect.y + 0.5, rect.w - 1, rect.h - 1);
    ctx.restore();
  };

  // A vertical rule at frame index i (the cursor, or a compared frame).
  NM.paintRule = function (ctx, rect, i, i0, i1, colour, label) {
    if (i < i0 || i >= i1) return;
    const x = Math.round(NM.xOf(i, i0, i1, rect)) + 0.5;
    ctx.save();
    ctx.strokeStyle = colour;
    ctx.beginPath();
    ctx.moveTo(x, rect.y);
    ctx.lineTo(x, rect.y + rect.h);
    ctx.stroke();
    if (label) {
      ctx.fillStyle = colour;
      ctx.font = 'bold 11px system-ui, sans-serif';
      ctx.fillText(label, x + 3, rect.y + 12);
    }
    ctx.restore();
  };

  root.NMDraw = NM;
  if (typeof module === 'object' && module.exports) module.exports = NM;
})(typeof globalThis !== 'undefined' ? globalThis : this);
