#!/usr/bin/env bash
# End to end: flyt-node-manager on the shipped simulated scenarios, scraped by curl and by a real
# Prometheus server (Debian's prometheus) on loopback; the JSON API, monitoring sessions over a
# scripted load, hostile requests, and a GPU lost mid-run. Scenario time is moved through a clock
# file, so values are exact; waits poll with a bound (no timing is asserted).
# Usage: node_manager_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
daemon="$build/bin/flyt-node-manager"
sim="$build/lib/libflyt-sim-nvml.so"
tmp=$(mktemp -d)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
pport=""  # the Prometheus port, set in section 7
query() { curl -s --get "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1"; }
count_of() { query "$1" | jq_py "print(len(d['data']['result']))"; }

unset FLYT_NVML_LIBRARY FLYT_SIM_TIME FLYT_SIM_REASON
# The shipped config, with the CUDA tracer off: run as root it would trace every CUDA program
# on the machine, those of tests running side by side too, and list them among the processes.
shipped_config=$tmp/node-manager.toml
sed 's/^enabled = "auto"$/enabled = false/' "$src/configs/node-manager.toml" >"$shipped_config"
grep -q '^enabled = false$' "$shipped_config" || { echo "FAIL: cannot turn the tracer off"; exit 1; }

# start_daemon <scenario> <port> <name> [extra args]: starts it with its own clock file.
start_daemon() {
  local scenario=$1 port=$2 name=$3
  shift 3
  echo 0 >"$tmp/$name.clock"
  FLYT_NVML_LIBRARY="$sim" FLYT_SIM_SCENARIO="$src/sim/scenarios/$scenario.toml" \
    FLYT_SIM_CLOCK_FILE="$tmp/$name.clock" \
    "$daemon" --listen "127.0.0.1:$port" --name "$name" "$@" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  wait_for 20 curl -sf "http://127.0.0.1:$port/healthz"
}
set_time() { echo "$2" >"$tmp/$1.clock"; }
samples() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^flyt_monitor_samples_total/ {print $2}'; }
# Predicates for wait_for (evaluated at every poll, unlike a $(...) argument).
samples_at_least() { test "$(samples "$1")" -ge "$2"; }
count_is() { test "$(count_of "$1")" = "$2"; }
value_is() { test "$(query "$1" | jq_py "r=d['data']['result']; print(r[0]['value'][1] if r else '')")" = "$2"; }
# wait_samples <port>: until two more samples have been taken after now (so new time is seen).
wait_samples() {
  local port=$1 start
  start=$(samples "$port")
  wait_for 20 samples_at_least "$port" $((start + 2))
}

# 1. Every shipped scenario: the daemon starts, serves, and /metrics carries its GPUs.
declare -A expect_gpus=([h100x8-training]=8 [mixed-inference]=3 [faulty-node]=5)
declare -A scenario_port=()
for scenario in h100x8-training mixed-inference faulty-node; do
  port=$(free_port)
  scenario_port[$scenario]=$port
  check "$scenario: daemon starts" start_daemon "$scenario" "$port" "node-$scenario" --config "$shipped_config"
  n=$(curl -s "http://127.0.0.1:$port/metrics" | grep -c '^DCGM_FI_DEV_GPU_UTIL{')
  check "$scenario: ${expect_gpus[$scenario]} GPUs in /metrics (saw $n)" test "$n" -eq "${expect_gpus[$scenario]}"
  out=$(curl -s "http://127.0.0.1:$port/api/v1/node")
  check "$scenario: /api/v1/node" jq_py "assert d['gpu_count'] == ${expect_gpus[$scenario]} and d['name'] == 'node-$scenario' and d['simulated_scenario'].endswith('$scenario.toml')" <<<"$out"
done

