#!/usr/bin/env python3
"""Keeps README.md's opening true: what it says exists, exists; what it says is not built, is not.

Usage: readme_status_test.py SOURCE_DIR BUILD_DIR

The README's opening has two paragraphs a newcomer reads first: "What exists today: ..." and "Not
built yet (...): ...". Each claim below ties a phrase of one of them to evidence in the tree (a
source file, a symbol in the code, a file the build makes). The test fails when a phrase is missing
from its paragraph, when something the README calls built has no evidence, and — the case that went
stale before — when something the README calls "not built yet" now exists: then the README must say
so. A new capability is added here (its phrase and its evidence) in the commit that builds it.
Prints "N passed, N failed".
"""
import os
import re
import sys


def file_exists(path):
    return lambda src, build: os.path.exists(os.path.join(src, path))


def built(path):
    return lambda src, build: os.path.exists(os.path.join(build, path))


def code_has(path, pattern):
    def probe(src, build):
        full = os.path.join(src, path)
        if os.path.isdir(full):
            files = [os.path.join(d, f) for d, _, fs in os.walk(full) for f in fs
                     if f.endswith((".cc", ".h", ".c", ".toml", ".def"))]
        else:
            files = [full] if os.path.exists(full) else []
        rx = re.compile(pattern)
        for f in files:
            with open(f, encoding="utf-8", errors="replace") as fh:
                if rx.search(fh.read()):
                    return True
        return False
    return probe


# (phrase in "What exists today", evidence that it exists)
EXISTS = [
    ("NVML is loaded at run time", file_exists("src/nvml/library.cc")),
    ("dcgm-exporter's metric names", code_has("src/node/metrics.cc", r"DCGM_FI_DEV_GPU_UTIL")),
    ("traces every CUDA", file_exists("src/trace/bpf/cuda_trace.bpf.c")),
    ("usage profile", file_exists("src/profile/profiler.cc")),
    ("Kubernetes Node annotations", file_exists("src/node/kube_annotations.cc")),
    ("reservation ledger", file_exists("src/sched/ledger.cc")),
    ("PostgreSQL", file_exists("src/store/postgres_store.cc")),
    ("web dashboard", file_exists("web/src")),
    ("`libcudart.so.13`", file_exists("src/runtime/runtime.cc")),
    ("`flyt-client-manager`", file_exists("src/client_manager/manager.cc")),
    ("over shared memory", file_exists("src/remote/shm_channel.cc")),
    ("moved live", file_exists("src/remote_server/migrate.cc")),
    ("resized while it runs", file_exists("src/remote_server/resize.cc")),
    ("`libcuda.so.1`", file_exists("src/libcuda/driver.cc")),
    ("nvcc's default static runtime", file_exists("src/libcuda/export_tables.cc")),
]

# (phrase in "Not built yet", evidence that would mean it is built now)
NOT_BUILT = [
    # Until a test program uses one of them through flyt.
    ("NVIDIA's math libraries", code_has("tests/programs", r"cublasCreate|cufftPlan")),
    ("DCGM's profiling metrics", code_has("src/nvml/nvml_functions.h", r"nvmlGpmMetricsGet")),
    ("MIG instances as devices",
     code_has("src/nvml/nvml_functions.h", r"nvmlDeviceGetMigDeviceHandleByIndex")),
    ("TLS on flyt's own channels", code_has("src/common", r"SSLServer|SSL_CTX_new")),
    ("Debian packages", file_exists("deploy/debian")),
]


def paragraph(text, opening):
    """The paragraph of README.md that starts with `opening`, joined into one line."""
    for para in re.split(r"\n\s*\n", text):
        if para.lstrip().startswith(opening):
            return " ".join(para.split())
    return None


def main():
    if len(sys.argv) != 3:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    src, build = sys.argv[1], sys.argv[2]
    with open(os.path.join(src, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    passed = failed = 0

    def check(ok, message):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print("FAIL:", message)

    exists = paragraph(readme, "What exists today:")
    not_built = paragraph(readme, "Not built yet")
    check(exists is not None, 'README.md has no paragraph opening "What exists today:"')
    check(not_built is not None, 'README.md has no paragraph opening "Not built yet"')
    exists = exists or ""
    not_built = not_built or ""

    for phrase, evidence in EXISTS:
        check(phrase in exists, f'"What exists today" no longer names {phrase!r}: '
              "update tests/docs/readme_status_test.py with the README")
        check(evidence(src, build), f"README.md says {phrase!r} exists, but its evidence is gone")
    for phrase, evidence in NOT_BUILT:
        if phrase not in not_built:
            # Moved out of "Not built yet": then it must be built.
            check(evidence(src, build),
                  f'README.md no longer lists {phrase!r} as not built, but it is not built')
            continue
        check(not evidence(src, build),
              f'README.md says {phrase!r} is not built yet, but it is: update README.md\'s opening '
              "(and this test's EXISTS list)")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
