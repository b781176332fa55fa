// The dashboard's "Remote GPUs" view and the GPU cards' shares in headless Chromium (Debian's),
// driven by playwright-core, against a fake cluster manager on loopback: this script serves the
// built dashboard and answers the API in the shapes of docs/api.md ("Remote leases") from lists it
// holds, so the page is checked against known answers — a ready lease counting down, a failed one
// with its reason, a starting one without a server, a client that never registered, a lease that
// arrives through the live stream — and against a manager of an older version that has no
// remote-GPU endpoints and no SM counts.
//
// Environment: as web/test/e2e_lib.mjs says. Prints one line per failed check and "N passed, N
// failed"; exits 1 on any failure, 77 (skipped) when Chromium, playwright-core or the built
// dashboard is missing.
import {join} from 'node:path';

import {checker, quietCluster, requireBrowser, serveDashboard, shots, waitFor} from './e2e_lib.mjs';

const {check, step, finish} = checker();
const browser = await requireBrowser();

// ---- the fake cluster manager ----------------------------------------------------------------

const GiB = 1024 * 1024 * 1024;
const started = Date.now();
const iso = (ms) => new Date(ms).toISOString();
const H100 = 'NVIDIA H100 80GB HBM3';

const lease = (id, client, state, extra = {}) => ({
  id, kind: 'remote', owner: 'admin', client, node: 'node-b',
  gpu: {uuid: 'GPU-b0', index: 0, name: H100}, sm_count: 64, sm_count_asked: 60, memory_mb: 40000,
  state, granted_at: iso(started), expires_at: iso(started + 90000), ttl_seconds: 90,
  expires_in_seconds: 90, labels: {}, ...extra,
});

const state = {
  mode: 'full',  // 'old': a manager before remote leases
  leases: [
    lease('rlease-000000000001', 'client-1', 'ready',
          {server: {address: '127.0.0.2:12503', state: 'running', pid: 4242}}),
    lease('rlease-000000000002', 'client-1', 'failed',
          {sm_count: 32, memory_mb: 8000, reason: 'GPU server exited with signal 9',
           server: {address: '127.0.0.2:12504', state: 'failed'}}),
    // A starting lease: no server yet, and (an older field set) no expires_at.
    lease('rlease-000000000003', 'client-9', 'starting',
          {sm_count: 8, memory_mb: 1000, expires_at: undefined, expires_in_seconds: 45}),
  ],
};

function gpus() {
  const base = (index, uuid) => ({
    node: 'node-b', index, uuid, name: H100, allocation_state: 'free', lost: false,
    gpu_util_percent: 20, memory_used_bytes: 10 * GiB, memory_total_bytes: 80 * GiB,
    memory_free_bytes: 70 * GiB, temperature_c: 40, power_draw_mw: 200000, power_limit_mw: 700000,
    score: 0.9, leases: [], process_count: 0,
  });
  const g0 = base(0, 'GPU-b0');
  const g1 = base(1, 'GPU-b1');
  if (state.mode === 'full') {
    g0.allocation_state = 'shared';
    Object.assign(g0, {sm_count: 132, sm_free: 36, remote_shares: [
      {lease_id: 'rlease-000000000001', client: 'client-1', sm_count: 64, memory_mb: 40000, state: 'ready'},
      {lease_id: 'rlease-000000000002', client: 'client-1', sm_count: 32, memory_mb: 8000, state: 'failed'},
    ]});
    Object.assign(g1, {sm_count: 132, sm_free: 132, remote_shares: []});
  }
  return [g0, g1];
}

// The actions the page posted: [path, body].
const posted = [];

