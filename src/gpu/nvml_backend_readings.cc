// The NVML call behind each of the NVML backend's readings (see nvml_backend_internal.h): device
// values into GpuInfo, the process lists (_v3, _v2, unversioned), per-process utilisation and the
// driver's buffered utilisation samples.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "gpu/nvml_backend_internal.h"

namespace flyt::gpu::nvml_internal {
namespace {

// Process lists are read with the size query first (count 0 → INSUFFICIENT_SIZE and the count),
// then with room to spare, retried a few times in case processes start between the two calls.
// The buffer has twice the room NVML is told of, so a driver that writes larger records than
// documented cannot write past it; records that make no sense are refused (kMalformed).
template <typename Info, typename Fn>
nvmlReturn_t ReadProcessList(Fn fn, nvmlDevice_t h, ProcessType type, GpuInfo& out) {
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  unsigned int count = 0;
  nvmlReturn_t rc = fn(h, &count, nullptr);
  if (rc == NVML_SUCCESS) return rc;  // no processes
  if (rc != NVML_ERROR_INSUFFICIENT_SIZE) return rc;
  std::vector<Info> infos;
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int capacity = std::min(count, 1u << 16) + 8;
    infos.assign(2 * static_cast<size_t>(capacity), Info{});
    count = capacity;
    rc = fn(h, &count, infos.data());
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE) break;
  }
  if (rc != NVML_SUCCESS) return rc;
  count = std::min<unsigned int>(count, static_cast<unsigned int>(infos.size() / 2));
  std::vector<ProcessInfo> read;
  for (unsigned int i = 0; i < count; ++i) {
    const Info& info = infos[i];
    ProcessInfo p;
    p.pid = info.pid;
    p.type = type;
    if (info.usedGpuMemory != kNvmlValueNotAvailableULL) p.used_memory_bytes = info.usedGpuMemory;
    bool sane = info.pid != 0 && (!p.used_memory_bytes || !out.memory_total_bytes ||
                                  *p.used_memory_bytes <= *out.memory_total_bytes);
    if constexpr (std::is_same_v<Info, nvmlProcessInfo_t>) {
      if (info.gpuInstanceId != kNvmlInstanceIdNone) p.gpu_instance_id = info.gpuInstanceId;
      if (info.computeInstanceId != kNvmlInstanceIdNone) {
        p.compute_instance_id = info.computeInstanceId;
      }
      sane = sane && info.gpuInstanceId != 0xFFFFFFFEu &&
             (info.gpuInstanceId == kNvmlInstanceIdNone || info.gpuInstanceId < 64) &&
             (info.computeInstanceId == kNvmlInstanceIdNone || info.computeInstanceId < 64);
    }
    if (!sane) return kMalformed;
    read.push_back(std::move(p));
  }
  for (ProcessInfo& p : read) {
    auto existing = std::find_if(out.processes.begin(), out.processes.end(),
                                 [&](const ProcessInfo& q) { return q.pid == p.pid; });
    if (existing == out.processes.end()) {
      out.processes.push_back(std::move(p));
    } else if (existing->type != type) {
      existing->type = ProcessType::kComputeAndGraphics;
    }
  }
  return NVML_SUCCESS;
}

nvmlReturn_t ReadProcesses(const nvml::FunctionTable& f, Reading reading, nvmlDevice_t h,
                           GpuInfo& out) {
  switch (reading) {
    case Reading::kComputeProcesses:
      return ReadProcessList<nvmlProcessInfo_t>(f.DeviceGetComputeRunningProcesses, h,
                                                ProcessType::kCompute, out);
    case Reading::kComputeProcessesV2:
      return ReadProcessList<nvmlProcessInfo_t>(f.DeviceGetComputeRunningProcessesV2, h,
                                                ProcessType::kCompute, out);
    case Reading::kComputeProcessesV1:
      return ReadProcessList<nvmlProcessInfo_v1_t>(f.DeviceGetComputeRunningProcessesV1, h,
                                                   ProcessType::kCompute, out);
    case Reading::kGraphicsProcesses:
      return ReadProcessList<nvmlProcessInfo_t>(f.DeviceGetGraphicsRunningProcesses, h,
                                                ProcessType::kGraphics, out);
    case Reading::kGraphicsProcessesV2:
      return ReadProcessList<nvmlProcessInfo_t>(f.DeviceGetGraphicsRunningProcessesV2, h,
                                                ProcessType::kGraphics, out);
    case Reading::kGraphicsProcessesV1:
      return ReadProcessList<nvmlProcessInfo_v1_t>(f.DeviceGetGraphicsRunningProcessesV1, h,
                                                   ProcessType::kGraphics, out);
    default:
      return NVML_ERROR_INVALID_ARGUMENT;
  }
}

