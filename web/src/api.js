// The dashboard's side of flyt-cluster-manager's JSON API (docs/api.md) and its live stream.
//
// The token: given once as ?token=... in the address (then kept in sessionStorage for this tab
// and removed from the address bar, so it is not in the history or a shared link) or typed into
// the prompt. Without one, the page tries anonymously (a manager with auth.anonymous_read).

import {parseSse} from './format.js';

const TOKEN_KEY = 'flyt-token';

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function takeTokenFromUrl() {
  const url = new URL(window.location.href);
  const token = url.searchParams.get('token');
  if (token === null) return;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  url.searchParams.delete('token');
  window.history.replaceState(null, '', url.pathname + url.search + url.hash);
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers() {
  const token = getToken();
  return token ? {Authorization: `Bearer ${token}`} : {};
}

// GET an API path; resolves to the JSON body, rejects with HttpError (status 0: no answer).
export async function get(path, {signal} = {}) {
  let res;
  try {
    res = await fetch(`/api/v1${path}`, {headers: headers(), signal, cache: 'no-store'});
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new HttpError(0, 'the cluster manager did not answer');
  }
  let body = null;
  try {
    body = await res.json();
  } catch (e) {
    body = null;
  }
  if (!res.ok) {
    throw new HttpError(res.status, (body && body.error) || `HTTP ${res.status}`);
  }
  return body;
}

// POST an API path with a JSON body (an action: move, resize, drain); resolves to the JSON
// answer, rejects with HttpError carrying the manager's message.
export async function post(path, body = {}) {
  let res;
  try {
    res = await fetch(`/api/v1${path}`, {
      method: 'POST', cache: 'no-store',
      headers: {...headers(), 'Content-Type': 'application/json'},
      body: JSON.stringify(body),
    });
  } catch (e) {
    throw new HttpError(0, 'the cluster manager did not answer');
  }
  let answer = null;
  try {
    answer = await res.json();
  } catch (e) {
    answer = null;
  }
  if (!res.ok) throw new HttpError(res.status, (answer && answer.error) || `HTTP ${res.status}`);
  return answer;
}

// The live stream: calls onChange({changed, seq}) per change and onState(state) as the
// connection comes and goes ('live', 'connecting', 'polling', 'down'). Reconnects with backoff;
// after a reconnect everything is fetched again (changes may have been missed). A manager that
// refuses more streams (503) is polled instead. Returns a function that stops it.
export function openStream({onChange, onState, pollMs = 5000}) {
  let stopped = false;
  let controller = null;
  let retryMs = 1000;
  let timer = null;
  let connectedBefore = false;

  const schedule = (fn, ms) => {
    clearTimeout(timer);
    timer = setTimeout(fn, ms);
  };

  const poll = async () => {
    if (stopped) return;
    try {
      await get('/whoami');
      onState('polling');
      onChange({changed: ['nodes', 'allocations', 'jobs', 'events'], seq: null});
    } catch (e) {
      onState('down');
    }
    schedule(connect, pollMs);
  };

  const connect = async () => {
    if (stopped) return;
    controller = new AbortController();
    const signal = controller.signal;
    let watchdog = null;
    // The manager sends a keep-alive every 15 s: silence for longer means a dead connection.
    const arm = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => controller.abort(), 40000);
    };
    onState('connecting');
    try {
      const res = await fetch('/api/v1/stream', {headers: headers(), signal, cache: 'no-store'});
      if (res.status === 503) {
        onState('polling');
        return poll();
      }
      if (!res.ok || !res.body) throw new HttpError(res.status, `HTTP ${res.status}`);
      arm();
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buffer = '';
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        arm();
        buffer += decoder.decode(value, {stream: true});
        const parsed = parseSse(buffer);
        buffer = parsed.rest;
        for (const ev of parsed.events) {
          let data = {};
          try {
            data = JSON.parse(ev.data);
          } catch (e) {
            continue;
          }
          if (ev.event === 'hello') {
            retryMs = 1000;
            onState('live');
            // Whatever happened while we were away: fetch it all.
            if (connectedBefore) {
              onChange({changed: ['nodes', 'allocations', 'jobs', 'events'], seq: data.seq});
            }
            connectedBefore = true;
          } else if (ev.event === 'change') {
            onChange({changed: data.changed || [], seq: data.seq});
          }
        }
      }
      throw new HttpError(0, 'stream ended');
    } catch (e) {
      clearTimeout(watchdog);
      if (stopped) return;
      onState('down');
      // Everything is re-read when the stream is back (the hello after a reconnect).
      schedule(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 15000);
    }
  };

  connect();
  return () => {
    stopped = true;
    clearTimeout(timer);
    if (controller) controller.abort();
  };
}
