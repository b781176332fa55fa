// Unit tests of the remote GPUs' pure helpers (node --test; CTest: web_remote_test): the shares
// of a GPU, the countdown, the clients, the totals — and answers that lack optional fields.
import assert from 'node:assert/strict';
import {test} from 'node:test';

import {
  gpuShares, isLiveRemote, remoteClients, remoteSecondsLeft, remoteSummary, serverTime, shareText,
} from '../src/remote.js';

const GiB = 1024 * 1024 * 1024;

test('a GPU with SM counts: each share as a part of its SMs, and what is left', () => {
  const gpu = {
    sm_count: 132, sm_free: 36, memory_total_bytes: 80 * GiB,
    remote_shares: [
      {lease_id: 'rlease-1', client: 'client-1', sm_count: 64, memory_mb: 40000, state: 'ready'},
      {lease_id: 'rlease-2', client: 'client-2', sm_count: 32, memory_mb: 8000, state: 'failed'},
    ],
  };
  const s = gpuShares(gpu);
  assert.equal(s.smTotal, 132);
  assert.equal(s.smUsed, 96);
  assert.equal(s.smFree, 36);
  assert.equal(s.memoryMiB, 48000);
  assert.equal(s.shares.length, 2);
  assert.ok(Math.abs(s.shares[0].percent - (100 * 64) / 132) < 1e-9);
  assert.equal(s.shares[1].state, 'failed');
  // Without sm_free the free SMs are what the shares leave.
  assert.equal(gpuShares({...gpu, sm_free: undefined}).smFree, 36);
});

test('a GPU without SM counts: shares as parts of its memory; none at all: nothing', () => {
  const s = gpuShares({memory_total_bytes: 80 * GiB, remote_shares: [{lease_id: 'r', memory_mb: 20480}]});
  assert.equal(s.smTotal, null);
  assert.equal(s.smFree, null);
  assert.equal(s.shares[0].percent, 25);
  assert.equal(s.shares[0].sm_count, null);
  assert.deepEqual(gpuShares({}).shares, []);
  assert.deepEqual(gpuShares(null).shares, []);
  assert.deepEqual(gpuShares({remote_shares: 'x'}).shares, []);
  assert.deepEqual(gpuShares({remote_shares: [null, 3]}).shares, []);
  // A share bigger than the GPU is drawn full, never past the bar.
  assert.equal(gpuShares({sm_count: 10, remote_shares: [{sm_count: 20}]}).shares[0].percent, 100);
});

test('a share reads as its client, SMs, memory and state when not ready', () => {
  assert.equal(shareText({client: 'client-1', sm_count: 64, memory_mb: 40000, state: 'ready'}),
               'client-1 · 64 SMs · 39.1 GiB');
  assert.equal(shareText({lease_id: 'rlease-2', memory_mb: 512, state: 'failed'}), 'rlease-2 · 512 MiB · failed');
  assert.equal(shareText({}), '?');
});

test('only starting and ready leases are live', () => {
  assert.ok(isLiveRemote('ready'));
  assert.ok(isLiveRemote('starting'));
  for (const s of ['failed', 'released', 'expired', undefined, null]) assert.ok(!isLiveRemote(s));
});

test('the countdown runs to expires_at, else from expires_in_seconds as of the answer', () => {
  const now = Date.parse('2026-11-22T06:00:30.000Z');
  assert.equal(remoteSecondsLeft({expires_at: '2026-11-22T06:01:00.000Z'}, now), 30);
  assert.equal(remoteSecondsLeft({expires_at: '2026-11-22T06:01:00.000Z'}, now + 40000), -10);
  assert.equal(remoteSecondsLeft({expires_in_seconds: 60}, now + 5000, now), 55);
  assert.ok(Number.isNaN(remoteSecondsLeft({}, now)));
  assert.ok(Number.isNaN(remoteSecondsLeft({expires_at: 'soon'}, now)));
  assert.ok(Number.isNaN(remoteSecondsLeft(null, now)));
});

test('clients: the registered ones with their leases, and those only a lease names', () => {
  const leases = [
    {id: 'rlease-1', client: 'client-1', state: 'ready'},
    {id: 'rlease-2', client: 'client-9', state: 'ready'},
    {id: 'rlease-3', owner: 'bob', state: 'ready'},
  ];
  const clients = [
    {name: 'client-1', address: '10.0.0.7', leases: 0, last_seen: '2026-11-22T06:00:00.000Z'},
    {name: 'client-2', address: '10.0.0.8', remote_leases: ['rlease-7'], labels: {rack: 'r2'}},
  ];
  const out = remoteClients(clients, leases);
  assert.deepEqual(out.map((c) => c.name), ['bob', 'client-1', 'client-2', 'client-9']);
  const byName = Object.fromEntries(out.map((c) => [c.name, c]));
  // An older manager: no remote_leases in /clients, so the leases that name it.
  assert.deepEqual(byName['client-1'].remote_leases, ['rlease-1']);
  assert.equal(byName['client-1'].registered, true);
  assert.deepEqual(byName['client-2'].remote_leases, ['rlease-7']);
  assert.equal(byName['client-9'].registered, false);
  assert.equal(byName['client-9'].address, null);
  assert.deepEqual(remoteClients(null, undefined), []);
});

test('totals count live leases, their SMs and memory, failed ones apart, and servers by state', () => {
  const t = remoteSummary([
    {state: 'ready', sm_count: 64, memory_mb: 40000, client: 'a'},
    {state: 'starting', sm_count: 8, memory_mb: 1000, client: 'a'},
    {state: 'failed', sm_count: 32, memory_mb: 8000, client: 'b'},
    {state: 'ready', client: 'c'},
  ], [{state: 'running'}, {state: 'failed'}, {state: 'draining'}]);
  assert.deepEqual(t, {live: 3, failed: 1, sms: 72, memoryMiB: 41000, clients: 2, serversRunning: 1,
                       serversOther: 2});
  assert.deepEqual(remoteSummary(undefined, null),
                   {live: 0, failed: 0, sms: 0, memoryMiB: 0, clients: 0, serversRunning: 0, serversOther: 0});
});

test('a server start time as ISO text, milliseconds or seconds', () => {
  assert.equal(serverTime('2026-11-22T06:00:00.100Z'), '2026-11-22T06:00:00.100Z');
  assert.equal(serverTime(1795326000000), '2026-11-22T05:40:00.000Z');
  assert.equal(serverTime(1795326000), '2026-11-22T05:40:00.000Z');
  assert.equal(serverTime(null), null);
});
