// What the CUDA tracer tells the rest of flyt: per process × GPU statistics of the CUDA calls it
// saw (ProcessCuda), the tracer's own health (TracerHealth), and the interface the node manager
// reads them through (StatsSource). Plain values; copy freely between threads. A StatsSource is
// thread-safe.
//
// Terms, as the docs use them:
//   enqueue→sync span: from the first kernel or copy enqueued on a stream after its last sync to
//     the return of the call that synchronised it (stream, event, device or context sync, a
//     blocking host↔device cudaMemcpy). The sum of a stream's spans is its "busy" time. These are host-side
//     times: no GPU timestamp is claimed.
//   core usage: thread-seconds (min(grid × block threads, the GPU's cores) × span) per second of
//     wall time, i.e. how many of the GPU's cores the process kept busy on average.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace flyt::trace {

// One launch configuration of a kernel and how often it was launched with it.
struct LaunchShape {
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t shared_bytes = 0;
  uint64_t launches = 0;
};

// One kernel (demangled name) of one process. The top-N kernels by launches are kept by name;
// the rest add up under the name "other".
struct KernelStats {
  std::string name;  // demangled; "other"; "graph" for graph launches; "unknown" if unresolved
  uint64_t launches = 0;
  std::vector<LaunchShape> shapes;  // at most a few per kernel; the rest in other_shapes
  uint64_t other_shapes = 0;        // launches whose shape did not fit in `shapes`
};

struct CopyBytes {
  uint64_t host_to_device = 0;
  uint64_t device_to_host = 0;
  uint64_t device_to_device = 0;
  uint64_t host_to_host = 0;
  uint64_t memset = 0;  // bytes set by cudaMemset(Async)
  uint64_t copies = 0;  // calls
  uint64_t memsets = 0; // calls
};

struct StreamStats {
  uint64_t handle = 0;        // 0: the legacy default stream
  bool non_blocking = false;  // created with cudaStreamNonBlocking
  bool per_thread = false;    // a thread's per-thread default stream (tid in `thread`)
  uint32_t thread = 0;
  bool destroyed = false;     // cudaStreamDestroy'ed; its figures are final
  uint64_t launches = 0;
  CopyBytes copies;
  // The calls that synchronised this stream by naming it: cudaStreamSynchronize/cuStreamSynchronize
  // on it, an event sync or successful query of an event last recorded on it, a host↔device
  // blocking cudaMemcpy on it. Syncs that reach it through the legacy stream or the device
  // (cudaDeviceSynchronize, cuCtxSynchronize) close its spans but count only in ProcessCuda.syncs.
  uint64_t syncs = 0;
  double busy_seconds = 0;    // sum of enqueue→sync spans
};

// One process on one GPU.
struct ProcessCuda {
  uint32_t pid = 0;
  std::string comm;          // /proc/<pid>/comm when first seen
  std::string gpu_uuid;      // physical GPU; empty when unknown; remote runtime: see `remote`
  std::string mig_uuid;      // "MIG-..." when CUDA_VISIBLE_DEVICES named a MIG instance
  // NVML's process list put the process on another GPU than its traced device selection says:
  // nvml_mismatch is set, and where NVML names exactly one GPU, gpu_uuid is NVML's and
  // gpu_from_nvml is set (also when the selection could not be mapped at all).
  bool nvml_mismatch = false;
  bool gpu_from_nvml = false;
  int32_t device = 0;        // the CUDA device ordinal the program used
  bool remote = false;       // traced in flyt's libcudart: the GPU is behind flyt-gpu-server
  std::string remote_server; // FLYT_SERVER of the process, when remote
  uint64_t cgroup_id = 0;
  std::string container_id;  // empty outside a container
  std::string library;       // the probed file the calls came through (path)
  bool attached_late = false;  // the process called CUDA before its library was probed

  std::chrono::system_clock::time_point first_seen;
  std::chrono::system_clock::time_point last_seen;

