// End-to-end test of the dashboard in headless Chromium (Debian's), driven by playwright-core.
// Run by tests/e2e/dashboard_test.sh, which starts a cluster manager with simulated nodes, a
// finished job with monitoring data, and the faulty node a little before its GPU 1 is lost: its
// scenario time stands still until step 7 moves it past the loss (FLYT_FAULTY_CLOCK).
//
// Environment: FLYT_URL, FLYT_TOKEN (admin), FLYT_JOB (a completed job with monitoring),
// FLYT_FAULTY (the faulty node's name), FLYT_FAULTY_CLOCK (its scenario clock file), FLYT_IDLE (a node on the idle scenario: constant
// readings), FLYT_SHOTS (where screenshots go), FLYT_MANAGER_PID (killed at the end to see the
// page degrade), CHROMIUM (default /usr/bin/chromium).
//
// Prints one line per failed check and "N passed, N failed"; exits 1 on any failure.
import {mkdirSync, writeFileSync} from 'node:fs';
import {join} from 'node:path';

import {chromium} from 'playwright-core';

import {gpuColumn, shortGpuName, statCell, totals} from '../src/format.js';

const env = (k) => {
  if (!process.env[k]) throw new Error(`${k} is not set`);
  return process.env[k];
};
const url = env('FLYT_URL');
const token = env('FLYT_TOKEN');
const jobId = env('FLYT_JOB');
const faulty = env('FLYT_FAULTY');
const faultyClock = env('FLYT_FAULTY_CLOCK');
const idle = env('FLYT_IDLE');
const shots = env('FLYT_SHOTS');
mkdirSync(shots, {recursive: true});

let passed = 0;
let failed = 0;
function check(name, ok, detail = '') {
  if (ok) {
    passed += 1;
  } else {
    failed += 1;
    console.log(`FAIL: ${name}${detail ? ` (${detail})` : ''}`);
  }
}
const step = (s) => console.log(`== ${s}`);

async function api(path) {
  const res = await fetch(`${url}/api/v1${path}`, {headers: {Authorization: `Bearer ${token}`}});
  if (!res.ok) throw new Error(`GET ${path}: HTTP ${res.status}`);
  return res.json();
}

