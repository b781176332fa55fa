#!/usr/bin/env bash
# End to end: nvcc's default build — NVIDIA's CUDA runtime linked statically into the program, which
# then finds the driver by itself — runs unmodified through flyt's libcuda.so.1
# (LD_LIBRARY_PATH=build/lib/flyt) against flyt-gpu-server --backend sim, over TCP and a Unix
# socket. This is the path of NVIDIA's runtime through flyt's driver: every entry point found with
# cuGetProcAddress, the private export tables (the integrity check included), the program's fat
# binaries loaded as libraries, launches, copies, symbols. Checks: the programs link no libcudart;
# every API call succeeds (FLYT_SIM_DEVICE=1: results only a kernel could produce are not checked);
# each program reached the server through flyt's driver; the server's launch log holds each
# program's launches. Then NVIDIA's shared runtime (the toolkit's libcudart.so.13) over flyt's
# driver, the same checks; and the GPU server refusing flyt's libcuda.so.1 as its driver. Skips (77)
# without the CUDA toolkit.
# Usage: static_runtime_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d -t flyt-static-runtime.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
remote_setup "$build" "$build/tests/cuda/vector_add_static"
if [ ! -f "$runtime_dir/libcuda.so.1" ]; then
  echo "SKIPPED: flyt's libcuda.so.1 was not built (no cuda.h)"
  exit 77
fi
programs=(vector_add_static matrix_mul_static streams_events_static constant_memory_static
  many_params_static)

port=$(free_port)
sock=$tmp/gpu.sock
log=$tmp/launches.jsonl
"$server_bin" --backend sim --listen "127.0.0.1:$port" --listen "unix:$sock" \
  --launch-log "$log" >>"$tmp/server.log" 2>&1 &
pids+=($!)
stats() { "$server_bin" stats --server "unix:$sock"; }
check "server starts" wait_for 20 stats

launched() {  # launched <name>: the launch log holds a launch of the program run as <name>
  python3 - "$log" "$(cat "$tmp/$1.pid")" <<'PY'
import json, sys
log, pid = sys.argv[1], int(sys.argv[2])
sys.exit(0 if any(json.loads(l).get("pid") == pid for l in open(log)) else 1)
PY
}

for p in "${programs[@]}"; do
  if [ ! -x "$build/tests/cuda/$p" ]; then
    check "$p was built" false
    continue
  fi
  check "$p links NVIDIA's runtime statically" \
    bash -c '! readelf -d "$1" | grep -q "NEEDED.*libcudart"' _ "$build/tests/cuda/$p"
  for transport in tcp unix; do
    endpoint="127.0.0.1:$port"
    [ "$transport" = unix ] && endpoint="unix:$sock"
    name=$p.$transport
    run_bounded 120 "$name" env FLYT_SIM_DEVICE=1 FLYT_SERVER="$endpoint" FLYT_LOG_LEVEL=info \
      LD_LIBRARY_PATH="$runtime_dir" "$build/tests/cuda/$p"
    check "$name: every API call succeeds" api_ok "$name"
    check "$name: through flyt's driver" grep -q "^\[flyt info\] connected to" "$tmp/$name.out"
    check "$name: its launches reached the server" launched "$name"
  done
done
# NVIDIA's shared runtime (the toolkit's libcudart.so.13, found first on the path) over flyt's
# driver: the same programs built with -cudart=shared.
cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64
if [ -f "$cuda_lib/libcudart.so.13" ]; then
  for p in vector_add matrix_mul constant_memory; do
    [ -x "$build/tests/cuda/$p" ] || continue
    name=$p.nvidia_shared
    run_bounded 120 "$name" env FLYT_SIM_DEVICE=1 FLYT_SERVER="unix:$sock" FLYT_LOG_LEVEL=info \
      LD_DEBUG=libs LD_LIBRARY_PATH="$cuda_lib:$runtime_dir" "$build/tests/cuda/$p"
    check "$name: NVIDIA's libcudart.so.13 was loaded" \
      grep -q "calling init: $cuda_lib/libcudart.so.13" "$tmp/$name.out"
    check "$name: every API call succeeds" api_ok "$name"
    check "$name: through flyt's driver" grep -q "^\[flyt info\] connected to" "$tmp/$name.out"
    check "$name: its launches reached the server" launched "$name"
  done
else
  echo "note: no $cuda_lib/libcudart.so.13: NVIDIA's shared runtime not tried"
fi
# A program built this way without flyt's driver on the path finds none (NVIDIA's stub is not a
# driver): the failure is the runtime's own, not a crash.
run_bounded 60 nodriver env LD_LIBRARY_PATH=/nonexistent "$build/tests/cuda/vector_add_static"
check "without a driver: a CUDA error, not a crash" test "$(rc_of nodriver)" = 1
# The GPU server never drives a GPU through flyt's own driver library (a client's LD_LIBRARY_PATH).
out=$(LD_LIBRARY_PATH="$runtime_dir" "$server_bin" probe --backend driver 2>&1)
check "the GPU server refuses flyt's libcuda.so.1 as its driver" test $? != 0
check "... saying so" contains "$out" "is flyt's remote libcuda.so.1, not NVIDIA's driver"
finish