  uint64_t launches = 0;
  double launches_per_second = 0;    // over the last rate window
  double busy_seconds = 0;           // sum over streams of enqueue→sync spans
  double core_usage = 0;             // cores, over the last rate window (see above)
  // Successful cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
  // cudaEventQuery (cudaSuccess), cuStreamSynchronize, cuCtxSynchronize, and blocking cudaMemcpy
  // host→device or device→host (not device→device nor host→host: CUDA does not synchronise the
  // stream for those).
  uint64_t syncs = 0;

  uint64_t device_memory_bytes = 0;  // live now (cudaMalloc*, cuMemAlloc, pitch, async)
  uint64_t device_memory_peak_bytes = 0;
  uint64_t managed_memory_bytes = 0; // cudaMallocManaged, live
  uint64_t pinned_host_bytes = 0;    // cudaMallocHost/cudaHostAlloc, live
  uint64_t pinned_host_peak_bytes = 0;
  // Successful allocation calls of every kind (device: cudaMalloc, cudaMallocAsync,
  // cudaMallocFromPoolAsync, cudaMallocPitch, cuMemAlloc; managed: cudaMallocManaged; pinned host:
  // cudaMallocHost, cudaHostAlloc), and successful frees (cudaFree, cudaFreeAsync, cuMemFree,
  // cudaFreeHost) of a pointer the tracer saw allocated (the others are unknown_frees).
  uint64_t allocations = 0;
  uint64_t frees = 0;
  // Successful frees of a pointer the tracer never saw allocated (allocated before the probe was
  // attached, or beyond max_allocations_per_process): counted here, never subtracted.
  uint64_t unknown_frees = 0;

  CopyBytes copies;

  // Failed calls by error name ("cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY",
  // "error 999" when the code has no name), counted, never turned into memory.
  std::map<std::string, uint64_t> failures;

  std::vector<KernelStats> top_kernels;  // by launches, descending; "other" last
  std::vector<StreamStats> streams;

  // Set when the process exited: what it never freed.
  bool exited = false;
  std::optional<int32_t> exit_code;
  uint64_t leaked_bytes = 0;        // device + managed
  uint64_t leaked_allocations = 0;
  uint64_t leaked_pinned_host_bytes = 0;
};

// A process the tracer knows runs CUDA but cannot probe.
struct UnprobeableProcess {
  uint32_t pid = 0;
  std::string executable;
  std::string reason;  // e.g. "stripped static binary: no .symtab, carries .nv_fatbin"
};

struct TracerHealth {
  bool enabled = false;
  std::string disabled_reason;  // why tracing is off (no root/CAP_BPF, no BTF, old kernel, config)
  uint64_t events_received = 0;
  uint64_t events_lost = 0;     // ring-buffer reservations that failed (counted in BPF)
  std::map<std::string, uint64_t> attach_failures;  // by reason
  uint64_t libraries_probed = 0;  // files (inodes) with probes on them
  uint64_t processes_traced = 0;  // processes with at least one record, since start
  uint64_t processes_tracked = 0; // now
  // Bounded memory: what was dropped because a limit was reached.
  uint64_t dropped_processes = 0;
  uint64_t dropped_streams = 0;
  uint64_t dropped_allocations = 0;
  uint64_t dropped_kernel_names = 0;  // beyond max_kernel_names_per_process: launches "unknown"
  // Records shorter than their kind's struct, or of an unknown kind or function: dropped.
  uint64_t malformed_records = 0;
  // Process × GPU entries whose traced GPU NVML's process list contradicts (now).
  uint64_t nvml_mismatches = 0;
  std::vector<UnprobeableProcess> unprobeable;
  std::vector<std::string> libraries;  // the probed files (paths)
};

// Read side of the tracer. Thread-safe.
class StatsSource {
 public:
  virtual ~StatsSource() = default;
  virtual TracerHealth Health() const = 0;
  // Every tracked process × GPU, live ones and recently exited ones (kept a while to show leaks).
  virtual std::vector<ProcessCuda> Processes() const = 0;
};

}  // namespace flyt::trace
