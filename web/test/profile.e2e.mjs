// The dashboard's GPU usage profiles in headless Chromium (Debian's), driven by playwright-core,
// against a fake cluster manager on loopback (web/test/e2e_lib.mjs) whose GPUs carry profiles in
// the shape of docs/api.md ("GPU profiles"): each card's state badge with a cyclic GPU's period,
// the "Idle but held" list naming who holds what, a GPU's profile panel, a state change that
// arrives through the live stream, and a node that sends no profiles.
//
// Environment: as web/test/e2e_lib.mjs says. Prints one line per failed check and "N passed, N
// failed"; exits 1 on any failure, 77 (skipped) when Chromium, playwright-core or the built
// dashboard is missing.
import {join} from 'node:path';

import {checker, quietCluster, requireBrowser, serveDashboard, shots, waitFor} from './e2e_lib.mjs';

const {check, step, finish} = checker();
const browser = await requireBrowser();

const GiB = 1024 * 1024 * 1024;
const now = Date.now();
const iso = (ms) => new Date(ms).toISOString();
const H100 = 'NVIDIA H100 80GB HBM3';

const q = (p50, p95, p99) => ({p50, p95, p99, samples: 60});
function profile(index, state, extra = {}) {
  return {
    schema: 1, index, uuid: `GPU-a${index}`, name: H100, computed_at: iso(now), state,
    state_since: iso(now - 95000), state_seconds: 95, insufficient_data: null, cycle: null,
    allocated_idle: null,
    windows: {'1m': {length_s: 60, util_percent: q(80, 97, 99), memory_used_bytes: q(40 * GiB, 42 * GiB, 42 * GiB),
                     power_w: q(500, 650, 690)}},
    memory: {total_bytes: 80 * GiB, peak_used_bytes: 42 * GiB, headroom_bytes: 38 * GiB, peak_window_s: 36},
    processes: [], launches_per_second: null, inputs: ['util'], util_rate_hz: 1, phase_changes: [],
    ...extra,
  };
}

const state = {
  gpu2: 'allocated-idle',
  profiles: true,  // false: a node that sends none
};

function gpus() {
  const base = (index) => ({
    node: 'node-a', index, uuid: `GPU-a${index}`, name: H100, allocation_state: 'free', lost: false,
    gpu_util_percent: 20, memory_used_bytes: 10 * GiB, memory_total_bytes: 80 * GiB,
    memory_free_bytes: 70 * GiB, temperature_c: 40, power_draw_mw: 200000, power_limit_mw: 700000,
    score: 0.9, leases: [], process_count: 0,
  });
  const g = [0, 1, 2, 3].map(base);
  if (!state.profiles) return g;
  g[0].profile = profile(0, 'cyclic', {
    cycle: {period_s: 12.04, confidence: 0.93, method: 'autocorrelation', cycles_in_window: 7.9,
            phase_origin: iso(now - 60000), util_peak_offset_s: 3, util_trough_offset_s: 10.5,
            memory_peak_offset_s: 4, memory_trough_offset_s: 11, next_util_trough_at: iso(now + 4000)},
    phase_changes: [{at: iso(now - 95000), from: 'steady', to: 'cyclic', kind: 'state', detail: 'period 12.0 s'}],
  });
  g[1].profile = profile(1, 'steady');
  g[2].leases = [{lease_id: 'lease-1', owner: 'bob', exclusive: true, kind: 'allocation'}];
  g[2].allocation_state = 'leased';
  g[2].profile = state.gpu2 === 'allocated-idle'
    ? profile(2, 'allocated-idle', {
      allocated_idle: {seconds: 1800, memory_bytes: 30 * GiB, processes: [
        {pid: 4242, name: 'jupyter-lab', user: 'alice', memory_bytes: 30 * GiB}]}})
    : profile(2, state.gpu2);
  g[3].profile = profile(3, 'unknown', {insufficient_data: '12 of 30 samples needed', state_seconds: 12});
  return g;
}

function answer(path) {
  const m = path.match(/^\/api\/v1\/nodes\/node-a\/gpus\/(\d+)$/);
  if (m) return [200, {...gpus()[Number(m[1])], processes: [], node_api_url: 'http://127.0.0.1:1'}];
  if (path.startsWith('/api/v1/nodes/node-a/gpus/')) return [200, {gpu: 0, step_seconds: 1, points: []}];
  return quietCluster(path, {
    who: 'viewer', gpus,
    node: {name: 'node-a', state: 'reachable', gpu_count: 4, gpu_model: H100, seconds_since_heartbeat: 1, labels: {}},
  }) ?? [404, {error: `no such endpoint: ${path}`, code: 'not_found'}];
}

const fake = await serveDashboard(answer);
const {url, streams, announce} = fake;
const card = (i) => `[data-testid=gpu-card][data-node="node-a"][data-index="${i}"]`;
const badge = (i) => `${card(i)} [data-testid=profile-state]`;

