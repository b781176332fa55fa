#!/usr/bin/env bash
# CUDA graph launch cost over flyt's remote runtime (bench/graphs_bench.cu): a captured graph of
# 100 small kernels launched ITERS times (default 10000) beside 100-kernel batches launched one
# by one, against flyt-gpu-server --backend sim over a Unix socket (or BACKEND=driver on a GPU).
# With BACKEND=driver the same program runs on NVIDIA's own runtime on the local GPU afterwards
# (rows prefixed "native_"): on a GPU each batch's figure includes the kernels' execution, so
# flyt's cost is the difference from the native row, not the row itself.
#   bench/graphs_bench.sh <build dir> [iters]
set -euo pipefail
build=$(cd "$1" && pwd)
iters=${2:-10000}
backend=${BACKEND:-sim}
here=$(cd "$(dirname "$0")" && pwd)
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
tmp=$(mktemp -d -t flyt-graphs-bench.XXXXXX)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
"$nvcc" -cudart=shared -std=c++17 -O2 -gencode arch=compute_80,code=sm_80 \
  "-gencode=arch=compute_90,code=[sm_90,compute_90]" -o "$tmp/graphs_bench" "$here/graphs_bench.cu"
sock=$tmp/gpu.sock
"$build/bin/flyt-gpu-server" --backend "$backend" --listen "unix:$sock" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
  "$build/bin/flyt-gpu-server" stats --server "unix:$sock" >/dev/null 2>&1 && break
  sleep 0.1
done
sim_env=()
[ "$backend" = sim ] && sim_env=(FLYT_SIM_DEVICE=1)
env "${sim_env[@]}" FLYT_SERVER="unix:$sock" LD_LIBRARY_PATH="$build/lib/flyt" \
  "$tmp/graphs_bench" "$iters" || { tail -20 "$tmp/server.log"; exit 1; }
if [ "$backend" = driver ]; then
  env -u LD_LIBRARY_PATH -u FLYT_SERVER "$tmp/graphs_bench" "$iters" | sed '1d; s/^/native_/'
fi
