#!/usr/bin/env bash
# End to end: the node manager watches the MPS control daemon and rotates its GPU servers' logs.
# A cluster manager and a node manager (simulated h100x8-idle, [gpu-servers] on every GPU, shared,
# with the node's test stand-in for flyt-gpu-server, src/node/testdata/fake_gpu_server.sh, and
# the driver backend so that MPS is checked) and a stand-in MPS control daemon: a python process
# listening on the control socket of the test's own pipe directory.
#
# Faults, each injected: the daemon is killed (SIGKILL: its socket file stays) — the node reports
# its shared GPUs mps "down" with the reason and the lease whose server runs there, the server is
# left running, and the manager places no lease beside it; a new daemon — "running" again, and a
# lease lands beside the first. A server's log written past log_max_bytes is rotated, keeping
# log_files old files of at most log_max_bytes each.
# Usage: node_mps_watch_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
# Short: the control socket's path must fit in a socket address (108 bytes).
tmp=$(mktemp -d /tmp/flyt-mps.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT

# ---- the stand-in MPS: nvidia-cuda-mps-control on PATH (never asked to start a daemon here) and
# a daemon listening on $tmp/mps/control, accepting and closing connections for at most 10 min.
mkdir -p "$tmp/bin" "$tmp/mps"
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/nvidia-cuda-mps-control"
chmod 755 "$tmp/bin/nvidia-cuda-mps-control"
export PATH="$tmp/bin:$PATH"
daemon_pid=""
start_daemon() {
  python3 - "$tmp/mps/control" <<'EOF' &
import os, socket, sys, time
path = sys.argv[1]
if os.path.exists(path):
    os.unlink(path)  # a killed daemon's file, as the real daemon replaces it
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(16)
s.settimeout(1)
deadline = time.time() + 600
while time.time() < deadline:
    try:
        c, _ = s.accept()
        c.close()
    except socket.timeout:
        pass
EOF
  daemon_pid=$!
  pids+=("$daemon_pid")
  wait_for 10 test -S "$tmp/mps/control"
}
check "the stand-in MPS daemon listens" start_daemon

# ---- the cluster ------------------------------------------------------------------------------
cluster_config </dev/null
mkdir -p "$tmp/var"
start_manager "127.0.0.1:$port" "$tmp/manager.log" --config "$tmp/cm.toml"
port_min=$((20000 + RANDOM % 20000))
cat >"$tmp/node.toml" <<EOF
[cluster-manager]
heartbeat_interval_s = 1
[gpu-servers]
enabled = true
binary = "$src/src/node/testdata/fake_gpu_server.sh"
backend = "driver"
port_min = $port_min
port_max = $((port_min + 39))
state_dir = "$tmp/servers"
drain_grace_s = 2
shared = "all"
mps_pipe_dir = "$tmp/mps"
mps_check_interval_s = 1
log_max_bytes = 4096
log_files = 2
EOF
start_node gpu-a h100x8-idle "$url" "$node_token" --config "$tmp/node.toml"
node_url="http://127.0.0.1:${node_ports[gpu-a]}"
# node_gpu <uuid> <python expression on g, the GPU's entry of the node's GET /api/v1/gpu-servers>
node_gpu() {
  curl -sf "$node_url/api/v1/gpu-servers" |
    jq_py "g = [g for g in d['gpus'] if g['uuid'] == '$1'][0]; print($2)"
}
# cluster_mps_is <uuid> <state>: the manager's view of the node says so (from its heartbeat).
cluster_mps_is() {
  get_field /api/v1/nodes/gpu-a \
    "[g['mps'] for g in ((d.get('gpu_servers') or {}).get('gpus') or []) if g['uuid'] == '$1'][0]" |
    grep -qx "$2"
}
any_gpu_running() {
  curl -sf "$node_url/api/v1/gpu-servers" | jq_py "sys.exit(0 if any(g['mps'] == 'running' for g in d['gpus']) else 1)"
}
check "the node's shared GPUs have MPS running" wait_for 30 any_gpu_running
check "the manager knows the node's GPU servers" wait_for 30 \
  sh -c "curl -sf -H 'Authorization: Bearer $admin' $url/api/v1/gpus | grep -q sm_count"

# Leases outlive a slow run (ttl_seconds), and binpack alone picks the GPU (prefer_idle off).
lease=$(api "$alice" POST /api/v1/remote-leases '{"sm_count": 64, "memory_mb": 1000, "ttl_seconds": 600, "prefer_idle": false}')
check "a shared lease is granted" test "$(code_of "$lease")" = 201
first_id=$(field "$lease" "d['id']")
first_gpu=$(field "$lease" "d['gpu']['uuid']")
check "it holds 64 of the GPU's SMs" test "$(field "$lease" "d['sm_count']")" = 64
check "the manager sees MPS running on its GPU" wait_for 20 cluster_mps_is "$first_gpu" running

# ---- the daemon is killed ---------------------------------------------------------------------
kill -9 "$daemon_pid"
wait "$daemon_pid" 2>/dev/null
check "a killed daemon leaves its socket file" test -S "$tmp/mps/control"
mps_down() { test "$(node_gpu "$first_gpu" "g['mps']")" = down; }
check "the node reports MPS down" wait_for 30 mps_down
reason=$(node_gpu "$first_gpu" "g.get('mps_reason', '')")
check "with the reason" contains "$reason" "$tmp/mps/control refuses connections"
check "and since when" contains "$reason" "the MPS control daemon stopped answering at "
check "the GPU is not shared meanwhile" test "$(node_gpu "$first_gpu" "g['shared']")" = False
check "its running server is listed" test "$(node_gpu "$first_gpu" "g.get('mps_servers')")" = "['$first_id']"
check "and left running" test "$(curl -sf "$node_url/api/v1/gpu-servers/$first_id" | jq_py "print(d['state'])")" = running
check "a gpu_mps_down event names it" sh -c "curl -sf $node_url/api/v1/events | grep -q 'gpu_mps_down'"
check "the manager sees MPS down" wait_for 20 cluster_mps_is "$first_gpu" down
second=$(api "$alice" POST /api/v1/remote-leases '{"sm_count": 8, "memory_mb": 100, "ttl_seconds": 600, "prefer_idle": false}')
check "a new lease is granted elsewhere" test "$(code_of "$second")" = 201
check "not beside the running one" test "$(field "$second" "d['gpu']['uuid']")" != "$first_gpu"
check "on a GPU of its own, with all its SMs (no MPS)" test "$(field "$second" "d['sm_count']")" = 132
second_id=$(field "$second" "d['id']")

# ---- the daemon is back -----------------------------------------------------------------------
check "a new daemon listens" start_daemon
mps_running() { test "$(node_gpu "$first_gpu" "g['mps']")" = running; }
check "the node reports MPS running again" wait_for 30 mps_running
check "shared again" test "$(node_gpu "$first_gpu" "g['shared']")" = True
check "a gpu_mps_up event" sh -c "curl -sf $node_url/api/v1/events | grep -q 'gpu_mps_up'"
check "the manager sees MPS running again" wait_for 20 cluster_mps_is "$first_gpu" running
third=$(api "$alice" POST /api/v1/remote-leases '{"sm_count": 8, "memory_mb": 100, "ttl_seconds": 600, "prefer_idle": false}')
check "a shared lease is granted again" test "$(code_of "$third")" = 201
check "beside the first one" test "$(field "$third" "d['gpu']['uuid']")" = "$first_gpu"

# ---- a log past its cap -----------------------------------------------------------------------
log=$tmp/servers/$first_id.log
check "the server writes its log" test -s "$log"
# What the server would print, through a descriptor opened for appending as the server's is.
python3 -c "import sys; open(sys.argv[1], 'a').write(('x' * 99 + '\n') * 100)" "$log"
check "it is rotated" wait_for 20 test -s "$log.1"
python3 -c "import sys; open(sys.argv[1], 'a').write(('y' * 99 + '\n') * 100)" "$log"
check "and rotated again" wait_for 20 test -s "$log.2"
python3 -c "import sys; open(sys.argv[1], 'a').write(('z' * 99 + '\n') * 100)" "$log"
newest_is_z() { grep -q '^z' "$log.1"; }
check "a third time" wait_for 20 newest_is_z
check "keeping log_files = 2 old files" test ! -e "$log.3"
check "each at most log_max_bytes" test "$(stat -c %s "$log.1")" -le 4096 -a "$(stat -c %s "$log.2")" -le 4096
check "the oldest kept is the second round" grep -q '^y' "$log.2"

# ---- the end ----------------------------------------------------------------------------------
for id in "$first_id" "$second_id" "$(field "$third" "d['id']")"; do
  api "$alice" DELETE "/api/v1/remote-leases/$id" >/dev/null
done
no_server_left() { ! ls "$tmp/servers"/*.json >/dev/null 2>&1; }
check "the servers are drained" wait_for 30 no_server_left
check "their old logs went with them" test ! -e "$log.1"
finish