function answer(path, method = 'GET', body = null) {
  if (method === 'POST') {
    posted.push([path, body]);
    if (path === '/api/v1/remote-leases/rlease-000000000001/migrate') {
      if (body && body.node === 'node-z') {
        return [409, {error: 'remote lease rlease-000000000001 stays on node-b:0: no GPU can hold it', code: 'migration_failed'}];
      }
      const l = state.leases[0];
      return [200, {...l, node: body.node, migration: {from: {node: 'node-b', gpu: 0}, to: {node: body.node, gpu: body.gpu ?? 0},
                                                        moved: 1, pause_ms_max: 41.25}}];
    }
    if (path === '/api/v1/remote-leases/rlease-000000000001/resize') {
      const l = state.leases[0];
      return [200, {...l, sm_count: body.sm_count ?? l.sm_count, memory_mb: body.memory_mb ?? l.memory_mb,
                    resize: {server: {sm_count_granted: body.sm_count, clients: 1, clients_applied: 1}}}];
    }
    if (path === '/api/v1/nodes/node-b/drain') return [200, {node: 'node-b', cordoned: true, moved: 1, failed: 0}];
    return [404, {error: `no such endpoint: ${path}`, code: 'not_found'}];
  }
  const remote = ['/api/v1/remote-leases', '/api/v1/gpu-servers', '/api/v1/clients'];
  if (state.mode === 'old' && remote.includes(path)) {
    return [404, {error: `no such endpoint: ${path} (see docs/api.md)`, code: 'not_found'}];
  }
  const quiet = quietCluster(path, {
    who: 'admin', gpus,
    node: {name: 'node-b', state: 'reachable', gpu_count: 2, gpu_model: H100, seconds_since_heartbeat: 1, labels: {}},
  });
  if (quiet) return quiet;
  switch (path) {
    case '/api/v1/remote-leases':
      return [200, {remote_leases: state.leases.map(({secret, ...l}) => l)}];
    case '/api/v1/gpu-servers':
      return [200, {servers: [
        {node: 'node-b', lease_id: 'rlease-000000000001', gpu_uuid: 'GPU-b0', gpu_index: 0,
         state: 'running', address: '127.0.0.2:12503', pid: 4242, sm_count: 60, sm_count_granted: 64,
         memory_mb: 40000, started_at: iso(started)},
        {node: 'node-b', lease_id: 'rlease-000000000002', gpu_uuid: 'GPU-b0', gpu_index: 0,
         state: 'failed', address: '127.0.0.2:12504', pid: 4250, sm_count: 32, memory_mb: 8000,
         started_at: started - 60000, reason: 'exited with signal 9'},
      ]}];
    case '/api/v1/clients':
      return [200, {clients: [
        {name: 'client-1', address: '10.0.0.7', labels: {rack: 'r2'}, registered_at: iso(started),
         last_seen: iso(started), leases: 0,
         remote_leases: ['rlease-000000000001', 'rlease-000000000002']},
      ]}];
    default: return [404, {error: `no such endpoint: ${path}`, code: 'not_found'}];
  }
}

const fake = await serveDashboard(answer);
const {url, streams, announce} = fake;

// "1m 29s" / "45 s" / "2h 03m" → seconds (NaN for "—").
function seconds(text) {
  const t = String(text).trim();
  let m = t.match(/^(\d+) s$/);
  if (m) return Number(m[1]);
  m = t.match(/^(\d+)m (\d+)s$/);
  if (m) return Number(m[1]) * 60 + Number(m[2]);
  return NaN;
}