// Samples newer than the last one seen. NVML returns one sample per process that was busy since
// then; NOT_FOUND means none was. A running process without a new sample was idle: 0%, with the
// timestamp of its last sample (if any).
nvmlReturn_t ReadProcessUtilization(const nvml::FunctionTable& f, DeviceState& dev, GpuInfo& out) {
  auto fn = f.DeviceGetProcessUtilization;
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  unsigned int count = 0;
  nvmlReturn_t rc = fn(dev.handle, nullptr, &count, dev.last_util_seen_us);
  std::vector<nvmlProcessUtilizationSample_t> samples;
  if (rc == NVML_ERROR_INSUFFICIENT_SIZE && count > 0) {
    samples.resize(std::min(count, 1u << 16) + 8);
    count = static_cast<unsigned int>(samples.size());
    rc = fn(dev.handle, samples.data(), &count, dev.last_util_seen_us);
    samples.resize(rc == NVML_SUCCESS ? std::min<size_t>(count, samples.size()) : 0);
  }
  // NOT_FOUND: no sample since the last one seen. Anything else but SUCCESS (including a second
  // INSUFFICIENT_SIZE) leaves per-process utilisation unknown for this sample.
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_FOUND) return rc;
  std::map<uint32_t, const nvmlProcessUtilizationSample_t*> newest;
  for (const auto& s : samples) {
    auto& slot = newest[s.pid];
    if (slot == nullptr || s.timeStamp > slot->timeStamp) slot = &s;
    dev.last_util_seen_us = std::max(dev.last_util_seen_us, s.timeStamp);
  }
  for (ProcessInfo& p : out.processes) {
    auto it = newest.find(p.pid);
    if (it != newest.end()) {
      p.sm_util_percent = it->second->smUtil;
      p.memory_util_percent = it->second->memUtil;
      p.encoder_util_percent = it->second->encUtil;
      p.decoder_util_percent = it->second->decUtil;
      p.util_sample_timestamp_us = it->second->timeStamp;
    } else {
      p.sm_util_percent = 0;
      p.memory_util_percent = 0;
      p.encoder_util_percent = 0;
      p.decoder_util_percent = 0;
      // util_sample_timestamp_us stays absent: there is no sample for this interval.
    }
  }
  return NVML_SUCCESS;
}

