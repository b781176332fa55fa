#!/usr/bin/env python3
"""Checks flyt-trace's JSON ({"health": {...}, "processes": [...]}) against expectations.py, one
line per figure: "ok: <label>: <what> = <value>" or "FAIL: <label>: <what>: expected X, seen Y".
Exits 1 when any check failed, 2 on a usage error.

  check_trace.py --json J --pid P --program NAME [--out PROGRAM_STDOUT] [--repeat R]
                 [--calls FILE] [--launch-log L] [--late] [--remote SERVER] [--label TEXT]
      the process with pid P (one entry) against PROGRAMS[NAME]; --out gives the program's
      "HANDLE name=0x..." lines (its streams); --launch-log cross-checks the launches against the
      sim server's launch log or the test driver's (FLYT_TEST_LIBCUDA_LOG) for that pid; --late:
      the process was started before the tracer (attached_late true); --remote: flyt's runtime,
      remote true and remote_server SERVER. --lower-bounds (with --late): the process was probed
      after it had started making calls (a static build's exec is examined once it runs): the
      counters seen must not exceed the expected ones (failures by name too), the exit code may
      be missing (no probe hit, no EXIT record); names, shapes and streams are not checked.
  check_trace.py --json J --unprobeable PID --executable PATH [--label TEXT]
      health.unprobeable names the process (and its executable), with a reason.
  check_trace.py --json J --health
      the tracer lost nothing and probed at least one library.
  check_trace.py --self-test
      the checker on JSON made from the expectations: passes as is, fails with any figure off.
"""
import argparse
import collections
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import expectations  # noqa: E402

COPY_KEYS = ("host_to_device", "device_to_host", "device_to_device", "host_to_host", "memset",
             "copies", "memsets")
# Figures that are "live now": once the process has exited a tracer may report them as they were
# at exit or as 0 (what was never freed is in leaked_*). Either is accepted.
LIVE_KEYS = ("device_memory_bytes", "pinned_host_bytes", "managed_memory_bytes")
SCALAR_KEYS = ("launches", "allocations", "frees", "device_memory_peak_bytes",
               "device_memory_bytes", "managed_memory_bytes", "pinned_host_peak_bytes",
               "pinned_host_bytes", "syncs", "leaked_bytes", "leaked_allocations",
               "leaked_pinned_host_bytes", "exit_code")


class Checker:
    def __init__(self, label, quiet=False):
        self.label = label
        self.failures = 0
        self.quiet = quiet

    def ok(self, what, value):
        if not self.quiet:
            print(f"ok: {self.label}: {what} = {value}")

    def fail(self, what, expected, seen):
        self.failures += 1
        if not self.quiet:
            print(f"FAIL: {self.label}: {what}: expected {expected}, seen {seen}")

    def equal(self, what, expected, seen):
        if expected == seen:
            self.ok(what, seen)
        else:
            self.fail(what, expected, seen)


def shape_key(s):
    return (tuple(s["grid"]), tuple(s["block"]), s["shared_bytes"])


def shape_counts(shapes):
    counts = collections.Counter()
    for s in shapes:
        counts[shape_key(s)] += s["launches"]
    return dict(counts)


def fmt_shapes(counts):
    return ", ".join(f"{list(g)}x{list(b)} shared {sh}: {n}"
                     for (g, b, sh), n in sorted(counts.items())) or "none"


def handles_of(out_path):
    handles = {}
    if out_path:
        for line in open(out_path, errors="replace"):
            if line.startswith("HANDLE ") and "=" in line:
                name, value = line[len("HANDLE "):].strip().split("=", 1)
                handles[name] = int(value, 16) if value not in ("0", "(nil)") else 0
    return handles


def check_process(c, p, exp, handles, late=False, remote=None):
    c.equal("exited", True, p.get("exited"))
    for key in SCALAR_KEYS:
        if key not in exp:
            continue
        want, seen = exp[key], p.get(key)
        if isinstance(want, tuple) and want[0] == "between":
            if seen is not None and want[1] <= seen <= want[2]:
                c.ok(key, seen)
            else:
                c.fail(key, f"between {want[1]} and {want[2]}", seen)
        elif key in LIVE_KEYS and p.get("exited") and seen == 0 and want != 0:
            c.ok(key, "0 (reported after exit; the rest is in leaked_*)")
        else:
            c.equal(key, want, seen)
    if "copies" in exp:
        seen = p.get("copies") or {}
        for key in COPY_KEYS:
            c.equal(f"copies.{key}", exp["copies"][key], seen.get(key))
    if "failures" in exp:
        seen = {k: v for k, v in (p.get("failures") or {}).items() if v}
        c.equal("failures", dict(sorted(exp["failures"].items())), dict(sorted(seen.items())))
    if "kernels" in exp:
        check_kernels(c, p, exp["kernels"])
    if "streams" in exp:
        check_streams(c, p, exp["streams"], handles)
    if "per_thread_streams" in exp:
        check_per_thread_streams(c, p, exp["per_thread_streams"])
    c.equal("attached_late", late, bool(p.get("attached_late")))
    if remote is not None:
        c.equal("remote", True, p.get("remote"))
        c.equal("remote_server", remote, p.get("remote_server"))


