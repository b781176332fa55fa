#!/usr/bin/env bash
# End to end: slow clients must not stop the control plane (issue 13, point 1). A cluster manager
# and a node manager on a simulated node, over loopback, with a lease granted. Then 220
# connections from 127.0.0.2 that send one byte of a request head per second, first against the
# manager, then against the node manager, each for longer than unreachable_after + lease_grace
# (3 + 3 s here). Throughout, /healthz and /metrics from 127.0.0.1 answer within 1 s each, the
# node's heartbeats keep arriving (it stays reachable), and the lease is still there at the end.
# Usage: slow_clients_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
unset FLYT_NVML_LIBRARY FLYT_SIM_TIME FLYT_SIM_REASON FLYT_TOKEN FLYT_ADMIN_TOKEN FLYT_CLUSTER_MANAGER

cluster_config <<EOF
[ledger]
unreachable_after_seconds = 3
lease_grace_seconds = 3
EOF
cat >"$tmp/node.toml" <<EOF
[monitor]
interval_ms = 500
[cluster-manager]
heartbeat_interval_s = 1
EOF

echo "== 1. a manager, a node manager, a lease"
start_manager "127.0.0.1:$port" "$tmp/cm.log" --config "$tmp/cm.toml"
check "the manager serves /healthz" curl -sf "$url/healthz"
start_node node-a h100x8-idle "$url" "$node_token" --config "$tmp/node.toml"
node_url="http://127.0.0.1:${node_ports[node-a]}"
check "the node registers" wait_for 20 nodes_reachable 1
r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"ttl_seconds":3600}')
check "a lease is granted" test "$(code_of "$r")" = 201
lease=$(field "$r" "d['id']")
has_lease() { test "$(get_field /api/v1/allocations "any(a['id']=='$lease' for a in d['allocations'])")" = True; }

# flood <target host:port> <probes...>: the slow clients and the probes; the JSON summary goes
# to $tmp/flood.json and stdout.
flood() {
  local target=$1
  shift
  timeout 40 python3 "$src/tests/e2e/slow_clients.py" --target "$target" --from 127.0.0.2 \
    --connections 220 --seconds 8 --every 0.5 --limit 1 "$@" | tee "$tmp/flood.json"
}
summary() { jq_py "print($1)" <"$tmp/flood.json"; }

echo "== 2. 220 slow connections against the cluster manager"
flood "127.0.0.1:$port" --probe "$url/healthz" --probe "$url/metrics,$admin" \
  --reachable "$url/api/v1/nodes,$admin"
check "probes ran" test "$(summary "d['probes'] >= 30")" = True
check "every probe of the manager answered within 1 s, the node stayed reachable" \
  test "$(summary "d['failed']")" = 0
check "the manager held the per-peer cap's worth of slow connections" test "$(summary "d['server_open_max'] >= 64")" = True
check "connections over the per-peer cap got 429" test "$(summary "d['answers'].get('HTTP/1.1 429 Too Many Requests', 0) > 0")" = True
check "the lease is still there" has_lease
metrics=$(curl -s -H "Authorization: Bearer $admin" "$url/metrics")
check "the manager's /metrics counts refused connections" \
  grep -qE '^flyt_cluster_http_connections_refused_total\{reason="per_peer"\} [1-9]' <<<"$metrics"
check "the manager's /metrics counts its impaired ingest" \
  grep -qE '^flyt_cluster_ingest_impaired_total [1-9]' <<<"$metrics"

echo "== 3. 220 slow connections against the node manager"
flood "127.0.0.1:${node_ports[node-a]}" --probe "$node_url/healthz" --probe "$node_url/metrics" \
  --reachable "$url/api/v1/nodes,$admin"
check "probes ran" test "$(summary "d['probes'] >= 30")" = True
check "every probe of the node answered within 1 s, the node stayed reachable" \
  test "$(summary "d['failed']")" = 0
check "connections over the per-peer cap got 429" test "$(summary "d['answers'].get('HTTP/1.1 429 Too Many Requests', 0) > 0")" = True
check "the node held the per-peer cap's worth of slow connections" test "$(summary "d['server_open_max'] >= 64")" = True
check "the lease is still there" has_lease
check "the node's /metrics counts refused connections" \
  grep -qE '^flyt_node_http_connections_refused_total\{reason="per_peer"\} [1-9]' \
  <<<"$(curl -s "$node_url/metrics")"

echo "== 4. after the floods"
check "the node is reachable" nodes_reachable 1
check "no lease was released" test "$(get_field "/api/v1/events?limit=1000" "sum(1 for e in d['events'] if e['kind']=='lease.expired')")" = 0
finish
