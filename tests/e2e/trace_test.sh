#!/usr/bin/env bash
# End to end: the CUDA tracer (flyt-trace, src/trace) on real processes with real uprobes. The
# programs of tests/trace make exactly known CUDA calls; the
# figures flyt-trace reports for each process must be exactly those of tests/trace/expectations.py
# (check_trace.py prints one ok/FAIL line per figure, expected vs seen), and the launches those the
# sim server's launch log (or the test driver's) holds for that pid. Cases:
#   flyt's libcudart.so.13 against flyt-gpu-server --backend sim: trace_memory (copies, memsets,
#     an out-of-memory retry loop, pinned memory, a leak at exit), trace_kernels (kernels by name
#     and shape, streams, syncs), its per-thread-default-stream build, trace_graph (a capture,
#     instantiation and 5 graph launches, not checked against the launch log), trace_threads (four threads' own default streams);
#   two processes at once (separate pids, separate figures);
#   a program gone before its records are drained (flyt-trace stopped meanwhile): its environment
#     still known (remote_server);
#   NVIDIA's libcudart.so.13 with no driver, and the -cudart=static build: every call fails, the
#     failures are counted by name and no memory is (figures from the programs' --calls logs); the
#     static build's first run is attached late (lower bounds), its second exact;
#   the static build stripped: reported in health.unprobeable;
#   the driver API (trace_driver) against the test libcuda.so.1 (tests/trace/test_libcuda.c);
#   a process started before flyt-trace: found by the /proc scan, attached_late, all its calls
#     counted (it waits for a file before its first call).
# Needs root (BPF). Skips (77) with the reason when not root, when flyt-trace, flyt's runtime or
# the nvcc-built programs are missing, or when `flyt-trace --duration 0` exits 3 (tracing
# unavailable here).
# Usage: trace_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d -t flyt-trace-e2e.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT

# shellcheck source=trace_lib.sh
. "$(dirname "$0")/trace_lib.sh"
remote_setup "$build" "$build/tests/trace/trace_kernels"
for p in trace_memory trace_kernels_ptds trace_kernels_static trace_kernels_static_stripped \
  trace_graph trace_threads trace_driver; do
  [ -x "$build/tests/trace/$p" ] || skip "tests/trace/$p is not built"
done
trace_preflight

port=$(free_port)
endpoint=127.0.0.1:$port
log=$tmp/launches.jsonl
"$server_bin" --backend sim --listen "$endpoint" --launch-log "$log" >>"$tmp/server.log" 2>&1 &
pids+=("$!")
check "server starts" wait_for 20 "$server_bin" stats --server "$endpoint"

flyt_env=(env FLYT_SIM_DEVICE=1 "FLYT_SERVER=$endpoint" "LD_LIBRARY_PATH=$runtime_dir")

# The folders whose CUDA libraries flyt-trace probes at start, as an operator lists them in
# [trace] library_dirs: flyt's runtime, the test driver and the system's, so that every program is
# traced from its first call (a library first seen when a program opens it is probed a moment
# later: that program is marked attached_late).
library_dirs=(--library-dir "$runtime_dir" --library-dir "$build/tests/trace/driver"
  --library-dir /usr/local/cuda/lib64 --library-dir /lib/x86_64-linux-gnu)


