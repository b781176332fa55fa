# shellcheck shell=bash disable=SC2154,SC2034  # sourced: the script sets build, src, tmp, url, admin
# Shared by the e2e scripts (sourced): counted checks and the closing "N passed, N failed" line,
# the test's child processes, bounded waits, a program run under a watchdog, and the cluster
# manager's helpers (start a manager or a node manager, call the API, read a field).
#
# The script that sources this sets `build` and `src` (its two arguments) and `tmp` (its scratch
# directory) first; the cluster helpers also read `url` (the manager's address) and `admin` (an
# admin token) where the script has them. Its EXIT trap calls stop_children.
# shellcheck source=../support/python_path.sh
. "$(dirname "${BASH_SOURCE[0]}")/../support/python_path.sh"
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

# wait_for <seconds> <command...>: polls the command (output discarded) every 0.1 s until it
# succeeds, for at most <seconds> of wall time. On time-out it says on stderr what it waited for,
# and returns 1. Pass a command or a function, not a $(...) argument, so that it is evaluated at
# every poll.
wait_for() {
  local limit=$1
  shift
  local deadline=$((SECONDS + limit))
  while :; do
    "$@" >/dev/null 2>&1 && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "wait_for: gave up after ${limit} s waiting for: $*" >&2
      return 1
    fi
    sleep 0.1
  done
}

# jq_py <python>: runs python with the JSON on stdin as `d`.
jq_py() { python3 -c "import json,sys; d=json.load(sys.stdin); $1"; }

# The child processes a test starts: append each pid to `pids`; stop_children kills and reaps
# them, and any watchdog left (call it from the test's EXIT trap). It kills only processes that
# are still this test's: a child that ended long ago left its pid free, and the machine may have
# given it to another test's process since (pid_max is 32768 on the CI machines and the suite
# starts processes fast) — a blind kill once stopped another test's GPU server mid-run.
pids=()
watchdogs=()
stop_children() {
  for p in "${watchdogs[@]}" "${pids[@]}"; do ours "$p" && kill "$p" 2>/dev/null; done
  for p in "${watchdogs[@]}" "${pids[@]}"; do wait "$p" 2>/dev/null; done
}