# 2. The H100 node at a set time: values and labels exactly as the scenario says.
port=$(free_port)
start_daemon h100x8-training "$port" h100 --config "$shipped_config"
set_time h100 10
wait_samples "$port"
metrics=$(curl -s "http://127.0.0.1:$port/metrics")
labels='gpu="3",UUID="'
check "h100: utilisation 97" grep -qE '^DCGM_FI_DEV_GPU_UTIL\{gpu="3",UUID="GPU-[0-9a-f-]+",pci_bus_id="00000000:5D:00.0",device="nvidia3",modelName="NVIDIA H100 80GB HBM3",Hostname="h100",DCGM_FI_DRIVER_VERSION="580.65.06"\} 97$' <<<"$metrics"
check "h100: FB used 73220 MiB" grep -qE '^DCGM_FI_DEV_FB_USED\{gpu="3",.*\} 73220$' <<<"$metrics"
check "h100: power 661.76 W" grep -qE '^DCGM_FI_DEV_POWER_USAGE\{gpu="3",.*\} 661.76$' <<<"$metrics"
check "h100: temperature 67" grep -qE '^DCGM_FI_DEV_GPU_TEMP\{gpu="3",.*\} 67$' <<<"$metrics"
check "h100: process memory" grep -qE '^flyt_gpu_process_memory_used_bytes\{gpu="3",UUID="[^"]+",pid="41003",.*\} 76772540416$' <<<"$metrics"
check "h100: simulated flag" grep -qE '^flyt_node_simulated 1$' <<<"$metrics"
# Readings the H100s have are there; none that this scenario does not give (no fan, no MIG).
check "h100: memory temperature present" grep -qE '^DCGM_FI_DEV_MEMORY_TEMP\{gpu="3",.*\} 73$' <<<"$metrics"
check "h100: an absent reading is no series, not 0" test "$(grep -c '^DCGM_FI_DEV_GPU_UTIL{.*} 0$' <<<"$metrics")" -eq 0
gpu=$(curl -s "http://127.0.0.1:$port/api/v1/gpus/3")
check "h100: /api/v1/gpus/3" jq_py "assert d['gpu_util_percent'] == 97 and d['memory_used_bytes'] == 73220*1048576 and d['fan_speed_percent'] is None and d['processes'][0]['pid'] == 41003" <<<"$gpu"
procs=$(curl -s "http://127.0.0.1:$port/api/v1/processes")
check "h100: /api/v1/processes" jq_py "assert len(d['processes']) == 8 and d['processes'][7]['gpu'] == 7" <<<"$procs"

# flytctl against the node: the same table and JSON as locally.
flytctl="$build/bin/flytctl"
out=$("$flytctl" gpus --node "127.0.0.1:$port")
check "flytctl: gpus --node table" grep -qE '^  3  NVIDIA H100 80GB HBM3 +67°C +97% +73220 / 81559 MiB +662 / 700 W' <<<"$out"
check "flytctl: gpus --node banner" contains "$out" "SIMULATED GPUs"
out=$("$flytctl" gpus --node "http://127.0.0.1:$port" --json)
check "flytctl: gpus --node --json" jq_py "assert len(d['gpus']) == 8 and d['gpus'][3]['gpu_util_percent'] == 97 and d['node'] == 'h100'" <<<"$out"
out=$("$flytctl" processes --node "127.0.0.1:$port")
check "flytctl: processes --node" test "$(grep -cE '^ +[0-7] +4100[0-7] ' <<<"$out")" -eq 8
out=$("$flytctl" gpus --node 127.0.0.1:1 2>&1)
rc=$?
check "flytctl: unreachable node exits non-zero" test $rc -ne 0
check "flytctl: unreachable node says so" contains "$out" "cannot reach the node manager at http://127.0.0.1:1"
msid=$("$flytctl" monitor start --node "127.0.0.1:$port" --gpus 0,5)
check "flytctl: monitor start prints an id" grep -qE '^mon-[0-9]+$' <<<"$msid"
wait_samples "$port"
out=$("$flytctl" monitor show --node "127.0.0.1:$port" "$msid")
check "flytctl: monitor show" grep -qE '^  5  NVIDIA H100 80GB HBM3 +97.0 \(97-97\)' <<<"$out"
out=$("$flytctl" monitor stop --node "127.0.0.1:$port" "$msid" --json)
check "flytctl: monitor stop --json" jq_py "assert set(d['gpu_stats']) == {'0', '5'} and d['gpu_stats']['5']['utilization']['max'] == 97" <<<"$out"
out=$("$flytctl" monitor stop --node "127.0.0.1:$port" "$msid" 2>&1)
check "flytctl: stopping twice is an error" contains "$out" "HTTP 404: no monitoring session $msid"