# ---- flyt's runtime against the sim server, one program after another ----
# One flyt-trace session runs every program but the early one (starting and stopping flyt-trace
# is what takes time: probes on every process's libc), one after another unless marked "&".
session flyt
# ---- flyt's runtime against the sim server ----
step flyt memory "${flyt_env[@]}" "$programs/trace_memory"
step flyt kernels "${flyt_env[@]}" "$programs/trace_kernels"
step flyt kernels_ptds "${flyt_env[@]}" "$programs/trace_kernels_ptds"
step flyt graph "${flyt_env[@]}" "$programs/trace_graph"
step flyt threads "${flyt_env[@]}" "$programs/trace_threads"
# ---- two processes at once: the same kernels, different counts ----
step flyt "&" pair2 "${flyt_env[@]}" "$programs/trace_kernels" --repeat 2
step flyt "&" pair3 "${flyt_env[@]}" "$programs/trace_kernels" --repeat 3
echo wait >>"$tmp/flyt.sh"
# ---- a program gone before its records are drained ----
# flyt-trace (the script's parent) is stopped, every thread of it, while the program runs to its
# end and is reaped: its records, its library open first, are drained once /proc has nothing of
# it. Its environment (FLYT_SERVER: remote_server) must come from what the BPF side copied while
# it opened the runtime, as on a loaded machine whose drain comes late.
cat >>"$tmp/flyt.sh" <<'EOF_STOP'
kill -STOP "$PPID"
i=0
while [ "$i" -lt 100 ] && grep -h '^State:' /proc/"$PPID"/task/*/status | grep -qv 'T (stopped)'; do
  i=$((i + 1))
  sleep 0.05
done
EOF_STOP
step flyt gone timeout 60 "${flyt_env[@]}" "$programs/trace_kernels"
echo 'kill -CONT "$PPID"' >>"$tmp/flyt.sh"
# ---- calls that fail: NVIDIA's runtime with no driver, the static build; the stripped one ----
no_driver=""
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  echo "note: a CUDA driver (libcuda.so.1) is installed: NVIDIA's runtime and the static build" \
    "would not fail here; those cases are skipped"
else
  no_driver=1
  nvidia=(env -u LD_LIBRARY_PATH -u FLYT_SERVER)
  step flyt nvidia_memory "${nvidia[@]}" "$programs/trace_memory" --keep-going \
    --calls "$tmp/nvidia_memory.calls"
  step flyt nvidia_kernels "${nvidia[@]}" "$programs/trace_kernels" --keep-going \
    --calls "$tmp/nvidia_kernels.calls"
  # The static build twice: its executable is examined once the first run has started (an exec
  # is seen when it happens), so that run is attached late and its figures are lower bounds; the
  # file is probed from then on, so the second run (once the probes are surely on) is exact.
  step flyt static "${nvidia[@]}" "$programs/trace_kernels_static" --keep-going \
    --calls "$tmp/static.calls"
  echo "sleep 3" >>"$tmp/flyt.sh"
  step flyt static2 "${nvidia[@]}" "$programs/trace_kernels_static" --keep-going \
    --calls "$tmp/static2.calls"
fi
step flyt stripped env -u LD_LIBRARY_PATH "$programs/trace_kernels_static_stripped" --keep-going
# ---- the driver API against the test libcuda.so.1 ----
step flyt driver env "LD_LIBRARY_PATH=$programs/driver" \
  "FLYT_TEST_LIBCUDA_LOG=$tmp/driver_launches.jsonl" "$programs/trace_driver"
run_session flyt

sim=(--remote "$endpoint" --launch-log "$log")
expect flyt memory --program trace_memory "${sim[@]}"
expect flyt kernels --program trace_kernels "${sim[@]}"
expect flyt kernels_ptds --program trace_kernels_ptds "${sim[@]}"
# Not against the launch log: the server logs a graph launch as its kernel nodes, which the tracer
# (counting cudaLaunchKernel and cudaGraphLaunch calls) cannot see.
expect flyt graph --program trace_graph --remote "$endpoint"
expect flyt threads --program trace_threads "${sim[@]}"

check "two processes at once: separate pids" test "$(pid_of pair2)" != "$(pid_of pair3)"
expect flyt pair2 --program trace_kernels --repeat 2 "${sim[@]}"
expect flyt pair3 --program trace_kernels --repeat 3 "${sim[@]}"
expect flyt gone --program trace_kernels "${sim[@]}"

nvidia_runtime() {  # without LD_LIBRARY_PATH the programs load the toolkit's libcudart, not flyt's
  local libs
  libs=$(env -u LD_LIBRARY_PATH ldd "$programs/trace_kernels") || return 1
  grep -q 'libcudart.so.13 => /' <<<"$libs" && ! grep -qF "$runtime_dir" <<<"$libs"
}
if [ -n "$no_driver" ]; then
  check "NVIDIA's runtime is the toolkit's, not flyt's" nvidia_runtime
  for name in nvidia_memory nvidia_kernels static static2; do
    check "$name: its calls failed (cudaErrorInsufficientDriver)" \
      grep -q " cudaErrorInsufficientDriver$" "$tmp/$name.calls"
  done
  # Kernel launches are recorded at entry: each launch call counts as a launch of its kernel,
  # with its shape (the program's own expectation gives them), failed or not. A runtime linked
  # into the executable keeps its launches' return probes: failed launches are failures there.
  expect flyt nvidia_memory --program all_calls_failed --calls "$tmp/nvidia_memory.calls" \
    --like trace_memory
  expect flyt nvidia_kernels --program all_calls_failed --calls "$tmp/nvidia_kernels.calls" \
    --like trace_kernels
  expect flyt static2 --program all_calls_failed --calls "$tmp/static2.calls" --launch-results
  expect flyt static --program all_calls_failed --calls "$tmp/static.calls" --launch-results \
    --late --lower-bounds

  # With --launch-results, launches get their return probe too: a failed launch is a failure by
  # its error code, not a launch.
  session results
  step results nvidia_kernels_results "${nvidia[@]}" "$programs/trace_kernels" --keep-going \
    --calls "$tmp/nvidia_kernels_results.calls"
  run_session results --launch-results
  expect results nvidia_kernels_results --program all_calls_failed --launch-results \
    --calls "$tmp/nvidia_kernels_results.calls"
fi
check "stripped: ran to its end" passed stripped
check "stripped static binary: reported unprobeable" python3 "$checker" --json "$tmp/flyt.json" \
  --unprobeable "$(pid_of stripped)" --executable "$programs/trace_kernels_static_stripped" \
  --label "stripped static binary"

# Without --json the JSON goes to stdout, and flyt-trace's log lines (the stripped binary's
# warning, info lines) to stderr: stdout stays one JSON document.
timeout 90 "$trace_bin" "${library_dirs[@]}" --log-level info -- "$tmp/to" "$tmp/stdout_case.prog" \
  env -u LD_LIBRARY_PATH "$programs/trace_kernels_static_stripped" --keep-going \
  >"$tmp/stdout.json" 2>"$tmp/stdout.err"
check "flyt-trace's JSON on stdout is one JSON document while it logs" \
  python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$tmp/stdout.json"
check "flyt-trace's log lines go to stderr" grep -q "cannot be traced" "$tmp/stdout.err"

check "the driver program ran on the test driver" test -s "$tmp/driver_launches.jsonl"
expect flyt driver --program trace_driver --launch-log "$tmp/driver_launches.jsonl"

# ---- a process started before the tracer ----
# It starts (libcudart.so.13 mapped at exec, its fatbin registered) and waits for $tmp/go before its
# first CUDA call; flyt-trace's COMMAND creates go once the probes are attached, then waits for
# late.done, which this script creates once the process has exited.
"$tmp/to" "$tmp/late.prog" "${flyt_env[@]}" "$programs/trace_kernels" --wait-for "$tmp/go" &
late_pid=$!
pids+=("$late_pid")
check "the early process is up before flyt-trace starts" wait_for 20 grep -q '^PID ' "$tmp/late.prog"
printf '#!/bin/sh\ntouch %q\nwhile [ ! -e %q ]; do sleep 0.1; done\n' "$tmp/go" "$tmp/late.done" \
  >"$tmp/late.sh"
"$trace_bin" --json "$tmp/late.json" --ready-file "$tmp/late.ready" -- sh "$tmp/late.sh" \
  >"$tmp/late.out" 2>&1 &
late_trace=$!
pids+=("$late_trace")
check "flyt-trace attaches and runs its command" wait_for 60 test -e "$tmp/go"
wait "$late_pid"  # bounded: the program gives up on go after 60 s
check "the early process exits 0" test $? = 0
touch "$tmp/late.done"
trace_done() { ! kill -0 "$late_trace" 2>/dev/null || grep -q '^State:.*Z' "/proc/$late_trace/status"; }
wait_for 60 trace_done || kill -9 "$late_trace" 2>/dev/null
wait "$late_trace"
late_rc=$?
check "late: flyt-trace exits 0" test "$late_rc" = 0
[ "$late_rc" = 0 ] || tail -20 "$tmp/late.out"
check "late: no event lost, a library probed" python3 "$checker" --json "$tmp/late.json" --health \
  --label late
expect late late --program trace_kernels --late "${sim[@]}"

# ---- two tracers on one machine (two node managers, say): neither follows the other's file reads ----
# A tracer opens the libraries it probes through /proc/<pid>/root/...: another tracer taking that
# for a program loading CUDA would open it through /proc again, and the two would never stop.
"$trace_bin" "${library_dirs[@]}" --raw --json "$tmp/twin_a.jsonl" --ready-file "$tmp/twin_a.ready" \
  >"$tmp/twin_a.out" 2>&1 &
twin_a=$!
pids+=("$twin_a")
check "twin tracer A attaches" wait_for 60 test -e "$tmp/twin_a.ready"
"$trace_bin" "${library_dirs[@]}" --json "$tmp/twin_b.json" --ready-file "$tmp/twin_b.ready" \
  >"$tmp/twin_b.out" 2>&1 &
twin_b=$!
pids+=("$twin_b")
check "twin tracer B attaches" wait_for 60 test -e "$tmp/twin_b.ready"
"$tmp/to" "$tmp/twin.prog" "${flyt_env[@]}" "$programs/trace_kernels"
kill -TERM "$twin_b" "$twin_a" 2>/dev/null
wait "$twin_b" "$twin_a"
check "twin tracers: A saw no library open through /proc (B's examinations are not programs)" \
  python3 -c '
import json, sys
opens = [r for r in map(json.loads, open(sys.argv[1])) if r["kind"] == "library_open"]
bad = [r["path"] for r in opens if r["path"].startswith("/proc/")]
print("library opens:", len(opens), "through /proc:", bad[:3])
sys.exit(1 if bad else 0)' "$tmp/twin_a.jsonl"
check "twin tracers: B counted the program's 22 launches" python3 -c '
import json, sys
pid = int(open(sys.argv[2]).read().split("PID ")[1].split()[0])
d = json.load(open(sys.argv[1]))
n = sum(p["launches"] for p in d["processes"] if p["pid"] == pid)
print("launches:", n)
sys.exit(0 if n == 22 else 1)' "$tmp/twin_b.json" "$tmp/twin.prog"

kill "${pids[0]}" 2>/dev/null
if [ "$failures" -gt 0 ]; then
  echo "--- server log (tail)"
  tail -20 "$tmp/server.log"
fi
finish