try {
  step('1. each GPU card shows its state; a cyclic GPU its period');
  const context = await browser.newContext({viewport: {width: 1440, height: 1000}});
  const page = await context.newPage();
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await page.goto(`${url}/?token=viewer-token#/`);
  const cards = await waitFor(async () => (await page.$$('[data-testid=gpu-card]')).length === 4);
  check('four GPU cards', cards !== null);
  const text = async (sel) => (await page.textContent(sel).catch(() => '')).trim();
  check('GPU 0 is cyclic with its period', (await text(badge(0))) === 'cyclic 12.0 s', await text(badge(0)));
  check('GPU 1 is steady', (await text(badge(1))) === 'steady', await text(badge(1)));
  check('GPU 2 is idle but held for 30 min', (await text(badge(2))) === 'idle, held 30m 00s', await text(badge(2)));
  check('GPU 3 is unknown', (await text(badge(3))) === 'unknown', await text(badge(3)));
  const why = await page.getAttribute(badge(3), 'title').catch(() => '');
  check('the unknown badge says why', (why || '').includes('12 of 30 samples needed'), why);
  const sure = await page.getAttribute(badge(0), 'title').catch(() => '');
  check('the cyclic badge says how sure', (sure || '').includes('confidence 93 %'), sure);

  step('2. the "Idle but held" list names who holds what');
  const rows = await page.$$('[data-testid=idle-held-row]');
  check('one GPU is idle but held', rows.length === 1, String(rows.length));
  const row = await text('[data-testid=idle-held-row][data-node="node-a"][data-index="2"]');
  for (const want of ['node-a #2', '30m 00s', '30.0 GiB', 'jupyter-lab (alice) 30.0 GiB', 'bob']) {
    check(`the row shows ${want}`, row.includes(want), row);
  }
  if (shots) await page.screenshot({path: join(shots, 'overview-profiles.png'), fullPage: true});

  step('3. the GPU page shows the profile');
  await page.click(`[data-testid=idle-held-row][data-index="2"] a`);
  const held = await page.waitForSelector('[data-testid=profile-state][data-state="allocated-idle"]',
                                          {timeout: 15000}).catch(() => null);
  check('the list links to the GPU, whose page shows the state', held !== null && page.url().endsWith('#/gpu/node-a/2'),
        page.url());
  await page.goto(`${url}/?token=viewer-token#/gpu/node-a/0`);
  const panel = await page.waitForSelector('[data-testid=profile]', {timeout: 15000}).catch(() => null);
  check('the profile panel is shown', panel !== null);
  const period = await text('[data-testid=profile-period]');
  check('the period, confidence and method', period.includes('12.0 s') && period.includes('93 %') &&
        period.includes('autocorrelation'), period);
  const windows = await text('[data-testid=profile-windows]');
  check('the windows table', windows.includes('1m') && windows.includes('80 % / 97 % / 99 %') &&
        windows.includes('500 W / 650 W / 690 W'), windows);
  const changes = await text('[data-testid=phase-changes]');
  check('the phase changes', changes.includes('steady → cyclic') && changes.includes('period 12.0 s'), changes);
  if (shots) await page.screenshot({path: join(shots, 'gpu-profile.png'), fullPage: true});

  step('4. a state change arrives through the live stream');
  await page.goto(`${url}/?token=viewer-token#/`);
  await page.waitForSelector(badge(2), {timeout: 10000}).catch(() => null);
  await waitFor(async () => streams.size > 0);
  state.gpu2 = 'bursty';
  announce(['nodes']);
  const moved = await waitFor(async () => (await text(badge(2))) === 'bursty');
  check('GPU 2 becomes bursty without a reload', moved !== null, await text(badge(2)));
  check('and leaves the "Idle but held" list', await page.$('[data-testid=idle-held]') === null);
  check('no console errors', problems.length === 0, problems.join(' | '));
  await context.close();

  step('5. a node that sends no profiles: no badges, no list, the GPU page says so');
  state.profiles = false;
  const old = await browser.newContext({viewport: {width: 1280, height: 800}});
  const oldPage = await old.newPage();
  const errors = [];
  oldPage.on('pageerror', (e) => errors.push(e.message));
  await oldPage.goto(`${url}/?token=viewer-token#/`);
  await waitFor(async () => (await oldPage.$$('[data-testid=gpu-card]')).length === 4);
  check('no state badges', (await oldPage.$$('[data-testid=profile-state]')).length === 0);
  check('no "Idle but held" list', await oldPage.$('[data-testid=idle-held]') === null);
  await oldPage.goto(`${url}/?token=viewer-token#/gpu/node-a/1`);
  const none = await oldPage.waitForSelector('[data-testid=profile-none]', {timeout: 15000}).catch(() => null);
  check('the GPU page says the node sends no profile', none !== null);
  check('no page errors', errors.length === 0, errors.join(' | '));
  await old.close();
} finally {
  await browser.close();
  fake.close();
}
finish();
