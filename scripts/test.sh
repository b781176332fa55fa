#!/usr/bin/env bash
# Quick start, command 2: installs what flyt needs, builds everything with warnings as errors, checks
# every file with clang's front end (-Wthread-safety among its warnings), then runs every test (CTest
# labels: unit, sim, e2e, gpu — gpu tests skip without a GPU), and fails if any process the tests
# started is still running. Extra arguments go to ctest (e.g. -L unit, -R Scenario). Each phase's
# wall time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

phases=()
phase_start=$SECONDS
phase_done() {
  local took=$((SECONDS - phase_start))
  phases+=("$(printf '%-22s %3dm%02ds' "$1" $((took / 60)) $((took % 60)))")
  phase_start=$SECONDS
}
print_phases() {
  echo "phases (wall time):"
  printf '  %s\n' "${phases[@]}"
}

scripts/install-deps.sh
phase_done "packages"

# GCC builds the programs and tests, in unity batches (FLYT_UNITY_BUILD) and with line tables only
# (-g1: backtraces and gdb's line numbers, not every local), which together take well under half the
# time of one object per file with full debug info; it checks as much: warnings do not depend on
# either. A developer who wants full debug info configures build/ without them.
scripts/build.sh -DFLYT_WERROR=ON -DFLYT_UNITY_BUILD=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
phase_done "build (gcc)"

status=0
# clang's pass: the same tree, every file on its own, through clang's front end only (no objects):
# its warnings as errors, the lock contracts of common/mutex.h (-Wthread-safety) and each file
# including what it uses (the unity build above cannot see that). scripts/clang-check.py says how.
if command -v clang++-14 >/dev/null 2>&1 && [ "${FLYT_SKIP_CLANG:-0}" != 1 ]; then
  log=$(mktemp)
  # (The benchmarks are GCC's only: libbpf's LIBBPF_OPTS is a GNU extension clang's -Wpedantic
  # refuses.)
  if cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLYT_WERROR=ON \
        -DFLYT_BUILD_BENCH=OFF -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 >"$log" 2>&1 &&
      scripts/clang-check.py build-clang >>"$log" 2>&1; then
    echo "clang-14 check: ok ($(tail -1 "$log"))"
  else
    cat "$log"
    echo "clang-14 check: FAILED"
    status=1
  fi
  rm -f "$log"
  phase_done "check (clang)"
fi

# Every process the tests start carries this tag (tests/support/isolate.sh stops each test's own);
# the closing check finds any that escaped.
FLYT_TEST_SUITE="suite-$$-$(date +%s)"
export FLYT_TEST_SUITE
# shellcheck source=../tests/support/python_path.sh
. tests/support/python_path.sh
# One test more than there are cores: the longest e2e tests spend much of their time waiting on
# simulated workloads (node_profile and profiles_cluster, ~85 s each, mostly idle). On the 2-core
# CI VM that took the tests from 8.0 to 6.7 minutes; every test must pass on a loaded machine anyway.
ctest --test-dir build --output-on-failure -j"$(($(nproc) + 1))" "$@" || status=$?
tests/support/leftovers.sh "$FLYT_TEST_SUITE" || status=1
phase_done "tests"
print_phases
exit $status
