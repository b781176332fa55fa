#!/usr/bin/env bash
# End to end: flyt-cluster-manager with its embedded SQLite store and two flyt-node-managers on
# simulated scenarios, over loopback: registration and heartbeats, auth roles, allocation and
# refusal with reasons, lease expiry, the queue with backfill and timeout, a job with the node's
# monitoring stats, an unreachable node that comes back, and a kill -9 of the manager with
# nothing lost. Short timeouts come from the test's config; waits poll with a bound.
# Usage: cluster_manager_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
unset FLYT_NVML_LIBRARY FLYT_SIM_TIME FLYT_SIM_REASON FLYT_TOKEN FLYT_ADMIN_TOKEN FLYT_CLUSTER_MANAGER

admin=admin-token-000000000000
node_token=node-token-0000000000000
alice=alice-token-000000000000
bob=bob-token-00000000000000
viewer=viewer-token-00000000000
port=$(free_port)
url="http://127.0.0.1:$port"
cat >"$tmp/cm.toml" <<EOF
[manager]
listen = "127.0.0.1:$port"
store = "sqlite:$tmp/var/flyt.db"
var_dir = "$tmp/var"
max_body_bytes = 262144
[ledger]
unreachable_after_seconds = 3
lease_grace_seconds = 3
[queue]
job_timeout_seconds = 300
backfill_hold_seconds = 0
[auth]
tokens = [
  { name = "admin", token = "$admin", role = "admin" },
  { name = "nodes", token = "$node_token", role = "node" },
  { name = "alice", token = "$alice", role = "client" },
  { name = "bob", token = "$bob", role = "client" },
  { name = "grafana", token = "$viewer", role = "viewer" },
]
EOF

cat >"$tmp/node.toml" <<EOF
[monitor]
interval_ms = 200
[cluster-manager]
heartbeat_interval_s = 1
EOF
manager() { start_manager "127.0.0.1:$port" "$tmp/cm.log" --config "$tmp/cm.toml"; }
# sim_node <name> <scenario>
sim_node() { start_node "$1" "$2" "$url" "$node_token" --config "$tmp/node.toml"; }
ctl() { "$build/bin/flytctl" "$@" --server "$url"; }

state_of_node() {
  test "$(get_field /api/v1/nodes "[n['state'] for n in d['nodes'] if n['name']=='$1'][0]")" = "$2"
}
lease_count_is() { test "$(get_field /api/v1/allocations "len(d['allocations'])")" = "$1"; }

echo "== 1. start: a manager and two node managers register"
manager
check "manager serves /healthz" curl -sf "$url/healthz"
sim_node node-a h100x8-idle
sim_node node-b mixed-inference
check "both nodes register and stay reachable" wait_for 20 nodes_reachable 2
r=$(api "$viewer" GET /api/v1/gpus)
check "GET /api/v1/gpus lists 11 GPUs cluster-wide" test "$(field "$r" "len(d['gpus'])")" = 11
check "each GPU has node, allocation_state and score" test "$(field "$r" "all('node' in g and g['allocation_state']=='free' and 0<=g['score']<=1 for g in d['gpus'])")" = True
r=$(api "$viewer" GET /api/v1/nodes/node-a)
check "a node's record holds its snapshot" test "$(field "$r" "len(d['snapshot']['gpus'])")" = 8

echo "== 2. auth: 401 without a token, 403 for the wrong role"
check "no token: 401" test "$(code_of "$(api "" GET /api/v1/nodes)")" = 401
check "unknown token: 401" test "$(code_of "$(api not-a-token-at-all-000 GET /api/v1/nodes)")" = 401
check "/healthz needs no token" test "$(code_of "$(api "" GET /healthz)")" = 200
check "viewer may read" test "$(code_of "$(api "$viewer" GET /api/v1/allocations)")" = 200
check "viewer may not allocate: 403" test "$(code_of "$(api "$viewer" POST /api/v1/allocations '{"gpus":1}')")" = 403
check "node token may not read the inventory: 403" test "$(code_of "$(api "$node_token" GET /api/v1/nodes)")" = 403
check "client may not send heartbeats: 403" test "$(code_of "$(api "$alice" POST /api/v1/nodes/heartbeat '{}')")" = 403
r=$(api "$alice" GET /api/v1/whoami)
check "whoami names the token's holder and role" test "$(field "$r" "d['name']+'/'+d['role']")" = alice/client

