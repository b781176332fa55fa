#!/usr/bin/env bash
# Quick start, command 1: installs what flyt needs, builds it, and shows this machine's GPUs.
#
# On a machine without an NVIDIA driver (no libnvidia-ml.so.1, no nvidia-smi) it shows simulated
# GPUs instead, from FLYT_SIM_SCENARIO (default: sim/scenarios/h100x8-training.toml), and says so.
# Arguments go to `flytctl gpus`: scripts/run.sh --watch, scripts/run.sh --json, ...
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

scripts/install-deps.sh
log=$(mktemp)
if ! scripts/build.sh >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  echo "flyt: build failed (output above)" >&2
  exit 1
fi
rm -f "$log"

has_driver() {
  ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1 ' && return 0
  command -v nvidia-smi >/dev/null 2>&1 && return 0
  return 1
}

if [ -z "${FLYT_NVML_LIBRARY:-}" ] && ! has_driver; then
  export FLYT_NVML_LIBRARY="$root/build/lib/libflyt-sim-nvml.so"
  export FLYT_SIM_SCENARIO="${FLYT_SIM_SCENARIO:-sim/scenarios/h100x8-training.toml}"
  # Start somewhere in the scenario's cycle, so that runs differ the way a live node would.
  export FLYT_SIM_START="${FLYT_SIM_START:-$(( $(date +%s) % 3600 ))}"
  export FLYT_SIM_REASON="no NVIDIA driver on this machine: no libnvidia-ml.so.1, no nvidia-smi"
fi
exec "$root/build/bin/flytctl" gpus "$@"
