#!/usr/bin/env bash
# On a real GPU: the nvcc-built programs of tests/cuda and tests/remote run unmodified through
# flyt's libcudart.so.13 against flyt-gpu-server --backend driver, and must compute correct
# results (they check them themselves; FLYT_SIM_DEVICE is not set). Also a sticky fault in one
# client leaves a concurrent client untouched, and a killed client's memory is freed.
# Skips (77) without the programs, the runtime, or a GPU the driver backend can open.
# Usage: remote_gpu_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
tmp=$(mktemp -d -t flyt-remote-gpu.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
remote_setup "$build" "$build/tests/remote/api_semantics"
sock=$tmp/gpu.sock
"$server_bin" --backend driver --listen "unix:$sock" --launch-log "$tmp/launches.jsonl" \
  >>"$tmp/server.log" 2>&1 &
server_pid=$!
pids+=($server_pid)
stats() { "$server_bin" stats --server "unix:$sock"; }
# Up, or refused to start (no driver or GPU here: it exits at once, saying why).
up_or_gone() { stats >/dev/null 2>&1 || ! kill -0 $server_pid 2>/dev/null; }
wait_for 30 up_or_gone
if ! stats >/dev/null 2>&1; then
  if ! kill -0 $server_pid 2>/dev/null; then
    echo "SKIPPED: the driver backend cannot start here:"
    cat "$tmp/server.log"
    exit 77
  fi
  echo "FAIL: the driver backend started but does not answer"
  exit 1
fi

# run <name> <program>: killed after 300 s; output in $tmp/<name>.out, status in $tmp/<name>.rc.
run() {
  local name=$1
  shift
  run_bounded 300 "$name" env FLYT_SERVER="unix:$sock" \
    LD_LIBRARY_PATH="$runtime_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
}
passes_on_gpu() {
  [ "$(cat "$tmp/$1.rc")" = 0 ] && grep -q "PASS" "$tmp/$1.out" && return 0
  echo "--- $1 output:"
  cat "$tmp/$1.out"
  return 1
}

for p in vector_add matrix_mul streams_events constant_memory many_params many_params_compressed \
  templated rdc per_thread_stream; do
  [ -x "$build/tests/cuda/$p" ] || continue
  run "$p" "$build/tests/cuda/$p"
  check "$p computes correct results on the GPU" passes_on_gpu "$p"
done
for p in launch_args api_semantics; do
  run "$p" "$build/tests/remote/$p"
  check "$p passes on the GPU" passes_on_gpu "$p"
done

# A client whose kernel faults (api_semantics) beside one that keeps working.
run fault_a "$build/tests/remote/api_semantics" &
first=$!
run fault_b "$build/tests/remote/launch_args" &
second=$!
wait $first $second
check "a faulting client passes" passes_on_gpu fault_a
check "its neighbour is not poisoned" passes_on_gpu fault_b

# A client killed mid-stream.
FLYT_SERVER="unix:$sock" LD_LIBRARY_PATH=$runtime_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$build/tests/remote/crash_mid_stream" \
  >"$tmp/crash.out" 2>&1 &
crash_pid=$!
pids+=($crash_pid)
check "crashing client gets going" wait_for 60 grep -q READY "$tmp/crash.out"
launches_above() {  # launches_above <pid> <n>: that client program launched more than n kernels
  stats | jq_py "sys.exit(0 if sum(c['launches'] for c in d['clients'] if c['label'].endswith('(pid $1)')) > $2 else 1)"
}
check "… and has launches in flight" wait_for 30 launches_above $crash_pid 8
kill -9 $crash_pid
wait $crash_pid 2>/dev/null
freed() {
  stats | jq_py "cs=[c for c in d['clients'] if c['label'].endswith('(pid $crash_pid)')]; sys.exit(0 if cs and all(not c['connected'] and c['allocated_bytes'] == 0 for c in cs) and d['allocated_bytes'] == 0 else 1)"
}
check "the killed client's memory is freed" wait_for 30 freed
run after_crash "$build/tests/remote/api_semantics"
check "the server works after the crash" passes_on_gpu after_crash

kill $server_pid
wait $server_pid 2>/dev/null
if [ "$failures" -gt 0 ]; then
  echo "--- server log (tail)"
  tail -40 "$tmp/server.log"
fi
finish
