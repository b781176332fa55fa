#include "gpu/nvml_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "gpu/proc.h"
#include "nvml/library.h"

namespace flyt::gpu {
namespace {

using nvml::Library;

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

// Readings that are alternatives: in each sample the first of a group that succeeds is used and
// the rest of the group is skipped (memory v2 then v1; process lists _v3, _v2, unversioned).
int GroupOf(Reading r) {
  switch (r) {
    case Reading::kMemoryV2:
    case Reading::kMemoryV1:
      return 1;
    case Reading::kComputeProcesses:
    case Reading::kComputeProcessesV2:
    case Reading::kComputeProcessesV1:
      return 2;
    case Reading::kGraphicsProcesses:
    case Reading::kGraphicsProcessesV2:
    case Reading::kGraphicsProcessesV1:
      return 3;
    default:
      return 0;
  }
}

bool MeansUnsupported(nvmlReturn_t rc) {
  return rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND;
}

std::string CString(const char* buf, size_t size) { return std::string(buf, strnlen(buf, size)); }

struct DeviceState {
  nvmlDevice_t handle = nullptr;
  GpuInfo identity;  // index, uuid, name, pci ids, serial, max clocks
  bool lost = false;
  std::array<bool, kReadingCount> supported{};
  unsigned long long last_util_seen_us = 0;
  unsigned long long last_sample_seen_us = 0;  // nvmlDeviceGetSamples' newest timestamp read
};

class NvmlBackend final : public Backend {
 public:
  NvmlBackend(std::unique_ptr<Library> library, std::string proc_root)
      : library_(std::move(library)), proc_(std::move(proc_root)) {}

  ~NvmlBackend() override {
    std::scoped_lock lock(event_mu_, mu_);
    FreeEventSet();
    session_.reset();
  }

  Status Open() {
    std::scoped_lock lock(event_mu_, mu_);
    FLYT_ASSIGN_OR_RETURN(nvml::Session session, nvml::Session::Start(*library_));
    session_.emplace(std::move(session));
    simulated_scenario_ = library_->SimulatedScenario();  // fixed for the library's lifetime
    ReadSystem();
    FLYT_RETURN_IF_ERROR(Enumerate());
    SetUpEvents();
    return Status::Ok();
  }

  Source source() const override { return Source::kNvml; }

  Result<GpuSnapshot> Snapshot() override {
    std::scoped_lock lock(mu_);
    proc_.BeginSample();
    GpuSnapshot snap;
    snap.taken_at = std::chrono::system_clock::now();
    snap.source = Source::kNvml;
    snap.driver_version = driver_version_;
    snap.cuda_driver_version = cuda_version_;
    snap.nvml_version = nvml_version_;
    snap.simulated_scenario = simulated_scenario_;
    errors_.clear();
    for (DeviceState& dev : devices_) snap.gpus.push_back(Read(dev));
    if (!errors_.empty()) {
      snap.reason = std::to_string(errors_.size()) + " reading(s) failed: " + errors_.front();
    }
    return snap;
  }

  bool SupportsEvents() const override { return has_events_.load(); }

  std::vector<GpuEvent> WaitEvents(std::chrono::milliseconds timeout) override {
    std::vector<GpuEvent> events;
    std::scoped_lock event_lock(event_mu_);
    if (event_set_ == nullptr || library_->api().EventSetWait == nullptr) return events;
    auto wait_ms = static_cast<unsigned int>(std::clamp<int64_t>(timeout.count(), 0, 60000));
    for (int i = 0; i < 1024; ++i) {  // bounded drain
      nvmlEventData_t data{};
      nvmlReturn_t rc = library_->api().EventSetWait(event_set_, &data, wait_ms);
      // TIMEOUT: nothing (more) pending. Anything else (GPU_IS_LOST for a lost GPU, UNKNOWN):
      // also nothing to deliver; the caller backs off instead of spinning.
      if (rc != NVML_SUCCESS) break;
      events.push_back(ToEvent(data));
      wait_ms = 0;  // after the first event, only drain what is already queued
    }
    return events;
  }