async function waitFor(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return null;
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

try {
  // ---- 1. without a token: the prompt; a token typed in opens the dashboard ----------------
  step('1. a token is asked for, and one typed in is used');
  {
    const context = await browser.newContext({viewport: {width: 1280, height: 800}});
    const page = await context.newPage();
    await page.goto(`${url}/`);
    const prompt = await page.waitForSelector('[data-testid=token-prompt]', {timeout: 15000}).catch(() => null);
    check('the page asks for a token', prompt !== null);
    await page.screenshot({path: join(shots, 'token-prompt.png')});
    await page.fill('input[aria-label=token]', 'not-a-token-000000000000');
    await page.click('button[type=submit]');
    const refused = await page.waitForSelector('text=does not know this token', {timeout: 10000}).catch(() => null);
    check('a wrong token is refused clearly', refused !== null);
    await page.fill('input[aria-label=token]', token);
    await page.click('button[type=submit]');
    const overview = await page.waitForSelector('[data-testid=totals]', {timeout: 15000}).catch(() => null);
    check('the right token opens the overview', overview !== null);
    await context.close();
  }

  // ---- 2. the token given once in the URL, then removed from the address bar ------------------
  step('2. the overview shows what the API says');
  const context = await browser.newContext({viewport: {width: 1440, height: 900}});
  const page = await context.newPage();
  const consoleErrors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(`page error: ${e.message}`));
  // Name the request behind a "Failed to load resource" console error.
  page.on('response', (r) => {
    if (r.status() >= 400) consoleErrors.push(`HTTP ${r.status()} for ${r.url().replace(url, '')}`);
  });
  await page.goto(`${url}/?token=${encodeURIComponent(token)}`);
  await page.waitForSelector('[data-testid=gpu-card]', {timeout: 20000});
  check('the token is gone from the address bar', !page.url().includes(token), page.url());
  await page.evaluate(() => {
    window.__flytNoReload = true;
  });
  const live = await waitFor('live', () => page.textContent('[data-testid=connection]').then((t) => t.includes('live')));
  check('the live stream is connected', live);

  // The faulty node's GPU 1 is not lost yet: its loss must reach the page later, live.
  const faultyCard = `[data-testid=gpu-card][data-node="${faulty}"][data-index="1"]`;
  const firstState = await page.textContent(`${faultyCard} [data-testid=state]`).catch(() => 'absent');
  check(`GPU 1 of ${faulty} is shown, not lost yet`, firstState !== 'absent' && firstState !== 'lost', firstState);

  // Numbers: counts from a fresh API read must equal the page's after the next refresh.
  const apiGpus = (await api('/gpus')).gpus;
  const apiNodes = (await api('/nodes')).nodes;
  const t = totals(apiGpus, apiNodes);
  const pageTotal = async (key) => (await page.textContent(`[data-testid=total-${key}] .value`)).trim();
  check('GPU count equals the API', (await pageTotal('total')) === String(t.gpus), `${await pageTotal('total')} vs ${t.gpus}`);
  check('nodes reachable equal the API', (await pageTotal('nodes')) === `${t.nodesReachable} / ${t.nodes}`);
  const leasedShown = await pageTotal('leased');
  check('leased GPUs equal the API', leasedShown === String(t.leased + t.shared), `${leasedShown} vs ${t.leased + t.shared}`);
  const cards = await page.$$('[data-testid=gpu-card]');
  check('one card per GPU', cards.length === apiGpus.length, `${cards.length} vs ${apiGpus.length}`);
  // Each of the idle node's cards must show the API's numbers. Its readings move a little (a
  // sample's utilization may step by a point), so compare against a fresh API read and give the
  // page a few refreshes to catch up: a page that never shows the API's values still fails.
  let idleOk = 0;
  let idleGpus = [];
  const misses = [];
  for (let attempt = 0; attempt < 20; ++attempt) {
    idleGpus = (await api('/gpus')).gpus.filter((g) => g.node === idle);
    idleOk = 0;
    misses.length = 0;
    for (const g of idleGpus) {
      const card = `[data-testid=gpu-card][data-node="${idle}"][data-index="${g.index}"]`;
      const text = await page.textContent(card);
      const want = [shortGpuName(g.name), `util ${g.gpu_util_percent} %`, `${g.temperature_c} °C`];
      if (want.every((w) => text.includes(w))) idleOk += 1;
      else misses.push(`  card ${idle}/${g.index}: "${text}" lacks one of ${JSON.stringify(want)}`);
    }
    if (idleGpus.length > 0 && idleOk === idleGpus.length) break;
    await page.waitForTimeout(500);
  }
  for (const miss of misses) console.log(miss);
  check(`every ${idle} card shows the API's model, utilization and temperature`,
        idleGpus.length > 0 && idleOk === idleGpus.length, `${idleOk}/${idleGpus.length}`);
  await page.screenshot({path: join(shots, 'overview.png'), fullPage: true});

  // ---- 3. GPU detail: charts with data points, processes --------------------------------------
  step('3. a GPU has its own address, charts from the node history and its processes');
  await page.goto(`${url}/#/gpu/${encodeURIComponent(idle)}/0`);
  await page.waitForSelector('[data-testid=gpu-detail]', {timeout: 15000});
  const points = await waitFor('chart points', async () => {
    const n = Number(await page.getAttribute('[data-testid=chart-util]', 'data-points'));
    return n >= 3 ? n : null;
  });
  check('the utilization chart has data points', points !== null, String(points));
  // uPlot drew the series: the canvas holds pixels of the series colour (#4e9af1). It draws on
  // a later frame than the one that set its data (a loaded machine makes that visible): polled.
  const seriesPixels = () => page.evaluate(() => {
    const canvas = document.querySelector('[data-testid=chart-util] canvas');
    if (!canvas) return 0;
    const ctx = canvas.getContext('2d');
    const {data} = ctx.getImageData(0, 0, canvas.width, canvas.height);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (Math.abs(data[i] - 78) < 30 && Math.abs(data[i + 1] - 154) < 30 && Math.abs(data[i + 2] - 241) < 30 && data[i + 3] > 100) n += 1;
    }
    return n;
  });
  const drawn = (await waitFor('series pixels', async () => {
    const n = await seriesPixels();
    return n > 20 ? n : null;
  })) ?? (await seriesPixels());
  check('the chart is drawn (series pixels on the canvas)', drawn > 20, `${drawn} pixels`);
  const history = await api(`/nodes/${encodeURIComponent(idle)}/gpus/0/history?since=-300`);
  check('the API has history for the same GPU', history.points.length >= 3);
  const procRows = await page.$$('[data-testid=processes] tbody tr');
  const apiGpu = await api(`/nodes/${encodeURIComponent(idle)}/gpus/0`);
  check('the processes table lists the GPU\'s processes',
        procRows.length === Math.max(1, apiGpu.processes.length), `${procRows.length} rows, ${apiGpu.processes.length} processes`);
  await page.screenshot({path: join(shots, 'gpu-detail.png'), fullPage: true});

  // ---- 4. jobs table ------------------------------------------------------------------------
  step('4. the jobs table: status, GPU column with 📊');
  await page.click('header nav a[href="#/jobs"]');
  await page.waitForSelector('[data-testid=jobs]', {timeout: 10000});
  const apiJobs = (await api('/jobs?limit=500')).jobs;
  const rows = await page.$$('[data-testid=job-row]');
  check('one row per job', rows.length === apiJobs.length, `${rows.length} vs ${apiJobs.length}`);
  const done = apiJobs.find((j) => j.id === jobId);
  const gpuText = (await page.textContent(`[data-testid=job-row][data-job="${jobId}"] [data-testid=job-gpus]`)).trim();
  check('the finished job\'s GPU column reads like "2 (H100) 📊"', gpuText === gpuColumn(done) && gpuText.endsWith('📊') && /^\d+ \(\w/.test(gpuText), gpuText);
  await page.screenshot({path: join(shots, 'jobs.png'), fullPage: true});

  // ---- 5. job detail -----------------------------------------------------------------------
  step('5. a job\'s detail: gpu_info and the monitoring stats table');
  await page.click(`a[href="#/job/${jobId}"]`);
  await page.waitForSelector('[data-testid=stats-table]', {timeout: 10000});
  const job = await api(`/jobs/${jobId}`);
  const m = job.metrics.gpu_monitoring;
  check('the sample count equals the API', (await page.textContent('[data-testid=monitoring-samples]')) === String(m.sample_count));
  check('the world size equals the API', (await page.textContent('[data-testid=world-size]')) === String(job.gpu_info.world_size));
  check('the device ids equal the API', (await page.textContent('[data-testid=device-ids]')) === job.gpu_info.device_ids.join(', '));
  check('the allocation method is shown', (await page.textContent('[data-testid=allocation-method]')) === job.gpu_info.allocation_method);
  let cellsOk = 0;
  let cells = 0;
  for (const [index, g] of Object.entries(m.gpu_stats)) {
    for (const key of ['utilization', 'memory_usage_percent', 'temperature_c', 'power_draw_w']) {
      cells += 1;
      const text = await page.textContent(`[data-testid=stats-row][data-gpu="${index}"] td[data-stat=${key}]`);
      if (text === statCell(g[key])) cellsOk += 1;
      else console.log(`  GPU ${index} ${key}: page "${text}", API ${statCell(g[key])}`);
    }
  }
  check('every stats cell is the API\'s mean (min–max)', cells > 0 && cellsOk === cells, `${cellsOk}/${cells}`);
  await page.waitForSelector('[data-testid=chart-util]', {timeout: 10000}).catch(() => null);
  const jobPoints = Number(await page.getAttribute('[data-testid=chart-util]', 'data-points').catch(() => 0));
  check('the job\'s charts have its window of history', jobPoints > 0, String(jobPoints));
  await page.screenshot({path: join(shots, 'job-detail.png'), fullPage: true});

  // ---- 6. allocations and queue, events ---------------------------------------------------------
  step('6. allocations with countdowns, the queue and its reasons, events');
  await page.click('header nav a[href="#/allocations"]');
  await page.waitForSelector('[data-testid=leases]', {timeout: 10000});
  const apiLeases = (await api('/allocations')).allocations;
  const leaseRows = await page.$$('[data-testid=lease-row]');
  check('one row per lease', leaseRows.length === apiLeases.length, `${leaseRows.length} vs ${apiLeases.length}`);
  if (leaseRows.length > 0) {
    const a = await page.textContent('[data-testid=expires-in]');
    await page.waitForTimeout(2100);
    const b = await page.textContent('[data-testid=expires-in]');
    check('the expiry counts down', a !== b, `${a} then ${b}`);
  }
  const apiQueue = (await api('/queue')).queue;
  const queueRows = await page.$$('[data-testid=queue-row]');
  check('one row per queued job', queueRows.length === apiQueue.length, `${queueRows.length} vs ${apiQueue.length}`);
  if (apiQueue.length > 0) {
    // The per-node details move with every heartbeat; the first clause does not.
    const reason = await page.textContent('[data-testid=queue-row] td.reason');
    const clause = (r) => String(r).split(';')[0];
    check('a queued job says why it waits', reason.length > 0 && clause(reason) === clause(apiQueue[0].reason),
          `page "${reason}", API "${apiQueue[0].reason}"`);
  }
  await page.screenshot({path: join(shots, 'allocations.png'), fullPage: true});
  await page.click('header nav a[href="#/events"]');
  await page.waitForSelector('[data-testid=event-row]', {timeout: 10000});
  await page.screenshot({path: join(shots, 'events.png'), fullPage: true});

  // ---- 7. a change on the node reaches the page live -------------------------------------------
  step(`7. GPU 1 of ${faulty} is lost: the page shows it without a reload`);
  await page.click('header nav a[href="#/"]');
  writeFileSync(faultyClock, '125\n');  // past the scenario's loss at 120 s
  const lost = await waitFor('lost', async () => (await page.textContent(`${faultyCard} [data-testid=state]`)) === 'lost', 90000);
  check('the lost GPU shows as lost', lost !== null);
  check('the lost count rose', Number(await pageTotal('lost')) >= 1);
  check('the page was not reloaded', await page.evaluate(() => window.__flytNoReload === true));
  await page.screenshot({path: join(shots, 'overview-gpu-lost.png'), fullPage: true});
  await page.click('header nav a[href="#/events"]');
  const lostEvent = await waitFor('event', () => page.$('[data-testid=event-row][data-kind="gpu.lost"]'), 15000);
  check('the events view lists gpu.lost', lostEvent !== null);

  // ---- 8. a narrow window ---------------------------------------------------------------------
  step('8. a narrow window');
  await page.setViewportSize({width: 390, height: 844});
  await page.click('header nav a[href="#/"]');
  await page.waitForTimeout(500);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check('nothing overflows sideways at 390 px', overflow <= 1, `${overflow} px`);
  await page.screenshot({path: join(shots, 'overview-narrow.png'), fullPage: false});

  check('no console errors', consoleErrors.length === 0, consoleErrors.join(' | '));

  // ---- 9. the manager goes away: the page says so ----------------------------------------------
  step('9. the manager stops answering: the page says so clearly');
  await page.setViewportSize({width: 1440, height: 900});
  if (process.env.FLYT_MANAGER_PID) {
    process.kill(Number(process.env.FLYT_MANAGER_PID), 'SIGKILL');
    const stale = await page.waitForSelector('[data-testid=stale]', {timeout: 30000}).catch(() => null);
    check('a banner says the data may be out of date', stale !== null);
    const conn = await page.textContent('[data-testid=connection]');
    check('the connection state says unreachable', conn.includes('unreachable'), conn);
    await page.screenshot({path: join(shots, 'manager-unreachable.png')});
  }
  await context.close();
} catch (e) {
  failed += 1;
  console.log(`FAIL: ${e.stack || e}`);
} finally {
  await browser.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
