#!/usr/bin/env bash
# End to end, live migration: an unmodified nvcc-built program (tests/programs/migration_workload:
# many allocations, a linked list whose nodes store device pointers, a __device__ global, streams
# with posted work, events, a captured graph, pinned memory in a shared-memory arena) runs through
# flyt's libcudart.so.13 against one flyt-gpu-server (sim backend, a process per client) and is
# moved mid-run with `flyt-gpu-server migrate` to another. Checks: its results stay byte-exact;
# its later launches land on the new server (both launch logs); the old server holds nothing
# afterwards. Faults: the new server's process dies mid-transfer (the program goes on where it
# was and passes), the old server's process dies mid-transfer (the program gets a clear error);
# a client that makes no call is not moved ("pending").
# Skips (77) when the CUDA toolkit was not there to build the runtime and the programs.
# FLYT_TEST_BACKEND=driver runs the servers on the real GPU (two server processes on one device;
# scripts/gpu-checks.sh's `migrate` part), where the workload's kernels run and check the list.
# Usage: remote_migrate_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d -t flyt-migrate-e2e.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
program=$build/tests/programs/migration_workload
remote_setup "$build" "$program"
backend=${FLYT_TEST_BACKEND:-sim}
sim_env=(FLYT_SIM_DEVICE=1)
[ "$backend" = sim ] || sim_env=()

# start <name> [flags...]: a sim server on a TCP port and a Unix socket, with a launch log.
start() {
  local name=$1
  shift
  local port
  port=$(free_port)
  "$server_bin" --backend "$backend" --listen "127.0.0.1:$port" --listen "unix:$tmp/$name.sock" \
    --launch-log "$tmp/$name.jsonl" "$@" >>"$tmp/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
  eval "${name}_tcp=127.0.0.1:$port"
  wait_for 20 "$server_bin" stats --server "unix:$tmp/$name.sock" >/dev/null
}
# client_id <server>: the id of the connected migration_workload client.
client_id() {
  "$server_bin" stats --server "unix:$tmp/$1.sock" | jq_py "
c=[c for c in d['clients'] if c['connected'] and 'migration_workload' in c['label']]
print(c[0]['client_id'] if c else '')"
}
held() { "$server_bin" stats --server "unix:$tmp/$1.sock" | jq_py "print(d['allocated_bytes'])"; }
holds_nothing() { test "$(held "$1")" = 0; }
launches() { grep -c '"kernel":"' "$tmp/$1.jsonl" 2>/dev/null || echo 0; }
# workload <name> <server>: the program in the background, over TCP (it moves to shared memory,
# the server being on this host); waits for its phase 1.
workload() {
  local name=$1 server=$2
  mkdir -p "$tmp/$name"
  run_bounded 120 "$name" env "${sim_env[@]}" FLYT_LOG_LEVEL=info FLYT_SERVER="$server" \
    FLYT_TEST_MIGRATE_DIR="$tmp/$name" LD_LIBRARY_PATH="$runtime_dir" "$program" &
  workload_pid=$!
  wait_for 60 test -f "$tmp/$name/ready"
}
go() { touch "$tmp/$1/go"; wait "$workload_pid"; }

start a
start b

# ---- the move ----
check "workload starts on server a" workload moved "$a_tcp"
check "it is on shared memory there" grep -q "over shm" "$tmp/moved.out"
id=$(client_id a)
check "server a lists it" test -n "$id"
a_before=$(launches a)
"$server_bin" migrate --server "unix:$tmp/a.sock" --client "$id" --to "$b_tcp" \
  >"$tmp/migrate.json" 2>"$tmp/migrate.err"
rc=$?
check "flyt-gpu-server migrate exits 0" test "$rc" = 0
check "it says moved" grep -q '"outcome":"moved"' "$tmp/migrate.json"
check "it moved all 128 MiB of device memory" \
  jq_py "assert d['bytes'] >= 128 << 20, d" <"$tmp/migrate.json"
