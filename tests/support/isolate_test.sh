#!/usr/bin/env bash
# The test harness's own test: tests/support/isolate.sh stops what a test left behind (a daemon in
# a session of its own, as a node manager's GPU server is) and fails the test for it; stops a test
# that runs past its limit with everything it started; passes a clean test's status through; and
# tests/support/leftovers.sh finds a process of the suite that escaped. Prints "N passed, N failed".
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'for n in daemon-sleep hang-main hang-child escaped; do pkill -9 -fx "$tmp/$n 300"; done; rm -rf "$tmp"' EXIT
passes=0
failures=0
check() {
  local name=$1
  shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; failures=$((failures + 1)); fi
}
# The processes below are named with exec -a: their whole command line is "<name> 300".
alive() { pgrep -fx "$1 300" >/dev/null; }
gone() { ! alive "$1"; }

# A daemon that outlives the test: setsid, double fork, no output held.
cat >"$tmp/leaky.sh" <<EOS
#!/usr/bin/env bash
( setsid bash -c 'exec -a "$tmp/daemon-sleep" sleep 300' </dev/null >/dev/null 2>&1 & )
echo started
EOS
# A test that hangs, with a child of its own.
cat >"$tmp/hang.sh" <<EOS
#!/usr/bin/env bash
bash -c 'exec -a "$tmp/hang-child" sleep 300' &
exec -a "$tmp/hang-main" sleep 300
EOS
chmod +x "$tmp/leaky.sh" "$tmp/hang.sh"

for mode in cgroup tag; do
  cgroup=1
  [ "$mode" = tag ] && cgroup=0
  out=$(FLYT_TEST_CGROUP=$cgroup "$here/isolate.sh" --timeout 30 "$tmp/leaky.sh" 2>&1)
  rc=$?
  check "$mode: a test that leaves a daemon fails" test "$rc" = 1
  check "$mode: the daemon is named" grep -q "left running: .*daemon-sleep" <<<"$out"
  check "$mode: the daemon is stopped" gone "$tmp/daemon-sleep"

  out=$(FLYT_TEST_CGROUP=$cgroup "$here/isolate.sh" --timeout 1 "$tmp/hang.sh" 2>&1)
  rc=$?
  check "$mode: a test past its limit exits 124" test "$rc" = 124
  check "$mode: and says so" grep -q "timed out after 1 s" <<<"$out"
  check "$mode: its processes are stopped" eval 'gone "$tmp/hang-main" && gone "$tmp/hang-child"' 

  FLYT_TEST_CGROUP=$cgroup "$here/isolate.sh" --timeout 30 sh -c 'exit 3' 2>/dev/null
  check "$mode: a test's own status passes through" test $? = 3
  FLYT_TEST_CGROUP=$cgroup "$here/isolate.sh" --timeout 30 true 2>/dev/null
  check "$mode: a clean test passes" test $? = 0
done

# The suite's closing check.
suite="isolate-test-$$"
( FLYT_TEST_SUITE=$suite setsid bash -c "exec -a '$tmp/escaped' sleep 300" </dev/null >/dev/null 2>&1 & )
for _ in $(seq 50); do alive "$tmp/escaped" && break; sleep 0.1; done
out=$("$here/leftovers.sh" "$suite" 2>&1)
check "leftovers: an escaped process fails the suite" test $? = 1
check "leftovers: it is named" grep -q "left running: .*escaped" <<<"$out"
for _ in $(seq 50); do alive "$tmp/escaped" || break; sleep 0.1; done
check "leftovers: it is stopped" gone "$tmp/escaped"
"$here/leftovers.sh" "$suite" >/dev/null 2>&1
check "leftovers: nothing left passes" test $? = 0

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
