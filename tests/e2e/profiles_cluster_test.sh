#!/usr/bin/env bash
# End to end: GPU usage profiles from a node manager to everyone who reads them — the cluster
# manager (its GPU list, gpu.state_changed events, placement with avoid_states / prefer_idle),
# flytctl (gpus STATE column, profile), and Kubernetes (node annotations written to a fake HTTPS
# API server that checks what the Kubernetes API requires: fake_kube_api.py).
# One simulated node plays sim/scenarios/profiles.toml: GPU 0 trains with a 12 s iteration, GPU 1
# serves inference, GPU 2's memory is held by an idle notebook (a real process named jupyter-lab),
# GPU 3 trains, then evaluates after 60 s, GPU 4 is idle.
# Usage: profiles_cluster_test.sh <build dir> <source dir>
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d -t flyt-profiles-e2e.XXXXXX)
chmod 755 "$tmp"
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; [ -n "${FLYT_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
unset FLYT_CLUSTER_MANAGER FLYT_TOKEN
ctl="$build/bin/flytctl"

check "the scenario names the notebook's pid" profiles_scenario "$tmp/scenario"

# ---- a fake Kubernetes API server: its CA, its certificate for 127.0.0.1, a token --------------
(
  cd "$tmp" || exit 1
  printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout ca.key -out ca.crt -subj "/CN=flyt e2e kubernetes CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key \
      -out server.csr -subj /CN=127.0.0.1 &&
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile server.ext -out server.crt
) >"$tmp/openssl.log" 2>&1
check "a CA and a server certificate" test -s "$tmp/server.crt" || cat "$tmp/openssl.log"
printf 'service-account-token-1' >"$tmp/token"
kube_port=$(free_port)
python3 "$src/tests/e2e/fake_kube_api.py" --port "$kube_port" --cert "$tmp/server.crt" \
  --key "$tmp/server.key" --token-file "$tmp/token" --node gpu-node-7 --log "$tmp/kube.jsonl" \
  >"$tmp/kube.out" 2>&1 &
pids+=($!)
check "the fake Kubernetes API serves" wait_for 10 curl -sf --cacert "$tmp/ca.crt" \
  -H "Authorization: Bearer service-account-token-1" "https://127.0.0.1:$kube_port/api/v1/nodes/gpu-node-7"

# ---- the cluster manager and the node ------------------------------------------------------------
cluster_config </dev/null
check "the cluster manager starts" start_manager "127.0.0.1:$port" "$tmp/cm.log" --config "$tmp/cm.toml"
cat >"$tmp/node.toml" <<EOF
[cluster-manager]
heartbeat_interval_s = 1
[profile]
state_hold = "5s"
allocated_idle_after = "20s"
analysis_interval = "1s"
[kubernetes]
enabled = true
node_name = "gpu-node-7"
api_server = "https://127.0.0.1:$kube_port"
token_file = "$tmp/token"
ca_file = "$tmp/ca.crt"
min_interval = "1s"
[trace]
enabled = false
EOF
node_port=$(free_port)
node="http://127.0.0.1:$node_port"
FLYT_NVML_LIBRARY="$build/lib/libflyt-sim-nvml.so" FLYT_SIM_SCENARIO="$tmp/scenario/profiles.toml" \
  FLYT_TOKEN="$node_token" "$build/bin/flyt-node-manager" --listen "127.0.0.1:$node_port" \
  --name gpu-node-7 --cluster-manager "$url" --config "$tmp/node.toml" >>"$tmp/node.log" 2>&1 &
pids+=($!)
check "the node manager serves" wait_for 20 curl -sf "$node/healthz" || cat "$tmp/node.log"

# state_of <index>: GPU <index>'s profile state in the cluster manager's GPU list.
state_of() { get_field /api/v1/gpus "[g for g in d['gpus'] if g['index'] == $1][0]['profile']['state']"; }
state_is() { test "$(state_of "$1" 2>/dev/null)" = "$2"; }
check "the manager lists GPU 4 idle" wait_for 60 state_is 4 idle
check "GPU 2 allocated-idle" wait_for 40 state_is 2 allocated-idle
check "GPU 0 cyclic" wait_for 60 state_is 0 cyclic
check "GPU 0's period is 12 s (within 10 %)" test "$(get_field /api/v1/gpus \
  "int(abs(d['gpus'][0]['profile']['cycle']['period_s'] - 12) <= 1.2)")" = 1
one=$(api "$admin" GET /api/v1/nodes/gpu-node-7/gpus/2)
check "GPU 2's page names the notebook and its owner" test "$(field "$one" \
  "', '.join('%s %s %s' % (p['name'], p['user'], p['memory_bytes']) for p in d['profile']['allocated_idle']['processes'])")" \
  = "jupyter-lab $notebook_owner $((30720 << 20))"

# ---- placement on profiles ---------------------------------------------------------------------
busy='["cyclic", "steady", "bursty", "allocated-idle", "unknown"]'
grant=$(api "$admin" POST /api/v1/allocations "{\"gpus\": 1, \"avoid_states\": $busy, \"ttl_seconds\": 60}")
check "avoid_states: the one idle GPU is granted" test "$(code_of "$grant")" = 201
check "it is GPU 4" test "$(field "$grant" "d['gpus'][0]['index']")" = 4
refused=$(api "$admin" POST /api/v1/allocations "{\"gpus\": 1, \"avoid_states\": $busy, \"ttl_seconds\": 60}")
check "no other GPU that avoids them: 409" test "$(code_of "$refused")" = 409
check "the refusal counts the avoided GPUs" contains "$(body_of "$refused")" "avoided"
bad=$(api "$admin" POST /api/v1/allocations '{"gpus": 1, "avoid_states": ["sleepy"]}')
check "an unknown state name: 400" test "$(code_of "$bad")" = 400
check "naming the field" contains "$(body_of "$bad")" "avoid_states[0]"
api "$admin" DELETE "/api/v1/allocations/$(field "$grant" "d['id']")" >/dev/null
idle=$(api "$admin" POST /api/v1/allocations '{"gpus": 1, "prefer_idle": true, "ttl_seconds": 60}')
check "prefer_idle: the idle GPU first" test "$(field "$idle" "d['gpus'][0]['index']")" = 4

# ---- flytctl ---------------------------------------------------------------------------------------
out=$(FLYT_TOKEN=$admin "$ctl" gpus --server "$url" 2>&1)
check "flytctl gpus --server: a STATE column" contains "$out" "STATE"
check "with GPU 0 cyclic and its period" grep -qE "cyclic 1[123]\.[0-9]s" <<<"$out" || echo "$out"
out=$("$ctl" profile --node "$node" 0 2>&1)
check "flytctl profile --node URL 0: cyclic" contains "$out" "cyclic"
check "with the period" grep -qE "1[123]\.[0-9]+ ?s" <<<"$out" || echo "$out"
out=$(FLYT_TOKEN=$admin "$ctl" profile --server "$url" --node-name gpu-node-7 2 2>&1)
check "flytctl profile --server: GPU 2 allocated-idle naming jupyter-lab" \
  contains "$out" "jupyter-lab" || echo "$out"
"$ctl" profile --node "$node" 9 >/dev/null 2>&1
check "flytctl profile of a GPU the node does not have exits 4" test $? = 4

# ---- Kubernetes annotations --------------------------------------------------------------------------
kube_node() {
  curl -sf --cacert "$tmp/ca.crt" -H "Authorization: Bearer $(cat "$tmp/token")" \
    "https://127.0.0.1:$kube_port/api/v1/nodes/gpu-node-7"
}
# annotation <index> <python subscript>: a field of GPU <index>'s annotation on the Node.
annotation() {
  kube_node | jq_py "a=d['metadata']['annotations'].get('flyt.dev/gpu-$1'); print(json.loads(a)$2 if a else '')"
}
annotation_is() { test "$(annotation "$1" "$2" 2>/dev/null)" = "$3"; }
check "the node's annotation of GPU 0 says cyclic" wait_for 30 annotation_is 0 "['state']" cyclic
check "with its period" test "$(annotation 0 "['period_s']" | cut -d. -f1)" -ge 10
check "and schema version 1" test "$(annotation 0 "['v']")" = 1
check "GPU 2's annotation names the notebook" wait_for 10 annotation_is 2 "['processes'][0]['name']" jupyter-lab
check "other annotations are left alone" test \
  "$(kube_node | jq_py "print(d['metadata']['annotations'].get('node.alpha.kubernetes.io/ttl'))")" = 0
# requests <python condition on rows (the fake API's log, one dict per request)>
requests() {
  python3 -c "
import json, sys
rows = [json.loads(l) for l in open('$tmp/kube.jsonl')]
patches = [r for r in rows if r['method'] == 'PATCH']
sys.exit(0 if ($1) else 1)"
}
check "the node was read before the first patch" \
  requests "rows and rows[0]['method'] == 'GET' and rows[0]['status'] == 200"
check "every patch is a JSON merge patch of metadata.annotations, accepted" \
  requests "patches and all(r['content_type'] == 'application/merge-patch+json' and r['status'] == 200 and list(json.loads(r['body'])) == ['metadata'] and list(json.loads(r['body'])['metadata']) == ['annotations'] for r in patches)"
status=$(curl -s "$node/api/v1/kubernetes")
check "GET /api/v1/kubernetes shows NVIDIA's GPU labels" contains "$status" "NVIDIA-H100-80GB-HBM3"
# The token rotates: the following requests carry the new one (the fake refuses the old one).
printf 'service-account-token-2' >"$tmp/token"
before=$(grep -c . "$tmp/kube.jsonl")

# ---- events: GPU 3 goes from training to evaluation at 60 s ------------------------------------------
event_of_gpu3() {
  get_field "/api/v1/events?limit=500" \
    "sys.exit(0 if any(e.get('kind', e.get('type')) == 'gpu.state_changed' and (e.get('data') or e).get('gpu') == 3 and (e.get('data') or e).get('from') == 'cyclic' for e in d['events']) else 1)"
}
check "a gpu.state_changed event for GPU 3 (cyclic -> ...)" wait_for 90 event_of_gpu3 ||
  get_field "/api/v1/events?limit=500" "print([e for e in d['events'] if 'state' in json.dumps(e)][-5:])"
metrics=$(curl -s -H "Authorization: Bearer $admin" "$url/metrics")
check "the manager's metrics count GPUs by state" grep -qE '^flyt_cluster_gpus_by_state\{state="idle"\} [1-9]' <<<"$metrics"

# GPU 3's change reached its annotation, written with the rotated token.
annotation_left_cyclic() { local s; s=$(annotation 3 "['state']" 2>/dev/null); [ -n "$s" ] && [ "$s" != cyclic ]; }
check "GPU 3's annotation follows its change (no longer cyclic)" wait_for 30 annotation_left_cyclic
check "patches after the token rotated were accepted" \
  requests "any(r['status'] == 200 and r['method'] == 'PATCH' for r in rows[$before:])"
check "and none was refused" requests "not any(r['status'] == 401 for r in rows)"
check "the node's /metrics counts the patches" \
  grep -qE '^flyt_kubernetes_patches_total [1-9]' <<<"$(curl -s "$node/metrics")"

if [ "$failures" -gt 0 ]; then
  echo "--- node log (tail):"
  tail -30 "$tmp/node.log"
  echo "--- cluster manager log (tail):"
  tail -20 "$tmp/cm.log"
fi
finish
