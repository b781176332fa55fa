#!/usr/bin/env bash
# Quick start, command 1: installs what flyt needs, builds it, and runs a local demo cluster:
# flyt-cluster-manager (embedded SQLite store under var/demo/) and node managers on simulated
# GPU scenarios (plus this machine's real GPUs when it has an NVIDIA driver), with demo jobs that
# queue, run on leased GPUs with monitoring, and complete. It prints where to look; Ctrl-C stops
# everything cleanly.
#
#   scripts/run.sh                 the demo cluster (manager on FLYT_DEMO_PORT, default 12400)
#   scripts/run.sh gpus [ARGS...]  only this machine's GPUs (`flytctl gpus ARGS`), simulated
#                                  when there is no driver, and says so
#
# FLYT_BUILD_DIR: the build tree (default build/; relative to the checkout, or absolute).
# FLYT_RUN_NO_BUILD=1: use that tree as it is, without installing or building (the e2e test of
# the commands this prints, tests/e2e/readme_commands_test.sh, runs the demo this way).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
case "${FLYT_BUILD_DIR:-build}" in
  /*) build=$FLYT_BUILD_DIR ;;
  *) build="$root/${FLYT_BUILD_DIR:-build}" ;;
esac
# How the printed commands name the build tree: relative to the checkout when inside it.
build_shown=${build#"$root"/}

if [ "${FLYT_RUN_NO_BUILD:-}" != 1 ]; then
  scripts/install-deps.sh
  log=$(mktemp)
  if ! scripts/build.sh >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "flyt: build failed (output above)" >&2
    exit 1
  fi
  rm -f "$log"
fi

has_driver() {
  ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1 ' && return 0
  command -v nvidia-smi >/dev/null 2>&1 && return 0
  return 1
}
sim_lib="$build/lib/libflyt-sim-nvml.so"

if [ "${1:-}" = gpus ]; then
  shift
  # This machine's GPUs, even in a shell that exported the demo's FLYT_CLUSTER_MANAGER (with it,
  # `flytctl gpus` reads the cluster).
  unset FLYT_CLUSTER_MANAGER
  if [ -z "${FLYT_NVML_LIBRARY:-}" ] && ! has_driver; then
    export FLYT_NVML_LIBRARY="$sim_lib"
    export FLYT_SIM_SCENARIO="${FLYT_SIM_SCENARIO:-sim/scenarios/h100x8-training.toml}"
    # Start somewhere in the scenario's cycle, so that runs differ the way a live node would.
    export FLYT_SIM_START="${FLYT_SIM_START:-$(($(date +%s) % 3600))}"
    export FLYT_SIM_REASON="no NVIDIA driver on this machine: no libnvidia-ml.so.1, no nvidia-smi"
  fi
  exec "$build/bin/flytctl" gpus "$@"
fi
if [ $# -gt 0 ]; then
  echo "usage: scripts/run.sh [gpus [ARGS...]]" >&2
  exit 2
fi

# ---- the demo cluster ------------------------------------------------------------------------
port=${FLYT_DEMO_PORT:-12400}
demo="$root/var/demo"
[ "$port" = 12400 ] || demo="$root/var/demo-$port"
url="http://127.0.0.1:$port"
if curl -s -o /dev/null "$url/healthz" 2>/dev/null; then
  echo "flyt: something already serves $url (another demo?); stop it or set FLYT_DEMO_PORT" >&2
  exit 1
fi

# stop_pids <seconds> <pid...>: SIGTERM, then SIGKILL to those still running after <seconds>;
# returns once every one is gone. Works for processes that are not this shell's children.
stop_pids() {
  local grace=$1 p left
  shift
  [ $# -gt 0 ] || return 0
  kill "$@" 2>/dev/null || true
  local deadline=$((SECONDS + grace))
  while :; do
    left=()
    for p in "$@"; do kill -0 "$p" 2>/dev/null && left+=("$p"); done
    [ ${#left[@]} -gt 0 ] || return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "flyt: still running ${grace} s after SIGTERM, killed: ${left[*]}" >&2
      kill -9 "${left[@]}" 2>/dev/null || true
      return 0
    fi
    sleep 0.1
  done
}
# demo_gpu_servers: the pids of the GPU servers that run from this demo's state dir (started by
# its sim-h100-a node manager: --ready-file names a file there).
demo_gpu_servers() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "--ready-file $demo/gpu-servers/" &&
      echo "${p#/proc/}"
  done
  return 0
}
# A GPU server of an earlier run whose node manager did not stop it (killed with -9, or told to
# leave its servers for a restart) would outlive the state dir deleted below: stopped first.
leftover=$(demo_gpu_servers)
if [ -n "$leftover" ]; then
  echo "flyt: stopping GPU servers an earlier demo left running: ${leftover//$'\n'/ }"
  # shellcheck disable=SC2086
  stop_pids 15 $leftover
fi
rm -rf "$demo"
mkdir -p "$demo"
chmod 700 "$demo"
token=${FLYT_ADMIN_TOKEN:-demo-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')}
printf '%s\n' "$token" >"$demo/admin.token"
chmod 600 "$demo/admin.token"

pids=()
cuda_pid=""
# Ctrl-C: every process the demo started stops, GPU servers included. The node managers take
# SIGTERM as their clean stop: sim-h100-a drains its GPU servers (SIGKILL after its drain grace)
# and waits for them before it exits; this waits for every process, at most 30 s.
stop_all() {
  trap - EXIT
  trap '' INT TERM  # a second Ctrl-C does not cut the stop short (it is bounded)
  echo
  echo "flyt: stopping the demo cluster..."
  local p
  # shellcheck disable=SC2086
  stop_pids 30 "${pids[@]}" $cuda_pid
  for p in "${pids[@]}" $cuda_pid; do wait "$p" 2>/dev/null || true; done
  local left
  left=$(demo_gpu_servers)
  if [ -n "$left" ]; then
    echo "flyt: GPU servers left running by sim-h100-a's node manager, stopping them: ${left//$'\n'/ }" >&2
    # shellcheck disable=SC2086
    stop_pids 15 $left
  fi
  echo "flyt: stopped (logs and store kept in ${demo#$root/}/)"
}
trap stop_all EXIT
trap 'exit 0' INT TERM

wait_up() {
  for _ in $(seq 1 100); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "flyt: $2 did not start; its log:" >&2
  tail -n 20 "$3" >&2
  exit 1
}

FLYT_ADMIN_TOKEN=$token "$build/bin/flyt-cluster-manager" --listen "127.0.0.1:$port" \
  --store "sqlite:$demo/flyt.db" --var-dir "$demo" >"$demo/cluster-manager.log" 2>&1 &
pids+=($!)
wait_up "$url/healthz" "flyt-cluster-manager" "$demo/cluster-manager.log"

# start_node <name> <port> <scenario or "real"> [config file]
start_node() {
  local name=$1 node_port=$2 scenario=$3 config=${4:-}
  local env=(FLYT_TOKEN="$token") args=()
  [ -n "$config" ] && args=(--config "$config")
  if [ "$scenario" != real ]; then
    env+=(FLYT_NVML_LIBRARY="$sim_lib" FLYT_SIM_SCENARIO="$root/sim/scenarios/$scenario.toml"
      FLYT_SIM_START=$(($(date +%s) % 3600)))
  fi
  env "${env[@]}" "$build/bin/flyt-node-manager" --listen "127.0.0.1:$node_port" \
    --name "$name" --cluster-manager "$url" "${args[@]}" >"$demo/$name.log" 2>&1 &
  pids+=($!)
  wait_up "http://127.0.0.1:$node_port/healthz" "flyt-node-manager $name" "$demo/$name.log"
}
next_port=$((port + 1))
node_count=6
if has_driver; then
  start_node "$(hostname -s)" "$next_port" real
  next_port=$((next_port + 1))
  node_count=7
fi
# sim-h100-a also serves remote GPUs: its node manager starts a simulated flyt-gpu-server for each
# remote lease the cluster manager places on it (ports from FLYT_DEMO_PORT + 100).
cat >"$demo/sim-h100-a.toml" <<EOF
[gpu-servers]
enabled = true
backend = "sim"
shared = "all"
port_min = $((port + 100))
port_max = $((port + 139))
state_dir = "$demo/gpu-servers"
EOF
start_node sim-h100-a "$next_port" h100x8-idle "$demo/sim-h100-a.toml"
start_node sim-h100-b "$((next_port + 1))" h100x8-idle
start_node sim-training "$((next_port + 2))" h100x8-training
start_node sim-mixed "$((next_port + 3))" mixed-inference
start_node sim-faulty "$((next_port + 4))" faulty-node
# sim-profiles carries one kind of work per GPU (a training loop with a 12 s iteration, an
# inference server, a notebook holding 30 GiB that computes nothing, training then evaluation,
# nothing), so that its usage profiles show each state; allocated-idle after 1 min here.
cat >"$demo/sim-profiles.toml" <<EOF
[profile]
allocated_idle_after = "60s"
EOF
profiles_port=$((next_port + 5))
start_node sim-profiles "$profiles_port" profiles "$demo/sim-profiles.toml"
last_node_port=$profiles_port

# A client node: flyt-client-manager leases remote GPU shares for the CUDA programs of this machine
# that run with flyt's libcudart.so.13 and no FLYT_SERVER.
cat >"$demo/client-manager.toml" <<EOF
[client]
name = "demo-client"
socket = "$demo/client-manager.sock"
release_after = "30s"
[cluster-manager]
address = "$url"
[lease]
sm_percent = 25
memory_mb = 16384
EOF
FLYT_TOKEN=$token "$build/bin/flyt-client-manager" --config "$demo/client-manager.toml" \
  >"$demo/client-manager.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -S "$demo/client-manager.sock" ] && break; sleep 0.1; done
# The CUDA program the demo runs through it (built only where the CUDA toolkit is).
cuda_program="$build/tests/cuda/vector_add"
cuda_runtime="$build/lib/flyt"
has_cuda_program() { [ -x "$cuda_program" ] && [ -f "$cuda_runtime/libcudart.so.13" ]; }
cuda_env=(FLYT_SIM_DEVICE=1 FLYT_CLIENT_MANAGER="$demo/client-manager.sock"
  LD_LIBRARY_PATH="$cuda_runtime")

export FLYT_CLUSTER_MANAGER=$url FLYT_TOKEN=$token
ctl="$build/bin/flytctl"
for _ in $(seq 1 50); do
  [ "$("$ctl" nodes --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["nodes"]))' 2>/dev/null)" = "$node_count" ] && break
  sleep 0.2
done

# Demo work: a CUDA program through the client manager first (its remote lease holds a share of
# one of sim-h100-a's GPUs, which exclusive jobs then leave alone; the program runs again every
# 20 s, so the lease never reaches its 30 s release_after), two autotuner tasks (one experiment
# per combination of their search space) and a lease held by hand.
# (sim-h100-a reports its GPU-server capacity with its first heartbeat after probing its GPUs.)
for _ in $(seq 1 100); do
  curl -sf -H "Authorization: Bearer $token" "$url/api/v1/gpus" | grep -q '"sm_count"' && break
  sleep 0.1
done
has_cuda_program && { env "${cuda_env[@]}" "$cuda_program" >>"$demo/cuda-program.log" 2>&1 || true; }
"$ctl" submit examples/tasks/llama-3.1-8b-vllm.json >/dev/null
"$ctl" submit examples/tasks/llama-3.1-70b-sglang.json >/dev/null
"$ctl" alloc --gpus 2 --model A100 --ttl 600 >/dev/null 2>&1 || true

cat <<EOF

flyt demo cluster is running (simulated GPUs$(has_driver && echo ", plus this machine's real ones")).

  dashboard         $url/?token=$token
  cluster manager   $url         (log: ${demo#$root/}/cluster-manager.log, store: ${demo#$root/}/flyt.db)
  node managers     127.0.0.1:$((port + 1))-$last_node_port  (Prometheus /metrics in dcgm-exporter's names)
  client manager    ${demo#$root/}/client-manager.sock  (log: ${demo#$root/}/client-manager.log)
  admin token       ${demo#$root/}/admin.token

In another terminal:

  export FLYT_CLUSTER_MANAGER=$url FLYT_TOKEN=\$(cat ${demo#$root/}/admin.token)
  $build_shown/bin/flytctl nodes          # the nodes and their state
  $build_shown/bin/flytctl gpus           # every GPU in the cluster, leased or free, with its score and usage state
  $build_shown/bin/flytctl profile --node 127.0.0.1:$profiles_port     # what each GPU of sim-profiles carries
  $build_shown/bin/flytctl profile --node 127.0.0.1:$profiles_port 0   # its training GPU: the cycle's period
  $build_shown/bin/flytctl jobs           # the demo experiments: queued, running, completed (📊 = monitoring data)
  $build_shown/bin/flytctl job <ID>       # gpu_info and the GPU monitoring summary of one experiment
  $build_shown/bin/flytctl queue          # what waits, and why
  $build_shown/bin/flytctl alloc --gpus 2 --model H100 --ttl 300
  curl -s -H "Authorization: Bearer \$FLYT_TOKEN" $url/metrics
  $build_shown/bin/flytctl remote list    # GPU shares the client manager leased, and their servers
  $build_shown/bin/flytctl servers        # the GPU servers node managers run for them
$(has_cuda_program && printf '  %s\n' "FLYT_SIM_DEVICE=1 FLYT_CLIENT_MANAGER=${demo#$root/}/client-manager.sock LD_LIBRARY_PATH=$build_shown/lib/flyt $build_shown/tests/cuda/vector_add")

The demo completes each running experiment after about 30 s, so the queue keeps moving. Every
20 s it runs a CUDA program (tests/cuda/vector_add) with flyt's libcudart and no FLYT_SERVER: the
client manager leases it a share of an H100 on sim-h100-a, whose node manager starts a simulated
GPU server for it (dashboard: Remote GPUs).
Ctrl-C stops everything.
EOF

# Plays the autotuner's part: an experiment that has run for 30 s reports completion.
rounds=0
while true; do
  sleep 5
  rounds=$((rounds + 1))
  if [ $((rounds % 4)) = 0 ] && has_cuda_program; then
    # A simple command: $! is the program's own pid, which Ctrl-C stops too.
    env "${cuda_env[@]}" "$cuda_program" >>"$demo/cuda-program.log" 2>&1 &
    cuda_pid=$!
  fi
  "$ctl" jobs --status running --json 2>/dev/null | python3 -c '
import json, sys
for j in json.load(sys.stdin).get("jobs", []):
    if (j.get("runtime_seconds") or 0) >= 30:
        print(j["id"])' 2>/dev/null | while read -r id; do
    "$ctl" complete "$id" --message "demo: benchmark finished" >/dev/null 2>&1 || true
  done
done
