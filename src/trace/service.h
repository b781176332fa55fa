// The CUDA tracer as the node manager uses it: options (the `[trace]` config section), the GPUs of
// the node (to map a program's device ordinal to a physical GPU), and one call that starts the
// tracer (BPF probes + ring buffer, tracer.h) feeding its aggregator (aggregator.h).
//
// StartTracing never fails: where tracing cannot run (no root/CAP_BPF, no BTF, an old kernel,
// turned off in the config) the service it returns reports Health().enabled == false with the
// reason, and Processes() is empty. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trace/stats.h"

namespace flyt::trace {

enum class TraceMode { kAuto, kOn, kOff };  // auto: on when the kernel and privileges allow

struct TraceOptions {
  TraceMode mode = TraceMode::kAuto;
  uint64_t ring_buffer_bytes = 16ull << 20;  // a power of two, >= 4096 × page size rule of libbpf
  uint32_t drain_interval_ms = 100;          // the drain thread's timer
  uint32_t high_water_percent = 50;          // the BPF side wakes the drain thread past this fill
  uint32_t max_processes = 1024;             // tracked processes (live + recently exited)
  uint32_t max_streams_per_process = 256;
  uint32_t max_allocations_per_process = 262144;
  uint32_t max_kernel_names_per_process = 4096;
  uint32_t top_kernels = 10;                 // kernels kept by name per process; the rest "other"
  uint32_t exited_keep_seconds = 300;        // an exited process stays listed (its leaks) this long
  uint32_t rate_window_seconds = 10;         // launches/s and core usage are over this window
  bool watch_setenv = true;                  // probe libc's setenv/putenv for CUDA_ variables
  // Kernel launches are recorded at entry (one trap, no return probe; a launch that fails is
  // still counted as a launch). true: they get a return probe too, and a failed launch is a
  // failure by error code, not a launch.
  bool launch_results = false;
  // Probed at start-up, before any process maps them (so a first process is traced from its first
  // call), besides what the /proc scan and exec/open events find.
  std::vector<std::string> library_dirs = {"/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu",
                                           "/usr/lib64", "/lib/x86_64-linux-gnu"};
  // The dynamic loader's configuration: the directories it names (its include lines followed)
  // are probed at start-up too, so a CUDA library the loader finds anywhere it is configured to
  // look is traced from a first process's first call. Empty: not read.
  std::string ld_so_conf = "/etc/ld.so.conf";
  std::string proc_root = "/proc";           // tests point these elsewhere
  std::string cgroup_root = "/sys/fs/cgroup";
};

// What the aggregator needs to know of a node's GPU to put a process on it.
struct GpuIdentity {
  uint32_t index = 0;        // NVML index (PCI bus order)
  std::string uuid;          // "GPU-..."
  std::string pci_bus_id;
  std::string name;
  std::optional<uint32_t> cores;           // CUDA cores, for core usage
  std::optional<uint32_t> multiprocessors;
  std::vector<std::string> mig_uuids;      // "MIG-..." instances on it
};

class TraceService : public StatsSource {
 public:
  // The node's GPUs (NVML order). Called at start and whenever the GPU list changes.
  virtual void SetGpus(std::vector<GpuIdentity> gpus) = 0;
  // NVML's process list (pid -> GPU UUIDs): the cross-check of the traced device selection.
  virtual void SetNvmlProcesses(std::map<uint32_t, std::set<std::string>> processes) = 0;
  virtual void Stop() = 0;
};

std::unique_ptr<TraceService> StartTracing(const TraceOptions& options);

}  // namespace flyt::trace
