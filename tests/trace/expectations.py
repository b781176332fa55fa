"""What the CUDA tracer must report for each test program of tests/trace, in one place, so that a figure is fixed here and nowhere else. Read by
check_trace.py (which tests/e2e/trace_test.sh runs on flyt-trace's JSON).

Each program's source opens with the call-by-call account these figures come from.

Rules the figures assume (what the tracer counts); change a rule here, in one place:
  launches     launch calls (cudaLaunchKernel and __cudaLaunchKernel, their _ptsz twins,
               cudaLaunchKernelExC, cuLaunchKernel, cuLaunchKernelEx, and graph launches, which
               appear under the kernel name "graph"). Kernel launches are recorded at entry: a
               kernel launch that fails still counts as a launch, not a failure — unless the trace
               was taken with --launch-results, where a failed launch is a failure, not a launch, and
               for a runtime linked into the executable (its launches keep their return probes).
               A graph launch is always recorded with its result (a failed one is a failure). A
               launch through the runtime that reaches the driver is counted once.
  syncs        successful cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
               cudaEventQuery (cudaSuccess), cuStreamSynchronize, cuCtxSynchronize, and blocking
               cudaMemcpy host→device and device→host (not device→device, not host→host: CUDA
               does not block the host for those). A record (cudaEventRecord) is not a sync.
  stream syncs a stream's own syncs: cudaStreamSynchronize on it, an event sync or query of an
               event last recorded on it, a blocking cudaMemcpy on it (the legacy stream).
               cudaDeviceSynchronize and cuCtxSynchronize count for the process, no stream.
  allocations  successful allocation calls of every kind: device (cudaMalloc, cudaMallocAsync,
  / frees      cudaMallocPitch, cuMemAlloc_v2), managed (cudaMallocManaged) and pinned host
               (cudaMallocHost, cudaHostAlloc), and the successful frees of what was seen
               allocated (cudaFree, cudaFreeAsync, cuMemFree_v2, cudaFreeHost) (stats.h). The
               bytes are apart: device_memory_*, managed_memory_bytes, pinned_host_*.
  copies       cudaMemcpy(Async) bytes by direction and calls; cudaMemset(Async) bytes and calls.
               The driver's copies (cuMemcpy*) are not in the issue's list: not asserted.
  failures     failed calls of the traced entry points (TRACED_CALLS), by error name. Calls the
               tracer does not probe (cudaStreamBeginCapture, cudaEventCreate...) are not counted,
               nor a failed __cudaGetKernel (nvcc's stub calls it before the launch, which fails
               too and is the failure counted).
  leaks        at exit: device bytes/allocations never freed (leaked_*), pinned host bytes never
               freed (leaked_pinned_host_bytes).
"""

import argparse

KiB = 1 << 10
MiB = 1 << 20

# The entry points whose failures the tracer counts (by the name a program logs with --calls).
TRACED_CALLS = {
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaGraphLaunch",
    "cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaMallocFromPoolAsync",
    "cudaMallocManaged", "cudaMallocPitch", "cudaMallocHost", "cudaHostAlloc", "cudaFreeHost",
    "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset", "cudaMemsetAsync",
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventRecord", "cudaEventSynchronize",
    "cudaEventQuery", "cudaStreamCreate", "cudaStreamCreateWithFlags",
    "cudaStreamCreateWithPriority", "cudaStreamDestroy", "cudaSetDevice",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch",
    "cuStreamSynchronize", "cuCtxSynchronize",
}

