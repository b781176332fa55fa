// Unit tests of the dashboard's request bookkeeping (node --test; CTest: web_requests_test).
import assert from 'node:assert/strict';
import {test} from 'node:test';

import {follow, refetcher} from '../src/requests.js';

// A request the test answers when it likes: {promise, resolve, reject, signal}.
function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return {promise, resolve, reject};
}
const settle = () => new Promise((res) => setImmediate(res));

test('follow: a late answer for the previous GPU does not overwrite the current one', async () => {
  // The view asks for GPU 0, then (before it answers) for GPU 1: the effect's cleanup cancels
  // the first. GPU 1 answers, then the server's answer for GPU 0 comes anyway.
  let shown = null;
  const requests = {};
  const ask = (name) => follow((signal) => {
    requests[name] = {...deferred(), signal};
    return requests[name].promise;
  }, (v) => {
    shown = v;
  });
  const cancel0 = ask('gpu0');
  cancel0();
  ask('gpu1');
  assert.equal(requests.gpu0.signal.aborted, true, 'the stale request is aborted');
  assert.equal(requests.gpu1.signal.aborted, false);
  requests.gpu1.resolve('GPU 1');
  await settle();
  assert.equal(shown, 'GPU 1');
  requests.gpu0.resolve('GPU 0');  // a server that answered despite the abort
  await settle();
  assert.equal(shown, 'GPU 1');
});

test('follow: the stale request\'s error is dropped too; the current one\'s is reported', async () => {
  const errors = [];
  const a = deferred();
  const b = deferred();
  const cancelA = follow(() => a.promise, () => {}, (e) => errors.push(`a: ${e.message}`));
  cancelA();
  follow(() => b.promise, () => {}, (e) => errors.push(`b: ${e.message}`));
  a.reject(Object.assign(new Error('aborted'), {name: 'AbortError'}));
  b.reject(new Error('HTTP 404'));
  await settle();
  assert.deepEqual(errors, ['b: HTTP 404']);
});

test('follow: an answer before any cancel is handed on, once', async () => {
  const values = [];
  const d = deferred();
  const cancel = follow(() => d.promise, (v) => values.push(v));
  d.resolve(7);
  await settle();
  cancel();  // the view leaves after the answer: nothing more happens
  await settle();
  assert.deepEqual(values, [7]);
});

test('follow: a request that throws at once reports the error', async () => {
  const errors = [];
  follow(() => {
    throw new Error('bad path');
  }, () => {}, (e) => errors.push(e.message));
  await settle();
  assert.deepEqual(errors, ['bad path']);
});

// A fake list server: each fetch of a name is a deferred the test answers; `version` is what the
// server holds now, and a fetch answers with the version it read when it started.
function fakeLists() {
  const calls = [];
  const shown = {};
  const version = {jobs: 0, nodes: 0};
  const fetchOne = (name) => {
    const read = version[name];
    const d = deferred();
    calls.push({name, read, answer: () => d.resolve()});
    return d.promise.then(() => {
      shown[name] = read;
    });
  };
  return {calls, shown, version, fetchOne};
}

test('refetcher: a change during a fetch gets the list fetched again, not lost', async () => {
  const f = fakeLists();
  const refresh = refetcher(f.fetchOne);
  const first = refresh(['jobs']);
  assert.equal(f.calls.length, 1);
  // The server changes after it read the list for the fetch under way; the stream says so.
  f.version.jobs = 1;
  const second = refresh(['jobs']);
  assert.equal(f.calls.length, 1, 'one request per list at a time');
  f.calls[0].answer();
  await settle();
  assert.equal(f.calls.length, 2, 'fetched again after the fetch under way');
  assert.equal(f.calls[1].read, 1);
  f.calls[1].answer();
  await Promise.all([first, second]);
  assert.equal(f.shown.jobs, 1, 'the change is shown');
});

test('refetcher: many changes during one fetch make one more fetch', async () => {
  const f = fakeLists();
  const refresh = refetcher(f.fetchOne);
  const all = [refresh(['jobs'])];
  for (let i = 1; i <= 5; i++) {
    f.version.jobs = i;
    all.push(refresh(['jobs']));
  }
  f.calls[0].answer();
  await settle();
  assert.equal(f.calls.length, 2);
  f.calls[1].answer();
  await Promise.all(all);
  assert.equal(f.calls.length, 2);
  assert.equal(f.shown.jobs, 5);
  // Nothing under way now: the next refresh fetches at once.
  refresh(['jobs']);
  assert.equal(f.calls.length, 3);
});

test('refetcher: lists are independent; a failed fetch does not stop the one asked for again', async () => {
  const calls = [];
  const refresh = refetcher((name) => {
    const d = deferred();
    calls.push({name, d});
    return d.promise;
  });
  const done = refresh(['jobs', 'nodes']);
  assert.deepEqual(calls.map((c) => c.name), ['jobs', 'nodes']);
  refresh(['jobs']);
  calls[0].d.reject(new Error('HTTP 503'));
  calls[1].d.resolve();
  await settle();
  assert.deepEqual(calls.map((c) => c.name), ['jobs', 'nodes', 'jobs']);
  calls[2].d.resolve();
  await done;
});
