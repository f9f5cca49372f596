// Opens memory pages in headless Chromium and reports what a person would see there, as
// JSON on standard output: the lines listed, a line's figure at the frame under the
// pointer, the marks, two frames compared, the console's errors, a screenshot and how
// much of it is drawn, and when the first paint came. One browser for every job. Node's
// built-ins only: the DevTools protocol over the pipe Chromium opens on fds 3 and 4
// (--remote-debugging-pipe), the PNG read with zlib.
//
// node tests/browser/check_page.mjs JOBS.json
// JOBS.json: {"chromium": path, "timeout_ms": n, "jobs": [{"kind": "static" | "scale" |
// "live", "page": path, "screenshot": path?, "tag": line?, "addr": "host:port"?,
// "min_frames": n?, "width": px?, "height": px?, "window_only": bool?}]}. Every wait is
// bounded; the browser is ended on the way out.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { inflateSync } from 'node:zlib';

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const deadline = Date.now() + (spec.timeout_ms || 60000);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the DevTools protocol over a pipe ----
class Browser {
  constructor(path) {
    this.profile = mkdtempSync(join(tmpdir(), 'nebula-chromium-'));
    const args = ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-default-apps', '--disable-extensions', '--no-first-run', '--no-default-browser-check',
      '--mute-audio', '--hide-scrollbars', '--remote-debugging-pipe',
      '--user-data-dir=' + this.profile, 'about:blank'];
    this.proc = spawn(path, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
    this.stderr = '';
    // Chromium's own complaints about a missing D-Bus are noise here: kept out.
    this.proc.stderr.on('data', (d) => {
      const kept = String(d).split('\n').filter((l) => l && !l.includes('dbus')).join('\n');
      if (kept) this.stderr = (this.stderr + kept + '\n').slice(-4000);
    });
    this.seq = 0;
    this.waiting = new Map();
    this.listeners = [];
    let buf = Buffer.alloc(0);
    this.proc.stdio[4].on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      let end;
      while ((end = buf.indexOf(0)) >= 0) {
        const msg = JSON.parse(buf.subarray(0, end).toString('utf8'));
        buf = buf.subarray(end + 1);
        if (msg.id && this.waiting.has(msg.id)) {
          const { ok, fail } = this.waiting.get(msg.id);
          this.waiting.delete(msg.id);
          if (msg.error) fail(new Error(JSON.stringify(msg.error))); else ok(msg.result);
        } else if (msg.method) {
          for (const l of this.listeners) l(msg);
        }
      }
    });
    this.exited = new Promise((r) => this.proc.on('exit', r));
  }

  send(method, params = {}, sessionId) {
    const id = ++this.seq;
    const msg = { id, method, params };
    if (sessionId) msg.sessionId = sessionId;
    return new Promise((ok, fail) => {
      const left = deadline - Date.now();
      const timer = setTimeout(() => fail(new Error('no answer to ' + method + ' in time')), Math.max(1, left));
      this.waiting.set(id, { ok: (v) => { clearTimeout(timer); ok(v); }, fail: (e) => { clearTimeout(timer); fail(e); } });
      this.proc.stdio[3].write(JSON.stringify(msg) + '\0');
    });
  }

  async close() {
    try { await Promise.race([this.send('Browser.close'), sleep(2000)]); } catch { /* ending anyway */ }
    if (this.proc.exitCode === null) this.proc.kill('SIGKILL');
    await Promise.race([this.exited, sleep(2000)]);
    // Chromium's helper processes may still be writing the profile as the browser goes
    // (seen on a loaded machine): retry, and leave a temporary directory behind rather
    // than fail the check.
    try {
      rmSync(this.profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
    } catch (e) {
      console.error('note: could not remove ' + this.profile + ': ' + e.message);
    }
  }
}