# Mangled (as the sim server's launch log and the test driver's log name them) → demangled (as the
# tracer reports them; c++filt's spelling).
KERNEL_NAMES = {
    "_Z4AxpyfPKfPfi": "Axpy(float, float const*, float*, int)",
    "_Z5ScaleIfLi4EEvPT_S0_i": "void Scale<float, 4>(float*, float, int)",
    "_Z5ScaleIdLi2EEvPT_S0_i": "void Scale<double, 2>(double*, double, int)",
    "_Z6ReducePKfPfi": "Reduce(float const*, float*, int)",
    "_Z5TouchPii": "Touch(int*, int)",
    "_Z4MarkPi": "Mark(int*)",
    "_Z4FillPiii": "Fill(int*, int, int)",
    "driver_fill": "driver_fill",
    "_Z11DriverScalePfi": "DriverScale(float*, int)",
}

NO_COPIES = {"host_to_device": 0, "device_to_host": 0, "device_to_device": 0, "host_to_host": 0,
             "memset": 0, "copies": 0, "memsets": 0}


def shape(grid, block, shared, launches):
    return {"grid": list(grid), "block": list(block), "shared_bytes": shared, "launches": launches}


def trace_memory():
    """tests/trace/trace_memory.cu through flyt's runtime against the sim server."""
    live = 1 * MiB + 3 * MiB + 4096 + 12345 + 256 * KiB          # 4,472,889: a0..a4
    return {
        "launches": 0,
        "kernels": {},  # name → [shapes] or an int (launches only); exactly these names
        "allocations": 11,                                      # a0..a4, h, h2, async, pitch, r, m
        "frees": 8,                                             # async, pitch, a0 a1 a2 r, h, m
        "device_memory_peak_bytes": live + 2 * MiB,             # 6,570,041 (with r)
        "device_memory_bytes": 12345 + 256 * KiB,               # 274,489 live at exit
        "managed_memory_bytes": 0,
        "pinned_host_peak_bytes": 1 * MiB + 64 * KiB,           # 1,114,112
        "pinned_host_bytes": 64 * KiB,                          # h2, never freed
        "copies": {"host_to_device": 1 * MiB + 12345,           # 1,060,921
                   "device_to_host": 4096 + 256 * KiB,          # 266,240
                   "device_to_device": 1 * MiB,
                   "host_to_host": 100,
                   "memset": 3 * MiB + 4096,                    # 3,149,824
                   "copies": 6, "memsets": 2},
        # cudaDeviceSynchronize + cudaStreamSynchronize(0) + blocking cudaMemcpy H2D and D2H.
        "syncs": 4,
        # The retry loop: 1 TiB .. 256 GiB. (cudaMallocManaged succeeds on flyt since issue 17.)
        "failures": {"cudaErrorMemoryAllocation": 3},
        "leaked_bytes": 12345 + 256 * KiB,                      # 274,489: a3 + a4
        "leaked_allocations": 2,
        "leaked_pinned_host_bytes": 64 * KiB,
        "exit_code": 0,
        "streams": {"legacy": {"non_blocking": False, "per_thread": False, "launches": 0,
                               "syncs": 3,                      # StreamSync(0) + 2 blocking copies
                               "copies": {"host_to_device": 1 * MiB + 12345,
                                          "device_to_host": 4096 + 256 * KiB,
                                          "device_to_device": 1 * MiB, "host_to_host": 100,
                                          "memset": 3 * MiB + 4096, "copies": 6, "memsets": 2}}},
    }


