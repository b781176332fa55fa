#!/usr/bin/env bash
# End to end: an unmodified nvcc-built CUDA program without FLYT_SERVER gets its GPU server from
# flyt-client-manager, which leases it from a (fake) cluster manager; the program runs on a real
# flyt-gpu-server --backend sim. Checks: the program runs; two programs share one lease, which is
# released release_after after the last one exits; FLYT_SERVER still wins; the cluster's refusals
# reach the program as cudaErrorDevicesUnavailable (insufficient_gpus) or cudaErrorNoDevice
# (never_fits) with the per-node reasons; a manager that never answers costs
# FLYT_CLIENT_MANAGER_TIMEOUT_MS; a config error names file, line and key. Issue 32: leases are
# asked for with an Idempotency-Key; a GPU server killed -9 is replaced on the next program's
# start (the runtime reports it, the manager checks, releases and re-leases) without waiting
# for a renewal (set to 30 minutes here).
# Skips (77) without the CUDA toolkit. Usage: client_manager_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d -t flyt-client-manager-e2e.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
remote_setup "$build" "$build/tests/remote/launch_args"
manager_bin=$build/bin/flyt-client-manager
program=$build/tests/remote/launch_args

gpu_sock=$tmp/gpu.sock
"$server_bin" --backend sim --listen "unix:$gpu_sock" >>"$tmp/server.log" 2>&1 &
gpu_pid=$!
pids+=($gpu_pid)
check "gpu server starts" wait_for 20 "$server_bin" stats --server "unix:$gpu_sock"
echo "unix:$gpu_sock" >"$tmp/server-address"

cm_port=$(free_port)
echo grant >"$tmp/mode"
python3 "$src/tests/e2e/fake_remote_leases.py" --port "$cm_port" --server "@$tmp/server-address" \
  --mode "$tmp/mode" --log "$tmp/cluster.log" >>"$tmp/cluster.out" 2>&1 &
pids+=($!)
check "fake cluster manager starts" wait_for 20 python3 -c \
  "import socket; socket.create_connection(('127.0.0.1', $cm_port))"

sock=$tmp/run/flyt/cm.sock
cat >"$tmp/cm.toml" <<TOML
[client]
name = "client-e2e"
socket = "$sock"
release_after = "2s"
ttl_seconds = 3600
renew_interval = "30m"
[cluster-manager]
address = "http://127.0.0.1:$cm_port"
token = "client-token"
[lease]
sm_percent = 25
memory_mb = 1024
TOML
"$manager_bin" --config "$tmp/cm.toml" --log-level debug >>"$tmp/manager.log" 2>&1 &
manager_pid=$!
pids+=($manager_pid)
check "client manager listens" wait_for 20 test -S "$sock"

run() {
  local name=$1
  shift
  run_bounded 60 "$name" env FLYT_SIM_DEVICE=1 FLYT_CLIENT_MANAGER="$sock" \
    LD_LIBRARY_PATH="$runtime_dir" "$@"
}
count() { grep -c "$1" "$tmp/cluster.log" 2>/dev/null || echo 0; }

run first "$program"
check "a program without FLYT_SERVER runs on the leased server" test "$(cat "$tmp/first.rc")" = 0 ||
  cat "$tmp/first.out"
check "one lease was asked for, with the client token" \
  grep -q '"auth": "Bearer client-token"' "$tmp/cluster.log"
run second "$program"
check "a second program within release_after uses the same lease" \
  test "$(count '"POST", "path": "/api/v1/remote-leases"')" = 1
check "the lease is released release_after after the last program" \
  wait_for 20 grep -q '"DELETE", "path": "/api/v1/remote-leases/rlease-1"' "$tmp/cluster.log"

before=$(count '"path": "/api/v1/remote-leases", ')
run_bounded 60 explicit env FLYT_SIM_DEVICE=1 FLYT_SERVER="unix:$gpu_sock" \
  FLYT_CLIENT_MANAGER="$sock" LD_LIBRARY_PATH="$runtime_dir" "$program"
check "FLYT_SERVER still wins" test "$(cat "$tmp/explicit.rc")" = 0
check "and asks the client manager for nothing" \
  test "$(count '"path": "/api/v1/remote-leases", ')" = "$before"
check "leases are asked for with an Idempotency-Key" \
  python3 -c "import json,sys; sys.exit(0 if all(json.loads(l)['key'].startswith('flyt-cm-') for l in open(sys.argv[1]) if json.loads(l)['method'] == 'POST' and not json.loads(l)['path'].endswith('/renew')) else 1)" "$tmp/cluster.log"

