// Unit tests of the dashboard's pure helpers (node --test; CTest: web_format_test).
import assert from 'node:assert/strict';
import {test} from 'node:test';

import {
  alignToFirst, chartInputs, cudaCells, endpointsFor, fmtBytes, fmtDuration, gpuColumn, historySeries, level,
  parseRoute, parseSse, pointsUntil, SERIES_KEYS, shortGpuName, statCell, totals,
} from '../src/format.js';

test('short GPU names as the jobs table shows them', () => {
  assert.equal(shortGpuName('NVIDIA H100 80GB HBM3'), 'H100');
  assert.equal(shortGpuName('NVIDIA A100-SXM4-80GB'), 'A100');
  assert.equal(shortGpuName('NVIDIA GeForce RTX 4090'), 'RTX 4090');
  assert.equal(shortGpuName('Tesla V100-SXM2-16GB'), 'V100');
  assert.equal(shortGpuName('NVIDIA L40S'), 'L40S');
  assert.equal(shortGpuName(''), '');
  assert.equal(shortGpuName(null), '');
});

test('the GPU column: count, short model and the monitoring marker', () => {
  assert.equal(gpuColumn({gpus: 2, gpu_model: 'NVIDIA H100 80GB HBM3', has_monitoring: true}), '2 (H100) 📊');
  assert.equal(gpuColumn({gpus: 1, gpu_model: 'NVIDIA A100-SXM4-80GB', has_monitoring: false}), '1 (A100)');
  // A queued job has no model yet.
  assert.equal(gpuColumn({gpus: 4, gpu_model: null, has_monitoring: false}), '4');
});

test('load levels use nvitop thresholds and keep absent readings apart', () => {
  assert.equal(level(5, 'utilization'), 'light');
  assert.equal(level(50, 'utilization'), 'moderate');
  assert.equal(level(75, 'utilization'), 'heavy');
  assert.equal(level(85, 'memory'), 'heavy');
  assert.equal(level(null, 'temperature'), 'na');
  assert.equal(level(undefined, 'power'), 'na');
});

test('durations and sizes read naturally', () => {
  assert.equal(fmtDuration(42), '42 s');
  assert.equal(fmtDuration(125), '2m 05s');
  assert.equal(fmtDuration(7325), '2h 02m');
  assert.equal(fmtDuration(200000), '2d 07h');
  assert.equal(fmtDuration(null), '—');
  assert.equal(fmtBytes(85520809984), '79.6 GiB');
  assert.equal(fmtBytes(null), '—');
});

test('a stats cell is mean (min–max)', () => {
  assert.equal(statCell({mean: 85.25, min: 70, max: 98}), '85.3 (70.0–98.0)');
  assert.equal(statCell(null), '—');
});

test('cluster totals count each GPU once, and free memory of usable GPUs only', () => {
  const gpus = [
    {allocation_state: 'free', memory_free_bytes: 10, memory_total_bytes: 20, process_count: 0, gpu_util_percent: 0},
    {allocation_state: 'free', memory_free_bytes: 5, memory_total_bytes: 20, process_count: 1, gpu_util_percent: 90},
    {allocation_state: 'leased', memory_free_bytes: 1, memory_total_bytes: 20},
    {allocation_state: 'lost', memory_free_bytes: 20, memory_total_bytes: 20},
    {allocation_state: 'unreachable', memory_free_bytes: 20, memory_total_bytes: 20},
  ];
  const t = totals(gpus, [{state: 'reachable'}, {state: 'unreachable'}]);
  assert.equal(t.gpus, 5);
  assert.equal(t.free, 1);
  assert.equal(t.busy, 1);
  assert.equal(t.leased, 1);
  assert.equal(t.lost, 1);
  assert.equal(t.unreachable, 1);
  assert.equal(t.memoryFreeBytes, 16);
  assert.equal(t.memoryTotalBytes, 60);
  assert.equal(t.nodesReachable, 1);
});

test('Server-Sent Events framing keeps partial events for the next chunk', () => {
  const a = parseSse('retry: 3000\nevent: hello\ndata: {"seq":1}\n\n: keep-alive\n\nevent: change\ndata: {"se');
  assert.equal(a.events.length, 1);
  assert.equal(a.events[0].event, 'hello');
  assert.deepEqual(JSON.parse(a.events[0].data), {seq: 1});
  const b = parseSse(a.rest + 'q":2}\nid: 2\n\n');
  assert.equal(b.events.length, 1);
  assert.equal(b.events[0].event, 'change');
  assert.equal(b.events[0].id, '2');
  assert.equal(b.rest, '');
  assert.equal(parseSse('data: x\r\n\r\n').events[0].data, 'x');
});

test('a change refetches only what it touched', () => {
  assert.deepEqual(endpointsFor(['nodes']), ['gpus', 'nodes']);
  assert.deepEqual(endpointsFor(['jobs', 'events']), ['events', 'jobs', 'queue']);
  assert.deepEqual(endpointsFor(['clients']), []);
  // Remote leases carve shares out of GPUs: their cards are fetched again.
  assert.deepEqual(endpointsFor(['remote_leases']), ['gpus']);
  assert.deepEqual(endpointsFor(['gpu_servers', 'events']), ['events', 'gpus']);
});

