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

# Every step below that runs once per test avoids starting a process where bash can do it itself:
# the harness runs before each of ~1,100 test cases, and each fork costs ~10 ms on a loaded CI VM.
tag="t$$.${EPOCHREALTIME/./}"

# The cgroup v2 mount (/sys/fs/cgroup on a unified system, /sys/fs/cgroup/unified on a hybrid one).
cg=""
if [ "${FLYT_TEST_CGROUP:-1}" != 0 ]; then
  root=""
  while read -r _ mnt fstype _; do
    if [ "$fstype" = cgroup2 ]; then root=$mnt; break; fi
  done </proc/mounts 2>/dev/null
  if [ -n "$root" ] && { [ -d "$root/flyt-tests" ] || mkdir -p "$root/flyt-tests" 2>/dev/null; } &&
      mkdir "$root/flyt-tests/$tag" 2>/dev/null; then
    cg="$root/flyt-tests/$tag"
  fi
fi
# by_tag: whether processes are also looked up by their tag (a scan of every /proc/*/environ). Only
# where there is no cgroup, or the test could not be moved into it (see joined_cgroup below).
by_tag=1
[ -n "$cg" ] && by_tag=0

# find_left: sets `left` to the pids of the test's processes still alive (not this script's own):
# the cgroup's members where there is one (every descendant stays in it, even one that scrubbed
# its environment) and the processes that carry the tag where by_tag is set.
left=()
find_left() {
  local pid file
  left=()
  if [ -n "$cg" ]; then
    while read -r pid; do
      [ "$pid" != "$$" ] && left+=("$pid")
    done <"$cg/cgroup.procs" 2>/dev/null
  fi
  if [ "$by_tag" = 1 ]; then
    for file in $(grep -lzx "FLYT_TEST_TAG=$tag" /proc/[0-9]*/environ 2>/dev/null); do
      pid=${file#/proc/}
      pid=${pid%/environ}
      [ "$pid" != "$$" ] && [[ " ${left[*]} " != *" $pid "* ]] && left+=("$pid")
    done
  fi
}

# joined_cgroup: whether the test ran in its cgroup. cpu.stat is in every cgroup v2 group, with or
# without the cpu controller, and its usage_usec counts the CPU time of the group's processes: any
# process that ran there makes it non-zero.
joined_cgroup() {
  local key value
  while read -r key value; do
    if [ "$key" = usage_usec ]; then [ "$value" != 0 ]; return; fi
  done <"$cg/cpu.stat" 2>/dev/null
  return 1
}

# stop_all: kills every process of the test (cgroup.kill where there is one, then by tag), bounded.
stop_all() {
  local i pid
  for i in 1 2 3 4 5; do
    [ -n "$cg" ] && [ -w "$cg/cgroup.kill" ] && echo 1 >"$cg/cgroup.kill" 2>/dev/null
    local alive=0
    find_left
    for pid in "${left[@]}"; do
      kill -9 "$pid" 2>/dev/null && alive=1
    done
    [ "$alive" = 0 ] && return 0
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

# A signal to this script (CTest stopping the run) stops the test and all it started. Set before
# the test starts, so that no signal can leave it running.
child=""
on_signal() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  by_tag=1
  stop_all
  cleanup_cgroup
  exit 143
}
trap on_signal TERM INT HUP

# The test itself: into the cgroup first, then exec, under timeout(1) when there is a limit (it
# signals the test's whole process group: TERM at the limit, KILL 2 s later; exit 124 or 137).
(
  if [ -n "$cg" ]; then echo "$BASHPID" >"$cg/cgroup.procs" 2>/dev/null; fi
  export FLYT_TEST_TAG=$tag
  if [ "$timeout" != 0 ]; then exec timeout -k 2 "$timeout" "$@"; fi
  exec "$@"
) &
child=$!

wait "$child"
rc=$?
if [ "$timeout" != 0 ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; }; then
  echo "isolate: timed out after ${timeout} s; stopping the test's processes" >&2
  rc=124
fi

[ -n "$cg" ] && ! joined_cgroup && by_tag=1

# A process that is on its way out (a watcher that polls for the test's end, a child reaped a
# moment late) gets up to 3 s; what is still running then was left behind.
find_left
for ((i = 0; i < 30; i++)); do
  [ ${#left[@]} = 0 ] && break
  sleep 0.1
  find_left
done
if [ ${#left[@]} != 0 ]; then
  for pid in "${left[@]}"; do
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