# ---- issue 32: the GPU server is killed -9 while its lease is held ------------------------------
# A holder keeps the lease (a connected program); the next program must not get the dead server.
python3 - "$sock" >"$tmp/holder.out" <<'PY' &
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((json.dumps({"op": "acquire", "pid": 1, "program": "holder", "version": 1}) + "\n").encode())
for line in s.makefile():
    print(line, end="", flush=True)
time.sleep(3600)
PY
holder_pid=$!
pids+=($holder_pid)
check "a holder gets a lease" wait_for 20 grep -q '"ok": *true' "$tmp/holder.out"
held=$(head -n1 "$tmp/holder.out" | jq_py "print(d['lease_id'])")
kill -9 "$gpu_pid"
wait "$gpu_pid" 2>/dev/null
# The replacement lease's server: a new one on another socket (the dead one's file stays).
gpu2_sock=$tmp/gpu2.sock
"$server_bin" --backend sim --listen "unix:$gpu2_sock" >>"$tmp/server2.log" 2>&1 &
pids+=($!)
check "a second gpu server starts" wait_for 20 "$server_bin" stats --server "unix:$gpu2_sock"
echo "unix:$gpu2_sock" >"$tmp/server-address"
renews_before=$(count '/renew"')
run after-kill "$program"
check "the next program runs at once on a new lease (no renewal in between)" \
  test "$(cat "$tmp/after-kill.rc")" = 0 || cat "$tmp/after-kill.out"
check "the runtime said it asked for another server" grep -q "asking the flyt-client-manager for another" "$tmp/after-kill.out"
check "the dead server's lease was released" \
  grep -q "\"DELETE\", \"path\": \"/api/v1/remote-leases/$held\"" "$tmp/cluster.log"
check "no renewal noticed it" test "$(count '/renew"')" = "$renews_before"
check "the holder was told its lease failed" wait_for 10 grep -q lease_failed "$tmp/holder.out"
kill "$holder_pid" 2>/dev/null
check "the manager logged the replacement" grep -q "is gone" "$tmp/manager.log"
# Every lease released (release_after) before the refusals below, which a held lease would hide.
all_released() { test "$(count '"DELETE"')" = "$(count '"path": "/api/v1/remote-leases", ')"; }
check "the replacement lease is released after the grace" wait_for 20 all_released

echo insufficient >"$tmp/mode"
run busy "$program"
check "insufficient_gpus: cudaErrorDevicesUnavailable" grep -q "cudaErrorDevicesUnavailable" "$tmp/busy.out"
check "insufficient_gpus: the per-node reasons reach the program" \
  grep -q "node-b: 2 without room for 64 SMs, 1 without 40000 MiB free" "$tmp/busy.out"
echo never_fits >"$tmp/mode"
run never "$program"
check "never_fits: cudaErrorNoDevice" grep -q "cudaErrorNoDevice" "$tmp/never.out"
check "never_fits: the reason reaches the program" grep -q "999999 MiB" "$tmp/never.out"

# A "manager" that accepts and never answers.
python3 -c "
import socket, time, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
conns = []
while True: conns.append(s.accept()[0])
" "$tmp/mute.sock" &
pids+=($!)
wait_for 10 test -S "$tmp/mute.sock"
run_bounded 30 mute env FLYT_CLIENT_MANAGER="$tmp/mute.sock" FLYT_CLIENT_MANAGER_TIMEOUT_MS=500 \
  LD_LIBRARY_PATH="$runtime_dir" "$program"
check "a mute manager: cudaErrorDevicesUnavailable after the timeout" \
  grep -q "cudaErrorDevicesUnavailable" "$tmp/mute.out"
check "a mute manager: the log says why" grep -q "FLYT_CLIENT_MANAGER_TIMEOUT_MS" "$tmp/mute.out"

printf '[client]\nrelease_after = "soon"\n' >"$tmp/bad.toml"
"$manager_bin" --config "$tmp/bad.toml" --cluster-manager http://127.0.0.1:1 >"$tmp/bad.out" 2>&1
check "a config error exits non-zero" test $? -ne 0
check "and names file, line and key" grep -q "bad.toml:2: client.release_after" "$tmp/bad.out"

kill "$manager_pid"
wait "$manager_pid" 2>/dev/null
check "the manager stops cleanly and removes its socket" test ! -e "$sock"
finish
