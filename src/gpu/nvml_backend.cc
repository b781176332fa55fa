// NvmlBackend (see nvml_backend.h): the NVML session, device enumeration and identity, probing
// which readings each device supports, sampling them into snapshots, and XID/ECC events. The NVML
// call behind each reading is in nvml_backend_readings.cc.
#include "gpu/nvml_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "gpu/nvml_backend_internal.h"
#include "gpu/proc.h"
#include "nvml/library.h"

namespace flyt::gpu {
namespace {

using nvml::Library;
using nvml_internal::CallReading;
using nvml_internal::DeviceState;
using nvml_internal::kMalformed;
using nvml_internal::kReadingCount;
using nvml_internal::Reading;

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

  // Decides, once, which readings this device supports.
  void Probe(DeviceState& dev) {
    GpuInfo scratch;
    for (size_t i = 0; i < kReadingCount; ++i) {
      auto reading = static_cast<Reading>(i);
      // Probing reads into a scratch GpuInfo; the utilisation timestamp is reset afterwards so
      // that the first real sample sees the driver's buffered samples.
      nvmlReturn_t rc = CallReading(api(), reading, dev, scratch);
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
      nvmlReturn_t rc = CallReading(api(), reading, dev, info);
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
