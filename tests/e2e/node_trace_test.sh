#!/usr/bin/env bash
# End to end: CUDA tracing inside flyt-node-manager, as an operator sees it. A node manager with
# [trace] enabled = true reports to a cluster manager while two unmodified nvcc-built programs run
# through flyt's libcudart.so.13 against flyt-gpu-server --backend sim: trace_kernels (22 launches
# of 4 kernels, all memory freed) and trace_memory (exits with 274,489 bytes in 2 allocations never
# freed). Checked: GET /api/v1/processes (the trace-only entries), /api/v1/processes/{pid}/cuda,
# /api/v1/trace, the flyt_cuda_* series in /metrics, `flytctl processes --cuda [PID]`, and the
# cluster manager's node view (heartbeats). Then a node manager without privileges (uid 65534):
# it says once why tracing is off and serves everything else.
# Needs root (BPF); skips (77) with the reason otherwise. Usage: node_trace_test.sh <build> <src>
set -uo pipefail
build=$(cd "$1" && pwd)
src=$2
tmp=$(mktemp -d -t flyt-node-trace.XXXXXX)
chmod 755 "$tmp"
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; [ -n "${FLYT_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT

if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: CUDA tracing needs root (BPF uprobes); running as uid $(id -u)"
  exit 77
fi
programs=$build/tests/trace
remote_setup "$build" "$programs/trace_kernels"
[ -x "$programs/trace_memory" ] || { echo "SKIPPED: tests/trace/trace_memory is not built"; exit 77; }
if ! "$build/bin/flyt-trace" --duration 0 >/dev/null 2>"$tmp/probe.err"; then
  echo "SKIPPED: tracing is unavailable here: $(tr '\n' ' ' <"$tmp/probe.err")"
  exit 77
fi
ctl=$build/bin/flytctl

cluster_config </dev/null
start_manager "127.0.0.1:$port" "$tmp/cm.log" --config "$tmp/cm.toml"

gpu_port=$(free_port)
"$server_bin" --backend sim --listen "127.0.0.1:$gpu_port" >>"$tmp/server.log" 2>&1 &
pids+=($!)
check "the GPU server listens" wait_for 20 grep -q "listening on" "$tmp/server.log"

cat >"$tmp/node.toml" <<EOF
[trace]
enabled = true
library_dirs = ["$build/lib/flyt", "/usr/local/cuda/lib64", "/lib/x86_64-linux-gnu"]
[cluster-manager]
heartbeat_interval_s = 1
EOF
start_node n1 h100x8-idle "$url" "$node_token" --config "$tmp/node.toml"
node="http://127.0.0.1:${node_ports[n1]}"
check "the node manager serves" wait_for 20 curl -sf "$node/healthz" || cat "$tmp/n1.log"
check "it says tracing is on, once" test "$(grep -c "CUDA tracing on" "$tmp/n1.log")" = 1
check "the node is reachable" wait_for 20 nodes_reachable 1

run_program() {  # run_program <name>: runs tests/trace/<name> to its end; its pid in pid_<name>
  env FLYT_SIM_DEVICE=1 FLYT_SERVER="127.0.0.1:$gpu_port" LD_LIBRARY_PATH="$runtime_dir" \
    "$programs/$1" >"$tmp/$1.out" 2>&1
  sed -n 's/^PID \([0-9]*\)$/\1/p' "$tmp/$1.out" | head -1
}
kpid=$(run_program trace_kernels)
mpid=$(run_program trace_memory)
check "both programs ran (pids ${kpid:-?}, ${mpid:-?})" test -n "$kpid" -a -n "$mpid"

exited_in_api() {  # exited_in_api <pid>: the node lists the pid as exited
  curl -sf "$node/api/v1/processes/$1/cuda" | jq_py "import sys; sys.exit(0 if all(p['exited'] for p in d['processes']) else 1)"
}
check "the node sees trace_kernels exit" wait_for 20 exited_in_api "$kpid"
check "the node sees trace_memory exit" wait_for 20 exited_in_api "$mpid"

detail=$(curl -sf "$node/api/v1/processes/$kpid/cuda")
kfield() { jq_py "p = d['processes'][0]; print($1)" <<<"$detail"; }
check "trace_kernels: 22 launches" test "$(kfield "p['launches']")" = 22
check "trace_kernels: on flyt's remote runtime" test "$(kfield "p['remote']")" = True
check "trace_kernels: 4 allocations, 4 frees, nothing leaked" \
  test "$(kfield "(p['allocations'], p['frees'], p['leaked_bytes'])")" = "(4, 4, 0)"
check "trace_kernels: launches per kernel, demangled" \
  test "$(kfield "sorted((k['name'], k['launches']) for k in p['top_kernels'])")" = \
  "[('Axpy(float, float const*, float*, int)', 8), ('Reduce(float const*, float*, int)', 8), ('void Scale<double, 2>(double*, double, int)', 2), ('void Scale<float, 4>(float*, float, int)', 4)]"
check "trace_kernels: exit code 0" test "$(kfield "p['exit_code']")" = 0

mdetail=$(curl -sf "$node/api/v1/processes/$mpid/cuda")
check "trace_memory: the leak (274489 bytes in 2 allocations)" \
  test "$(jq_py "p = d['processes'][0]; print(p['leaked_bytes'], p['leaked_allocations'])" <<<"$mdetail")" = "274489 2"
check "trace_memory: 3 out-of-memory failures counted, not memory" \
  test "$(jq_py "print(d['processes'][0]['failures'].get('cudaErrorMemoryAllocation'))" <<<"$mdetail")" = 3

list=$(curl -sf "$node/api/v1/processes")
# (Tracing is system-wide: programs of tests running beside this one may be listed too.)
check "/api/v1/processes lists the traced-only processes" \
  test "$(jq_py "t = {p['pid'] for p in d['processes'] if p['source'] == 'trace'}; print({$kpid, $mpid} <= t)" <<<"$list")" = True
check "/api/v1/processes says tracing is on" test "$(jq_py "print(d['tracing'])" <<<"$list")" = True
check "an unknown pid is 404" test "$(http_code "$node/api/v1/processes/999999999/cuda")" = 404

health=$(curl -sf "$node/api/v1/trace")
check "/api/v1/trace: enabled, no event lost" \
  test "$(jq_py "print(d['enabled'], d['events_lost'])" <<<"$health")" = "True 0"
check "/api/v1/trace: flyt's runtime is probed" \
  contains "$(jq_py "print(d['libraries'])" <<<"$health")" "$build/lib/flyt/libcudart.so.13"

metrics=$(curl -sf "$node/metrics")
check "/metrics: flyt_cuda_kernel_launches_total of trace_kernels is 22" \
  grep -qE "^flyt_cuda_kernel_launches_total\{.*pid=\"$kpid\".*\} 22$" <<<"$metrics"
check "/metrics: the leak of trace_memory" \
  grep -qE "^flyt_cuda_leaked_bytes\{.*pid=\"$mpid\".*\} 274489$" <<<"$metrics"
check "/metrics: per-kernel launches" \
  grep -qE "^flyt_cuda_kernel_launches_by_kernel_total\{.*pid=\"$kpid\".*kernel=\"void Scale<float, 4>\(float\*, float, int\)\"\} 4$" <<<"$metrics"
check "/metrics: the tracer's health" grep -q "^flyt_cuda_tracer_enabled 1$" <<<"$metrics"
check "/metrics: no event lost" grep -q "^flyt_cuda_tracer_events_lost_total 0$" <<<"$metrics"

out=$("$ctl" --node "$node" processes --cuda 2>&1)
check "flytctl processes --cuda lists trace_kernels" grep -qE "^ +$kpid +remote +trace_kernels +22 " <<<"$out"
check "flytctl processes --cuda lists trace_memory's leak" grep -qE "^ +$mpid .*268\.1 KiB" <<<"$out"
out=$("$ctl" --node "$node" processes --cuda "$kpid" 2>&1)
check "flytctl processes --cuda PID shows the kernels and their shapes" \
  grep -q "grid 16x2x1 block 32x4x1" <<<"$out"

in_manager() {  # the cluster manager's node view carries the traced process
  get_field /api/v1/nodes/n1 "sorted(p['pid'] for p in (d.get('cuda') or []))" | grep -q "$kpid"
}
check "the cluster manager has the node's traced processes (heartbeats)" wait_for 20 in_manager

# Without privileges: tracing off, said once, everything else served.
port2=$(free_port)
setpriv --reuid 65534 --regid 65534 --clear-groups env FLYT_NVML_LIBRARY="$build/lib/libflyt-sim-nvml.so" \
  FLYT_SIM_SCENARIO="$src/sim/scenarios/h100x8-idle.toml" \
  "$build/bin/flyt-node-manager" --listen "127.0.0.1:$port2" >"$tmp/unprivileged.log" 2>&1 &
pids+=($!)
check "unprivileged: the node manager serves" wait_for 20 curl -sf "http://127.0.0.1:$port2/healthz"
check "unprivileged: it says once why tracing is off" \
  test "$(grep -c "CUDA tracing is off: CUDA tracing needs root" "$tmp/unprivileged.log")" = 1
check "unprivileged: GPUs are listed" \
  test "$(curl -sf "http://127.0.0.1:$port2/api/v1/gpus" | jq_py "print(len(d['gpus']))")" = 8
check "unprivileged: /api/v1/trace says why" \
  contains "$(curl -sf "http://127.0.0.1:$port2/api/v1/trace")" '"enabled":false'
check "unprivileged: /metrics says tracing is off" \
  grep -q "^flyt_cuda_tracer_enabled 0$" <<<"$(curl -sf "http://127.0.0.1:$port2/metrics")"

finish
