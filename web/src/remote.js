// Pure helpers of the dashboard's remote GPUs (the "Remote GPUs" view and the shares on each GPU
// card): no DOM, no fetch. The answers are GET /api/v1/remote-leases, /api/v1/gpu-servers,
// /api/v1/clients and /api/v1/gpus (docs/api.md, "Remote leases"); every field the contract marks
// optional, and every field an older manager does not send, may be absent. Unit-tested by
// web/test/remote.test.mjs with Node's test runner.

import {isNum} from './format.js';

const MiB = 1024 * 1024;

// A remote lease holds its share while it is starting or ready. A failed one keeps it until it
// is released or expires (so that its client learns why), but it no longer runs.
export function isLiveRemote(state) {
  return state === 'starting' || state === 'ready';
}

// Seconds left on a remote lease: until its expires_at; without one, its expires_in_seconds as
// of the answer (fetchedAtMs, when it came) counted down. NaN when neither is known.
export function remoteSecondsLeft(lease, nowMs = Date.now(), fetchedAtMs = nowMs) {
  if (!lease) return NaN;
  const at = lease.expires_at ? new Date(lease.expires_at).getTime() : NaN;
  if (!Number.isNaN(at)) return (at - nowMs) / 1000;
  if (isNum(lease.expires_in_seconds)) return lease.expires_in_seconds - (nowMs - fetchedAtMs) / 1000;
  return NaN;
}

function list(v) {
  return Array.isArray(v) ? v.filter((x) => x && typeof x === 'object') : [];
}

// What is carved out of one GPU (an entry of GET /api/v1/gpus): its SM count, the SMs and MiB
// held by remote leases, what is left, and each share with its part of the GPU in percent (of its
// SMs when the GPU reports them, else of its memory). Fields absent from the answer are null.
export function gpuShares(gpu) {
  const shares = list(gpu && gpu.remote_shares);
  const smTotal = isNum(gpu && gpu.sm_count) && gpu.sm_count > 0 ? gpu.sm_count : null;
  const memoryTotalMiB = isNum(gpu && gpu.memory_total_bytes) && gpu.memory_total_bytes > 0
      ? gpu.memory_total_bytes / MiB : null;
  let smUsed = 0;
  let memoryMiB = 0;
  const out = shares.map((s) => {
    const sm = isNum(s.sm_count) ? s.sm_count : null;
    const mem = isNum(s.memory_mb) ? s.memory_mb : null;
    smUsed += sm ?? 0;
    memoryMiB += mem ?? 0;
    let percent = null;
    if (smTotal && sm !== null) percent = (100 * sm) / smTotal;
    else if (!smTotal && memoryTotalMiB && mem !== null) percent = (100 * mem) / memoryTotalMiB;
    return {
      lease_id: s.lease_id ?? null, client: s.client ?? null, sm_count: sm, memory_mb: mem,
      state: s.state ?? null, percent: percent === null ? null : Math.min(100, Math.max(0, percent)),
    };
  });
  let smFree = null;
  if (isNum(gpu && gpu.sm_free)) smFree = gpu.sm_free;
  else if (smTotal) smFree = Math.max(0, smTotal - smUsed);
  return {smTotal, smUsed, smFree, memoryMiB, memoryTotalMiB, shares: out};
}

// One line per share for a GPU card: "client-1 · 64 SMs · 39.1 GiB" (and its state when it is not
// ready).
export function shareText(share) {
  const parts = [share.client || share.lease_id || '?'];
  if (isNum(share.sm_count)) parts.push(`${share.sm_count} SMs`);
  if (isNum(share.memory_mb)) {
    parts.push(share.memory_mb >= 1024 ? `${(share.memory_mb / 1024).toFixed(1)} GiB` : `${share.memory_mb} MiB`);
  }
  if (share.state && share.state !== 'ready') parts.push(share.state);
  return parts.join(' · ');
}

// The client nodes: those that registered (GET /api/v1/clients), each with the ids of its remote
// leases (the answer's remote_leases, else those of `leases` that name it), and the clients named
// by a remote lease that never registered (registered: false), by name.
export function remoteClients(clients, leases) {
  const byClient = new Map();
  for (const l of list(leases)) {
    const name = l.client || l.owner;
    if (!name) continue;
    if (!byClient.has(name)) byClient.set(name, []);
    byClient.get(name).push(l.id);
  }
  const out = [];
  const seen = new Set();
  for (const c of list(clients)) {
    seen.add(c.name);
    const ids = Array.isArray(c.remote_leases) ? c.remote_leases.filter((x) => typeof x === 'string')
                                               : (byClient.get(c.name) || []);
    out.push({
      name: c.name, address: c.address ?? null, last_seen: c.last_seen ?? null,
      leases: isNum(c.leases) ? c.leases : null, remote_leases: ids, labels: c.labels || {},
      registered: true,
    });
  }
  for (const [name, ids] of byClient) {
    if (seen.has(name)) continue;
    out.push({name, address: null, last_seen: null, leases: null, remote_leases: ids, labels: {},
              registered: false});
  }
  return out.sort((a, b) => String(a.name).localeCompare(String(b.name)));
}

// The view's totals: live and failed leases, the SMs and MiB live leases hold, the clients, and
// the GPU servers by state.
export function remoteSummary(leases, servers) {
  const t = {live: 0, failed: 0, sms: 0, memoryMiB: 0, clients: 0, serversRunning: 0, serversOther: 0};
  const clients = new Set();
  for (const l of list(leases)) {
    if (isLiveRemote(l.state)) {
      t.live += 1;
      if (isNum(l.sm_count)) t.sms += l.sm_count;
      if (isNum(l.memory_mb)) t.memoryMiB += l.memory_mb;
      if (l.client) clients.add(l.client);
    } else if (l.state === 'failed') {
      t.failed += 1;
    }
  }
  t.clients = clients.size;
  for (const s of list(servers)) {
    if (s.state === 'running') t.serversRunning += 1;
    else t.serversOther += 1;
  }
  return t;
}

// A server's "started" cell: ISO text as given, or milliseconds (or seconds) since the epoch.
export function serverTime(v) {
  if (typeof v === 'string') return v;
  if (isNum(v)) return new Date(v > 1e11 ? v : v * 1000).toISOString();
  return null;
}
