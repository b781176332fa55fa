// Pure helpers of the dashboard's GPU usage profiles (the state badge on each GPU card, the
// "Idle but held" list, the profile panel of a GPU): no DOM, no fetch. The input is the "profile"
// each GPU of GET /api/v1/gpus carries (docs/api.md, "GPU profiles"): the node manager's full
// profile, or null when the node sends none (an older node, or [profile] enabled = false). Every
// field may be absent. Unit-tested by web/test/profile.test.mjs with Node's test runner.

import {fmtBytes, fmtDuration, isNum, NA} from './format.js';

export const STATES = ['idle', 'allocated-idle', 'steady', 'cyclic', 'bursty', 'lost', 'unknown'];

// What each state means, for the badge's tooltip.
const MEANING = {
  'idle': 'no process, no compute',
  'allocated-idle': 'memory held by a process that computes nothing',
  'steady': 'a steady load',
  'cyclic': 'a periodic load (e.g. training iterations)',
  'bursty': 'an irregular load',
  'lost': 'the GPU fell off the bus',
  'unknown': 'not enough data yet',
};

function obj(v) {
  return v && typeof v === 'object' && !Array.isArray(v) ? v : null;
}

export function fmtPeriod(seconds) {
  if (!isNum(seconds)) return NA;
  return seconds < 100 ? `${seconds.toFixed(1)} s` : fmtDuration(seconds);
}

// The badge of a GPU's profile: {state, text, title}; null when the GPU has no profile.
export function profileBadge(profile) {
  const p = obj(profile);
  if (!p || typeof p.state !== 'string') return null;
  const state = STATES.includes(p.state) ? p.state : 'unknown';
  const cycle = obj(p.cycle);
  const idle = obj(p.allocated_idle);
  let text = state;
  if (state === 'cyclic' && cycle && isNum(cycle.period_s)) text = `cyclic ${fmtPeriod(cycle.period_s)}`;
  if (state === 'allocated-idle') {
    const secs = idle && isNum(idle.seconds) ? idle.seconds : p.state_seconds;
    if (isNum(secs)) text = `idle, held ${fmtDuration(secs)}`;
  }
  const parts = [MEANING[state]];
  if (isNum(p.state_seconds)) parts.push(`for ${fmtDuration(p.state_seconds)}`);
  if (state === 'cyclic' && cycle && isNum(cycle.confidence)) {
    parts.push(`confidence ${(cycle.confidence * 100).toFixed(0)} %`);
  }
  if (state === 'unknown' && typeof p.insufficient_data === 'string' && p.insufficient_data) {
    parts.push(p.insufficient_data);
  }
  return {state, text, title: parts.join(' · ')};
}

function processText(proc) {
  const who = proc.user ? ` (${proc.user})` : '';
  const mem = isNum(proc.memory_bytes) ? ` ${fmtBytes(proc.memory_bytes)}` : '';
  return `${proc.name || `pid ${proc.pid}`}${who}${mem}`;
}

// The GPUs whose memory is held by processes that compute nothing, the most memory first:
// [{node, index, name, uuid, seconds, memory_bytes, processes: [{pid, name, user, memory_bytes,
// text}], owners: [lease owners]}].
export function idleButHeld(gpus) {
  const out = [];
  for (const g of Array.isArray(gpus) ? gpus : []) {
    const p = obj(g && g.profile);
    if (!p || p.state !== 'allocated-idle') continue;
    const idle = obj(p.allocated_idle) || {};
    const procs = (Array.isArray(idle.processes) && idle.processes.length ? idle.processes
                   : Array.isArray(p.processes) ? p.processes : [])
        .filter((x) => obj(x) && isNum(x.pid))
        .map((x) => ({pid: x.pid, name: x.name ?? null, user: x.user ?? null,
                      memory_bytes: isNum(x.memory_bytes) ? x.memory_bytes : null,
                      text: processText(x)}));
    const memory = isNum(idle.memory_bytes) ? idle.memory_bytes
        : isNum(g.memory_used_bytes) ? g.memory_used_bytes : null;
    const owners = (Array.isArray(g.leases) ? g.leases : [])
        .map((l) => l && l.owner).filter((x) => typeof x === 'string');
    out.push({
      node: g.node ?? null, index: g.index, name: g.name ?? null, uuid: g.uuid ?? null,
      seconds: isNum(idle.seconds) ? idle.seconds : isNum(p.state_seconds) ? p.state_seconds : null,
      memory_bytes: memory, processes: procs, owners: [...new Set(owners)],
    });
  }
  out.sort((a, b) => (b.memory_bytes ?? -1) - (a.memory_bytes ?? -1) ||
                     (b.seconds ?? -1) - (a.seconds ?? -1));
  return out;
}

// How many GPUs are in each state (GPUs without a profile are not counted).
export function stateCounts(gpus) {
  const counts = {};
  for (const g of Array.isArray(gpus) ? gpus : []) {
    const b = profileBadge(g && g.profile);
    if (b) counts[b.state] = (counts[b.state] || 0) + 1;
  }
  return counts;
}

// The profile's window quantiles as rows for a table: [{window, util, memory, power}] where
// each cell is {p50, p95, p99} or null.
export function windowRows(profile) {
  const w = obj(obj(profile) && profile.windows);
  if (!w) return [];
  const q = (x) => (obj(x) && isNum(x.p50) ? {p50: x.p50, p95: x.p95, p99: x.p99} : null);
  return ['1m', '15m', '1h'].filter((k) => obj(w[k])).map((k) => ({
    window: k, util: q(w[k].util_percent), memory: q(w[k].memory_used_bytes), power: q(w[k].power_w),
  }));
}
