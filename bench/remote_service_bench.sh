#!/usr/bin/env bash
# Remote GPUs as a cluster service (issue 15): how long a CUDA program waits for its GPU server,
# and how soon the GPU share is free again once its last program has gone. On loopback, on a
# simulated GPU: a cluster manager, one node manager (sim scenario h100x8-idle) with [gpu-servers]
# enabled (flyt-gpu-server --backend sim) and a flyt-client-manager, as in
# tests/e2e/remote_service_test.sh. The program is tests/cuda/vector_add (FLYT_SIM_DEVICE=1,
# flyt's libcudart.so.13, no FLYT_SERVER: it asks the client manager).
#
# 1. Cold start: the program's wall time (exec to exit: its first CUDA call, three 4 MiB copies,
#    the kernel, the copy back, the frees) when no lease exists, so that its first CUDA call makes
#    the client manager ask the cluster manager for a lease, which has the node manager start a
#    GPU server for it. Split into steps by the timestamps of the logs (ms) and of the program's
#    own runtime lines (FLYT_LOG_LEVEL=info, stamped as they arrive on its stderr):
#      exec -> the client manager is asked    (process start, the runtime's first call, the socket)
#      asked -> the node starts the server    (client manager -> POST /api/v1/remote-leases ->
#                                             placement, durable write -> PUT on the node -> fork)
#      starting -> ready                      (flyt-gpu-server starts, writes its ready file; the
#                                             node manager polls for it every 50 ms)
#      ready -> lease granted                 (the node answers, the manager stores and answers,
#                                             the client manager takes it)
#      granted -> program connected            (the answer to the program, hello with the secret)
#      connected -> exit                       (the CUDA work itself and the process exit)
# 2. Warm start: the same program while a lease is held (a python process holds a connection to
#    the client-manager socket, as a running program would).
# 3. Release: seconds from the program's exit to its GPU share being free again (the lease is gone
#    from GET /api/v1/remote-leases, polled every 50 ms; and from GET /api/v1/gpus, whose body the
#    manager rebuilds at most once a second while heartbeats come in), with [client]
#    release_after = 2 s (each cold run above is also a release sample) and with the defaults
#    (release_after 30 s, ttl 60 s; --default-repeats runs).
#    Split into: the grace (exit -> the client manager releases), the release call (-> share
#    free), and the node's drain of the server (draining -> stopped, from its log).
#
#   bench/remote_service_bench.sh [build dir, default build] [--repeats N] [--default-repeats M]
#       [--out DIR]
#
# Prints Markdown tables (for docs/benchmarks.md) on stdout, progress on stderr. --out keeps the
# logs and the raw samples (JSON lines) in DIR.
set -uo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  build=$1
  shift
fi
repeats=11
default_repeats=3
out=
while [ $# -gt 0 ]; do
  case $1 in
    --repeats) repeats=$2; shift 2 ;;
    --default-repeats) default_repeats=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *)
      echo "usage: $0 [build dir] [--repeats N] [--default-repeats M] [--out DIR]" >&2
      exit 2
      ;;
  esac
done
build=$(cd "$build" && pwd)
program=$build/tests/cuda/vector_add
for f in "$build/bin/flyt-cluster-manager" "$build/bin/flyt-node-manager" \
  "$build/bin/flyt-gpu-server" "$build/bin/flyt-client-manager" "$build/lib/flyt/libcudart.so.13" \
  "$build/lib/libflyt-sim-nvml.so" "$program"; do
  [ -e "$f" ] || { echo "$0: $f is missing (build it first; the runtime needs the CUDA toolkit)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flyt-remote-service-bench.XXXXXX")
