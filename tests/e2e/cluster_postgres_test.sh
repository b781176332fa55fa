#!/usr/bin/env bash
# End to end: two flyt-cluster-manager replicas sharing one real PostgreSQL server (started by the
# test on loopback). Each replica gets its own node manager's heartbeats, yet both see the whole
# cluster; 48 concurrent allocation requests spread over both replicas for 16 GPUs are granted
# exactly 16 times, never the same GPU twice; a job submitted to one is placed and seen by the
# other; and a replica killed with -9 loses nothing.
# Usage: cluster_postgres_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
chmod 755 "$tmp"
pg_started=0
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cleanup() {
  stop_children
  [ "$pg_started" = 1 ] && "$src/tests/support/postgres.sh" stop "$tmp/pg" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
unset FLYT_NVML_LIBRARY FLYT_SIM_TIME FLYT_SIM_REASON FLYT_TOKEN FLYT_ADMIN_TOKEN

if [ "${FLYT_SKIP_POSTGRES:-0}" = 1 ]; then
  echo "FLYT_SKIP_POSTGRES=1: skipped"
  exit 0
fi
pg_url=$("$src/tests/support/postgres.sh" start "$tmp/pg" $$)
rc=$?
if [ $rc -ne 0 ] || [ -z "$pg_url" ]; then
  echo "FAIL: could not start PostgreSQL (scripts/install-deps.sh installs it)"
  exit 1
fi
pg_started=1
echo "PostgreSQL at $pg_url"

admin=admin-token-000000000000
export FLYT_ADMIN_TOKEN=$admin
ports=()
manager_pids=()
# replica <i>: replica i on its own port, the shared database.
replica() {
  local i=$1
  [ -z "${ports[$i]:-}" ] && ports[$i]=$(free_port)
  start_manager "127.0.0.1:${ports[$i]}" "$tmp/cm$i.log" --listen "127.0.0.1:${ports[$i]}" \
    --store "$pg_url" --var-dir "$tmp/var$i"
  local rc=$?
  manager_pids[$i]=$manager_pid
  return $rc
}
# on <i> <api args...>: the API call (lib.sh's api) on replica i, as admin.
on() {
  local url="http://127.0.0.1:${ports[$1]}"
  shift
  api "$admin" "$@"
}
# on_field <i> <path> <python expression on d>: the expression on GET <path> of replica i.
on_field() { field "$(on "$1" GET "$2")" "$3"; }
reachable_on() {
  test "$(on_field "$1" /api/v1/nodes "sum(1 for n in d['nodes'] if n['state']=='reachable')")" = "$2"
}
leases_on() { on_field "$1" /api/v1/allocations "len(d['allocations'])"; }
leases_on_is() { test "$(leases_on "$1")" = "$2"; }

echo "== 1. two replicas on one database, each with its own node"
replica 0
replica 1
check "both replicas report the schema version of one store" grep -q "schema version [0-9]" "$tmp/cm1.log"
for i in 0 1; do
  start_node "node-$i" h100x8-idle "http://127.0.0.1:${ports[$i]}" "$admin"
done
check "replica 0 sees both nodes" wait_for 20 reachable_on 0 2
check "replica 1 sees both nodes" wait_for 20 reachable_on 1 2

echo "== 2. 48 concurrent requests over both replicas for 16 GPUs: 16 grants, no GPU twice"
alloc_pids=()
for n in $(seq 1 48); do
  (on $((n % 2)) POST /api/v1/allocations '{"gpus":1,"ttl_seconds":600}' >"$tmp/alloc.$n") &
  alloc_pids+=($!)
done
wait "${alloc_pids[@]}"
codes=$(for f in "$tmp"/alloc.*; do tail -n1 "$f"; echo; done)
granted=$(grep -c '^201$' <<<"$codes")
refused=$(grep -c '^409$' <<<"$codes")
check "exactly 16 granted ($granted)" test "$granted" = 16
check "the other 32 refused with 409 ($refused)" test "$refused" = 32
dups=$(for f in "$tmp"/alloc.*; do
  if [ "$(tail -n1 "$f")" = 201 ]; then sed '$d' "$f" | jq_py "print(d['gpus'][0]['node']+'/'+d['gpus'][0]['uuid'])"; fi
done | sort | uniq -d | wc -l)
check "no GPU was granted twice" test "$dups" = 0
check "replica 0 lists the 16 leases" leases_on_is 0 16
check "replica 1 lists the same 16" wait_for 5 leases_on_is 1 16
claims=$(psql "$pg_url" -tAc "select count(*), count(distinct gpu) from gpu_claims where exclusive" \
  2>&1)
check "the database holds 16 distinct exclusive claims ($claims)" test "$claims" = "16|16"

echo "== 3. a job submitted to one replica is placed, and seen by the other"
ids=$(on_field 0 /api/v1/allocations "' '.join([l['id'] for l in d['allocations'] if l['node']=='node-0'][:2])")
for id in $ids; do on 1 DELETE "/api/v1/allocations/$id" >/dev/null; done
r=$(on 0 POST /api/v1/jobs '{"task_name":"pg","model":{"id_or_path":"Qwen2.5-7B"},"base_runtime":"vllm","parameters":{"max-model-len":[4096]},"parallel_config":{"tp":[2]}}')
check "the job is accepted ($(code_of "$r"))" test "$(code_of "$r")" = 201
job=$(field "$r" "d['jobs'][0]['id']")
job_running_on() { test "$(on_field "$1" "/api/v1/jobs/$job" "d['status']")" = running; }
check "the job runs on the freed GPUs" wait_for 10 job_running_on 0
check "replica 1 sees it running" wait_for 5 job_running_on 1

echo "== 4. kill -9 of a replica: the other, and its restart, lose nothing"
kill -9 "${manager_pids[0]}"
wait "${manager_pids[0]}" 2>/dev/null
check "replica 1 still lists the 15 leases" leases_on_is 1 15
replica 0
check "the restarted replica lists them too" leases_on_is 0 15
check "and the running job" job_running_on 0
finish
