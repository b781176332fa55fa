// Pure formatting and classification helpers of the dashboard: no DOM, no fetch. Unit-tested by
// web/test/format.test.mjs with Node's test runner.

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

export function isNum(v) {
  return typeof v === 'number' && Number.isFinite(v);
}

// "—" stands for a reading the hardware does not report: never shown as 0.
export const NA = '—';

export function fmtNum(v, digits = 0) {
  return isNum(v) ? v.toFixed(digits) : NA;
}

export function fmtPct(v, digits = 0) {
  return isNum(v) ? `${v.toFixed(digits)} %` : NA;
}

export function fmtBytes(b) {
  if (!isNum(b)) return NA;
  if (b >= GiB) return `${(b / GiB).toFixed(1)} GiB`;
  if (b >= MiB) return `${(b / MiB).toFixed(0)} MiB`;
  if (b >= 1024) return `${(b / 1024).toFixed(0)} KiB`;
  return `${b} B`;
}

export function fmtMiB(mib) {
  return isNum(mib) ? fmtBytes(mib * MiB) : NA;
}

export function fmtWatts(mw) {
  return isNum(mw) ? `${(mw / 1000).toFixed(0)} W` : NA;
}

// 42 → "42 s", 125 → "2m 05s", 7325 → "2h 02m", 200000 → "2d 07h".
export function fmtDuration(seconds) {
  if (!isNum(seconds)) return NA;
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const pad = (n) => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 86400)}d ${pad(Math.floor((s % 86400) / 3600))}h`;
}

// An ISO time as local "YYYY-MM-DD HH:MM:SS"; NA for null.
export function fmtTime(iso) {
  if (!iso) return NA;
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
         `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// Seconds from now until an ISO time (negative when past).
export function secondsUntil(iso, nowMs = Date.now()) {
  const t = new Date(iso).getTime();
  return Number.isNaN(t) ? NaN : (t - nowMs) / 1000;
}

// "NVIDIA H100 80GB HBM3" → "H100", "NVIDIA A100-SXM4-80GB" → "A100",
// "NVIDIA GeForce RTX 4090" → "RTX 4090", "Tesla V100-SXM2-16GB" → "V100".
export function shortGpuName(name) {
  if (!name) return '';
  let words = String(name).replace(/^(NVIDIA|Tesla|GeForce|Quadro)\s+/gi, '')
                  .replace(/^(NVIDIA|Tesla|GeForce|Quadro)\s+/gi, '').split(/\s+/);
  const families = new Set(['RTX', 'GTX', 'TITAN']);
  if (words.length > 1 && families.has(words[0].toUpperCase())) {
    return `${words[0]} ${words[1].split('-')[0]}`;
  }
  return words[0].split('-')[0];
}

// The jobs table's GPU column: "2 (H100)", with 📊 when the job has monitoring data.
export function gpuColumn(job) {
  const count = isNum(job.gpus) ? job.gpus : 0;
  const model = shortGpuName(job.gpu_model);
  let text = model ? `${count} (${model})` : `${count}`;
  if (job.has_monitoring) text += ' 📊';
  return text;
}

// nvitop's load levels: below the first threshold light, up to the second moderate, then heavy.
export const THRESHOLDS = {
  utilization: [10, 75],
  memory: [10, 80],
  temperature: [60, 80],
  power: [50, 85],  // percent of the power limit
};

export function level(value, kind) {
  if (!isNum(value)) return 'na';
  const [lo, hi] = THRESHOLDS[kind];
  if (value < lo) return 'light';
  if (value < hi) return 'moderate';
  return 'heavy';
}

export function memoryPercent(gpu) {
  if (isNum(gpu.memory_usage_percent)) return gpu.memory_usage_percent;
  if (isNum(gpu.memory_used_bytes) && isNum(gpu.memory_total_bytes) && gpu.memory_total_bytes > 0) {
    return (100 * gpu.memory_used_bytes) / gpu.memory_total_bytes;
  }
  return null;
}