echo "== 3. bad input: clear 4xx, nothing stored"
check "malformed JSON: 400" test "$(code_of "$(api "$alice" POST /api/v1/allocations '{"gpus":')")" = 400
r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"colour":"red"}')
check "unknown field: 400 naming it" contains "$(body_of "$r")" "unknown field 'colour'"
r=$(api "$alice" POST /api/v1/allocations '{"gpus":1000}')
check "gpus out of range: 400" test "$(code_of "$r")" = 400
python3 -c 'print("{\"labels\":{\"k\":\"" + "x"*300000 + "\"}}")' >"$tmp/big.json"
check "oversized body: 413" test "$(code_of "$(api "$alice" POST /api/v1/allocations "@$tmp/big.json")")" = 413
check "unknown path: 404" test "$(code_of "$(api "$alice" GET /api/v1/nothing)")" = 404
check "wrong method: 405" test "$(code_of "$(api "$alice" PUT /api/v1/allocations '{}')")" = 405
check "no lease was stored by any of it" lease_count_is 0

echo "== 4. the ledger: a leased GPU is never offered again; refusals say why"
r=$(api "$alice" POST /api/v1/allocations '{"gpus":8,"gpu_model":"H100","ttl_seconds":600}')
check "8 H100s granted: 201" test "$(code_of "$r")" = 201
lease_a=$(field "$r" "d['id']")
check "the lease is on node-a" test "$(field "$r" "d['node']")" = node-a
r=$(api "$bob" POST /api/v1/allocations '{"gpus":1,"gpu_model":"H100"}')
check "another H100 request: 409" test "$(code_of "$r")" = 409
check "409 counts the reasons per node" contains "$(body_of "$r")" "node-a: 0 available, 8 leased"
check "and names the other node's" contains "$(body_of "$r")" "node-b: 0 available"
check "bob may not release alice's lease: 403" test "$(code_of "$(api "$bob" DELETE "/api/v1/allocations/$lease_a")")" = 403
r=$(api "$alice" POST "/api/v1/allocations/$lease_a/renew" '{"ttl_seconds":900}')
check "alice renews it" test "$(field "$r" "d['ttl_seconds']")" = 900
r=$(api "$viewer" GET /api/v1/gpus)
check "its GPUs show as leased, with the holder" test "$(field "$r" "sum(1 for g in d['gpus'] if g['allocation_state']=='leased' and g['leases'][0]['owner']=='alice')")" = 8
check "alice releases it" test "$(code_of "$(api "$alice" DELETE "/api/v1/allocations/$lease_a")")" = 200
r=$(api "$alice" DELETE "/api/v1/allocations/$lease_a")
check "released twice: 409" test "$(code_of "$r")" = 409
check "with the machine-readable code already_ended" test "$(field "$r" "d['code']")" = already_ended
check "flytctl release of an ended lease exits 7" sh -c '"$1" release "$2" --server "$3" --token "$4" >/dev/null 2>&1; test $? -eq 7' _ "$build/bin/flytctl" "$lease_a" "$url" "$alice"
r=$(ctl alloc --gpus 2 --model H100 --ttl 2 --token "$bob" --json)
check "flytctl alloc grants a short lease" test "$(jq_py "print(len(d['gpus']))" <<<"$r")" = 2
check "it expires on its own (auto-deallocate)" wait_for 10 lease_count_is 0
lease_kinds_are() {
  test "$(get_field /api/v1/events "' '.join(sorted(set(e['kind'] for e in d['events'] if e['kind'].startswith('lease.'))))")" = "$1"
}
check "grant, renewal, release and expiry are events" wait_for 5 lease_kinds_are "lease.expired lease.granted lease.released lease.renewed"
out=$(ctl alloc --gpus 64 --token "$bob" 2>&1)
check "flytctl alloc that cannot be met exits non-zero with the reasons" test $? -ne 0
check "… and prints them" contains "$out" "node-a: 8 available"