# 3. A monitoring session over a scripted load: 97% (t=10), then 12% (t=80).
sid=$(curl -s -X POST -d '{"gpus": [0, 1]}' "http://127.0.0.1:$port/api/v1/monitoring/sessions" | jq_py "print(d['id'])")
check "session: created" test -n "$sid"
wait_samples "$port"
set_time h100 80
wait_samples "$port"
running=$(curl -s "http://127.0.0.1:$port/api/v1/monitoring/sessions/$sid")
check "session: running stats" jq_py "assert d['sample_count'] >= 4 and set(d['gpu_stats']) == {'0', '1'}" <<<"$running"
final=$(curl -s -X DELETE "http://127.0.0.1:$port/api/v1/monitoring/sessions/$sid")
check "session: final stats follow the load" jq_py "
u = d['gpu_stats']['0']['utilization']
assert u['min'] == 12 and u['max'] == 97 and 12 < u['mean'] < 97, u
p = d['gpu_stats']['0']['power_draw_w']
assert p['min'] == 144.96 and p['max'] == 661.76, p
assert d['gpu_stats']['1']['memory_used_mb']['max'] == 73220
assert d['monitoring_duration_seconds'] > 0
" <<<"$final"
gone=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/v1/monitoring/sessions/$sid")
check "session: gone after DELETE (404)" test "$gone" = 404

# 4. Hostile and malformed requests: the right status, JSON errors, and sampling goes on.
is_json_error() { jq_py "assert isinstance(d['error'], str) and d['error']" <"$tmp/http_body"; }
before=$(samples "$port")
check "hostile: unknown route 404" test "$(http_code "http://127.0.0.1:$port/api/v2/gpus")" = 404
check "hostile: 404 is JSON" is_json_error
check "hostile: wrong method 405" test "$(http_code -X DELETE "http://127.0.0.1:$port/api/v1/gpus")" = 405
check "hostile: 405 is JSON" is_json_error
check "hostile: unknown GPU 404" test "$(http_code "http://127.0.0.1:$port/api/v1/gpus/42")" = 404
check "hostile: bad index 400" test "$(http_code "http://127.0.0.1:$port/api/v1/gpus/-1")" = 400
check "hostile: malformed JSON 400" test "$(http_code -X POST -d '{"gpus": [0,' "http://127.0.0.1:$port/api/v1/monitoring/sessions")" = 400
check "hostile: wrong types 400" test "$(http_code -X POST -d '{"gpus": "all"}' "http://127.0.0.1:$port/api/v1/monitoring/sessions")" = 400
check "hostile: unknown field 400" test "$(http_code -X POST -d '{"gpu": [0]}' "http://127.0.0.1:$port/api/v1/monitoring/sessions")" = 400
check "hostile: unknown GPU in body 400" test "$(http_code -X POST -d '{"gpus": [99]}' "http://127.0.0.1:$port/api/v1/monitoring/sessions")" = 400
head -c 200000 /dev/zero >"$tmp/big"
check "hostile: oversized body 413" test "$(http_code -X POST --data-binary @"$tmp/big" "http://127.0.0.1:$port/api/v1/monitoring/sessions")" = 413
check "hostile: 413 is JSON" is_json_error
check "hostile: bad history step 400" test "$(http_code "http://127.0.0.1:$port/api/v1/gpus/0/history?step=abc")" = 400
check "hostile: absurd since 400" test "$(http_code "http://127.0.0.1:$port/api/v1/gpus/0/history?since=1e300")" = 400
check "hostile: number beyond double 400" test "$(http_code -X POST -d '{"interval_seconds": 1e400}' "http://127.0.0.1:$port/api/v1/monitoring/sessions")" = 400
check "hostile: huge index 400" test "$(http_code -X POST -d '{"gpus": [1e30]}' "http://127.0.0.1:$port/api/v1/monitoring/sessions")" = 400
python3 -c 'print("{\"gpus\": [" + ",".join(["0"] * 20000) + "]}")' >"$tmp/many.json"
check "hostile: 20000-entry gpus array 400" test "$(http_code -X POST -H "Content-Type: application/json" --data-binary @"$tmp/many.json" "http://127.0.0.1:$port/api/v1/monitoring/sessions")" = 400
check "hostile: duplicate GPUs 400" test "$(http_code -X POST -d '{"gpus": [1, 1]}' "http://127.0.0.1:$port/api/v1/monitoring/sessions")" = 400
# A request hidden in the body of a refused one must not be served on the same connection.
smuggled=$(python3 - "$port" <<'PY'
import socket, sys
inner = b"POST /api/v1/monitoring/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
outer = b"POST /api/v1/gpus HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(inner)).encode() + b"\r\n\r\n" + inner
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(outer)
s.settimeout(2)
data = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except socket.timeout:
    pass
print(data.count(b"HTTP/1.1 "), data.split(b"\r\n")[0].decode())
PY
)
check "hostile: smuggled request not served ($smuggled)" test "$smuggled" = "1 HTTP/1.1 405 Method Not Allowed"
check "hostile: no session was created by it" jq_py "assert d['sessions'] == [], d" <<<"$(curl -s "http://127.0.0.1:$port/api/v1/monitoring/sessions")"
printf 'GARBAGE\r\n\r\n' | timeout 5 python3 -c "
import socket,sys
s=socket.create_connection(('127.0.0.1',$port)); s.sendall(sys.stdin.buffer.read()); s.settimeout(3)
try: s.recv(4096)
except Exception: pass" 2>/dev/null
check "hostile: sampling continued" wait_for 20 samples_at_least "$port" $((before + 1))
check "hostile: still serving" test "$(http_code "http://127.0.0.1:$port/healthz")" = 200