  Status Reinitialize() override {
    std::scoped_lock lock(event_mu_, mu_);
    FreeEventSet();
    session_.reset();
    auto session = nvml::Session::Start(*library_);
    Status status = session.ok() ? Status::Ok() : session.status();
    if (session.ok()) {
      session_.emplace(std::move(session).value());
      ReadSystem();
      status = Enumerate();
    }
    if (!status.ok()) {
      // NVML is down: no handle is valid any more. Every GPU stays listed, as lost, until a
      // later re-initialisation succeeds.
      for (DeviceState& dev : devices_) {
        dev.lost = true;
        dev.handle = nullptr;
      }
      return status.WithContext("re-initialising NVML");
    }
    SetUpEvents();
    return Status::Ok();
  }

 private:
  const nvml::FunctionTable& api() const { return library_->api(); }

  void ReadSystem() {
    char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    if (api().SystemGetDriverVersion && api().SystemGetDriverVersion(buf, sizeof(buf)) == 0) {
      driver_version_ = CString(buf, sizeof(buf));
    }
    char nbuf[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = {};
    if (api().SystemGetNVMLVersion && api().SystemGetNVMLVersion(nbuf, sizeof(nbuf)) == 0) {
      nvml_version_ = CString(nbuf, sizeof(nbuf));
    }
    int cuda = 0;
    if (api().SystemGetCudaDriverVersion && api().SystemGetCudaDriverVersion(&cuda) == 0) {
      cuda_version_ = std::to_string(cuda / 1000) + "." + std::to_string((cuda % 1000) / 10);
    }
  }

  // Looks up every device; keeps per-device state of devices already known (same UUID, or same
  // index when the UUID cannot be read), so a re-initialisation refreshes handles without losing
  // what was decided. A known device that is no longer enumerated stays listed, as lost.
  Status Enumerate() {
    unsigned int count = 0;
    nvmlReturn_t rc = api().DeviceGetCount(&count);
    if (rc != NVML_SUCCESS) {
      return nvml::NvmlError(library_.get(), library_->BoundSymbol("DeviceGetCount"), rc);
    }
    std::vector<DeviceState> old = std::move(devices_);
    std::vector<bool> matched(old.size(), false);
    auto same_index = [&](uint32_t index) -> DeviceState* {
      for (size_t k = 0; k < old.size(); ++k) {
        if (!matched[k] && old[k].identity.index == index) {
          matched[k] = true;
          return &old[k];
        }
      }
      return nullptr;
    };
    devices_.clear();
    for (unsigned int i = 0; i < count; ++i) {
      DeviceState dev;
      dev.identity.index = i;
      rc = api().DeviceGetHandleByIndex(i, &dev.handle);
      if (rc != NVML_SUCCESS) {
        // A device that cannot even be opened is listed as lost, so it is seen, not hidden.
        dev.lost = true;
        dev.handle = nullptr;
        if (DeviceState* o = same_index(i)) dev.identity = o->identity;
        Note(nvml::NvmlError(library_.get(), library_->BoundSymbol("DeviceGetHandleByIndex"), rc)
                 .message());
        devices_.push_back(std::move(dev));
        continue;
      }
      ReadIdentity(dev);
      DeviceState* same = nullptr;
      for (size_t k = 0; k < old.size() && same == nullptr; ++k) {
        if (!matched[k] && !dev.identity.uuid.empty() &&
            old[k].identity.uuid == dev.identity.uuid) {
          matched[k] = true;
          same = &old[k];
        }
      }
      if (same == nullptr && dev.identity.uuid.empty()) {
        same = same_index(i);
        if (same != nullptr) dev.identity = same->identity;  // keep who it was
      }
      if (same != nullptr && !same->lost) {
        dev.supported = same->supported;
        dev.last_util_seen_us = same->last_util_seen_us;
        dev.last_sample_seen_us = same->last_sample_seen_us;
      } else {
        Probe(dev);
      }
      devices_.push_back(std::move(dev));
    }
    for (size_t k = 0; k < old.size(); ++k) {
      if (matched[k]) continue;
      DeviceState gone = std::move(old[k]);
      gone.lost = true;
      gone.handle = nullptr;
      devices_.push_back(std::move(gone));
    }
    return Status::Ok();
  }

  void ReadIdentity(DeviceState& dev) {
    GpuInfo& id = dev.identity;
    unsigned int index = 0;
    if (api().DeviceGetIndex && api().DeviceGetIndex(dev.handle, &index) == NVML_SUCCESS) {
      id.index = index;
    }
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (api().DeviceGetUUID) {
      nvmlReturn_t rc = api().DeviceGetUUID(dev.handle, buf, sizeof(buf));
      if (rc == NVML_SUCCESS) id.uuid = CString(buf, sizeof(buf));
      if (rc == NVML_ERROR_GPU_IS_LOST) dev.lost = true;
    }
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (api().DeviceGetName && api().DeviceGetName(dev.handle, name, sizeof(name)) == 0) {
      id.name = CString(name, sizeof(name));
    }
    nvmlPciInfo_t pci{};
    if (api().DeviceGetPciInfo && api().DeviceGetPciInfo(dev.handle, &pci) == NVML_SUCCESS) {
      id.pci_bus_id = CString(pci.busId, sizeof(pci.busId));
      id.pci_device_id = pci.pciDeviceId;
    }
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE] = {};
    if (api().DeviceGetSerial &&
        api().DeviceGetSerial(dev.handle, serial, sizeof(serial)) == NVML_SUCCESS) {
      std::string s = CString(serial, sizeof(serial));
      if (!s.empty()) id.serial = s;
    }
    unsigned int cores = 0;
    if (api().DeviceGetNumGpuCores &&
        api().DeviceGetNumGpuCores(dev.handle, &cores) == NVML_SUCCESS && cores > 0) {
      id.cores = cores;
    }
    unsigned int mhz = 0;
    if (api().DeviceGetMaxClockInfo &&
        api().DeviceGetMaxClockInfo(dev.handle, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS) {
      id.max_sm_clock_mhz = mhz;
    }
    if (api().DeviceGetMaxClockInfo &&
        api().DeviceGetMaxClockInfo(dev.handle, NVML_CLOCK_MEM, &mhz) == NVML_SUCCESS) {
      id.max_memory_clock_mhz = mhz;
    }
  }

  // One call per reading; returns the NVML code (FUNCTION_NOT_FOUND when the symbol is absent).
  // `out` receives the value when the call succeeds.
  nvmlReturn_t Call(Reading reading, DeviceState& dev, GpuInfo& out) {
    const nvml::FunctionTable& f = api();
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
        rc = ReadProcesses(reading, h, out);
        break;
      case Reading::kProcessUtilization:
        rc = ReadProcessUtilization(dev, out);
        break;
      case Reading::kUtilSamples:
        rc = ReadUtilSamples(dev, out);
        break;
      case Reading::kCount:
        break;
    }
    return rc;
  }