def check_lower_bounds(c, p, exp):
    """A process probed part-way: what was seen is at most what the program did."""
    c.equal("attached_late", True, bool(p.get("attached_late")))
    def at_most(what, want, seen):
        if seen is None or (isinstance(seen, int) and 0 <= seen <= want):
            c.ok(what, f"{seen} (at most {want})")
        else:
            c.fail(what, f"at most {want}", seen)
    for key in SCALAR_KEYS:
        if key not in exp:
            continue
        want = exp[key]
        want = want[2] if isinstance(want, tuple) else want
        if key == "exit_code":
            c.ok(key, p.get(key)) if p.get(key) in (None, want) else c.fail(key, f"{want} or none",
                                                                             p.get(key))
            continue
        at_most(key, want, p.get(key) or 0)
    for key in COPY_KEYS:
        at_most(f"copies.{key}", exp.get("copies", {}).get(key, 0),
                (p.get("copies") or {}).get(key, 0))
    seen = {k: v for k, v in (p.get("failures") or {}).items() if v}
    for name, n in sorted(seen.items()):
        at_most(f"failures.{name}", exp.get("failures", {}).get(name, 0), n)


def check_kernels(c, p, want):
    seen = {k["name"]: k for k in p.get("top_kernels") or []}
    c.equal("kernel names", sorted(want), sorted(seen))
    for name, shapes in want.items():
        k = seen.get(name)
        if k is None:
            continue
        if isinstance(shapes, int):
            c.equal(f"{name}: launches", shapes, k.get("launches"))
            continue
        c.equal(f"{name}: launches", sum(s["launches"] for s in shapes), k.get("launches"))
        c.equal(f"{name}: shapes", fmt_shapes(shape_counts(shapes)),
                fmt_shapes(shape_counts(k.get("shapes") or [])))
        c.equal(f"{name}: other_shapes", 0, k.get("other_shapes", 0))


def check_streams(c, p, want, handles):
    streams = p.get("streams") or []
    for label, w in want.items():
        if w.get("per_thread"):
            found = [s for s in streams if s.get("per_thread")]
            where = "the per-thread stream"
        else:
            if label not in handles:
                c.fail(f"stream {label}", "a HANDLE line in the program's output", "none")
                continue
            found = [s for s in streams if s.get("handle") == handles[label]
                     and not s.get("per_thread")]
            where = f"stream {label} ({handles[label]:#x})"
        if len(found) != 1:
            c.fail(where, "one entry", f"{len(found)} of {[s.get('handle') for s in streams]}")
            continue
        s = found[0]
        for key, value in w.items():
            if key == "copies":
                for ck in COPY_KEYS:
                    c.equal(f"{where}: copies.{ck}", value[ck], (s.get("copies") or {}).get(ck))
            else:
                c.equal(f"{where}: {key}", value, s.get(key))


def check_per_thread_streams(c, p, want):
    found = [s for s in p.get("streams") or [] if s.get("per_thread")]
    c.equal("per-thread streams", want["count"], len(found))
    c.equal("per-thread streams: distinct threads", len(found),
            len({s.get("thread") for s in found}))
    for s in found:
        where = f"per-thread stream of thread {s.get('thread')}"
        c.equal(f"{where}: launches", want["launches"], s.get("launches"))
        c.equal(f"{where}: syncs", want["syncs"], s.get("syncs"))
        c.equal(f"{where}: device_to_host", want["device_to_host"],
                (s.get("copies") or {}).get("device_to_host"))


def check_launch_log(c, p, pid, path):
    """The tracer's launches per kernel and shape against a launch log's lines for the pid."""
    logged = collections.Counter()
    graphs = 0
    for line in open(path):
        entry = json.loads(line)
        if entry.get("pid") != pid:
            continue
        if entry.get("api") == "cuGraphLaunch":
            graphs += 1
            continue
        name = expectations.KERNEL_NAMES.get(entry["kernel"], entry["kernel"])
        logged[(name,) + shape_key(entry)] += 1
    traced = collections.Counter()
    traced_graphs = 0
    for k in p.get("top_kernels") or []:
        if k["name"] == "graph":
            traced_graphs += k.get("launches", 0)
            continue
        for s in k.get("shapes") or []:
            traced[(k["name"],) + shape_key(s)] += s["launches"]
    fmt = lambda counts: "; ".join(f"{n} {list(g)}x{list(b)} shared {sh}: {v}"  # noqa: E731
                                   for (n, g, b, sh), v in sorted(counts.items())) or "none"
    c.equal("launches as the launch log has them", fmt(logged), fmt(traced))
    if graphs:
        c.equal("graph launches as the test driver logged them", graphs, traced_graphs)


