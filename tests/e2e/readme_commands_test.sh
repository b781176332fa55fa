#!/usr/bin/env bash
# End to end: every command the demo prints and every flytctl, curl and scripts/run.sh command that
# README.md shows, run exactly as printed against the demo cluster that scripts/run.sh starts (on
# the build under test: FLYT_RUN_NO_BUILD=1, a free port), with their output checked. The commands
# are read from the demo's output and from README.md, so that the test fails when either drifts
# from what flyt does: a command nobody taught this test must still exit 0, and every flag the
# README's synopsis names must exist. Also: global options before and after the command, the
# source line of `flytctl gpus`, and the exit codes of errors, against the live demo.
# Usage: readme_commands_test.sh <build dir> <source dir>
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
# Every process the demo starts carries this marker in its environment (its GPU servers inherit
# it from their node manager): stopped at exit whatever happens, and none may be left after Ctrl-C.
mark="readme-demo-$$-$RANDOM"
demo_pgid=""
cleanup() {
  [ -n "$demo_pgid" ] && kill -TERM -- "-$demo_pgid" 2>/dev/null
  stop_children
  local left
  left=$(marked_pids "$mark")
  # shellcheck disable=SC2086
  [ -n "$left" ] && kill -9 $left 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

unset FLYT_CLUSTER_MANAGER FLYT_TOKEN FLYT_ADMIN_TOKEN FLYT_NVML_LIBRARY FLYT_SIM_SCENARIO \
  FLYT_SIM_TIME FLYT_SIM_START FLYT_SIM_REASON FLYT_SERVER FLYT_DEMO_PORT FLYT_BUILD_DIR

root=$tmp/root
demo_checkout "$root"
cd "$root" || exit 1
# The README's bare `flytctl ...` commands: flytctl on PATH, as installed.
export PATH="$root/build/bin:$PATH"

port=$(demo_port)
url="http://127.0.0.1:$port"
has_driver() {
  ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1 ' || command -v nvidia-smi >/dev/null 2>&1
}
first_node_port=$((port + 1))
[ -x "$build/tests/cuda/vector_add" ] && ln -s "$build/tests/cuda/vector_add" "$root/my_cuda_program"

# ---- the demo, as scripts/run.sh starts it ----------------------------------------------------
start_demo "$root" "$port" "$mark" 90 || exit 1
# The README's `scripts/run.sh gpus ...` commands: the build under test, not a fresh build.
export FLYT_RUN_NO_BUILD=1
echo "== the demo printed:"
cat "$tmp/demo.out"

# The commands it prints: the indented lines after "In another terminal:", comments dropped.
demo_commands=$(sed -n '/^In another terminal:/,/^The demo completes/p' "$tmp/demo.out" |
  grep -E '^  [^ ]' | sed -E 's/^  //; s/ +# .*$//')
check "the demo prints commands" test "$(wc -l <<<"$demo_commands")" -ge 8

# job_id: the newest job's id, for the commands that show one as <ID> or ID.
job_id() { build/bin/flytctl jobs --json --server "$url" --token "$(cat "var/demo-$port/admin.token")" |
  jq_py "print(d['jobs'][0]['id'])"; }

# run_cmd <command line>: runs it in this shell's environment with bash; sets out, err, rc. (The
# timeout only keeps a hung command from hanging the test.)
run_cmd() {
  out=$(timeout 150 bash -c "$1" 2>"$tmp/err")
  rc=$?
  err=$(cat "$tmp/err")
}

ran=0
skipped=0
# run_and_check <where> <command as printed>: runs it with the check its kind calls for.
run_and_check() {
  local where=$1 cmd=$2 name shown
  name="$where: $cmd"
  # Placeholders: a job id, a task file of our own.
  shown=$cmd
  cmd=${cmd//<ID>/$(job_id)}
  cmd=$(sed -E "s/ (job|cancel|complete) ID( |$)/ \\1 $(job_id)\\2/" <<<"$cmd")
  # The documented default ports are the demo's here (the test picks free ones).
  cmd=${cmd//localhost:12401/127.0.0.1:$first_node_port}
  cmd=${cmd//127.0.0.1:12400/127.0.0.1:$port}
  cmd=${cmd//--server URL/--server $url}
  cmd=${cmd//--node URL/--node 127.0.0.1:$first_node_port}
  case $cmd in
    *my_cuda_program*)
      if [ -e my_cuda_program ] && [[ $cmd == *"flytctl cuda inspect"* ]]; then
        :
      else
        echo "SKIPPED: $name (needs an nvcc-built program and flyt-gpu-server; e2e.remote_sim runs them)"
        skipped=$((skipped + 1))
        return
      fi
      ;;
    "scripts/run.sh" | "scripts/test.sh")
      echo "SKIPPED: $name (installs and builds; this test runs the demo with FLYT_RUN_NO_BUILD=1)"
      skipped=$((skipped + 1))
      return
      ;;
  esac
  ran=$((ran + 1))
  echo "-- $where: $cmd"
  case $cmd in
    export\ *)
      eval "$cmd"
      check "$name: FLYT_CLUSTER_MANAGER" test "${FLYT_CLUSTER_MANAGER:-}" = "$url"
      check "$name: FLYT_TOKEN is the admin token" test "${FLYT_TOKEN:-}" = "$(cat "var/demo-$port/admin.token")"
      return
      ;;
    *FLYT_NVML_LIBRARY=*flytctl\ gpus*)
      # By hand, on this machine: not the cluster a demo shell points at.
      out=$(env -u FLYT_CLUSTER_MANAGER bash -c "$cmd" 2>"$tmp/err")
      rc=$?
      err=$(cat "$tmp/err")
      ;;
    *"--watch"*)
      out=$(timeout 5 bash -c "$cmd" 2>"$tmp/err")
      rc=$?
      err=$(cat "$tmp/err")
      ;;
    *)
      run_cmd "$cmd"
      ;;
  esac
  local local_source="Source: local machine (simulated NVML)"
  has_driver && local_source="Source: local machine"
  case $cmd in
    *"flytctl nodes")
      check "$name: exit 0" test $rc -eq 0
      for n in sim-h100-a sim-h100-b sim-training sim-mixed sim-faulty sim-profiles; do
        check "$name: lists $n" grep -qE "^$n +reachable" <<<"$out"
      done
      ;;
    *FLYT_NVML_LIBRARY=*flytctl\ gpus*)
      check "$name: exit 0" test $rc -eq 0
      check "$name: the simulated banner first" test "$(head -n1 <<<"$out" | cut -c1-14)" = "SIMULATED GPUs"
      check "$name: then the source" test "$(sed -n 2p <<<"$out")" = "Source: local machine (simulated NVML)"
      check "$name: the scenario's GPUs" test "$(grep -cE '^ +[0-9]+  (NVIDIA|Tesla)' <<<"$out")" -eq 3
      ;;
    "FLYT_CLUSTER_MANAGER= "*"flytctl gpus")
      check "$name: exit 0" test $rc -eq 0
      check "$name: reads this machine" contains "$out" "Source: local machine"
      ;;
    *"flytctl gpus")
      check "$name: exit 0" test $rc -eq 0
      check "$name: reads the cluster manager" test "$(head -n1 <<<"$out")" = "Source: cluster manager $url"
      check "$name: every simulated GPU of the cluster" test "$(grep -cE '^sim-' <<<"$out")" -eq 37
      check "$name: says which are simulated" contains "$out" "SIMULATED GPUs on sim-faulty"
      ;;
    *"flytctl jobs")
      check "$name: exit 0" test $rc -eq 0
      check "$name: the table" grep -qE '^JOB +TASK +STATUS +GPUS +NODE +OWNER +PRI +WAIT +RUNTIME +MESSAGE' <<<"$out"
      check "$name: the demo's experiments" contains "$out" "llama-3.1-8b-throughput #"
      ;;
    *"flytctl job "*)
      check "$name: exit 0" test $rc -eq 0
      check "$name: shows the job" contains "$out" "$(job_id)"
      ;;
    *"flytctl queue")
      check "$name: exit 0" test $rc -eq 0
      ;;
    *"flytctl alloc "*)
      # Granted, or refused because the demo's jobs hold the GPUs: either way a clear answer.
      if [ $rc -eq 0 ]; then
        check "$name: a lease" grep -qE '^lease lease-' <<<"$out"
      else
        check "$name: refused with the reasons (exit 6 or 1, got $rc)" test $rc -eq 6 -o $rc -eq 1
        check "$name: says what failed" contains "$err" "flytctl: cannot allocate 2 GPU(s)"
      fi
      ;;
    *"flytctl submit "*"--wait"*)
      check "$name: exit 0 (got $rc: $err)" test $rc -eq 0
      check "$name: waits" contains "$out" "waiting for 1 job(s) to leave the queue"
      check "$name: ends running" contains "$out" "1 job(s): 1 running"
      ;;
    curl*"/metrics")
      check "$name: exit 0" test $rc -eq 0
      check "$name: the manager's metrics" grep -qE '^flyt_cluster_gpus' <<<"$out"
      ;;
    curl*"/metrics | grep DCGM_FI_DEV_GPU_UTIL")
      check "$name: exit 0" test $rc -eq 0
      check "$name: a node's GPU utilisation" grep -qE '^DCGM_FI_DEV_GPU_UTIL\{' <<<"$out"
      ;;
    *"scripts/run.sh gpus --watch")
      check "$name: runs until stopped (exit 124 from timeout, got $rc)" test $rc -eq 124
      check "$name: this machine, not the cluster" contains "$out" "$local_source"
      ;;
    *"scripts/run.sh gpus --json")
      check "$name: exit 0" test $rc -eq 0
      check "$name: pure JSON of this machine" jq_py "assert 'gpus' in d and 'node' not in d" <<<"$out"
      ;;
    *"scripts/run.sh gpus")
      check "$name: exit 0" test $rc -eq 0
      check "$name: this machine, not the cluster" contains "$out" "$local_source"
      if ! has_driver; then
        check "$name: says why it simulates" contains "$out" "no NVIDIA driver on this machine"
        scenario=$(grep -oE 'FLYT_SIM_SCENARIO=[^ ]+' <<<"$cmd" | cut -d= -f2)
        [ -n "$scenario" ] && check "$name: the scenario asked for" contains "$out" "scenario $scenario"
      fi
      ;;
    *"flytctl cuda inspect "*)
      check "$name: exit 0" test $rc -eq 0
      check "$name: its kernel" contains "$out" "kernel _Z9VectorAdd"
      ;;
    *)
      check "$name: exit 0 (got $rc: $err)" test $rc -eq 0
      ;;
  esac
}

