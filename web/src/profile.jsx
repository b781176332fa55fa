// The dashboard's pieces for GPU usage profiles: the badge on each GPU card, the "Idle but held"
// list of the overview, and the profile panel of a GPU's page. Data shaping is in profile.js.

import {fmtBytes, fmtDuration, fmtNum, fmtTime, NA} from './format.js';
import {fmtPeriod, idleButHeld, profileBadge, windowRows} from './profile.js';

const enc = encodeURIComponent;

export function ProfileBadge({profile}) {
  const b = profileBadge(profile);
  if (!b) return null;
  return <span class={`badge prof prof-${b.state}`} title={b.title} data-testid="profile-state"
               data-state={b.state}>{b.text}</span>;
}

export function IdleButHeld({gpus}) {
  const rows = idleButHeld(gpus);
  if (rows.length === 0) return null;
  return (
    <section class="idle-held" data-testid="idle-held">
      <h3>Idle but held <span class="muted">· memory held by processes that compute nothing</span></h3>
      <table>
        <thead><tr><th>GPU</th><th>held for</th><th>memory</th><th>processes</th><th>lease</th></tr></thead>
        <tbody>
          {rows.map((r) => (
            <tr data-testid="idle-held-row" data-node={r.node} data-index={r.index}>
              <td><a href={`#/gpu/${enc(r.node)}/${r.index}`}>{r.node} #{r.index}</a></td>
              <td>{fmtDuration(r.seconds)}</td>
              <td>{fmtBytes(r.memory_bytes)}</td>
              <td class="cmd">{r.processes.length ? r.processes.map((p) => p.text).join(', ') : NA}</td>
              <td>{r.owners.length ? r.owners.join(', ') : 'none'}</td>
            </tr>))}
        </tbody>
      </table>
    </section>
  );
}

function Q({q, fmt}) {
  if (!q) return <td class="muted">{NA}</td>;
  return <td>{fmt(q.p50)} / {fmt(q.p95)} / {fmt(q.p99)}</td>;
}

export function ProfilePanel({profile}) {
  const b = profileBadge(profile);
  if (!b) return <p class="muted" data-testid="profile-none">No usage profile: the node sends none.</p>;
  const c = profile.cycle;
  const idle = profile.allocated_idle;
  const mem = profile.memory || {};
  const changes = Array.isArray(profile.phase_changes) ? profile.phase_changes.slice(-8).reverse() : [];
  const pct = (v) => fmtNum(v, 0) + ' %';
  const watts = (v) => fmtNum(v, 0) + ' W';
  return (
    <div class="profile" data-testid="profile">
      <div class="facts">
        <div><span class="muted">state</span> <ProfileBadge profile={profile} /> for {fmtDuration(profile.state_seconds)}</div>
        {profile.insufficient_data && <div data-testid="profile-why"><span class="muted">why</span> {profile.insufficient_data}</div>}
        {c && <div data-testid="profile-period"><span class="muted">period</span> {fmtPeriod(c.period_s)} ({fmtNum((c.confidence ?? NaN) * 100, 0)} % sure, {c.method})</div>}
        {c && <div><span class="muted">utilisation lowest</span> {fmtNum(c.util_trough_offset_s, 1)} s into the cycle, next at {fmtTime(c.next_util_trough_at)}</div>}
        {idle && <div><span class="muted">held idle</span> {fmtBytes(idle.memory_bytes)} for {fmtDuration(idle.seconds)}</div>}
        <div><span class="muted">memory peak</span> {fmtBytes(mem.peak_used_bytes)} · headroom {fmtBytes(mem.headroom_bytes)}</div>
      </div>
      <table data-testid="profile-windows">
        <thead><tr><th>window</th><th>util p50 / p95 / p99</th><th>memory p50 / p95 / p99</th><th>power p50 / p95 / p99</th></tr></thead>
        <tbody>
          {windowRows(profile).map((r) => (
            <tr><td>{r.window}</td><Q q={r.util} fmt={pct} /><Q q={r.memory} fmt={fmtBytes} /><Q q={r.power} fmt={watts} /></tr>))}
        </tbody>
      </table>
      {changes.length > 0 && <div data-testid="phase-changes"><span class="muted">phase changes</span>
        <ul>{changes.map((x) => <li>{fmtTime(x.at)}: {x.from} → {x.to}{x.detail ? ` (${x.detail})` : ''}</li>)}</ul></div>}
    </div>
  );
}