def find_process(c, doc, pid):
    entries = [p for p in doc.get("processes") or [] if p.get("pid") == pid]
    if len(entries) != 1:
        c.fail(f"process {pid}", "one entry in processes", len(entries))
        return None
    return entries[0]


def self_test():
    """Turns each expectation into the JSON a correct tracer would write; the checker must pass it,
    and fail it once any one figure is off."""
    handles = {"legacy": 0, "blocking": 0x1000, "nonblocking": 0x2000, "stream": 0x3000}
    args = argparse.Namespace(repeat=2, calls=None)
    problems = []
    for name, make in expectations.PROGRAMS.items():
        if name == "all_calls_failed":
            calls = ["cudaMalloc cudaErrorInsufficientDriver",
                     "cudaEventCreate cudaErrorInsufficientDriver",
                     "cudaLaunchKernel cudaErrorInsufficientDriver", "cudaFree cudaSuccess"]
            # With launch results, the failed launch is a failure ...
            exp = expectations.all_calls_failed(calls, launch_results=True)
            if exp["failures"] != {"cudaErrorInsufficientDriver": 2} or exp["launches"] != 0:
                problems.append(f"all_calls_failed (launch results): {exp}")
            # ... recorded at entry, a launch (the program `like` names its kernel).
            exp = expectations.all_calls_failed(calls, like="trace_memory")
            if exp["failures"] != {"cudaErrorInsufficientDriver": 1} or exp["launches"] != 1:
                problems.append(f"all_calls_failed (at entry): {exp}")
            exp = expectations.all_calls_failed(calls, launch_results=True)
        else:
            exp = make(args)
        proc = synthesize(exp, handles)
        c = Checker(name, quiet=True)
        check_process(c, proc, exp, handles)
        if c.failures:
            check_process(Checker(name), proc, exp, handles)  # prints what failed
            problems.append(f"{name}: a correct report fails {c.failures} checks")
        for path, mutated in mutations(proc):
            c = Checker(name, quiet=True)
            check_process(c, mutated, exp, handles)
            if c.failures == 0:
                problems.append(f"{name}: {path} changed, and no check failed")
    problems += launch_log_self_test(handles)
    problems += lower_bounds_self_test(handles)
    for p in problems:
        print("FAIL: self-test:", p)
    print(f"self-test: {len(expectations.PROGRAMS)} expectations, "
          f"{'FAILED' if problems else 'all checks bite'}")
    return 1 if problems else 0


def lower_bounds_self_test(handles):
    """--lower-bounds: the full figures and none at all pass; one figure above fails."""
    problems = []
    exp = expectations.trace_memory()
    proc = synthesize(exp, handles)
    proc["attached_late"] = True
    empty = {"pid": 1, "exited": True, "attached_late": True, "exit_code": None}
    for what, report in (("the full figures", proc), ("nothing seen", empty)):
        c = Checker("lower bounds", quiet=True)
        check_lower_bounds(c, report, exp)
        if c.failures:
            problems.append(f"lower bounds: {what} fail {c.failures} checks")
    for mutated in (dict(proc, syncs=proc["syncs"] + 1), dict(proc, attached_late=False),
                    dict(proc, failures={"cudaErrorMemoryAllocation": 4})):
        c = Checker("lower bounds", quiet=True)
        check_lower_bounds(c, mutated, exp)
        if c.failures == 0:
            problems.append("lower bounds: a figure above the expected one, and no check failed")
    return problems


def launch_log_self_test(handles):
    """check_launch_log on a log written from trace_kernels' shapes: passes; a line less fails."""
    import tempfile
    exp = expectations.trace_kernels()
    mangled = {v: k for k, v in expectations.KERNEL_NAMES.items()}
    lines = []
    for name, shapes in exp["kernels"].items():
        for s in shapes:
            lines += [json.dumps({"pid": 1, "kernel": mangled[name], "grid": s["grid"],
                                  "block": s["block"], "shared_bytes": s["shared_bytes"]})] * s["launches"]
    lines.append(json.dumps({"pid": 2, "kernel": "_Z4AxpyfPKfPfi", "grid": [1, 1, 1],
                             "block": [1, 1, 1], "shared_bytes": 0}))  # another process's
    proc = synthesize(exp, handles)
    problems = []
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        c = Checker("launch log", quiet=True)
        check_launch_log(c, proc, 1, f.name)
        if c.failures:
            problems.append("launch log: a matching log fails")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        f.write("\n".join(lines[1:]) + "\n")
        f.flush()
        c = Checker("launch log", quiet=True)
        check_launch_log(c, proc, 1, f.name)
        if not c.failures:
            problems.append("launch log: a launch missing from the log, and no check failed")
    return problems


