#!/usr/bin/env python3
"""How much of NVIDIA's CUDA runtime flyt's libcudart.so.13 really provides, by family.

Reads src/runtime/cudart_exports.def (one FLYT_CUDART_EXPORT(name, kind) line per export of
NVIDIA's library; kind is kRemoted, kLocal or kUnsupported) and prints, as a markdown table, how
many exports of each family are remoted (forwarded to the GPU server), local (answered in the
client) or unsupported (a stub returning cudaErrorNotSupported). A family comes from the export's
name by the first matching rule of FAMILIES below (exact names first, then prefixes, in order);
families flyt deliberately does not remote are marked so.

  scripts/cuda_coverage.py [--def PATH] [--format markdown|json] [--check]

--check exits 1 unless every export was counted exactly once and the per-family counts add up to
the number of exports in the file (what tests/programs/coverage_test.sh runs). Only the Python
standard library is used.
"""

import argparse
import json
import os
import re
import sys

# (family, deliberately not remoted, exact names, name prefixes). The first family whose exact
# names hold the export's base name (without _ptsz/_ptds/_v2 suffixes), else the first whose
# prefixes start it, wins; so the more specific families come first.
FAMILIES = [
    ("graphics interop (GL, VDPAU, EGL)", True, [],
     ["cudaGraphicsGL", "cudaGraphicsVDPAU", "cudaGraphicsEGL", "cudaGraphics", "cudaGL",
      "cudaVDPAU", "cudaEGL", "cudaEventCreateFromEGLSync"]),
    ("external memory and semaphores", True,
     ["cudaDeviceGetNvSciSyncAttributes", "cudaGraphAddExternalSemaphoresSignalNode",
      "cudaGraphAddExternalSemaphoresWaitNode"],
     ["cudaImportExternal", "cudaDestroyExternal", "cudaExternalMemory",
      "cudaSignalExternalSemaphores", "cudaWaitExternalSemaphores",
      "cudaGraphExternalSemaphores", "cudaGraphExecExternalSemaphores"]),
    ("graphs and stream capture", False,
     ["cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph", "cudaStreamEndCapture",
      "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo", "cudaStreamUpdateCaptureDependencies",
      "cudaThreadExchangeStreamCaptureMode", "cudaDeviceGraphMemTrim",
      "cudaDeviceGetGraphMemAttribute", "cudaDeviceSetGraphMemAttribute"],
     ["cudaGraph", "cudaUserObject"]),
    ("memory pools and stream-ordered allocation", False,
     ["cudaMallocAsync", "cudaFreeAsync", "cudaMallocFromPoolAsync",
      "cudaDeviceGetDefaultMemPool", "cudaDeviceGetMemPool", "cudaDeviceSetMemPool",
      "cudaMemGetDefaultMemPool", "cudaMemGetMemPool", "cudaMemSetMemPool"],
     ["cudaMemPool"]),
    ("arrays, textures, surfaces, 2D/3D memory", False,
     ["cudaMallocArray", "cudaMalloc3DArray", "cudaMallocMipmappedArray", "cudaFreeArray",
      "cudaFreeMipmappedArray", "cudaGetMipmappedArrayLevel", "cudaCreateChannelDesc",
      "cudaGetChannelDesc", "cudaMallocPitch", "cudaMalloc3D",
      "cudaDeviceGetTexture1DLinearMaxWidth"],
     ["cudaArray", "cudaMipmappedArray", "cudaCreateTextureObject", "cudaDestroyTextureObject",
      "cudaGetTextureObject", "cudaCreateSurfaceObject", "cudaDestroySurfaceObject",
      "cudaGetSurfaceObject", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemset2D", "cudaMemset3D",
      "cudaMemcpyToArray", "cudaMemcpyFromArray", "cudaMemcpyArrayToArray"]),
    ("managed memory and IPC", False,
     ["cudaMallocManaged", "__cudaRegisterManagedVar", "cudaStreamAttachMemAsync",
      "cudaLibraryGetManaged"],
     ["cudaMemPrefetch", "cudaMemAdvise", "cudaMemRangeGetAttribute", "cudaMemDiscard",
      "cudaIpc"]),
    ("launch variants, attributes, entry points", False,
     ["cudaLaunchCooperativeKernel", "cudaLaunchKernelExC", "cudaStreamSetAttribute",
      "cudaStreamGetAttribute", "cudaStreamCopyAttributes", "cudaDeviceSetLimit",
      "cudaDeviceGetLimit", "cudaCtxResetPersistingL2Cache", "cudaFuncGetName",
      "cudaGetFuncBySymbol", "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion",
      "cudaOccupancyMaxActiveClusters", "cudaOccupancyMaxPotentialClusterSize",
      "cudaKernelSetAttributeForDevice"],
     []),
    ("registration and modules (nvcc's glue, libraries)", False, [],
     ["__cuda", "cudaLibrary", "cudaGetKernel", "cudaGetExportTable"]),
    ("kernel launch, functions, occupancy", False, [],
     ["cudaLaunch", "cudaFunc", "cudaOccupancy"]),
    ("streams and events", False, [], ["cudaStream", "cudaEvent"]),
    ("memory and copies", False,
     ["cudaFree", "cudaMalloc", "cudaMallocHost", "cudaFreeHost", "cudaMemGetInfo",
      "cudaPointerGetAttributes", "cudaGetSymbolAddress", "cudaGetSymbolSize"],
     ["cudaMemcpy", "cudaMemset", "cudaHost"]),
    ("peer access", False,
     ["cudaDeviceCanAccessPeer", "cudaDeviceEnablePeerAccess", "cudaDeviceDisablePeerAccess",
      "cudaDeviceGetP2PAttribute", "cudaDeviceGetP2PAtomicCapabilities",
      "cudaDeviceFlushGPUDirectRDMAWrites"], []),
    ("errors", False,
     ["cudaGetErrorName", "cudaGetErrorString", "cudaGetLastError", "cudaPeekAtLastError"], []),
    ("profiler and logs", False, [], ["cudaProfiler", "cudaLogs"]),
    ("device and version", False,
     ["cudaChooseDevice", "cudaGetDevice", "cudaGetDeviceCount", "cudaGetDeviceFlags",
      "cudaGetDeviceProperties", "cudaSetDevice", "cudaSetDeviceFlags", "cudaSetValidDevices",
      "cudaInitDevice", "cudaDriverGetVersion", "cudaRuntimeGetVersion"],
     ["cudaDevice", "cudaThread"]),
]
OTHER = "other"
KINDS = ("kRemoted", "kLocal", "kUnsupported")
EXPORT_RE = re.compile(r"^\s*FLYT_CUDART_EXPORT\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,\s*(\w+)\s*\)")
SUFFIX_RE = re.compile(r"(_ptsz|_ptds|_v\d+)+$")


