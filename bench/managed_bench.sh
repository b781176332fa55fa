#!/usr/bin/env bash
# Managed memory: bytes moved per iteration when a kernel touches 1 % of a 256 MiB managed buffer
# (bench/managed_bench.cu), on flyt-gpu-server --backend sim (BACKEND=driver: this machine's GPU)
# over a Unix socket. Runs the program
# with 5 and with 25 iterations and reads each client's bytes_to_device / bytes_from_device from
# `flyt-gpu-server stats`; (25-run minus 5-run) / 20 is the traffic of one iteration.
# Usage: bench/managed_bench.sh [build dir]   (needs nvcc and a built flyt-gpu-server, flyt_cudart)
set -euo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d -t flyt-managed-bench.XXXXXX)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
nvcc=${FLYT_NVCC:-/usr/local/cuda/bin/nvcc}
"$nvcc" -cudart=shared -O2 -gencode arch=compute_90,code=sm_90 -o "$tmp/managed_bench" \
  "$src/managed_bench.cu"
"$build/bin/flyt-gpu-server" --backend "${BACKEND:-sim}" --listen "unix:$tmp/gpu.sock" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do [ -S "$tmp/gpu.sock" ] && break; sleep 0.05; done
run() {
  FLYT_SERVER="unix:$tmp/gpu.sock" LD_LIBRARY_PATH="$build/lib/flyt" "$tmp/managed_bench" "$1" >&2
  "$build/bin/flyt-gpu-server" stats --server "unix:$tmp/gpu.sock" >"$tmp/stats.json"
  python3 - "$tmp/stats.json" <<'PY'
import json, sys
clients = json.load(open(sys.argv[1]))["clients"]
c = [c for c in clients if not c["label"].startswith("flyt-gpu-server")][-1]
print(c["bytes_to_device"], c["bytes_from_device"])
PY
}
read -r to5 from5 < <(run 5)
read -r to25 from25 < <(run 25)
python3 - "$to5" "$from5" "$to25" "$from25" <<'PY'
import sys
to5, from5, to25, from25 = map(int, sys.argv[1:])
pages = (256 << 20) // 4096 // 100
to_it, from_it = (to25 - to5) / 20, (from25 - from5) / 20
print(f"pages touched per iteration: {pages} ({pages * 4096} bytes; buffer 268435456 bytes)")
print(f"to device per iteration:   {to_it:.0f} bytes ({to_it / 4096:.1f} pages, incl. the 2620-byte page list)")
print(f"from device per iteration: {from_it:.0f} bytes ({from_it / 4096:.1f} pages)")
PY
