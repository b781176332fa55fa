#!/usr/bin/env bash
# On a real GPU under MPS (issue 15, "Hardware"): two remote leases on ONE GPU, taken at the same
# time by two programs through a flyt-client-manager (cluster manager → node manager [gpu-servers]
# backend "driver" → one flyt-gpu-server per lease, an MPS client with per-context SM
# partitioning), with SM shares of about 25% and 75% (a quarter of the GPU's SMs rounded down to
# its SM granularity, and three times that: 32 and 96 of an H100 SXM's 132) and memory limits of
# 8 and 16 GiB. Checks that both leases are on the same GPU; that each program sees the SMs its
# lease was granted (a multiple of the GPU's SM granularity) and its memory limit; that a
# compute-bound kernel's throughput follows the shares (ratio large/small between 2 and 4, the
# shares' ratio is 3); that an allocation over each limit is refused. Prints every figure
# measured, for docs/hardware-verification.md.
#
# Starts its own MPS control daemon (pipes and logs under the test's scratch directory) and quits
# it at the end. Skips (77, saying why) without the CUDA toolkit's build outputs, without a GPU
# the driver backend can open, or without nvidia-cuda-mps-control.
#
# FLYT_MPS_TEST_SIM=1 runs the same flow on a simulated GPU (no MPS, kernels do not run: no
# throughput is measured) to check the script's plumbing on a machine without a GPU; ctest never
# sets it.
# Usage: remote_mps_gpu_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
sim=${FLYT_MPS_TEST_SIM:-0}
tmp=$(mktemp -d -t flyt-mps-gpu.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
mps_pipe=$tmp/mps-pipe
mps_log=$tmp/mps-log
state_dir=$tmp/servers
mps_started=0
cleanup() {
  # The node manager does not stop its GPU servers when it exits (they outlive a restart): stop
  # them here, before the MPS daemon, which waits for its clients.
  for f in "$state_dir"/*.json; do
    [ -f "$f" ] || continue
    local p
    p=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$f" 2>/dev/null)
    [ -n "$p" ] && kill "$p" 2>/dev/null
  done
  stop_children
  if [ "$mps_started" = 1 ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_pipe timeout 30 nvidia-cuda-mps-control >/dev/null 2>&1
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
program=$build/tests/remote/sm_throughput
remote_setup "$build" "$program"
unset FLYT_CLIENT_MANAGER FLYT_CLIENT_MANAGER_TIMEOUT_MS FLYT_SERVER_SECRET FLYT_REMOTE_SM_COUNT \
  FLYT_REMOTE_SM_PERCENT FLYT_REMOTE_MEMORY_MB FLYT_REMOTE_GPU_MODEL FLYT_NVML_LIBRARY \
  FLYT_SIM_SCENARIO CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
for b in flyt-cluster-manager flyt-node-manager flyt-client-manager; do
  if [ ! -x "$build/bin/$b" ]; then
    echo "SKIPPED: $build/bin/$b is not built"
    exit 77
  fi
done

# ---- is there a GPU, and MPS? ----------------------------------------------------------------
if [ "$sim" = 1 ]; then
  backend=sim
  echo "note: FLYT_MPS_TEST_SIM=1: a simulated GPU, no MPS, no throughput measured"
else
  backend=driver
  if ! "$server_bin" probe --backend driver >"$tmp/probe.json" 2>"$tmp/probe.err"; then
    echo "SKIPPED: no GPU the driver backend can open (flyt-gpu-server probe --backend driver):"
    cat "$tmp/probe.err"
    exit 77
  fi
  if ! command -v nvidia-cuda-mps-control >/dev/null; then
    echo "SKIPPED: nvidia-cuda-mps-control is not installed (not on PATH): no MPS"
    exit 77
  fi
  echo "device (probe, no MPS): $(cat "$tmp/probe.json")"
  # The daemon's control endpoint: a named pipe in older MPS, a Unix socket in CUDA 13's.
  mps_up() { [ -p "$1/control" ] || [ -S "$1/control" ]; }
  if mps_up /tmp/nvidia-mps; then
    echo "note: another MPS control daemon has pipes in /tmp/nvidia-mps; this test starts its own"
  fi
  mkdir -p "$mps_pipe" "$mps_log"
  CUDA_MPS_PIPE_DIRECTORY=$mps_pipe CUDA_MPS_LOG_DIRECTORY=$mps_log \
    CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING=1 \
    nvidia-cuda-mps-control -d >"$tmp/mps-start.out" 2>&1
  mps_started=1
  if ! wait_for 20 mps_up "$mps_pipe"; then
    echo "FAIL: the MPS control daemon did not start:"
    cat "$tmp/mps-start.out" "$mps_log"/* 2>/dev/null
    exit 1
  fi
  echo "MPS control daemon up (pipes in $mps_pipe, per-context SM partitioning)"
fi

# ---- the cluster ------------------------------------------------------------------------------
cluster_config <<EOF
[remote]
default_ttl_s = 30
server_start_timeout_s = 60
EOF
mkdir -p "$tmp/var"
start_manager "127.0.0.1:$port" "$tmp/manager.log" --config "$tmp/cm.toml" ||
  { echo "FAIL: the cluster manager did not start"; cat "$tmp/manager.log"; exit 1; }

echo "start_timeout_s = 45" | gpu_servers_config "$tmp/node.toml" "$backend" "$state_dir" 5
[ "$sim" = 1 ] || echo "mps_pipe_dir = \"$mps_pipe\"" >>"$tmp/node.toml"
printf '[trace]\nenabled = false\n' >>"$tmp/node.toml"
node_name=gpu-node
if [ "$sim" = 1 ]; then
  start_node "$node_name" h100x8-idle "$url" "$node_token" --config "$tmp/node.toml"
  node_port=${node_ports[$node_name]}
else
  # The real GPU: NVML from the driver (no FLYT_NVML_LIBRARY), so not start_node.
  node_port=$(free_port)
  FLYT_TOKEN=$node_token "$build/bin/flyt-node-manager" --listen "127.0.0.1:$node_port" \
    --name "$node_name" --cluster-manager "$url" --config "$tmp/node.toml" \
    >>"$tmp/$node_name.log" 2>&1 &
  pids+=($!)
fi
node_gpus() { curl -sf "http://127.0.0.1:$node_port/api/v1/gpu-servers"; }
gpus_with_sms() {
  curl -sf -H "Authorization: Bearer $admin" "$url/api/v1/gpus" | grep -q '"sm_count": *[0-9]'
}
if ! check "the node reports its GPU-server capacity" wait_for 60 gpus_with_sms; then
  echo "--- node manager log:"
  tail -n 40 "$tmp/$node_name.log"
  finish
  exit 1
fi
node_gpus >"$tmp/capacity.json"
echo "node GPU capacity: $(jq_py "print(json.dumps(d['gpus']))" <"$tmp/capacity.json")"
if [ "$sim" != 1 ]; then
  check "the node sees MPS running on its GPUs" \
    jq_py "sys.exit(0 if all(g['mps']=='running' and g['shared'] for g in d['gpus']) else 1)" \
    <"$tmp/capacity.json"
fi

# ---- the client manager -----------------------------------------------------------------------
cmsock=$tmp/client-manager.sock
cat >"$tmp/client-manager.toml" <<EOF
[client]
name = "client-1"
socket = "$cmsock"
release_after = "2s"
ttl_seconds = 30
acquire_timeout = "90s"
[cluster-manager]
address = "$url"
token = "$alice"
[lease]
sm_percent = 25
memory_mb = 8192
EOF
"$build/bin/flyt-client-manager" --config "$tmp/client-manager.toml" \
  >>"$tmp/client-manager.log" 2>&1 &
pids+=($!)
check "the client manager starts" wait_for 20 test -S "$cmsock"

# ---- two programs at once: a quarter and three quarters of the GPU's SMs, 8 and 16 GiB ------
# The shares in SMs, not percents: the cluster rounds a share up to the GPU's SM granularity, and
# 25% and 75% of 132 SMs rounded up to steps of 8 (40 + 104) do not fit on one GPU together. A
# quarter rounded DOWN to the granularity and three times that (32 and 96 of 132) do, ratio 3.
read -r sm_total sm_gran < <(
  jq_py "g=d['gpus'][0]; print(g['sm_count'], g['sm_granularity'] or 1)" <"$tmp/capacity.json")
sm_small=$(((sm_total / 4) / sm_gran * sm_gran))
[ "$sm_small" -ge "$sm_gran" ] || sm_small=$sm_gran
sm_large=$((sm_small * 3))
echo "shares asked: $sm_small and $sm_large of $sm_total SMs (granularity $sm_gran)"
go=$tmp/go
sim_env=()
[ "$sim" = 1 ] && sim_env=(FLYT_SIM_DEVICE=1)
# run <name> <SMs> <memory MiB>: in the background, killed after 300 s.
run() {
  run_bounded 300 "$1" env "${sim_env[@]}" FLYT_CLIENT_MANAGER="$cmsock" \
    FLYT_CLIENT_MANAGER_TIMEOUT_MS=120000 FLYT_REMOTE_SM_COUNT="$2" FLYT_REMOTE_MEMORY_MB="$3" \
    LD_LIBRARY_PATH="$runtime_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$program" --go-file "$go" &
}
run small "$sm_small" 8192
small_pid=$!
run large "$sm_large" 16384
large_pid=$!
ready() { grep -q READY "$tmp/small.out" && grep -q READY "$tmp/large.out"; }
if ! check "both programs get their leases and warm up" wait_for 180 ready; then
  touch "$go"
  wait "$small_pid" "$large_pid"
  for n in small large; do echo "--- $n:"; cat "$tmp/$n.out"; done
  echo "--- client manager log:"
  tail -n 30 "$tmp/client-manager.log"
  finish
  exit 1
fi
# Both hold their leases now (connected, waiting for $go): read the leases and servers.
body_of "$(api "$admin" GET /api/v1/remote-leases)" >"$tmp/leases.json"
node_gpus >"$tmp/servers.json"
touch "$go"
wait "$small_pid" "$large_pid"
for n in small large; do
  echo "--- $n ($(cat "$tmp/$n.rc")):"
  cat "$tmp/$n.out"
done
check "the small program runs" test "$(rc_of small)" = 0
check "the large program runs" test "$(rc_of large)" = 0

# ---- the checks, and every figure -------------------------------------------------------------
python3 - "$tmp" "$sim" "$sm_small" "$sm_large" <<'PY' >"$tmp/verdict.txt"
import json, sys
tmp, sim = sys.argv[1], sys.argv[2] == "1"
sm_small, sm_large = int(sys.argv[3]), int(sys.argv[4])

def kv(name):
    out = {}
    for line in open(f"{tmp}/{name}.out"):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            out[k] = v
    return out

leases = [l for l in json.load(open(f"{tmp}/leases.json"))["remote_leases"]
          if l["state"] in ("starting", "ready")]
servers = json.load(open(f"{tmp}/servers.json"))["servers"]
gpus = {g["uuid"]: g for g in json.load(open(f"{tmp}/capacity.json"))["gpus"]}
results = []

def check(name, ok):
    results.append((name, bool(ok)))

check("two live remote leases", len(leases) == 2)
by_mem = {l["memory_mb"]: l for l in leases}
progs = {"small": (sm_small, 8192), "large": (sm_large, 16384)}
figures = {}
for name, (asked, mem) in progs.items():
    p = kv(name)
    l = by_mem.get(mem)
    if l is None:
        check(f"{name}: a lease of {mem} MiB", False)
        continue
    srv = next((s for s in servers if s["lease_id"] == l["id"]), {})
    gpu = gpus.get(l["gpu"]["uuid"], {})
    gran = gpu.get("sm_granularity") or 1
    total = gpu.get("sm_count")
    f = {"lease": l["id"], "gpu": l["gpu"]["uuid"], "sm_asked": asked,
         "sm_asked_lease": l.get("sm_count_asked"), "sm_granted": l["sm_count"],
         "server_sm_granted": srv.get("sm_count_granted"), "sm_seen": p.get("sms"),
         "sm_total": total, "sm_granularity": gran,
         "share_pct": round(100 * l["sm_count"] / total, 1) if total else None,
         "memory_mb": l["memory_mb"],
         "mem_total_seen_mb": p.get("mem_total_mb"), "throughput": p.get("throughput"),
         "elapsed_ms": p.get("elapsed_ms"), "alloc_under": p.get("alloc_under"),
         "oversize_mb": p.get("oversize_mb"), "oversize_refused": p.get("oversize_refused"),
         "oversize_error": p.get("oversize_error")}
    figures[name] = f
    check(f"{name}: granted the {asked} SMs asked ({l['sm_count']})", l["sm_count"] == asked)
    check(f"{name}: sees the SMs its lease was granted ({p.get('sms')} vs {l['sm_count']})",
          p.get("sms") == str(l["sm_count"]))
    check(f"{name}: its server was granted them too ({srv.get('sm_count_granted')})",
          srv.get("sm_count_granted") == l["sm_count"])
    check(f"{name}: {l['sm_count']} SMs is a multiple of the granularity {gran} (or the whole GPU)",
          l["sm_count"] % gran == 0 or l["sm_count"] == total)
    check(f"{name}: sees its memory limit ({p.get('mem_total_mb')} MiB vs {mem})",
          p.get("mem_total_mb") == str(mem))
    check(f"{name}: half its limit can be allocated", p.get("alloc_under") == "ok")
    check(f"{name}: an allocation over its limit is refused ({p.get('oversize_error')})",
          p.get("oversize_refused") == "yes"
          and p.get("oversize_error") == "cudaErrorMemoryAllocation")
check("both leases on the same GPU", len({l["gpu"]["uuid"] for l in leases}) == 1)
s, g = figures.get("small", {}), figures.get("large", {})
if s.get("sm_granted") and g.get("sm_granted"):
    print(f"granted SM ratio (large / small) = {g['sm_granted'] / s['sm_granted']:.3f}")
if not sim:
    try:
        ratio = float(g["throughput"]) / float(s["throughput"])
        print(f"throughput ratio (large / small) = {ratio:.3f}")
        check(f"the throughput ratio {ratio:.2f} is between 2 and 4", 2 <= ratio <= 4)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        check("both programs measured a throughput", False)
print("---- figures for docs/hardware-verification.md ----")
for name, f in figures.items():
    print(f"{name}: " + " ".join(f"{k}={v}" for k, v in f.items()))
for name, ok in results:
    print(("ok: " if ok else "FAIL: ") + name)
PY
cat "$tmp/verdict.txt"
failures=$((failures + $(grep -c '^FAIL: ' "$tmp/verdict.txt")))
passes=$((passes + $(grep -c '^ok: ' "$tmp/verdict.txt")))
if [ "$failures" -gt 0 ]; then
  echo "--- client manager log (tail):"
  tail -n 20 "$tmp/client-manager.log"
  echo "--- node manager log (tail):"
  tail -n 20 "$tmp/$node_name.log"
  for f in "$state_dir"/*.log; do
    [ -f "$f" ] && { echo "--- $f (tail):"; tail -n 20 "$f"; }
  done
fi
finish