// A tab with its console's errors collected.
async function tab(browser, width, height) {
  const { targetId } = await browser.send('Target.createTarget', { url: 'about:blank' });
  const { sessionId } = await browser.send('Target.attachToTarget', { targetId, flatten: true });
  const t = {
    errors: [],
    send: (m, p) => browser.send(m, p, sessionId),
    close: () => browser.send('Target.closeTarget', { targetId }),
  };
  browser.listeners.push((msg) => {
    if (msg.sessionId !== sessionId) return;
    if (msg.method === 'Runtime.exceptionThrown') {
      const d = msg.params.exceptionDetails;
      t.errors.push('exception: ' + ((d.exception && d.exception.description) || d.text));
    } else if (msg.method === 'Runtime.consoleAPICalled' && ['error', 'assert'].includes(msg.params.type)) {
      t.errors.push('console.' + msg.params.type + ': ' + msg.params.args.map((a) => a.value ?? a.description).join(' '));
    } else if (msg.method === 'Log.entryAdded' && msg.params.entry.level === 'error') {
      t.errors.push('log: ' + msg.params.entry.text + (msg.params.entry.url ? ' (' + msg.params.entry.url + ')' : ''));
    }
  });
  await t.send('Page.enable');
  await t.send('Runtime.enable');
  await t.send('Log.enable');
  await t.send('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: false });
  return t;
}

async function evaluate(t, expression) {
  const r = await t.send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true });
  if (r.exceptionDetails) throw new Error('in the page: ' + (r.exceptionDetails.exception?.description || r.exceptionDetails.text));
  return r.result.value;
}

// Polls `expression` until it is truthy (bounded by `ms` and the whole run's deadline).
async function until(t, expression, ms) {
  const end = Math.min(deadline, Date.now() + ms);
  for (;;) {
    // A page still loading has no document yet: that is a "not yet".
    const v = await evaluate(t, expression).catch(() => null);
    if (v) return v;
    if (Date.now() > end) throw new Error('timed out waiting for: ' + expression);
    await sleep(25);
  }
}

async function mouse(t, type, x, y, extra = {}) {
  await t.send('Input.dispatchMouseEvent', Object.assign({ type, x, y, button: type === 'mouseMoved' ? 'none' : 'left', clickCount: 1 }, extra));
}

// The client point of frame index `i` on chart `which`, halfway up (or at `frac` of it).
const pointOf = (t, which, i, frac = 0.5) => evaluate(t, `(() => {
  const S = NMPage.state, g = S.geo[${JSON.stringify(which)}], box = document.getElementById(${JSON.stringify(which)}).getBoundingClientRect();
  const i = Math.max(S.i0, Math.min(S.i1 - 1, ${i} < 0 ? S.i1 + (${i}) : ${i}));
  return { x: box.left + NMDraw.xOf(i, S.i0, S.i1, g.rect), y: box.top + g.rect.y + g.rect.h * ${1 - frac} };
})()`);

// ---- reading a screenshot ----
// The screenshot's size, how much of it is drawn (not near-white), its colours; and the
// same share inside `region` ({x, y, w, h} in page pixels: the main chart).
function png(buffer, region) {
  let at = 8;
  let width = 0, height = 0, type = 0, depth = 0;
  const idat = [];
  while (at < buffer.length) {
    const len = buffer.readUInt32BE(at);
    const kind = buffer.toString('latin1', at + 4, at + 8);
    const body = buffer.subarray(at + 8, at + 8 + len);
    if (kind === 'IHDR') { width = body.readUInt32BE(0); height = body.readUInt32BE(4); depth = body[8]; type = body[9]; }
    if (kind === 'IDAT') idat.push(body);
    at += 12 + len;
  }
  if (depth !== 8 || (type !== 2 && type !== 6)) throw new Error('PNG of a kind not read here: depth ' + depth + ', type ' + type);
  const bpp = type === 6 ? 4 : 3;
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * bpp;
  const px = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)];
    const src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? px[y * stride + x - bpp] : 0;
      const b = y > 0 ? px[(y - 1) * stride + x] : 0;
      const c = x >= bpp && y > 0 ? px[(y - 1) * stride + x - bpp] : 0;
      const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
      const pred = [0, a, b, (a + b) >> 1, pa <= pb && pa <= pc ? a : pb <= pc ? b : c][f];
      px[y * stride + x] = (src[x] + pred) & 255;
    }
  }
  let drawn = 0, inRegion = 0, regionDrawn = 0;
  const colours = new Set();
  for (let i = 0; i < px.length; i += bpp) {
    const [r, g, b] = [px[i], px[i + 1], px[i + 2]];
    const ink = r < 245 || g < 245 || b < 245;
    if (ink) drawn++;
    if (colours.size < 5000) colours.add((r << 16) | (g << 8) | b);
    if (region) {
      const p = i / bpp, x = p % width, y = Math.floor(p / width);
      if (x >= region.x && x < region.x + region.w && y >= region.y && y < region.y + region.h) {
        inRegion++;
        if (ink) regionDrawn++;
      }
    }
  }
  return { width, height, drawn_fraction: drawn / (width * height), colours: colours.size,
    chart_drawn_fraction: inRegion ? regionDrawn / inRegion : null };
}

