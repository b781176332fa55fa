#!/usr/bin/env bash
# End to end: flyt-gpu-server as a remote lease's server (what the node manager starts), with the
# simulated device. Checks: `probe` prints the device as JSON; a secret file others may read is
# refused at start, in words; --ready-file holds the address, pid, SM counts and memory; a program
# through flyt's libcudart sees its share (multiProcessorCount = the granted SMs, 33 asked rounded
# up to 40; cudaMemGetInfo total and totalGlobalMem = --memory-limit-mb); a program without the
# secret, or with a wrong one, fails with cudaErrorInitializationError and a message that says
# why, the refusals are counted (refused_auth) and the server serves the right secret after them;
# SIGTERM drains (exit 0, ready file removed).
# Usage: remote_share_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d -t flyt-remote-share.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
program=$build/tests/remote/share_info
remote_setup "$build" "$program"

# ---- probe ----
probe=$("$server_bin" probe --backend sim)
check "probe exits 0" test $? = 0
check "probe: 132 SMs" test "$(jq_py 'print(d["sm_count_total"])' <<<"$probe")" = 132
check "probe: granularity 8" test "$(jq_py 'print(d["sm_granularity"])' <<<"$probe")" = 8
check "probe: memory" test "$(jq_py 'print(d["memory_total_mb"])' <<<"$probe")" = 81559
check "probe: simulated sim" test "$(jq_py 'print(d["backend"], d["simulated"], d["mps"])' \
  <<<"$probe")" = "sim True False"
check "probe: name" contains "$(jq_py 'print(d["name"])' <<<"$probe")" "H100"
out=$("$server_bin" probe --backend driver --cuda-library /nonexistent/libcuda.so.1 2>&1)
check "probe of an unusable driver fails" test $? != 0
check "... saying why" contains "$out" "/nonexistent/libcuda.so.1"

# ---- the secret file ----
secret=$(python3 -c 'import secrets; print(secrets.token_urlsafe(36))')
printf '%s\n' "$secret" >"$tmp/secret"
chmod 644 "$tmp/secret"
port=$(free_port)
out=$("$server_bin" --backend sim --listen "127.0.0.1:$port" --secret-file "$tmp/secret" 2>&1)
check "a secret file others may read is refused at start" test $? != 0
check "... saying how to fix it" contains "$out" "chmod 600"
check "... without printing the secret" bash -c '! grep -qF -- "$1" <<<"$2"' _ "$secret" "$out"
: >"$tmp/empty"
chmod 600 "$tmp/empty" "$tmp/secret"
out=$(FLYT_SERVER_SECRET_FILE=$tmp/empty "$server_bin" --backend sim \
  --listen "127.0.0.1:$port" 2>&1)
check "an empty secret file (from FLYT_SERVER_SECRET_FILE) is refused" contains "$out" "is empty"

# ---- a lease's server ----
"$server_bin" --backend sim --listen "127.0.0.1:$port" --secret-file "$tmp/secret" \
  --sm-count 33 --memory-limit-mb 4096 --ready-file "$tmp/ready.json" --stop-grace 5 \
  >>"$tmp/server.log" 2>&1 &
server_pid=$!
pids+=($server_pid)
check "the ready file appears" wait_for 20 test -s "$tmp/ready.json"
ready=$(cat "$tmp/ready.json" 2>/dev/null || echo '{}')
field_is() { test "$(jq_py "print(d.get('$1'))" <<<"$ready")" = "$2"; }
check "ready: address" field_is address "127.0.0.1:$port"
check "ready: pid" field_is pid "$server_pid"
check "ready: total SMs" field_is sm_count_total 132
check "ready: 33 SMs asked, 40 granted" field_is sm_count_granted 40
check "ready: memory total" field_is memory_total_mb 81559
check "ready: memory limit" field_is memory_limit_mb 4096
check "ready: backend" field_is backend sim
check "ready: simulated" field_is simulated True
check "ready: mps" field_is mps False
check "the secret is not in the server's log" bash -c '! grep -qF -- "$1" "$2"' _ "$secret" \
  "$tmp/server.log"

run() {
  local name=$1
  shift
  run_bounded 60 "$name" env FLYT_SERVER="127.0.0.1:$port" LD_LIBRARY_PATH="$runtime_dir" "$@" \
    "$program"
}
run missing
check "no secret: the program fails" test "$(cat "$tmp/missing.rc")" = 1
check "... with cudaErrorInitializationError" grep -q "^error=3 cudaErrorInitializationError" \
  "$tmp/missing.out"
check "... and the runtime says why" grep -q "refused this client: wrong or missing secret" \
  "$tmp/missing.out"
run wrong FLYT_SERVER_SECRET="${secret}x"
check "a wrong secret: cudaErrorInitializationError" grep -q "^error=3 " "$tmp/wrong.out"
run right FLYT_SERVER_SECRET="$secret"
check "the right secret is served after the refusals" test "$(cat "$tmp/right.rc")" = 0 || \
  cat "$tmp/right.out"
check "the program sees its 40 SMs (properties)" grep -qx "sms=40" "$tmp/right.out"
check "the program sees its 40 SMs (attribute)" grep -qx "attr_sms=40" "$tmp/right.out"
check "totalGlobalMem is the memory limit" grep -qx "total_global_mb=4096" "$tmp/right.out"
check "cudaMemGetInfo total is the memory limit" grep -qx "mem_total_mb=4096" "$tmp/right.out"
check "cudaMemGetInfo free is within it" grep -qx "mem_free_mb=4096" "$tmp/right.out"
stats=$(FLYT_SERVER_SECRET=$secret "$server_bin" stats --server "127.0.0.1:$port")
check "stats count the refusals" test \
  "$(jq_py 'print(d["connections"]["refused_auth"])' <<<"$stats")" = 2
check "stats without the secret are refused" bash -c '! "$1" stats --server "$2" 2>/dev/null' _ \
  "$server_bin" "127.0.0.1:$port"
check "refusals are logged" grep -q "wrong or missing secret" "$tmp/server.log"

# ---- SIGTERM drains ----
kill -TERM "$server_pid"
wait "$server_pid"
check "SIGTERM: exit 0" test $? = 0
check "SIGTERM: the ready file is removed" test ! -e "$tmp/ready.json"
finish
