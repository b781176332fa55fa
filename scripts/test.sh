#!/usr/bin/env bash
# Quick start, command 2: installs what flyt needs, builds everything with warnings as errors
# (GCC, and clang-14 with -Wthread-safety as a compile check), then runs every test (CTest labels:
# unit, sim, e2e, gpu — gpu tests skip without a GPU). Extra arguments go to ctest (e.g. -L unit, -R Scenario).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh -DFLYT_WERROR=ON

status=0
# clang must build the same tree warning-free (its tests are not run: GCC's build runs them).
if command -v clang++-14 >/dev/null 2>&1 && [ "${FLYT_SKIP_CLANG:-0}" != 1 ]; then
  log=$(mktemp)
  if FLYT_BUILD_DIR=build-clang scripts/build.sh -DFLYT_WERROR=ON -DFLYT_BUILD_BENCH=OFF \
      -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 >"$log" 2>&1; then
    echo "clang-14 build: ok"
  else
    cat "$log"
    echo "clang-14 build: FAILED"
    status=1
  fi
  rm -f "$log"
fi

ctest --test-dir build --output-on-failure -j"$(nproc)" "$@" || status=$?
exit $status
