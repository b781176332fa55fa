#!/usr/bin/env bash
# End to end: the cluster manager moves and resizes remote leases while their programs run, and
# drains a node. A cluster manager and three node managers with [gpu-servers] on simulated GPUs
# (gpu-c's servers die mid-import: --test-migration-fault); an unmodified nvcc-built program
# (tests/programs/migration_workload: a device-side linked list of device pointers, a global,
# streams, events, a captured graph, pinned memory) runs through flyt's libcudart.so.13 against
# its lease's server. Checks, as a user runs them:
#   flytctl remote migrate ID --to NODE:GPU   the program passes byte-exact on the new server, the
#                                             lease is on that GPU, the old server drains;
#   flytctl remote resize ID --sm N --memory M   the running program's server takes the new share
#                                             (granted SMs reported), the lease shows it;
#   flytctl nodes drain NODE                  the node is cordoned, its lease moves with its
#                                             running program, nothing new lands there; uncordon;
#   a target whose server dies mid-transfer   the lease and the program stay where they were;
#   kill -9 of the cluster manager in the steps of a resize   after a restart the lease shows
#                                             resizing_to (the larger share held) until it is
#                                             settled to the share the node's server really runs
#                                             with: the old one when the node never took it, the
#                                             new one when it did; the ledger then holds exactly
#                                             that share.
# Skips (77) when the CUDA toolkit was not there to build the runtime and the programs.
# Usage: remote_moves_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d -t flyt-remote-moves.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
# A node manager stopped (SIGSTOP) by the resize checks is continued first, so that it can end.
trap 'for p in "${node_pids[@]}"; do kill -CONT "$p" 2>/dev/null; done
stop_children; [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
program=$build/tests/programs/migration_workload
remote_setup "$build" "$program"
unset FLYT_CLIENT_MANAGER FLYT_SERVER FLYT_SERVER_SECRET
ctl=$build/bin/flytctl

cluster_config </dev/null
mkdir -p "$tmp/var"
start_manager "127.0.0.1:$port" "$tmp/manager.log" --config "$tmp/cm.toml"
for n in a b c; do
  if [ "$n" = c ]; then
    # gpu-c's GPU servers die once 8 MiB of an imported client arrived.
    printf 'extra_args = ["--test-migration-fault", "import:8388608"]\n' |
      gpu_servers_config "$tmp/node-$n.toml" sim "$tmp/servers-$n" 2
  else
    gpu_servers_config "$tmp/node-$n.toml" sim "$tmp/servers-$n" 2 </dev/null
  fi
  start_node "gpu-$n" h100x8-idle "$url" "$node_token" --config "$tmp/node-$n.toml"
done
capacity() {
  test "$(get_field /api/v1/gpus "len({g['node'] for g in d['gpus'] if g.get('sm_count')})")" = 3
}
check "three nodes report GPU-server capacity" wait_for 30 capacity

as_admin=("$ctl" --server "$url" --token "$admin")
as_alice=("$ctl" --server "$url" --token "$alice")
lease() { "${as_alice[@]}" --json remote show "$1" --secret; }
lease_field() { lease "$1" | jq_py "print($2)"; }

"${as_alice[@]}" --json remote alloc --sm-count 16 --memory-mb 4096 --node gpu-a --ttl 600 \
  >"$tmp/alloc.json" 2>"$tmp/alloc.err"
check "alice gets a remote lease on gpu-a" test -s "$tmp/alloc.json"
id=$(jq_py "print(d['id'])" <"$tmp/alloc.json")
address=$(jq_py "print(d['server']['address'])" <"$tmp/alloc.json")
secret=$(jq_py "print(d['secret'])" <"$tmp/alloc.json")

# workload <name> <address>: the program in the background against the lease's server; waits
# for its phase 1 (the state it builds is on the server).
workload() {
  local name=$1 server=$2
  mkdir -p "$tmp/$name"
  run_bounded 180 "$name" env FLYT_SIM_DEVICE=1 FLYT_LOG_LEVEL=info FLYT_SERVER="$server" \
    FLYT_SERVER_SECRET="$secret" FLYT_TEST_MIGRATE_DIR="$tmp/$name" \
    LD_LIBRARY_PATH="$runtime_dir" "$program" &
  workload_pid=$!
  wait_for 60 test -f "$tmp/$name/ready"
}
go() { touch "$tmp/$1/go"; wait "$workload_pid"; }
server_state() {
  get_field "/api/v1/gpu-servers?node=$1" "[s['state'] for s in d['servers'] if s['lease_id']=='$2'][0]"
}
drained() { case "$(server_state "$1" "$2")" in stopped | draining) return 0 ;; *) return 1 ;; esac; }

