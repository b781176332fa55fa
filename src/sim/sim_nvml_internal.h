// The simulated NVML's process-wide state (see sim_nvml.h), shared by the files that implement
// its entry points: sim_nvml.cc (init, system, identity and device readings), sim_nvml_processes.cc
// (process lists, per-process utilisation) and sim_nvml_events.cc (event sets, XID delivery). Not
// part of the library's interface. Thread safety: every member of Sim is guarded by Sim::mu;
// DeviceCall takes it around its body.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/strings.h"
#include "nvml/nvml_types.h"
#include "sim/scenario.h"

namespace flyt::sim::api {

struct Device {
  const GpuSpec* spec = nullptr;
  EnergyCache energy;
  // The last reading computed, and for which t: calls at the same instant reuse it.
  double reading_t = -1;
  GpuReading reading;
};

// Where scenario time comes from; read from the environment at each first nvmlInit.
struct TimeConfig {
  std::string clock_file;       // FLYT_SIM_CLOCK_FILE
  std::optional<double> fixed;  // FLYT_SIM_TIME
  double start = 0;             // FLYT_SIM_START
  double speed = 1;             // FLYT_SIM_SPEED
};

struct EventSet {
  unsigned long long mask = 0;
  std::set<uint32_t> devices;  // registered GPU indexes
  std::set<size_t> delivered;  // indexes into scenario.faults
};

class Sim {
 public:
  std::mutex mu;
  int init_count = 0;
  bool loaded = false;
  Scenario scenario;
  std::vector<Device> devices;
  std::vector<std::unique_ptr<EventSet>> event_sets;
  std::chrono::steady_clock::time_point started;
  int64_t wall_start_us = 0;
  bool real_time = false;
  std::string path;
  TimeConfig time;

  static double EnvDouble(const char* name, double fallback);

  // Scenario time is kept within [0, kMaxTime] (about 31,000 years): finite, and small enough
  // for microsecond timestamps to fit in 64 bits.
  static constexpr double kMaxTime = 1e12;

  void ReadTimeConfig();

  // Loads the scenario on first init. Returns NVML_SUCCESS or an error code; prints why once.
  // A re-initialisation with the same scenario keeps its state and clock (a lost GPU stays lost,
  // as after a real nvmlShutdown/nvmlInit); a different scenario starts afresh.
  nvmlReturn_t Load();

  // Scenario time in seconds.
  double Now() const {
    if (!time.clock_file.empty()) {
      auto text = ReadFile(time.clock_file, 4096);
      if (text.ok()) {
        if (auto d = ParseDouble(*text)) return std::clamp(*d, 0.0, kMaxTime);
      }
      return 0;
    }
    if (time.fixed) return std::clamp(*time.fixed, 0.0, kMaxTime);
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return std::clamp(time.start + elapsed * time.speed, 0.0, kMaxTime);
  }

  // CPU timestamp in µs for scenario time t (what NVML puts in samples).
  unsigned long long TimestampUs(double t) const {
    if (real_time) {
      return static_cast<unsigned long long>(wall_start_us + (t - time.start) * 1e6);
    }
    return static_cast<unsigned long long>(scenario.epoch_s * 1000000LL + t * 1e6);
  }

  bool Lost(uint32_t gpu, double t) const {
    return std::any_of(scenario.faults.begin(), scenario.faults.end(), [&](const Fault& f) {
      return f.kind == FaultKind::kLost && f.gpu == gpu && t >= f.at_s;
    });
  }

  // What a call reading `field` of `gpu` answers at time t before producing a value.
  nvmlReturn_t FieldStatus(const Device& dev, Field field, double t) const {
    const GpuSpec& g = *dev.spec;
    if (Lost(g.index, t)) return NVML_ERROR_GPU_IS_LOST;
    if (g.unsupported.count(field) != 0) return NVML_ERROR_NOT_SUPPORTED;
    for (const Fault& f : scenario.faults) {
      if (f.gpu != g.index || f.field != field || t < f.at_s || t >= f.until_s) continue;
      if (f.kind == FaultKind::kNotSupported) return NVML_ERROR_NOT_SUPPORTED;
      if (f.kind == FaultKind::kError) return static_cast<nvmlReturn_t>(f.error_code);
    }
    return NVML_SUCCESS;
  }

  Device* FromHandle(nvmlDevice_t handle) {
    auto* d = reinterpret_cast<Device*>(handle);
    if (devices.empty() || d < devices.data() || d >= devices.data() + devices.size())
      return nullptr;
    return d;
  }
};

// The one Sim, created on first use.
Sim& Instance();

// Runs `body(sim, dev, t)` for a device call reading `field`, after the checks every NVML
// device call makes: initialised, valid handle, not lost, field supported and not failing.
template <typename Body>
nvmlReturn_t DeviceCall(nvmlDevice_t handle, Field field, Body body) noexcept {
  try {
    Sim& sim = Instance();
    std::scoped_lock lock(sim.mu);
    if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    Device* dev = sim.FromHandle(handle);
    if (dev == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    double t = sim.Now();
    nvmlReturn_t rc = sim.FieldStatus(*dev, field, t);
    if (rc != NVML_SUCCESS) return rc;
    return body(sim, *dev, t);
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

}  // namespace flyt::sim::api