// The driver's buffered utilisation samples newer than the last one read (nvmlDeviceGetSamples),
// into out.util_samples, oldest first, the newest kMaxUtilSamples at most. NOT_FOUND means no
// new sample: an empty list. Values that cannot be a percentage are dropped.
nvmlReturn_t ReadUtilSamples(const nvml::FunctionTable& f, DeviceState& dev, GpuInfo& out) {
  auto fn = f.DeviceGetSamples;
  if (fn == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
  // The driver stamps its samples with the wall clock: after the clock stepped back (NTP), the
  // last timestamp read lies in the future and would hide every new sample until the clock
  // caught up. More than a minute ahead of now: read from the start of the driver's buffer.
  const auto now_us = static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  if (dev.last_sample_seen_us > now_us + 60ull * 1000 * 1000) dev.last_sample_seen_us = 0;
  nvmlValueType_t type = NVML_VALUE_TYPE_UNSIGNED_INT;
  unsigned int count = 0;
  nvmlReturn_t rc = fn(dev.handle, NVML_GPU_UTILIZATION_SAMPLES, dev.last_sample_seen_us, &type,
                       &count, nullptr);
  if (rc == NVML_ERROR_NOT_FOUND) return NVML_SUCCESS;
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) return rc;
  if (count == 0) return NVML_SUCCESS;
  std::vector<nvmlSample_t> samples(std::min(count, 1u << 12) + 8);
  count = static_cast<unsigned int>(samples.size());
  rc = fn(dev.handle, NVML_GPU_UTILIZATION_SAMPLES, dev.last_sample_seen_us, &type, &count,
          samples.data());
  if (rc == NVML_ERROR_NOT_FOUND) return NVML_SUCCESS;
  if (rc != NVML_SUCCESS) return rc;
  samples.resize(std::min<size_t>(count, samples.size()));
  std::sort(samples.begin(), samples.end(), [](const nvmlSample_t& a, const nvmlSample_t& b) {
    return a.timeStamp < b.timeStamp;
  });
  std::vector<UtilSample> read;
  for (const nvmlSample_t& s : samples) {
    if (s.timeStamp <= dev.last_sample_seen_us) continue;  // not newer: already read
    std::optional<double> v;
    switch (type) {
      case NVML_VALUE_TYPE_UNSIGNED_INT: v = s.sampleValue.uiVal; break;
      case NVML_VALUE_TYPE_UNSIGNED_LONG: v = static_cast<double>(s.sampleValue.ulVal); break;
      case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        v = static_cast<double>(s.sampleValue.ullVal);
        break;
      case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        v = static_cast<double>(s.sampleValue.sllVal);
        break;
      case NVML_VALUE_TYPE_SIGNED_INT: v = s.sampleValue.siVal; break;
      case NVML_VALUE_TYPE_DOUBLE: v = s.sampleValue.dVal; break;
    }
    if (v && *v >= 0 && *v <= 100) {
      read.push_back({s.timeStamp, static_cast<uint32_t>(std::lround(*v))});
    }
  }
  if (!samples.empty()) {
    dev.last_sample_seen_us = std::max(dev.last_sample_seen_us, samples.back().timeStamp);
  }
  if (read.size() > kMaxUtilSamples) {
    read.erase(read.begin(), read.end() - static_cast<std::ptrdiff_t>(kMaxUtilSamples));
  }
  out.util_samples = std::move(read);
  return NVML_SUCCESS;
}

}  // namespace

