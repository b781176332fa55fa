#!/usr/bin/env bash
# Runs flyt's `gpu` checks on a GPU machine, from a bundle made by scripts/gpu-bundle.sh (or from
# a build tree made on that machine). Run as root in the checkout whose build made the bundle.
#   scripts/gpu-checks.sh <bundle or build dir> <part> [out dir] [seconds]
# parts (each fits one 10-minute lease call):
#   core     facts, real_nvml_test, the driver_*_gpu_test binaries, programs.gpu, e2e.remote_gpu
#   service  e2e.remote_mps_gpu, e2e.trace_gpu, a usage profile of a known cyclic load
#   recheck  programs.gpu, e2e.remote_mps_gpu (and one server under MPS, logs shown), e2e.trace_gpu
#   bench    bench/graphs_bench.sh, bench/managed_bench.sh and bench/remote_bench.sh on the driver
#   migrate  live migration on the GPU: MallocAt (driver_backend_gpu_test), e2e.remote_migrate on
#            the driver backend (two server processes on one device, the workload's kernels
#            walking the moved list)
# Each step's output goes to <out>/<part>/<step>.log (default out: $OUT or /tmp/flyt-gpu-checks);
# the logs are packed into <out>/<part>-logs.tar.gz, and the summary (one line per step: exit
# status and seconds) is printed last and kept in <out>/<part>-summary.txt. Every step is bounded
# so that the part ends within [seconds] (default 560).
set -uo pipefail
bundle=$(cd "$1" && pwd)
part=$2
out=${3:-${OUT:-/tmp/flyt-gpu-checks}}
budget=${4:-560}
src=$(cd "$(dirname "$0")/.." && pwd)
deadline=$((SECONDS + budget))
logs=$out/$part
mkdir -p "$logs"
summary=$out/$part-summary.txt
: >"$summary"

