#!/usr/bin/env bash
# The CUDA tracer's cost (issue 14), side by side in one run on one machine. Needs root (BPF).
#
# 1. Cost per traced call: flyt-bench-trace-loop issues one probed call in a tight loop, measured
#    (a) untraced, (b) with an empty uprobe on that function (flyt-bench-uprobe-floor: the price of
#    the trap on this machine), (b') an empty uprobe + uretprobe, and (c) under flyt's tracer
#    (flyt-trace: every probe, the ring buffer, the aggregator). Two calls:
#      launch  an empty kernel through flyt's libcudart.so.13 (__cudaLaunchKernel) against
#              flyt-gpu-server --backend sim;
#      malloc  cudaMalloc through NVIDIA's libcudart.so.13 with no driver (every call fails fast).
#    The cases alternate within each repeat; medians over the repeats. Target: (c) <= 1.5 x (b).
# 2. Zero loss: launches at a paced rate for --loss-seconds under flyt-trace, rate after rate;
#    the lost counter must stay 0 and the launches counted must equal the launches made. Reports
#    the highest rate reached with zero loss and flyt-trace's CPU while draining it.
# 3. flyt-node-manager's footprint (RSS, CPU) with [trace] enabled = false and = true, idle and
#    under the highest zero-loss rate.
#
#   bench/trace_bench.sh [build dir, default build] [--calls N] [--repeats R]
#       [--loss-seconds S] [--rates R1,R2,...] [--threads T] [--skip-node] [--out DIR]
#
# Prints Markdown tables (for docs/benchmarks.md) on stdout, progress on stderr.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  build=$1
  shift
fi
calls=20000
repeats=5
loss_seconds=30
rates=25000,50000,100000,150000,200000
threads=2
skip_node=0
out=
while [ $# -gt 0 ]; do
  case $1 in
    --calls) calls=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --loss-seconds) loss_seconds=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --skip-node) skip_node=1; shift ;;
    --out) out=$2; shift 2 ;;
    *)
      echo "usage: $0 [build dir] [--calls N] [--repeats R] [--loss-seconds S] [--rates R1,R2]" \
        "[--threads T] [--skip-node] [--out DIR]" >&2
      exit 2
      ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "$0: needs root (BPF)" >&2
  exit 2
fi
build=$(cd "$build" && pwd)
bin=$build/bin
flyt_runtime=$build/lib/flyt
nvidia_runtime=/usr/local/cuda/lib64
for f in "$bin/flyt-gpu-server" "$bin/flyt-trace" "$bin/flyt-bench-trace-loop" \
  "$bin/flyt-bench-uprobe-floor" "$bin/flyt-node-manager" "$flyt_runtime/libcudart.so.13"; do
  [ -e "$f" ] || { echo "$0: $f is missing (build the bench targets: -DFLYT_BUILD_BENCH=ON)" >&2; exit 1; }
done

# BPF run-time statistics add two clock reads to every program run, traced or floor: off for the
# run, restored after.
stats_was=$(sysctl -n kernel.bpf_stats_enabled 2>/dev/null || echo 0)
if [ "$stats_was" = 1 ]; then
  echo "note: kernel.bpf_stats_enabled was 1; off for this run" >&2
  sysctl -qw kernel.bpf_stats_enabled=0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flyt-trace-bench.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
  if [ "$stats_was" = 1 ]; then sysctl -qw kernel.bpf_stats_enabled=1; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for_file() {  # wait_for_file <file> <pid>: until the file exists or the process died
  for _ in $(seq 1 300); do
    [ -e "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
stop() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
json_field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())[sys.argv[1]])' "$1"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

"$bin/flyt-gpu-server" --backend sim --listen "unix:$tmp/gpu.sock" >"$tmp/server.log" 2>&1 &
server=$!
pids+=("$server")
for _ in $(seq 1 100); do grep -q "listening on" "$tmp/server.log" && break; sleep 0.1; done

# loop <case> <extra args...>: one run of the loop program for a case; prints its JSON line.
loop() {
  local c=$1
  shift
  if [ "$c" = launch ]; then
    FLYT_SERVER="unix:$tmp/gpu.sock" LD_LIBRARY_PATH=$flyt_runtime "$bin/flyt-bench-trace-loop" --call launch "$@"
  else
    LD_LIBRARY_PATH=$nvidia_runtime "$bin/flyt-bench-trace-loop" --call malloc "$@"
  fi
}
library_of() { if [ "$1" = launch ]; then readlink -f "$flyt_runtime/libcudart.so.13"; else readlink -f "$nvidia_runtime/libcudart.so.13"; fi; }
symbol_of() { if [ "$1" = launch ]; then echo __cudaLaunchKernel; else echo cudaMalloc; fi; }

