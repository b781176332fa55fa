// The state the aggregator keeps for one traced process: its device selection (per thread), kernel
// names, memory (pointer → allocation), streams and their spans, and per device ordinal the
// counters ProcessCuda reports. It applies one validated record at a time and makes the
// ProcessCuda entries (one per device the process used) on demand.
//
// Rules, as the issue states them: only calls that returned 0 change state (the others are counted
// by error name); a free of a pointer never seen allocated is counted, not subtracted; a setenv of
// CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER counts only before the process's first CUDA call (the
// runtime has read them by then); the legacy default stream's sync also syncs the blocking
// streams of its device (never the non-blocking ones); a device or context sync syncs every stream
// of the calling thread's current device (a stream's own `syncs` counts only the calls that name
// it); a blocking cudaMemcpy is a sync only host↔device; a destroyed stream stays listed
// (destroyed), the newest max_streams_per_process of them per device.
//
// Not thread-safe: the aggregator holds its lock around every call.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "trace/bpf/events.h"
#include "trace/devices.h"
#include "trace/kernel_names.h"
#include "trace/service.h"
#include "trace/stats.h"
#include "trace/streams.h"

namespace flyt::trace {

// What was dropped because a per-process bound was reached (TracerHealth's counters).
struct DropCounters {
  uint64_t streams = 0;
  uint64_t allocations = 0;
  uint64_t kernel_names = 0;
};

// The node's GPUs as the aggregator last heard of them; `version` changes with every SetGpus.
struct GpuTable {
  std::vector<GpuIdentity> gpus;
  uint64_t version = 0;
};

// What Snapshot needs from outside the process.
struct SnapshotContext {
  const GpuTable* gpus = nullptr;
  const std::map<uint32_t, std::set<std::string>>* nvml = nullptr;  // pid → GPU/MIG UUIDs
  uint64_t now_ns = 0;  // CLOCK_MONOTONIC
  // Monotonic ns → wall clock.
  std::chrono::system_clock::time_point wall_at_now;
  bool exited = false;
  std::optional<int32_t> exit_code;
};

class TracedProcess {
 public:
  TracedProcess(uint32_t pid, std::string comm, CudaEnv env, uint64_t cgroup_id,
                std::string container_id, const TraceOptions& options, uint64_t first_seen_ns);

  // One record (already validated: `data` holds at least its kind's struct).
  void Apply(const flyt_trace_header& h, const void* data, const GpuTable& gpus,
             DropCounters* drops);
  void SetAttachedLate(const std::string& library);
  // A CUDA library the process opened (the runtime's path is preferred to the driver's).
  void NoteLibrary(const std::string& library);

  // Kernel names of a process attached late (StubSymbolizer): its executable mappings, taken
  // while it was alive; the stub a launch record needs looked up (nullopt: none, or already
  // tried); the answer (nullopt: no symbol, its launches stay "unknown").
  void SetMappings(std::vector<FileMapping> mappings);
  bool HasMappings() const { return !mappings_.empty(); }
  const std::vector<FileMapping>& mappings() const { return mappings_; }
  std::optional<uint64_t> StubToLookUp(const flyt_trace_launch& r);
  // Whether `stub` may be looked up in the symbols now: each stub once, at most
  // max_kernel_names_per_process stubs (claims it when so).
  bool ClaimStubLookUp(uint64_t stub);
  // The drain in which the mappings were last read (the aggregator's count): re-read at most
  // once per drain.
  uint64_t maps_read_drain() const { return maps_read_drain_; }
  void set_maps_read_drain(uint64_t drain) { maps_read_drain_ = drain; }
  void NameStub(uint64_t stub, const std::optional<std::string>& mangled, DropCounters* drops);

  std::vector<ProcessCuda> Snapshot(const SnapshotContext& ctx) const;

  uint32_t pid() const { return pid_; }

