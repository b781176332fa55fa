// The NVML backend's readings, shared by its two files: nvml_backend.cc (the backend itself:
// devices, probing, sampling, events) and nvml_backend_readings.cc (the NVML call behind each
// reading: device values, process lists, per-process utilisation, buffered samples). Internal to
// src/gpu, not part of nvml_backend.h's interface. Thread-safety: none of its own; the backend
// calls CallReading with its device lock held.
#pragma once

#include <array>
#include <cstddef>

#include "gpu/types.h"
#include "nvml/library.h"

namespace flyt::gpu::nvml_internal {

// The readings decided once per device: each maps to one NVML call (with fixed arguments).
enum class Reading : size_t {
  kMemoryV2,
  kMemoryV1,
  kUtilization,
  kTemperature,
  kMemoryTemperature,
  kPowerUsage,
  kPowerLimit,
  kEnergy,
  kSmClock,
  kMemClock,
  kPcieRx,
  kPcieTx,
  kPcieReplay,
  kEncoderUtilization,
  kDecoderUtilization,
  kFanSpeed,
  kPerformanceState,
  kComputeMode,
  kMigMode,
  kEccVolatileCorrected,
  kEccVolatileUncorrected,
  kEccAggregateCorrected,
  kEccAggregateUncorrected,
  kClockEventReasons,
  kComputeProcesses,  // _v3
  kComputeProcessesV2,
  kComputeProcessesV1,
  kGraphicsProcesses,  // _v3
  kGraphicsProcessesV2,
  kGraphicsProcessesV1,
  kProcessUtilization,
  kUtilSamples,
  kCount,
};
constexpr size_t kReadingCount = static_cast<size_t>(Reading::kCount);

struct DeviceState {
  nvmlDevice_t handle = nullptr;
  GpuInfo identity;  // index, uuid, name, pci ids, serial, max clocks
  bool lost = false;
  std::array<bool, kReadingCount> supported{};
  unsigned long long last_util_seen_us = 0;
  unsigned long long last_sample_seen_us = 0;  // nvmlDeviceGetSamples' newest timestamp read
};

// What a reading answers when the driver's records make no sense (a process list's, refused by
// nvml_backend_readings.cc). Not an NVML code (those stop at 999; the enum holds 0..1023).
inline constexpr nvmlReturn_t kMalformed = static_cast<nvmlReturn_t>(1001);

// One call per reading; returns the NVML code (FUNCTION_NOT_FOUND when the symbol is absent).
// `out` receives the value when the call succeeds.
nvmlReturn_t CallReading(const nvml::FunctionTable& f, Reading reading, DeviceState& dev,
                         GpuInfo& out);

}  // namespace flyt::gpu::nvml_internal