export function powerPercent(gpu) {
  if (isNum(gpu.power_draw_mw) && isNum(gpu.power_limit_mw) && gpu.power_limit_mw > 0) {
    return (100 * gpu.power_draw_mw) / gpu.power_limit_mw;
  }
  return null;
}

// The lease holder(s) of a GPU, as one short text.
export function holders(gpu) {
  const leases = Array.isArray(gpu.leases) ? gpu.leases : [];
  return [...new Set(leases.map((l) => l.owner))].join(', ');
}

// A GPU nobody leased that still works hard (processes of its own, or load) is busy: the
// scheduler offers it, but an operator wants to see it.
export function isBusy(gpu) {
  return gpu.allocation_state === 'free' &&
         ((gpu.process_count ?? 0) > 0 || (isNum(gpu.gpu_util_percent) && gpu.gpu_util_percent >= 10));
}

// Cluster totals for the overview, from GET /api/v1/gpus and /api/v1/nodes.
export function totals(gpus, nodes) {
  const t = {
    gpus: gpus.length, free: 0, leased: 0, shared: 0, busy: 0, lost: 0, unreachable: 0,
    memoryFreeBytes: 0, memoryTotalBytes: 0,
    nodes: nodes.length, nodesReachable: nodes.filter((n) => n.state === 'reachable').length,
  };
  // Each GPU counts once: free (idle), busy (not leased, but working), leased, shared, lost or
  // unreachable.
  for (const g of gpus) {
    const state = isBusy(g) ? 'busy' : g.allocation_state;
    if (state in t) t[state] += 1;
    if (state !== 'unreachable' && state !== 'lost') {
      if (isNum(g.memory_free_bytes)) t.memoryFreeBytes += g.memory_free_bytes;
      if (isNum(g.memory_total_bytes)) t.memoryTotalBytes += g.memory_total_bytes;
    }
  }
  return t;
}

// One cell of a monitoring stats table: "mean (min–max)".
export function statCell(metric, digits = 1) {
  if (!metric || !isNum(metric.mean)) return NA;
  const range = isNum(metric.min) && isNum(metric.max)
      ? ` (${metric.min.toFixed(digits)}–${metric.max.toFixed(digits)})` : '';
  return `${metric.mean.toFixed(digits)}${range}`;
}

// Server-Sent Events framing: splits `buffer` into complete events and the unfinished rest.
// Each event is {event, data, id}; comments (": keep-alive") count as activity, not events.
export function parseSse(buffer) {
  const events = [];
  const text = buffer.replace(/\r\n/g, '\n');
  let start = 0;
  let end;
  while ((end = text.indexOf('\n\n', start)) !== -1) {
    const block = text.slice(start, end);
    start = end + 2;
    const ev = {event: 'message', data: '', id: null};
    const data = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') ev.event = value;
      else if (field === 'data') data.push(value);
      else if (field === 'id') ev.id = value;
    }
    if (data.length > 0) {
      ev.data = data.join('\n');
      events.push(ev);
    }
  }
  return {events, rest: text.slice(start)};
}

// Which API lists to fetch again when the stream says these topics changed.
export function endpointsFor(changed) {
  const want = new Set();
  for (const topic of changed) {
    if (topic === 'nodes') ['nodes', 'gpus'].forEach((e) => want.add(e));
    if (topic === 'allocations') ['allocations', 'gpus', 'queue'].forEach((e) => want.add(e));
    if (topic === 'jobs') ['jobs', 'queue'].forEach((e) => want.add(e));
    if (topic === 'events') want.add('events');
    // A remote lease's share shows on its GPU's card (remote_shares of /gpus).
    if (topic === 'remote_leases' || topic === 'gpu_servers') want.add('gpus');
  }
  return [...want].sort();
}

