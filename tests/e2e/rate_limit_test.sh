#!/usr/bin/env bash
# End to end: fair service for every token (issue 32, point 6). A cluster manager with a rate
# limit of 5 requests per second (burst 10) per token, a node manager on a simulated node sending
# heartbeats every second, and two client tokens. Alice floods the API with fast, complete
# requests on a keep-alive connection for 8 s (longer than unreachable_after, 3 s): she gets 429
# with Retry-After and the code rate_limited, while Bob's allocations go through, the node keeps
# its heartbeats (it stays reachable, its GPUs allocatable) and /metrics counts the refusals.
# Usage: rate_limit_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
unset FLYT_NVML_LIBRARY FLYT_SIM_TIME FLYT_SIM_REASON FLYT_TOKEN FLYT_ADMIN_TOKEN FLYT_CLUSTER_MANAGER

cluster_config <<EOF
[http]
rate_per_second = 5
rate_burst = 10
[ledger]
unreachable_after_seconds = 3
lease_grace_seconds = 3
EOF
bob=bob-token-00000000000000
# A second client token beside cluster_config's alice.
sed -i "s/^  { name = \"alice\".*/&\n  { name = \"bob\", token = \"$bob\", role = \"client\" },/" "$tmp/cm.toml"
cat >"$tmp/node.toml" <<EOF
[cluster-manager]
heartbeat_interval_s = 1
EOF

echo "== 1. a manager, a node manager"
start_manager "127.0.0.1:$port" "$tmp/cm.log" --config "$tmp/cm.toml"
check "the manager serves /healthz" curl -sf "$url/healthz"
start_node node-a h100x8-idle "$url" "$node_token" --config "$tmp/node.toml"
check "the node registers" wait_for 20 nodes_reachable 1
check "bob's token works" test "$(code_of "$(api "$bob" GET /api/v1/whoami)")" = 200

echo "== 2. alice floods for 8 s; bob allocates and releases meanwhile"
run_bounded 60 flood python3 "$src/tests/e2e/rate_limit_flood.py" --url "$url" --token "$alice" \
  --seconds 8 --max-requests 500000 &
flood_pid=$!
pids+=("$flood_pid")
bob_ok=0
bob_failed=0
reachable_failed=0
sleep 1  # the flood is under way
for i in 1 2 3 4 5 6; do
  r=$(api "$bob" POST /api/v1/allocations '{"gpus":2,"ttl_seconds":600}')
  if [ "$(code_of "$r")" = 201 ]; then
    lease=$(field "$r" "d['id']")
    if [ "$(code_of "$(api "$bob" DELETE "/api/v1/allocations/$lease")")" = 200 ]; then
      bob_ok=$((bob_ok + 1))
    else
      bob_failed=$((bob_failed + 1))
    fi
  else
    echo "bob's allocation $i: $r"
    bob_failed=$((bob_failed + 1))
  fi
  nodes_reachable 1 || reachable_failed=$((reachable_failed + 1))
  sleep 0.5
done
wait "$flood_pid"
echo "flood: $(cat "$tmp/flood.out")"
summary() { jq_py "print($1)" <"$tmp/flood.out"; }
check "the flood ran" test "$(rc_of flood)" = 0
check "alice was answered 429 (rate_limited)" test "$(summary "d['statuses'].get('429', 0) > 0")" = True
check "alice was also served within her rate" test "$(summary "d['statuses'].get('200', 0) >= 10")" = True
check "every 429 said rate_limited" test "$(summary "list(d['codes'].keys()) == ['rate_limited']")" = True
check "every 429 had Retry-After in whole seconds" \
  test "$(summary "all(k.isdigit() and int(k) >= 1 for k in d['retry_after'])")" = True
check "alice's connection stayed open through her 429s" test "$(summary "d['connections']")" = 1
# A refused connection is not read until it may send again (at most 1 s): without that pause one
# keep-alive connection gets tens of thousands of 429s in 8 s; with it, about one per second.
check "a refused connection was paused, not read flat out" test "$(summary "d['requests'] < 1000")" = True
check "bob's 6 allocations and releases all went through" test "$bob_ok/$bob_failed" = 6/0
check "the node stayed reachable throughout" test "$reachable_failed" = 0

echo "== 3. after the flood"
check "the node is reachable" nodes_reachable 1
check "its 8 GPUs are allocatable" \
  test "$(code_of "$(api "$bob" POST /api/v1/allocations '{"gpus":8,"ttl_seconds":600}')")" = 201
check "no node went unreachable" test "$(get_field "/api/v1/events?limit=1000" "sum(1 for e in d['events'] if e['kind']=='node.unreachable')")" = 0
metrics=$(curl -s -H "Authorization: Bearer $admin" "$url/metrics")
check "/metrics counts the client's limited requests" \
  grep -qE '^flyt_cluster_http_requests_limited_total\{role="client"\} [1-9]' <<<"$metrics"
check "/metrics counts the priority lane's requests" \
  grep -qE '^flyt_cluster_http_requests_priority_total [1-9]' <<<"$metrics"
# curl's view of a refusal: the header itself. 100 requests from one curl on one keep-alive
# connection (alice is over her rate of 5/s, burst 10, after a dozen however loaded the machine;
# a curl process per request can start slower than her rate refills).
mapfile -t many < <(for _ in $(seq 1 100); do echo "$url/api/v1/allocations"; done)
curl -s -D - -o /dev/null -H "Authorization: Bearer $alice" "${many[@]}" >"$tmp/heads"
check "a refusal carries Retry-After" grep -qiE '^Retry-After: [0-9]+' "$tmp/heads"
finish