def base_name(name):
    return SUFFIX_RE.sub("", name)


def family_of(name):
    """The family an export belongs to, by FAMILIES' rules; OTHER when none matches."""
    base = base_name(name)
    for family, _, exact, _ in FAMILIES:
        if base in exact or name in exact:
            return family
    for family, _, _, prefixes in FAMILIES:
        if any(base.startswith(p) for p in prefixes):
            return family
    return OTHER


def read_exports(path):
    """[(name, kind)] from a cudart_exports.def; raises ValueError on an unknown kind."""
    exports = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = EXPORT_RE.match(line)
            if not m:
                continue
            name, kind = m.group(1), m.group(2)
            if kind not in KINDS:
                raise ValueError(f"{path}:{lineno}: {name} has unknown kind {kind}")
            exports.append((name, kind))
    return exports


def count(exports):
    """{family: {kind: n}} in FAMILIES' order (OTHER last, only when used)."""
    table = {family: {k: 0 for k in KINDS} for family, _, _, _ in FAMILIES}
    for name, kind in exports:
        table.setdefault(family_of(name), {k: 0 for k in KINDS})[kind] += 1
    return table


def markdown(table, total, source):
    deliberate = {family for family, skip, _, _ in FAMILIES if skip}
    lines = [
        f"Exports of flyt's libcudart.so.13 by family (from `{source}`; {total} in all).",
        "",
        "| family | remoted | local | unsupported | total |",
        "|---|---:|---:|---:|---:|",
    ]
    sums = {k: 0 for k in KINDS}
    for family, kinds in table.items():
        n = sum(kinds.values())
        if n == 0:
            continue
        label = family + (" (deliberately not remoted)" if family in deliberate else "")
        lines.append(f"| {label} | {kinds['kRemoted']} | {kinds['kLocal']} | "
                     f"{kinds['kUnsupported']} | {n} |")
        for k in KINDS:
            sums[k] += kinds[k]
    lines.append(f"| **all** | **{sums['kRemoted']}** | **{sums['kLocal']}** | "
                 f"**{sums['kUnsupported']}** | **{sum(sums.values())}** |")
    return "\n".join(lines) + "\n"


def check(exports, table):
    """Problems with the counts, as strings (empty: they add up)."""
    problems = []
    names = [name for name, _ in exports]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append("listed more than once: " + ", ".join(dupes))
    counted = sum(sum(kinds.values()) for kinds in table.values())
    if counted != len(exports):
        problems.append(f"families count {counted} exports, the file has {len(exports)}")
    for k in KINDS:
        by_family = sum(kinds[k] for kinds in table.values())
        in_file = sum(1 for _, kind in exports if kind == k)
        if by_family != in_file:
            problems.append(f"{k}: families count {by_family}, the file has {in_file}")
    if not exports:
        problems.append("no FLYT_CUDART_EXPORT lines")
    return problems


def main(argv=None):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--def", dest="def_path",
                        default=os.path.join(root, "src", "runtime", "cudart_exports.def"))
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless the per-family counts add up to the exports")
    args = parser.parse_args(argv)
    try:
        exports = read_exports(args.def_path)
    except (OSError, ValueError) as e:
        print(f"cuda_coverage: {e}", file=sys.stderr)
        return 2
    table = count(exports)
    if args.format == "json":
        json.dump({"total": len(exports),
                   "families": {f: k for f, k in table.items() if sum(k.values())},
                   "other": sorted(n for n, _ in exports if family_of(n) == OTHER)},
                  sys.stdout, indent=2)
        print()
    else:
        source = os.path.relpath(args.def_path, root) if args.def_path.startswith(root) \
            else args.def_path
        sys.stdout.write(markdown(table, len(exports), source))
    if args.check:
        problems = check(exports, table)
        for p in problems:
            print(f"cuda_coverage: {p}", file=sys.stderr)
        if problems:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
