#include "gpu/types.h"

#include <utility>

namespace flyt::gpu {

std::optional<double> GpuInfo::MemoryUsagePercent() const {
  if (!memory_total_bytes || !memory_used_bytes || *memory_total_bytes == 0) return std::nullopt;
  return 100.0 * static_cast<double>(*memory_used_bytes) / static_cast<double>(*memory_total_bytes);
}

const char* SourceName(Source source) {
  switch (source) {
    case Source::kNone:
      return "none";
    case Source::kNvml:
      return "nvml";
    case Source::kNvidiaSmi:
      return "nvidia-smi";
  }
  return "none";
}

const char* EventTypeName(EventType type) {
  switch (type) {
    case EventType::kXid:
      return "xid";
    case EventType::kSingleBitEcc:
      return "single_bit_ecc";
    case EventType::kDoubleBitEcc:
      return "double_bit_ecc";
    case EventType::kGpuLost:
      return "gpu_lost";
    case EventType::kOther:
      return "other";
  }
  return "other";
}

std::vector<std::string> ClockEventReasonNames(uint64_t reasons) {
  // Bit values from NVML's nvmlClocksEventReason* / nvmlClocksThrottleReason* constants.
  static const std::pair<uint64_t, const char*> kNames[] = {
      {0x1, "gpu_idle"},
      {0x2, "applications_clocks_setting"},
      {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},
      {0x20, "sw_thermal_slowdown"},
      {0x40, "hw_thermal_slowdown"},
      {0x80, "hw_power_brake_slowdown"},
      {0x100, "display_clock_setting"},
  };
  std::vector<std::string> names;
  for (const auto& [bit, name] : kNames) {
    if ((reasons & bit) != 0) names.emplace_back(name);
  }
  return names;
}

}  // namespace flyt::gpu
