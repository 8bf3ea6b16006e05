// The dashboard in a real browser: Debian's headless Chromium driven by
// playwright-core (no browser download). The static report and the live
// page load with no console error, every view draws its SVG charts, zoom and
// sorting work, the live page shows a zone recorded after it opened, and
// the span timeline of a large live run shows every span of a 1 ms window.
// Screenshots go to build/screenshots/ (MLPROF_UPDATE_DOCS=1 also refreshes
// docs/screenshot-overview.png).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const build = path.resolve(process.env.MLPROF_BUILD || path.join(root, 'build'));
const mlprof = path.join(build, 'mlprof');
const shots = path.join(build, 'screenshots');
const chromePath = process.env.CHROMIUM || '/usr/bin/chromium';
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'mlprof-browser-'));
const VIEWS = ['overview', 'zones', 'timeline', 'spans', 'memory', 'gpu', 'findings', 'processes'];
// Views that must draw at least one chart on a sampled run without a GPU.
const MUST_DRAW = ['overview', 'zones', 'timeline', 'memory', 'processes'];

let browser;
const children = [];

function run(args, opts = {}) {
  return execFileSync(mlprof, args, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 120000, ...opts });
}

before(async () => {
  fs.mkdirSync(shots, { recursive: true });
  // playwright-core starts Chromium with a fresh, empty profile directory
  // of its own (the equivalent of a new --user-data-dir).
  browser = await chromium.launch({
    executablePath: chromePath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-quic'],
  });
});

after(async () => {
  if (browser) await browser.close();
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
});

// mlprof serve on root at a free port, with options more: {base URL, stop()}.
async function serve(root, ...more) {
  const srv = spawn(mlprof, ['serve', root, '--port', '0', ...more], { stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(srv);
  const base = await new Promise((resolve, reject) => {
    let buf = '';
    srv.stderr.on('data', (d) => {
      buf += d;
      const m = buf.match(/http:\/\/127\.0\.0\.1:(\d+)\//);
      if (m) resolve(`http://127.0.0.1:${m[1]}`);
    });
    setTimeout(() => reject(new Error('serve did not start: ' + buf)), 10000);
  });
  const stop = () => {
    srv.kill('SIGTERM');
    return new Promise((resolve) => srv.on('exit', resolve));
  };
  return { base, stop, pid: srv.pid };
}

async function openPage(url) {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 } });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('requestfailed', (r) => errors.push('request failed: ' + r.url()));
  await page.goto(url);
  await page.waitForSelector('#main .card');
  return { page, errors };
}

// Zooms the span timeline onto a span named `name` until it is drawn as
// itself, a third of the canvas wide, clicks it and returns the rows of its
// details once they are complete (live: the server answered).
async function clickSpan(page, name) {
  await page.click('#tab-spans');
  await page.waitForSelector('#span-canvas[data-drawn]');
  let x;
  for (let i = 0; i < 8; i++) {
    const d = await page.evaluate(() => window.mlprofTimeline.drawn());
    x = d.items.find((y) => y.name === name);
    assert.ok(x, `a span ${name} drawn`);
    if (x.count === 1) break;
    const w = Math.max(x.end - x.begin, 1000);
    await page.evaluate(([a, b]) => window.mlprofTimeline.setView(a, b), [x.begin - w / 4, x.end + w / 4]);
    await page.waitForTimeout(300);
  }
  const w = x.end - x.begin;
  await page.evaluate(([a, b]) => window.mlprofTimeline.setView(a, b), [x.begin - w, x.end + w]);
  await page.waitForTimeout(100);
  const box = await page.locator('#span-canvas').boundingBox();
  await page.mouse.click(box.x + box.width / 2, box.y + x.y);
  await page.waitForSelector('#span-detail');
  let rows;
  await waitFor(async () => {
    rows = await page.$$eval('#span-detail tr', (r) => r.map((t) => [t.children[0].textContent, t.children[1].textContent]));
    return !rows.some((r) => /asking the server/.test(r[1]));
  }, 10000, 'the span details');
  assert.equal(rows[0][1], name);
  return Object.fromEntries(rows);
}

async function countSvg(page) {
  return page.evaluate(() => document.querySelectorAll('#main svg').length);
}

