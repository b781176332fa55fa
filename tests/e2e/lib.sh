# Shared by the e2e scripts (sourced): counted checks and the closing "N passed, N failed" line,
# the test's child processes, polling helpers.
passes=0
failures=0

# check <name> <condition command...>
check() {
  local name=$1
  shift
  if "$@"; then
    passes=$((passes + 1))
  else
    echo "FAIL: $name"
    failures=$((failures + 1))
  fi
}

# contains <text> <substring>
contains() { grep -qF -- "$2" <<<"$1"; }

# finish: prints the tally and exits non-zero on any failure.
finish() {
  echo "$passes passed, $failures failed"
  [ "$failures" -eq 0 ]
}

# free_port: a TCP port free on loopback now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_for <seconds> <command...>: polls until the command succeeds (pass a function, not a
# $(...) argument, so that it is evaluated at every poll).
wait_for() {
  local limit=$1
  shift
  for _ in $(seq 1 $((limit * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

# jq_py <python>: runs python with the JSON on stdin as `d`.
jq_py() { python3 -c "import json,sys; d=json.load(sys.stdin); $1"; }

# The child processes a test starts: append each pid to `pids`; stop_children kills and reaps
# them (call it from the test's EXIT trap).
pids=()
stop_children() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}

# remote_setup <build dir> <program>: for the remote-CUDA scripts. Sets server_bin and runtime_dir,
# clears the FLYT_* variables a caller's shell may hold, and skips the test (exit 77) when flyt's
# libcudart.so.13, flyt-gpu-server or the nvcc-built <program> is missing (no CUDA toolkit).
remote_setup() {
  server_bin=$1/bin/flyt-gpu-server
  runtime_dir=$1/lib/flyt
  unset FLYT_SERVER FLYT_SIM_DEVICE FLYT_LOG_LEVEL FLYT_STRICT_ERRORS
  if [ ! -x "$server_bin" ] || [ ! -f "$runtime_dir/libcudart.so.13" ] || [ ! -x "$2" ]; then
    echo "SKIPPED: flyt's libcudart.so.13 or the nvcc-built test programs are missing (no CUDA toolkit)"
    exit 77
  fi
}
