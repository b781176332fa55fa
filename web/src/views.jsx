// The dashboard's views. Each takes the shared lists ({data, errors, versions}) and fetches
// whatever else it shows itself.

import {useEffect, useMemo, useState} from 'preact/hooks';

import {get, post} from './api.js';
import {TimeChart} from './chart.jsx';
import {
  alignToFirst, chartInputs, cudaCells, fmtBytes, fmtDuration, fmtMiB, fmtNum, fmtPct, fmtTime, fmtWatts,
  gpuColumn, historySeries, holders, isBusy, isNum, level, memoryPercent, NA, pointsUntil,
  powerPercent, secondsUntil, shortGpuName, statCell, totals,
} from './format.js';
import {IdleButHeld, ProfileBadge, ProfilePanel} from './profile.jsx';
import {GpuShares} from './remote.jsx';
import {follow} from './requests.js';

const enc = encodeURIComponent;

// ---- small pieces --------------------------------------------------------------------------

function Bar({value, kind, label}) {
  const pct = isNum(value) ? Math.max(0, Math.min(100, value)) : 0;
  return (
    <div class={`bar ${level(value, kind)}`} title={label}>
      <div class="fill" style={{width: `${pct}%`}} />
      <span>{label}</span>
    </div>
  );
}

function StateBadge({state}) {
  return <span class={`badge state-${state}`} data-testid="state">{state}</span>;
}

function Loading({error, what}) {
  if (error) return <div class="banner error">Cannot load {what}: {error}</div>;
  return <div class="muted">Loading {what}…</div>;
}