# ours <pid>: whether the process is one of this test's. Under tests/support/isolate.sh: in the
# test's own cgroup (or one below it) where it has one, else carrying the test's FLYT_TEST_TAG. Outside it (a
# script run by hand), any live process.
ours() {
  local mine theirs
  [ -r "/proc/$1/cgroup" ] || return 1
  [ -n "${FLYT_TEST_TAG:-}" ] || return 0
  read -r mine <"/proc/$$/cgroup"
  if [[ $mine == */flyt-tests/* ]]; then
    read -r theirs <"/proc/$1/cgroup" 2>/dev/null
    [[ ${theirs:-} == "$mine" || ${theirs:-} == "$mine"/* ]]
    return
  fi
  tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -qxF "FLYT_TEST_TAG=$FLYT_TEST_TAG"
}

# run_bounded <seconds> <name> <command...>: runs the command with its output in $tmp/<name>.out,
# its pid in $tmp/<name>.pid and its exit status in $tmp/<name>.rc; a watchdog kills it (-9) if
# it runs longer than <seconds>. The watchdog holds none of the test's output (so a caller reading
# it through a pipe, as ctest does, is not kept waiting) and starts no process that could outlive
# it: it waits with bash's own `read -t` on a pipe nobody writes to (a `sleep` child was left
# running when the command ended before the watchdog had set its trap, as on a loaded machine).
run_bounded() {
  local limit=$1 name=$2
  shift 2
  "$@" >"$tmp/$name.out" 2>&1 &
  local pid=$!
  echo "$pid" >"$tmp/$name.pid"
  (
    exec {never}<> <(:)
    read -r -t "$limit" -u "$never" || kill -9 "$pid" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  local watchdog=$!
  watchdogs+=("$watchdog")
  wait "$pid"
  echo $? >"$tmp/$name.rc"
  kill "$watchdog" 2>/dev/null
  wait "$watchdog" 2>/dev/null
}

# rc_of <name>: the exit status of a program run_bounded ran.
rc_of() { cat "$tmp/$1.rc"; }
# A program's API calls all succeeded: it exited 0. A tests/cuda program that does not honour
# FLYT_SIM_DEVICE yet fails only its result check ("FAIL: ..."), never an API call ("... failed:").
api_ok() {
  local name=$1
  [ "$(rc_of "$name")" = 0 ] && return 0
  if grep -q "^FAIL: " "$tmp/$name.out" && ! grep -q " failed: " "$tmp/$name.out"; then
    echo "note: $name checked kernel results on the simulated device (FLYT_SIM_DEVICE ignored)"
    return 0
  fi
  echo "--- $name output:"
  cat "$tmp/$name.out"
  return 1
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

# profiles_scenario <dir>: sim/scenarios/profiles.toml (and its CSV data) copied into <dir>, with
# the notebook GPU's memory held by a real process — a copy of sleep named jupyter-lab, started
# here — so that its name and owner come from /proc. Sets notebook_pid and notebook_owner.
profiles_scenario() {
  local dir=$1
  mkdir -p "$dir/data"
  cp "$(command -v sleep)" "$dir/jupyter-lab"
  "$dir/jupyter-lab" 600 &
  notebook_pid=$!
  pids+=("$notebook_pid")
  notebook_owner=$(id -un)
  cp "$src"/sim/scenarios/data/profiles-*.csv "$dir/data/"
  sed "s/^pid = 61200$/pid = $notebook_pid/" "$src/sim/scenarios/profiles.toml" >"$dir/profiles.toml"
  grep -q "^pid = $notebook_pid$" "$dir/profiles.toml"
}

# ---- the cluster manager and its node managers -------------------------------------------------

# cluster_config [store url]: the usual test cluster manager's set-up. Sets the tokens $admin,
# $node_token and $alice (roles admin, node, client), a free $port and $url, and writes
# $tmp/cm.toml with [manager] (listen there, the store — default a SQLite file under $tmp/var —
# and var_dir $tmp/var) and [auth]; more TOML tables (not [manager] or [auth]) come on stdin.
cluster_config() {
  local store=${1:-sqlite:$tmp/var/flyt.db}
  admin=admin-token-000000000000
  node_token=node-token-0000000000000
  alice=alice-token-000000000000
  port=$(free_port)
  url="http://127.0.0.1:$port"
  {
    cat <<EOF
[manager]
listen = "127.0.0.1:$port"
store = "$store"
var_dir = "$tmp/var"
[auth]
tokens = [
  { name = "admin", token = "$admin", role = "admin" },
  { name = "nodes", token = "$node_token", role = "node" },
  { name = "alice", token = "$alice", role = "client" },
]
EOF
    cat
  } >"$tmp/cm.toml"
}

# start_manager <address> <log> [flyt-cluster-manager args...]: starts a cluster manager and waits
# until http://<address>/healthz answers. Sets manager_pid.
manager_pid=""
start_manager() {
  local address=$1 log=$2
  shift 2
  "$build/bin/flyt-cluster-manager" "$@" >>"$log" 2>&1 &
  manager_pid=$!
  pids+=("$manager_pid")
  wait_for 20 curl -sf "http://$address/healthz"
}

# gpu_servers_config <file> <backend> <state dir> <drain grace s>: a node manager's config that
# serves remote leases — heartbeats every second, [gpu-servers] enabled on every GPU (shared)
# with $build's flyt-gpu-server, on 40 ports from a random base of its own (ctest runs tests
# side by side). More [gpu-servers] keys come on stdin.
gpu_servers_config() {
  local file=$1 backend=$2 state_dir=$3 grace=$4 port_min=$((20000 + RANDOM % 20000))
  {
    cat <<EOF
[cluster-manager]
heartbeat_interval_s = 1
[gpu-servers]
enabled = true
binary = "$build/bin/flyt-gpu-server"
backend = "$backend"
port_min = $port_min
port_max = $((port_min + 39))
state_dir = "$state_dir"
drain_grace_s = $grace
shared = "all"
EOF
    [ -t 0 ] || cat
  } >"$file"
}

# start_node <name> <scenario> <manager url> <token> [flyt-node-manager args...]: a node manager
# on the simulated scenario sim/scenarios/<scenario>.toml, on a free loopback port, reporting to
# the manager with the token; log in $tmp/<name>.log. FLYT_SIM_START in the caller's environment
# passes through. Records its pid in node_pids[<name>] and its port in node_ports[<name>].
declare -A node_pids=() node_ports=()
# A node manager traces every CUDA program on the machine when it runs as root: one started by a
# test that is not about tracing gets [trace] enabled = false (appended to its --config file, or
# in a file of its own), so that tests running side by side do not trace each other's programs.
start_node() {
  local name=$1 scenario=$2 manager=$3 token=$4
  shift 4
  local args=("$@") i has_config=""
  for ((i = 0; i < ${#args[@]}; i++)); do
    if [ "${args[$i]}" = "--config" ] && [ $((i + 1)) -lt ${#args[@]} ]; then
      has_config=${args[$((i + 1))]}
    fi
  done
  if [ -z "$has_config" ]; then
    printf '[trace]\nenabled = false\n' >"$tmp/$name.trace-off.toml"
    set -- "$@" --config "$tmp/$name.trace-off.toml"
  elif ! grep -q '^\[trace\]' "$has_config"; then
    printf '\n[trace]\nenabled = false\n' >>"$has_config"
  fi
  local port
  port=$(free_port)
  FLYT_NVML_LIBRARY="$build/lib/libflyt-sim-nvml.so" \
    FLYT_SIM_SCENARIO="$src/sim/scenarios/$scenario.toml" FLYT_TOKEN="$token" \
    "$build/bin/flyt-node-manager" --listen "127.0.0.1:$port" --name "$name" \
    --cluster-manager "$manager" "$@" >>"$tmp/$name.log" 2>&1 &
  node_pids[$name]=$!
  node_ports[$name]=$port
  pids+=($!)
}

# api <token> <method> <path> [json body]: a request to $url (the manager); prints the body, then
# the HTTP status on the last line. No token: "". The body may be @file.
api() {
  local token=$1 method=$2 path=$3
  shift 3
  local args=(-s -X "$method" -w '\n%{http_code}' "$url$path")
  [ -n "$token" ] && args+=(-H "Authorization: Bearer $token")
  [ $# -gt 0 ] && args+=(-H 'Content-Type: application/json' --data-binary "$1")
  curl "${args[@]}"
}
# code_of <api answer>: its HTTP status. body_of <api answer>: its body.
code_of() { tail -n1 <<<"$1"; }
body_of() { sed '$d' <<<"$1"; }
# field <api answer> <python expression on d, the body>: prints the expression's value.
field() { body_of "$1" | jq_py "print($2)"; }
# get_field <path> <python expression on d>: the expression on GET <path> as $admin.
get_field() { field "$(api "$admin" GET "$1")" "$2"; }

# http_code [curl args...]: the HTTP status of a request; the body goes to $tmp/http_body.
http_code() { curl -s -o "$tmp/http_body" -w '%{http_code}' "$@"; }

# Predicates for wait_for and check, as $admin on $url.
# job_status_is <job id> <status>
job_status_is() { test "$(get_field "/api/v1/jobs/$1" "d['status']")" = "$2"; }
# nodes_reachable <n>: exactly n nodes are reachable.
nodes_reachable() {
  test "$(get_field /api/v1/nodes "sum(1 for n in d['nodes'] if n['state']=='reachable')")" = "$1"
}
# job_samples_at_least <job id> <n>: the running job's monitoring session on its node (started
# by start_node) has taken at least n samples.
job_samples_at_least() {
  local where
  where=$(get_field "/api/v1/jobs/$1" "(d['gpu_info'] or {}).get('node', '') + ' ' + (d['monitoring_session'] or '')")
  local node=${where% *} session=${where#* }
  [ -n "$node" ] && [ -n "$session" ] && [ -n "${node_ports[$node]:-}" ] || return 1
  curl -sf "http://127.0.0.1:${node_ports[$node]}/api/v1/monitoring/sessions/$session" |
    jq_py "sys.exit(0 if d['sample_count'] >= $2 else 1)"
}

# ---- the demo (scripts/run.sh), as a README reader runs it ----------------------------------------

# marked_pids <mark>: the pids of the live processes (zombies aside) whose environment has
# FLYT_E2E_MARK=<mark>: what a demo started (its GPU servers inherit the mark from their node
# manager). One grep over every /proc/*/environ, not a pipeline per process: tests poll this.
marked_pids() {
  local file pid state
  for file in $(grep -lzxF "FLYT_E2E_MARK=$1" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${file#/proc/}
    pid=${pid%/environ}
    state=""
    while read -r key value _; do
      if [ "$key" = State: ]; then state=$value; break; fi
    done 2>/dev/null <"/proc/$pid/status"
    [ -z "$state" ] || [ "$state" = Z ] && continue
    echo "$pid"
  done
  return 0
}

# demo_checkout <root>: a checkout of our own at <root>, as the README's reader has one: the source
# tree's files, `build` -> the build under test ($build), and a var/ of our own for the demo's
# store and logs.
demo_checkout() {
  local root=$1 f
  mkdir -p "$root/var"
  for f in "$src"/*; do
    case $(basename "$f") in build | build-* | var) continue ;; esac
    ln -s "$f" "$root/$(basename "$f")"
  done
  ln -s "$build" "$root/build"
}

# demo_port: the first of 8 consecutive free loopback ports (the demo's manager and up to 7
# nodes) whose GPU-server ports (+100 to +139) are free too.
demo_port() {
  python3 - <<'PY'
import random, socket
for _ in range(500):
    p = random.randint(20000, 60000)
    socks = []
    try:
        for q in list(range(p, p + 8)) + list(range(p + 100, p + 140)):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", q))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(p)
    break
PY
}

# start_demo <root> <port> <mark>: runs <root>/scripts/run.sh (the build under test, no build of
# its own) on <port> as a terminal's foreground job: a session and process group of its own (its
# pid is the group's id), SIGINT not ignored (bash makes a script's background command ignore it;
# reset here), so that Ctrl-C can be pressed. Its output in $tmp/demo.out and demo.err; sets
# demo_pid and demo_pgid. Returns once it printed "Ctrl-C stops everything", or 1 after <limit>
# s (default 120) with its output and the ends of its logs shown.
start_demo() {
  local root=$1 demo_port=$2 mark=$3 limit=${4:-120} log
  (cd "$root" && exec env FLYT_E2E_MARK="$mark" FLYT_RUN_NO_BUILD=1 FLYT_DEMO_PORT="$demo_port" \
    python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setsid()
os.execvp(sys.argv[1], sys.argv[1:])' scripts/run.sh) >"$tmp/demo.out" 2>"$tmp/demo.err" &
  demo_pid=$!
  demo_pgid=$demo_pid
  pids+=("$demo_pid")
  if ! wait_for "$limit" grep -q "Ctrl-C stops everything" "$tmp/demo.out"; then
    echo "FAIL: the demo did not start; its output:"
    cat "$tmp/demo.out" "$tmp/demo.err"
    for log in "$root/var/demo-$demo_port"/*.log; do echo "== $log"; tail -n 20 "$log"; done
    return 1
  fi
}
