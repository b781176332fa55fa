#!/usr/bin/env bash
# End to end: stopping leaves nothing behind.
#  1. The demo (scripts/run.sh on the build under test, FLYT_RUN_NO_BUILD=1, free ports), run in a
#     process group of its own with a remote lease on sim-h100-a, so that a flyt-gpu-server runs:
#     SIGINT to the group, as Ctrl-C in its terminal sends, must leave no process of the demo
#     running — no flyt-* program of this build, no GPU server — with sim-h100-a's node manager
#     having drained its GPU server itself (not run.sh's last-resort sweep). Also: a GPU server an
#     earlier demo left running from the state dir is stopped before the demo deletes that dir.
#  2. flyt-node-manager alone, with a real (simulated-backend) GPU server: SIGUSR2 exits and leaves
#     the server running, the next start re-adopts it; SIGTERM drains it; a server whose state
#     dir was deleted while its node manager was away is stopped by the next start.
# Every process the test starts carries a marker in its environment (GPU servers inherit it from
# their node manager): the EXIT trap stops whatever still has it, and the checks list it.
# Usage: demo_stop_test.sh <build dir> <source dir>
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
# The marker goes only into the environment of what the test starts (not this shell's own).
mark="demo-stop-$$-$RANDOM"

# marked: "PID COMMAND LINE" of every live process (zombies aside) carrying our marker.
marked() {
  local pid
  for pid in $(marked_pids "$mark"); do
    echo "$pid $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")"
  done
}
# flyt_left: the marked processes that run a program of this build (flyt-*, the CUDA programs).
flyt_left() { marked | while read -r pid _; do
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) && [[ $exe == "$build"/* ]] && echo "$pid $exe"
done; }
nothing_marked() { [ -z "$(marked)" ]; }

demo_pgid=""
cleanup() {
  [ -n "$demo_pgid" ] && kill -TERM -- "-$demo_pgid" 2>/dev/null
  stop_children
  local left
  left=$(marked | cut -d' ' -f1)
  # shellcheck disable=SC2086
  [ -n "$left" ] && kill -9 $left 2>/dev/null
  [ -n "$demo_pgid" ] && kill -9 -- "-$demo_pgid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

unset FLYT_CLUSTER_MANAGER FLYT_TOKEN FLYT_ADMIN_TOKEN FLYT_NVML_LIBRARY FLYT_SIM_SCENARIO \
  FLYT_SIM_TIME FLYT_SIM_START FLYT_SIM_REASON FLYT_SERVER FLYT_DEMO_PORT FLYT_BUILD_DIR

# ---- 1. the demo, stopped with Ctrl-C -------------------------------------------------------
root=$tmp/root
demo_checkout "$root"
port=$(demo_port)
# shellcheck disable=SC2034  # lib.sh's api reads it
url="http://127.0.0.1:$port"
demo=$root/var/demo-$port
# A GPU server an earlier demo left running from the state dir this run deletes (its node manager
# killed -9, say): a stand-in whose command line names a ready file there, as a server's does.
mkdir -p "$demo/gpu-servers"
FLYT_E2E_MARK=$mark python3 -c 'import time; time.sleep(600)' --ready-file "$demo/gpu-servers/old.ready" &
old_server=$!
pids+=("$old_server")

start_demo "$root" "$port" "$mark" 120 || exit 1
check "the earlier run's GPU server was stopped before the state dir was deleted" \
  grep -q "stopping GPU servers an earlier demo left running: $old_server" "$tmp/demo.out"
old_server_gone() { ! kill -0 "$old_server" 2>/dev/null; }
check "and it is gone" wait_for 5 old_server_gone
check "the demo runs in its own process group" test "$(ps -o pgid= -p "$demo_pid" | tr -d ' ')" = "$demo_pid"

# A remote lease of our own on sim-h100-a (besides the one the demo's CUDA program holds where
# the CUDA toolkit built it), so that a GPU server surely runs.
admin=$(cat "$demo/admin.token")
answer=$(api "$admin" POST /api/v1/remote-leases \
  '{"memory_mb": 1024, "sm_percent": 25, "node": "sim-h100-a", "ttl_seconds": 600, "client": "demo-stop-test"}')
check "a remote lease on sim-h100-a: 201 (got $(code_of "$answer"))" test "$(code_of "$answer")" = 201
demo_servers() { marked | grep -F -- "--ready-file $demo/gpu-servers/"; }
check "its GPU server runs, from the demo's state dir" wait_for 30 demo_servers
echo "== GPU servers before Ctrl-C:"
demo_servers
check "the GPU servers carry the marker, so that the check below sees them" test -n "$(demo_servers)"

# Ctrl-C: SIGINT to the demo's whole process group.
kill -INT -- "-$demo_pgid"
demo_exited() { ! kill -0 "$demo_pid" 2>/dev/null; }
check "scripts/run.sh exits after Ctrl-C" wait_for 90 demo_exited
wait "$demo_pid"
rc=$?
check "scripts/run.sh exits 0 after Ctrl-C (got $rc)" test "$rc" -eq 0
demo_pgid=""
if ! wait_for 10 nothing_marked; then
  echo "FAIL: processes of the demo left after Ctrl-C:"
  marked
  failures=$((failures + 1))
else
  passes=$((passes + 1))
fi
check "no flyt program of this build left" test -z "$(flyt_left)"
check "run.sh says it stopped" grep -q "flyt: stopped" "$tmp/demo.out"
check "run.sh did not have to sweep up GPU servers" \
  bash -c "! grep -q 'left running by' '$tmp/demo.err' '$tmp/demo.out'"
check "sim-h100-a's node manager drained its GPU servers" grep -q "stopping: draining" "$demo/sim-h100-a.log"
check "and waited until they had stopped" grep -q "every GPU server has stopped" "$demo/sim-h100-a.log"
check "the state dir holds no record left" test -z "$(ls "$demo/gpu-servers" 2>/dev/null)"
if [ "$failures" -gt 0 ]; then
  echo "== demo output:"
  cat "$tmp/demo.out" "$tmp/demo.err"
  echo "== sim-h100-a.log:"
  tail -n 40 "$demo/sim-h100-a.log"
fi

# ---- 2. one node manager: SIGUSR2 keeps, SIGTERM drains, orphans stopped -------------------------
state=$tmp/node-state
gpu_servers_config "$tmp/node.toml" sim "$state" 5
printf '\n[trace]\nenabled = false\n' >>"$tmp/node.toml"
node_port=$(free_port)
node_url="http://127.0.0.1:$node_port"
node_pid=""
start_node_manager() {
  FLYT_E2E_MARK=$mark FLYT_NVML_LIBRARY="$build/lib/libflyt-sim-nvml.so" \
    FLYT_SIM_SCENARIO="$src/sim/scenarios/h100x8-idle.toml" \
    "$build/bin/flyt-node-manager" --listen "127.0.0.1:$node_port" --name stop-node \
    --config "$tmp/node.toml" >>"$tmp/node.log" 2>&1 &
  node_pid=$!
  pids+=("$node_pid")
  wait_for 30 curl -sf "$node_url/healthz"
}
node_exited() { ! kill -0 "$node_pid" 2>/dev/null; }
alive() { kill -0 "$1" 2>/dev/null && [ "$(sed -n 's/^State:\t\([A-Z]\).*/\1/p' "/proc/$1/status")" != Z ]; }
dead() { ! alive "$1"; }

check "node manager up" start_node_manager
gpu=$(curl -sf "$node_url/api/v1/gpu-servers" | jq_py "print(d['gpus'][0]['uuid'])")
secret=stop-test-secret-0123456789abcdef0123
answer=$(curl -s -w '\n%{http_code}' -X PUT "$node_url/api/v1/gpu-servers/rlease-keep" \
  -H 'Content-Type: application/json' \
  --data-binary "{\"lease_id\": \"rlease-keep\", \"gpu_uuid\": \"$gpu\", \"memory_mb\": 512, \"sm_count\": 16, \"secret\": \"$secret\"}")
check "PUT a GPU server: 201 (got $(code_of "$answer"))" test "$(code_of "$answer")" = 201
server_pid=$(field "$answer" "d['pid']")
check "its server runs" alive "$server_pid"

kill -USR2 "$node_pid"
check "SIGUSR2: the node manager exits" wait_for 30 node_exited
check "SIGUSR2: the GPU server is left running" alive "$server_pid"
check "SIGUSR2: it says so" grep -q "left running (SIGUSR2)" "$tmp/node.log"

check "restarted" start_node_manager
check "the restarted node manager re-adopted the server" \
  test "$(curl -sf "$node_url/api/v1/gpu-servers/rlease-keep" | jq_py "print(d['state'], d['pid'])")" = "running $server_pid"
kill -TERM "$node_pid"
check "SIGTERM: the node manager exits" wait_for 30 node_exited
check "SIGTERM: the GPU server was drained" dead "$server_pid"
check "SIGTERM: it says so" grep -q "every GPU server has stopped" "$tmp/node.log"
check "SIGTERM: no record left in the state dir" test -z "$(ls "$state")"

# An orphan: the node manager leaves (SIGUSR2), its state dir is deleted meanwhile.
check "started again" start_node_manager
answer=$(curl -s -w '\n%{http_code}' -X PUT "$node_url/api/v1/gpu-servers/rlease-orphan" \
  -H 'Content-Type: application/json' \
  --data-binary "{\"lease_id\": \"rlease-orphan\", \"gpu_uuid\": \"$gpu\", \"memory_mb\": 512, \"sm_count\": 16, \"secret\": \"$secret\"}")
check "PUT another GPU server: 201 (got $(code_of "$answer"))" test "$(code_of "$answer")" = 201
orphan_pid=$(field "$answer" "d['pid']")
kill -USR2 "$node_pid"
check "SIGUSR2 again: exits" wait_for 30 node_exited
check "SIGUSR2 again: the server stays" alive "$orphan_pid"
rm -rf "$state"
check "started with the state dir gone" start_node_manager
check "the orphaned server was stopped at start" dead "$orphan_pid"
check "with a log line naming it" grep -q "pid $orphan_pid is a GPU server of lease rlease-orphan" "$tmp/node.log"
kill -TERM "$node_pid"
check "the node manager exits" wait_for 30 node_exited
if ! nothing_marked; then
  echo "FAIL: processes left:"
  marked
  failures=$((failures + 1))
fi
[ "$failures" -gt 0 ] && { echo "== node.log:"; cat "$tmp/node.log"; }
finish
