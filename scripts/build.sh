#!/usr/bin/env bash
# Configures (once) and builds flyt into build/: programs in build/bin, the simulated NVML library
# in build/lib. Extra arguments are passed to the first configure (e.g. -DFLYT_WERROR=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${FLYT_BUILD_DIR:-build}
# ccache (when installed) makes a rebuild of an unchanged file a cache hit, also across clones.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
fi
if [ ! -f "$build_dir/CMakeCache.txt" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" >/dev/null
fi
cmake --build "$build_dir" -- -j"$(nproc)"