echo "== the demo's commands"
while IFS= read -r c; do run_and_check demo "$c"; done <<<"$demo_commands"

# ---- README.md -------------------------------------------------------------------------------
# The README's commands, one per line, with a kind: "run" (a command to run as printed), "shown"
# (a line of the demo's output the README quotes), "table <cmd>" (the header of a sample table),
# "synopsis" (a flytctl usage line: its commands and flags must exist) and "daemon" (a server's
# command line: its flags must exist).
python3 - "$src/README.md" >"$tmp/readme.cmds" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
runnable = re.compile(r"^((?:[A-Z_]+=\S*\s+)*)(build/bin/flytctl|flytctl|curl|scripts/run\.sh|\./my_cuda_program)(\s|$)")
daemon = re.compile(r"(^|\s)build/bin/(flyt-cluster-manager|flyt-node-manager|flyt-gpu-server|flyt-client-manager)(\s|$)")
out = []
def strip_comment(line):
    return re.sub(r"\s+#\s.*$", "", line).strip()
fences = list(re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M))
for m in fences:
    lang, body = m.group(1), m.group(2)
    lines = body.split("\n")
    if "flyt demo cluster is running" in body:
        for l in lines:
            l = strip_comment(l)
            if l.startswith("export ") or runnable.match(l):
                out.append("shown\t" + l)
        continue
    if lang == "" and any(l.startswith("flytctl ") for l in lines):
        entries = []
        for l in lines:
            if l.startswith("flytctl "):
                entries.append(re.split(r"\s{3,}", l)[0])
            elif l.startswith(" ") and l.strip().startswith("[") and entries:
                entries[-1] += " " + re.split(r"\s{3,}", l.strip())[0]
        # "flytctl release ID | renew ID [--ttl S] | allocations": one line per command, with
        # its flags ("monitor show|stop" is two commands).
        for e in entries:
            for piece in re.split(r"\s\|\s(?=[a-z])", e[len("flytctl "):]):
                words = []
                for w in piece.split():
                    if not re.fullmatch(r"[a-z][a-z|]*", w):
                        break
                    words.append(w)
                flags = " ".join(re.findall(r"--[a-z][a-z-]*", piece))
                leaves = words[-1].split("|") if words else [""]
                for leaf in leaves:
                    out.append("synopsis\t" + (" ".join(words[:-1] + [leaf]).strip() or "-") + "\t" + flags)
        continue
    joined, cur = [], ""
    for l in lines:
        if l.rstrip().endswith("\\"):
            cur += l.rstrip()[:-1].strip() + " "
            continue
        joined.append((cur + l.strip()).strip())
        cur = ""
    for i, l in enumerate(joined):
        if l.startswith("$ "):
            cmd = l[2:].strip()
            out.append("run\t" + cmd)
            if i + 1 < len(joined) and joined[i + 1].strip():
                out.append("table\t" + cmd + "\t" + joined[i + 1])
            continue
        l = strip_comment(l)
        if runnable.match(l):
            out.append("run\t" + l)
        elif daemon.search(l):
            out.append("daemon\t" + l)
        elif re.search(r"\./my_cuda_program", l):
            out.append("run\t" + l)
