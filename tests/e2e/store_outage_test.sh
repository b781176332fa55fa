#!/usr/bin/env bash
# End to end: flyt-cluster-manager through a store outage, under traffic (a node manager's
# heartbeats, a loop of allocations and releases, a running job). First on SQLite, whose database
# file and WAL are made immutable (chattr +i: root cannot write them either), then on a real PostgreSQL server that
# the test stops. While the store is out: reads (/api/v1/gpus, /allocations, /jobs, /healthz)
# answer from the last good state with the leases listed; writes get 503 with code
# "store_unavailable"; /healthz and /metrics say the store is down. Past the nodes' unreachable
# grace nothing is released because of the outage; when the store is back, writes work again and
# every lease granted before is still there.
# Usage: store_outage_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
chmod 755 "$tmp"
pg_started=0
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
immutable_files=()
cleanup() {
  [ -f "$tmp/traffic.stop" ] || touch "$tmp/traffic.stop" 2>/dev/null
  for f in "${immutable_files[@]}"; do chattr -i "$f" 2>/dev/null; done
  stop_children
  [ "$pg_started" = 1 ] && "$src/tests/support/postgres.sh" stop "$tmp/pg" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
unset FLYT_NVML_LIBRARY FLYT_SIM_TIME FLYT_SIM_REASON FLYT_TOKEN FLYT_ADMIN_TOKEN FLYT_CLUSTER_MANAGER

admin=admin-token-000000000000
node_token=node-token-0000000000000
alice=alice-token-000000000000
cat >"$tmp/node.toml" <<EOF
[monitor]
interval_ms = 200
[cluster-manager]
heartbeat_interval_s = 1
EOF

url=""
# api <token> <method> <path> [json body]: prints the body, then the HTTP code on the last line.
api() {
  local token=$1 method=$2 path=$3
  shift 3
  local args=(-s -m 30 -X "$method" -w '\n%{http_code}' "$url$path" -H "Authorization: Bearer $token")
  [ $# -gt 0 ] && args+=(-H 'Content-Type: application/json' --data-binary "$1")
  curl "${args[@]}"
}
code_of() { tail -n1 <<<"$1"; }
body_of() { sed '$d' <<<"$1"; }
field() { body_of "$1" | jq_py "print($2)"; }
lease_ids() { api "$admin" GET /api/v1/allocations | sed '$d' | jq_py "print(' '.join(sorted(l['id'] for l in d['allocations'])))"; }
node_reachable() {
  test "$(api "$admin" GET /api/v1/nodes | sed '$d' | jq_py "print(sum(1 for n in d['nodes'] if n['state']=='reachable'))")" = 1
}
job_status_is() {
  test "$(api "$admin" GET "/api/v1/jobs/$1" | sed '$d' | jq_py "print(d['status'])")" = "$2"
}
write_refused() {
  test "$(code_of "$(api "$alice" POST /api/v1/allocations '{"gpus":1,"ttl_seconds":600}')")" = 503
}
write_works() {
  local r
  r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"ttl_seconds":600}')
  [ "$(code_of "$r")" = 201 ] || return 1
  api "$alice" DELETE "/api/v1/allocations/$(field "$r" "d['id']")" >/dev/null
}

# traffic: allocates one GPU and releases it again, over and over, until traffic.stop exists;
# logs "alloc CODE ID" and "free CODE ID".
traffic() {
  local r id
  while [ ! -f "$tmp/traffic.stop" ]; do
    r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"ttl_seconds":600,"labels":{"by":"traffic"}}')
    id=""
    [ "$(code_of "$r")" = 201 ] && id=$(field "$r" "d['id']")
    echo "alloc $(code_of "$r") $id" >>"$tmp/traffic.log"
    if [ -n "$id" ]; then
      r=$(api "$alice" DELETE "/api/v1/allocations/$id")
      echo "free $(code_of "$r") $id" >>"$tmp/traffic.log"
    fi
    sleep 0.1
  done
}

