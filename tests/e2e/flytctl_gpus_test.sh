#!/usr/bin/env bash
# End to end: `flytctl gpus` as a user runs it — on simulated GPUs, through the nvidia-smi fallback,
# with no GPU source at all, and with broken input. Asserts what the user sees and the exit codes.
# Usage: flytctl_gpus_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
flytctl="$build/bin/flytctl"
sim="$build/lib/libflyt-sim-nvml.so"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

# Keep real drivers and the caller's settings out of the way.
unset FLYT_NVML_LIBRARY FLYT_SIM_SCENARIO FLYT_SIM_TIME FLYT_SIM_CLOCK_FILE FLYT_SIM_REASON
empty_path="$tmp/emptybin"
mkdir -p "$empty_path"

# 1. Simulated H100 node at a fixed time.
out=$(FLYT_NVML_LIBRARY="$sim" FLYT_SIM_SCENARIO="$src/sim/scenarios/h100x8-training.toml" \
      FLYT_SIM_TIME=10 "$flytctl" gpus 2>&1)
rc=$?
check "sim: exit 0" test $rc -eq 0
check "sim: banner first" test "$(head -n1 <<<"$out" | cut -c1-14)" = "SIMULATED GPUs"
check "sim: banner names scenario" contains "$out" "h100x8-training.toml"
check "sim: 8 GPUs" test "$(grep -c 'NVIDIA H100 80GB HBM3' <<<"$out")" -eq 8
check "sim: memory" contains "$out" "73220 / 81559 MiB"
check "sim: power" contains "$out" "662 / 700 W"
check "sim: process" contains "$out" "41007"

# 2. JSON for scripts: parseable, values as the scenario says, absent values are null.
json=$(FLYT_NVML_LIBRARY="$sim" FLYT_SIM_SCENARIO="$src/sim/scenarios/faulty-node.toml" \
       FLYT_SIM_TIME=130 "$flytctl" gpus --json)
check "json: exit 0" test $? -eq 0
check "json: parses and matches" python3 - "$json" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
g = d["gpus"]
assert d["source"] == "nvml", d["source"]
assert d["simulated_scenario"].endswith("faulty-node.toml")
assert len(g) == 5
assert g[1]["lost"] is True and g[1]["gpu_util_percent"] is None
assert g[4]["power_draw_mw"] is None and g[4]["power_limit_mw"] == 400000
assert g[0]["processes"][0]["pid"] == 61000
PY

# 3. --watch refreshes until stopped: three NDJSON frames (the timeout is only a safety net), and
#    SIGINT ends it cleanly with exit 0.
FLYT_NVML_LIBRARY="$sim" FLYT_SIM_SCENARIO="$src/sim/scenarios/mixed-inference.toml" \
  timeout 60 "$flytctl" gpus --json --watch 0.2 2>/dev/null | head -n 3 >"$tmp/watch.out"
check "watch: three frames" test "$(wc -l <"$tmp/watch.out")" -eq 3
check "watch: each frame is a snapshot" python3 -c "
import json, sys
for line in open('$tmp/watch.out'):
    assert len(json.loads(line)['gpus']) == 3
"
FLYT_NVML_LIBRARY="$sim" FLYT_SIM_SCENARIO="$src/sim/scenarios/mixed-inference.toml" \
  "$flytctl" gpus --json --watch 0.2 >"$tmp/watch2.out" 2>&1 &
watcher=$!
check "watch: the first frame comes" wait_for 30 test -s "$tmp/watch2.out"
kill -INT "$watcher"
wait "$watcher"
check "watch: SIGINT ends it with exit 0" test $? -eq 0

# 4. The nvidia-smi fallback: no NVML, a fake nvidia-smi on PATH.
mkdir -p "$tmp/smibin"
ln -s "$src/tests/data/nvidia-smi/fake-nvidia-smi" "$tmp/smibin/nvidia-smi"
out=$(PATH="$tmp/smibin:/usr/bin:/bin" FLYT_FAKE_SMI_DIR="$src/tests/data/nvidia-smi/h100x8" \
      "$flytctl" gpus 2>&1)
rc=$?
check "smi: exit 0" test $rc -eq 0
check "smi: via nvidia-smi" contains "$out" "via nvidia-smi"
check "smi: 8 GPUs" test "$(grep -c 'H100' <<<"$out")" -ge 8
check "smi: no simulated banner" test "$(grep -c SIMULATED <<<"$out")" -eq 0