def synthesize(exp, handles):
    proc = {"pid": 1, "exited": True, "attached_late": False}
    for key in SCALAR_KEYS:
        if key in exp:
            want = exp[key]
            proc[key] = want[2] if isinstance(want, tuple) else want
    if "copies" in exp:
        proc["copies"] = dict(exp["copies"])
    proc["failures"] = dict(exp.get("failures", {}))
    kernels = []
    for name, shapes in exp.get("kernels", {}).items():
        if isinstance(shapes, int):
            kernels.append({"name": name, "launches": shapes})
        else:
            kernels.append({"name": name, "launches": sum(s["launches"] for s in shapes),
                            "shapes": copy.deepcopy(shapes), "other_shapes": 0})
    proc["top_kernels"] = kernels
    streams = []
    for label, w in exp.get("streams", {}).items():
        s = {"handle": 0 if w.get("per_thread") else handles[label], "thread": 7,
             "per_thread": False}
        s.update(copy.deepcopy(w))
        streams.append(s)
    if "per_thread_streams" in exp:
        w = exp["per_thread_streams"]
        for t in range(w["count"]):
            streams.append({"handle": 2, "per_thread": True, "thread": 100 + t,
                            "launches": w["launches"], "syncs": w["syncs"],
                            "copies": {"device_to_host": w["device_to_host"]}})
    proc["streams"] = streams
    return proc


def mutations(proc):
    """Each numeric leaf of the report, changed by one (a live figure after exit: by one, not to 0)."""
    def walk(node, path):
        if isinstance(node, bool):
            yield path, not node
        elif isinstance(node, int):
            yield path, node + 1
        elif isinstance(node, dict):
            for k, v in node.items():
                if k in ("pid", "thread", "handle"):
                    continue
                yield from walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, path + [i])
    for path, value in walk(proc, []):
        mutated = copy.deepcopy(proc)
        node = mutated
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        yield "/".join(map(str, path)), mutated


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--program", choices=sorted(expectations.PROGRAMS))
    ap.add_argument("--out")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--calls")
    ap.add_argument("--like", choices=sorted(expectations.PROGRAMS),
                    help="all_calls_failed: the program whose kernels its launches have")
    ap.add_argument("--launch-results", action="store_true",
                    help="the trace was taken with --launch-results (failed launches are failures)")
    ap.add_argument("--launch-log")
    ap.add_argument("--late", action="store_true")
    ap.add_argument("--lower-bounds", action="store_true")
    ap.add_argument("--remote")
    ap.add_argument("--label")
    ap.add_argument("--unprobeable", type=int)
    ap.add_argument("--executable")
    ap.add_argument("--health", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.json:
        ap.error("--json is required")
    try:
        with open(args.json) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL: {args.label or args.json}: flyt-trace's JSON: expected a readable JSON "
              f"file, seen {e}")
        return 1
    if args.health:
        c = Checker(args.label or "health")
        h = doc.get("health") or {}
        c.equal("events_lost", 0, h.get("events_lost"))
        if (h.get("libraries_probed") or 0) >= 1:
            c.ok("libraries_probed", h.get("libraries_probed"))
        else:
            c.fail("libraries_probed", ">= 1", h.get("libraries_probed"))
        return 1 if c.failures else 0
    if args.unprobeable is not None:
        c = Checker(args.label or f"unprobeable {args.unprobeable}")
        entries = [u for u in (doc.get("health") or {}).get("unprobeable") or []
                   if u.get("pid") == args.unprobeable]
        c.equal("entries in health.unprobeable", 1, len(entries))
        for u in entries:
            exe = u.get("executable") or ""
            c.equal("executable", os.path.basename(args.executable), os.path.basename(exe))
            if u.get("reason"):
                c.ok("reason", u["reason"])
            else:
                c.fail("reason", "a reason", u.get("reason"))
        return 1 if c.failures else 0
    if args.pid is None or args.program is None:
        ap.error("--pid and --program are required")
    c = Checker(args.label or f"{args.program} (pid {args.pid})")
    p = find_process(c, doc, args.pid)
    if p is not None:
        exp = expectations.PROGRAMS[args.program](args)
        if args.lower_bounds:
            c.equal("exited", True, p.get("exited"))
            check_lower_bounds(c, p, exp)
            return 1 if c.failures else 0
        check_process(c, p, exp, handles_of(args.out), late=args.late, remote=args.remote)
        if args.launch_log:
            check_launch_log(c, p, args.pid, args.launch_log)
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