# scenario <name> <store URL> <start outage command> <end outage command>
scenario() {
  local name=$1 store=$2 begin=$3 end=$4
  local port
  port=$(free_port)
  url="http://127.0.0.1:$port"
  rm -f "$tmp/traffic.stop" "$tmp/traffic.log"
  cat >"$tmp/cm-$name.toml" <<EOF
[manager]
listen = "127.0.0.1:$port"
store = "$store"
var_dir = "$tmp/var-$name"
[ledger]
unreachable_after_seconds = 3
lease_grace_seconds = 3
[auth]
tokens = [
  { name = "admin", token = "$admin", role = "admin" },
  { name = "nodes", token = "$node_token", role = "node" },
  { name = "alice", token = "$alice", role = "client" },
]
EOF
  "$build/bin/flyt-cluster-manager" --config "$tmp/cm-$name.toml" >>"$tmp/cm-$name.log" 2>&1 &
  local manager=$!
  pids+=($manager)
  check "$name: the manager starts" wait_for 20 curl -sf "$url/healthz"
  FLYT_NVML_LIBRARY="$build/lib/libflyt-sim-nvml.so" \
    FLYT_SIM_SCENARIO="$src/sim/scenarios/h100x8-idle.toml" FLYT_TOKEN="$node_token" \
    "$build/bin/flyt-node-manager" --config "$tmp/node.toml" --listen "127.0.0.1:$(free_port)" \
    --name "node-$name" --cluster-manager "$url" >>"$tmp/node-$name.log" 2>&1 &
  local node=$!
  pids+=($node)
  check "$name: the node registers" wait_for 20 node_reachable

  local r held job
  r=$(api "$alice" POST /api/v1/allocations '{"gpus":2,"ttl_seconds":600}')
  check "$name: a lease is granted before the outage" test "$(code_of "$r")" = 201
  held=$(field "$r" "d['id']")
  r=$(api "$alice" POST /api/v1/jobs '{"task_name":"outage","model":{"id_or_path":"meta-llama/Llama-3.1-8B-Instruct"},"base_runtime":"vllm","parameters":{"max-model-len":[8192]},"parallel_config":{"tp":[1]}}')
  job=$(field "$r" "d['jobs'][0]['id']")
  check "$name: a job runs before the outage" wait_for 10 job_status_is "$job" running
  traffic &
  local traffic_pid=$!
  pids+=($traffic_pid)
  sleep 1

  echo "== $name: the store goes away"
  eval "$begin"
  check "$name: writes are refused" wait_for 30 write_refused
  local during
  during=$(lease_ids)
  r=$(api "$alice" POST /api/v1/allocations '{"gpus":1}')
  check "$name: a write gets 503" test "$(code_of "$r")" = 503
  check "$name: … with code store_unavailable" test "$(field "$r" "d.get('code')")" = store_unavailable
  check "$name: … and a message that names the store" contains "$(field "$r" "d['error']")" "store"
  r=$(api "$admin" POST "/api/v1/allocations/$held/renew" '{"ttl_seconds":900}')
  check "$name: a renewal gets 503 too" test "$(code_of "$r")" = 503
  # Past unreachable_after + lease_grace (3 + 3 s) with no heartbeat accepted.
  sleep 8
  r=$(api "$admin" GET /api/v1/allocations)
  check "$name: GET /allocations answers during the outage" test "$(code_of "$r")" = 200
  check "$name: … and still lists the held lease" contains "$(body_of "$r")" "$held"
  r=$(api "$admin" GET /api/v1/gpus)
  check "$name: GET /gpus answers, its leased GPUs still leased" test "$(field "$r" "sum(1 for g in d['gpus'] if g['allocation_state']=='leased') >= 3")" = True
  r=$(api "$admin" GET /api/v1/jobs)
  check "$name: GET /jobs still lists the running job" test "$(field "$r" "[j['status'] for j in d['jobs'] if j['id']=='$job']")" = "['running']"
  r=$(api "" GET /healthz)
  check "$name: /healthz answers" test "$(code_of "$r")" = 200
  check "$name: … and says the store is unavailable" test "$(field "$r" "d['store']['state']")" = unavailable
  m=$(curl -s -H "Authorization: Bearer $admin" "$url/metrics")
  check "$name: /metrics says the store is down" contains "$m" "flyt_cluster_store_up 0"
  check "$name: the lease list did not change during the outage" test "$(lease_ids)" = "$during"

  echo "== $name: the store comes back"
  eval "$end"
  check "$name: writes work again" wait_for 60 write_works
  touch "$tmp/traffic.stop"
  wait "$traffic_pid" 2>/dev/null
  check "$name: the held lease is still there" contains "$(lease_ids)" "$held"
  check "$name: the job still runs" job_status_is "$job" running
  # Every lease the traffic was granted and did not release is listed.
  local granted released live missing
  granted=$(awk '$1=="alloc" && $2==201 {print $3}' "$tmp/traffic.log" | sort)
  released=$(awk '$1=="free" && $2==200 {print $3}' "$tmp/traffic.log" | sort)
  live=$(lease_ids | tr ' ' '\n' | sort)
  missing=$(comm -23 <(comm -23 <(echo "$granted") <(echo "$released")) <(echo "$live") | grep -c .)
  check "$name: no lease granted by the traffic was lost ($missing missing)" test "$missing" = 0
  check "$name: the traffic saw refusals during the outage" grep -q "^alloc 503" "$tmp/traffic.log"
  r=$(api "$admin" GET "/api/v1/events?latest=1&limit=1000")
  check "$name: no lease expired" test "$(field "$r" "sum(1 for e in d['events'] if e['kind']=='lease.expired')")" = 0
  check "$name: the node is reachable" wait_for 20 node_reachable
  r=$(api "" GET /healthz)
  check "$name: /healthz says the store is ok" test "$(field "$r" "d['store']['state']")" = ok
  m=$(curl -s -H "Authorization: Bearer $admin" "$url/metrics")
  check "$name: /metrics says the store is up" contains "$m" "flyt_cluster_store_up 1"
  check "$name: … and counts the outage" contains "$m" "flyt_cluster_store_outages_total 1"
  check "$name: the manager logged the outage once" test "$(grep -c "store unavailable" "$tmp/cm-$name.log")" = 1
  kill "$node" "$manager" 2>/dev/null
  wait "$node" "$manager" 2>/dev/null
}