prose = text
for m in fences:
    prose = prose.replace(m.group(0), "")
for m in re.finditer(r"`([^`\n]+)`", prose):
    l = m.group(1).strip()
    if runnable.match(l) and l not in ("flytctl", "build/bin/flytctl", "curl"):
        out.append("run\t" + l)
seen = set()
for o in out:
    if o not in seen:
        seen.add(o)
        print(o)
PY
echo "== README.md's commands"
cat "$tmp/readme.cmds"
check "README.md shows commands" test "$(grep -c '^run' "$tmp/readme.cmds")" -ge 8
check "README.md shows flytctl's synopsis" test "$(grep -c '^synopsis' "$tmp/readme.cmds")" -ge 10

# A task of our own for `flytctl submit task.json`: one small experiment, first in the queue.
cat >task.json <<'EOF'
{"task_name": "readme-test", "model": {"id_or_path": "meta-llama/Llama-3.2-1B-Instruct"},
 "base_runtime": "vllm", "parameters": {"max-model-len": [2048], "gpu-memory-utilization": [0.3]},
 "parallel_config": {"tp": [1]}, "scheduling": {"priority": 1000}}
EOF

normalize_demo() { sed -E "s/ +# .*$//; s/^  //; s/127\.0\.0\.1:$port/127.0.0.1:12400/g; s/var\/demo-$port/var\/demo/g" "$tmp/demo.out"; }
root_help=$(build/bin/flytctl --help)
while IFS=$'\t' read -r kind cmd extra; do
  case $kind in
    shown)
      check "README quotes the demo as it prints: $cmd" grep -qxF -- "$cmd" <(normalize_demo)
      ;;
    run)
      run_and_check README "$cmd"
      ;;
    table)
      run_cmd "$cmd"
      want=$(tr -s ' ' <<<"$extra")
      check "README's table for '$cmd' has the columns flytctl prints" grep -qxF -- "$want" <(sed -E 's/ +$//' <<<"$out" | tr -s ' ')
      ;;
    synopsis)
      # $cmd: the command's words ("-" for flytctl itself), $extra: the flags the README gives it.
      read -ra sub <<<"$cmd"
      [ "$cmd" = - ] && sub=()
      help=$(build/bin/flytctl "${sub[@]}" --help 2>&1)
      check "README synopsis: flytctl $cmd exists" test $? -eq 0
      for flag in $extra; do
        check "README synopsis: flytctl $cmd has $flag" grep -qE -- "$flag([ ,=]|$)" <<<"$help