def trace_kernels(repeat=1, per_thread=False):
    """tests/trace/trace_kernels.cu (--repeat R). per_thread: the trace_kernels_ptds build, whose
    "legacy" launches and cudaStreamSynchronize(0) go to the main thread's per-thread stream."""
    r = repeat
    default = ({"per_thread": True, "non_blocking": False} if per_thread else
               {"per_thread": False, "non_blocking": False})
    return {
        "launches": 22 * r,
        "kernels": {
            "Axpy(float, float const*, float*, int)": [
                shape((64, 1, 1), (256, 1, 1), 0, 5 * r), shape((32, 1, 1), (128, 1, 1), 0, 3 * r)],
            "void Scale<float, 4>(float*, float, int)": [
                shape((16, 2, 1), (32, 4, 1), 0, 4 * r)],
            "void Scale<double, 2>(double*, double, int)": [
                shape((8, 1, 1), (64, 1, 1), 0, 2 * r)],
            "Reduce(float const*, float*, int)": [
                shape((10, 1, 1), (128, 1, 1), 512, 6 * r),
                shape((4, 1, 1), (256, 1, 1), 1024, 2 * r)],    # the cudaLaunchKernelExC ones
        },
        "allocations": 4,
        "frees": 4,
        "device_memory_peak_bytes": 16384 + 16384 + 32768 + 16384,  # 81,920
        "device_memory_bytes": 0,
        "managed_memory_bytes": 0,
        "pinned_host_peak_bytes": 0,
        "pinned_host_bytes": 0,
        "copies": dict(NO_COPIES),
        "syncs": 8 * r,
        "failures": {},
        "leaked_bytes": 0,
        "leaked_allocations": 0,
        "leaked_pinned_host_bytes": 0,
        "exit_code": 0,
        "streams": {
            "legacy": dict(default, launches=5 * r, syncs=1 * r),
            "blocking": {"non_blocking": False, "per_thread": False, "launches": 7 * r,
                         "syncs": 2 * r},
            # cudaStreamSynchronize + cudaEventSynchronize + cudaEventQuery of its event.
            "nonblocking": {"non_blocking": True, "per_thread": False, "launches": 10 * r,
                            "syncs": 3 * r},
        },
    }


def trace_graph_flyt():
    """tests/trace/trace_graph.cu through flyt's runtime (graphs remoted since issue 17).

    The tracer counts each cudaLaunchKernel call as a launch, and does not follow stream capture:
    the three launches recorded into the capture count as launches too (a real GPU's runtime is
    traced the same way; the graph's kernels run only as the 5 graph launches)."""
    return {
        "launches": 9,                                          # 1 direct + 3 captured + 5 graph
        "kernels": {"Touch(int*, int)": [shape((4, 1, 1), (64, 1, 1), 0, 3)],
                    "Mark(int*)": [shape((2, 1, 1), (32, 1, 1), 0, 1)],
                    "graph": 5},
        "allocations": 1, "frees": 1,
        "device_memory_peak_bytes": 4096, "device_memory_bytes": 0,
        "copies": dict(NO_COPIES),
        "syncs": 1,
        "failures": {},
        "leaked_bytes": 0, "leaked_allocations": 0,
        "exit_code": 0,
        "streams": {"stream": {"non_blocking": True, "per_thread": False, "launches": 9,
                               "syncs": 1}},
    }


def trace_graph_gpu():
    """trace_graph on a real GPU (the `gpu` label): the capture and 5 graph launches succeed, and
    NVIDIA's runtime is traced as flyt's is: the 3 captured cudaLaunchKernel calls count as
    launches (seen on an H100, driver 580.159.04: 9 launches, Mark(int*) among the kernels)."""
    return trace_graph_flyt()


def trace_driver():
    """tests/trace/trace_driver.c against the test driver (tests/trace/test_libcuda.c)."""
    return {
        "launches": 11,
        "kernels": {
            "driver_fill": [shape((8, 1, 1), (128, 1, 1), 0, 3), shape((16, 1, 1), (32, 1, 1), 0, 2)],
            "DriverScale(float*, int)": [shape((2, 2, 1), (64, 2, 1), 256, 4)],
            "graph": 2,  # cuGraphLaunch ×2 (an int: launches only, shapes not asserted)
        },
        "allocations": 3, "frees": 2,
        "device_memory_peak_bytes": 1 * MiB + 64 * KiB + 4096,  # 1,118,208
        "device_memory_bytes": 1 * MiB,
        "syncs": 3,                                             # cuStreamSynchronize ×2, cuCtxSynchronize
        "failures": {"CUDA_ERROR_OUT_OF_MEMORY": 2},
        "leaked_bytes": 1 * MiB, "leaked_allocations": 1, "leaked_pinned_host_bytes": 0,
        "exit_code": 0,
        "streams": {
            "legacy": {"launches": 3},
            "stream": {"non_blocking": True, "per_thread": False, "launches": 8, "syncs": 2},
        },
    }