# ---- migrate --------------------------------------------------------------------------------
check "the program starts on the lease's server" workload first "$address"
"${as_alice[@]}" remote migrate "$id" --to gpu-b:3 >"$tmp/migrate.out" 2>&1
rc=$?
check "flytctl remote migrate exits 0" test "$rc" = 0
check "it says where from and to" grep -q "moved $id from gpu-a:[0-9] to gpu-b:3: 1 client" "$tmp/migrate.out"
go first
check "the program passes byte-exact after the move" grep -q "^PASS" "$tmp/first.out"
check "the runtime said it moved" grep -q "moved from .* to " "$tmp/first.out"
check "the lease is on gpu-b's GPU 3" test "$(lease_field "$id" "(d['node'], d['gpu']['index'])")" = "('gpu-b', 3)"
new_address=$(lease_field "$id" "d['server']['address']")
check "with a new server address" test "$new_address" != "$address"
check "and the same secret" test "$(lease_field "$id" "d['secret']")" = "$secret"
check "the old server drains" wait_for 20 drained gpu-a "$id"
check "an event says it moved" \
  sh -c "'${as_admin[0]}' --server '$url' --token '$admin' events | grep -q 'remote_lease.migrated'"

# ---- resize ---------------------------------------------------------------------------------
check "the program starts again on the moved lease" workload second "$new_address"
"${as_alice[@]}" remote resize "$id" --sm 40 --memory 6144 >"$tmp/resize.out" 2>&1
rc=$?
check "flytctl remote resize exits 0" test "$rc" = 0
check "it reports the granted SMs" grep -q "granted 40 SMs; 1 of 1 clients applied it" "$tmp/resize.out"
check "the lease shows the new share" \
  test "$(lease_field "$id" "(d['sm_count'], d['memory_mb'])")" = "(40, 6144)"
record_share() {
  test "$(get_field "/api/v1/gpu-servers?node=gpu-b" "[(s['sm_count'], s['memory_mb']) for s in d['servers'] if s['lease_id']=='$id.m1'][0]")" = "(40, 6144)"
}
check "the node's server record too (its next heartbeat)" wait_for 10 record_share
"${as_alice[@]}" remote resize "$id" --memory 1 >"$tmp/resize2.out" 2>&1
rc=$?
check "a memory limit below what the program holds is refused" test "$rc" != 0
check "with the server's reason" grep -q "below the [0-9]* MiB the clients hold" "$tmp/resize2.out"
check "and the lease keeps its share" test "$(lease_field "$id" "d['memory_mb']")" = 6144
go second
check "the resized program passes" grep -q "^PASS" "$tmp/second.out"

# ---- a target that dies mid-transfer: everything stays ------------------------------------
check "the program starts for the failing move" workload third "$new_address"
"${as_alice[@]}" remote migrate "$id" --to gpu-c >"$tmp/migrate-c.out" 2>&1
rc=$?
check "a move whose target dies fails" test "$rc" != 0
check "it says the lease stays" grep -q "stays on gpu-b:3" "$tmp/migrate-c.out"
go third
check "the program passes where it was" grep -q "^PASS" "$tmp/third.out"
check "the lease is still on gpu-b" test "$(lease_field "$id" "d['node']")" = gpu-b

# ---- drain ----------------------------------------------------------------------------------
check "the program starts before the drain" workload fourth "$new_address"
"${as_alice[@]}" nodes drain gpu-b >"$tmp/drain-alice.out" 2>&1
check "only an admin drains" test "$?" != 0
"${as_admin[@]}" nodes drain gpu-b >"$tmp/drain.out" 2>&1
rc=$?
check "flytctl nodes drain exits 0" test "$rc" = 0
check "it says gpu-b is cordoned" grep -q "node gpu-b cordoned" "$tmp/drain.out"
check "and the lease moved" grep -q "$id: moved to gpu-a:" "$tmp/drain.out"
go fourth
check "the program passes after the drain" grep -q "^PASS" "$tmp/fourth.out"
check "the lease is on gpu-a" test "$(lease_field "$id" "d['node']")" = gpu-a
check "flytctl nodes shows gpu-b cordoned" sh -c "'$ctl' --server '$url' --token '$admin' nodes | grep -q '^gpu-b *cordoned'"
"${as_alice[@]}" --json remote alloc --sm-count 8 --memory-mb 1024 --node gpu-b >"$tmp/cordoned.out" 2>&1
check "nothing new lands on a cordoned node" grep -q "cordoned" "$tmp/cordoned.out"
"${as_admin[@]}" nodes uncordon gpu-b >"$tmp/uncordon.out" 2>&1
check "uncordon" grep -q "uncordoned" "$tmp/uncordon.out"
"${as_alice[@]}" --json remote alloc --sm-count 8 --memory-mb 1024 --node gpu-b >"$tmp/again.out" 2>&1
check "leases land on it again" grep -q '"state": *"ready"' "$tmp/again.out"

# ---- kill -9 of the cluster manager in the steps of a resize -------------------------------
# The resize is written ahead into the lease's row before the node is asked. A restarted
# manager shows it as resizing_to, holds the larger of both shares, and settles it to the share
# the node's server runs with (the node's GET, which takes a new share only once the server
# applied it).
"${as_alice[@]}" --json remote alloc --sm-count 16 --memory-mb 2048 --node gpu-c --ttl 600 \
  >"$tmp/alloc-c.json" 2>&1