nvmlReturn_t CallReading(const nvml::FunctionTable& f, Reading reading, DeviceState& dev,
                         GpuInfo& out) {
  nvmlDevice_t h = dev.handle;
  unsigned int u = 0;
  unsigned long long ull = 0;
  nvmlReturn_t rc = NVML_ERROR_FUNCTION_NOT_FOUND;
  switch (reading) {
    case Reading::kMemoryV2: {
      if (!f.DeviceGetMemoryInfoV2) break;
      nvmlMemory_v2_t m{};
      m.version = nvmlMemory_v2;
      rc = f.DeviceGetMemoryInfoV2(h, &m);
      if (rc == NVML_SUCCESS) {
        out.memory_total_bytes = m.total;
        out.memory_reserved_bytes = m.reserved;
        out.memory_free_bytes = m.free;
        out.memory_used_bytes = m.used;
      }
      break;
    }
    case Reading::kMemoryV1: {
      if (!f.DeviceGetMemoryInfo) break;
      nvmlMemory_t m{};
      rc = f.DeviceGetMemoryInfo(h, &m);
      if (rc == NVML_SUCCESS) {
        out.memory_total_bytes = m.total;
        out.memory_free_bytes = m.free;
        out.memory_used_bytes = m.used;
      }
      break;
    }
    case Reading::kUtilization: {
      if (!f.DeviceGetUtilizationRates) break;
      nvmlUtilization_t util{};
      rc = f.DeviceGetUtilizationRates(h, &util);
      if (rc == NVML_SUCCESS) {
        out.gpu_util_percent = util.gpu;
        out.memory_util_percent = util.memory;
      }
      break;
    }
    case Reading::kTemperature:
      if (!f.DeviceGetTemperature) break;
      rc = f.DeviceGetTemperature(h, NVML_TEMPERATURE_GPU, &u);
      if (rc == NVML_SUCCESS) out.temperature_c = u;
      break;
    case Reading::kMemoryTemperature: {
      if (!f.DeviceGetFieldValues) break;
      nvmlFieldValue_t v{};
      v.fieldId = NVML_FI_DEV_MEMORY_TEMP;
      rc = f.DeviceGetFieldValues(h, 1, &v);
      // The call can succeed while the field itself failed: its own code decides.
      if (rc == NVML_SUCCESS) rc = v.nvmlReturn;
      if (rc == NVML_SUCCESS) {
        switch (v.valueType) {
          case NVML_VALUE_TYPE_UNSIGNED_INT: out.memory_temperature_c = v.value.uiVal; break;
          case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
            out.memory_temperature_c = static_cast<uint32_t>(v.value.ullVal);
            break;
          case NVML_VALUE_TYPE_SIGNED_INT:
            if (v.value.siVal >= 0) out.memory_temperature_c = static_cast<uint32_t>(v.value.siVal);
            break;
          case NVML_VALUE_TYPE_DOUBLE:
            if (v.value.dVal >= 0 && v.value.dVal < 1000) {
              out.memory_temperature_c = static_cast<uint32_t>(v.value.dVal + 0.5);
            }
            break;
          default: break;
        }
      }
      break;
    }
    case Reading::kPowerUsage:
      if (!f.DeviceGetPowerUsage) break;
      rc = f.DeviceGetPowerUsage(h, &u);
      if (rc == NVML_SUCCESS) out.power_draw_mw = u;
      break;
    case Reading::kPowerLimit:
      if (!f.DeviceGetEnforcedPowerLimit) break;
      rc = f.DeviceGetEnforcedPowerLimit(h, &u);
      if (rc == NVML_SUCCESS) out.power_limit_mw = u;
      break;
    case Reading::kEnergy:
      if (!f.DeviceGetTotalEnergyConsumption) break;
      rc = f.DeviceGetTotalEnergyConsumption(h, &ull);
      if (rc == NVML_SUCCESS) out.energy_mj = ull;
      break;
    case Reading::kSmClock:
      if (!f.DeviceGetClockInfo) break;
      rc = f.DeviceGetClockInfo(h, NVML_CLOCK_SM, &u);
      if (rc == NVML_SUCCESS) out.sm_clock_mhz = u;
      break;
    case Reading::kMemClock:
      if (!f.DeviceGetClockInfo) break;
      rc = f.DeviceGetClockInfo(h, NVML_CLOCK_MEM, &u);
      if (rc == NVML_SUCCESS) out.memory_clock_mhz = u;
      break;
    case Reading::kPcieRx:
      if (!f.DeviceGetPcieThroughput) break;
      rc = f.DeviceGetPcieThroughput(h, NVML_PCIE_UTIL_RX_BYTES, &u);
      if (rc == NVML_SUCCESS) out.pcie_rx_kb_per_s = u;
      break;
    case Reading::kPcieTx:
      if (!f.DeviceGetPcieThroughput) break;
      rc = f.DeviceGetPcieThroughput(h, NVML_PCIE_UTIL_TX_BYTES, &u);
      if (rc == NVML_SUCCESS) out.pcie_tx_kb_per_s = u;
      break;
    case Reading::kPcieReplay:
      if (!f.DeviceGetPcieReplayCounter) break;
      rc = f.DeviceGetPcieReplayCounter(h, &u);
      if (rc == NVML_SUCCESS) out.pcie_replay_count = u;
      break;
    case Reading::kEncoderUtilization: {
      if (!f.DeviceGetEncoderUtilization) break;
      unsigned int period_us = 0;
      rc = f.DeviceGetEncoderUtilization(h, &u, &period_us);
      if (rc == NVML_SUCCESS) out.encoder_util_percent = u;
      break;
    }
    case Reading::kDecoderUtilization: {
      if (!f.DeviceGetDecoderUtilization) break;
      unsigned int period_us = 0;
      rc = f.DeviceGetDecoderUtilization(h, &u, &period_us);
      if (rc == NVML_SUCCESS) out.decoder_util_percent = u;
      break;
    }
    case Reading::kFanSpeed:
      if (!f.DeviceGetFanSpeed) break;
      rc = f.DeviceGetFanSpeed(h, &u);
      if (rc == NVML_SUCCESS) out.fan_speed_percent = u;
      break;
    case Reading::kPerformanceState: {
      if (!f.DeviceGetPerformanceState) break;
      nvmlPstates_t p = NVML_PSTATE_UNKNOWN;
      rc = f.DeviceGetPerformanceState(h, &p);
      if (rc == NVML_SUCCESS && static_cast<unsigned int>(p) <= 15) out.performance_state = p;
      break;
    }
    case Reading::kComputeMode: {
      if (!f.DeviceGetComputeMode) break;
      nvmlComputeMode_t mode = NVML_COMPUTEMODE_DEFAULT;
      rc = f.DeviceGetComputeMode(h, &mode);
      if (rc == NVML_SUCCESS) {
        switch (mode) {
          case NVML_COMPUTEMODE_DEFAULT:
            out.compute_mode = "default";
            break;
          case NVML_COMPUTEMODE_EXCLUSIVE_THREAD:
            out.compute_mode = "exclusive_thread";
            break;
          case NVML_COMPUTEMODE_PROHIBITED:
            out.compute_mode = "prohibited";
            break;
          case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS:
            out.compute_mode = "exclusive_process";
            break;
        }
      }
      break;
    }
    case Reading::kMigMode: {
      if (!f.DeviceGetMigMode) break;
      unsigned int current = 0, pending = 0;
      rc = f.DeviceGetMigMode(h, &current, &pending);
      if (rc == NVML_SUCCESS) {
        out.mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
        out.mig_pending = pending == NVML_DEVICE_MIG_ENABLE;
      }
      break;
    }
    case Reading::kEccVolatileCorrected:
    case Reading::kEccVolatileUncorrected:
    case Reading::kEccAggregateCorrected:
    case Reading::kEccAggregateUncorrected: {
      if (!f.DeviceGetTotalEccErrors) break;
      bool corrected =
          reading == Reading::kEccVolatileCorrected || reading == Reading::kEccAggregateCorrected;
      bool aggregate = reading == Reading::kEccAggregateCorrected ||
                       reading == Reading::kEccAggregateUncorrected;
      rc = f.DeviceGetTotalEccErrors(
          h, corrected ? NVML_MEMORY_ERROR_TYPE_CORRECTED : NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
          aggregate ? NVML_AGGREGATE_ECC : NVML_VOLATILE_ECC, &ull);
      if (rc == NVML_SUCCESS) {
        std::optional<uint64_t>& slot =
            aggregate ? (corrected ? out.ecc.aggregate_corrected : out.ecc.aggregate_uncorrected)
                      : (corrected ? out.ecc.volatile_corrected : out.ecc.volatile_uncorrected);
        slot = ull;
      }
      break;
    }
    case Reading::kClockEventReasons:
      if (!f.DeviceGetClocksEventReasons) break;
      rc = f.DeviceGetClocksEventReasons(h, &ull);
      if (rc == NVML_SUCCESS) out.clock_event_reasons = ull;
      break;
    case Reading::kComputeProcesses:
    case Reading::kComputeProcessesV2:
    case Reading::kComputeProcessesV1:
    case Reading::kGraphicsProcesses:
    case Reading::kGraphicsProcessesV2:
    case Reading::kGraphicsProcessesV1:
      rc = ReadProcesses(f, reading, h, out);
      break;
    case Reading::kProcessUtilization:
      rc = ReadProcessUtilization(f, dev, out);
      break;
    case Reading::kUtilSamples:
      rc = ReadUtilSamples(f, dev, out);
      break;
    case Reading::kCount:
      break;
  }
  return rc;
}

}  // namespace flyt::gpu::nvml_internal