// Parses the dashboard's address: "#/gpu/node-a/3" → {view: 'gpu', node: 'node-a', index: 3}.
export function parseRoute(hash) {
  const parts = String(hash || '').replace(/^#\/?/, '').split('?')[0].split('/')
                    .filter((p) => p !== '').map(decodeURIComponent);
  switch (parts[0]) {
    case undefined: return {view: 'overview'};
    case 'gpu':
      if (parts.length === 3 && /^\d+$/.test(parts[2])) {
        return {view: 'gpu', node: parts[1], index: Number(parts[2])};
      }
      return {view: 'notfound'};
    case 'jobs': return {view: 'jobs'};
    case 'job': return parts.length === 2 ? {view: 'job', id: parts[1]} : {view: 'notfound'};
    case 'allocations': return {view: 'allocations'};
    case 'events': return {view: 'events'};
    case 'remote': return {view: 'remote'};
    default: return {view: 'notfound'};
  }
}

// ---- chart series --------------------------------------------------------------------------

// The charts of a GPU, in order: the key of each series in historySeries' result.
export const SERIES_KEYS = ['util', 'memory', 'temperature', 'power'];

// A node's GPU history points (GET .../gpus/<i>/history) → chart inputs: times in Unix seconds
// and one array per SERIES_KEYS entry, null where a reading is absent (a gap, never 0). memory is
// a percentage, so it needs the GPU's total (the points have MiB used); without one it is all null.
export function historySeries(points, totalBytes) {
  const list = Array.isArray(points) ? points : [];
  const totalMiB = isNum(totalBytes) && totalBytes > 0 ? totalBytes / MiB : null;
  const pick = (key) => list.map((p) => (isNum(p[key]) ? p[key] : null));
  return {
    times: list.map((p) => p.t_ms / 1000),
    util: pick('gpu_util_percent'),
    memory: list.map((p) => (isNum(p.memory_used_mib) && totalMiB ? (100 * p.memory_used_mib) / totalMiB : null)),
    temperature: pick('temperature_c'),
    power: pick('power_draw_w'),
  };
}

// The points of a job's window: those up to endSeconds (Unix seconds; 1 s of slack for a sample
// taken as the job ended), or all of them while the job runs (endSeconds null).
export function pointsUntil(points, endSeconds) {
  const list = Array.isArray(points) ? points : [];
  if (!isNum(endSeconds)) return list;
  return list.filter((p) => p.t_ms / 1000 <= endSeconds + 1);
}

// Several GPUs on one chart share one time axis: the first GPU's. [{label, h}] (h from
// historySeries) → the same list with every other GPU's values matched to the first's times by
// the whole second, null where a GPU has no sample at that second. The input is not changed.
export function alignToFirst(many) {
  if (!Array.isArray(many) || many.length === 0) return [];
  const base = many[0].h.times;
  return many.map((m, k) => {
    if (k === 0) return m;
    const at = new Map(m.h.times.map((t, i) => [Math.round(t), i]));
    const h = {times: base};
    for (const key of SERIES_KEYS) {
      h[key] = base.map((t) => {
        const i = at.get(Math.round(t));
        return i === undefined ? null : m.h[key][i];
      });
    }
    return {...m, h};
  });
}

// One chart's inputs for [{label, h}] (aligned): the times of the first, and per GPU its series
// of `key` as TimeChart takes it ({label, values}).
export function chartInputs(list, key) {
  const items = Array.isArray(list) ? list : [];
  return {
    times: items.length ? items[0].h.times : [],
    series: items.map((x) => ({label: x.label, values: x.h[key]})),
  };
}

// The CUDA tracer's columns of a GPU detail's process row: launches/s, device memory peak, and
// what an exited process leaked. Blank (not "—") when the process is not traced: tracing may be
// off on that node, which says nothing about the process.
export function cudaCells(proc) {
  const c = proc && proc.cuda;
  if (!c || typeof c !== 'object') return {rate: '', peak: '', leaked: ''};
  const rate = isNum(c.launches_per_second)
    ? (c.launches_per_second >= 100 ? c.launches_per_second.toFixed(0) : c.launches_per_second.toFixed(1))
    : '';
  const peak = isNum(c.device_memory_peak_bytes) ? fmtBytes(c.device_memory_peak_bytes) : '';
  const leaked = c.exited && isNum(c.leaked_bytes) ? fmtBytes(c.leaked_bytes) : '';
  return {rate, peak, leaked};
}