# The shared libraries the bundle carries that this machine lacks, installed once.
if [ -d "$bundle/syslib" ] && [ ! -f /etc/ld.so.conf.d/flyt-bundle.conf ]; then
  mkdir -p /usr/local/lib/flyt-bundle
  for lib in "$bundle"/syslib/*.so*; do
    name=$(basename "$lib")
    ldconfig -p | grep -q "^[[:space:]]*$name " || cp "$lib" /usr/local/lib/flyt-bundle/
  done
  echo /usr/local/lib/flyt-bundle >/etc/ld.so.conf.d/flyt-bundle.conf
  ldconfig
  [ -f /etc/netconfig ] || cp "$bundle/syslib/netconfig" /etc/netconfig 2>/dev/null
fi
# The binaries look for source files under the source path they were built with.
if [ -f "$bundle/BUILD_DIR" ]; then
  built_src=$(dirname "$(cat "$bundle/BUILD_DIR")")
  if [ "$built_src" != "$src" ] && [ ! -e "$built_src" ]; then
    mkdir -p "$(dirname "$built_src")"
    ln -s "$src" "$built_src"
  fi
  [ -e "$src/build" ] || ln -s "$bundle" "$src/build"
fi
build=$bundle

# step <name> <seconds> <command...>: bounded by its seconds and by the part's deadline.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS - 10))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -le 5 ]; then
    echo "$name: not run (the part's time is spent)" | tee -a "$summary"
    return
  fi
  local start=$SECONDS
  echo "=== $name (limit ${limit}s)"
  timeout -s KILL "$limit" bash -c '"$@"' "$name" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local verdict=passed
  case $rc in 0) ;; 77) verdict=skipped ;; 137) verdict="killed at ${limit}s" ;; *) verdict="FAILED ($rc)" ;; esac
  local tally
  tally=$(grep -E "^\[  (PASSED|FAILED)  \]|^\[  SKIPPED \] [0-9]+ test|^[0-9]+ passed, [0-9]+ failed|^SKIPPED" "$logs/$name.log" | head -3 | tr '\n' ' ')
  echo "$name: $verdict in $((SECONDS - start))s ${tally}" | tee -a "$summary"
  grep -E "^FAIL|^\[  FAILED  \]" "$logs/$name.log" | head -20 | sed 's/^/    /' | tee -a "$summary"
}

gtest() { # gtest <binary name> [filter]
  local bin
  bin=$(find "$build" -type f -name "$1" | head -1)
  [ -n "$bin" ] || { echo "FAIL: $1 is not in $build"; return 1; }
  "$bin" ${2:+--gtest_filter="$2"}
}

facts() {
  date -u +%Y-%m-%dT%H:%M:%SZ
  uname -r
  nvidia-smi
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,compute_mode,mig.mode.current \
    --format=csv
  command -v nvcc nvidia-cuda-mps-control
  ls /sys/kernel/btf/vmlinux
  ldconfig -p | grep -E 'libcuda\.so\.1|libcudart\.so\.13|libnvidia-ml\.so\.1'
  cat /etc/ld.so.conf /etc/ld.so.conf.d/*.conf 2>/dev/null
}

programs_gpu() {
  local names=()
  for p in "$build"/tests/programs/*; do [ -x "$p" ] && [ -f "$p" ] && names+=("$(basename "$p")"); done
  echo "${#names[@]} programs"
  bash "$src/tests/programs/run.sh" driver "$build" "${names[@]}"
}

# A load of known period (9 s busy, 3 s idle) on GPU 0 beside a node manager on the real GPUs;
# flytctl profile every 6 s, each answer kept with the seconds since the load began.
profile_cyclic() {
  local port=12401 started=$SECONDS nm
  "$build/bin/flyt-node-manager" --listen "127.0.0.1:$port" >"$logs/node-manager.log" 2>&1 &
  nm=$!
  python3 - <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda")
end = time.time() + 130
while time.time() < end:
    t = time.time()
    while time.time() - t < 9:  # 9 s of GPU work: synchronized, so the queue stays short
        a = torch.tanh(a @ a)
        torch.cuda.synchronize()
    time.sleep(3)
PY
  local load=$!
  while [ $((SECONDS - started)) -lt 135 ]; do
    sleep 6
    echo "--- t=$((SECONDS - started))s"
    "$build/bin/flytctl" profile --node "http://127.0.0.1:$port" 0 2>&1 | head -30
  done
  echo "--- final, as JSON"
  "$build/bin/flytctl" profile --node "http://127.0.0.1:$port" 0 -o json 2>&1 | head -c 20000
  kill "$load" "$nm" 2>/dev/null
  wait
}

export -f gtest facts programs_gpu profile_cyclic
# One flyt-gpu-server with --sm-count under an MPS control daemon of its own, without the cluster:
# its log (each client process's context grant) and what sm_throughput sees, for 32 and 96 SMs.
mps_direct() {
  local dir
  dir=$(mktemp -d -t flyt-mps-direct.XXXXXX)
  mkdir -p "$dir/pipe" "$dir/log"
  export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log
  CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING=1 nvidia-cuda-mps-control -d
  sleep 2
  for sms in 32 96; do
    "$build/bin/flyt-gpu-server" --backend driver --listen "unix:$dir/g$sms.sock" --sm-count "$sms" \
      --memory-limit-mb 8192 --log-level debug >"$dir/server$sms.log" 2>&1 &
    local server=$!
    for _ in $(seq 100); do [ -S "$dir/g$sms.sock" ] && break; sleep 0.1; done
    FLYT_SERVER="unix:$dir/g$sms.sock" LD_LIBRARY_PATH="$build/lib/flyt" \
      timeout 120 "$build/tests/remote/sm_throughput" | grep -E "^(sms|prop_sms|throughput|elapsed_ms)="
    kill "$server"
    wait "$server" 2>/dev/null
    echo "--- server log, --sm-count $sms:"
    grep -vE "connected|disconnected|released" "$dir/server$sms.log" | tail -15
  done
  echo quit | nvidia-cuda-mps-control
  sleep 1
  rm -rf "$dir"
}

export build src logs
export -f mps_direct
case $part in
  core)
    step facts 30 facts
    step real_nvml_test 120 gtest real_nvml_test
    step driver_backend_gpu_test 120 gtest driver_backend_gpu_test 'DriverBackendGpuTest.*'
    step driver_graphs_gpu_test 120 gtest driver_graphs_gpu_test 'DriverGraphsGpuTest.*'
    step driver_arrays_gpu_test 120 gtest driver_arrays_gpu_test
    step driver_managed_gpu_test 120 gtest driver_managed_gpu_test
    step programs_gpu 300 programs_gpu
    step remote_gpu 300 bash "$src/tests/e2e/remote_gpu_test.sh" "$build" "$src"
    ;;
  service)
    step remote_mps_gpu 300 bash "$src/tests/e2e/remote_mps_gpu_test.sh" "$build" "$src"
    step trace_gpu 200 bash "$src/tests/e2e/trace_gpu_test.sh" "$build" "$src"
    step profile_cyclic 160 profile_cyclic
    ;;
  recheck)  # what failed in a first pass, after fixes
    step facts 30 facts
    step programs_gpu 300 programs_gpu
    step remote_mps_gpu 300 bash "$src/tests/e2e/remote_mps_gpu_test.sh" "$build" "$src"
    step mps_direct 120 mps_direct
    step trace_gpu 200 bash "$src/tests/e2e/trace_gpu_test.sh" "$build" "$src"
    ;;
  mps)  # e2e.remote_mps_gpu five times: the SM shares must hold in every run
    for round in 1 2 3 4 5; do
      step "remote_mps_gpu_$round" 120 bash "$src/tests/e2e/remote_mps_gpu_test.sh" "$build" "$src"
    done
    ;;
  bench)
    step graphs_bench 120 env BACKEND=driver bash "$src/bench/graphs_bench.sh" "$build"
    step managed_bench 120 env BACKEND=driver bash "$src/bench/managed_bench.sh" "$build"
    step remote_bench 300 bash "$src/bench/remote_bench.sh" "$build" --backend driver \
      --iterations 20000 --repeats 3
    ;;
  migrate)
    step driver_malloc_at 120 gtest driver_backend_gpu_test 'DriverBackendGpuTest.MallocAt*'
    step remote_migrate_gpu 300 env FLYT_TEST_BACKEND=driver \
      bash "$src/tests/e2e/remote_migrate_test.sh" "$build" "$src"
    ;;
  *)
    echo "unknown part: $part (core, service, recheck, mps, bench or migrate)" >&2
    exit 2
    ;;
esac
tar -C "$out" -czf "$out/$part-logs.tar.gz" "$part"
echo "===== summary ($part)"
cat "$summary"