  // Process lists are read with the size query first (count 0 → INSUFFICIENT_SIZE and the count),
  // then with room to spare, retried a few times in case processes start between the two calls.
  // The buffer has twice the room NVML is told of, so a driver that writes larger records than
  // documented cannot write past it; records that make no sense are refused (MALFORMED below).
  // Not an NVML code (those stop at 999; the enum holds 0..1023).
  static constexpr nvmlReturn_t kMalformed = static_cast<nvmlReturn_t>(1001);

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

  nvmlReturn_t ReadProcesses(Reading reading, nvmlDevice_t h, GpuInfo& out) {
    const nvml::FunctionTable& f = api();
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
  nvmlReturn_t ReadProcessUtilization(DeviceState& dev, GpuInfo& out) {
    auto fn = api().DeviceGetProcessUtilization;
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
  nvmlReturn_t ReadUtilSamples(DeviceState& dev, GpuInfo& out) {
    auto fn = api().DeviceGetSamples;
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

  // Decides, once, which readings this device supports.
  void Probe(DeviceState& dev) {
    GpuInfo scratch;
    for (size_t i = 0; i < kReadingCount; ++i) {
      auto reading = static_cast<Reading>(i);
      // Probing reads into a scratch GpuInfo; the utilisation timestamp is reset afterwards so
      // that the first real sample sees the driver's buffered samples.
      nvmlReturn_t rc = Call(reading, dev, scratch);
      dev.supported[i] = !MeansUnsupported(rc) && rc != kMalformed;
      if (rc == NVML_ERROR_GPU_IS_LOST) dev.lost = true;
    }
    dev.last_util_seen_us = 0;
    dev.last_sample_seen_us = 0;
  }

  GpuInfo Read(DeviceState& dev) {
    GpuInfo info = dev.identity;
    if (dev.lost) {
      info.lost = true;
      return info;
    }
    std::array<bool, 4> group_done{};
    for (size_t i = 0; i < kReadingCount; ++i) {
      if (!dev.supported[i]) continue;
      const auto reading = static_cast<Reading>(i);
      const int group = GroupOf(reading);
      if (group != 0 && group_done[group]) continue;
      nvmlReturn_t rc = Call(reading, dev, info);
      if (rc == NVML_SUCCESS) {
        group_done[group] = true;
        continue;
      }
      // Buffered samples are a bonus: a driver that stops offering them mid-run is not an error.
      if (reading == Reading::kUtilSamples && MeansUnsupported(rc)) continue;
      if (rc == NVML_ERROR_GPU_IS_LOST) {
        dev.lost = true;
        GpuInfo lost = dev.identity;
        lost.lost = true;
        Note("GPU " + std::to_string(dev.identity.index) + " (" + dev.identity.uuid +
             ") is lost (NVML_ERROR_GPU_IS_LOST)");
        return lost;
      }
      if (rc == kMalformed) {
        // This driver's entry point writes something other than the documented records: stop
        // using it on this device; the next alternative of the group is tried at once.
        dev.supported[i] = false;
        Note("GPU " + std::to_string(dev.identity.index) + ": " + ReadingName(reading) +
             " returned malformed records; using the next older entry point");
        continue;
      }
      // A transient failure (TIMEOUT, UNKNOWN, a NOT_SUPPORTED that appeared mid-run): this
      // reading is absent in this sample only.
      Note("GPU " + std::to_string(dev.identity.index) + ": " +
           nvml::NvmlError(library_.get(), ReadingName(reading), rc).message());
    }
    for (ProcessInfo& p : info.processes) proc_.Fill(p);
    return info;
  }

  static const char* ReadingName(Reading r) {
    static const char* kNames[] = {"memory_info_v2",
                                   "memory_info",
                                   "utilization",
                                   "temperature",
                                   "memory_temperature",
                                   "power_usage",
                                   "power_limit",
                                   "energy",
                                   "sm_clock",
                                   "memory_clock",
                                   "pcie_rx",
                                   "pcie_tx",
                                   "pcie_replay_counter",
                                   "encoder_utilization",
                                   "decoder_utilization",
                                   "fan_speed",
                                   "performance_state",
                                   "compute_mode",
                                   "mig_mode",
                                   "ecc_volatile_corrected",
                                   "ecc_volatile_uncorrected",
                                   "ecc_aggregate_corrected",
                                   "ecc_aggregate_uncorrected",
                                   "clock_event_reasons",
                                   "compute_processes_v3",
                                   "compute_processes_v2",
                                   "compute_processes_v1",
                                   "graphics_processes_v3",
                                   "graphics_processes_v2",
                                   "graphics_processes_v1",
                                   "process_utilization",
                                   "util_samples"};
    static_assert(sizeof(kNames) / sizeof(kNames[0]) == kReadingCount);
    return kNames[static_cast<size_t>(r)];
  }

  void Note(std::string message) {
    if (errors_.size() < 64) errors_.push_back(std::move(message));
  }

  void SetUpEvents() {
    const nvml::FunctionTable& f = api();
    if (!f.EventSetCreate || !f.DeviceRegisterEvents || !f.EventSetWait) return;
    if (f.EventSetCreate(&event_set_) != NVML_SUCCESS) {
      event_set_ = nullptr;
      return;
    }
    constexpr unsigned long long kWanted = nvmlEventTypeXidCriticalError |
                                           nvmlEventTypeDoubleBitEccError |
                                           nvmlEventTypeSingleBitEccError;
    bool any = false;
    for (DeviceState& dev : devices_) {
      if (dev.lost || dev.handle == nullptr) continue;
      unsigned long long supported = kWanted;
      if (f.DeviceGetSupportedEventTypes &&
          f.DeviceGetSupportedEventTypes(dev.handle, &supported) != NVML_SUCCESS) {
        continue;
      }
      unsigned long long types = supported & kWanted;
      if (types != 0 && f.DeviceRegisterEvents(dev.handle, types, event_set_) == NVML_SUCCESS) {
        any = true;
      }
    }
    if (!any) FreeEventSet();
    has_events_ = event_set_ != nullptr;
  }

  void FreeEventSet() {
    if (event_set_ != nullptr && api().EventSetFree) api().EventSetFree(event_set_);
    event_set_ = nullptr;
    has_events_ = false;
  }

  GpuEvent ToEvent(const nvmlEventData_t& data) {
    GpuEvent event;
    event.at = std::chrono::system_clock::now();
    {
      std::scoped_lock lock(mu_);
      for (const DeviceState& dev : devices_) {
        if (dev.handle == data.device) {
          event.gpu_index = dev.identity.index;
          event.gpu_uuid = dev.identity.uuid;
        }
      }
    }
    switch (data.eventType) {
      case nvmlEventTypeXidCriticalError:
        event.type = EventType::kXid;
        event.xid = data.eventData;
        event.description = "XID " + std::to_string(data.eventData);
        break;
      case nvmlEventTypeDoubleBitEccError:
        event.type = EventType::kDoubleBitEcc;
        event.description = "double-bit ECC error";
        break;
      case nvmlEventTypeSingleBitEccError:
        event.type = EventType::kSingleBitEcc;
        event.description = "single-bit ECC error";
        break;
      default:
        event.type = EventType::kOther;
        char hex[32];
        std::snprintf(hex, sizeof(hex), "0x%llx", data.eventType);
        event.description = std::string("NVML event ") + hex;
        break;
    }
    return event;
  }

  std::unique_ptr<Library> library_;  // outlives session_ (declared first, destroyed last)
  std::optional<nvml::Session> session_;
  ProcReader proc_;
  std::mutex event_mu_;  // held while waiting for events; Reinitialize takes it to free the set
  std::mutex mu_;        // guards devices_, system strings and errors_
  std::vector<DeviceState> devices_;
  std::optional<std::string> driver_version_, cuda_version_, nvml_version_;
  std::optional<std::string> simulated_scenario_;
  std::vector<std::string> errors_;
  nvmlEventSet_t event_set_ = nullptr;  // guarded by event_mu_
  std::atomic<bool> has_events_{false};
};

}  // namespace

Result<std::unique_ptr<Backend>> OpenNvmlBackend(const NvmlBackendOptions& options) {
  std::string path =
      options.library_path.empty() ? nvml::DefaultLibraryPath() : options.library_path;
  FLYT_ASSIGN_OR_RETURN(std::unique_ptr<Library> library, Library::Load(path));
  auto backend = std::make_unique<NvmlBackend>(std::move(library), options.proc_root);
  FLYT_RETURN_IF_ERROR(backend->Open());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace flyt::gpu
