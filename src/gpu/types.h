// The device model every part of flyt speaks: what one GPU looks like at one instant (GpuInfo),
// the processes on it (ProcessInfo), a whole machine at one instant (GpuSnapshot), and events.
//
// A reading the hardware or the backend cannot give is std::nullopt — never 0 — so that a
// consumer (a table, /metrics, a score) can tell "idle" from "unknown". Plain values; copy freely
// between threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flyt::gpu {

enum class ProcessType { kCompute, kGraphics, kComputeAndGraphics };

struct ProcessInfo {
  uint32_t pid = 0;  // host PID, as NVML reports it
  ProcessType type = ProcessType::kCompute;
  std::optional<uint64_t> used_memory_bytes;
  // From /proc (absent when the process is gone or belongs to another PID namespace).
  std::optional<std::string> name;          // /proc/<pid>/comm
  std::optional<std::string> command;       // /proc/<pid>/cmdline, spaces between arguments
  std::optional<std::string> user;          // owner of /proc/<pid>
  std::optional<std::string> container_id;  // from /proc/<pid>/cgroup
  // From nvmlDeviceGetProcessUtilization: the newest sample seen for this PID.
  std::optional<uint32_t> sm_util_percent;
  std::optional<uint32_t> memory_util_percent;
  std::optional<uint32_t> encoder_util_percent;
  std::optional<uint32_t> decoder_util_percent;
  std::optional<uint64_t> util_sample_timestamp_us;
  // MIG instance ids, when MIG is on.
  std::optional<uint32_t> gpu_instance_id;
  std::optional<uint32_t> compute_instance_id;
};

// One of the driver's buffered utilisation samples (nvmlDeviceGetSamples): the percent of time a
// kernel ran over the driver's sample period (1/6 s to 1 s, by product), at a CPU timestamp.
struct UtilSample {
  uint64_t timestamp_us = 0;  // microseconds since the Unix epoch
  uint32_t percent = 0;       // 0..100
};

struct EccCounts {
  std::optional<uint64_t> volatile_corrected;
  std::optional<uint64_t> volatile_uncorrected;
  std::optional<uint64_t> aggregate_corrected;
  std::optional<uint64_t> aggregate_uncorrected;
};

struct GpuInfo {
  // Identity.
  uint32_t index = 0;
  std::string uuid;
  std::string name;
  std::string pci_bus_id;  // "00000000:18:00.0"
  std::optional<std::string> serial;
  std::optional<uint32_t> pci_device_id;  // (device << 16) | vendor
  std::optional<uint32_t> cores;          // CUDA cores (nvmlDeviceGetNumGpuCores; not on MIG)

  // True when the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST): no readings below are valid.
  bool lost = false;

  // Memory, bytes.
  std::optional<uint64_t> memory_total_bytes;
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_free_bytes;
  std::optional<uint64_t> memory_reserved_bytes;

  // Utilization, percent over the driver's last sample period.
  std::optional<uint32_t> gpu_util_percent;
  std::optional<uint32_t> memory_util_percent;

  std::optional<uint32_t> temperature_c;
  std::optional<uint32_t> memory_temperature_c;  // HBM; absent on GDDR boards
  std::optional<uint32_t> power_draw_mw;
  std::optional<uint32_t> power_limit_mw;  // enforced limit
  std::optional<uint64_t> energy_mj;       // since driver load; a counter

  std::optional<uint32_t> sm_clock_mhz;
  std::optional<uint32_t> memory_clock_mhz;
  std::optional<uint32_t> max_sm_clock_mhz;
  std::optional<uint32_t> max_memory_clock_mhz;

  std::optional<uint32_t> pcie_rx_kb_per_s;
  std::optional<uint32_t> pcie_tx_kb_per_s;
  std::optional<uint64_t> pcie_replay_count;  // a counter

  std::optional<uint32_t> encoder_util_percent;
  std::optional<uint32_t> decoder_util_percent;

  std::optional<uint32_t> fan_speed_percent;
  std::optional<uint32_t> performance_state;  // 0..15 (P0..P15)
  std::optional<std::string> compute_mode;    // "default", "exclusive_process", "prohibited"
  std::optional<bool> mig_enabled;
  std::optional<bool> mig_pending;
  EccCounts ecc;
  std::optional<uint64_t> clock_event_reasons;  // NVML clocks event ("throttle") reason bits

  std::vector<ProcessInfo> processes;

  // The driver's utilisation samples taken since the previous sample of the Monitor, oldest first
  // (at most kMaxUtilSamples, the newest); empty when the driver keeps none (NOT_SUPPORTED, the
  // nvidia-smi backend). Not part of the JSON forms: the profiler reads them.
  std::vector<UtilSample> util_samples;

  // Memory in use as a fraction of total, percent; absent unless both are known.
  std::optional<double> MemoryUsagePercent() const;
};

// The most utilisation samples one GpuInfo carries (a driver buffers ~20 s at 6 Hz).
inline constexpr size_t kMaxUtilSamples = 128;

enum class Source { kNone, kNvml, kNvidiaSmi };
const char* SourceName(Source source);

struct GpuSnapshot {
  std::chrono::system_clock::time_point taken_at;
  Source source = Source::kNone;
  // Why there are no GPUs (Source::kNone) or what was degraded; empty when all is well.
  std::string reason;
  std::optional<std::string> driver_version;
  std::optional<std::string> cuda_driver_version;  // "13.0"
  std::optional<std::string> nvml_version;
  // When the GPUs come from flyt's simulated NVML: the scenario file it plays.
  std::optional<std::string> simulated_scenario;
  std::vector<GpuInfo> gpus;
};

enum class EventType { kXid, kSingleBitEcc, kDoubleBitEcc, kGpuLost, kOther };
const char* EventTypeName(EventType type);

struct GpuEvent {
  std::chrono::system_clock::time_point at;
  uint32_t gpu_index = 0;
  std::string gpu_uuid;
  EventType type = EventType::kOther;
  std::optional<uint64_t> xid;  // for kXid
  std::string description;
};

// Names of the clock event reason bits set in `reasons` ("sw_power_cap", "hw_slowdown", ...).
std::vector<std::string> ClockEventReasonNames(uint64_t reasons);

}  // namespace flyt::gpu
