// Request bookkeeping of the dashboard, free of the DOM and of fetch (the caller passes the
// request): which answer is still wanted, and which lists must be fetched again. Unit-tested by
// web/test/requests.test.mjs with Node's test runner.

// follow(request, onValue, onError): starts request(signal) and hands its answer (or its error)
// on, unless the returned cancel function was called first. A view that shows one thing at a time
// (a GPU, a job) returns it from its effect: when the view moves on to another GPU or job, the
// previous request is aborted, and an answer that comes late anyway never overwrites the current
// one.
export function follow(request, onValue, onError = () => {}) {
  const controller = new AbortController();
  const {signal} = controller;
  let result;
  try {
    result = Promise.resolve(request(signal));
  } catch (e) {
    result = Promise.reject(e);
  }
  result.then((value) => {
    if (!signal.aborted) onValue(value);
  }, (error) => {
    if (!signal.aborted) onError(error);
  });
  return () => controller.abort();
}

// refetcher(fetchOne): fetches lists by name, one request per name at a time. A name asked for
// while its request is under way is fetched once more when that one has ended (the change it
// stands for may have come after the server read the list), however often it was asked for in
// the meantime. fetchOne(name) reports its own errors; a rejection only ends that fetch.
// Returns refresh(names): a promise that settles when those names' fetches, and the fetches
// again they were asked for, are done.
export function refetcher(fetchOne) {
  const running = new Map();  // name → the promise of its fetch loop
  const again = new Set();    // names asked for while their fetch was under way

  const one = (name) => {
    if (running.has(name)) {
      again.add(name);
      return running.get(name);
    }
    const loop = (async () => {
      try {
        do {
          again.delete(name);
          try {
            await fetchOne(name);
          } catch (e) {
            // fetchOne reports its errors; the loop goes on when asked to fetch again.
          }
        } while (again.has(name));
      } finally {
        running.delete(name);
      }
    })();
    running.set(name, loop);
    return loop;
  };

  return (names) => Promise.all(names.map(one)).then(() => undefined);
}