// The page as a person sees it: the whole page, or only the window with `window_only`.
async function screenshot(t, path, windowOnly) {
  // The main chart's plot area, in page pixels (the page is at scale 1).
  const region = await evaluate(t, `(() => { const g = NMPage.state.geo.main; if (!g) return null;
    const box = document.getElementById('main').getBoundingClientRect();
    return { x: Math.round(box.left + scrollX + g.rect.x), y: Math.round(box.top + scrollY + g.rect.y),
      w: Math.round(g.rect.w), h: Math.round(g.rect.h) }; })()`);
  const shot = await t.send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: !windowOnly });
  const bytes = Buffer.from(shot.data, 'base64');
  writeFileSync(path, bytes);
  return Object.assign({ path, bytes: bytes.length }, png(bytes, region));
}

const legendValue = (t, tag) => evaluate(t, `(() => {
  const row = [...document.querySelectorAll('#legend tr.series')].find((r) => r.dataset.tag === ${JSON.stringify(tag)});
  return row ? { bytes: Number(row.cells[2].dataset.bytes), text: row.cells[2].textContent } : null;
})()`);

// ---- the jobs ----
async function open(browser, job) {
  const t = await tab(browser, job.width || 1400, job.height || 1000);
  const started = Date.now();
  await t.send('Page.navigate', { url: pathToFileURL(job.page).href + (job.addr ? '#live=' + job.addr : '') });
  await until(t, 'document.documentElement.dataset.firstPaint', 30000);
  const paint = await evaluate(t, `({ first_paint_ms: Number(document.documentElement.dataset.firstPaint),
    frames: Number(document.documentElement.dataset.frames), lines: Number(document.documentElement.dataset.lines),
    last_frame: Number(document.documentElement.dataset.lastFrame) })`);
  return { t, result: Object.assign({ kind: job.kind, page: job.page, wall_ms_to_first_paint: Date.now() - started }, paint) };
}