$root_help"
      done
      ;;
    daemon)
      bin=$(grep -oE 'build/bin/flyt-[a-z-]+' <<<"$cmd" | head -n1)
      help=$("$bin" --help 2>&1)
      for flag in $(grep -oE -- '--[a-z][a-z-]*' <<<"$cmd"); do
        check "README: $bin has $flag" grep -qE -- "$flag([ ,=]|$)" <<<"$help"
      done
      echo "SKIPPED running: $cmd (a server; the demo runs it; its flags are checked)"
      skipped=$((skipped + 1))
      ;;
  esac
done <"$tmp/readme.cmds"
check "no flytctl gpus --verbose anywhere" test -z "$(grep -rn -- 'gpus --verbose' "$src/README.md" "$src/docs" "$src/src" 2>/dev/null)"

# ---- global options, the source line, exit codes ----------------------------------------------
echo "== global options and exit codes"
ctl=build/bin/flytctl
for order in "--server $url --json gpus" "gpus --server $url --json" "--json gpus --server $url"; do
  # shellcheck disable=SC2086
  out=$(env -u FLYT_CLUSTER_MANAGER "$ctl" $order)
  check "flytctl $order: exit 0" test $? -eq 0
  check "flytctl $order: pure JSON of the cluster" jq_py "assert len(d['gpus']) >= 32 and 'allocation_state' in d['gpus'][0]" <<<"$out"
