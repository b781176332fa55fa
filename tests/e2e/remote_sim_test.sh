#!/usr/bin/env bash
# End to end: unmodified nvcc-built CUDA programs (tests/cuda, tests/remote; -cudart=shared) run
# through flyt's libcudart.so.13 (LD_LIBRARY_PATH=build/lib/flyt) against flyt-gpu-server
# --backend sim, over TCP and over a Unix socket. Checks: every API call succeeds; device memory
# round-trips byte-exact; the server's launch log holds exactly the grid, block, shared memory and
# argument bytes each launch passed; a client killed with SIGKILL mid-stream leaves nothing behind
# while another client carries on; hostile bytes cannot hurt the server; the memory limit; and the
# errors of a missing or unreachable server.
#
# Kernels do not run on the simulated device, so the programs are run with FLYT_SIM_DEVICE=1, the
# convention that tells them to skip checks of results only a kernel could produce.
# Skips (77) when the CUDA toolkit was not there to build the runtime and the programs.
# Usage: remote_sim_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d -t flyt-remote-e2e.XXXXXX)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; rm -rf "$tmp"' EXIT
remote_setup "$build" "$build/tests/remote/launch_args"
programs=()
for p in vector_add matrix_mul streams_events constant_memory many_params many_params_compressed \
  templated rdc per_thread_stream; do
  [ -x "$build/tests/cuda/$p" ] && programs+=("$build/tests/cuda/$p")
