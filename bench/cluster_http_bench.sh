#!/usr/bin/env bash
# flyt-cluster-manager over HTTP (issue 4): heartbeat ingest rate, API requests per second with
# 1,000 nodes × 8 GPUs registered, and allocation latency end to end (durable SQLite commit included).
#   bench/cluster_http_bench.sh [build dir, default build] [seconds per wrk run, default 30]
#
# A real manager runs on a free loopback port with a SQLite store in a temporary directory and an
# admin token from FLYT_ADMIN_TOKEN. The heartbeat body is what a node manager sends: its snapshot
# is captured once from a real flyt-node-manager on the simulated h100x8-idle scenario (8 H100s).
# wrk (Debian) drives the load; bench/cluster_http_client.py (python3 http.client) registers the
# nodes, takes the leases and times allocations one after the other. Heartbeats and timed
# allocations use a new connection per request, as flyt-node-manager does: the manager's small
# responses stall ~40 ms on a reused connection (Nagle + delayed ACK), so keep-alive figures are
# measured separately and shown as such. wrk, the client and the manager share the machine's cores.
# Everything started here is stopped on exit.
set -euo pipefail
build=${1:-build}
seconds=${2:-30}
nodes=1000
src=$(cd "$(dirname "$0")/.." && pwd)
client="$src/bench/cluster_http_client.py"
tmp=$(mktemp -d)
children=()
cleanup() {
  for p in "${children[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck source=bench_lib.sh
. "$src/bench/bench_lib.sh"

# 1. A real node's snapshot: 8 idle H100s (simulated NVML), as the node manager serves it.
node_snapshot "$tmp/snapshot.json"

# 2. The manager. Nodes stay reachable between the phases without a background heartbeat stream
#    (unreachable_after = 1 h); allocations are also timed with heartbeats at the production rate.
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | head -c 40)
printf '[ledger]\nunreachable_after_seconds = 3600\n' >"$tmp/cluster.toml"
port=$(free_port)
url="http://127.0.0.1:$port"
FLYT_ADMIN_TOKEN="$token" "$build/bin/flyt-cluster-manager" --config "$tmp/cluster.toml" \
  --listen "127.0.0.1:$port" --store "sqlite:$tmp/flyt.db" --var-dir "$tmp/var" --log-level warn \
  2>"$tmp/manager.log" &
manager=$!
children+=("$manager")
wait_healthy "$url"