# with_floor <case> <--return or ""> <command...>: runs the command with empty probes attached.
with_floor() {
  local c=$1 ret=$2
  shift 2
  rm -f "$tmp/floor.ready"
  "$bin/flyt-bench-uprobe-floor" --file "$(library_of "$c")" --symbol "$(symbol_of "$c")" $ret \
    --ready-file "$tmp/floor.ready" 2>"$tmp/floor.err" &
  local f=$!
  pids+=("$f")
  wait_for_file "$tmp/floor.ready" "$f" || { cat "$tmp/floor.err" >&2; exit 1; }
  "$@"
  stop "$f"
}
# What flyt-trace probes at start: flyt's runtime (not in the default folders), NVIDIA's, libc.
trace_dirs=(--library-dir "$flyt_runtime" --library-dir "$nvidia_runtime" --library-dir /lib/x86_64-linux-gnu)

# with_tracer <json out> <command...>: runs the command under flyt-trace (started first).
with_tracer() {
  local json=$1
  shift
  rm -f "$tmp/trace.ready"
  "$bin/flyt-trace" "${trace_dirs[@]}" --ready-file "$tmp/trace.ready" --json "$json" 2>"$tmp/trace.err" &
  tracer=$!
  pids+=("$tracer")
  wait_for_file "$tmp/trace.ready" "$tracer" || { cat "$tmp/trace.err" >&2; exit 1; }
  "$@"
  stop "$tracer"
}

# --- 1. Cost per call ---------------------------------------------------------------------------
echo "## Cost per traced call ($calls calls x $repeats repeats, medians, ns per call)"
echo
echo "| call | (a) untraced | (b) empty uprobe | (b') empty uprobe + uretprobe | (c) flyt's tracer | (c) / (b) | target (c) <= 1.5 x (b) |"
echo "|---|---|---|---|---|---|---|"
for c in launch malloc; do
  : >"$tmp/$c.a"; : >"$tmp/$c.b"; : >"$tmp/$c.b2"; : >"$tmp/$c.c"
  for r in $(seq 1 "$repeats"); do
    echo "cost: $c, repeat $r/$repeats" >&2
    loop "$c" --calls "$calls" | json_field ns_per_call >>"$tmp/$c.a"
    with_floor "$c" "" loop "$c" --calls "$calls" | json_field ns_per_call >>"$tmp/$c.b"
    with_floor "$c" --return loop "$c" --calls "$calls" | json_field ns_per_call >>"$tmp/$c.b2"
    with_tracer "$tmp/cost-$c-$r.json" loop "$c" --calls "$calls" | json_field ns_per_call >>"$tmp/$c.c"
  done
  a=$(median <"$tmp/$c.a"); b=$(median <"$tmp/$c.b"); b2=$(median <"$tmp/$c.b2"); cc=$(median <"$tmp/$c.c")
  ratio=$(echo "$cc / $b" | bc -l)
  met=$(echo "$ratio <= 1.5" | bc -l)
  printf '| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %s |\n' "$c" "$a" "$b" "$b2" "$cc" "$ratio" \
    "$([ "$met" = 1 ] && echo met || echo "not met")"
done
echo