# shellcheck source-path=SCRIPTDIR source=../tests/e2e/lib.sh
. "$src/tests/e2e/lib.sh"
cleanup() {
  stop_children
  if [ -n "$out" ]; then mkdir -p "$out" && cp -r "$tmp"/. "$out"/; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
remote_setup "$build" "$program"
unset FLYT_CLIENT_MANAGER FLYT_CLIENT_MANAGER_TIMEOUT_MS FLYT_SERVER_SECRET
die() { echo "$0: $*" >&2; exit 1; }

# ---- the cluster (as tests/e2e/remote_service_test.sh) --------------------------------------
cluster_config <<EOF
[remote]
default_ttl_s = 10
EOF
mkdir -p "$tmp/var"
start_manager "127.0.0.1:$port" "$tmp/manager.log" --config "$tmp/cm.toml" ||
  die "the cluster manager did not start: $(tail -5 "$tmp/manager.log")"
gpu_servers_config "$tmp/node-a.toml" sim "$tmp/servers-a" 2 </dev/null
start_node gpu-a h100x8-idle "$url" "$node_token" --config "$tmp/node-a.toml"
wait_for 30 sh -c "curl -sf -H 'Authorization: Bearer $admin' $url/api/v1/gpus | grep -q sm_count" ||
  die "the node did not report its GPU-server capacity: $(tail -5 "$tmp/gpu-a.log")"

cmsock=$tmp/client-manager.sock
# client_manager_config <release_after line or ""> <ttl_seconds line or "">
client_manager_config() {
  cat >"$tmp/client-manager.toml" <<EOF
[client]
name = "client-1"
socket = "$cmsock"
$1
$2
[cluster-manager]
address = "$url"
token = "$alice"
[lease]
sm_percent = 25
memory_mb = 8192
EOF
}
cm_pid=""
start_client_manager() {
  rm -f "$cmsock"
  "$build/bin/flyt-client-manager" --config "$tmp/client-manager.toml" >>"$tmp/client-manager.log" 2>&1 &
  cm_pid=$!
  pids+=("$cm_pid")
  wait_for 20 test -S "$cmsock" || die "the client manager did not start: $(tail -5 "$tmp/client-manager.log")"
}
stop_client_manager() { kill -TERM "$cm_pid" 2>/dev/null; wait "$cm_pid" 2>/dev/null; }

lease_count() {
  field "$(api "$admin" GET /api/v1/remote-leases)" "sum(1 for l in d['remote_leases'] if l['state'] in ('starting','ready'))"
}
servers_running() {
  field "$(api "$admin" GET /api/v1/gpu-servers)" "sum(1 for s in d['servers'] if s['state'] in ('starting','running','draining'))"
}
# idle: no lease and no server: the next program starts cold.
idle() { test "$(lease_count)" = 0 && test "$(servers_running)" = 0; }

# ---- one run: the program, stamped; then (optionally) the release, polled --------------------
# sample.py <json out> <mode: cold|warm|release> -- <program>: runs the program with its stderr
# stamped; for cold and release runs polls GET /api/v1/gpus every 50 ms from its exit until its
# lease is gone from there, then waits for the node's "stopped" line; reads the client manager's
# and the node manager's new log lines (from the offsets at the start) and prints one JSON line.
cat >"$tmp/sample.py" <<'PY'
import datetime, json, os, re, subprocess, sys, threading, time, urllib.request

out, mode = sys.argv[1], sys.argv[2]
cmd = sys.argv[sys.argv.index("--") + 1:]
url, admin = os.environ["BENCH_URL"], os.environ["BENCH_ADMIN"]
logs = {"cm": os.environ["BENCH_CM_LOG"], "node": os.environ["BENCH_NODE_LOG"]}
offsets = {k: os.path.getsize(p) for k, p in logs.items()}

def stamp_of(line):
    m = re.match(r"(\S+T\S+?[+-]\d\d:?\d\d) ", line)
    if not m:
        return None
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()

def new_lines(key):
    with open(logs[key], "rb") as f:
        f.seek(offsets[key])
        return f.read().decode(errors="replace").splitlines()

def first(lines, pattern):
    for line in lines:
        if re.search(pattern, line):
            return stamp_of(line)
    return None

def get(path):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + admin})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read().decode()

r = {"mode": mode}
t0 = time.time()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
stderr_lines = []
def read_stderr():
    for line in p.stderr:
        stderr_lines.append((time.time(), line.rstrip("\n")))
reader = threading.Thread(target=read_stderr)
reader.start()
stdout = p.stdout.read()
rc = p.wait()
t_exit = time.time()
reader.join()
r.update(rc=rc, start=t0, exit=t_exit, wall_s=t_exit - t0)
lease = None
for t, line in stderr_lines:
    m = re.search(r"flyt-client-manager on \S+: lease (\S+) on node", line)
    if m:
        lease, r["leased"] = m.group(1), t
    if "connected to" in line and "connected" not in r:
        r["connected"] = t
if rc != 0 or lease is None:
    r["error"] = (stdout + "\n".join(l for _, l in stderr_lines))[-2000:]