try {
  step('1. the Remote GPUs view shows the leases with their shares, state, server and GPU');
  const context = await browser.newContext({viewport: {width: 1440, height: 1000}});
  const page = await context.newPage();
  const problems = [];
  page.on('console', (m) => {
    // The refused move (409) is the browser's own line about the answer, not the page's error.
    if (m.type() === 'error' && !m.text().includes('status of 409')) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  await page.goto(`${url}/?token=viewer-token#/remote`);
  const rows = await waitFor(async () => (await page.$$('[data-testid=remote-lease-row]')).length === 3);
  check('three remote leases are listed', rows !== null,
        `${(await page.$$('[data-testid=remote-lease-row]')).length} rows`);
  const row = (id) => `[data-testid=remote-lease-row][data-lease="${id}"]`;
  const ready = await page.textContent(row('rlease-000000000001')).catch(() => '');
  for (const want of ['client-1', 'node-b', '#0', 'H100', '64 / 132', '39.1 GiB', 'ready',
                      '127.0.0.2:12503', 'running']) {
    check(`the ready lease shows ${want}`, ready.includes(want), ready);
  }
  check('its GPU links to the GPU', await page.$(`${row('rlease-000000000001')} a[href="#/gpu/node-b/0"]`) !== null);
  const failedRow = await page.textContent(row('rlease-000000000002')).catch(() => '');
  check('the failed lease says why', failedRow.includes('GPU server exited with signal 9'), failedRow);
  check('the failed lease has no countdown',
        (await page.textContent(`${row('rlease-000000000002')} [data-testid=remote-expires]`)).trim() === '—');
  const starting = await page.textContent(`${row('rlease-000000000003')} [data-testid=remote-expires]`);
  check('a lease without expires_at counts down from expires_in_seconds',
        seconds(starting) > 0 && seconds(starting) <= 45, starting);
  check('a lease without a server shows —',
        (await page.textContent(`${row('rlease-000000000003')} [data-testid=remote-server]`)).trim() === '—');

  step('2. the countdown is live');
  const cell = `${row('rlease-000000000001')} [data-testid=remote-expires]`;
  const before = seconds(await page.textContent(cell));
  await page.waitForTimeout(2500);
  const after = seconds(await page.textContent(cell));
  check('the expiry counts down without a refetch', before - after >= 1 && before - after <= 5,
        `${before} then ${after}`);
  check('and matches expires_at', Math.abs(after - (started + 90000 - Date.now()) / 1000) <= 3, String(after));

  step('3. totals, GPU shares, clients and servers');
  const total = async (k) => (await page.textContent(`[data-testid=remote-total-${k}] .value`)).trim();
  check('2 live leases', (await total('live')) === '2', await total('live'));
  check('1 failed lease', (await total('failed')) === '1', await total('failed'));
  check('72 SMs leased (64 + 8)', (await total('sms')) === '72', await total('sms'));
  const shared = '[data-testid=shared-gpu][data-node="node-b"][data-index="0"]';
  check('the shared GPU has a segment per share', (await page.$$(`${shared} [data-testid=share]`)).length === 2);
  const head = await page.textContent(`${shared} [data-testid=shares-head]`).catch(() => '');
  check('its SMs: 96 of 132 shared, 36 free', head.includes('SMs 96 / 132 shared · 36 free'), head);
  check('a GPU without shares is not among them',
        await page.$('[data-testid=shared-gpu][data-index="1"]') === null);
  const client1 = await page.textContent('[data-testid=client-row][data-client="client-1"]').catch(() => '');
  check('client-1 lists its remote leases',
        client1.includes('rlease-000000000001, rlease-000000000002') && client1.includes('10.0.0.7'), client1);
  const client9 = await page.textContent('[data-testid=client-row][data-client="client-9"]').catch(() => '');
  check('a client only a lease names is shown as not registered',
        client9.includes('not registered') && client9.includes('rlease-000000000003'), client9);
  check('two GPU servers', (await page.$$('[data-testid=server-row]')).length === 2);
  const srv = await page.textContent('[data-testid=server-row][data-lease="rlease-000000000002"]').catch(() => '');
  check('the failed server says why', srv.includes('exited with signal 9') && srv.includes('failed'), srv);
  const srv1 = await page.textContent('[data-testid=server-row][data-lease="rlease-000000000001"]').catch(() => '');
  check('a server shows the SMs the device granted', srv1.includes('64') && !srv1.includes('60'), srv1);
  if (shots) await page.screenshot({path: join(shots, 'remote-gpus.png'), fullPage: true});

  step('4. a lease granted later arrives through the live stream');
  await waitFor(async () => streams.size > 0);
  state.leases.push(lease('rlease-000000000004', 'client-2', 'ready',
                          {server: {address: '127.0.0.2:12505', state: 'running'}}));
  announce(['allocations', 'events']);
  const arrived = await waitFor(async () => page.$(row('rlease-000000000004')));
  check('the new lease appears without a reload', arrived !== null);

  step('4b. a ready lease moves and resizes from its row; a refusal is shown');
  const actions = `${row('rlease-000000000001')} [data-testid=lease-actions]`;
  check('a ready lease has Move and Resize', await page.$(`${actions} [data-testid=lease-move]`) !== null &&
        await page.$(`${actions} [data-testid=lease-resize]`) !== null);
  check('a failed lease has none', await page.$(`${row('rlease-000000000002')} [data-testid=lease-actions]`) === null);
  await page.click(`${actions} [data-testid=lease-move]`);
  await page.fill(`${actions} [data-testid=move-to]`, 'node-a:1');
  await page.click(`${actions} [data-testid=move-go]`);
  const moved = await waitFor(async () => {
    const t = await page.textContent(`${actions} [data-testid=lease-action-result]`).catch(() => '');
    return t.includes('moved to node-a:1') ? t : null;
  });
  check('Move posts the target and says where the lease went', moved !== null &&
        JSON.stringify(posted.at(-1)) === JSON.stringify(['/api/v1/remote-leases/rlease-000000000001/migrate', {node: 'node-a', gpu: 1}]),
        `${moved} ${JSON.stringify(posted)}`);
  await page.click(`${actions} [data-testid=lease-move]`);
  await page.fill(`${actions} [data-testid=move-to]`, 'node-z');
  await page.click(`${actions} [data-testid=move-go]`);
  const refusedMove = await waitFor(async () => {
    const t = await page.textContent(`${actions} [data-testid=lease-action-result]`).catch(() => '');
    return t.includes('stays on node-b:0') ? t : null;
  });
  check("a refused move shows the manager's reason", refusedMove !== null);
  await page.click(`${actions} [data-testid=lease-resize]`);
  await page.fill(`${actions} [data-testid=resize-sms]`, '40');
  await page.fill(`${actions} [data-testid=resize-mib]`, '6144');
  await page.click(`${actions} [data-testid=resize-go]`);
  const resized = await waitFor(async () => {
    const t = await page.textContent(`${actions} [data-testid=lease-action-result]`).catch(() => '');
    return t.includes('granted 40 SMs') ? t : null;
  });
  check('Resize posts the share and reports the granted SMs', resized !== null &&
        JSON.stringify(posted.at(-1)) === JSON.stringify(['/api/v1/remote-leases/rlease-000000000001/resize', {sm_count: 40, memory_mb: 6144}]),
        `${resized} ${JSON.stringify(posted.at(-1))}`);

  step('5. each GPU card of the overview shows the shares carved out of it');
  await page.click('header nav a[href="#/remote"]');
  check('the nav has the Remote GPUs view', (await page.getAttribute('header nav a[href="#/remote"]', 'class')) === 'active');
  await page.click('header nav a[href="#/"]');
  const card = '[data-testid=gpu-card][data-node="node-b"][data-index="0"]';
  await page.waitForSelector(card, {timeout: 10000}).catch(() => null);
  const lines = await page.$$eval(`${card} [data-testid=share-line]`, (els) => els.map((e) => e.textContent));
  check('the card lists each share', lines.length === 2 && lines[0] === 'client-1 · 64 SMs · 39.1 GiB' &&
        lines[1] === 'client-1 · 32 SMs · 7.8 GiB · failed', JSON.stringify(lines));
  const cardHead = await page.textContent(`${card} [data-testid=shares-head]`).catch(() => '');
  check('the card says how many SMs are left', cardHead.includes('36 free'), cardHead);
  check('a GPU without shares shows none',
        await page.$('[data-testid=gpu-card][data-index="1"] [data-testid=gpu-shares]') === null);
  if (shots) await page.screenshot({path: join(shots, 'overview-shares.png'), fullPage: true});
  page.once('dialog', (d) => d.accept());
  await page.click('[data-testid=node][data-node="node-b"] [data-testid=node-drain]');
  const drained = await waitFor(async () => {
    const t = await page.textContent('[data-testid=node][data-node="node-b"] [data-testid=node-drain-result]').catch(() => '');
    return t.includes('cordoned; 1 remote lease moved') ? t : null;
  });
  check('Drain (confirmed) posts to the node and says what moved', drained !== null &&
        posted.at(-1)[0] === '/api/v1/nodes/node-b/drain', JSON.stringify(posted.at(-1)));
  check('no console errors', problems.length === 0, problems.join(' | '));
  await context.close();

  step('6. a manager without remote leases: the view says so, the overview is unchanged');
  state.mode = 'old';
  const old = await browser.newContext({viewport: {width: 1280, height: 800}});
  const oldPage = await old.newPage();
  const pageErrors = [];
  oldPage.on('pageerror', (e) => pageErrors.push(e.message));
  await oldPage.goto(`${url}/?token=viewer-token#/remote`);
  const banner = await oldPage.waitForSelector('[data-testid=remote-unsupported]', {timeout: 15000}).catch(() => null);
  check('the view says the manager has no remote-GPU API', banner !== null);
  await oldPage.click('header nav a[href="#/"]');
  const cards = await waitFor(async () => (await oldPage.$$('[data-testid=gpu-card]')).length === 2);
  check('the overview shows its GPUs', cards !== null);
  check('without shares on any card', (await oldPage.$$('[data-testid=gpu-shares]')).length === 0);
  check('no page errors', pageErrors.length === 0, pageErrors.join(' | '));
  await old.close();
} finally {
  await browser.close();
  fake.close();
}
finish();