py() { python3 "$client" "$url" "$token" "$@"; }
hz=$(getconf CLK_TCK)
now() { date +%s.%N; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$manager/stat"; }
cpu_pct() { echo "100 * ($(cpu_ticks) - $1) / $hz / ($(now) - $2)" | bc -l; }  # since ticks $1, time $2
rss_mib() { awk -v k="$1" '$1 == k":" {printf "%.1f", $2 / 1024}' "/proc/$manager/status"; }
# wrk's summary: requests/s, p50, p99, non-2xx count.
wrk_field() { awk -v f="$1" '
  f == "rps" && /Requests\/sec/ {print $2}
  f == "p50" && $1 == "50%" {print $2}
  f == "p99" && $1 == "99%" {print $2}
  f == "errors" && /Non-2xx/ {print $5}' <<<"$2"; }
wrk_row() { printf '**%s /s**, p50 %s, p99 %s' "$(wrk_field rps "$1")" "$(wrk_field p50 "$1")" "$(wrk_field p99 "$1")"; }
j() { python3 -c "import json,sys; print('%.2f' % json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

py register "$tmp/snapshot.json" "$nodes"
py body "$tmp/snapshot.json" "$tmp/body.json"
body_bytes=$(wc -c <"$tmp/body.json")
rss_registered=$(rss_mib VmRSS)

# 3a. Heartbeat ingest: wrk POSTs heartbeats for node-0000..node-0999 in turn, as fast as it can,
#     a connection per heartbeat; then briefly reusing connections.
py lua "$tmp/body.json" "$nodes" close >"$tmp/heartbeat.lua"
py lua "$tmp/body.json" "$nodes" reuse >"$tmp/heartbeat-keepalive.lua"
ticks=$(cpu_ticks); t0=$(now)
hb_out=$(wrk -t2 -c8 -d"${seconds}s" --latency -s "$tmp/heartbeat.lua" "$url" 2>&1)
hb_cpu=$(cpu_pct "$ticks" "$t0")
hb_rss=$(rss_mib VmRSS)
hb_keep_out=$(wrk -t2 -c8 -d5s --latency -s "$tmp/heartbeat-keepalive.lua" "$url" 2>&1)

# 3b. Reads with 1,000 nodes × 8 GPUs and ~100 leases, keep-alive connections. A pause after each
#     run lets requests still in flight finish before the next measurement.
py leases 100
auth=(-H "Authorization: Bearer $token")
metric() { curl -sf "${auth[@]}" "$url/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
leases=$(curl -sf "${auth[@]}" "$url/api/v1/allocations" |
  python3 -c 'import json,sys; print(len(json.load(sys.stdin)["allocations"]))')
gpus_bytes=$(curl -sf "${auth[@]}" "$url/api/v1/gpus" | wc -c)
allocs_bytes=$(curl -sf "${auth[@]}" "$url/api/v1/allocations" | wc -c)
allocs_out=$(wrk -t2 -c8 -d"${seconds}s" --latency "${auth[@]}" "$url/api/v1/allocations" 2>&1)
sleep 3
ticks=$(cpu_ticks); t0=$(now)
gpus_out=$(wrk -t2 -c8 -d"${seconds}s" --latency "${auth[@]}" "$url/api/v1/gpus" 2>&1)
gpus_cpu=$(cpu_pct "$ticks" "$t0")
sleep 5
rss_after_gpus=$(rss_mib VmRSS)
rss_peak=$(rss_mib VmHWM)

# 3c. Allocation then release, one after the other; a refusal (8 GPUs of 200 GB: 409 with the
#     reasons per node); then the same allocations while 1,000 nodes heartbeat every 5 s (200/s).
alloc=$(py alloc 2000)
alloc_keep=$(py alloc 50 keepalive)
refused=$(py refused 200)
senders=()
for _ in 1 2; do  # two senders of 100/s: one Python process falls short of 200/s here
  python3 "$client" "$url" "$token" heartbeats "$tmp/snapshot.json" "$nodes" 100 &
  senders+=($!)
  children+=($!)
done
sleep 2
beats0=$(metric flyt_cluster_heartbeats_total); t0=$(now)
alloc_hb=$(py alloc 2000)
bg_rate=$(echo "($(metric flyt_cluster_heartbeats_total) - $beats0) / ($(now) - $t0)" | bc -l)
kill "${senders[@]}"

# 3d. Heartbeat latency at the production rate (200/s, one sender), alone and while one client
#     reads GET /api/v1/gpus in a loop (a dashboard refreshing as fast as it can).
sleep 1
hb_alone=$(py hblat "$tmp/snapshot.json" 1000 200)
wrk -t1 -c1 -d60s "${auth[@]}" "$url/api/v1/gpus" >/dev/null 2>&1 &
reader=$!
children+=("$reader")
sleep 1
hb_reader=$(py hblat "$tmp/snapshot.json" 1000 200)
kill "$reader"
sleep 3

# 3e. 1,000 jobs waiting (an autotuner sweep asking for a GPU model no node has, each experiment
#     with its own memory need): heartbeats wake the scheduler, which runs pass after pass.
waiting=$(py waiting 1000)
sleep 3
passes0=$(metric flyt_cluster_schedule_passes_total); t0=$(now)
hb_queue=$(py hblat "$tmp/snapshot.json" 1000 200)
alloc_queue=$(py alloc 20)
pass_rate=$(echo "($(metric flyt_cluster_schedule_passes_total) - $passes0) / ($(now) - $t0)" | bc -l)
last_pass=$(metric flyt_cluster_last_schedule_pass_seconds)

printf '| measure | value |\n|---|---|\n'
printf '| heartbeat body (8 GPUs) | %d bytes |\n' "$body_bytes"
printf '| heartbeats, %d nodes, a connection each, wrk -t2 -c8 -d%ss | %s, non-2xx %s |\n' "$nodes" \
  "$seconds" "$(wrk_row "$hb_out")" "$(wrk_field errors "$hb_out" | grep . || echo 0)"
printf '| manager CPU during heartbeat ingest | %.0f %% of one core |\n' "$hb_cpu"
printf '| heartbeats reusing connections (keep-alive), wrk -t2 -c8 -d5s | %s |\n' "$(wrk_row "$hb_keep_out")"
printf '| manager RSS: %d nodes registered / after heartbeats / after GET /api/v1/gpus / peak (VmHWM) | %s / %s / %s / %s MiB |\n' \
  "$nodes" "$rss_registered" "$hb_rss" "$rss_after_gpus" "$rss_peak"
printf '| GET /api/v1/gpus (%d GPUs, %d bytes), wrk -t2 -c8 | %s (manager CPU %.0f %%) |\n' \
  $((nodes * 8)) "$gpus_bytes" "$(wrk_row "$gpus_out")" "$gpus_cpu"
printf '| GET /api/v1/allocations (%d leases, %d bytes), wrk -t2 -c8 | %s |\n' "$leases" "$allocs_bytes" \
  "$(wrk_row "$allocs_out")"
printf '| POST /api/v1/allocations (granted, durable commit), 2,000 sequential | p50 %s ms, p99 %s ms |\n' \
  "$(j "$alloc" post_p50_ms)" "$(j "$alloc" post_p99_ms)"
printf '| DELETE /api/v1/allocations/{id} | p50 %s ms, p99 %s ms |\n' "$(j "$alloc" delete_p50_ms)" \
  "$(j "$alloc" delete_p99_ms)"
printf '| POST then DELETE | p50 %s ms, p99 %s ms |\n' "$(j "$alloc" both_p50_ms)" "$(j "$alloc" both_p99_ms)"
printf '| POST then DELETE on one keep-alive connection, 50 sequential | p50 %s ms, p99 %s ms |\n' \
  "$(j "$alloc_keep" both_p50_ms)" "$(j "$alloc_keep" both_p99_ms)"
printf '| POST refused (409, %s-byte reasons), 200 sequential | p50 %s ms, p99 %s ms |\n' \
  "$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['refusal_bytes'])" "$refused")" \
  "$(j "$refused" post_p50_ms)" "$(j "$refused" post_p99_ms)"
printf '| POST (granted) while 1,000 nodes heartbeat every 5 s (%.0f/s reached) | p50 %s ms, p99 %s ms |\n' \
  "$bg_rate" "$(j "$alloc_hb" post_p50_ms)" "$(j "$alloc_hb" post_p99_ms)"
printf '| POST then DELETE, same | p50 %s ms, p99 %s ms |\n' "$(j "$alloc_hb" both_p50_ms)" \
  "$(j "$alloc_hb" both_p99_ms)"
printf '| heartbeat latency at 200/s, one sender | p50 %s ms, p99 %s ms |\n' "$(j "$hb_alone" p50_ms)" \
  "$(j "$hb_alone" p99_ms)"
printf '| same, while one client reads GET /api/v1/gpus in a loop | p50 %s ms, p99 %s ms |\n' \
  "$(j "$hb_reader" p50_ms)" "$(j "$hb_reader" p99_ms)"
printf '| same, with %s jobs waiting in the queue | p50 %s ms, p99 %s ms (%.1f passes/s, last pass %.2f s) |\n' \
  "$waiting" "$(j "$hb_queue" p50_ms)" "$(j "$hb_queue" p99_ms)" "$pass_rate" "$last_pass"
printf '| POST then DELETE with those jobs waiting, 20 sequential | p50 %s ms, p99 %s ms |\n' \
  "$(j "$alloc_queue" both_p50_ms)" "$(j "$alloc_queue" both_p99_ms)"
if grep -qiE 'error|critical' "$tmp/manager.log"; then
  echo
  echo "manager log (errors, last 5):"
  grep -iE 'error|critical' "$tmp/manager.log" | tail -5
fi
