# shellcheck shell=bash disable=SC2154  # sourced: the script sets build, src, tmp and children
# Shared by the cluster manager's HTTP benchmarks (cluster_http_bench.sh, rate_limit_bench.sh):
# free ports, waiting for a server, and a real node's GPU snapshot to replay.

# free_port: a TCP port free on loopback now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_healthy <url>: waits up to 10 s for <url>/healthz; says which server did not come up.
wait_healthy() {
  for _ in $(seq 1 100); do curl -sf "$1/healthz" >/dev/null && return 0; sleep 0.1; done
  echo "$(basename "$0"): $1 did not come up" >&2
  return 1
}

# node_snapshot <file>: a real node's snapshot, 8 idle H100s (simulated NVML), as a node manager
# of $build serves it at /api/v1/gpus, written to <file>; the node manager is stopped after.
node_snapshot() {
  local node_port node_pid
  node_port=$(free_port)
  FLYT_NVML_LIBRARY="$build/lib/libflyt-sim-nvml.so" FLYT_SIM_SCENARIO="$src/sim/scenarios/h100x8-idle.toml" \
    "$build/bin/flyt-node-manager" --listen "127.0.0.1:$node_port" --log-level warn 2>"$tmp/node.log" &
  node_pid=$!
  children+=("$node_pid")
  wait_healthy "http://127.0.0.1:$node_port" || return 1
  for _ in $(seq 1 50); do
    curl -sf "http://127.0.0.1:$node_port/api/v1/gpus" >"$1" && break
    sleep 0.2
  done
  kill "$node_pid"
}