test('static report: every view draws, no console errors', async () => {
  const runDir = path.join(tmp, 'run');
  run(['run', '-q', '-o', runDir, '--sample-ms', '20', '--', path.join(build, 'inference_loop'), '400']);
  const file = path.join(tmp, 'report.html');
  run(['html', runDir, '-o', file, '--title', 'inference_loop 400 <demo>']);
  const { page, errors } = await openPage('file://' + file);
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  for (const view of VIEWS) {
    await page.click('#tab-' + view);
    const n = await countSvg(page);
    if (MUST_DRAW.includes(view)) assert.ok(n >= 1, `${view}: ${n} SVG charts`);
    if (view === 'gpu') assert.match(await page.textContent('#main'), /No GPU sampled/);
    if (view === 'findings') {
      const findings = await page.evaluate(() => JSON.parse(document.getElementById('mlprof-data').textContent).report.findings || []);
      if (findings.length) assert.ok(n >= 1, 'findings: severity chart');
    }
    await page.screenshot({ path: path.join(shots, view + '.png'), fullPage: view !== 'zones' });
  }
  // Zones: sorting by count reorders the table; the flame graph has frames.
  await page.click('#tab-zones');
  const before = await page.$$eval('#zones tbody td.name', (t) => t.map((x) => x.textContent));
  await page.click('#zones th:nth-child(3)');
  const after = await page.$$eval('#zones tbody td.name', (t) => t.map((x) => x.textContent));
  assert.notDeepEqual(before, after);
  assert.ok(await page.$$eval('svg.flame rect', (r) => r.length) > 3);
  // Timeline: drag to zoom, double-click to reset.
  await page.click('#tab-timeline');
  const box = await page.locator('svg.chart').first().boundingBox();
  await page.mouse.move(box.x + box.width * 0.3, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
  assert.match(await page.textContent('#main .hint'), /Zoomed/);
  await page.locator('svg.chart').first().dblclick();
  assert.doesNotMatch(await page.textContent('#main .hint'), /Zoomed/);
  await page.click('#tab-overview');
  await page.screenshot({ path: path.join(shots, 'overview.png'), fullPage: false });
  if (process.env.MLPROF_UPDATE_DOCS === '1')
    fs.copyFileSync(path.join(shots, 'overview.png'), path.join(root, 'docs', 'screenshot-overview.png'));
  assert.deepEqual(requests.filter((u) => !u.startsWith('file:') && !u.startsWith('data:')), []);
  assert.deepEqual(errors, []);
  await page.close();
});

// A tick label in its base unit (ns, bytes, %, W, or a plain number).
const UNITS = { ns: 1, 'µs': 1e3, ms: 1e6, s: 1e9, min: 60e9, B: 1, kB: 1e3, MB: 1e6, GB: 1e9, TB: 1e12, '%': 1, W: 1, '': 1 };
function tickValue(label) {
  const m = /^(-?\d+(?:\.\d+)?)\s*(.*)$/.exec(label);
  assert.ok(m && m[2] in UNITS, `tick label ${JSON.stringify(label)}`);
  return Number(m[1]) * UNITS[m[2]];
}
// Ticks are multiples of one step of 1, 2 or 5 times a power of ten (or of
// whole or half minutes).
function assertRound(labels, what) {
  const v = labels.map(tickValue);
  assert.ok(v.length >= 2, `${what}: ${labels}`);
  const step = v[1] - v[0], p = Math.pow(10, Math.floor(Math.log10(step) + 1e-9));
  const m = Math.round(step / p * 1e6) / 1e6;
  assert.ok([1, 2, 5].includes(m) || (step % 30e9 === 0 && labels.some((l) => / min$/.test(l))), `${what}: step ${step} in ${labels}`);
  v.forEach((x, i) => {
    assert.ok(Math.abs(x / step - Math.round(x / step)) < 1e-6, `${what}: ${labels[i]} not a multiple of ${step}`);
    if (i) assert.ok(Math.abs(x - v[i - 1] - step) <= step * 1e-6, `${what}: uneven ${labels}`);
  });
}

test('axes at round values, one colour per zone in every chart', async () => {
  const file = path.join(tmp, 'report.html');
  const { page, errors } = await openPage('file://' + file + '#timeline');
  const charts = await page.$$eval('#main svg.chart', (gs) => gs.map((g) => ({
    x: [...g.querySelectorAll('text.tick.x')].map((t) => t.textContent),
    y: [...g.querySelectorAll('text.tick.y')].map((t) => t.textContent),
  })));
  assert.ok(charts.length >= 2, `${charts.length} timeline charts`);
  charts.forEach((c, i) => {
    assertRound(c.x, `chart ${i} time axis`);
    assertRound(c.y, `chart ${i} value axis`);
    assert.equal(tickValue(c.y[0]), 0, `chart ${i}: samples >= 0, axis from ${c.y[0]}`);
  });
  // All on the job's time from its start: the same first time tick.
  assert.deepEqual(new Set(charts.map((c) => c.x[0])), new Set([charts[0].x[0]]));
  await page.click('#tab-overview');
  const steps = await page.$$eval('svg.steps text.tick.y', (t) => t.map((x) => x.textContent));
  if (steps.length) assertRound(steps, 'step chart');
  const top = await page.$$eval('#main rect[data-name]', (r) => r.map((x) => [x.getAttribute('data-name'), x.getAttribute('fill')]));
  await page.click('#tab-zones');
  const mean = await page.$$eval('#main rect[data-name]', (r) => r.map((x) => [x.getAttribute('data-name'), x.getAttribute('fill')]));
  const flame = await page.$$eval('svg.flame rect[data-zone]', (r) => r.map((x) => [x.getAttribute('data-zone'), x.getAttribute('fill')]));
  const cats = await page.evaluate(() => Object.fromEntries(JSON.parse(document.getElementById('mlprof-data').textContent).report.zones.map((z) => [z.name, z.category])));
  const colour = {}, byCat = {};
  let shared = 0;
  for (const [name, fill] of top.concat(mean, flame)) {
    if (!(name in cats)) continue; // the step parts' bars
    if (name in colour) { assert.equal(fill, colour[name], `zone ${name}: two colours`); shared++; }
    colour[name] = fill;
    if (cats[name] !== 'none' && cats[name] !== 'user') {
      if (cats[name] in byCat) assert.equal(fill, byCat[cats[name]], `category ${cats[name]}: two colours`);
      byCat[cats[name]] = fill;
    }
  }
  assert.ok(shared > 0 && Object.keys(byCat).length >= 2, `${shared} zones in several charts, categories ${Object.keys(byCat)}`);
  await page.screenshot({ path: path.join(shots, 'zones-colours.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test('hostile zone names stay text', async () => {
  const prog = path.join(tmp, 'hostile.py');
  fs.writeFileSync(prog, [
    'import ctypes, sys',
    'so = ctypes.CDLL(sys.argv[1])',
    'so.mlprof_zone_begin.argtypes = [ctypes.c_char_p]',
    'for n in [b"<img src=x onerror=window.__pwned=1>", b"</script><script>window.__pwned=2</script>", b"\\xff\\xfe bad"]:',
    '    so.mlprof_zone_begin(n); so.mlprof_zone_end()',
    // A span with hostile metadata and units, long enough to click.
    'so.mlprof_zone_begin(b"with_meta"); time.sleep(0.02)',
    'so.mlprof_zone_meta(b"dtype", b"float32")',
    'so.mlprof_zone_meta(b"<img src=x onerror=window.__pwned=3>", b"</script><img src=x onerror=window.__pwned=4>")',
    'so.mlprof_units_add(b"<b>bytes</b>", 123456)',
    'so.mlprof_zone_end()',
  ].join('\n').replace('import ctypes, sys', 'import ctypes, sys, time'));
  const runDir = path.join(tmp, 'hostile');
  run(['run', '-q', '-o', runDir, '--', 'python3', prog, path.join(build, 'libmlprof.so')]);
  const file = path.join(tmp, 'hostile.html');
  run(['html', runDir, '-o', file]);
  const want = {
    dtype: 'float32',
    '<img src=x onerror=window.__pwned=3>': '</script><img src=x onerror=window.__pwned=4>',
    '<b>bytes</b> (units)': '123456 = 123 k',
  };
  const { page, errors } = await openPage('file://' + file);
  for (const view of VIEWS) await page.click('#tab-' + view);
  // The static page holds the metadata of its spans.
  const rows = await clickSpan(page, 'with_meta');
  for (const [k, v] of Object.entries(want)) assert.equal(rows[k], v, k);
  await page.click('#tab-zones');
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.equal(await page.$$eval('#main img', (x) => x.length), 0);
  assert.match(await page.textContent('#zones'), /<img src=x/);
  assert.deepEqual(errors, []);
  await page.close();
  // Served, the server answers them for the span clicked.
  const srv = await serve(tmp);
  const live = await openPage(srv.base + '/run/hostile/#spans');
  const liveRows = await clickSpan(live.page, 'with_meta');
  for (const [k, v] of Object.entries(want)) assert.equal(liveRows[k], v, k);
  assert.match(liveRows.self, /ms$/);
  assert.equal(await live.page.evaluate(() => window.__pwned), undefined);
  assert.equal(await live.page.$$eval('#main img', (x) => x.length), 0);
  assert.deepEqual(live.errors, []);
  await live.page.close();
  await srv.stop();
});

test('compare page: labelled runs side by side, labels stay text', async () => {
  // Three runs of the workload, 1x, 3x and 9x the work, side by side.
  const dirs = [['c1'], ['all200', 'all=200'], ['all800', 'all=800']].map(([name, ...f]) => {
    const dir = path.join(tmp, 'cmp-' + name);
    return { dir, p: spawn(mlprof, ['run', '-q', '-o', dir, '--', path.join(build, 'workload'), '200', ...f], { stdio: 'ignore' }) };
  });
  for (const { p } of dirs) {
    const code = p.exitCode !== null ? p.exitCode : await new Promise((resolve) => p.on('exit', resolve));
    assert.equal(code, 0);
  }
  const labels = ['base', 'x3 <img src=x onerror=window.__pwned=1>', 'x9'];
  const file = path.join(tmp, 'compare.html');
  run(['html', '--labels', labels.join(','), ...dirs.map((d) => d.dir), '-o', file]);
  const { page, errors } = await openPage('file://' + file);
  for (const view of VIEWS) await page.click('#tab-' + view);
  await page.click('#tab-compare');
  assert.equal(await page.getAttribute('#tab-compare', 'class'), 'on');
  // Four zones, three runs: a bar per zone and run.
  assert.equal(await page.$$eval('svg.compare-bars rect', (r) => r.length), 4 * 3);
  // The view draws the embedded comparison (the e2e tests check its ranking:
  // near-ties under load make a per-zone winner here a matter of chance).
  const C = await page.evaluate(() => JSON.parse(document.getElementById('mlprof-data').textContent).compare);
  assert.deepEqual(C.runs.map((r) => r.label), labels);
  assert.equal(await page.textContent('#recommendation'), C.recommendation);
  assert.match(C.recommendation, /^use .* fastest by step time/);
  assert.equal(await page.$$eval('#compare-zones tbody tr', (r) => r.length), 4);
  // The fastest run of each zone is named and its cells marked; a zone
  // where another run is within noise of it says "tie" and marks none.
  const fastest = await page.$$eval('#compare-zones tbody tr', (rows) => rows.map((r) => r.children[1].textContent));
  assert.deepEqual(fastest, C.zones.map((z) => (z.tie ? 'tie' : labels[z.fastest])));
  assert.equal(await page.$$eval('#compare-zones td.fastest', (t) => t.length), 3 * C.zones.filter((z) => !z.tie).length);
  assert.match(await page.textContent('#compare-runs'), /x3 <img src=x onerror/);
  assert.equal(await page.$$eval('#main img', (x) => x.length), 0);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  await page.screenshot({ path: path.join(shots, 'compare.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
  // One run: no Compare tab, and #compare falls back to the overview.
  const one = path.join(tmp, 'one.html');
  run(['html', '--compare', dirs[0].dir, '-o', one]);
  const single = await openPage('file://' + one + '#compare');
  assert.equal(await single.page.$$eval('#tab-compare', (x) => x.length), 0);
  assert.equal(await single.page.getAttribute('#tab-overview', 'class'), 'on');
  assert.deepEqual(single.errors, []);
  await single.page.close();
});

function waitFor(cond, ms, what) {
  const end = Date.now() + ms;
  return new Promise((resolve, reject) => {
    const tick = async () => {
      try { if (await cond()) return resolve(); } catch (e) { /* retry */ }
      if (Date.now() > end) return reject(new Error('timed out waiting for ' + what));
      setTimeout(tick, 200);
    };
    tick();
  });
}

test('live page shows a zone recorded after it opened', async () => {
  const runs = path.join(tmp, 'runs');
  fs.mkdirSync(runs);
  const trigger = path.join(tmp, 'trigger');
  const prog = path.join(tmp, 'live.py');
  fs.writeFileSync(prog, [
    'import ctypes, os, sys, time',
    'so = ctypes.CDLL(sys.argv[1])',
    'so.mlprof_zone_begin.argtypes = [ctypes.c_char_p]',
    'end = time.time() + 30',
    'while time.time() < end:',
    '    so.mlprof_zone_begin(b"tick"); time.sleep(0.02); so.mlprof_zone_end()',
    '    if os.path.exists(sys.argv[2]):',
    '        so.mlprof_zone_begin(b"recorded_after_open"); so.mlprof_zone_end()',
    '        if time.time() > end - 27: pass',
    '    if os.path.exists(sys.argv[2] + ".stop"): break',
  ].join('\n'));
  const rec = spawn(mlprof, ['run', '-q', '-o', path.join(runs, 'job'), '--sample-ms', '50', '--',
    'python3', prog, path.join(build, 'libmlprof.so'), trigger], { stdio: 'ignore' });
  children.push(rec);
  const srv = spawn(mlprof, ['serve', runs, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(srv);
  const base = await new Promise((resolve, reject) => {
    let buf = '';
    srv.stderr.on('data', (d) => {
      buf += d;
      const m = buf.match(/http:\/\/127\.0\.0\.1:(\d+)\//);
      if (m) resolve(`http://127.0.0.1:${m[1]}`);
    });
    setTimeout(() => reject(new Error('serve did not start: ' + buf)), 10000);
  });
  await waitFor(async () => (await fetch(base + '/data/job')).ok, 15000, 'the run to appear');
  const { page, errors } = await openPage(base + '/run/job/');
  await page.click('#tab-zones');
  assert.doesNotMatch(await page.textContent('#main'), /recorded_after_open/);
  fs.writeFileSync(trigger, '');
  await waitFor(async () => /recorded_after_open/.test(await page.textContent('#main')), 8000, 'the new zone');
  await page.click('#tab-timeline');
  assert.ok(await countSvg(page) >= 1);
  await page.screenshot({ path: path.join(shots, 'live.png') });
  assert.match(await page.textContent('#live'), /live · updated/);
  assert.deepEqual(errors, []);
  await page.close();
  fs.writeFileSync(trigger + '.stop', '');
  srv.kill('SIGTERM');
  const code = await new Promise((resolve) => srv.on('exit', resolve));
  assert.equal(code, 0);
  await new Promise((resolve) => { if (rec.exitCode !== null) resolve(); else rec.on('exit', resolve); });
});

// Two runs of the workload side by side, the second with a slower forward.
function workloadRuns(name, jobs) {
  const specs = jobs.map(([dir, ...f]) => path.join(tmp, name + '-' + dir) + (f.length ? ':' + f.join(',') : ''));
  for (const s of specs) fs.mkdirSync(s.split(':')[0]);
  execFileSync(path.join(build, 'workload'), ['--interleave', '2', '200', ...specs], { stdio: 'ignore', timeout: 120000 });
  return specs.map((s) => s.split(':')[0]);
}

test('diff page: verdicts and a distribution per zone and side', async () => {
  const [base, slow] = workloadRuns('diff', [['base'], ['slow', 'forward=40']]);
  const file = path.join(tmp, 'diff.html');
  run(['html', '--diff', base, slow, '-o', file]);
  const { page, errors } = await openPage('file://' + file);
  // The page opens on its Diff view.
  assert.equal(await page.getAttribute('#tab-diff', 'class'), 'on');
  const Df = await page.evaluate(() => JSON.parse(document.getElementById('mlprof-data').textContent).diff);
  const rows = await page.$$eval('#diff-zones tbody tr', (r) => r.map((x) => [x.children[0].textContent, x.children[1].textContent]));
  assert.deepEqual(rows, Df.zones.map((z) => [z.name, z.verdict]));
  assert.deepEqual(rows.find((r) => r[0] === 'forward'), ['forward', 'slower']);
  assert.match(await page.textContent('#diff-verdict'), /^REGRESSION: 1 zone significantly slower by more than 5.0%/);
  // Four zones, two sides: a violin, a box and a median line each.
  assert.equal(await page.$$eval('svg.dist', (s) => s.length), 4);
  assert.equal(await page.$$eval('svg.dist polygon', (s) => s.length), 8);
  assert.equal(await page.$$eval('svg.dist line.median', (s) => s.length), 8);
  // forward's NEW median is drawn right of its BASE median.
  const xs = await page.$$eval('svg.dist', (svgs) => {
    const fw = svgs.find((s) => s.querySelector('title').textContent.startsWith('forward '));
    return Array.from(fw.querySelectorAll('line.median')).map((l) => +l.getAttribute('x1'));
  });
  assert.ok(xs[1] > xs[0] + 100, `medians at ${xs}`);
  for (const view of VIEWS) await page.click('#tab-' + view);
  await page.click('#tab-diff');
  await page.screenshot({ path: path.join(shots, 'diff.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
  // The compare view draws the same distributions, one row per run.
  const cmp = path.join(tmp, 'diff-compare.html');
  run(['html', '--compare', base, slow, '-o', cmp]);
  const c = await openPage('file://' + cmp + '#compare');
  assert.equal(await c.page.$$eval('svg.dist', (s) => s.length), 4);
  assert.equal(await c.page.$$eval('svg.dist polygon', (s) => s.length), 8);
  assert.deepEqual(c.errors, []);
  await c.page.close();
});

// A Python script run with the package built as make python-test builds it.
function python(script, ...args) {
  const prog = path.join(tmp, 'script.py');
  fs.writeFileSync(prog, script.join('\n'));
  execFileSync('/usr/bin/python3', [prog, ...args], { stdio: 'ignore', timeout: 300000,
    env: { ...process.env, PYTHONPATH: path.join(build, 'python') } });
}

test('zones view: line timings as source with a heat bar per line, escaped', async () => {
  const prof = path.join(tmp, 'lines.mlprof');
  python(['import sys, time', 'import mlprof',
    'def work():',
    '    time.sleep(0.09)',
    '    s = "<img src=x onerror=alert(1)>"; time.sleep(0.03)',
    '    return s',
    'with mlprof.Profiler(output=sys.argv[1], lines=[work]):',
    '    work()'], prof);
  const file = path.join(tmp, 'lines.html');
  run(['html', prof, '-o', file]);
  const { page, errors } = await openPage('file://' + file + '#zones');
  const rows = await page.$$eval('table.lines tbody tr', (r) => r.map((x) => ({
    share: parseFloat(x.querySelector('td.heat span').textContent),
    width: parseFloat(x.querySelector('td.heat i').style.width),
    src: x.querySelector('td.src').textContent,
    markup: x.querySelector('td.src').children.length,
  })));
  assert.equal(rows.length, 3, JSON.stringify(rows));
  assert.ok(Math.abs(rows[0].share - 75) <= 5 && Math.abs(rows[1].share - 25) <= 5, JSON.stringify(rows));
  rows.forEach((r) => assert.ok(Math.abs(r.width - r.share) <= 0.1, JSON.stringify(r)));
  assert.match(rows[1].src, /<img src=x onerror=alert\(1\)>/);
  assert.equal(await page.$$eval('#main img', (i) => i.length), 0);
  assert.ok(rows.every((r) => r.markup === 0));
  await page.screenshot({ path: path.join(shots, 'lines.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

test('layers view: one row per module, never-run modules marked', async () => {
  const prof = path.join(tmp, 'layers.mlprof');
  python(['import sys, torch', 'from torch import nn', 'import mlprof, mlprof.torch as mt',
    'class Net(nn.Module):',
    '    def __init__(self):',
    '        super().__init__()',
    '        self.features = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 8, 3))',
    '        self.head = nn.Linear(8 * 4 * 4, 10)',
    '        self.unused = nn.Linear(3, 3)',
    '    def forward(self, x):',
    '        return self.head(self.features(x).flatten(1))',
    'model = Net()',
    'with mlprof.Profiler(output=sys.argv[1]) as prof:',
    '    with mt.profile_model(model, prof, backward_every=1):',
    '        for _ in range(10):',
    '            model(torch.randn(8, 1, 8, 8)).sum().backward()'], prof);
  const file = path.join(tmp, 'layers.html');
  run(['html', prof, '-o', file]);
  const { page, errors } = await openPage('file://' + file + '#layers');
  assert.equal(await page.getAttribute('#tab-layers', 'class'), 'on');
  const rows = await page.$$eval('#layers tbody tr', (r) => r.map((x) => [x.children[0].firstChild.textContent,
    x.children[1].textContent, x.children[2].textContent, x.className]));
  assert.deepEqual(rows.map((r) => r[0]), ['Net', 'features', 'features.0', 'features.1', 'features.2', 'head', 'unused']);
  assert.deepEqual(rows.map((r) => r[1]), ['Net', 'Sequential', 'Conv2d', 'ReLU', 'Conv2d', 'Linear', 'Linear']);
  assert.deepEqual(rows.find((r) => r[0] === 'head').slice(1, 3), ['Linear', '1.29 k']);
  assert.deepEqual(rows.find((r) => r[0] === 'unused').slice(2), ['12', 'never']);
  assert.match(await page.textContent('#layers tr.never'), /never ran/);
  // The slowest leaf is marked, and is one of the leaves.
  const slow = rows.filter((r) => /slowest/.test(r[3])).map((r) => r[0]);
  assert.equal(slow.length, 1);
  assert.ok(['features.0', 'features.1', 'features.2', 'head'].includes(slow[0]), slow[0]);
  // Forward FLOP/s from the flops units: head's 2*8*128*10 + 80 per call.
  const head = await page.$$eval('#layers tbody tr', (r) => r.find((x) => x.children[0].firstChild.textContent === 'head').children[13].textContent);
  assert.equal(head, '20.6 k');
  await page.screenshot({ path: path.join(shots, 'layers.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
  // A profile without layer zones has no Layers tab.
  const plain = await openPage('file://' + path.join(tmp, 'diff.html'));
  assert.equal(await plain.page.$$eval('#tab-layers', (x) => x.length), 0);
  await plain.page.close();
});

test('zones view: Python calls collapse by module', async () => {
  const prof = path.join(tmp, 'calls.mlprof');
  python(['import sys, json', 'import mlprof',
    'class Model:',
    '    def step(self):',
    '        return sum(range(100))',
    'with mlprof.Profiler(output=sys.argv[1], backend="calls"):',
    '    for _ in range(5):',
    '        Model().step()',
    '        json.loads("[1]")'], prof);
  const file = path.join(tmp, 'calls.html');
  run(['html', prof, '-o', file]);
  const { page, errors } = await openPage('file://' + file + '#zones');
  const names = async () => page.$$eval('#zones tbody td.name', (t) => t.map((x) => x.firstChild.textContent));
  const flat = await names();
  assert.ok(flat.includes('json.decoder.JSONDecoder.decode') && flat.includes('Model.step'), flat.join());
  await page.click('#by-module');
  const grouped = await names();
  // json.loads and json.decoder.JSONDecoder.* under two modules; the main
  // script's Model.step has no module and stays a row.
  assert.ok(grouped.includes('▸ json') && grouped.includes('▸ json.decoder'), grouped.join());
  assert.ok(grouped.includes('Model.step'));
  assert.ok(!grouped.some((n) => n.startsWith('json.decoder.JSONDecoder')));
  const counts = await page.$$eval('#zones tr.module', (r) => Object.fromEntries(r.map((x) => [x.getAttribute('data-module'), +x.children[2].textContent])));
  const R = await page.evaluate(() => JSON.parse(document.getElementById('mlprof-data').textContent).report.zones);
  const sum = R.filter((z) => z.name.startsWith('json.decoder.')).reduce((a, z) => a + z.count, 0);
  assert.equal(counts['json.decoder'], sum);
  await page.click('#zones tr.module[data-module="json.decoder"]');
  const open = await names();
  assert.ok(open.includes('▾ json.decoder') && open.includes('json.decoder.JSONDecoder.decode'), open.join());
  assert.deepEqual(errors, []);
  await page.close();
});

// A served run of 10 million spans (2 million steps: a span "step" holding
// four zones of 2 µs, the workload's --after, recorded after the fact in a
// second or two): the page holds a bounded pyramid; zoomed to 1 ms, the
// server sends that window's spans, each drawn as itself, and a click shows
// a span's self time and units from the server. The timings (serve's first
// read, the endpoint, the frame time while panning) and serve's memory are
// printed, not asserted. MLPROF_TIMELINE_STEPS sets the steps.
test('span timeline: 10 M spans served, every span of a 1 ms window, details, keys, frame time', async () => {
  const steps = Number(process.env.MLPROF_TIMELINE_STEPS || 2000000);
  const runs = path.join(tmp, 'tl-runs');
  fs.mkdirSync(runs);
  let t = performance.now();
  run(['run', '-q', '-o', path.join(runs, 'big'), '--', path.join(build, 'workload'), '--after', String(steps)],
    { env: { ...process.env, MLPROF_WORK: '2000' } });
  const recorded = performance.now() - t;
  const srv = await serve(runs);
  assert.equal((await fetch(srv.base + '/timeline/big?t0=5&t1=1')).status, 400);
  assert.equal((await fetch(srv.base + '/span/big?track=x&t0=1&t1=2')).status, 400);
  t = performance.now();
  const data = await (await fetch(srv.base + '/data/big')).json();
  const firstRead = performance.now() - t;
  assert.equal(data.report.spans, 5 * steps);
  assert.equal((await fetch(srv.base + '/span/big?track=99999&t0=1&t1=2')).status, 404);
  console.log(`span timeline, ${5 * steps} spans: recorded in ${(recorded / 1000).toFixed(1)} s, serve's first read ${(firstRead / 1000).toFixed(1)} s`);
  const { page, errors } = await openPage(srv.base + '/run/big/#spans');
  await page.waitForSelector('#span-canvas[data-drawn]');
  const all = await page.evaluate(() => window.mlprofTimeline.drawn());
  assert.ok(all.items.length > 0);
  // The whole run at once draws merged summaries, not 10 million bars.
  assert.ok(all.items.some((x) => x.count > 1), 'summaries at full view');
  const [v0, v1] = await page.evaluate(() => window.mlprofTimeline.view());
  const t0 = Math.round(v0 + (v1 - v0) * 0.37), t1 = t0 + 1000000;
  await page.evaluate(([a, b]) => window.mlprofTimeline.setView(a, b), [t0, t1]);
  await waitFor(async () => (await page.evaluate(() => window.mlprofTimeline.drawn())).res <= 1000, 10000, 'the window from the server');
  const win = await page.evaluate(() => window.mlprofTimeline.drawn());
  const inside = win.items.filter((x) => x.begin >= t0 && x.begin < t1);
  assert.ok(inside.every((x) => x.count === 1), 'each span as itself');
  assert.equal(await page.textContent('#span-note'), '');
  // The same window from mlprof trace: the same spans.
  const trace = JSON.parse(run(['trace', path.join(runs, 'big'), '-o', '-', '--window', `${t0}ns:${t1}ns`]).toString());
  const want = trace.traceEvents.filter((e) => e.ph === 'X').map((e) => e.name).sort();
  assert.ok(want.length > 500, `${want.length} spans in 1 ms`);
  assert.deepEqual(inside.map((x) => x.name).sort(), want);
  // The endpoint's latency for that window and for the whole run, as the
  // page asks (the view and as much again each side, a pixel's resolution).
  const latency = async (a, b) => {
    const ms = [];
    for (let i = 0; i < 5; i++) {
      const s0 = performance.now();
      await (await fetch(`${srv.base}/timeline/big?t0=${Math.max(0, a - (b - a))}&t1=${b + (b - a)}&res=${Math.floor((b - a) / 1300)}`)).arrayBuffer();
      ms.push(performance.now() - s0);
    }
    return ms.sort((x, y) => x - y)[2].toFixed(1);
  };
  console.log(`span timeline endpoint, median of 5: 1 ms window ${await latency(t0, t1)} ms, whole run ${await latency(v0, v1)} ms`);
  // A click shows a span's details: self time from the server, units.
  const load = await clickSpan(page, 'load');
  assert.equal(load.duration, '2.00 µs');
  assert.equal(load.self, '2.00 µs');
  assert.equal(load['samples (units)'], '32');
  const step = await clickSpan(page, 'step');
  assert.equal(step.self, '0 ns');
  assert.equal(step.metadata, 'none');
  // Keys: zoom in, pan right, reset.
  await page.evaluate(([a, b]) => window.mlprofTimeline.setView(a, b), [t0, t1]);
  await page.focus('#span-canvas');
  const w0 = t1 - t0;
  await page.keyboard.press('w');
  await page.waitForTimeout(50);
  let [a, b] = await page.evaluate(() => window.mlprofTimeline.view());
  assert.ok(b - a < w0);
  await page.keyboard.press('ArrowRight');
  await page.waitForTimeout(50);
  const [a2] = await page.evaluate(() => window.mlprofTimeline.view());
  assert.ok(a2 > a);
  await page.keyboard.press('0');
  await page.waitForTimeout(50);
  [a, b] = await page.evaluate(() => window.mlprofTimeline.view());
  assert.deepEqual([a, b], [v0, v1]);
  // Panning for 3 s, a step of 2% each animation frame: the whole run back
  // and forth, and a 10 ms window on through the run (4 widths at least),
  // which must ask the server for the window ahead as it goes, not once it
  // stops. Printed: the time each frame's drawing took, redraws on the
  // server's answers included, and the time between frames, which holds
  // everything the page did meanwhile (the answers' decoding too).
  const stat = (xs) => {
    xs.sort((x, y) => x - y);
    return `mean ${(xs.reduce((x, y) => x + y, 0) / xs.length).toFixed(2)} ms, p95 ${xs[Math.floor(xs.length * 0.95)].toFixed(2)} ms, max ${xs[xs.length - 1].toFixed(2)} ms`;
  };
  for (const [width, back] of [[v1 - v0, true], [10000000, false]]) {
    const r = await page.evaluate(([a, b, ms, back]) => new Promise((resolve) => {
      const T = window.mlprofTimeline, gaps = [];
      T.setView(a, b);
      performance.clearResourceTimings();
      let n0 = null, last = null, start = null, moved = 0;
      const tick = (now) => {
        if (n0 === null) n0 = T.frameMs().length;
        else gaps.push(now - last);
        last = now;
        if (start === null) start = now;
        const [v0, v1] = T.view(), d = (back && Math.floor((now - start) / 1000) % 2 ? -1 : 1) * (v1 - v0) / 50;
        if (now - start < ms || (!back && moved < 4 * (v1 - v0))) {
          T.setView(v0 + d, v1 + d);
          moved += Math.abs(d);
          requestAnimationFrame(tick);
        } else {
          const asked = performance.getEntriesByType('resource').filter((e) => e.name.includes('/timeline/big?') && e.startTime <= now).length;
          resolve({ draw: T.frameMs().slice(n0), gaps, asked });
        }
      };
      requestAnimationFrame(() => requestAnimationFrame(tick));
    }), [t0, t0 + width, 3000, back]);
    console.log(`span timeline panning ${(width / 1e6).toFixed(0)} ms wide, ${5 * steps} spans: draw ${stat(r.draw)}; between frames ${stat(r.gaps)} over ${r.gaps.length} frames; ${r.asked} windows asked of the server`);
    if (!back) assert.ok(r.asked >= 1, 'windows asked while panning');
  }
  // The static page of the same run stays within its budget.
  const html = path.join(tmp, 'tl-big.html');
  run(['html', path.join(runs, 'big'), '-o', html]);
  const size = fs.statSync(html).size;
  console.log(`span timeline: the static page of ${5 * steps} spans is ${(size / 1e6).toFixed(2)} MB`);
  assert.ok(size <= 5e6, `${size} bytes`);
  // Zoomed to 1 ms, it says its spans stay merged there.
  const st = await openPage('file://' + html + '#spans');
  await st.page.waitForSelector('#span-canvas[data-drawn]');
  await st.page.evaluate(([a, b]) => window.mlprofTimeline.setView(a, b), [t0, t1]);
  await st.page.waitForFunction(() => document.querySelector('#span-note').textContent !== '', null, { timeout: 10000 });
  assert.match(await st.page.textContent('#span-note'), /^merged at \d[\d.]* [µm]?s: this page holds no finer level; mlprof serve shows every span$/);
  assert.deepEqual(st.errors, []);
  await st.page.close();
  const mem = fs.readFileSync(`/proc/${srv.pid}/status`, 'utf8').match(/VmHWM:\s+(\d+)/)[1];
  console.log(`span timeline: serve's peak RSS ${(mem / 1024).toFixed(0)} MB for ${5 * steps} spans`);
  await page.screenshot({ path: path.join(shots, 'spans.png') });
  assert.deepEqual(errors, []);
  await page.close();
  await srv.stop();
  // With --window-mb 0 serve reads no chunk again: the kept levels answer
  // the same 1 ms, say so ("coarser"), and the page tells to zoom in.
  const coarse = await serve(runs, '--window-mb', '0');
  const tl = await (await fetch(`${coarse.base}/timeline/big?t0=${t0}&t1=${t1}&res=1000`)).json();
  assert.equal(tl.coarser, true);
  const cp = await openPage(coarse.base + '/run/big/#spans');
  await cp.page.waitForSelector('#span-canvas[data-drawn]');
  await cp.page.evaluate(([a, b]) => window.mlprofTimeline.setView(a, b), [t0, t1]);
  await cp.page.waitForFunction(() => document.querySelector('#span-note').textContent !== '', null, { timeout: 10000 });
  assert.match(await cp.page.textContent('#span-note'), /^merged at \d[\d.]* [µm]?s: zoom in for every span$/);
  assert.ok((await cp.page.evaluate(() => window.mlprofTimeline.drawn())).items.some((x) => x.count > 1));
  assert.deepEqual(cp.errors, []);
  await cp.page.close();
  await coarse.stop();
});

test('distributed view: 4 Open MPI ranks, the straggler, collectives, rank x rank bytes', async (t) => {
  const mpiOps = path.join(build, 'mpi_ops');
  let mpirun;
  try { mpirun = execFileSync('sh', ['-c', 'command -v mpirun.openmpi']).toString().trim(); } catch { mpirun = ''; }
  if (!mpirun || !fs.existsSync(mpiOps)) { t.skip('no Open MPI (scripts/install-deps.sh installs it)'); return; }
  const env = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1', OMPI_MCA_btl: 'self,vader,tcp' };
  const mpi = ['--', mpirun, '-np', '4', '--oversubscribe', mpiOps];
  // Rank 2 works 10 ms longer in each of 20 steps.
  run(['run', '-q', '-o', path.join(tmp, 'straggler'), ...mpi, 'straggler', '20', '10'], { env, timeout: 300000 });
  const file = path.join(tmp, 'dist.html');
  run(['html', path.join(tmp, 'straggler'), '-o', file]);
  const { page, errors } = await openPage('file://' + file + '#distributed');
  assert.equal(await page.getAttribute('#tab-distributed', 'class'), 'on');
  const ranks = await page.$$eval('#dist-ranks tbody tr', (r) => r.map((x) => [x.children[0].textContent, x.className, x.children[5].textContent]));
  assert.deepEqual(ranks.map((r) => r[0]), ['0', '1', '2', '3']);
  assert.deepEqual(ranks.map((r) => r[1]), ['', '', 'straggler', '']);
  assert.deepEqual(ranks.map((r) => r[2]), ['20', '20', '20', '20']);
  assert.match(await page.textContent('#main .grid'), /straggler\s*rank 2, /);
  // The stacked bars: one row per rank, the straggler's label marked.
  assert.deepEqual(await page.$$eval('#dist-bars text.straggler', (x) => x.map((e) => e.textContent)), ['rank 2 straggler']);
  assert.equal(await page.$$eval('#dist-steps rect', (x) => x.length), 20);
  const colls = await page.$$eval('#dist-colls tbody tr', (r) => r.map((x) => [x.children[0].textContent, x.children[2].textContent, x.children[3].textContent]));
  assert.ok(colls.some((c) => c[0] === 'all_reduce' && c[1] === '4' && c[2] === '20'), JSON.stringify(colls));
  assert.match(await page.textContent('#main'), /No point-to-point traffic recorded/);
  await page.screenshot({ path: path.join(shots, 'distributed.png'), fullPage: true });
  // A collective's span: its communicator, bytes and sequence number.
  const coll = await clickSpan(page, 'MPI_Allreduce');
  assert.equal(coll.comm, 'world');
  assert.match(coll['bytes (units)'], /^\d+/);
  assert.match(coll['seq (units)'], /^\d+$/);
  assert.deepEqual(errors, []);
  await page.close();
  // The operations run: each rank sends to the next, so the matrix has a
  // cell on that diagonal alone.
  run(['run', '-q', '-o', path.join(tmp, 'ops'), ...mpi], { env, timeout: 300000 });
  run(['html', path.join(tmp, 'ops'), '-o', file]);
  const ops = await openPage('file://' + file + '#distributed');
  const cells = await ops.page.$$eval('#dist-matrix tbody tr', (r) => r.map((x) => Array.from(x.children).slice(1).map((c) => c.textContent !== '–')));
  assert.deepEqual(cells, [0, 1, 2, 3].map((s) => [0, 1, 2, 3].map((d) => d === (s + 1) % 4)));
  assert.deepEqual(ops.errors, []);
  await ops.page.close();
  // A run of one process has no Distributed tab.
  const plain = await openPage('file://' + path.join(tmp, 'report.html'));
  assert.equal(await plain.page.$$eval('#tab-distributed', (x) => x.length), 0);
  await plain.page.close();
});