async function staticJob(browser, job) {
  const { t, result } = await open(browser, job);
  result.series = await evaluate(t, `[...document.querySelectorAll('#legend tr.series')].map((r) => r.dataset.tag)`);
  result.marks = await evaluate(t, `[...document.querySelectorAll('#marks li[data-kind]')].map((li) =>
    ({ kind: li.dataset.kind, tag: li.dataset.tag, frame: Number(li.dataset.frame), text: li.textContent }))`);
  // The pointer on the last frame: the legend gives each line's figure there.
  const last = await pointOf(t, 'main', -1);
  await mouse(t, 'mouseMoved', last.x, last.y);
  await until(t, 'NMPage.state.cursor >= 0', 5000);
  result.hover = {
    frame: await evaluate(t, 'NMPage.state.run.frames[NMPage.state.cursor]'),
    legend_title: await evaluate(t, "document.getElementById('legend-title').textContent"),
    tip: await evaluate(t, "document.getElementById('tip').textContent"),
    value: job.tag ? await legendValue(t, job.tag) : null,
  };
  if (job.tag) {
    // Choose the line: its own chart and budget lines show.
    const name = await evaluate(t, `(() => { const r = [...document.querySelectorAll('#legend tr.series')]
      .find((r) => r.dataset.tag === ${JSON.stringify(job.tag)}).cells[1].getBoundingClientRect();
      return { x: r.left + 20, y: r.top + r.height / 2 }; })()`);
    await mouse(t, 'mousePressed', name.x, name.y);
    await mouse(t, 'mouseReleased', name.x, name.y);
    await until(t, "!document.getElementById('detail').hidden", 5000);
    result.chosen = await evaluate(t, "document.getElementById('detail-title').textContent");
  }
  // Two frames compared: a click at the first frame, a shift-click at the last.
  const a = await pointOf(t, 'main', 0, 0.95);
  const b = await pointOf(t, 'main', -1, 0.95);
  await mouse(t, 'mousePressed', a.x, a.y);
  await mouse(t, 'mouseReleased', a.x, a.y);
  await mouse(t, 'mousePressed', b.x, b.y, { modifiers: 8 });
  await mouse(t, 'mouseReleased', b.x, b.y, { modifiers: 8 });
  await until(t, "!document.getElementById('compare').hidden", 5000);
  result.compare = await evaluate(t, `({ title: document.getElementById('compare-title').textContent,
    rows: [...document.querySelectorAll('#compare-rows tr')].map((r) => ({ tag: r.dataset.tag, gained: Number(r.dataset.gained) })) })`);
  if (job.screenshot) {
    const mid = await pointOf(t, 'main', Math.floor(result.frames * 0.6), 0.3);
    await mouse(t, 'mouseMoved', mid.x, mid.y);
    await sleep(100);
    result.screenshot = await screenshot(t, job.screenshot, job.window_only);
  }
  result.errors = t.errors;
  await t.close();
  return result;
}

async function scaleJob(browser, job) {
  const { t, result } = await open(browser, job);
  if (job.screenshot) result.screenshot = await screenshot(t, job.screenshot, job.window_only);
  result.errors = t.errors;
  await t.close();
  return result;
}

async function liveJob(browser, job) {
  const { t, result } = await open(browser, job);
  const min = job.min_frames || 10;
  try {
    await until(t, `Number(document.documentElement.dataset.frames) >= ${min} && document.documentElement.dataset.live === 'on'`, 30000);
  } catch (e) {
    const status = await evaluate(t, "document.getElementById('live-status').textContent").catch(() => '?');
    throw new Error(e.message + '; the page says: ' + status + '; console: ' + JSON.stringify(t.errors));
  }
  // Hold the page still: the last frame it has, and the line's figure there.
  await evaluate(t, "document.getElementById('follow').click()");
  Object.assign(result, await evaluate(t, `({ frames: Number(document.documentElement.dataset.frames),
    last_frame: Number(document.documentElement.dataset.lastFrame), run: NMPage.state.run.name,
    status: document.getElementById('live-status').textContent,
    series: [...document.querySelectorAll('#legend tr.series')].map((r) => r.dataset.tag) })`));
  result.value = job.tag ? await legendValue(t, job.tag) : null;
  if (job.screenshot) result.screenshot = await screenshot(t, job.screenshot, job.window_only);
  result.errors = t.errors;
  await t.close();
  return result;
}

const browser = new Browser(spec.chromium || 'chromium');
const out = { results: [] };
let failed = false;
try {
  await browser.send('Browser.getVersion').then((v) => { out.browser = v.product; });
  for (const job of spec.jobs) {
    const run = { static: staticJob, scale: scaleJob, live: liveJob }[job.kind];
    out.results.push(await run(browser, job));
  }
} catch (e) {
  failed = true;
  out.error = String(e && e.stack || e);
  out.chromium_stderr = browser.stderr;
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(failed ? 1 : 0);