 private:
  struct StreamKey {
    uint64_t handle = 0;  // 0: legacy default stream; kPerThread: a thread's default stream
    uint32_t thread = 0;
    bool operator<(const StreamKey& o) const {
      return handle != o.handle ? handle < o.handle : thread < o.thread;
    }
  };
  struct DeviceState {
    explicit DeviceState(const TraceOptions& o);
    uint64_t launches = 0;
    uint64_t syncs = 0;
    uint64_t device_bytes = 0, device_peak_bytes = 0, managed_bytes = 0;
    uint64_t pinned_bytes = 0, pinned_peak_bytes = 0;
    uint64_t live_allocations = 0;  // device + managed
    uint64_t allocations = 0, frees = 0, unknown_frees = 0;
    CopyBytes copies;
    std::map<std::string, uint64_t> failures;
    KernelTable kernels;
    RateWindow rates;
    double busy_seconds = 0;
    std::map<StreamKey, StreamState> streams;
    // Destroyed streams' figures (destroyed = true), the newest max_streams_per_process.
    std::deque<StreamStats> retired;
  };
  struct Allocation {
    uint64_t bytes = 0;
    uint32_t memory = FLYT_MEM_DEVICE;
    int32_t device = 0;
  };
  struct EventMark {
    int32_t device = 0;
    StreamKey stream;
    uint64_t record_ns = 0;
  };
  struct Target {
    int32_t device = 0;
    StreamKey key;
  };

  DeviceState& Device(int32_t device);
  int32_t ThreadDevice(uint32_t tid) const;
  Target ResolveStream(uint32_t tid, uint64_t stream, uint16_t flags) const;
  // The stream's state, created on first use within max_streams_per_process (nullptr beyond).
  StreamState* Stream(const Target& t, DropCounters* drops);
  std::optional<uint32_t> Cores(int32_t device, const GpuTable& gpus);
  void Failure(int32_t device, int32_t rc, uint16_t func);
  // Adds the spans its streams just closed to the device's busy time.
  void CloseSpans(DeviceState& dev);
  void SyncStream(const Target& t, uint64_t end_ns, const GpuTable& gpus, DropCounters* drops);
  void SyncLegacy(int32_t device, uint64_t end_ns, const GpuTable& gpus, DropCounters* drops);
  void SyncDevice(int32_t device, uint64_t end_ns, const GpuTable& gpus);
  // The created stream `handle` was destroyed: its figures move to dev.retired.
  void Retire(DeviceState& dev, uint64_t handle);
  void RemoveAllocation(std::map<uint64_t, Allocation>::iterator it);
  // A pointer inside a known device or managed allocation.
  bool IsDevicePointer(uint64_t ptr) const;

  void OnLaunch(const flyt_trace_launch& r, DropCounters* drops);
  void OnAlloc(const flyt_trace_alloc& r, DropCounters* drops);
  void OnFree(const flyt_trace_free& r);
  void OnCopy(const flyt_trace_copy& r, bool memset, const GpuTable& gpus, DropCounters* drops);
  void OnSync(const flyt_trace_sync& r, const GpuTable& gpus, DropCounters* drops);
  void OnEventRecord(const flyt_trace_event_record& r, DropCounters* drops);
  void OnStream(const flyt_trace_stream& r, bool create, DropCounters* drops);

  const TraceOptions& options_;
  uint32_t pid_;
  std::string comm_;
  CudaEnv env_;
  uint64_t cgroup_id_;
  std::string container_id_;
  std::string library_;
  bool attached_late_ = false;
  bool remote_ = false;
  bool cuda_started_ = false;  // a CUDA call was seen: the environment is read
  uint64_t first_seen_ns_;
  uint64_t last_seen_ns_;

  KernelNames names_;
  std::vector<FileMapping> mappings_;
  std::unordered_set<uint64_t> stubs_looked_up_;  // at most max_kernel_names_per_process
  uint64_t maps_read_drain_ = ~uint64_t{0};
  std::map<int32_t, DeviceState> devices_;
  std::unordered_map<uint32_t, int32_t> thread_devices_;  // cudaSetDevice per thread
  std::map<uint64_t, Allocation> allocations_;            // by base pointer
  std::unordered_map<uint64_t, int32_t> stream_devices_;  // created streams → device
  std::unordered_set<uint64_t> dropped_streams_;          // handles refused (counted once)
  size_t stream_count_ = 0;
  std::unordered_map<uint64_t, EventMark> events_;

  // Device → GPU of this process, cached for the core usage of spans.
  std::vector<VisibleGpu> visible_;
  uint64_t visible_version_ = ~0ull;
};

}  // namespace flyt::trace