done
out=$("$ctl" --json jobs)
check "flytctl --json jobs" jq_py "assert isinstance(d['jobs'], list)" <<<"$out"
out=$(env -u FLYT_TOKEN "$ctl" --token "$FLYT_TOKEN" whoami)
check "flytctl --token T whoami: exit 0" test $? -eq 0
check "flytctl --token T whoami: admin" contains "$out" "admin"
# The demo's jobs hold most GPUs: a request no cluster of this size meets shows that the token
# given before the command was taken (no 5) and that the refusal has its own code.
err=$(env -u FLYT_TOKEN "$ctl" --token "$FLYT_TOKEN" alloc --gpus 64 2>&1)
rc=$?
check "flytctl --token T alloc --gpus 64: never fits (8), or 1 from a manager without error codes (got $rc)" test $rc -eq 8 -o $rc -eq 1
check "flytctl --token T alloc --gpus 64: says why" contains "$err" "flytctl: cannot allocate 64 GPU(s)"
# A lease the demo holds (its `alloc --model A100`, or a job's).
lease=$("$ctl" allocations --json | jq_py "print(d['allocations'][0]['id'])")
out=$("$ctl" processes --server "$url")
check "flytctl processes --server: the source first" test "$(head -n1 <<<"$out")" = "Source: cluster manager $url"
check "flytctl processes --server: processes with their node" grep -qE '^sim-training +[0-9]+ +[0-9]+ ' <<<"$out"
out=$("$ctl" gpus --node "127.0.0.1:$((port + 2))")
check "flytctl gpus --node: the node wins over \$FLYT_CLUSTER_MANAGER" test "$(head -n1 <<<"$out")" = "Source: node manager http://127.0.0.1:$((port + 2))"
out=$("$ctl" gpus --available --min-free-memory 1000)
check "flytctl gpus --available on the cluster: exit 0" test $? -eq 0
check "flytctl gpus --available on the cluster: the source first" test "$(head -n1 <<<"$out")" = "Source: cluster manager $url"

err=$("$ctl" --node http://127.0.0.1:1 --server "$url" gpus 2>&1)
check "--node with --server: usage (2)" test $? -eq 2
check "--node with --server: says so" contains "$err" "flytctl: --node"
"$ctl" jobs --status nonsense >/dev/null 2>&1
check "a bad flag value: usage (2)" test $? -eq 2
"$ctl" job job-000000000000 >/dev/null 2>&1
check "an unknown job: not found (4)" test $? -eq 4
err=$("$ctl" jobs --token wrong 2>&1)
check "a wrong token: denied (5)" test $? -eq 5
check "a wrong token: flytctl: <message>, no HTTP status" test "$(cut -c1-9 <<<"$err")" = "flytctl: " -a -z "$(grep -F 'HTTP 401' <<<"$err")"
"$ctl" jobs --server http://127.0.0.1:1 >/dev/null 2>&1
check "an unreachable manager: 3" test $? -eq 3
"$ctl" release "$lease" >/dev/null 2>&1
check "release: exit 0" test $? -eq 0
"$ctl" release "$lease" >/dev/null 2>&1
rc=$?
check "releasing twice: already ended (7), or not found (4) from a manager without error codes (got $rc)" test $rc -eq 7 -o $rc -eq 4
help=$("$ctl" --help)
check "--help lists the exit codes" contains "$help" "3 cannot reach the server"
check "--help lists the global options" contains "$help" "before or after the command"

# ---- Ctrl-C: the demo stops everything it started ----------------------------------------------
kill -INT -- "-$demo_pgid"
demo_exited() { ! kill -0 "$demo_pid" 2>/dev/null; }
check "Ctrl-C: scripts/run.sh exits" wait_for 90 demo_exited
demo_pgid=""
nothing_left() { [ -z "$(marked_pids "$mark")" ]; }
if ! wait_for 10 nothing_left; then
  echo "FAIL: Ctrl-C left processes of the demo running:"
  for p in $(marked_pids "$mark"); do echo "  $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"; done
  failures=$((failures + 1))
fi

echo "ran $ran commands, skipped $skipped"
finish