go moved
check "the program passes byte-exact after the move" grep -q "^PASS" "$tmp/moved.out"
check "it exited 0" test "$(rc_of moved)" = 0
check "the runtime said where it moved" grep -q "moved from .* to .*$b_tcp" "$tmp/moved.out"
check "it went over b's Unix socket and is on shared memory again" \
  grep -q "moved from .* at unix:.*,$b_tcp .*over shm), paused" "$tmp/moved.out"
check "server a ran the phase-1 launches" test "$a_before" -ge 4
check "server a ran none after the move" test "$(launches a)" = "$a_before"
check "server b ran the later launches" test "$(launches b)" -ge 4
check "server a holds nothing" wait_for 10 holds_nothing a
check "server b released it at exit" wait_for 10 holds_nothing b
check "server a logged the move" grep -q "moved to $b_tcp" "$tmp/a.log"
check "server b logged the arrival" grep -q "moved here from another server" "$tmp/b.log"

# ---- the new server dies mid-transfer: the program stays and passes ----
start c --test-migration-fault import:8388608
check "workload starts again on server a" workload stays "$a_tcp"
id=$(client_id a)
"$server_bin" migrate --server "unix:$tmp/a.sock" --client "$id" --to "$c_tcp" \
  >"$tmp/migrate2.json" 2>&1
rc=$?
check "migrate exits 1 when the target dies" test "$rc" = 1
check "it says failed, the client stays" grep -q '"outcome":"failed".*stays here' "$tmp/migrate2.json"
check "server c's process died mid-transfer" grep -q "test fault" "$tmp/c.log"
go stays
check "the program passes where it was" grep -q "^PASS" "$tmp/stays.out"
check "the runtime said it stays" grep -q "stays on" "$tmp/stays.out"
check "server c holds nothing" holds_nothing c

# ---- the old server dies mid-transfer: the program gets a clear error ----
start d --test-migration-fault export:8388608
check "workload starts on server d" workload lost "$d_tcp"
id=$(client_id d)
"$server_bin" migrate --server "unix:$tmp/d.sock" --client "$id" --to "$b_tcp" \
  >"$tmp/migrate3.json" 2>&1
check "migrate says the client's process ended mid-move" \
  grep -q '"outcome":"failed".*ended in the middle of the move' "$tmp/migrate3.json"
go lost
check "the program fails" test "$(rc_of lost)" != 0
check "with a clear error" grep -Eq "connection to the flyt GPU server lost|DevicesUnavailable" "$tmp/lost.out"
check "server b keeps nothing of it" wait_for 70 holds_nothing b

# ---- a client that makes no call is not moved ----
check "an idle client: workload starts" workload idle "$a_tcp"
kill -STOP "$(cat "$tmp/idle.pid")"
id=$(client_id a)
"$server_bin" migrate --server "unix:$tmp/a.sock" --client "$id" --to "$b_tcp" --timeout 0.5 \
  >"$tmp/migrate4.json" 2>&1
rc=$?
kill -CONT "$(cat "$tmp/idle.pid")"
check "migrate exits 3 for a client that made no call" test "$rc" = 3
check "it says pending" grep -q '"outcome":"pending"' "$tmp/migrate4.json"
go idle
check "the idle program passes on server a" grep -q "^PASS" "$tmp/idle.out"
check "and did not move" bash -c "! grep -q 'moved from' '$tmp/idle.out'"

# ---- bad requests ----
out=$("$server_bin" migrate --server "unix:$tmp/a.sock" --client 999 --to "$b_tcp" 2>&1)
check "an unknown client is a clear error" contains "$out" "no client 999 is connected"
out=$("$server_bin" migrate --server "unix:$tmp/a.sock" --client 1 --to "nowhere" 2>&1)
check "a malformed target is a clear error" contains "$out" "--to"
finish