# 5. Bearer token: required everywhere but /healthz.
tport=$(free_port)
printf '[http]\nbearer_token = "t0ken"\n' >"$tmp/token.toml"
start_daemon mixed-inference "$tport" tok --config "$tmp/token.toml"
check "auth: no token 401" test "$(http_code "http://127.0.0.1:$tport/metrics")" = 401
check "auth: wrong token 401" test "$(http_code -H 'Authorization: Bearer nope' "http://127.0.0.1:$tport/api/v1/gpus")" = 401
check "auth: right token 200" test "$(http_code -H 'Authorization: Bearer t0ken' "http://127.0.0.1:$tport/api/v1/gpus")" = 200
check "auth: healthz open" test "$(http_code "http://127.0.0.1:$tport/healthz")" = 200

# 6. Broken configs stop start-up with a message naming the key.
printf '[monitor]\ninterval_ms = 5\n' >"$tmp/bad.toml"
out=$("$daemon" --config "$tmp/bad.toml" 2>&1)
check "config: non-zero exit" test $? -ne 0
check "config: names key and line" contains "$out" "bad.toml:2: monitor.interval_ms: value 5 is out of range"
out=$(FLYT_NVML_LIBRARY="$sim" FLYT_SIM_SCENARIO="$src/sim/scenarios/mixed-inference.toml" timeout 20 "$daemon" --listen 127.0.0.1:$port 2>&1)
check "config: port in use is an error" contains "$out" "cannot listen on 127.0.0.1:$port"

# 7. A real Prometheus scrapes the faulty node; GPU 1 is lost mid-run.
fport=$(free_port)
start_daemon faulty-node "$fport" faulty --config "$shipped_config"
pport=$(free_port)
cat >"$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: flyt
    static_configs:
      - targets: ["127.0.0.1:$fport"]
  - job_name: scenarios
    static_configs:
      - targets: ["127.0.0.1:${scenario_port[h100x8-training]}", "127.0.0.1:${scenario_port[mixed-inference]}", "127.0.0.1:${scenario_port[faulty-node]}"]
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$pport" >"$tmp/prometheus.log" 2>&1 &
pids+=($!)
check "prometheus: ready" wait_for 60 curl -sf "http://127.0.0.1:$pport/-/ready"
check "prometheus: the faulty node's 5 GPUs arrived" wait_for 60 count_is 'DCGM_FI_DEV_GPU_UTIL{job="flyt"}' 5
# Every shipped scenario arrived in Prometheus with its GPU count and values at t = 0.
for scenario in h100x8-training mixed-inference faulty-node; do
  inst="127.0.0.1:${scenario_port[$scenario]}"
  check "prometheus: $scenario has ${expect_gpus[$scenario]} GPUs" wait_for 60 count_is "DCGM_FI_DEV_GPU_UTIL{instance=\"$inst\"}" "${expect_gpus[$scenario]}"