def trace_threads():
    """tests/trace/trace_threads.cu (--default-stream per-thread): four threads, each with its own
    default stream; barriers make the peak exact."""
    return {
        "launches": 4,
        "kernels": {"Fill(int*, int, int)": [shape((256, 1, 1), (256, 1, 1), 0, 4)]},
        "allocations": 4, "frees": 4,
        "device_memory_peak_bytes": 4 * 256 * KiB,              # 1,048,576: all four live at once
        "device_memory_bytes": 0,
        "copies": dict(NO_COPIES, device_to_host=1 * MiB, copies=4),
        "syncs": 8,                                             # 4 stream syncs + 4 blocking copies
        "failures": {},
        "leaked_bytes": 0, "leaked_allocations": 0,
        "exit_code": 0,
        # Four per-thread streams, one per worker thread (distinct `thread`), each: 1 launch,
        # 2 syncs, 262,144 bytes device→host.
        "per_thread_streams": {"count": 4, "launches": 1, "syncs": 2, "device_to_host": 256 * KiB},
    }


# The kernel launch entry points (recorded at entry unless launch results are asked for).
KERNEL_LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
                   "cuLaunchKernel", "cuLaunchKernelEx"}


def all_calls_failed(calls_lines, like=None, launch_results=False):
    """A program whose every call failed (NVIDIA's runtime with no driver, the static build): the
    failures are the traced calls its --calls log lists; nothing else happened — but for its
    kernel launches, which are recorded at entry unless launch_results: launches then, each of its
    kernel with its shape, as in the expectation of the program `like` (the same source run
    where its calls succeed)."""
    failures = {}
    launches = 0
    for line in calls_lines:
        parts = line.split()
        if len(parts) != 2 or parts[1] in ("cudaSuccess", "CUDA_SUCCESS"):
            continue
        if parts[0] in KERNEL_LAUNCHES and not launch_results:
            launches += 1
        elif parts[0] in TRACED_CALLS:
            failures[parts[1]] = failures.get(parts[1], 0) + 1
    kernels = {}
    if launches:
        if like is None:
            raise ValueError("all_calls_failed: launches at entry need the program's kernels (like)")
        kernels = PROGRAMS[like](argparse.Namespace(repeat=1))["kernels"]
    return {
        "launches": launches, "kernels": kernels,
        "allocations": 0, "frees": 0,
        "device_memory_peak_bytes": 0, "device_memory_bytes": 0, "managed_memory_bytes": 0,
        "pinned_host_peak_bytes": 0, "pinned_host_bytes": 0,
        "copies": dict(NO_COPIES),
        "syncs": 0,
        "failures": failures,
        "leaked_bytes": 0, "leaked_allocations": 0, "leaked_pinned_host_bytes": 0,
        "exit_code": 0,
    }


# The expectation of each scenario check_trace.py --program accepts.
PROGRAMS = {
    "trace_memory": lambda args: trace_memory(),
    "trace_kernels": lambda args: trace_kernels(args.repeat),
    "trace_kernels_ptds": lambda args: trace_kernels(args.repeat, per_thread=True),
    "trace_graph": lambda args: trace_graph_flyt(),
    "trace_graph_gpu": lambda args: trace_graph_gpu(),
    "trace_driver": lambda args: trace_driver(),
    "trace_threads": lambda args: trace_threads(),
    "all_calls_failed": lambda args: all_calls_failed(open(args.calls).read().splitlines(),
                                                      like=getattr(args, "like", None),
                                                      launch_results=getattr(args, "launch_results",
                                                                             False)),
}
