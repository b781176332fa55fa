# Shared by the CUDA tracer's end-to-end tests (trace_test.sh, trace_gpu_test.sh): sourced after
# lib.sh, with $build, $src and $tmp set. trace_preflight skips (77) with the reason where the
# tracer cannot be tested; the rest runs programs under flyt-trace, one session at a time, and
# checks each one's figures with tests/trace/check_trace.py.

skip() {
  echo "SKIPPED: $*"
  exit 77
}

# trace_preflight: root, flyt-trace built (sets $trace_bin), tracing available here; sets
# $programs (the nvcc-built programs of tests/trace) and $checker, and writes the wrapper $tmp/to.
trace_preflight() {
  [ "$(id -u)" = 0 ] || skip "flyt-trace needs root (BPF uprobes); running as uid $(id -u)"
  trace_bin=""
  local candidate
  for candidate in "$build/bin/flyt-trace" "$build/src/trace_tool/flyt-trace"; do
    [ -x "$candidate" ] && trace_bin=$candidate && break
  done
  [ -n "$trace_bin" ] || skip "flyt-trace is not built (looked in $build/bin and $build/src/trace_tool)"
  programs=$build/tests/trace
  checker=$src/tests/trace/check_trace.py
  "$trace_bin" --duration 0 >"$tmp/probe.json" 2>"$tmp/probe.err"
  local rc=$?
  if [ $rc = 3 ]; then
    skip "tracing is unavailable here: $(tr '\n' ' ' <"$tmp/probe.err")"
  elif [ $rc != 0 ]; then
    echo "FAIL: flyt-trace --duration 0 exited $rc:"
    cat "$tmp/probe.err"
    exit 1
  fi
  # A wrapper that runs a program with its output in a file of its own (the tracer's COMMAND runs
  # several), keeping its pid (exec).
  printf '#!/bin/sh\nout=$1\nshift\nexec "$@" >"$out" 2>&1\n' >"$tmp/to"
  chmod +x "$tmp/to"
}

# traced <session> [flyt-trace options...] -- <command...>: runs the command under flyt-trace
# (killed after 90 s); the JSON in $tmp/<session>.json, flyt-trace's own output in
# $tmp/<session>.out.
traced() {
  local session=$1
  shift
  local options=()
  while [ "$1" != "--" ]; do
    options+=("$1")
    shift
  done
  shift
  run_bounded 90 "$session" "$trace_bin" "${library_dirs[@]}" "${options[@]}" \
    --json "$tmp/$session.json" --ready-file "$tmp/$session.ready" -- "$@"
  check "$session: flyt-trace exits 0" test "$(cat "$tmp/$session.rc")" = 0
  if [ "$(cat "$tmp/$session.rc")" != 0 ]; then
    echo "--- flyt-trace output ($session):"
    tail -20 "$tmp/$session.out"
  fi
  check "$session: flyt-trace wrote its JSON" python3 -c "import json,sys; json.load(open(sys.argv[1]))" \
    "$tmp/$session.json"
  check "$session: no event lost, a library probed" python3 "$checker" --json "$tmp/$session.json" \
    --health --label "$session"
}
pid_of() { sed -n 's/^PID \([0-9]*\)$/\1/p' "$tmp/$1.prog" | head -1; }
passed() {  # passed <name>: the program ran to its end
  grep -q ": PASS$" "$tmp/$1.prog" && return 0
  echo "--- $1 output:"
  cat "$tmp/$1.prog"
  return 1
}
# expect <json session> <name> <check_trace.py args...>: the figures of program <name>.
expect() {
  local session=$1 name=$2
  shift 2
  check "$name: ran to its end" passed "$name"
  local pid
  pid=$(pid_of "$name")
  check "$name: figures as expected" python3 "$checker" --json "$tmp/$session.json" --pid "${pid:-0}" \
    --out "$tmp/$name.prog" --label "$name (pid ${pid:-?})" "$@"
}

# session <name>: starts the shell script flyt-trace's COMMAND runs for session <name>;
# step <session> [&] <program name> <command...>: adds a program to it (with "&": in the background;
# the script waits for every one at its end). Its output goes to $tmp/<program name>.prog.
session() { echo "#!/bin/sh" >"$tmp/$1.sh"; }
step() {
  local session=$1 background=""
  shift
  [ "$1" = "&" ] && background=" &" && shift
  local name=$1
  shift
  {
    printf '%q %q' "$tmp/to" "$tmp/$name.prog"
    printf ' %q' "$@"
    echo "$background"
  } >>"$tmp/$session.sh"
}
run_session() {  # run_session <session> [flyt-trace options...]
  local session=$1
  shift
  echo wait >>"$tmp/$session.sh"
  traced "$session" "$@" -- sh "$tmp/$session.sh"
}