# 5. No NVML, no nvidia-smi: zero GPUs with the reason, not a crash.
out=$(PATH="$empty_path:/usr/bin:/bin" "$flytctl" gpus 2>&1)
rc=$?
if command -v nvidia-smi >/dev/null 2>&1 || ldconfig -p | grep -q 'libnvidia-ml\.so\.1 '; then
  echo "note: this machine has an NVIDIA driver; skipping the no-GPU case"
else
  check "none: exit 0" test $rc -eq 0
  check "none: says why" contains "$out" "No GPUs: no GPUs readable: NVML unavailable"
  check "none: mentions nvidia-smi" contains "$out" "nvidia-smi not found on PATH"
fi

# 6. Broken input: clear errors, non-zero exits.
printf '[scenario]\nname = "x"\n[[gpu]]\nname = "g"\nmemory_total_mib = 10\npower_limit_w = 1\nmax_sm_clock_mhz = 1\nmax_mem_clock_mhz = 1\nutilization = { kind = "sinus" }\n' >"$tmp/bad.toml"
out=$(FLYT_NVML_LIBRARY="$sim" FLYT_SIM_SCENARIO="$tmp/bad.toml" "$flytctl" gpus 2>&1)
rc=$?
check "bad scenario: non-zero exit" test $rc -ne 0
check "bad scenario: file, line and field" contains "$out" "bad.toml:9: gpu[0].utilization.kind: unknown kind 'sinus'"
out=$("$flytctl" sim check "$tmp/bad.toml" 2>&1)
check "sim check: bad file fails" test $? -ne 0
check "sim check: says why" contains "$out" "unknown kind 'sinus'"
out=$("$flytctl" sim check "$src"/sim/scenarios/*.toml 2>&1)
check "sim check: shipped scenarios ok" test $? -eq 0
check "sim check: counts" contains "$out" "8 GPU(s), 8 process(es), 0 fault(s)"
out=$(FLYT_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "$flytctl" gpus 2>&1)
check "missing explicit library: non-zero" test $? -ne 0
check "missing explicit library: names it" contains "$out" "FLYT_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1"
out=$("$flytctl" gpus --watch=-1 2>&1)
check "bad flag value: non-zero" test $? -ne 0
out=$("$flytctl" frobnicate 2>&1)
check "unknown command: non-zero" test $? -ne 0

# 7. flytctl estimate: a dry run of a task's requirements, per experiment.
out=$("$flytctl" estimate "$src/examples/tasks/llama-3.1-8b-vllm.json")
check "estimate: exit 0" test $? -eq 0
check "estimate: 8 experiments" contains "$out" "8 experiment(s)"
check "estimate: tp=2 halves the weights and needs a 10784 MiB GPU" grep -qE '^ +1 +2 +7658 MiB +512 MiB +1536 MiB +0.9 +10784 MiB +[0-9]+ +125 ' <<<"$out"
check "estimate: max-num-seqs=128 runs with its concurrency capped" grep -qE '^ +4 +1 .*max-num-seqs=128 .*will run, concurrency capped at 55$' <<<"$out"
check "estimate: nothing refused" test "$(grep -c "cannot run" <<<"$out")" = 0
out=$("$flytctl" estimate "$src/examples/tasks/llama-3.1-70b-sglang.json" --json)
check "estimate: json" python3 -c "
import json, sys
d = json.loads(sys.argv[1])
assert d['runtime'] == 'sglang' and [x['gpus'] for x in d['experiments']] == [4, 8]
assert d['experiments'][1]['memory_per_gpu']['weights_mib'] == 16832
c = d['experiments'][0]['capacity']  # tp=4: 13 sequences of 32768 tokens, 16 asked for
assert c['verdict'] == 'capped' and c['max_concurrency'] == 13, c
" "$out"
echo '{"model": {"id_or_path": "acme/unknown-13b"}}' >"$tmp/unknown.json"
out=$("$flytctl" estimate "$tmp/unknown.json" 2>&1)
check "estimate: unknown model fails closed" test $? -ne 0
check "estimate: says why" contains "$out" "is not in flyt's catalog"
echo '{not json' >"$tmp/broken.json"
out=$("$flytctl" estimate "$tmp/broken.json" 2>&1)
check "estimate: broken JSON is an error" contains "$out" "is not valid JSON"

finish