check "a lease on gpu-c to resize" grep -q '"state": *"ready"' "$tmp/alloc-c.json"
rid=$(jq_py "print(d['id'])" <"$tmp/alloc-c.json")
rgpu=$(jq_py "print(d['gpu']['uuid'])" <"$tmp/alloc-c.json")
# share: (sm_count, memory_mb, resizing_to's sm_count, resizing_to's memory_mb) of the lease.
share() {
  field "$(api "$alice" GET "/api/v1/remote-leases/$rid")" \
    "(d['sm_count'], d['memory_mb'], (d.get('resizing_to') or {}).get('sm_count'), (d.get('resizing_to') or {}).get('memory_mb'))"
}
share_is() { test "$(share)" = "$1"; }
# The SMs of the lease's GPU that no lease holds, as the manager's ledger counts them.
sm_free() { get_field /api/v1/gpus "[g['sm_free'] for g in d['gpus'] if g['uuid']=='$rgpu'][0]"; }
base=$(($(sm_free) + 16))
# The share gpu-c's record of the lease's server shows (its latest heartbeat).
node_share() {
  get_field "/api/v1/gpu-servers?node=gpu-c" "[(s['sm_count'], s['memory_mb']) for s in d['servers'] if s['lease_id']=='$rid'][0]"
}
node_share_is() { test "$(node_share)" = "$1"; }
restart_manager() {
  kill -9 "$manager_pid"
  wait "$manager_pid" 2>/dev/null
  start_manager "127.0.0.1:$port" "$tmp/manager.log" --config "$tmp/cm.toml"
}

# 1. Written ahead, then the node cannot be asked (its node manager is down) and the cluster
#    manager dies with the resize in doubt: the node never took it.
kill -9 "${node_pids[gpu-c]}"
wait "${node_pids[gpu-c]}" 2>/dev/null
r=$(api "$alice" POST "/api/v1/remote-leases/$rid/resize" '{"sm_count": 32, "memory_mb": 4096, "timeout_s": 1}')
check "a resize its node cannot answer is in doubt (503 resize_in_doubt)" \
  test "$(code_of "$r") $(field "$r" "d['code']")" = "503 resize_in_doubt"
check "kill -9 of the cluster manager, and a restart" restart_manager
check "the lease shows resizing_to beside the share it had" share_is "(16, 2048, 32, 4096)"
check "the larger share stays held" test "$(sm_free)" = $((base - 32))
start_node gpu-c h100x8-idle "$url" "$node_token" --config "$tmp/node-c.toml"
check "gpu-c's node manager is back, its server adopted" wait_for 30 node_share_is "(16, 2048)"
check "the lease settles to the old share its server kept (once the node's call could have ended)" \
  wait_for 120 share_is "(16, 2048, None, None)"
check "the ledger holds exactly that share" test "$(sm_free)" = $((base - 16))

# 2. Written ahead and sent, but the cluster manager dies before the node answers (its node
#    manager is stopped); the node applies it afterwards: the lease settles to the new share.
#    Fewer SMs, more memory: the larger share held meanwhile is neither the old nor the new one.
kill -STOP "${node_pids[gpu-c]}"
api "$alice" POST "/api/v1/remote-leases/$rid/resize" '{"sm_count": 8, "memory_mb": 3072}' \
  >"$tmp/resize-crash.out" 2>&1 &
resize_pid=$!
check "the resize is recorded before the node answers" wait_for 20 share_is "(16, 2048, 8, 3072)"
kill -9 "$manager_pid"
wait "$manager_pid" 2>/dev/null
wait "$resize_pid" 2>/dev/null
kill -CONT "${node_pids[gpu-c]}"
check "the node applies the resize the dead manager sent" \
  wait_for 30 grep -q "resized the server of lease $rid: 8 SMs, 3072 MiB" "$tmp/gpu-c.log"
# While its node cannot answer, the restarted manager cannot settle it.
kill -STOP "${node_pids[gpu-c]}"
check "the cluster manager restarts" \
  start_manager "127.0.0.1:$port" "$tmp/manager.log" --config "$tmp/cm.toml"
check "the lease shows resizing_to while unsettled" share_is "(16, 2048, 8, 3072)"
check "the larger SM share stays held" test "$(sm_free)" = $((base - 16))
kill -CONT "${node_pids[gpu-c]}"
check "the lease settles to the new share its server runs with" \
  wait_for 60 share_is "(8, 3072, None, None)"
check "the ledger holds exactly that share" test "$(sm_free)" = $((base - 8))
check "as the node reports" wait_for 10 node_share_is "(8, 3072)"
"${as_admin[@]}" events --limit 1000 >"$tmp/events.out" 2>&1
check "the events say how each was settled" \
  test "$(grep -c "resolved after a restart of the cluster manager (the resize" "$tmp/events.out")" -ge 2
finish