echo "== 5. the queue: backfill, then a timeout with the reasons"
r=$(api "$admin" POST /api/v1/allocations '{"gpus":6,"gpu_model":"H100","ttl_seconds":600}')
hold=$(field "$r" "d['id']")
task4='{"task_name":"big","model":{"id_or_path":"meta-llama/Llama-3.1-8B-Instruct"},"base_runtime":"vllm","parameters":{"max-model-len":[8192]},"parallel_config":{"tp":[4]},"scheduling":{"gpu_model":"H100","timeout_seconds":600}}'
task2='{"task_name":"small","model":{"id_or_path":"meta-llama/Llama-3.1-8B-Instruct"},"base_runtime":"vllm","parameters":{"max-model-len":[8192]},"parallel_config":{"tp":[2]},"scheduling":{"gpu_model":"H100"}}'
r=$(api "$alice" POST /api/v1/jobs "$task4")
check "a 4-GPU job is accepted: 201" test "$(code_of "$r")" = 201
big_job=$(field "$r" "d['jobs'][0]['id']")
r=$(api "$alice" POST /api/v1/jobs "$task2")
small_job=$(field "$r" "d['jobs'][0]['id']")
check "the later 2-GPU job backfills the 2 free H100s" wait_for 10 job_status_is "$small_job" running
r=$(api "$alice" GET "/api/v1/jobs/$big_job")
check "the 4-GPU job waits, with the reason" contains "$(field "$r" "d['message']")" "no 4 GPU(s) on one node meet the request; node-a:"
r=$(api "$viewer" GET /api/v1/queue)
check "GET /api/v1/queue shows it with its requirement" test "$(field "$r" "d['queue'][0]['job_id']+' '+str(d['queue'][0]['requirement']['gpus'])")" = "$big_job 4"
check "its owner cancels it" test "$(code_of "$(api "$alice" DELETE "/api/v1/jobs/$big_job")")" = 200
# A job's own timeout, on a job of its own: the one above waits as long as the checks take (with a
# 4 s timeout, a loaded machine reached the queue check after the job had failed).
r=$(api "$alice" POST /api/v1/jobs "$(sed 's/"timeout_seconds":600/"timeout_seconds":2/' <<<"$task4")")
big_job=$(field "$r" "d['jobs'][0]['id']")
check "after its 2 s timeout a job that cannot be placed fails" wait_for 15 job_status_is "$big_job" failed
r=$(api "$alice" GET "/api/v1/jobs/$big_job")
check "… with 'Insufficient GPUs after waiting N s' and the reasons" contains "$(field "$r" "d['message']")" "Insufficient GPUs after waiting 2 s"
check "… per node" contains "$(field "$r" "d['message']")" "node-a:"

echo "== 6. a job carries gpu_info and, when it ends, the node's monitoring stats"
r=$(api "$alice" GET "/api/v1/jobs/$small_job")
check "gpu_info: count, world size, model" test "$(field "$r" "str(d['gpu_info']['count'])+str(d['gpu_info']['world_size'])+d['gpu_info']['model']")" = "22NVIDIA H100 80GB HBM3"
check "gpu_info: per-GPU allocation details" test "$(field "$r" "all(k in a for a in d['gpu_info']['allocation_details'] for k in ('index','name','memory_free_mb','utilization_percent','availability_score','allocation_method'))")" = True
devices=$(field "$r" "','.join(str(i) for i in sorted(d['gpu_info']['device_ids']))")
session_open() { test "$(get_field "/api/v1/jobs/$small_job" "d['monitoring_session'] is not None")" = True; }
check "a monitoring session was opened on the node" wait_for 10 session_open
check "… and has taken samples" wait_for 10 job_samples_at_least "$small_job" 2
r=$(api "$bob" POST "/api/v1/jobs/$small_job/complete" '{}')
check "bob may not complete alice's job: 403" test "$(code_of "$r")" = 403
r=$(api "$alice" POST "/api/v1/jobs/$small_job/complete" '{"metrics":{"requests_per_second":42.5}}')
check "alice completes it" test "$(field "$r" "d['status']")" = completed
check "metrics.gpu_monitoring has samples" test "$(field "$r" "d['metrics']['gpu_monitoring']['sample_count'] > 0")" = True
check "… for exactly the job's GPUs" test "$(field "$r" "','.join(sorted(d['metrics']['gpu_monitoring']['gpu_stats'].keys()))")" = "$devices"
check "… in the monitoring core's structure" test "$(field "$r" "all(k in s for s in d['metrics']['gpu_monitoring']['gpu_stats'].values() for k in ('utilization','memory_used_mb','temperature_c','power_draw_w'))")" = True
check "the caller's own metrics are kept" test "$(field "$r" "d['metrics']['requests_per_second']")" = 42.5
out=$(ctl job "$small_job" --token "$viewer")
check "flytctl job shows the monitoring summary" contains "$out" "utilization"
out=$(ctl jobs --token "$viewer")
check "flytctl jobs shows the GPU column with the monitoring marker" contains "$out" "2 (H100) 📊"
api "$admin" DELETE "/api/v1/allocations/$hold" >/dev/null

