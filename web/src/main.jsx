// flyt dashboard: the app shell — token, data, live stream, routing. The views are in views.jsx.
//
// Data flow: the lists (nodes, gpus, allocations, jobs, queue, events) are fetched from the
// documented JSON API once, then again only for the topics the live stream says changed (a change
// during a list's fetch gets it fetched again: refetcher in requests.js). A view that needs more
// (a GPU's history, a job's detail, the remote GPUs' lists) fetches it itself when `versions`
// changes.

import {render} from 'preact';
import {useCallback, useEffect, useRef, useState} from 'preact/hooks';

import {get, getToken, HttpError, openStream, setToken, takeTokenFromUrl} from './api.js';
import {endpointsFor, parseRoute} from './format.js';
import {refetcher} from './requests.js';
import {RemoteGpus} from './remote.jsx';
import {Allocations, Events, GpuDetail, JobDetail, Jobs, NotFound, Overview} from './views.jsx';
import './app.css';
import 'uplot/dist/uPlot.min.css';

const PATHS = {
  nodes: '/nodes',
  gpus: '/gpus',
  allocations: '/allocations',
  jobs: '/jobs?limit=500',
  queue: '/queue',
  events: '/events?latest=200',
};
const ALL = Object.keys(PATHS);

function useRoute() {
  const [route, setRoute] = useState(parseRoute(window.location.hash));
  useEffect(() => {
    const on = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return route;
}

function TokenPrompt({message, onToken}) {
  const [value, setValue] = useState('');
  const submit = (e) => {
    e.preventDefault();
    onToken(value.trim());
  };
  return (
    <form class="token-prompt" onSubmit={submit} data-testid="token-prompt">
      <h2>Sign in to the cluster manager</h2>
      <p>{message}</p>
      <p class="muted">A viewer token is enough. It is kept for this browser tab only. You can
        also open the dashboard once as <code>/?token=…</code>.</p>
      <input type="password" autocomplete="off" placeholder="bearer token" value={value}
             onInput={(e) => setValue(e.currentTarget.value)} aria-label="token" />
      <button type="submit" disabled={!value.trim()}>Sign in</button>
    </form>
  );
}

const CONNECTION_TEXT = {
  live: 'live',
  connecting: 'connecting…',
  polling: 'polling every 5 s',
  down: 'cluster manager unreachable — retrying',
};

function App() {
  const route = useRoute();
  const [auth, setAuth] = useState({state: 'checking', whoami: null, message: ''});
  const [data, setData] = useState({});
  const [errors, setErrors] = useState({});
  const [conn, setConn] = useState('connecting');
  // Per topic of the live stream; remote_leases and gpu_servers for a manager that sends them.
  const [versions, setVersions] = useState({nodes: 0, allocations: 0, jobs: 0, events: 0, clients: 0,
                                            remote_leases: 0, gpu_servers: 0});
  const [updatedAt, setUpdatedAt] = useState(null);

  const checkAuth = useCallback(async () => {
    try {
      const whoami = await get('/whoami');
      setAuth({state: 'ok', whoami, message: ''});
    } catch (e) {
      if (e instanceof HttpError && e.status === 401) {
        setAuth({state: 'prompt', whoami: null,
                 message: getToken() ? 'The manager does not know this token.'
                                     : 'This cluster manager needs a token to read.'});
      } else {
        setAuth({state: 'unreachable', whoami: null, message: e.message});
        setTimeout(checkAuth, 3000);
      }
    }
  }, []);

  useEffect(() => {
    takeTokenFromUrl();
    checkAuth();
  }, []);

  // One request per list at a time; a change that arrives while its list is being fetched gets
  // that list fetched again afterwards (the answer under way may predate the change).
  const fetchLists = useRef(null);
  if (!fetchLists.current) {
    fetchLists.current = refetcher(async (name) => {
      try {
        const body = await get(PATHS[name]);
        setData((d) => ({...d, [name]: body}));
        setErrors((e) => ({...e, [name]: null}));
      } catch (e) {
        if (e instanceof HttpError && e.status === 401) checkAuth();
        setErrors((old) => ({...old, [name]: e.message}));
      }
    });
  }
  const refresh = useCallback(async (names) => {
    await fetchLists.current(names);
    setUpdatedAt(new Date());
  }, []);

  useEffect(() => {
    if (auth.state !== 'ok') return undefined;
    refresh(ALL);
    return openStream({
      onState: setConn,
      onChange: ({changed}) => {
        setVersions((v) => {
          const next = {...v};
          for (const t of changed) if (t in next) next[t] += 1;
          return next;
        });
        refresh(endpointsFor(changed));
      },
    });
  }, [auth.state]);

  if (auth.state === 'checking') return <div class="center muted">Connecting…</div>;
  if (auth.state === 'unreachable') {
    return <div class="banner down" data-testid="unreachable">
      The cluster manager is unreachable ({auth.message}); retrying…</div>;
  }
  if (auth.state === 'prompt') {
    return <TokenPrompt message={auth.message} onToken={(t) => {
      setToken(t);
      setAuth({state: 'checking', whoami: null, message: ''});
      checkAuth();
    }} />;
  }

  const nav = [['#/', 'Overview', 'overview'], ['#/jobs', 'Jobs', 'jobs'],
               ['#/allocations', 'Allocations & queue', 'allocations'],
               ['#/remote', 'Remote GPUs', 'remote'],
               ['#/events', 'Events', 'events']];
  const ctx = {data, errors, versions, refresh};
  let view;
  switch (route.view) {
    case 'overview': view = <Overview {...ctx} />; break;
    case 'gpu': view = <GpuDetail {...ctx} node={route.node} index={route.index} />; break;
    case 'jobs': view = <Jobs {...ctx} />; break;
    case 'job': view = <JobDetail {...ctx} id={route.id} />; break;
    case 'allocations': view = <Allocations {...ctx} />; break;
    case 'events': view = <Events {...ctx} />; break;
    case 'remote': view = <RemoteGpus {...ctx} />; break;
    default: view = <NotFound />;
  }
  const active = route.view === 'gpu' ? 'overview' : route.view === 'job' ? 'jobs' : route.view;
  return (
    <div class="app">
      <header>
        <a class="brand" href="#/">flyt</a>
        <nav>
          {nav.map(([href, label, key]) => (
            <a href={href} class={active === key ? 'active' : ''}>{label}</a>))}
        </nav>
        <span class={`conn ${conn}`} data-testid="connection" title={
          updatedAt ? `updated ${updatedAt.toLocaleTimeString()}` : ''}>
          <span class="dot" />{CONNECTION_TEXT[conn]}
        </span>
        <span class="who muted">{auth.whoami.name} ({auth.whoami.role})</span>
      </header>
      {conn === 'down' &&
       <div class="banner down" data-testid="stale">The cluster manager stopped answering: what
         you see may be out of date. Reconnecting…</div>}
      <main>{view}</main>
    </div>
  );
}

render(<App />, document.getElementById('app'));
