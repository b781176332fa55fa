#!/usr/bin/env bash
# End to end: the GPUs' usage profiles through the whole node manager, as an operator reads them.
# flyt-node-manager plays sim/scenarios/profiles.toml (loads replayed from CSV, driver samples at
# 6 Hz) with short settings (state_hold 5 s, allocated_idle_after 20 s); the notebook GPU's memory
# is held by a real process (a copy of sleep named jupyter-lab), so that its name and owner come
# from /proc. Polling GET /api/v1/profiles with a deadline, it checks that each GPU gets its
# verdict and prints how long each took after start (and after the train -> eval change at 60 s):
#   at first: unknown, with the reason        GPU 0 (training, 12 s): cyclic, period within 10 %
#   GPU 1 (inference): steady                 GPU 2 (notebook): allocated-idle naming jupyter-lab,
#   GPU 3: cyclic, then after 60 s not          its owner and its 30 GiB
#     cyclic, with the phase change listed    GPU 4: idle
# and /api/v1/gpus/{index}/profile, the summaries on /api/v1/gpus, the /metrics series, the phase
# changes in the log, 404 for an unknown GPU. Usage: node_profile_test.sh <build dir> <source dir>
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d -t flyt-node-profile.XXXXXX)
chmod 755 "$tmp"
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; [ -n "${FLYT_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT

# The scenario, with the notebook's pid (jupyter-lab holds GPU 2's memory and computes nothing).
check "the scenario names the notebook's pid" profiles_scenario "$tmp/scenario"
owner=$notebook_owner

cat >"$tmp/node.toml" <<EOF
[profile]
state_hold = "5s"
allocated_idle_after = "20s"
analysis_interval = "1s"
[trace]
enabled = false
EOF
port=$(free_port)
node="http://127.0.0.1:$port"
started=$(date +%s.%N)
FLYT_NVML_LIBRARY="$build/lib/libflyt-sim-nvml.so" FLYT_SIM_SCENARIO="$tmp/scenario/profiles.toml" \
  "$build/bin/flyt-node-manager" --listen "127.0.0.1:$port" --name p1 --config "$tmp/node.toml" \
  >>"$tmp/node.log" 2>&1 &
pids+=($!)
check "the node manager serves" wait_for 20 curl -sf "$node/healthz" || cat "$tmp/node.log"
check "it says profiles are on" grep -q "profiles: on" "$tmp/node.log"

# At first: no verdict, and why.
first=$(curl -s "$node/api/v1/gpus/0/profile")
check "at first GPU 0 is unknown" test "$(jq_py "print(d['state'])" <<<"$first")" = unknown
check "with the reason" test -n "$(jq_py "print(d['insufficient_data'] or '')" <<<"$first")"
echo "at first: $(jq_py "print(d['state'], '-', d['insufficient_data'])" <<<"$first")"
code=$(http_code "$node/api/v1/gpus/9/profile")
check "404 for a GPU the node does not have" test "$code" = 404
check "with code not_found" grep -q '"code":"not_found"' "$tmp/http_body"
code=$(http_code "$node/api/v1/profiles")
check "GET /api/v1/profiles answers" test "$code" = 200
check "with every GPU and the footprint" jq_py \
  "sys.exit(0 if len(d['profiles']) == 5 and d['footprint_bytes_per_gpu'] > 0 else 1)" <"$tmp/http_body"

# The verdicts, polled every second until all are in or 110 s after start.
python3 - "$node" "$started" "$notebook_pid" "$owner" >"$tmp/verdicts.json" 2>"$tmp/verdicts.err" <<'EOF'
import json, sys, time, urllib.request
node, started, nb_pid, owner = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
CHANGE_S = 60.0  # the train -> eval change in profiles-train-eval.csv
def ok_training(p):
    c = p.get("cycle") or {}
    return p["state"] == "cyclic" and abs(c.get("period_s", 0) - 12.0) <= 1.2
def ok_notebook(p):
    a = p.get("allocated_idle") or {}
    return p["state"] == "allocated-idle" and any(
        q["pid"] == nb_pid and q.get("name") == "jupyter-lab" and q.get("user") == owner and
        q.get("memory_bytes") == 30720 << 20 for q in a.get("processes", []))
def left_cyclic(p, t):
    return (t >= CHANGE_S and p["state"] not in ("cyclic", "unknown") and
            any(c["from"] == "cyclic" for c in p.get("phase_changes", [])))
checks = {
    "training_cyclic": (0, lambda p, t: ok_training(p)),
    "inference_steady": (1, lambda p, t: p["state"] == "steady"),
    "notebook_allocated_idle": (2, lambda p, t: ok_notebook(p)),
    "train_eval_cyclic": (3, lambda p, t: t < CHANGE_S and p["state"] == "cyclic"),
    "train_eval_left_cyclic": (3, left_cyclic),
    "idle_idle": (4, lambda p, t: p["state"] == "idle"),
}
found, last = {}, {}
while time.time() - started < 110 and len(found) < len(checks):
    t = time.time() - started
    try:
        with urllib.request.urlopen(node + "/api/v1/profiles", timeout=5) as r:
            profiles = {p["index"]: p for p in json.load(r)["profiles"]}
    except Exception as e:  # noqa: BLE001 - report and keep polling
        print("poll failed:", e, file=sys.stderr)
        time.sleep(1)
        continue
    for name, (gpu, ok) in checks.items():
        p = profiles.get(gpu)
        if p is None:
            continue
        last[name] = {k: p.get(k) for k in ("state", "insufficient_data", "cycle", "phase_changes")}
        if name not in found and ok(p, t):
            found[name] = round(t, 1)
            last[name]["profile"] = p
    time.sleep(1)
json.dump({"found": found, "last": last}, sys.stdout)
EOF
verdict() { jq_py "sys.exit(0 if '$1' in d['found'] else 1)" <"$tmp/verdicts.json"; }
for v in training_cyclic inference_steady notebook_allocated_idle train_eval_cyclic \
  train_eval_left_cyclic idle_idle; do
  check "verdict $v" verdict "$v" || jq_py "print(json.dumps(d['last'].get('$v'))[:2000])" <"$tmp/verdicts.json"
done
echo "seconds after start to each verdict: $(jq_py "print(d['found'])" <"$tmp/verdicts.json")"
jq_py "f=d['found']; t=f.get('train_eval_left_cyclic'); print('train -> eval: left cyclic %s s after the change at 60 s' % (round(t-60,1) if t else '-'))" <"$tmp/verdicts.json"
jq_py "p=d['last']['training_cyclic'].get('cycle') or {}; print('training: period %s s, confidence %s, method %s' % (p.get('period_s'), p.get('confidence'), p.get('method')))" <"$tmp/verdicts.json"

# The same through the other ways in.
one=$(curl -s "$node/api/v1/gpus/2/profile")
check "GET /api/v1/gpus/2/profile: allocated-idle" test "$(jq_py "print(d['state'])" <<<"$one")" = allocated-idle
gpus=$(curl -s "$node/api/v1/gpus")
check "GET /api/v1/gpus: each GPU with its summary" jq_py \
  "sys.exit(0 if all(g['profile'] and g['profile']['state'] for g in d['gpus']) else 1)" <<<"$gpus"
check "GET /api/v1/gpus: GPU 0's period" jq_py \
  "sys.exit(0 if abs((d['gpus'][0]['profile']['period_s'] or 0) - 12) <= 1.2 else 1)" <<<"$gpus"
metrics=$(curl -s "$node/metrics")
check "/metrics: GPU 0 cyclic" grep -qE '^flyt_gpu_state\{gpu="0",.*state="cyclic"\} 1$' <<<"$metrics"
check "/metrics: one series per state" test "$(grep -c '^flyt_gpu_state{gpu="4",' <<<"$metrics")" = 7
for family in flyt_gpu_state_seconds flyt_gpu_cycle_period_seconds flyt_gpu_cycle_confidence \
  flyt_gpu_util_quantile flyt_gpu_memory_used_quantile_bytes flyt_gpu_power_quantile_watts \
  flyt_gpu_allocated_idle_seconds flyt_gpu_memory_headroom_bytes flyt_profile_phase_changes_total; do
  check "/metrics: $family" grep -q "^$family{" <<<"$metrics"
done
check "/metrics: GPU 2 allocated-idle seconds" grep -qE '^flyt_gpu_allocated_idle_seconds\{gpu="2",.*\} [1-9]' <<<"$metrics"
check "the log names the phase change of GPU 3" grep -qE "GPU 3 \(.*\): cyclic -> " "$tmp/node.log"

if [ "$failures" -gt 0 ]; then
  echo "--- node log (tail):"
  tail -40 "$tmp/node.log"
  cat "$tmp/verdicts.err"
fi
finish