echo "== 7. an unreachable node offers nothing, loses its leases after the grace, comes back"
r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"gpu_model":"A100","ttl_seconds":600}')
check "a lease on node-b" test "$(field "$r" "d['node']")" = node-b
kill -9 "${node_pids[node-b]}"
check "node-b becomes unreachable" wait_for 15 state_of_node node-b unreachable
r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"gpu_model":"A100"}')
check "its GPUs are not offered: 409 says unreachable" contains "$(body_of "$r")" "node-b: unreachable"
check "its lease is released after the grace" wait_for 15 lease_count_is 0
sim_node node-b mixed-inference
check "it comes back on its own when heartbeats resume" wait_for 20 state_of_node node-b reachable
r=$(api "$admin" GET /api/v1/events)
check "unreachable and reachable are events" test "$(field "$r" "sum(1 for e in d['events'] if e['kind'] in ('node.unreachable','node.reachable') and e['node']=='node-b')")" = 2

echo "== 8. kill -9 of the manager loses nothing"
r=$(api "$alice" POST /api/v1/allocations '{"gpus":7,"gpu_model":"H100","ttl_seconds":600}')
keep=$(field "$r" "d['id'] + ' ' + d['expires_at']")
for p in 5 0 0; do
  api "$alice" POST /api/v1/jobs "$(sed "s/\"gpu_model\":\"H100\"/\"gpu_model\":\"H100\",\"priority\":$p/" <<<"$task4")" >/dev/null
done
before_queue=$(get_field /api/v1/queue "' '.join(q['job_id'] for q in d['queue'])")
check "three jobs wait" test "$(wc -w <<<"$before_queue")" = 3
kill -9 "$manager_pid"
wait "$manager_pid" 2>/dev/null
manager
r=$(api "$admin" GET /api/v1/allocations)
check "the lease survives with its expiry" test "$(field "$r" "' '.join(l['id']+' '+l['expires_at'] for l in d['allocations'])")" = "$keep"
after_queue=$(get_field /api/v1/queue "' '.join(q['job_id'] for q in d['queue'])")
check "queued jobs keep their order" test "$after_queue" = "$before_queue"
check "nodes re-register with the restarted manager" wait_for 20 nodes_reachable 2
check "the held GPUs are still not offered" test "$(code_of "$(api "$bob" POST /api/v1/allocations '{"gpus":2,"gpu_model":"H100"}')")" = 409
first=$(cut -d' ' -f1 <<<"$after_queue")
api "$alice" DELETE "/api/v1/allocations/$(cut -d' ' -f1 <<<"$keep")" >/dev/null
check "released capacity starts the queue's head (priority 5) at once" wait_for 10 job_status_is "$first" running
check "flytctl cancel ends a job" "$build/bin/flytctl" cancel "$(cut -d' ' -f2 <<<"$after_queue")" --server "$url" --token "$alice"
check "… which shows as cancelled" job_status_is "$(cut -d' ' -f2 <<<"$after_queue")" cancelled

echo "== 9. metrics"
leased=$(field "$(api "$viewer" GET /api/v1/gpus)" "sum(1 for g in d['gpus'] if g['allocation_state']=='leased')")
m=$(curl -s -H "Authorization: Bearer $viewer" "$url/metrics")
check "/metrics counts GPUs by state, as the API does" contains "$m" "flyt_cluster_gpus{state=\"leased\"} $leased"
check "/metrics counts jobs by status" contains "$m" 'flyt_cluster_jobs{status="cancelled"} 2'
r=$(ctl events --limit 2 --json --token "$viewer")
check "flytctl events shows the newest events" test "$(jq_py "print(len(d['events']), d['events'][1]['id'] > d['events'][0]['id'])" <<<"$r")" = "2 True"
seen=$(jq_py "print(d['events'][1]['id'])" <<<"$r")
# Events keep coming (heartbeats, the queue, expiries): the newest is at least the newest seen just
# before, and one of those written since (it was "none after it", which an event between the two
# requests broke on a loaded machine).
r=$(api "$viewer" GET "/api/v1/events?latest=1")
newest=$(field "$r" "d['events'][0]['id']")
since=$(field "$(api "$viewer" GET "/api/v1/events?after=$((seen - 1))&limit=1000")" "' '.join(str(e['id']) for e in d['events'])")
check "?latest=1 is the newest event" test "$newest" -ge "$seen" -a -n "$(grep -w "$newest" <<<"$since")"
check "/metrics needs a token" test "$(code_of "$(api "" GET /metrics)")" = 401

finish
