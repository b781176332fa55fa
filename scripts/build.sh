#!/usr/bin/env bash
# Configures (once) and builds flyt into build/: programs in build/bin, the simulated NVML library
# in build/lib. Extra arguments are passed to the first configure (e.g. -DFLYT_WERROR=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${FLYT_BUILD_DIR:-build}
if [ ! -f "$build_dir/CMakeCache.txt" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
cmake --build "$build_dir" -- -j"$(nproc)"
