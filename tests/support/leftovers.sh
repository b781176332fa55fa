#!/usr/bin/env bash
# leftovers.sh <suite tag>: the test suite's closing check. Lists every process still running that
# carries FLYT_TEST_SUITE=<suite tag> in its environment (scripts/test.sh exports it to ctest, so
# every process a test starts inherits it) other than this script's own ancestors, stops it, and
# exits 1 if there was any ("N left running"). tests/support/isolate.sh already stops each test's
# own processes when the test ends, so anything found here escaped it.
set -u
tag=$1
# This script and the shells and ctest above it carry the tag too.
ancestors=" "
pid=$$
while [ -n "$pid" ] && [ "$pid" != 0 ]; do
  ancestors+="$pid "
  pid=$(awk '/^PPid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
done
found=()
for env in $(grep -lzx "FLYT_TEST_SUITE=$tag" /proc/[0-9]*/environ 2>/dev/null); do
  pid=${env#/proc/}
  pid=${pid%/environ}
  [ "${ancestors/ $pid /}" = "$ancestors" ] || continue
  [ -d "/proc/$pid" ] && found+=("$pid")
done
if [ ${#found[@]} -eq 0 ]; then
  echo "leftovers: no process of the test suite is left running"
  exit 0
fi
for pid in "${found[@]}"; do
  echo "leftovers: left running: $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
done
kill -9 "${found[@]}" 2>/dev/null
echo "leftovers: ${#found[@]} left running by the test suite (stopped now)"
exit 1