r["lease"] = lease
if mode in ("cold", "release") and lease:
    # The lease list is built on each request; /api/v1/gpus is rebuilt at most once a second
    # while heartbeats come in (Cluster::GpusBody): both are polled, each every 50 ms.
    deadline = time.time() + 120
    seen_in_gpus = False
    while time.time() < deadline and ("free" not in r or "free_gpus" not in r):
        if "free" not in r and lease not in get("/api/v1/remote-leases"):
            r["free"] = time.time()
        if "free_gpus" not in r:
            # That body may still be one built before the lease was granted: gone counts only
            # once it has shown the lease.
            if lease in get("/api/v1/gpus"):
                seen_in_gpus = True
            elif seen_in_gpus:
                r["free_gpus"] = time.time()
        time.sleep(0.05)
    deadline = time.time() + 30
    while time.time() < deadline and not re.search(
            r"server of lease %s stopped" % re.escape(lease), "\n".join(new_lines("node"))):
        time.sleep(0.05)
time.sleep(0.1)  # the last log lines
cm, node = new_lines("cm"), new_lines("node")
pid = p.pid
r["asked"] = first(cm, r"\(pid %d, .*asks for a GPU share" % pid)
r["attached"] = first(cm, r"\(pid %d, .*uses lease" % pid)
if lease:
    L = re.escape(lease)
    r["granted"] = first(cm, r"lease %s granted" % L)
    r["last_left"] = first(cm, r"lease %s: its last program" % L)
    r["releasing"] = first(cm, r"releasing lease %s:" % L)
    r["released"] = first(cm, r"lease %s released" % L)
    r["node_starting"] = first(node, r"starting the server of lease %s " % L)
    r["node_ready"] = first(node, r"the server of lease %s is ready" % L)
    r["node_draining"] = first(node, r"draining the server of lease %s " % L)
    r["node_stopped"] = first(node, r"the server of lease %s stopped" % L)
with open(out, "a") as f:
    f.write(json.dumps(r) + "\n")
if "error" in r:
    sys.stderr.write("run failed (rc %d): %s\n" % (rc, r["error"]))
    sys.exit(1)
PY

sample() {  # sample <samples file> <mode>
  BENCH_URL=$url BENCH_ADMIN=$admin BENCH_CM_LOG=$tmp/client-manager.log BENCH_NODE_LOG=$tmp/gpu-a.log \
    python3 "$tmp/sample.py" "$1" "$2" -- env FLYT_SIM_DEVICE=1 FLYT_LOG_LEVEL=info \
    FLYT_CLIENT_MANAGER="$cmsock" LD_LIBRARY_PATH="$runtime_dir" "$program"
}

hold_program() {
  # A connected program: the runtime holds the client manager's connection for its lifetime.
  python3 - "$cmsock" >"$tmp/holder.out" <<'PY' &
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((json.dumps({"op": "acquire", "pid": 1, "program": "holder", "version": 1}) + "\n").encode())
print(s.makefile().readline(), flush=True)
time.sleep(3600)
PY
  holder_pid=$!
  pids+=("$holder_pid")
}

# ---- 1 + 3a. cold starts, each followed by its release (release_after = 2 s) ------------------
client_manager_config 'release_after = "2s"' 'ttl_seconds = 10'
start_client_manager
# One untimed run first: page cache, the node's first server start.
sample "$tmp/warmup.jsonl" cold >/dev/null || die "the first program failed"
wait_for 30 idle || die "the first lease was not released"
for i in $(seq 1 "$repeats"); do
  echo "cold start + release (release_after 2 s) $i/$repeats" >&2
  wait_for 30 idle || die "a lease or server is left from the run before"
  sample "$tmp/cold.jsonl" cold || die "a cold run failed"
done
wait_for 30 idle || die "the last cold lease was not released"

# ---- 2. warm starts: a lease held --------------------------------------------------------------
hold_program
wait_for 20 grep -q ok "$tmp/holder.out" || die "the holder got no lease"
for i in $(seq 1 "$repeats"); do
  echo "warm start $i/$repeats" >&2
  sample "$tmp/warm.jsonl" warm || die "a warm run failed"
done
kill "$holder_pid" 2>/dev/null
wait "$holder_pid" 2>/dev/null
wait_for 30 idle || die "the held lease was not released"

# ---- 3b. release with the defaults (release_after 30 s, ttl 60 s) ------------------------------
if [ "$default_repeats" -gt 0 ]; then
  stop_client_manager
  client_manager_config "" ""
  start_client_manager
  for i in $(seq 1 "$default_repeats"); do
    echo "release with the default release_after (30 s) $i/$default_repeats" >&2
    wait_for 30 idle || die "a lease or server is left from the run before"
    sample "$tmp/default.jsonl" release || die "a run failed"
  done
fi

# ---- the tables --------------------------------------------------------------------------------
python3 - "$tmp" "$repeats" "$default_repeats" <<'PY'
import json, os, statistics, sys

tmp, repeats, default_repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def load(name):
    path = os.path.join(tmp, name)
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.strip()]

