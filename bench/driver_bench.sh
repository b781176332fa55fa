#!/usr/bin/env bash
# The driver API's asynchronous launches against its round trip through flyt's libcuda.so.1
# (issue 33), in one run: flyt-bench-driver-overhead against one `flyt-gpu-server --backend sim`
# (or --backend driver: this machine's GPU) over TCP loopback, over a Unix socket (FLYT_SHM=0)
# and over shared memory. The goal: round trip / launch >= 20, as the runtime's launches meet it.
#
#   bench/driver_bench.sh [build dir, default build] [--iterations N] [--repeats R]
#       [--backend sim|driver]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  build=$1
  shift
fi
iterations=100000
repeats=5
backend=sim
while [ $# -gt 0 ]; do
  case $1 in
    --iterations) iterations=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$src"
[ -x "$build/bin/flyt-bench-driver-overhead" ] || cmake --build "$build" --target flyt-bench-driver-overhead
tmp=$(mktemp -d -t flyt-driver-bench.XXXXXX)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$build/bin/flyt-gpu-server" --backend "$backend" --listen "127.0.0.1:$port" \
  --listen "unix:$tmp/gpu.sock" >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do [ -S "$tmp/gpu.sock" ] && break; sleep 0.1; done
echo "flyt-bench-driver-overhead, backend $backend, $(nproc) CPUs, $(date -u +%F)"
for transport in tcp unix shm; do
  case $transport in
    tcp) endpoint=127.0.0.1:$port shm=0 ;;
    unix) endpoint=unix:$tmp/gpu.sock shm=0 ;;
    shm) endpoint=unix:$tmp/gpu.sock shm=1 ;;
  esac
  echo "--- over $transport"
  FLYT_SERVER=$endpoint FLYT_SHM=$shm "$build/bin/flyt-bench-driver-overhead" \
    --iterations "$iterations" --repeats "$repeats"
done