function useNow(ms = 1000) {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

function Labels({labels}) {
  const entries = labels && typeof labels === 'object' ? Object.entries(labels) : [];
  if (entries.length === 0) return null;
  return <span class="labels">{entries.map(([k, v]) => <span class="label">{k}={v}</span>)}</span>;
}

// ---- overview ------------------------------------------------------------------------------

function GpuCard({gpu}) {
  const mem = memoryPercent(gpu);
  const temp = gpu.temperature_c;
  const power = powerPercent(gpu);
  const who = holders(gpu);
  const state = isBusy(gpu) ? 'busy' : gpu.allocation_state;
  return (
    <a class={`gpu-card state-${gpu.allocation_state}`} href={`#/gpu/${enc(gpu.node)}/${gpu.index}`}
       data-testid="gpu-card" data-node={gpu.node} data-index={gpu.index}>
      <div class="gpu-head">
        <span class="gpu-index">#{gpu.index}</span>
        <span class="gpu-name" title={gpu.name}>{shortGpuName(gpu.name) || gpu.name}</span>
        <StateBadge state={state} />
      </div>
      <Bar kind="utilization" value={gpu.gpu_util_percent}
           label={`util ${fmtPct(gpu.gpu_util_percent)}`} />
      <Bar kind="memory" value={mem}
           label={`mem ${fmtBytes(gpu.memory_used_bytes)} / ${fmtBytes(gpu.memory_total_bytes)}`} />
      <div class="gpu-foot">
        <span class={`temp ${level(temp, 'temperature')}`} data-testid="temperature">
          {isNum(temp) ? `${temp} °C` : NA}</span>
        <span class={`power ${level(power, 'power')}`} data-testid="power">
          {fmtWatts(gpu.power_draw_mw)}{isNum(gpu.power_limit_mw) ? ` / ${fmtWatts(gpu.power_limit_mw)}` : ''}
        </span>
        <span class="holder" title="lease holder">{who || ''}</span>
      </div>
      {gpu.profile && <div class="gpu-profile"><ProfileBadge profile={gpu.profile} /></div>}
      <GpuShares gpu={gpu} />
    </a>
  );
}

function Totals({gpus, nodes}) {
  const t = totals(gpus, nodes);
  const items = [
    ['GPUs', t.gpus, 'total'], ['free', t.free, 'free'], ['leased', t.leased + t.shared, 'leased'],
    ['busy', t.busy, 'busy'], ['lost', t.lost, 'lost'], ['unreachable', t.unreachable, 'unreachable'],
  ];
  return (
    <section class="totals" data-testid="totals">
      {items.map(([label, v, key]) => (
        <div class={`total total-${key}`} data-testid={`total-${key}`}>
          <div class="value">{v}</div><div class="muted">{label}</div>
        </div>))}
      <div class="total" data-testid="total-memory-free">
        <div class="value">{fmtBytes(t.memoryFreeBytes)}</div>
        <div class="muted">memory free of {fmtBytes(t.memoryTotalBytes)}</div>
      </div>
      <div class="total" data-testid="total-nodes">
        <div class="value">{t.nodesReachable} / {t.nodes}</div>
        <div class="muted">nodes reachable</div>
      </div>
    </section>
  );
}

// Drain (cordon, and move the node's remote leases elsewhere) or uncordon a node; admins only
// (the manager refuses others, and the refusal is shown).
function NodeDrain({node}) {
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState(null);
  const act = async () => {
    const drain = !node.cordoned;
    if (drain && !window.confirm(`Drain ${node.name}? No new lease will land on it, and its ` +
                                 'remote leases move to other nodes.')) return;
    setBusy(true);
    setResult(null);
    try {
      const a = await post(`/nodes/${enc(node.name)}/${drain ? 'drain' : 'uncordon'}`, {});
      setResult({ok: true, text: drain ? `cordoned; ${a.moved} remote lease${a.moved === 1 ? '' : 's'} moved` +
                                         (a.failed ? `, ${a.failed} could not move` : '')
                                       : 'uncordoned'});
    } catch (e) {
      setResult({ok: false, text: e.message});
    }
    setBusy(false);
  };
  return (
    <span class="node-drain">
      <button type="button" disabled={busy} onClick={act} data-testid="node-drain">
        {busy ? 'working…' : node.cordoned ? 'Uncordon' : 'Drain'}</button>
      {result && <span class={result.ok ? 'muted' : 'reason'} data-testid="node-drain-result"> {result.text}</span>}
    </span>
  );
}

export function Overview({data, errors}) {
  if (!data.gpus || !data.nodes) return <Loading error={errors.gpus || errors.nodes} what="the cluster" />;
  const gpus = data.gpus.gpus;
  const nodes = data.nodes.nodes;
  return (
    <div>
      <Totals gpus={gpus} nodes={nodes} />
      <IdleButHeld gpus={gpus} />
      {nodes.length === 0 && <p class="muted">No node has registered yet. Start flyt-node-manager
        with <code>--cluster-manager</code> on each GPU machine.</p>}
      {nodes.map((n) => {
        const mine = gpus.filter((g) => g.node === n.name);
        return (
          <section class={`node ${n.state}`} data-testid="node" data-node={n.name}>
            <h3>
              <span class={`dot ${n.state}`} />{n.name}
              <span class="muted"> · {n.gpu_count} GPU{n.gpu_count === 1 ? '' : 's'}
                {n.gpu_model ? ` · ${n.gpu_model}` : ''}{n.source === 'simulated' ? ' · simulated' : ''}
                {n.state !== 'reachable' ? ` · silent for ${fmtDuration(n.seconds_since_heartbeat)}` : ''}
              </span>
              <Labels labels={n.labels} />
              {n.cordoned && <span class="badge cordoned" data-testid="node-cordoned">cordoned</span>}
              <NodeDrain node={n} />
            </h3>
            <div class="gpu-grid">{mine.map((g) => <GpuCard gpu={g} />)}</div>
          </section>
        );
      })}
    </div>
  );
}

// ---- GPU detail ----------------------------------------------------------------------------

const WINDOWS = [['5 min', 300, 0], ['15 min', 900, 0], ['1 h', 3600, 10]];

function GpuCharts({h, labelOf = () => 'value', many}) {
  // many: [{label, h}] for several GPUs on one chart (a job, aligned); else one GPU's series.
  const list = many || [{label: labelOf(), h}];
  const chart = (key) => chartInputs(list, key);
  return (
    <div class="charts">
      <TimeChart title="Utilization" unit="%" yRange={[0, 100]} {...chart('util')} testId="chart-util" />
      <TimeChart title="Memory used" unit="%" yRange={[0, 100]} {...chart('memory')} testId="chart-memory" />
      <TimeChart title="Temperature" unit="°C" {...chart('temperature')} testId="chart-temperature" />
      <TimeChart title="Power" unit="W" {...chart('power')} testId="chart-power" />
    </div>
  );
}

export function GpuDetail({node, index, versions}) {
  // What is shown belongs to one GPU (key): while another's answer is awaited, it is not shown
  // under this one's name, and a late answer about the previous GPU is dropped (follow).
  const key = `${node}/${index}`;
  const [shown, setShown] = useState({key: null, gpu: null, error: null});
  const [win, setWin] = useState(WINDOWS[0]);
  const [history, setHistory] = useState({key: null, h: null, error: null});
  const [tick, setTick] = useState(0);

  useEffect(() => follow(
      (signal) => get(`/nodes/${enc(node)}/gpus/${index}`, {signal}),
      (g) => setShown({key, gpu: g, error: null}),
      (e) => setShown((s) => ({key, gpu: s.key === key ? s.gpu : null, error: e.message}))),
  [node, index, versions.nodes, versions.allocations]);

  // The node samples every second or so: redraw every 5 s while the page is open.
  useEffect(() => {
    const t = setInterval(() => setTick((x) => x + 1), 5000);
    return () => clearInterval(t);
  }, []);

  useEffect(() => {
    const [, seconds, step] = win;
    return follow(
        (signal) => get(`/nodes/${enc(node)}/gpus/${index}/history?since=-${seconds}&step=${step}`,
                        {signal}),
        (h) => setHistory({key, h, error: null}),
        (e) => setHistory((s) => ({key, h: s.key === key ? s.h : null, error: e.message})));
  }, [node, index, win, tick]);

  const gpu = shown.key === key ? shown.gpu : null;
  const error = shown.key === key ? shown.error : null;
  const historyError = history.key === key ? history.error : null;
  const points = history.key === key && history.h ? history.h.points : null;
  if (!gpu) return <Loading error={error} what={`GPU ${index} of ${node}`} />;
  const h = points ? historySeries(points, gpu.memory_total_bytes) : null;
  const procs = Array.isArray(gpu.processes) ? gpu.processes : [];
  return (
    <div class="gpu-detail" data-testid="gpu-detail">
      <h2><a href="#/">Overview</a> / {node} / GPU {index}: {gpu.name} <StateBadge state={gpu.allocation_state} /></h2>
      <div class="facts">
        <div><span class="muted">UUID</span> {gpu.uuid}</div>
        <div><span class="muted">PCI</span> {gpu.pci_bus_id || NA}</div>
        <div><span class="muted">utilization</span> <span data-testid="gpu-util">{fmtPct(gpu.gpu_util_percent)}</span></div>
        <div><span class="muted">memory</span> <span data-testid="gpu-memory">{fmtBytes(gpu.memory_used_bytes)} / {fmtBytes(gpu.memory_total_bytes)}</span></div>
        <div><span class="muted">temperature</span> {isNum(gpu.temperature_c) ? `${gpu.temperature_c} °C` : NA}</div>
        <div><span class="muted">power</span> {fmtWatts(gpu.power_draw_mw)} / {fmtWatts(gpu.power_limit_mw)}</div>
        <div><span class="muted">score</span> {fmtNum(gpu.score, 3)}</div>
        <div><span class="muted">leases</span> {gpu.leases.length ? gpu.leases.map((l) => `${l.owner} (${l.lease_id})`).join(', ') : 'none'}</div>
      </div>
      <div class="window">
        History:{' '}
        {WINDOWS.map((w) => (
          <button class={w === win ? 'active' : ''} onClick={() => setWin(w)}>{w[0]}</button>))}
        {historyError && <span class="error"> {historyError}</span>}
        {h && <span class="muted"> {h.times.length} samples</span>}
      </div>
      {h && <GpuCharts h={h} labelOf={() => `GPU ${index}`} />}
      <h3>Usage profile</h3>
      <ProfilePanel profile={gpu.profile} />
      <h3>Processes</h3>
      <table data-testid="processes">
        <thead><tr><th>pid</th><th>user</th><th>command</th><th>type</th><th>memory</th><th>SM %</th>
          <th title="CUDA kernel launches per second (traced)">launches/s</th>
          <th title="peak device memory the process allocated (traced)">mem peak</th>
          <th title="device memory an exited process never freed (traced)">leaked</th></tr></thead>
        <tbody>
          {procs.length === 0 && <tr><td colSpan={9} class="muted">no processes</td></tr>}
          {procs.map((p) => {
            const c = cudaCells(p);
            return (
              <tr data-testid="process-row" data-source={p.source ?? 'nvml'}>
                <td>{p.pid}</td><td>{p.user ?? NA}</td><td class="cmd">{p.command ?? p.name ?? NA}</td>
                <td>{p.type ?? NA}</td><td>{fmtBytes(p.used_memory_bytes)}</td><td>{fmtPct(p.sm_util_percent)}</td>
                <td data-testid="cuda-rate">{c.rate}</td><td data-testid="cuda-peak">{c.peak}</td>
                <td data-testid="cuda-leaked">{c.leaked}</td></tr>);
          })}
        </tbody>
      </table>
    </div>
  );
}

// ---- jobs ----------------------------------------------------------------------------------

const STATUSES = ['', 'queued', 'running', 'completed', 'failed', 'cancelled'];

export function Jobs({data, errors}) {
  const [status, setStatus] = useState('');
  if (!data.jobs) return <Loading error={errors.jobs} what="jobs" />;
  const jobs = data.jobs.jobs.filter((j) => !status || j.status === status);
  return (
    <div>
      <div class="toolbar">
        <label>Status{' '}
          <select value={status} onChange={(e) => setStatus(e.currentTarget.value)}>
            {STATUSES.map((s) => <option value={s}>{s || 'all'}</option>)}
          </select>
        </label>
        <span class="muted">{jobs.length} of {data.jobs.total} jobs</span>
      </div>
      <div class="scroll">
        <table data-testid="jobs">
          <thead><tr><th>job</th><th>status</th><th>task / experiment</th><th>model</th><th>GPUs</th>
            <th>node</th><th>owner</th><th>submitted</th><th>wait</th><th>runtime</th></tr></thead>
          <tbody>
            {jobs.map((j) => (
              <tr data-testid="job-row" data-job={j.id}>
                <td><a href={`#/job/${enc(j.id)}`}>{j.id}</a></td>
                <td><span class={`badge job-${j.status}`}>{j.status}</span></td>
                <td>{j.task_name} <span class="muted">#{j.experiment}</span></td>
                <td>{j.model}</td>
                <td data-testid="job-gpus">{gpuColumn(j)}</td>
                <td>{j.node ?? NA}</td>
                <td>{j.owner}</td>
                <td>{fmtTime(j.submitted_at)}</td>
                <td>{fmtDuration(j.wait_seconds)}</td>
                <td>{fmtDuration(j.runtime_seconds)}</td>
              </tr>))}
          </tbody>
        </table>
      </div>
    </div>
  );
}

const STAT_COLUMNS = [
  ['utilization', 'utilization %'], ['memory_usage_percent', 'memory %'],
  ['memory_used_mb', 'memory MiB'], ['temperature_c', 'temperature °C'], ['power_draw_w', 'power W'],
];

function MonitoringSummary({m}) {
  const gpus = Object.entries(m.gpu_stats || {}).sort((a, b) => Number(a[0]) - Number(b[0]));
  return (
    <section data-testid="monitoring">
      <h3>GPU monitoring</h3>
      <p><span data-testid="monitoring-duration">{fmtDuration(m.monitoring_duration_seconds)}</span>,{' '}
        <span data-testid="monitoring-samples">{m.sample_count}</span> samples. Each cell: mean (min–max).</p>
      <div class="scroll">
        <table data-testid="stats-table">
          <thead><tr><th>GPU</th><th>name</th>{STAT_COLUMNS.map(([, t]) => <th>{t}</th>)}</tr></thead>
          <tbody>
            {gpus.map(([index, g]) => (
              <tr data-testid="stats-row" data-gpu={index}>
                <td>{index}</td><td>{g.name}</td>
                {STAT_COLUMNS.map(([k]) => <td data-stat={k}>{statCell(g[k])}</td>)}
              </tr>))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function JobCharts({job}) {
  const info = job.gpu_info || {};
  const node = info.node;
  const ids = Array.isArray(info.device_ids) ? info.device_ids : [];
  const [loaded, setLoaded] = useState({id: null});
  const start = job.started_at ? new Date(job.started_at).getTime() / 1000 : null;
  const end = job.finished_at ? new Date(job.finished_at).getTime() / 1000 : null;
  useEffect(() => {
    if (!node || !start || ids.length === 0) return undefined;
    return follow(
        (signal) => Promise.all(ids.map((i) => Promise.all([
          get(`/nodes/${enc(node)}/gpus/${i}/history?since=${Math.floor(start)}&step=0`, {signal}),
          get(`/nodes/${enc(node)}/gpus/${i}`, {signal}),
        ]))),
        (all) => setLoaded({id: job.id, many: alignToFirst(all.map(([h, g], k) => ({
          label: `GPU ${ids[k]}`,
          h: historySeries(pointsUntil(h.points, end), g.memory_total_bytes),
        })))}),
        (e) => setLoaded({id: job.id, error: e.message}));
  }, [job.id, job.status]);
  if (!node || !start) return null;
  const state = loaded.id === job.id ? loaded : {};  // nothing of another job's
  if (state.error) return <p class="muted">Charts: the node's history is not available ({state.error}).</p>;
  if (!state.many) return <p class="muted">Loading the GPUs' history…</p>;
  if (state.many[0].h.times.length === 0) {
    return <p class="muted">Charts: the node no longer keeps this job's window (history is kept 1 h).</p>;
  }
  return <GpuCharts many={state.many} />;
}

export function JobDetail({id, versions}) {
  // What is shown belongs to one job: a late answer about the previous one is dropped (follow),
  // and while another job's answer is awaited, the previous job is not shown under its name.
  const [shown, setShown] = useState({id: null, job: null, error: null});
  useEffect(() => follow(
      (signal) => get(`/jobs/${enc(id)}`, {signal}),
      (j) => setShown({id, job: j, error: null}),
      (e) => setShown((s) => ({id, job: s.id === id ? s.job : null, error: e.message}))),
  [id, versions.jobs]);
  const job = shown.id === id ? shown.job : null;
  const error = shown.id === id ? shown.error : null;
  if (!job) return <Loading error={error} what={`job ${id}`} />;
  const info = job.gpu_info && typeof job.gpu_info === 'object' ? job.gpu_info : null;
  const monitoring = job.metrics && job.metrics.gpu_monitoring;
  const facts = [
    ['status', <span class={`badge job-${job.status}`} data-testid="job-status">{job.status}</span>],
    ['task', `${job.task_name} #${job.experiment}`], ['model', job.model],
    ['runtime', job.runtime], ['owner', job.owner], ['priority', job.priority],
    ['submitted', fmtTime(job.submitted_at)], ['started', fmtTime(job.started_at)],
    ['finished', fmtTime(job.finished_at)],
  ];
  if (job.queue_position) facts.push(['queue position', job.queue_position]);
  return (
    <div class="job-detail" data-testid="job-detail">
      <h2><a href="#/jobs">Jobs</a> / {job.id}</h2>
      <div class="facts">{facts.map(([k, v]) => <div><span class="muted">{k}</span> {v}</div>)}</div>
      {job.message && <div class="banner info" data-testid="job-message">{job.message}</div>}
      {job.parameters && <details><summary>parameters</summary><pre>{JSON.stringify(job.parameters, null, 2)}</pre></details>}
      {info && (
        <section data-testid="gpu-info">
          <h3>GPU allocation</h3>
          <div class="facts">
            <div><span class="muted">method</span> <span data-testid="allocation-method">{info.allocation_method}</span></div>
            <div><span class="muted">node</span> {info.node}</div>
            <div><span class="muted">device ids</span> <span data-testid="device-ids">{(info.device_ids || []).join(', ')}</span></div>
            <div><span class="muted">world size</span> <span data-testid="world-size">{info.world_size}</span></div>
            <div><span class="muted">lease</span> {info.lease_id}</div>
          </div>
          <table>
            <thead><tr><th>GPU</th><th>name</th><th>free memory at allocation</th><th>utilization</th><th>score</th></tr></thead>
            <tbody>
              {(info.allocation_details || []).map((g) => (
                <tr><td>{g.index}</td><td>{g.name}</td><td>{fmtMiB(g.memory_free_mb)}</td>
                  <td>{fmtPct(g.utilization_percent)}</td><td data-testid="gpu-score">{fmtNum(g.availability_score, 3)}</td></tr>))}
            </tbody>
          </table>
        </section>)}
      {monitoring && <MonitoringSummary m={monitoring} />}
      {job.metrics && job.metrics.gpu_monitoring_error &&
       <div class="banner error">Monitoring: {job.metrics.gpu_monitoring_error}</div>}
      {info && <JobCharts job={job} />}
    </div>
  );
}

// ---- allocations and queue -----------------------------------------------------------------

function Requirement({r}) {
  if (!r) return NA;
  const parts = [`${r.gpus} GPU${r.gpus === 1 ? '' : 's'}`];
  if (r.min_free_memory_mb > 0) parts.push(`≥ ${fmtMiB(r.min_free_memory_mb)} free each`);
  if (r.gpu_model) parts.push(r.gpu_model);
  if (r.max_utilization < 100) parts.push(`util ≤ ${r.max_utilization} %`);
  parts.push(r.exclusive ? 'exclusive' : 'shared');
  if (r.same_node && r.gpus > 1) parts.push('one node');
  return parts.join(', ');
}

export function Allocations({data, errors}) {
  const now = useNow(1000);
  if (!data.allocations || !data.queue) {
    return <Loading error={errors.allocations || errors.queue} what="allocations" />;
  }
  const leases = data.allocations.allocations;
  const queue = data.queue.queue;
  return (
    <div>
      <h3>Active leases ({leases.length})</h3>
      <div class="scroll">
        <table data-testid="leases">
          <thead><tr><th>lease</th><th>owner</th><th>node</th><th>GPUs</th><th>exclusive</th>
            <th>granted</th><th>expires in</th><th>labels</th></tr></thead>
          <tbody>
            {leases.length === 0 && <tr><td colSpan={8} class="muted">no active leases</td></tr>}
            {leases.map((l) => {
              const left = secondsUntil(l.expires_at, now);
              return (
                <tr data-testid="lease-row">
                  <td>{l.id}</td><td>{l.owner}</td><td>{l.node}</td>
                  <td>{l.gpus.map((g) => <a class="gpu-link" href={`#/gpu/${enc(g.node)}/${g.index}`}>#{g.index}</a>)}</td>
                  <td>{l.exclusive ? 'yes' : 'no'}</td><td>{fmtTime(l.granted_at)}</td>
                  <td class={left < 300 ? 'soon' : ''} data-testid="expires-in">{fmtDuration(left)}</td>
                  <td><Labels labels={l.labels} /></td>
                </tr>);
            })}
          </tbody>
        </table>
      </div>
      <h3>Queue ({queue.length})</h3>
      <div class="scroll">
        <table data-testid="queue">
          <thead><tr><th>#</th><th>job</th><th>task</th><th>owner</th><th>priority</th><th>needs</th>
            <th>waiting</th><th>times out in</th><th>why it waits</th></tr></thead>
          <tbody>
            {queue.length === 0 && <tr><td colSpan={9} class="muted">nothing waits</td></tr>}
            {queue.map((q) => (
              <tr data-testid="queue-row">
                <td>{q.position}</td><td><a href={`#/job/${enc(q.job_id)}`}>{q.job_id}</a></td>
                <td>{q.task_name} <span class="muted">#{q.experiment}</span></td><td>{q.owner}</td>
                <td>{q.priority}</td><td><Requirement r={q.requirement} /></td>
                <td>{fmtDuration(q.waiting_seconds)}</td><td>{fmtDuration(q.timeout_in_seconds)}</td>
                <td class="reason">{q.reason || NA}</td>
              </tr>))}
          </tbody>
        </table>
      </div>
    </div>
  );
}

// ---- events --------------------------------------------------------------------------------

function eventText(e) {
  const skip = new Set(['id', 'kind', 'at', 'node', 'gpu', 'index']);
  const rest = Object.entries(e).filter(([k]) => !skip.has(k));
  if (e.message) return e.message;
  return rest.map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(' ');
}

export function Events({data, errors}) {
  const [kind, setKind] = useState('');
  const events = data.events ? [...data.events.events].reverse() : null;
  const kinds = useMemo(() => (events ? [...new Set(events.map((e) => e.kind))].sort() : []),
                        [data.events]);
  if (!events) return <Loading error={errors.events} what="events" />;
  const shown = events.filter((e) => !kind || e.kind === kind);
  return (
    <div>
      <div class="toolbar">
        <label>Kind{' '}
          <select value={kind} onChange={(e) => setKind(e.currentTarget.value)}>
            <option value="">all</option>
            {kinds.map((k) => <option value={k}>{k}</option>)}
          </select>
        </label>
        <span class="muted">newest first, the latest 200</span>
      </div>
      <div class="scroll">
        <table data-testid="events">
          <thead><tr><th>time</th><th>kind</th><th>node</th><th>GPU</th><th>what</th></tr></thead>
          <tbody>
            {shown.map((e) => (
              <tr data-testid="event-row" data-kind={e.kind} class={`event-${e.kind}`}>
                <td>{fmtTime(e.at)}</td><td>{e.kind}</td><td>{e.node ?? NA}</td>
                <td>{e.gpu ?? e.index ?? NA}</td><td class="reason">{eventText(e)}</td>
              </tr>))}
          </tbody>
        </table>
      </div>
    </div>
  );
}

export function NotFound() {
  return <p>No such page. <a href="#/">Back to the overview</a>.</p>;
}
