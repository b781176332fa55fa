#!/usr/bin/env bash
# flyt-node-manager benchmark: /metrics size and render time, the daemon's CPU and peak RSS while
# it samples at 1 s and is scraped every 15 s, and requests per second on /api/v1/gpus under wrk.
# The node: 8 simulated H100s with 200 processes whose PIDs are real (200 `sleep` children).
#   bench/node_bench.sh [build dir] [seconds, default 600]
set -euo pipefail
build=${1:-build}
seconds=${2:-600}
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
children=()
cleanup() {
  for p in "${children[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

for _ in $(seq 1 200); do sleep 100000 & children+=($!); done
{
  printf '[scenario]\nname = "bench"\n[[gpu]]\ncount = 8\nname = "NVIDIA H100 80GB HBM3"\n'
  printf 'memory_total_mib = 81559\nmemory_reserved_mib = 529\npower_limit_w = 700\n'
  printf 'max_sm_clock_mhz = 1980\nmax_mem_clock_mhz = 2619\n'
  printf 'utilization = { kind = "sine", mean = 60, amplitude = 35, period_s = 120 }\n'
  i=0
  for p in "${children[@]}"; do
    printf '[[process]]\ngpu = %d\npid = %d\nmemory_mib = 2048\n' $((i % 8)) "$p"
    i=$((i + 1))
  done
} >"$tmp/bench.toml"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
FLYT_NVML_LIBRARY="$build/lib/libflyt-sim-nvml.so" FLYT_SIM_SCENARIO="$tmp/bench.toml" \
  "$build/bin/flyt-node-manager" --listen "127.0.0.1:$port" --log-level warn 2>"$tmp/daemon.log" &
daemon=$!
children+=($daemon)
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
hz=$(getconf CLK_TCK)

# /metrics: size and time per scrape (curl's total time on loopback, median of 50).
curl -s "http://127.0.0.1:$port/metrics" >"$tmp/metrics.txt"
size=$(wc -c <"$tmp/metrics.txt")
series=$(grep -vc '^#' "$tmp/metrics.txt")
for _ in $(seq 1 50); do curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port/metrics"; done \
  | sort -n | awk '{a[NR]=$1} END {printf "%.2f\n", a[int((NR+1)/2)]*1000}' >"$tmp/scrape_ms"

# Steady state: 1 s sampling, a scrape every 15 s, for $seconds.
start_ticks=$(cpu_ticks)
start=$(date +%s.%N)
end=$(( $(date +%s) + seconds ))
while [ "$(date +%s)" -lt "$end" ]; do
  curl -s -o /dev/null "http://127.0.0.1:$port/metrics"
  sleep 15
done
elapsed=$(echo "$(date +%s.%N) - $start" | bc -l)
used_ticks=$(( $(cpu_ticks) - start_ticks ))
cpu_pct=$(echo "100 * $used_ticks / $hz / $elapsed" | bc -l)
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$daemon/status")

# Requests per second on /api/v1/gpus (wrk and the daemon share the 2 cores).
wrk_out=$(wrk -t2 -c8 -d10s --latency "http://127.0.0.1:$port/api/v1/gpus" 2>&1)
rps=$(awk '/Requests\/sec/ {print $2}' <<<"$wrk_out")
p50=$(awk '$1 == "50%" {print $2}' <<<"$wrk_out")
p99=$(awk '$1 == "99%" {print $2}' <<<"$wrk_out")
gpus_bytes=$(curl -s "http://127.0.0.1:$port/api/v1/gpus" | wc -c)

printf '| measure | value |\n|---|---|\n'
printf '| /metrics size (8 GPUs, 200 processes) | %d bytes, %d series |\n' "$size" "$series"
printf '| /metrics scrape time on loopback (median of 50, curl time_total) | %s ms |\n' "$(cat "$tmp/scrape_ms")"
printf '| daemon CPU, 1 s sampling + a scrape every 15 s, %.0f s | %.3f %% of one core |\n' "$elapsed" "$cpu_pct"
printf '| daemon peak RSS (VmHWM) | %.1f MiB |\n' "$(echo "$rss_kb / 1024" | bc -l)"
printf '| GET /api/v1/gpus (%d bytes) under wrk -t2 -c8 -d10s | %s requests/s, latency p50 %s, p99 %s |\n' "$gpus_bytes" "$rps" "$p50" "$p99"
