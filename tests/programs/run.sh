#!/usr/bin/env bash
# Runs public-suite programs (tests/programs) through flyt's libcudart.so.13.
#   run.sh sim <build dir> <name>        one program, against flyt-gpu-server --backend sim, over
#                                        TCP, over a Unix socket (both with FLYT_SHM=0) and over
#                                        shared memory (FLYT_SIM_DEVICE=1)
#   run.sh driver <build dir> <name...>  every program named, on the driver backend (a real GPU),
#                                        results checked, over TCP and over shared memory; skips
#                                        (77) without a GPU
# A program passes when it exits 0 and prints "PASS". Its output is shown when it does not.
set -uo pipefail
mode=$1
build=$2
shift 2
server_bin=$build/bin/flyt-gpu-server
runtime_dir=$build/lib/flyt
unset FLYT_SERVER FLYT_SIM_DEVICE FLYT_LOG_LEVEL FLYT_STRICT_ERRORS
if [ ! -x "$server_bin" ] || [ ! -f "$runtime_dir/libcudart.so.13" ]; then
  echo "SKIPPED: flyt's libcudart.so.13 or flyt-gpu-server is missing (no CUDA toolkit)"
  exit 77
fi
if [ "$mode" = driver ] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED: no GPU here (nvidia-smi -L fails)"
  exit 77
fi
tmp=$(mktemp -d -t flyt-programs.XXXXXX)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sock=$tmp/gpu.sock
backend=sim
[ "$mode" = driver ] && backend=driver
"$server_bin" --backend "$backend" --listen "127.0.0.1:$port" --listen "unix:$sock" \
  >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
  "$server_bin" stats --server "unix:$sock" >/dev/null 2>&1 && break
  sleep 0.1
done
if ! "$server_bin" stats --server "unix:$sock" >/dev/null 2>&1; then
  echo "FAIL: flyt-gpu-server did not start"; cat "$tmp/server.log"; exit 1
fi
failures=0
passes=0
# run_one <name> <endpoint> <label>: label tcp and unix run with FLYT_SHM=0; shm checks that the
# runtime said it connected over shared memory.
run_one() {
  local name=$1 endpoint=$2 label=$3 sim_env=() shm_env=(FLYT_SHM=0)
  [ "$mode" = sim ] && sim_env=(FLYT_SIM_DEVICE=1)
  [ "$label" = shm ] && shm_env=(FLYT_SHM=1 FLYT_LOG_LEVEL=info)
  local out=$tmp/$name.$label.out
  env "${sim_env[@]}" "${shm_env[@]}" FLYT_SERVER="$endpoint" LD_LIBRARY_PATH="$runtime_dir" \
    timeout -s KILL 120 "$build/tests/programs/$name" >"$out" 2>&1
  local rc=$?
  local transport_ok=1
  if [ "$label" = shm ] && ! grep -q "over shm)" "$out"; then transport_ok=0; fi
  if [ "$rc" = 0 ] && grep -q "^PASS " "$out" && [ "$transport_ok" = 1 ]; then
    passes=$((passes + 1))
  else
    [ "$transport_ok" = 0 ] && echo "FAIL: $name did not connect over shared memory"
    echo "FAIL: $name over $label (exit $rc):"
    sed 's/^/    /' "$out"
    failures=$((failures + 1))
  fi
}
for name in "$@"; do
  if [ ! -x "$build/tests/programs/$name" ]; then
    echo "FAIL: $build/tests/programs/$name was not built"; failures=$((failures + 1)); continue
  fi
  run_one "$name" "127.0.0.1:$port" tcp
  [ "$mode" = sim ] && run_one "$name" "unix:$sock" unix
  run_one "$name" "unix:$sock" shm
done
echo "$passes passed, $failures failed"
if [ "$failures" -ne 0 ]; then
  echo "--- server log (last 40 lines):"; tail -40 "$tmp/server.log"
fi
[ "$failures" -eq 0 ]
