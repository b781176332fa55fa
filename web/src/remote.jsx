// The dashboard's remote GPUs: the "Remote GPUs" view (#/remote: remote leases with their SM and
// memory shares and a live countdown, the GPU shares, the client nodes, the nodes' GPU servers)
// and GpuShares, the shares carved out of one GPU that each GPU card of the overview shows.
//
// The view fetches its three lists itself (GET /api/v1/remote-leases, /gpu-servers, /clients)
// when it opens and again when the live stream says nodes, allocations, clients or remote leases
// changed, so that pages that do not show them never ask for them (a manager of an older version
// has no such endpoints). One list that fails does not hide the others.

import {useEffect, useState} from 'preact/hooks';

import {get, post} from './api.js';
import {fmtDuration, fmtMiB, fmtTime, NA, shortGpuName} from './format.js';
import {
  gpuShares, isLiveRemote, remoteClients, remoteSecondsLeft, remoteSummary, serverTime, shareText,
} from './remote.js';
import {follow} from './requests.js';

const enc = encodeURIComponent;

function useNow(ms = 1000) {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

function Badge({state, testId = 'remote-state'}) {
  return <span class={`badge remote-${state || 'unknown'}`} data-testid={testId}>{state || NA}</span>;
}

// The shares of one GPU: a bar with one segment per remote lease (of its SMs, else of its memory)
// and one line per share. Nothing when the GPU carries none.
export function GpuShares({gpu}) {
  const s = gpuShares(gpu);
  if (s.shares.length === 0) return null;
  const head = s.smTotal
      ? `SMs ${s.smUsed} / ${s.smTotal} shared · ${s.smFree ?? NA} free · ${fmtMiB(s.memoryMiB)}`
      : `${s.shares.length} remote share${s.shares.length === 1 ? '' : 's'} · ${fmtMiB(s.memoryMiB)}`;
  return (
    <div class="shares" data-testid="gpu-shares">
      <div class="share-bar" title={head}>
        {s.shares.map((x, i) => (
          <div class={`share-seg seg-${i % 6} ${isLiveRemote(x.state) ? '' : 'ended'}`}
               style={{width: `${x.percent ?? 0}%`}} title={shareText(x)}
               data-testid="share" data-lease={x.lease_id} />))}
        <span data-testid="shares-head">{head}</span>
      </div>
      {s.shares.map((x) => <div class="share-line" data-testid="share-line">{shareText(x)}</div>)}
    </div>
  );
}

// Move and Resize for one live lease: a small form each, posted to
// /remote-leases/{id}/migrate ({node, gpu?}) or /resize ({sm_count?, memory_mb?}); the outcome
// (or the manager's refusal) is shown under the buttons. The lists refresh through the stream.
export function LeaseActions({lease}) {
  const [open, setOpen] = useState(null);  // 'move' | 'resize' | null
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState(null);  // {ok, text}
  const [to, setTo] = useState('');
  const [sms, setSms] = useState('');
  const [mib, setMib] = useState('');
  const run = async (path, body, say) => {
    setBusy(true);
    setResult(null);
    try {
      const answer = await post(`/remote-leases/${enc(lease.id)}/${path}`, body);
      setResult({ok: true, text: say(answer)});
      setOpen(null);
    } catch (e) {
      setResult({ok: false, text: e.message});
    }
    setBusy(false);
  };
  const move = (e) => {
    e.preventDefault();
    const m = to.trim().match(/^([A-Za-z0-9._-]+)(?::(\d{1,4}))?$/);
    if (!m) return setResult({ok: false, text: 'give NODE or NODE:GPU'});
    const body = {node: m[1]};
    if (m[2] !== undefined) body.gpu = Number(m[2]);
    return run('migrate', body, (a) => {
      const mig = a.migration || {};
      const where = mig.to ? `${mig.to.node}:${mig.to.gpu}` : `${a.node}`;
      return `moved to ${where} (${mig.moved ?? 0} client${mig.moved === 1 ? '' : 's'}, ` +
             `longest pause ${Number(mig.pause_ms_max ?? 0).toFixed(1)} ms)`;
    });
  };
  const resize = (e) => {
    e.preventDefault();
    const body = {};
    if (sms.trim()) body.sm_count = Number(sms);
    if (mib.trim()) body.memory_mb = Number(mib);
    if (!Object.keys(body).length) return setResult({ok: false, text: 'give SMs and/or MiB'});
    return run('resize', body, (a) => {
      const srv = (a.resize && a.resize.server) || {};
      return `now ${a.sm_count} SMs and ${fmtMiB(a.memory_mb)}; granted ${srv.sm_count_granted ?? NA} SMs, ` +
             `${srv.clients_applied ?? 0} of ${srv.clients ?? 0} clients applied it`;
    });
  };
  return (
    <div class="lease-actions" data-testid="lease-actions">
      <button type="button" disabled={busy} data-testid="lease-move"
              onClick={() => setOpen(open === 'move' ? null : 'move')}>Move</button>
      <button type="button" disabled={busy} data-testid="lease-resize"
              onClick={() => setOpen(open === 'resize' ? null : 'resize')}>Resize</button>
      {open === 'move' && (
        <form onSubmit={move} data-testid="move-form">
          <input placeholder="NODE or NODE:GPU" value={to} data-testid="move-to"
                 onInput={(e) => setTo(e.target.value)} />
          <button type="submit" disabled={busy} data-testid="move-go">{busy ? 'moving…' : 'move'}</button>
        </form>)}
      {open === 'resize' && (
        <form onSubmit={resize} data-testid="resize-form">
          <input placeholder={`SMs (${lease.sm_count ?? NA})`} value={sms} size={6} data-testid="resize-sms"
                 onInput={(e) => setSms(e.target.value)} />
          <input placeholder={`MiB (${lease.memory_mb ?? NA})`} value={mib} size={8} data-testid="resize-mib"
                 onInput={(e) => setMib(e.target.value)} />
          <button type="submit" disabled={busy} data-testid="resize-go">{busy ? 'resizing…' : 'resize'}</button>
        </form>)}
      {result && <div class={result.ok ? 'muted' : 'reason'} data-testid="lease-action-result">{result.text}</div>}
    </div>
  );
}

function Section({title, error, children}) {
  return (
    <section>
      <h3>{title}</h3>
      {error && <div class="banner error" data-testid="remote-error">Cannot load {title.toLowerCase()}: {error}</div>}
      {children}
    </section>
  );
}

export function RemoteGpus({data, versions}) {
  const now = useNow(1000);
  const [lists, setLists] = useState(null);  // {leases, servers, clients, errors, at}
  const [tick, setTick] = useState(0);

  // A failed first load is tried again every 5 s; after that the stream drives the refetches.
  useEffect(() => {
    if (!lists || lists.leases) return undefined;
    const t = setTimeout(() => setTick((x) => x + 1), 5000);
    return () => clearTimeout(t);
  }, [lists]);

  useEffect(() => follow(
      (signal) => Promise.allSettled([
        get('/remote-leases', {signal}), get('/gpu-servers', {signal}), get('/clients', {signal})]),
      ([leases, servers, clients]) => setLists((old) => {
        const pick = (r, key, previous) => (r.status === 'fulfilled' && r.value && Array.isArray(r.value[key])
                                                ? r.value[key] : previous);
        const why = (r, key) => {
          if (r.status === 'rejected') return r.reason;
          return r.value && Array.isArray(r.value[key]) ? null : {message: `the answer has no "${key}" list`};
        };
        return {
          leases: pick(leases, 'remote_leases', old && old.leases),
          servers: pick(servers, 'servers', old && old.servers),
          clients: pick(clients, 'clients', old && old.clients),
          errors: [why(leases, 'remote_leases'), why(servers, 'servers'), why(clients, 'clients')],
          at: Date.now(),
        };
      })),
  [versions.nodes, versions.allocations, versions.clients, versions.remote_leases,
   versions.gpu_servers, tick]);

  if (!lists) return <div class="muted">Loading the remote GPUs…</div>;
  const [leaseErr, serverErr, clientErr] = lists.errors;
  // A manager of a version before remote leases has none of the endpoints.
  if (lists.errors.every((e) => e && e.status === 404) && !lists.leases) {
    return <div class="banner info" data-testid="remote-unsupported">This cluster manager has no
      remote-GPU API (a flyt version before remote leases).</div>;
  }
  const leases = lists.leases || [];
  const servers = lists.servers || [];
  const clients = remoteClients(lists.clients || [], leases);
  const gpus = data.gpus && Array.isArray(data.gpus.gpus) ? data.gpus.gpus : [];
  const byUuid = new Map(gpus.map((g) => [g.uuid, g]));
  const shared = gpus.filter((g) => gpuShares(g).shares.length > 0);
  const t = remoteSummary(leases, servers);
  const totals = [
    ['remote leases', t.live, 'live'], ['failed', t.failed, 'failed'], ['SMs leased', t.sms, 'sms'],
    ['memory leased', fmtMiB(t.memoryMiB), 'memory'], ['clients', t.clients, 'clients'],
    ['GPU servers running', `${t.serversRunning}${t.serversOther ? ` (+${t.serversOther})` : ''}`, 'servers'],
  ];
  return (
    <div data-testid="remote-view">
      <section class="totals">
        {totals.map(([label, v, key]) => (
          <div class="total" data-testid={`remote-total-${key}`}>
            <div class="value">{v}</div><div class="muted">{label}</div>
          </div>))}
      </section>

      <Section title="Remote leases" error={leaseErr && leaseErr.message}>
        <div class="scroll">
          <table data-testid="remote-leases">
            <thead><tr><th>lease</th><th>client</th><th>node</th><th>GPU</th><th>SMs</th><th>memory</th>
              <th>state</th><th>server</th><th>expires in</th><th>granted</th><th /></tr></thead>
            <tbody>
              {leases.length === 0 && <tr><td colSpan={11} class="muted">no remote leases</td></tr>}
              {leases.map((l) => {
                const gpu = l.gpu && typeof l.gpu === 'object' ? l.gpu : {};
                const card = byUuid.get(gpu.uuid);
                const ofSms = card && card.sm_count ? ` / ${card.sm_count}` : '';
                const left = remoteSecondsLeft(l, now, lists.at);
                const live = isLiveRemote(l.state);
                const server = l.server && typeof l.server === 'object' ? l.server : {};
                return (
                  <tr data-testid="remote-lease-row" data-lease={l.id} class={live ? '' : 'ended'}>
                    <td>{l.id}</td><td>{l.client ?? l.owner ?? NA}</td><td>{l.node ?? NA}</td>
                    <td data-testid="remote-gpu">{l.node && Number.isInteger(gpu.index)
                      ? <a class="gpu-link" href={`#/gpu/${enc(l.node)}/${gpu.index}`}>#{gpu.index}</a> : NA}
                      {' '}<span class="muted">{shortGpuName(gpu.name)}</span></td>
                    <td data-testid="remote-sms" title={Number.isInteger(l.sm_count_asked) ? `asked ${l.sm_count_asked}` : ''}>
                      {l.sm_count ?? (l.sm_percent ? `${l.sm_percent} %` : NA)}{ofSms}</td>
                    <td data-testid="remote-memory">{fmtMiB(l.memory_mb)}</td>
                    <td><Badge state={l.state} />{l.reason && <div class="reason" data-testid="remote-reason">{l.reason}</div>}</td>
                    <td data-testid="remote-server">{server.address ?? NA}
                      {server.state && <span class="muted"> ({server.state})</span>}</td>
                    <td class={live && left < 20 ? 'soon' : ''} data-testid="remote-expires">
                      {live ? fmtDuration(left) : NA}</td>
                    <td>{fmtTime(l.granted_at)}</td>
                    <td>{l.state === 'ready' && <LeaseActions lease={l} />}</td>
                  </tr>);
              })}
            </tbody>
          </table>
        </div>
      </Section>

      {shared.length > 0 && (
        <section>
          <h3>GPU shares</h3>
          <div class="gpu-grid">
            {shared.map((g) => (
              <a class="gpu-card" href={`#/gpu/${enc(g.node)}/${g.index}`} data-testid="shared-gpu"
                 data-node={g.node} data-index={g.index}>
                <div class="gpu-head"><span class="gpu-index">{g.node} #{g.index}</span>
                  <span class="gpu-name">{shortGpuName(g.name) || g.name}</span></div>
                <GpuShares gpu={g} />
              </a>))}
          </div>
        </section>)}

      <Section title="Clients" error={clientErr && clientErr.message}>
        <div class="scroll">
          <table data-testid="remote-clients">
            <thead><tr><th>client</th><th>address</th><th>last seen</th><th>remote leases</th>
              <th>leases</th><th>labels</th></tr></thead>
            <tbody>
              {clients.length === 0 && <tr><td colSpan={6} class="muted">no client nodes</td></tr>}
              {clients.map((c) => (
                <tr data-testid="client-row" data-client={c.name}>
                  <td>{c.name}{!c.registered && <span class="muted"> (not registered)</span>}</td>
                  <td>{c.address ?? NA}</td><td>{fmtTime(c.last_seen)}</td>
                  <td data-testid="client-leases">{c.remote_leases.length ? c.remote_leases.join(', ') : NA}</td>
                  <td>{c.leases ?? NA}</td>
                  <td>{Object.entries(c.labels).map(([k, v]) => <span class="label">{k}={String(v)}</span>)}</td>
                </tr>))}
            </tbody>
          </table>
        </div>
      </Section>

      <Section title="GPU servers" error={serverErr && serverErr.message}>
        <div class="scroll">
          <table data-testid="gpu-servers">
            <thead><tr><th>node</th><th>lease</th><th>GPU</th><th>state</th><th>address</th><th>pid</th>
              <th>SMs</th><th>memory</th><th>started</th><th>reason</th></tr></thead>
            <tbody>
              {servers.length === 0 && <tr><td colSpan={10} class="muted">no GPU servers</td></tr>}
              {servers.map((s) => (
                <tr data-testid="server-row" data-lease={s.lease_id}>
                  <td>{s.node ?? NA}</td><td>{s.lease_id ?? NA}</td><td>{s.gpu_index ?? NA}</td>
                  <td><Badge state={s.state} testId="server-state" /></td><td>{s.address ?? NA}</td>
                  <td>{s.pid ?? NA}</td>
                  <td title={Number.isInteger(s.sm_count) ? `asked ${s.sm_count}` : ''}>{s.sm_count_granted ?? s.sm_count ?? NA}</td>
                  <td>{fmtMiB(s.memory_mb)}</td><td>{fmtTime(serverTime(s.started_at))}</td>
                  <td class="reason">{s.reason ?? ''}</td>
                </tr>))}
            </tbody>
          </table>
        </div>
      </Section>
    </div>
  );
}