test('addresses of views are shareable and checked', () => {
  assert.deepEqual(parseRoute('#/'), {view: 'overview'});
  assert.deepEqual(parseRoute(''), {view: 'overview'});
  assert.deepEqual(parseRoute('#/gpu/node-a/3'), {view: 'gpu', node: 'node-a', index: 3});
  assert.deepEqual(parseRoute('#/gpu/node-a/x'), {view: 'notfound'});
  assert.deepEqual(parseRoute('#/job/job-1f'), {view: 'job', id: 'job-1f'});
  assert.deepEqual(parseRoute('#/jobs'), {view: 'jobs'});
  assert.deepEqual(parseRoute('#/remote'), {view: 'remote'});
  assert.deepEqual(parseRoute('#/nope'), {view: 'notfound'});
});

test('history points become chart series; absent readings are gaps, not 0', () => {
  const points = [
    {t_ms: 1000000, gpu_util_percent: 97, memory_used_mib: 40960, temperature_c: 67, power_draw_w: 661.5},
    {t_ms: 1001000, gpu_util_percent: null, memory_used_mib: 20480, temperature_c: 66},
  ];
  const h = historySeries(points, 80 * 1024 * 1024 * 1024);
  assert.deepEqual(h.times, [1000, 1001]);
  assert.deepEqual(h.util, [97, null]);
  assert.deepEqual(h.memory, [50, 25]);
  assert.deepEqual(h.temperature, [67, 66]);
  assert.deepEqual(h.power, [661.5, null]);
  for (const key of SERIES_KEYS) assert.equal(h[key].length, 2, key);
  // Without the GPU's total, memory % cannot be known.
  assert.deepEqual(historySeries(points, null).memory, [null, null]);
  assert.deepEqual(historySeries(points, 0).memory, [null, null]);
  assert.deepEqual(historySeries([], 1).times, []);
  assert.deepEqual(historySeries(undefined, 1).util, []);
});

test('a job\'s window: the points up to its end (1 s slack), all while it runs', () => {
  const points = [{t_ms: 9000}, {t_ms: 10000}, {t_ms: 11000}, {t_ms: 11500}];
  assert.deepEqual(pointsUntil(points, 10).map((p) => p.t_ms), [9000, 10000, 11000]);
  assert.equal(pointsUntil(points, null).length, 4);
  assert.deepEqual(pointsUntil(undefined, 10), []);
});

test('several GPUs share the first GPU\'s time axis, matched by the second', () => {
  const mk = (times, util) => ({times, util, memory: util.map(() => null),
                                temperature: util.map(() => 50), power: util.map(() => 100)});
  const many = [
    {label: 'GPU 0', h: mk([100.0, 101.0, 102.0], [10, 20, 30])},
    {label: 'GPU 1', h: mk([100.2, 102.1, 103.0], [1, 3, 4])},  // nothing near 101
  ];
  const aligned = alignToFirst(many);
  assert.equal(aligned[0], many[0]);
  assert.deepEqual(aligned[1].h.times, [100.0, 101.0, 102.0]);
  assert.deepEqual(aligned[1].h.util, [1, null, 3]);
  assert.deepEqual(aligned[1].h.temperature, [50, null, 50]);
  assert.equal(aligned[1].label, 'GPU 1');
  // The input is left as it was.
  assert.deepEqual(many[1].h.times, [100.2, 102.1, 103.0]);
  assert.deepEqual(alignToFirst([]), []);
});

test('one chart\'s inputs: the shared times and a labelled series per GPU', () => {
  const list = [
    {label: 'GPU 0', h: {times: [1, 2], util: [5, 6], power: [100, 110]}},
    {label: 'GPU 3', h: {times: [1, 2], util: [7, null], power: [90, 95]}},
  ];
  assert.deepEqual(chartInputs(list, 'util'), {
    times: [1, 2],
    series: [{label: 'GPU 0', values: [5, 6]}, {label: 'GPU 3', values: [7, null]}],
  });
  assert.deepEqual(chartInputs([], 'power'), {times: [], series: []});
});

test('the CUDA tracer\'s process columns: blank when not traced, leaks only once exited', () => {
  assert.deepEqual(cudaCells({pid: 1, cuda: null}), {rate: '', peak: '', leaked: ''});
  assert.deepEqual(cudaCells({pid: 1}), {rate: '', peak: '', leaked: ''});
  assert.deepEqual(
    cudaCells({pid: 1, cuda: {launches_per_second: 1234.4, device_memory_peak_bytes: 3 * 1024 * 1024,
                              leaked_bytes: 0, exited: false}}),
    {rate: '1234', peak: '3 MiB', leaked: ''});
  assert.deepEqual(
    cudaCells({pid: 2, source: 'trace', cuda: {launches_per_second: 2.25, device_memory_peak_bytes: 8192,
                                               leaked_bytes: 4096, exited: true}}),
    {rate: '2.3', peak: '8 KiB', leaked: '4 KiB'});
});