done
[ ${#programs[@]} -gt 0 ] || echo "note: tests/cuda programs not built; running tests/remote only"

port=$(free_port)
sock=$tmp/gpu.sock
log=$tmp/launches.jsonl
"$server_bin" --backend sim --listen "127.0.0.1:$port" --listen "unix:$sock" \
  --launch-log "$log" >>"$tmp/server.log" 2>&1 &
server_pid=$!
pids+=($server_pid)
stats() { "$server_bin" stats --server "unix:$sock"; }
check "server starts" wait_for 20 stats
check "server says it is simulated" grep -q "SIMULATED" "$tmp/server.log"

# run <name> <endpoint> <program> [args]: runs a program through flyt, killed after 120 s;
# output in $tmp/<name>.out, exit status in $tmp/<name>.rc, its pid in $tmp/<name>.pid.
run() {
  local name=$1 endpoint=$2
  shift 2
  run_bounded 120 "$name" env FLYT_SIM_DEVICE=1 FLYT_SERVER="$endpoint" \
    LD_LIBRARY_PATH="$runtime_dir" "$@"
}

# ---- every program, over both transports ----
for transport in tcp unix; do
  endpoint="127.0.0.1:$port"
  [ "$transport" = unix ] && endpoint="unix:$sock"
  for program in "${programs[@]}"; do
    name="$(basename "$program").$transport"
    run "$name" "$endpoint" "$program"
    check "$name: every API call succeeds" api_ok "$name"
  done
  for p in launch_args api_semantics; do
    run "$p.$transport" "$endpoint" "$build/tests/remote/$p"
    check "$p.$transport passes" api_ok "$p.$transport"
    check "$p.$transport exits 0" test "$(rc_of "$p.$transport")" = 0
  done
done
# api_semantics faults on purpose: the fault corrupts its server process's device state (as on a
# GPU), and its cudaDeviceReset went on in a fresh process.
check "a faulted client's reset goes on in a fresh process" \
  grep -q "a fresh process takes over for cudaDeviceReset" "$tmp/server.log"

# ---- the launch log holds exactly what the programs passed ----
check_launches() {
  python3 - "$log" "$tmp" "$@" <<'EOF'
import json, struct, sys
log, tmp, *names = sys.argv[1:]
launches = [json.loads(line) for line in open(log)]
def by_pid(name):
    pid = int(open(f"{tmp}/{name}.pid").read())
    return [l for l in launches if l["pid"] == pid]
def le(fmt, *v):
    return struct.pack("<" + fmt, *v).hex()
def pointers(name):
    out = {}
    for line in open(f"{tmp}/{name}.out"):
        if line.startswith("POINTER "):
            for kv in line.split()[1:]:
                k, v = kv.split("=")
                out[k] = int(v, 16)
    return out
errors = []
def expect(what, got, want):
    if got != want:
        errors.append(f"{what}: got {got!r}, want {want!r}")
for name in names:
    if name.startswith("launch_args"):
        ls = by_pid(name)
        ptr = pointers(name)
        expect(f"{name} launch count", len(ls), 5)
        if len(ls) != 5:
            continue
        probe_args = [le("b", -7), le("h", 12345), le("i", -2000000000),
                      le("q", 0x123456789ABCDEF0), le("f", 3.5), le("d", -0.125), None,
                      le("Q", ptr["p"]), "01", "01020304", le("4f", 1.5, 2.5, 3.5, 4.5),
                      le("Q", ptr["out"])]
        shapes = [([3, 2, 1], [32, 4, 2], 256, True), ([7, 1, 1], [64, 1, 1], 0, False),
                  ([5, 1, 1], [128, 1, 1], 1024, True)]
        for i, (grid, block, shared, own_stream) in enumerate(shapes):
            l = ls[i]
            expect(f"{name}#{i} kernel", l["kernel"].startswith("_Z5Probe"), True)
            expect(f"{name}#{i} grid", l["grid"], grid)
            expect(f"{name}#{i} block", l["block"], block)
            expect(f"{name}#{i} shared", l["shared_bytes"], shared)
            expect(f"{name}#{i} stream is the program's own", l["stream"] != 0, own_stream)
            args = [a["hex"] for a in l["args"]]
            expect(f"{name}#{i} arg count", len(args), 12)
            for k, want in enumerate(probe_args):
                if want is not None and k < len(args):
                    expect(f"{name}#{i} arg {k}", args[k], want)
            mixed = bytes.fromhex(args[6])  # {char; double; int}: compare the fields, not padding
            expect(f"{name}#{i} struct", (mixed[0:1], mixed[8:16], mixed[16:20]),
                   (b"Q", struct.pack("<d", 2.75), struct.pack("<i", 424242)))
        expect(f"{name} no-arg launch", (ls[3]["kernel"], ls[3]["param_bytes"]), ("_Z6NoArgsv", 0))
        expect(f"{name} template launch", [a["hex"] for a in ls[4]["args"]],
               [le("Q", ptr["values"]), le("d", 2.5), le("i", 100)])
        expect(f"{name} template grid", (ls[4]["grid"], ls[4]["block"]), ([1, 1, 1], [128, 1, 1]))
    elif name.startswith("vector_add"):
        ls = [l for l in by_pid(name) if l["kernel"] == "_Z9VectorAddPKfS0_Pfi"]
        expect(f"{name} launches", len(ls), 1)
        for l in ls:
            expect(f"{name} grid/block", (l["grid"], l["block"], l["shared_bytes"]),
                   ([4096, 1, 1], [256, 1, 1], 0))
            args = [a["hex"] for a in l["args"]]
            expect(f"{name} n", args[3], le("i", 1 << 20))
            expect(f"{name} three distinct device pointers", len(set(args[:3])), 3)
    elif name.startswith("many_params"):
        ls = by_pid(name)
        expect(f"{name} launches", len(ls), 1)
        for l in ls:
            args = [a["hex"] for a in l["args"]]
            expect(f"{name} offsets", [(a["offset"], a["size"]) for a in l["args"]],
                   [(0, 1), (2, 2), (4, 4), (8, 8), (16, 8), (24, 24), (48, 1), (56, 8),
                    (64, 4), (72, 8)])
            expect(f"{name} scalars", [args[0], args[1], args[2], args[3], args[6], args[7], args[8]],
                   [le("b", ord("A")), le("h", -1234), le("i", 1 << 20), le("d", 3.25),
                    le("b", ord("z")), le("q", -(1 << 40)), le("f", -7.5)])
            packed = bytes.fromhex(args[5])
            expect(f"{name} struct", (packed[0:1], packed[8:16], packed[16:20]),
                   (b"P", struct.pack("<d", 0.125), struct.pack("<i", 77)))
    else:
        expect(f"{name} launched something", len(by_pid(name)) > 0, True)
for e in errors:
    print("launch log:", e)
sys.exit(1 if errors else 0)
EOF
}
for transport in tcp unix; do
  names=("launch_args.$transport")
  for program in "${programs[@]}"; do names+=("$(basename "$program").$transport"); done
  check "launch log matches what the programs passed ($transport)" check_launches "${names[@]}"
done

# ---- a client killed mid-stream leaves nothing behind; the others carry on ----
crash_out=$tmp/crash.out
FLYT_SIM_DEVICE=1 FLYT_SERVER="127.0.0.1:$port" LD_LIBRARY_PATH=$runtime_dir \
  "$build/tests/remote/crash_mid_stream" >"$crash_out" 2>&1 &
crash_pid=$!
pids+=($crash_pid)
check "crashing client gets going" wait_for 30 grep -q READY "$crash_out"
launches_of() { stats | jq_py "print(sum(c['launches'] for c in d['clients'] if c['label'].endswith('(pid $1)')))"; }
# launches_above <pid> <n>: the client program with that pid has launched more than n kernels.
launches_above() { test "$(launches_of "$1")" -gt "$2"; }
# The program connects over TCP, learns that the server is on this host and moves to its Unix
# socket and shared memory: the first connection, which never did anything, is left out.
client_of() {  # client_of <pid> <python condition on c, the client's stats>
  stats | jq_py "cs=[c for c in d['clients'] if c['label'].endswith('(pid $1)') and (c['connected'] or c['launches'] > 0)]; sys.exit(0 if cs and all($2 for c in cs) else 1)"
}
check "server sees the crashing client's memory (over shared memory, moved from TCP)" client_of $crash_pid \
  "c['connected'] and c['allocations'] >= 8 and c['allocated_bytes'] >= 8*(16<<20) and c['streams'] >= 3 and c['transport'] == 'shm'"
check "… and has launches in flight" wait_for 20 launches_above $crash_pid 8
kill -9 $crash_pid
wait $crash_pid 2>/dev/null
check "everything of the killed client is freed" wait_for 20 client_of $crash_pid \
  "not c['connected'] and c['allocations'] == 0 and c['allocated_bytes'] == 0 and c['streams'] == 0 and c['events'] == 0 and c['modules'] == 0"
no_memory_left() { stats | jq_py "sys.exit(0 if d['allocated_bytes'] == 0 else 1)"; }
check "the server holds no device memory" wait_for 10 no_memory_left
run after_crash "unix:$sock" "$build/tests/remote/api_semantics"
check "another client still works after the crash" test "$(rc_of after_crash)" = 0

# ---- two clients at once ----
run concurrent_a "127.0.0.1:$port" "$build/tests/remote/api_semantics" &
first=$!
run concurrent_b "unix:$sock" "$build/tests/remote/launch_args" &
second=$!
wait $first $second
check "two clients at once: first" test "$(rc_of concurrent_a)" = 0
check "two clients at once: second" test "$(rc_of concurrent_b)" = 0

# ---- a process per client: one client's server process dies, nobody else notices ----
# (as a device fault that poisons the process, or a crash inside the driver, would end it)
start_holder() {  # start_holder <name>: a crash_mid_stream client, READY when it holds its memory
  FLYT_SIM_DEVICE=1 FLYT_SERVER="unix:$sock" LD_LIBRARY_PATH=$runtime_dir \
    "$build/tests/remote/crash_mid_stream" >"$tmp/$1.out" 2>&1 &
  echo $! >"$tmp/$1.pid"
  pids+=($!)
}
start_holder victim
start_holder neighbour
victim_pid=$(cat "$tmp/victim.pid")
neighbour_pid=$(cat "$tmp/neighbour.pid")
check "victim and neighbour get going" wait_for 30 grep -q READY "$tmp/victim.out" "$tmp/neighbour.out"
serving_process() {  # the server-side process of the client program with pid $1
  sed -n "s/.*connected (.*pid $1; served by process \([0-9]*\)).*/\1/p" "$tmp/server.log" | tail -1
}
victim_server=$(serving_process "$victim_pid")
neighbour_server=$(serving_process "$neighbour_pid")
check "each client has a server process of its own" \
  test -n "$victim_server" -a -n "$neighbour_server" -a "$victim_server" != "$neighbour_server"
check "client processes are named for their client" \
  grep -q '^flyt-client-' "/proc/$victim_server/comm"
kill -9 "$victim_server"
check "the victim's program gets an error, not a hang" wait_for 20 \
  sh -c "! kill -0 $victim_pid 2>/dev/null"
wait "$victim_pid" 2>/dev/null
check "the victim's program says what happened" grep -qi "connection\|server" "$tmp/victim.out"
check "the server says how the client's process ended" grep -q "process $victim_server was killed by signal 9" "$tmp/server.log"
# By the id the server gave it (a victim killed before its first launch reached the server has
# none, which client_of's filter of departed probes would take it for; and stats' own polling
# connections push departed entries out of the list).
victim_id=$(sed -n "s/.*client \([0-9]*\): connected (.*pid $victim_pid; served by.*/\1/p" "$tmp/server.log" | tail -1)
victim_departed() {
  stats | jq_py "cs=[c for c in d['clients'] if c['client_id'] == $victim_id]; sys.exit(0 if not cs or not cs[0]['connected'] else 1)"
}
check "the victim's memory goes back to the account" wait_for 20 victim_departed
before=$(launches_of "$neighbour_pid")
check "the neighbour keeps launching (more than $before)" wait_for 20 launches_above "$neighbour_pid" "$before"
check "the neighbour still holds its memory" client_of "$neighbour_pid" \
  "c['connected'] and c['allocated_bytes'] >= 8*(16<<20)"
only_neighbour_counted() {
  stats | jq_py "n=sum(c['allocated_bytes'] for c in d['clients'] if c['label'].endswith('(pid $neighbour_pid)')); sys.exit(0 if d['allocated_bytes'] == n else 1)"
}
check "only the neighbour's memory is counted" wait_for 10 only_neighbour_counted
kill -9 "$neighbour_pid"
wait "$neighbour_pid" 2>/dev/null
check "then nothing is left" wait_for 20 no_memory_left

# ---- hostile bytes ----
python3 - "$port" <<'EOF' >"$tmp/hostile.out" 2>&1
import socket, struct, sys, os
port = int(sys.argv[1])
def send(data):
    s = socket.create_connection(("127.0.0.1", port))
    try:  # the server may close (and reset) before all of it is sent
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        s.close()
        return
    s.settimeout(15)
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass
    s.close()
def frame(kind, call, seq, payload):
    return struct.pack("<IHBBI", len(payload), call, kind, 0, seq) + payload
hello_payload = struct.pack("<IHHQ", 0x54594C46, 1, 1, 7) + struct.pack("<I", 7) + b"hostile" + struct.pack("<Ii", 1, 0)
hello = frame(1, 0, 0, hello_payload)
send(os.urandom(4096))                                   # garbage instead of a hello
send(hello + struct.pack("<IHBBI", 0xFFFFFFFF, 10, 3, 0, 1))  # a 4 GiB frame
send(hello + frame(3, 10, 1, b"\x01"))                   # a truncated Malloc
send(hello + frame(4, 13, 1, struct.pack("<QQQ", 1 << 47, 1 << 30, 0)) + os.urandom(64))  # lying copy
for i in range(20):
    send(hello + os.urandom(512))
print("sent")
EOF
check "hostile clients were sent" grep -q sent "$tmp/hostile.out"
check "server survives hostile clients" kill -0 $server_pid
run after_hostile "127.0.0.1:$port" "$build/tests/remote/launch_args"
check "a client works after the hostile ones" test "$(rc_of after_hostile)" = 0
check "server logged why it closed them" grep -q "closing the connection" "$tmp/server.log"

# ---- the memory limit ----
limit_sock=$tmp/limit.sock
"$server_bin" --backend sim --listen "unix:$limit_sock" --memory-limit-mb 64 >>"$tmp/limit.log" 2>&1 &
pids+=($!)
check "limited server starts" wait_for 20 "$server_bin" stats --server "unix:$limit_sock"
run limited "unix:$limit_sock" "$build/tests/remote/crash_mid_stream"
check "allocation past the memory limit fails with cudaErrorMemoryAllocation" \
  grep -q "cudaMalloc.*cudaErrorMemoryAllocation" "$tmp/limited.out"

# ---- peers that hold slots: a full server, an idle client, a dripped hello ----
full_sock=$tmp/full.sock
"$server_bin" --backend sim --listen "unix:$full_sock" --max-clients 1 --idle-timeout 2 \
  --hello-timeout 1 >>"$tmp/full.log" 2>&1 &
full_pid=$!
pids+=($full_pid)
check "a server with --max-clients 1 starts" wait_for 20 "$server_bin" stats --server "unix:$full_sock"
check "--help documents the limits" sh -c "'$server_bin' --help | grep -q -- --idle-timeout"
# One client says hello, then does nothing: it holds the only slot until the idle timeout.
python3 - "$full_sock" <<'PY' >"$tmp/idler.out" 2>&1 &
import socket, struct, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
payload = struct.pack("<IHHQ", 0x54594C46, 1, 1, 7) + struct.pack("<I", 4) + b"idle" + struct.pack("<Ii", 1, 0)
s.sendall(struct.pack("<IHBBI", len(payload), 0, 1, 0, 0) + payload)
s.settimeout(30)
start = time.time()
if s.recv(65536):
    print("hello answered", flush=True)
while s.recv(65536):
    pass
print("closed after %.1f s" % (time.time() - start), flush=True)
PY
idler=$!
check "the idle client is served" wait_for 10 grep -q "hello answered" "$tmp/idler.out"
run busy "unix:$full_sock" "$build/tests/remote/api_semantics"
check "a client over --max-clients gets cudaErrorDevicesUnavailable" \
  grep -q "cudaErrorDevicesUnavailable" "$tmp/busy.out"
check "and a line that says the server is full" \
  grep -q "serves no more clients.*--max-clients" "$tmp/busy.out"
check "the idle client is closed after --idle-timeout" wait_for 10 grep -q "closed after" "$tmp/idler.out"
wait "$idler" 2>/dev/null
check "the server logged why" grep -q "idle timeout" "$tmp/full.log"
run after_idle "unix:$full_sock" "$build/tests/remote/launch_args"
check "then a client is served" test "$(rc_of after_idle)" = 0
# A hello dripped a byte every 200 ms: closed at the 1 s deadline, no process started for it.
python3 - "$full_sock" "$full_pid" <<'PY' >"$tmp/drip.out" 2>&1
import socket, subprocess, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.setblocking(False)
start, children = time.time(), 0
for i in range(40):
    try:
        s.send(b"\x30")
        if s.recv(1) == b"":
            break
    except BlockingIOError:
        pass
    except OSError:
        break
    out = subprocess.run(["pgrep", "-P", sys.argv[2]], capture_output=True, text=True).stdout
    children = max(children, len(out.split()))
    time.sleep(0.2)
print("closed after %.1f s, %d client processes meanwhile" % (time.time() - start, children))
PY
check "a dripped hello is closed at --hello-timeout" \
  grep -Eq "closed after (0\.9|1\.[0-9]|2\.[0-4]) s" "$tmp/drip.out"
check "and no process was started for it" grep -q ", 0 client processes" "$tmp/drip.out"
check "the server logged it" grep -q "no complete hello within 1000 ms" "$tmp/full.log"
turned_away_counted() {
  "$server_bin" stats --server "unix:$full_sock" >"$tmp/full_stats.json" &&
    jq_py "c=d['connections']; sys.exit(0 if c['hello_timeout'] == 1 and \
c['refused_max_clients'] >= 1 and c['closed_idle'] == 1 else 1)" <"$tmp/full_stats.json" ||
    { cat "$tmp/full_stats.json"; return 1; }
}
check "stats count what was turned away and why" turned_away_counted

# ---- no server, unreachable server ----
FLYT_CLIENT_MANAGER=$tmp/no-manager.sock LD_LIBRARY_PATH=$runtime_dir \
  "$build/tests/remote/api_semantics" >"$tmp/unset.out" 2>&1
check "FLYT_SERVER unset, no client manager: cudaErrorNoDevice" grep -q "cudaErrorNoDevice" "$tmp/unset.out"
check "FLYT_SERVER unset: a log line says so" grep -q "FLYT_SERVER is not set" "$tmp/unset.out"
check "FLYT_SERVER unset: the log names the client manager's socket" \
  grep -q "no flyt-client-manager listens on $tmp/no-manager.sock" "$tmp/unset.out"
FLYT_SERVER="unix:$tmp/nobody.sock" LD_LIBRARY_PATH=$runtime_dir \
  "$build/tests/remote/api_semantics" >"$tmp/unreachable.out" 2>&1
check "unreachable server: cudaErrorInitializationError" \
  grep -q "cudaErrorInitializationError" "$tmp/unreachable.out"
check "unreachable server: a log line names it" grep -q "nobody.sock" "$tmp/unreachable.out"

kill $server_pid
wait $server_pid 2>/dev/null
check "server stops cleanly on SIGTERM" grep -q "stopped" "$tmp/server.log"
if [ "$failures" -gt 0 ]; then
  echo "--- server log (tail)"
  tail -40 "$tmp/server.log"
fi
finish
