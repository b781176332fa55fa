// Scenario: what flyt's simulated NVML plays — GPUs, their load over time, processes that come and
// go, and faults at given times — parsed from a TOML file (format: sim/scenarios/README.md).
//
// Everything here is a pure function of (scenario, scenario time t in seconds): the same scenario
// at the same time gives the same readings. Parsing errors name the file, the line and the field.
// Immutable once parsed; safe to read from any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace flyt::sim {

// A reading the scenario can make unsupported or failing. Names are those used in scenario files.
enum class Field {
  kMemory,
  kUtilization,
  kTemperature,
  kMemoryTemperature,
  kPower,
  kPowerLimit,
  kEnergy,
  kClocks,
  kMaxClocks,
  kCores,
  kPcie,
  kCodec,
  kFan,
  kPerformanceState,
  kComputeMode,
  kMig,
  kEcc,
  kClockReasons,
  kProcesses,
  kProcessUtilization,
  kSerial,
  kEvents,
};
std::optional<Field> FieldFromName(std::string_view name);
std::string AllFieldNames();

enum class LoadKind { kConstant, kRamp, kSine, kSquare, kStep, kReplay };

// A value over scenario time.
struct Load {
  LoadKind kind = LoadKind::kConstant;
  double value = 0;                                            // constant
  double from = 0, to = 0, start_s = 0, duration_s = 0;        // ramp
  double mean = 0, amplitude = 0, period_s = 60, phase_s = 0;  // sine, square (period, phase)
  double low = 0, high = 0, duty = 0.5;                        // square
  std::vector<std::pair<double, double>> points;  // step / replay: (t, value), sorted by t
  bool loop = false;                              // step / replay: repeat after the last point
  bool interpolate = false;                       // replay: linear between points (else hold)
  double At(double t) const;
  // After settle_s the load repeats every period_s (constant loads: period 1 s).
  struct Shape {
    double settle_s = 0;
    double period_s = 1;
  };
  Shape GetShape() const;
};

struct GpuSpec {
  uint32_t index = 0;
  std::string name;
  std::string uuid;
  std::string pci_bus_id;
  uint32_t pci_device_id = 0;
  std::string serial;
  uint64_t memory_total_bytes = 0;
  uint64_t memory_reserved_bytes = 0;
  uint64_t memory_base_used_bytes = 0;  // in use with no process (driver, contexts)
  uint32_t power_limit_mw = 0;
  uint32_t idle_power_mw = 0;
  uint32_t max_power_mw = 0;  // at 100% utilisation
  uint32_t max_sm_clock_mhz = 0;
  uint32_t idle_sm_clock_mhz = 0;
  uint32_t max_mem_clock_mhz = 0;
  uint32_t cores = 0;  // CUDA cores (nvmlDeviceGetNumGpuCores); 0: not reported (NOT_SUPPORTED)
  uint32_t idle_temperature_c = 30;
  uint32_t max_temperature_c = 75;  // at 100% utilisation
  bool has_fan = false;
  bool mig_enabled = false;
  std::string compute_mode = "default";  // default | exclusive_process | prohibited
  Load utilization;
  std::optional<Load> memory_utilization;  // default: 60% of utilisation
  std::optional<Load> memory_used_mib;     // default: base + processes
  std::optional<Load> encoder_utilization;  // default: 0
  std::optional<Load> decoder_utilization;  // default: 0
  std::set<Field> unsupported;
};

enum class ProcessKind { kCompute, kGraphics };

struct ProcessSpec {
  uint32_t gpu = 0;
  uint32_t pid = 0;
  ProcessKind kind = ProcessKind::kCompute;
  double start_s = 0;
  double stop_s = std::numeric_limits<double>::infinity();
  uint64_t memory_bytes = 0;
  std::optional<Load> sm_util;   // default: the GPU's utilisation shared among its processes
  std::optional<Load> mem_util;  // default: 60% of its SM utilisation
  bool Active(double t) const { return t >= start_s && t < stop_s; }
};

enum class FaultKind { kLost, kXid, kError, kNotSupported };

struct Fault {
  FaultKind kind = FaultKind::kXid;
  uint32_t gpu = 0;
  double at_s = 0;
  double until_s = std::numeric_limits<double>::infinity();  // kError / kNotSupported
  uint64_t xid = 0;                                          // kXid
  Field field = Field::kPower;                               // kError / kNotSupported
  int error_code = 999;  // kError: an nvmlReturn_t value (10 = TIMEOUT, 999 = UNKNOWN)
};

struct Scenario {
  std::string path;
  std::string name;
  std::string description;
  std::string driver_version = "580.65.06";
  int cuda_driver_version = 13000;
  std::string nvml_version = "13.580.65.06";
  int64_t epoch_s = 1767225600;  // wall time of scenario t=0 in fixed-time modes (2026-01-01)
  // Driver misbehaviour to reproduce ([scenario] quirks = [...]):
  // "process_info_v3_stride_32": the _v3 process queries write 32-byte records (early R535).
  bool quirk_process_v3_stride_32 = false;
  std::vector<GpuSpec> gpus;
  std::vector<ProcessSpec> processes;
  std::vector<Fault> faults;
  // Indexes into `processes`, per GPU (built by the parser), so per-GPU readings do not scan
  // every process of the node.
  std::vector<std::vector<size_t>> processes_by_gpu;
};

Result<Scenario> LoadScenario(const std::string& path);
// `source` names the text in messages (a path, or "<inline>").
Result<Scenario> ParseScenario(std::string_view text, const std::string& source);

// Readings at time t, derived from the specs. Pure functions.
struct GpuReading {
  uint32_t gpu_util = 0;
  uint32_t mem_util = 0;
  uint64_t memory_used_bytes = 0;
  uint32_t temperature_c = 0;
  uint32_t power_mw = 0;
  uint32_t sm_clock_mhz = 0;
  uint32_t mem_clock_mhz = 0;
  uint32_t pcie_rx_kb_per_s = 0;
  uint32_t pcie_tx_kb_per_s = 0;
  uint32_t fan_percent = 0;
  uint32_t pstate = 0;
  uint64_t clock_reasons = 0;
};
GpuReading ReadingAt(const Scenario& scenario, const GpuSpec& gpu, double t);
uint32_t PowerMwAt(const GpuSpec& gpu, double t);
// Energy in mJ from t=0 to t, integrating power on a fixed 1 s grid, so the value is the same
// whatever order times are asked in. `cache` (optional) remembers the integral up to a whole
// second, so that a clock moving forward costs only the new seconds.
struct EnergyCache {
  struct Segment {
    double start = -1;  // the segment's start time; the integral covers whole_s seconds of it
    int64_t whole_s = 0;
    double mj = 0;
  };
  bool have_fixed = false;
  double settle_mj = 0;  // E(0..settle)
  double period_mj = 0;  // E over one period
  Segment tail;          // the segment being walked forward
};
uint64_t EnergyAt(const GpuSpec& gpu, double t, EnergyCache* cache = nullptr);

struct ProcessReading {
  uint32_t sm_util = 0;
  uint32_t mem_util = 0;
};
ProcessReading ProcessReadingAt(const Scenario& scenario, const ProcessSpec& process, double t);

}  // namespace flyt::sim
