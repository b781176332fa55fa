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
#   a target whose server dies mid-transfer   the lease and the program stay where they were.
# Skips (77) when the CUDA toolkit was not there to build the runtime and the programs.
# Usage: remote_moves_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d -t flyt-remote-moves.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
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
finish
