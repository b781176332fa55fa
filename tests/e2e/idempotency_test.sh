#!/usr/bin/env bash
# End to end (issue 13, point 10): a lease or jobs the client never saw. A real cluster manager
# grants an allocation (and a submission) with an Idempotency-Key and is killed with -9 at once,
# before the client reads the answer; after a restart the retry with the same key gets the same
# lease (and the same jobs) back, marked "replayed", and nothing is granted twice. The same key
# with another body is 409 idempotency_key_reused; a malformed key is 400; after a release the
# retry still answers the original lease, marked lease_ended. flytctl sends a key of its own per
# invocation, and pages through the jobs. Issue 32: a remote lease whose answer is lost while
# its GPU server starts (the client gives up after 1 s, the server takes 4 s): the retry with the
# same key gets that lease (state starting, then ready), and only one lease and one server exist.
# Usage: idempotency_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
unset FLYT_NVML_LIBRARY FLYT_SIM_TIME FLYT_SIM_REASON FLYT_TOKEN FLYT_ADMIN_TOKEN FLYT_CLUSTER_MANAGER

cluster_config </dev/null
cat >"$tmp/node.toml" <<EOF
[monitor]
interval_ms = 200
[cluster-manager]
heartbeat_interval_s = 1
EOF
manager() { start_manager "127.0.0.1:$port" "$tmp/cm.log" --config "$tmp/cm.toml"; }
ctl() { "$build/bin/flytctl" "$@" --server "$url"; }
# keyed <key> <method> <path> <body>: like api, as alice, with an Idempotency-Key.
keyed() {
  curl -s -m 30 -X "$2" -w '\n%{http_code}' "$url$3" -H "Authorization: Bearer $alice" \
    -H "Idempotency-Key: $1" -H 'Content-Type: application/json' --data-binary "$4"
}
lease_count_is() { test "$(get_field /api/v1/allocations "len(d['allocations'])")" = "$1"; }
kill9_and_restart() {
  kill -9 "$manager_pid"
  wait "$manager_pid" 2>/dev/null
  manager || return 1
  wait_for 20 nodes_reachable 1
}

echo "== 1. a cluster with one node"
check "manager starts" manager
start_node a h100x8-idle "$url" "$node_token" --config "$tmp/node.toml"
check "the node registers" wait_for 20 nodes_reachable 1

