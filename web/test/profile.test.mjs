// Unit tests of the GPU usage profiles' pure helpers (node --test; CTest: web_profile_test): the
// badge, the "Idle but held" list, the counts, the windows — and answers that lack fields.
import assert from 'node:assert/strict';
import {test} from 'node:test';

import {fmtPeriod, idleButHeld, profileBadge, stateCounts, windowRows} from '../src/profile.js';

const GiB = 1024 * 1024 * 1024;

test('the badge says the state, the period of a cyclic load and how long memory was held idle', () => {
  const cyclic = profileBadge({state: 'cyclic', state_seconds: 95,
                               cycle: {period_s: 12.04, confidence: 0.91}});
  assert.equal(cyclic.state, 'cyclic');
  assert.equal(cyclic.text, 'cyclic 12.0 s');
  assert.match(cyclic.title, /periodic/);
  assert.match(cyclic.title, /1m 35s/);
  assert.match(cyclic.title, /confidence 91 %/);
  const held = profileBadge({state: 'allocated-idle', state_seconds: 30,
                             allocated_idle: {seconds: 4000}});
  assert.equal(held.text, 'idle, held 1h 06m');
  const unknown = profileBadge({state: 'unknown', insufficient_data: 'no samples yet'});
  assert.equal(unknown.text, 'unknown');
  assert.match(unknown.title, /no samples yet/);
  assert.equal(fmtPeriod(300), '5m 00s');
});

test('no profile, or a state this page does not know: no badge, or "unknown"', () => {
  assert.equal(profileBadge(null), null);
  assert.equal(profileBadge(undefined), null);
  assert.equal(profileBadge({}), null);
  assert.equal(profileBadge('cyclic'), null);
  assert.equal(profileBadge({state: 'sleepy'}).state, 'unknown');
  // Cyclic without a cycle block: the state alone.
  assert.equal(profileBadge({state: 'cyclic'}).text, 'cyclic');
});

test('idle but held: allocated-idle GPUs, the most memory first, naming processes and lease owners', () => {
  const gpus = [
    {node: 'a', index: 0, profile: {state: 'cyclic'}},
    {node: 'a', index: 1, memory_used_bytes: 5 * GiB, leases: [{owner: 'bob'}],
     profile: {state: 'allocated-idle', state_seconds: 60,
               allocated_idle: {seconds: 600, memory_bytes: 4 * GiB,
                                processes: [{pid: 7, name: 'python', user: 'carol', memory_bytes: 4 * GiB}]}}},
    {node: 'b', index: 3, leases: [],
     profile: {state: 'allocated-idle', allocated_idle: {seconds: 30, memory_bytes: 30 * GiB,
               processes: [{pid: 9, name: 'jupyter-lab', user: 'alice', memory_bytes: 30 * GiB}]}}},
    {node: 'b', index: 4, profile: null},
  ];
  const rows = idleButHeld(gpus);
  assert.equal(rows.length, 2);
  assert.equal(rows[0].node, 'b');
  assert.equal(rows[0].processes[0].text, 'jupyter-lab (alice) 30.0 GiB');
  assert.deepEqual(rows[0].owners, []);
  assert.equal(rows[1].seconds, 600);
  assert.deepEqual(rows[1].owners, ['bob']);
  // Without allocated_idle details: the profile's processes and the GPU's memory.
  const bare = idleButHeld([{node: 'c', index: 0, memory_used_bytes: GiB,
                             profile: {state: 'allocated-idle', processes: [{pid: 5}]}}]);
  assert.equal(bare[0].memory_bytes, GiB);
  assert.equal(bare[0].processes[0].text, 'pid 5');
  assert.deepEqual(idleButHeld(null), []);
  assert.deepEqual(idleButHeld([null, {}, {profile: 'x'}]), []);
});

test('state counts and window rows', () => {
  assert.deepEqual(stateCounts([{profile: {state: 'idle'}}, {profile: {state: 'idle'}},
                                {profile: {state: 'cyclic'}}, {}]), {idle: 2, cyclic: 1});
  const rows = windowRows({windows: {
    '15m': {util_percent: {p50: 50, p95: 90, p99: 99}, memory_used_bytes: null},
    '1m': {util_percent: null, power_w: {p50: 300, p95: 400, p99: 410}},
  }});
  assert.deepEqual(rows.map((r) => r.window), ['1m', '15m']);
  assert.equal(rows[0].util, null);
  assert.equal(rows[0].power.p95, 400);
  assert.equal(rows[1].util.p99, 99);
  assert.deepEqual(windowRows(null), []);
});
