// The usage profile of one GPU: what kind of work it carries (its state, and for a cyclic load
// the period and phase), the distributions of its readings over three windows, its memory
// headroom, and the phase changes seen. Computed online by Profiler (profiler.h) from the
// samples the node's Monitor takes; published by the node manager (API, /metrics, heartbeats,
// Kubernetes annotations) in the JSON form of profile/json.h.
//
// Every input is optional: an absent reading is std::nullopt, never 0, and a value the profiler
// could not establish is absent from the profile rather than guessed. Plain values; copy freely
// between threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flyt::profile {

// The version of the profile's JSON form (its "schema" key and the Kubernetes annotation's "v").
inline constexpr int kSchemaVersion = 1;

enum class State {
  kUnknown,        // insufficient data: GpuProfile::insufficient_data says why
  kIdle,           // no process, utilisation ~0
  kAllocatedIdle,  // memory held by a process, utilisation ~0 for at least allocated_idle_after
  kSteady,         // busy at a level that does not move much, no cycle
  kCyclic,         // a periodic load: GpuProfile::cycle holds the period
  kBursty,         // busy but irregular: neither steady nor periodic
  kLost,           // the GPU fell off the bus
};
// "unknown", "idle", "allocated-idle", "steady", "cyclic", "bursty", "lost".
const char* StateName(State state);
std::optional<State> StateFromName(std::string_view name);
// Every state, in the order above (for /metrics, which exports one series per state).
const std::vector<State>& AllStates();

// A process holding memory on the GPU, as the profile names it.
struct ProcessUse {
  uint32_t pid = 0;
  std::optional<std::string> name;  // /proc/<pid>/comm
  std::optional<std::string> user;  // owner
  std::optional<uint64_t> memory_bytes;
};

// One sample of one GPU, at the Monitor's sampling rate. Every reading is optional.
struct Sample {
  std::chrono::system_clock::time_point at;
  bool lost = false;                            // the GPU fell off the bus: readings invalid
  std::optional<double> util_percent;           // SM ("GPU") utilisation, 0..100
  std::optional<double> memory_util_percent;    // memory-copy utilisation, 0..100
  std::optional<uint64_t> memory_used_bytes;    // FB used
  std::optional<uint64_t> memory_total_bytes;   // FB total
  std::optional<double> power_w;
  std::optional<double> launches_per_second;    // from the CUDA tracer, when it runs
  std::vector<ProcessUse> processes;            // processes with a context on the GPU
  // Whether `processes` could be read at all (false: the backend cannot list processes; then
  // "no process" is unknown, not true).
  bool processes_known = true;
  // The driver's buffered utilisation samples (nvmlDeviceGetSamples, up to ~6 Hz) taken since
  // the previous Sample, oldest first; empty when the driver gives none.
  struct UtilPoint {
    std::chrono::system_clock::time_point at;
    double percent = 0;
  };
  std::vector<UtilPoint> util_samples;
};

// Quantiles of one reading over one window; absent when the window holds no valid value.
struct Quantiles {
  double p50 = 0, p95 = 0, p99 = 0;
  uint64_t samples = 0;  // valid values the quantiles were computed from
};

// The distributions over one window ("1m", "15m", "1h").
struct Window {
  std::string name;
  std::chrono::seconds length{0};
  std::optional<Quantiles> util_percent;
  std::optional<Quantiles> memory_used_bytes;
  std::optional<Quantiles> power_w;
};

struct Cycle {
  double period_s = 0;
  double confidence = 0;  // 0..1
  std::string method;     // "autocorrelation" or "burst_spacing"
  double cycles_in_window = 0;
  // Where in the cycle utilisation and memory peak and bottom out, in seconds after
  // phase_origin (0 <= offset < period_s). The troughs are where a time-slicing scheduler would
  // preempt. Memory offsets are absent when FB used is not read or does not move with the cycle.
  std::chrono::system_clock::time_point phase_origin;
  double util_peak_offset_s = 0;
  double util_trough_offset_s = 0;
  std::optional<double> memory_peak_offset_s;
  std::optional<double> memory_trough_offset_s;
  // The first utilisation trough after the profile was computed.
  std::chrono::system_clock::time_point next_util_trough_at;
};

struct AllocatedIdle {
  double seconds = 0;  // how long the GPU has held memory with ~0 utilisation
  std::optional<uint64_t> memory_bytes;  // FB used
  std::vector<ProcessUse> processes;     // who holds it
};

struct Memory {
  std::optional<uint64_t> total_bytes;
  // The peak FB used over the last cycles (cyclic: the last 3 periods; otherwise the 1 min
  // window) and the free memory at that peak (total - peak).
  std::optional<uint64_t> peak_used_bytes;
  std::optional<uint64_t> headroom_bytes;
  double peak_window_s = 0;
};

struct PhaseChange {
  std::chrono::system_clock::time_point at;
  State from = State::kUnknown;
  State to = State::kUnknown;
  // What moved: "state", or "level" (same state, the utilisation level shifted, e.g. a cyclic
  // job whose period changed or a steady load that stepped).
  std::string kind;
  std::string detail;  // e.g. "period 12.0 s -> 30.1 s", "util p50 85% -> 40%"
};

struct GpuProfile {
  uint32_t index = 0;
  std::string uuid;
  std::string name;  // product name
  std::chrono::system_clock::time_point computed_at;
  State state = State::kUnknown;
  std::chrono::system_clock::time_point state_since;
  double state_seconds = 0;
  // With State::kUnknown: why ("no samples yet", "2 of 30 samples valid: utilisation not
  // readable", "clock stepped back 40 s; history restarted", ...). Empty otherwise.
  std::string insufficient_data;
  std::optional<Cycle> cycle;                  // with State::kCyclic
  std::optional<AllocatedIdle> allocated_idle;  // with State::kAllocatedIdle
  std::vector<Window> windows;                 // "1m", "15m", "1h", in that order
  Memory memory;
  std::vector<ProcessUse> processes;  // the newest sample's processes
  std::optional<double> launches_per_second;
  // Which inputs fed it: e.g. {"util", "util_samples", "memory_used", "power"}; and the rate of
  // the utilisation series the cycle test ran on (1 Hz sampling, or ~6 Hz driver samples).
  std::vector<std::string> inputs;
  double util_rate_hz = 0;
  std::vector<PhaseChange> phase_changes;  // the newest last, at most Profiler's max_phase_changes
};

}  // namespace flyt::profile