def diff(rows, a, b, scale=1000.0):
    return [(r[b] - r[a]) * scale for r in rows if r.get(a) is not None and r.get(b) is not None]

def fmt(v, digits):
    # Log stamps have ms resolution: a step that takes less shows as 0, not -0.
    text = ("%." + str(digits) + "f") % v
    return text[1:] if text.startswith("-") and float(text) == 0 else text

def row(name, values, digits=0, total=None, note=""):
    if not values:
        print("| %s | n/a | | | | %s |" % (name, note))
        return
    med = statistics.median(values)
    share = "" if total is None else "%.0f %%" % (100.0 * med / total)
    print("| %s | %s | %s | %s | %s | %s |" % (name, fmt(med, digits), fmt(min(values), digits),
                                               fmt(max(values), digits), share, note))

cold, warm, default = load("cold.jsonl"), load("warm.jsonl"), load("default.jsonl")
cold_wall = [r["wall_s"] * 1000 for r in cold]
warm_wall = [r["wall_s"] * 1000 for r in warm]
total = statistics.median(cold_wall) if cold_wall else None

print("## Cold and warm start (%d repeats, ms: median, min, max)" % repeats)
print()
print("| figure | median | min | max | share of cold | what |")
print("|---|---|---|---|---|---|")
row("**cold start**: program exec to exit, no lease", cold_wall, total=total,
    note="vector_add (1 Mi floats: 3 copies in, kernel, copy out, frees) through a new lease")
row("exec -> client manager asked", diff(cold, "start", "asked"), total=total,
    note="process start, runtime's first call, socket connect (client-manager log)")
row("asked -> node starts the server", diff(cold, "asked", "node_starting"), total=total,
    note="client manager -> POST /api/v1/remote-leases -> placement + durable write -> PUT on the node -> fork/exec (node log)")
row("server starting -> ready", diff(cold, "node_starting", "node_ready"), total=total,
    note="flyt-gpu-server start-up + ready file, polled every 50 ms (node log)")
row("ready -> lease granted", diff(cold, "node_ready", "granted"), total=total,
    note="node answers the PUT, manager stores the grant and answers (client-manager log)")
row("granted -> program connected", diff(cold, "granted", "connected"), total=total,
    note="answer to the program, connect + hello with the secret (runtime's info line)")
row("connected -> exit", diff(cold, "connected", "exit"), total=total,
    note="the CUDA work and the process exit")
row("**warm start**: program exec to exit, lease held", warm_wall, total=total,
    note="same program, a holder keeps the lease")
row("warm: exec -> client manager asked", diff(warm, "start", "asked"), total=total)
row("warm: asked -> program connected", diff(warm, "asked", "connected"), total=total,
    note="the held lease's answer + connect + hello")
row("warm: connected -> exit", diff(warm, "connected", "exit"), total=total)
if cold_wall and warm_wall:
    row("cold - warm (what the lease costs)", [statistics.median(cold_wall) - statistics.median(warm_wall)],
        total=total, note="difference of the medians")
print()

def release_table(rows, label):
    row("**release** (%s): program exit -> share free" % label, diff(rows, "exit", "free", 1.0), 2,
        note="GET /api/v1/remote-leases, polled every 50 ms, no longer lists the lease")
    row("  exit -> share gone from GET /api/v1/gpus", diff(rows, "exit", "free_gpus", 1.0), 2,
        note="that body is rebuilt at most once a second while heartbeats come in")
    row("  exit -> client manager sees the last program leave", diff(rows, "exit", "last_left", 1.0), 2)
    row("  last program left -> release starts (grace)", diff(rows, "last_left", "releasing", 1.0), 2,
        note="[client] release_after")
    row("  release starts -> released (DELETE answered)", diff(rows, "releasing", "released", 1.0), 3)
    row("  released -> seen free (poll)", diff(rows, "released", "free", 1.0), 3,
        note="the poll's own period (50 ms) and request")
    row("  node drain: draining -> server stopped", diff(rows, "node_draining", "node_stopped", 1.0), 3,
        note="SIGTERM, the server exits (drain_grace_s 2 before SIGKILL)")
    row("  exit -> server stopped", diff(rows, "exit", "node_stopped", 1.0), 2)

print("## Release: last program's exit to the GPU share free (s: median, min, max)")
print()
print("| figure | median | min | max | | what |")
print("|---|---|---|---|---|---|")
release_table(cold, "release_after 2 s, ttl 10 s, %d runs" % len(cold))
if default:
    release_table(default, "defaults: release_after 30 s, ttl 60 s, %d runs" % len(default))
PY