# --- 2. Zero loss -------------------------------------------------------------------------------
echo "## Zero loss: paced launches for ${loss_seconds} s under flyt-trace ($threads threads)"
echo
echo "| target calls/s | reached calls/s | launches made | launches counted | events lost | flyt-trace CPU % |"
echo "|---|---|---|---|---|---|"
best_rate=0
IFS=, read -r -a rate_list <<<"$rates"
for rate in "${rate_list[@]}"; do
  per_thread=$(( rate * loss_seconds / threads ))
  echo "zero loss: $rate calls/s for $loss_seconds s" >&2
  rm -f "$tmp/trace.ready"
  "$bin/flyt-trace" "${trace_dirs[@]}" --ready-file "$tmp/trace.ready" --json "$tmp/loss-$rate.json" 2>"$tmp/trace.err" &
  tracer=$!
  pids+=("$tracer")
  wait_for_file "$tmp/trace.ready" "$tracer" || { cat "$tmp/trace.err" >&2; exit 1; }
  t0=$(cpu_ticks "$tracer"); s0=$(date +%s.%N)
  loop launch --calls "$per_thread" --threads "$threads" --rate "$rate" >"$tmp/loss-$rate.loop"
  t1=$(cpu_ticks "$tracer"); s1=$(date +%s.%N)
  stop "$tracer"
  read -r made reached counted lost < <(python3 - "$tmp/loss-$rate.loop" "$tmp/loss-$rate.json" <<'EOF'
import json, sys
loop = json.loads(open(sys.argv[1]).readline())
trace = json.load(open(sys.argv[2]))
made = loop["calls"] + 1  # the loop's warm-up launch
counted = sum(p["launches"] for p in trace["processes"] if p["pid"] == loop["pid"])
print(made, int(loop["calls_per_second"]), counted, trace["health"]["events_lost"])
EOF
)
  cpu=$(echo "100 * ($t1 - $t0) / $hz / ($s1 - $s0)" | bc -l)
  printf '| %d | %d | %d | %d | %d | %.1f |\n' "$rate" "$reached" "$made" "$counted" "$lost" "$cpu"
  if [ "$lost" = 0 ] && [ "$made" = "$counted" ]; then
    # The rate counts as reached when the paced loop kept within 5 % of it.
    if [ "$(echo "$reached >= 0.95 * $rate" | bc -l)" = 1 ]; then best_rate=$rate; fi
  fi
done
echo
echo "Highest rate reached with zero loss and exact counts: **$best_rate calls/s**."
echo

# --- 3. Node manager footprint ------------------------------------------------------------------
if [ "$skip_node" = 1 ]; then
  if [ -n "$out" ]; then mkdir -p "$out"; cp "$tmp"/*.json "$out"/ 2>/dev/null || true; fi
  exit 0
fi
load_rate=$best_rate
[ "$load_rate" -gt 0 ] || load_rate=${rate_list[0]}
echo "## flyt-node-manager footprint (simulated GPUs; load: $load_rate launches/s for ${loss_seconds} s)"
echo
echo "| [trace] enabled | idle RSS MiB | idle CPU % | load RSS MiB | load CPU % | events lost |"
echo "|---|---|---|---|---|---|"
for enabled in false true; do
  echo "node manager: [trace] enabled = $enabled" >&2
  printf '[trace]\nenabled = %s\nlibrary_dirs = ["%s", "%s", "/lib/x86_64-linux-gnu"]\n' \
    "$enabled" "$flyt_runtime" "$nvidia_runtime" >"$tmp/node-$enabled.toml"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  FLYT_NVML_LIBRARY="$build/lib/libflyt-sim-nvml.so" \
    FLYT_SIM_SCENARIO="$src/sim/scenarios/h100x8-idle.toml" "$bin/flyt-node-manager" --config "$tmp/node-$enabled.toml" --listen "127.0.0.1:$port" \
    --log-level warn 2>"$tmp/node-$enabled.log" &
  node=$!
  pids+=("$node")
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  sleep 2
  t0=$(cpu_ticks "$node"); s0=$(date +%s.%N)
  sleep 20
  t1=$(cpu_ticks "$node"); s1=$(date +%s.%N)
  idle_rss=$(awk '/VmRSS/ {print $2}' "/proc/$node/status")
  idle_cpu=$(echo "100 * ($t1 - $t0) / $hz / ($s1 - $s0)" | bc -l)
  per_thread=$(( load_rate * loss_seconds / threads ))
  t0=$(cpu_ticks "$node"); s0=$(date +%s.%N)
  loop launch --calls "$per_thread" --threads "$threads" --rate "$load_rate" >/dev/null
  sleep 1
  t1=$(cpu_ticks "$node"); s1=$(date +%s.%N)
  load_rss=$(awk '/VmHWM/ {print $2}' "/proc/$node/status")
  load_cpu=$(echo "100 * ($t1 - $t0) / $hz / ($s1 - $s0)" | bc -l)
  lost=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^flyt_cuda_tracer_events_lost_total/ {print $2}')
  printf '| %s | %.1f | %.2f | %.1f | %.2f | %s |\n' "$enabled" "$(echo "$idle_rss / 1024" | bc -l)" \
    "$idle_cpu" "$(echo "$load_rss / 1024" | bc -l)" "$load_cpu" "${lost:-n/a}"
  stop "$node"
done
if [ -n "$out" ]; then mkdir -p "$out"; cp "$tmp"/*.json "$out"/ 2>/dev/null || true; fi
