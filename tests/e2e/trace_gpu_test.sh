#!/usr/bin/env bash
# On a real GPU (label gpu; needs root for BPF): the programs of tests/trace on NVIDIA's runtime
# and driver under flyt-trace. Every call succeeds here, so the figures are those the programs
# have through flyt's runtime on the simulated device (tests/trace/expectations.py), with the
# runtime calling the real driver underneath: each launch, allocation and sync counted once, real
# kernel handles named through __cudaGetKernel and __cudaRegisterFunction. Cases: trace_memory,
# trace_kernels, its per-thread-default-stream build, trace_graph (graphs succeed on a GPU),
# trace_threads; the -cudart=static build (first run attached late: lower bounds; second exact);
# trace_kernels again with --launch-results (the same figures: no launch fails).
# Skips (77) with the reason when not root, when flyt-trace or the programs are missing, when
# tracing is unavailable, or when no GPU answers (no libcuda.so.1, or the first program's calls
# fail with no device).
# Usage: trace_gpu_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d -t flyt-trace-gpu.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=trace_lib.sh
. "$(dirname "$0")/trace_lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT

for p in trace_memory trace_kernels trace_kernels_ptds trace_kernels_static trace_graph \
  trace_threads; do
  [ -x "$build/tests/trace/$p" ] || skip "tests/trace/$p is not built (no CUDA toolkit)"
done
ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' || skip "no CUDA driver here (libcuda.so.1)"
trace_preflight

# NVIDIA's runtime (the toolkit's, found without LD_LIBRARY_PATH) over the real driver.
nvidia=(env -u LD_LIBRARY_PATH -u FLYT_SERVER -u FLYT_SIM_DEVICE)
"${nvidia[@]}" "$programs/trace_memory" >"$tmp/gpu_probe.out" 2>&1
if ! grep -q ": PASS$" "$tmp/gpu_probe.out"; then
  if grep -qE "cudaErrorNoDevice|cudaErrorInsufficientDriver" "$tmp/gpu_probe.out"; then
    skip "no GPU answers here: $(grep -m1 -E 'cudaError' "$tmp/gpu_probe.out")"
  fi
  echo "FAIL: trace_memory does not pass untraced on this GPU:"
  cat "$tmp/gpu_probe.out"
  exit 1
fi
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "GPU: ${gpu_name:-unknown (nvidia-smi absent)}"

library_dirs=(--library-dir /usr/local/cuda/lib64 --library-dir /usr/lib/x86_64-linux-gnu
  --library-dir /lib/x86_64-linux-gnu)

session gpu
step gpu memory "${nvidia[@]}" "$programs/trace_memory"
step gpu kernels "${nvidia[@]}" "$programs/trace_kernels"
step gpu kernels_ptds "${nvidia[@]}" "$programs/trace_kernels_ptds"
step gpu graph "${nvidia[@]}" "$programs/trace_graph"
step gpu threads "${nvidia[@]}" "$programs/trace_threads"
# The static build: probed from its first exec, so its first run is attached late; the second
# (once the probes are surely on) is exact.
step gpu static "${nvidia[@]}" "$programs/trace_kernels_static"
echo "sleep 3" >>"$tmp/gpu.sh"
step gpu static2 "${nvidia[@]}" "$programs/trace_kernels_static"
run_session gpu

expect gpu memory --program trace_memory
expect gpu kernels --program trace_kernels
expect gpu kernels_ptds --program trace_kernels_ptds
expect gpu graph --program trace_graph_gpu
expect gpu threads --program trace_threads
expect gpu static --program trace_kernels --late --lower-bounds
expect gpu static2 --program trace_kernels

# Launch results: a return probe on each launch as well; none fails, so the same figures.
session results
step results kernels_results "${nvidia[@]}" "$programs/trace_kernels"
run_session results --launch-results
expect results kernels_results --program trace_kernels

# Where each traced process's CUDA library was found, and whether the tracer came late to it.
for j in "$tmp/gpu.json" "$tmp/results.json"; do
  python3 - "$j" <<'PY' || true
import json, sys
for p in json.load(open(sys.argv[1])).get("processes", []):
    print(f"traced pid {p.get('pid')}: {p.get('library')} attached_late={p.get('attached_late')}")
PY
done

finish
