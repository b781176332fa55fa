#!/usr/bin/env bash
# isolate.sh --timeout <seconds> [--] <command...>
#
# Runs one test (CTest puts it in front of every test: the e2e scripts' COMMAND, and each GoogleTest
# case through the executables' CROSSCOMPILING_EMULATOR) so that whatever the test started is
# stopped when it ends, also when it fails, crashes or runs out of time:
#
# - Every process of the test carries FLYT_TEST_TAG=<unique tag> in its environment (inherited
#   across fork, setsid and double forks, as by the GPU servers a node manager starts).
# - Where a cgroup v2 hierarchy is writable (root), the test runs in a cgroup of its own, so even a
#   process that scrubbed its environment is found; elsewhere the tag alone finds them.
# - At <seconds> (set below CTest's own TIMEOUT, so that CTest never kills this script first) the
#   test is stopped: "isolate: timed out" and exit 124.
# - After the test, anything of it still running is listed ("isolate: left running: PID CMD"),
#   killed, and the test fails (exit 1) even if it passed: a test must stop what it started.
#   FLYT_TEST_LEAKS=report keeps the test's own exit status (the listing and the kill still happen).
#
# The tag of the whole suite (FLYT_TEST_SUITE, set by scripts/test.sh) is passed on, so that the
# suite's closing check (tests/support/leftovers.sh) finds anything that escaped.
set -u

timeout=0
if [ "${1:-}" = --timeout ]; then
  timeout=$2
  shift 2
fi
[ "${1:-}" = -- ] && shift
if [ $# -eq 0 ]; then
  echo "usage: isolate.sh --timeout <seconds> [--] <command...>" >&2
  exit 2
fi

tag="t$$.$(date +%s%N)"

# The cgroup v2 mount (/sys/fs/cgroup on a unified system, /sys/fs/cgroup/unified on a hybrid one).
cg=""
if [ "${FLYT_TEST_CGROUP:-1}" != 0 ]; then
  root=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts 2>/dev/null)
  if [ -n "$root" ] && mkdir -p "$root/flyt-tests" 2>/dev/null &&
      mkdir "$root/flyt-tests/$tag" 2>/dev/null; then
    cg="$root/flyt-tests/$tag"
  fi
fi

# tagged_pids: the pids of the test's processes still alive (not this script's own): the cgroup's
# members where there is one (every descendant stays in it), else the processes with the tag.
tagged_pids() {
  if [ -n "$cg" ]; then
    grep -vx "$$" "$cg/cgroup.procs" 2>/dev/null
    return 0
  fi
  grep -lzx "FLYT_TEST_TAG=$tag" /proc/[0-9]*/environ 2>/dev/null |
    sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p' | grep -vx "$$"
}

# stop_all: kills every process of the test (cgroup.kill where there is one, then by tag), bounded.
stop_all() {
  local i pid
  for i in 1 2 3 4 5; do
    [ -n "$cg" ] && [ -w "$cg/cgroup.kill" ] && echo 1 >"$cg/cgroup.kill" 2>/dev/null
    local left=0
    for pid in $(tagged_pids); do
      kill -9 "$pid" 2>/dev/null && left=1
    done
    [ "$left" = 0 ] && return 0
    sleep 0.2
  done
}

cleanup_cgroup() {
  [ -n "$cg" ] || return 0
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    rmdir "$cg" 2>/dev/null && return 0
    sleep 0.1
  done
}

# The test itself: into the cgroup first, then exec.
(
  if [ -n "$cg" ]; then echo "$BASHPID" >"$cg/cgroup.procs" 2>/dev/null; fi
  export FLYT_TEST_TAG=$tag
  exec "$@"
) &
child=$!

timed_out="${TMPDIR:-/tmp}/flyt-isolate-$tag.timeout"
watchdog=""
if [ "$timeout" != 0 ]; then
  # The watchdog holds none of the test's output (CTest reads it through a pipe).
  (
    trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
    sleep "$timeout" &
    sleeper=$!
    wait "$sleeper" || exit 0
    : >"$timed_out"
    kill -TERM "$child" 2>/dev/null
    sleep 2 &
    sleeper=$!
    wait "$sleeper" || exit 0
    kill -9 "$child" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  watchdog=$!
fi

on_signal() {
  [ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
  kill -TERM "$child" 2>/dev/null
  stop_all
  cleanup_cgroup
  exit 143
}
trap on_signal TERM INT HUP

wait "$child"
rc=$?
[ -n "$watchdog" ] && { kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null; }

if [ -e "$timed_out" ]; then
  rm -f "$timed_out"
  echo "isolate: timed out after ${timeout} s; stopping the test's processes" >&2
  rc=124
fi

left=$(tagged_pids)
if [ -n "$left" ]; then
  for pid in $left; do
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
    echo "isolate: left running: $pid ${cmd:-?}" >&2
  done
  stop_all
  if [ "$rc" = 0 ] && [ "${FLYT_TEST_LEAKS:-fail}" != report ]; then
    echo "isolate: the test left processes running (listed above); they are stopped now" >&2
    rc=1
  fi
fi
cleanup_cgroup
exit "$rc"