echo "== SQLite: the files become immutable"
probe="$tmp/probe"
touch "$probe"
if chattr +i "$probe" 2>/dev/null; then
  chattr -i "$probe"
  db="$tmp/sqlite/flyt.db"
  # Not the -shm file: SQLite maps it into memory, and writing to the mapping of an immutable file
  # is SIGBUS, not an error. The database file and its WAL are where the data goes.
  immutable_files=("$db" "$db-wal")
  scenario sqlite "sqlite:$db" 'chattr +i "${immutable_files[@]}"' 'chattr -i "${immutable_files[@]}"'
else
  echo "SKIPPED (SQLite part): chattr +i does not work here (needs root and ext4-like)"
fi

echo "== PostgreSQL: the server stops"
if [ "${FLYT_SKIP_POSTGRES:-0}" = 1 ]; then
  echo "FLYT_SKIP_POSTGRES=1: skipped"
else
  pg_url=$("$src/tests/support/postgres.sh" start "$tmp/pg" $$)
  if [ -z "$pg_url" ]; then
    echo "FAIL: could not start PostgreSQL (scripts/install-deps.sh installs it)"
    exit 1
  fi
  pg_started=1
  pg_ctl=$(printf '%s\n' /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -n 1)
  [ -n "${FLYT_PG_BINDIR:-}" ] && pg_ctl=$FLYT_PG_BINDIR/pg_ctl
  as_pg=()
  [ "$(id -u)" -eq 0 ] && as_pg=(runuser -u postgres --)
  pg_restart() {
    "${as_pg[@]}" "$pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/postgres.log" -w -t 30 start </dev/null >/dev/null
  }
  scenario postgres "$pg_url" '"$src/tests/support/postgres.sh" stop "$tmp/pg" >/dev/null' 'pg_restart'
fi
finish