echo "== 2. an allocation whose answer is lost: kill -9 right after the grant"
body='{"gpus":2,"ttl_seconds":3600}'
keyed alloc-key-1 POST /api/v1/allocations "$body" >"$tmp/lost" &
curl_pid=$!
# The lease is committed before the answer is written: as soon as it is in the store, kill.
wait_for 20 lease_count_is 1
kill -9 "$manager_pid"
wait "$curl_pid" 2>/dev/null
wait "$manager_pid" 2>/dev/null
granted=$(sqlite3 "$tmp/var/flyt.db" "SELECT id FROM leases WHERE NOT deleted" 2>/dev/null ||
  python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT id FROM leases WHERE NOT deleted').fetchone()[0])" "$tmp/var/flyt.db")
check "the store holds the granted lease" test -n "$granted"
check "manager restarts" manager
check "the node is back" wait_for 20 nodes_reachable 1
r=$(keyed alloc-key-1 POST /api/v1/allocations "$body")
check "the retry with the same key: 201" test "$(code_of "$r")" = 201
check "... the same lease" test "$(field "$r" "d['id']")" = "$granted"
check "... marked replayed" test "$(field "$r" "d.get('replayed')")" = True
check "nothing was granted twice" lease_count_is 1
r=$(keyed alloc-key-1 POST /api/v1/allocations '{"gpus":1,"ttl_seconds":3600}')
check "the same key, another body: 409" test "$(code_of "$r")" = 409
check "... idempotency_key_reused" test "$(field "$r" "d['code']")" = idempotency_key_reused
long=$(printf 'k%.0s' $(seq 300))
check "a key of 300 characters: 400" test "$(code_of "$(keyed "$long" POST /api/v1/allocations "$body")")" = 400
check "release the lease" test "$(code_of "$(api "$alice" DELETE "/api/v1/allocations/$granted")")" = 200
r=$(keyed alloc-key-1 POST /api/v1/allocations "$body")
check "after the release the retry answers the original lease" test "$(field "$r" "d['id']")" = "$granted"
check "... marked lease_ended" test "$(field "$r" "d.get('lease_ended')")" = True
check "... and grants nothing" lease_count_is 0

echo "== 3. a submission whose answer is lost"
task='{"task_name":"idem","model":{"id_or_path":"meta-llama/Llama-3.1-8B-Instruct"},"parameters":{"max-model-len":[4096],"seed":[1,2,3]},"scheduling":{"timeout_seconds":600}}'
r=$(keyed submit-key-1 POST /api/v1/jobs "$task")
check "submitted: 201" test "$(code_of "$r")" = 201
first=$(field "$r" "' '.join(j['id'] for j in d['jobs'])")
check "manager killed -9 and restarted" kill9_and_restart
r=$(keyed submit-key-1 POST /api/v1/jobs "$task")
check "the retry: 201" test "$(code_of "$r")" = 201
check "... the same jobs" test "$(field "$r" "' '.join(j['id'] for j in d['jobs'])")" = "$first"
check "... and no more jobs than one submission made" test "$(get_field /api/v1/jobs "d['total']")" = 3

echo "== 4. flytctl: a key per invocation, pages of jobs"
out1=$(FLYT_TOKEN=$alice ctl alloc --gpus 1 --quiet 2>&1)
out2=$(FLYT_TOKEN=$alice ctl alloc --gpus 1 --quiet 2>&1)
check "two flytctl alloc are two leases" test -n "$out1" -a -n "$out2" -a "$out1" != "$out2"
out=$(FLYT_TOKEN=$alice ctl jobs --limit 2 2>&1)
check "flytctl jobs --limit 2 says more remain" contains "$out" "--all"
out=$(FLYT_TOKEN=$alice ctl jobs --all --json 2>&1)
check "flytctl jobs --all fetches every job" test "$(jq_py "print(len(d['jobs']))" <<<"$out")" = 3

echo "== 5. a remote lease whose answer is lost while its GPU server starts"
cat >"$tmp/slow-gpu-server" <<EOF
#!/bin/sh
sleep 4
exec "$build/bin/flyt-gpu-server" "\$@"
EOF
chmod +x "$tmp/slow-gpu-server"
gpu_servers_config "$tmp/node-b.toml" sim "$tmp/servers-b" 2 </dev/null
sed -i "s|^binary = .*|binary = \"$tmp/slow-gpu-server\"|" "$tmp/node-b.toml"
start_node b h100x8-idle "$url" "$node_token" --config "$tmp/node-b.toml"
check "a node with GPU servers registers" wait_for 60 nodes_reachable 2
check "it reports its GPU-server capacity" wait_for 60 \
  sh -c "curl -sf -H 'Authorization: Bearer $admin' $url/api/v1/gpus | grep -q sm_count"
rbody='{"sm_percent":25,"memory_mb":1024,"client":"idem-client","node":"b"}'
curl -s -m 1 -X POST "$url/api/v1/remote-leases" -H "Authorization: Bearer $alice" \
  -H "Idempotency-Key: rlease-key-1" -H 'Content-Type: application/json' \
  --data-binary "$rbody" >/dev/null
lost=$?
check "the first answer is lost: the client gave up after 1 s (curl $lost)" test "$lost" != 0
r=$(keyed rlease-key-1 POST /api/v1/remote-leases "$rbody")
check "the retry with the same key: 201" test "$(code_of "$r")" = 201
check "... the lease being started, not a second one" test "$(field "$r" "d['state']")" = starting
rlease=$(field "$r" "d['id']")
ready_again() {
  local a
  a=$(keyed rlease-key-1 POST /api/v1/remote-leases "$rbody")
  test "$(field "$a" "d['state']")" = ready && test "$(field "$a" "d['id']")" = "$rlease" &&
    test -n "$(field "$a" "d['secret']")"
}
check "asked again once started: the same lease, ready, with its secret" wait_for 30 ready_again
remote_leases_of_client() {
  get_field "/api/v1/remote-leases?client=idem-client" "len(d['remote_leases'])"
}
check "one remote lease" test "$(remote_leases_of_client)" = 1
servers_on_b() {
  get_field "/api/v1/gpu-servers?node=b" "len([s for s in d['servers'] if s['state'] in ('starting', 'running')])"
}
servers_on_b_are() { test "$(servers_on_b)" = "$1"; }
check "its server is listed" wait_for 20 servers_on_b_are 1
check "and it is the only one" servers_on_b_are 1
check "the owner releases it" \
  test "$(code_of "$(api "$alice" DELETE "/api/v1/remote-leases/$rlease")")" = 200

finish
