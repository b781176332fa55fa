#!/usr/bin/env bash
# End to end: a node token cannot aim the cluster manager at another host (issue 13, point 4).
# A fake "evil" HTTP listener on 127.0.0.3 records every request and the Authorization header it
# carries. A node that advertises it as its API gets its calls at its own (source) address
# instead; a node whose own address answers with a redirect (to the evil listener), with non-JSON,
# with JSON that is not GPU history or with too much, gets the user a clear 502 and the evil
# listener nothing. A node cannot register another node's GPUs; an admin removes a node with
# `flytctl nodes remove`. Loopback only; about 20 s.
# Usage: node_trust_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
unset FLYT_NVML_LIBRARY FLYT_SIM_TIME FLYT_SIM_REASON FLYT_TOKEN FLYT_ADMIN_TOKEN FLYT_CLUSTER_MANAGER \
  FLYT_SIM_NODE

admin=admin-token-000000000000
node_token=node-token-0000000000000
viewer=viewer-token-00000000000
node_api_token=node-api-secret-00000000
port=$(free_port)
url="http://127.0.0.1:$port"
cat >"$tmp/cm.toml" <<EOF
[manager]
listen = "127.0.0.1:$port"
store = "sqlite:$tmp/var/flyt.db"
var_dir = "$tmp/var"
[auth]
tokens = [
  { name = "admin", token = "$admin", role = "admin" },
  { name = "nodes", token = "$node_token", role = "node" },
  { name = "grafana", token = "$viewer", role = "viewer" },
]
[nodes]
api_token = "$node_api_token"
EOF
cat >"$tmp/node.toml" <<EOF
[http]
bearer_token = "$node_api_token"
[monitor]
interval_ms = 200
[cluster-manager]
heartbeat_interval_s = 1
EOF

# The listeners: <host> <port> <log> <mode file>. Each request is logged as
# "<method> <path> auth=<Authorization header>"; the answer is what the mode file says.
cat >"$tmp/listener.py" <<'EOF'
import http.server, sys
host, port, log, mode_file, target = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        with open(log, "a") as f:
            f.write("%s %s auth=%s\n" % (self.command, self.path, self.headers.get("Authorization")))
        mode = open(mode_file).read().strip()
        status, headers, body = 200, {"Content-Type": "application/json"}, b"{}"
        if mode == "redirect":
            status, headers["Location"] = 302, target + "/stolen"
            body = b'{"gpu": 0, "step_seconds": 0, "points": []}'
        elif mode == "garbage":
            headers["Content-Type"], body = "text/html", b"<html>secret internal page</html>"
        elif mode == "wrong-json":
            body = b'{"AccessKeyId": "AKIA-internal", "Token": "secret"}'
        elif mode == "huge":
            body = b'{"gpu": 0, "step_seconds": 0, "points": [' + b",".join([b'{"t_ms": 1}'] * 1000000) + b"]}"
        elif mode == "error":
            status, body = 500, b'{"error": "' + b"x" * 5000 + b'"}'
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_DELETE = answer
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((host, port), H).serve_forever()
EOF
evil_port=$(free_port)
echo ok >"$tmp/evil.mode"
python3 "$tmp/listener.py" 127.0.0.3 "$evil_port" "$tmp/evil.log" "$tmp/evil.mode" x &
pids+=($!)
# A "node" of the attacker's own, at its source address 127.0.0.1, which tries to send the manager
# on to the evil listener.
own_port=$(free_port)
echo redirect >"$tmp/own.mode"
python3 "$tmp/listener.py" 127.0.0.1 "$own_port" "$tmp/own.log" "$tmp/own.mode" "http://127.0.0.3:$evil_port" &
pids+=($!)
touch "$tmp/evil.log" "$tmp/own.log"

start_manager "127.0.0.1:$port" "$tmp/cm.log" --config "$tmp/cm.toml"
check "manager serves /healthz" curl -sf "$url/healthz"
start_node node-b h100x8-idle "$url" "$node_token" --config "$tmp/node.toml"
node_seen() { test "$(get_field /api/v1/nodes "len([n for n in d['nodes'] if n['name']=='$1'])")" = 1; }
check "node-b registers" wait_for 20 node_seen node-b
ctl() { "$build/bin/flytctl" "$@" --server "$url"; }

echo "== 1. a real node: history through the manager, with the node-API token"
r=$(api "$viewer" GET /api/v1/nodes/node-b/gpus/0/history)
check "node-b's history: 200 (got $(code_of "$r"))" test "$(code_of "$r")" = 200
check "node-b's history names its node" test "$(field "$r" "d['node']")" = node-b
check "node-b is called where it said" test "$(get_field /api/v1/nodes/node-b "d['api_url_source']")" = advertised

