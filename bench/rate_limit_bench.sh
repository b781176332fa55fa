#!/usr/bin/env bash
# One token floods the cluster manager's API (issue 32, point 6): another client's allocation
# latency and a node's heartbeat latency, each median and p99, without a flood and while wrk
# floods with one client token — once with the per-token rate limit off (rate_per_second = 0) and
# once on (by default 100 per second, burst 200: the defaults), in the same run.
#   bench/rate_limit_bench.sh [build dir, default build] [seconds per probe run, default 20]
#                             [nodes, default 1] [flooded path, default /api/v1/allocations]
#                             [rate limit per second when on, default 100 (burst: twice that)]
#
# A real manager on a free loopback port, SQLite store in a temporary directory, `nodes` nodes of 8
# GPUs (the snapshot of a real flyt-node-manager on the simulated h100x8-idle scenario; with more
# than one, GET /api/v1/gpus is an expensive read). The flood: wrk, 2 threads, 32 keep-alive
# connections, GET <flooded path> with the flooding token. The probe
# (bench/rate_limit_probe.py): heartbeats every 100 ms with the node token and a one-GPU allocation
# and release every 250 ms with another client token, each a new connection, timed end to end.
# wrk, the probe and the manager share the machine's cores. Everything started here is stopped on
# exit.
set -euo pipefail
build=${1:-build}
seconds=${2:-20}
nodes=${3:-1}
flood_path=${4:-/api/v1/allocations}
limit=${5:-100}
src=$(cd "$(dirname "$0")/.." && pwd)
probe="$src/bench/rate_limit_probe.py"
tmp=$(mktemp -d)
children=()
cleanup() {
  for p in "${children[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
command -v wrk >/dev/null || { echo "rate_limit_bench: needs wrk (apt-get install wrk)" >&2; exit 1; }

# shellcheck source=bench_lib.sh
. "$src/bench/bench_lib.sh"

# 1. A real node's snapshot: 8 idle H100s (simulated NVML), as the node manager serves it.
node_snapshot "$tmp/snapshot.json"

admin=bench-admin-token-000000
node_token=bench-node-token-0000000
flooder=bench-flooder-token-00000
client=bench-client-token-000000

# phase <rate_per_second>: a fresh manager with that limit; prints one table row per probe run.
phase() {
  local rate=$1 label
  label=$([ "$rate" = 0 ] && echo "off" || echo "$rate/s, burst $((2 * rate))")
  rm -rf "$tmp/var" "$tmp/flyt.db"*
  cat >"$tmp/cluster.toml" <<EOF
[http]
rate_per_second = $rate
rate_burst = $((rate > 0 ? 2 * rate : 1))
[ledger]
unreachable_after_seconds = 3600
[auth]
tokens = [
  { name = "ops", token = "$admin", role = "admin" },
  { name = "nodes", token = "$node_token", role = "node" },
  { name = "flooder", token = "$flooder", role = "client" },
  { name = "bob", token = "$client", role = "client" },
]
EOF
  local port url manager
  port=$(free_port)
  url="http://127.0.0.1:$port"
  "$build/bin/flyt-cluster-manager" --config "$tmp/cluster.toml" --listen "127.0.0.1:$port" \
    --store "sqlite:$tmp/flyt.db" --var-dir "$tmp/var" --log-level warn 2>"$tmp/manager.log" &
  manager=$!
  children+=("$manager")
  wait_healthy "$url"
  # The other nodes (the probe sends probe-node's heartbeats).
  if [ "$nodes" -gt 1 ]; then  # node-0000 … node-(nodes-2), beside probe-node
    python3 "$src/bench/cluster_http_client.py" "$url" "$admin" register "$tmp/snapshot.json" "$((nodes - 1))" >/dev/null
  fi
  row() {  # row <flood> <probe json> [wrk output]
    python3 - "$label" "$1" "$2" "${3:-}" <<'PY'
import json, re, sys
label, flood, probe, wrk = sys.argv[1:5]
p = json.loads(probe)
a, h = p["allocation"], p["heartbeat"]
rps = re.search(r"Requests/sec:\s+([\d.]+)", wrk)
non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", wrk)
total = re.search(r"(\d+) requests in", wrk)
fl = "-" if not wrk else "%s req/s, %s of %s answered 429" % (
    rps.group(1) if rps else "?", non2xx.group(1) if non2xx else "0", total.group(1) if total else "?")
print("| %s | %s | %s | %.1f / %.1f ms (%d, %d failed) | %.1f / %.1f ms (%d, %d failed) |" % (
    label, flood, fl, a["p50_ms"], a["p99_ms"], a["count"], a["failures"],
    h["p50_ms"], h["p99_ms"], h["count"], h["failures"]))
PY
  }
  quiet=$(python3 "$probe" "$url" "$node_token" "$client" "$tmp/snapshot.json" "$seconds")
  row "no" "$quiet"
  wrk -t2 -c32 -d"$((seconds + 3))s" -H "Authorization: Bearer $flooder" "$url$flood_path" \
    >"$tmp/wrk.out" 2>&1 &
  local wrk_pid=$!
  children+=("$wrk_pid")
  sleep 1
  flooded=$(python3 "$probe" "$url" "$node_token" "$client" "$tmp/snapshot.json" "$seconds")
  wait "$wrk_pid" || true
  row "yes" "$flooded" "$(cat "$tmp/wrk.out")"
  curl -sf -H "Authorization: Bearer $admin" "$url/metrics" |
    grep -E '^flyt_cluster_http_requests_(limited_total\{role="client"\}|priority_total)' >&2 || true
  kill "$manager"
  wait "$manager" 2>/dev/null || true
}

echo "cores: $(nproc), $seconds s per probe run, $nodes node(s), flood: GET $flood_path"
echo "| rate limit | flood | flooding token (wrk) | allocation p50 / p99 (n, failed) | heartbeat p50 / p99 (n, failed) |"
echo "|---|---|---|---|---|"
phase 0
phase "$limit"