done
check "prometheus: h100 at t=0 (compute phase)" value_is "DCGM_FI_DEV_GPU_UTIL{instance=\"127.0.0.1:${scenario_port[h100x8-training]}\",gpu=\"7\"}" 97
check "prometheus: A100 of mixed-inference at t=0" value_is "DCGM_FI_DEV_GPU_UTIL{instance=\"127.0.0.1:${scenario_port[mixed-inference]}\",modelName=\"NVIDIA A100-SXM4-40GB\"}" 55
check "prometheus: T4 has no memory temperature" count_is "DCGM_FI_DEV_MEMORY_TEMP{instance=\"127.0.0.1:${scenario_port[mixed-inference]}\",modelName=\"Tesla T4\"}" 0
check "prometheus: V100 memory temperature" count_is "DCGM_FI_DEV_MEMORY_TEMP{instance=\"127.0.0.1:${scenario_port[mixed-inference]}\",modelName=\"Tesla V100-SXM2-16GB\"}" 1
check "prometheus: H100 FB used in MiB" value_is "DCGM_FI_DEV_FB_USED{instance=\"127.0.0.1:${scenario_port[h100x8-training]}\",gpu=\"0\"}" 4
res=$(query 'DCGM_FI_DEV_GPU_UTIL{gpu="4",job="flyt"}')
check "prometheus: value and labels" jq_py "
r = d['data']['result'][0]
m = r['metric']
assert r['value'][1] == '40', r
assert m['modelName'] == 'NVIDIA A100-SXM4-80GB' and m['Hostname'] == 'faulty' and m['device'] == 'nvidia4'
assert m['pci_bus_id'] == '00000000:B7:00.0' and m['DCGM_FI_DRIVER_VERSION'] == '550.127.05' and m['UUID'].startswith('GPU-')
" <<<"$res"
check "prometheus: unsupported power absent for GPU 4" count_is 'DCGM_FI_DEV_POWER_USAGE{gpu="4",job="flyt"}' 0
check "prometheus: power present for the others" count_is 'DCGM_FI_DEV_POWER_USAGE{job="flyt"}' 4
set_time faulty 125
check "prometheus: lost GPU reported" wait_for 60 value_is 'flyt_gpu_lost{gpu="1",job="flyt"}' 1
check "prometheus: lost GPU left the utilisation series" wait_for 60 count_is 'DCGM_FI_DEV_GPU_UTIL{job="flyt"}' 4
check "prometheus: others keep reporting" count_is 'DCGM_FI_DEV_GPU_UTIL{job="flyt",gpu=~"0|2|3|4"}' 4
check "prometheus: XID 79 counted" wait_for 60 count_is 'flyt_gpu_xid_events_total{gpu="1",xid="79",job="flyt"}' 1
check "prometheus: last XID as dcgm-exporter reports it" count_is 'DCGM_FI_DEV_XID_ERRORS{gpu="0",err_code="13",job="flyt"}' 1
lost=$(curl -s "http://127.0.0.1:$fport/api/v1/gpus/1")
check "api: GPU 1 lost" jq_py "assert d['lost'] is True and d['gpu_util_percent'] is None" <<<"$lost"
events=$(curl -s "http://127.0.0.1:$fport/api/v1/events")
check "api: events" jq_py "
types = [(e['gpu'], e['type'], e['xid']) for e in d['events']]
assert (1, 'xid', 79) in types and (1, 'gpu_lost', None) in types, types
assert d['counts']['1']['by_xid']['79'] == 1
" <<<"$events"

# 8. SIGTERM stops the daemon cleanly, even right after start.
eport=$(free_port)
FLYT_NVML_LIBRARY="$sim" FLYT_SIM_SCENARIO="$src/sim/scenarios/h100x8-training.toml" FLYT_SIM_TIME=1 \
  timeout 15 "$daemon" --listen "127.0.0.1:$eport" >"$tmp/early.log" 2>&1 &
early=$!
sleep 0.05  # not a wait for a condition: the signal is meant to come during start-up
kill -TERM "$early" 2>/dev/null
wait "$early"
rc=$?
# 0: the daemon took the signal and stopped cleanly. 143: on a loaded machine the signal came
# before main() could block it (while the program was still being loaded), and its default action
# ended the process. Either way it did not hang (124).
check "sigterm at start-up: exit 0 or 143 (not a hang: 124; got $rc)" test $rc -eq 0 -o $rc -eq 143
kill -TERM "${pids[0]}"
wait "${pids[0]}"
check "sigterm: exit 0" test $? -eq 0
check "sigterm: logged" grep -q "SIGTERM received; shutting down" "$tmp/node-h100x8-training.log"

finish