echo "== 2. a node advertising the evil listener is called at its own address"
# The heartbeat of a node with its own GPUs (node-b's, renamed), sent from 127.0.0.1.
get_field /api/v1/nodes/node-b "json.dumps(d['snapshot'])" >"$tmp/snapshot.json"
heartbeat() {  # heartbeat <name> <api_url> <uuid prefix>: prints the answer
  python3 - "$1" "$2" "$3" "$tmp/snapshot.json" >"$tmp/hb.json" <<'EOF'
import json, sys
name, api_url, prefix, snap = sys.argv[1:5]
s = json.load(open(snap))
for g in s["gpus"]:
    g["uuid"] = "%s-%d" % (prefix, g["index"])
print(json.dumps({"name": name, "api_url": api_url, "snapshot": s}))
EOF
  api "$node_token" POST /api/v1/nodes/heartbeat "@$tmp/hb.json"
}
r=$(heartbeat node-evil "http://127.0.0.3:$evil_port" GPU-evil)
check "heartbeat advertising 127.0.0.3 accepted (got $(code_of "$r"))" test "$(code_of "$r")" = 200
r=$(api "$viewer" GET /api/v1/nodes/node-evil)
check "its API is the source address with the advertised port" test "$(field "$r" "d['api_url']")" = "http://127.0.0.1:$evil_port"
check "the node view says why" test "$(field "$r" "d['api_url_source']")" = source_address
check "flytctl shows the reason" contains "$(ctl nodes node-evil --token "$viewer")" "is not the heartbeat's source address"
r=$(api "$viewer" GET /api/v1/nodes/node-evil/gpus/0/history)
check "history: 502 (nothing at 127.0.0.1:$evil_port) (got $(code_of "$r"))" test "$(code_of "$r")" = 502
check "history: code unavailable" test "$(field "$r" "d['code']")" = unavailable

echo "== 3. the node's own address answers with a redirect, garbage, other JSON, too much"
r=$(heartbeat node-evil "http://127.0.0.1:$own_port" GPU-evil)
check "heartbeat advertising its own address accepted" test "$(code_of "$r")" = 200
for mode in redirect garbage wrong-json huge error; do
  echo "$mode" >"$tmp/own.mode"
  r=$(api "$viewer" GET /api/v1/nodes/node-evil/gpus/0/history)
  check "$mode: 502 (got $(code_of "$r"))" test "$(code_of "$r")" = 502
  check "$mode: a clear error" test "$(field "$r" "d['code'] == 'unavailable' and 'node-evil' in d['error'] and len(d['error']) < 600")" = True
  check "$mode: nothing of the node's answer is relayed" test "$(field "$r" "'secret' in json.dumps(d) or 'AKIA' in json.dumps(d)")" = False
done
check "the node's own address was asked (5 times)" test "$(wc -l <"$tmp/own.log")" -eq 5
check "the redirect was not followed: the evil listener got no request" test "$(wc -l <"$tmp/evil.log")" -eq 0
check "the node-API token went only to the node's own address" test "$(grep -c "auth=Bearer $node_api_token" "$tmp/own.log")" -eq 5

echo "== 4. one GPU, one node"
r=$(heartbeat node-thief "http://127.0.0.1:$own_port" GPU-evil)
check "another name with node-evil's GPUs: 409 (got $(code_of "$r"))" test "$(code_of "$r")" = 409
check "code gpu_claimed_by_other_node, both names" test "$(field "$r" "d['code'] == 'gpu_claimed_by_other_node' and 'node-evil' in d['error'] and 'node-thief' in d['error']")" = True
check "node-thief is not registered" test "$(get_field /api/v1/nodes "len([n for n in d['nodes'] if n['name']=='node-thief'])")" = 0
check "counted in /metrics" test "$(curl -s -H "Authorization: Bearer $viewer" "$url/metrics" | awk '/^flyt_cluster_gpu_conflicts_total /{print $2}')" = 1
check "recorded as an event" test "$(get_field "/api/v1/events?latest=50" "len([e for e in d['events'] if e['kind']=='node.gpu_conflict'])")" = 1

echo "== 5. flytctl nodes remove"
out=$(ctl nodes remove node-evil --token "$viewer" 2>&1)
check "a viewer may not remove: exit 5 (got $?)" test "$(ctl nodes remove node-evil --token "$viewer" >/dev/null 2>&1; echo $?)" = 5
check "... and says why" contains "$out" "cannot remove node node-evil"
check "an unknown node: exit 4" test "$(ctl nodes remove no-such-node --token "$admin" >/dev/null 2>&1; echo $?)" = 4
out=$(ctl nodes remove node-evil --token "$admin" 2>&1)
check "admin removes node-evil (exit 0): $out" test $? -eq 0
check "... and says so" contains "$out" "removed node node-evil"
check "node-evil is gone" test "$(get_field /api/v1/nodes "len([n for n in d['nodes'] if n['name']=='node-evil'])")" = 0
r=$(heartbeat node-thief "http://127.0.0.1:$own_port" GPU-evil)
check "its GPUs may now be reported under another name (got $(code_of "$r"))" test "$(code_of "$r")" = 200
r=$(api "$admin" POST /api/v1/allocations '{"gpus": 1, "gpu_model": "H100", "ttl_seconds": 600}')
lease_node=$(field "$r" "d['node']")
out=$(ctl nodes remove "$lease_node" --token "$admin" 2>&1)
check "a node holding a lease: exit 1 (conflict)" test "$(ctl nodes remove "$lease_node" --token "$admin" >/dev/null 2>&1; echo $?)" = 1
check "... naming the lease and --force" contains "$out" "live lease"
out=$(ctl nodes remove "$lease_node" --force --token "$admin" 2>&1)
check "with --force: exit 0 and the lease released: $out" contains "$out" "released 1 lease(s)"
check "no lease left" test "$(get_field /api/v1/allocations "len(d['allocations'])")" = 0
if [ "$lease_node" = node-b ]; then
  check "node-b's next heartbeat registers it again" wait_for 10 node_seen node-b
fi
check "flytctl --help lists nodes remove" contains "$("$build/bin/flytctl" nodes --help 2>&1)" "remove"

finish
