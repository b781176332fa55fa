// The simulated NVML (see sim_nvml.h): loading the scenario and its clock, init and shutdown,
// the system and identity calls, and the device readings (memory, utilisation and its buffered
// samples, temperatures, power, clocks, PCIe, codecs, ECC, ...). The process entry points are in
// sim_nvml_processes.cc, the event entry points in sim_nvml_events.cc.
#include "sim/sim_nvml.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/strings.h"
#include "sim/scenario.h"
#include "sim/sim_nvml_internal.h"

namespace flyt::sim::api {
namespace {

// FLYT_SIM_NODE (the node manager sets it to its node name): mixed into every GPU's UUID, so that
// simulated nodes playing one scenario still have GPUs of their own, as real nodes do.
std::string NodeUuid(const std::string& node, const std::string& uuid) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over "<node>/<uuid>"
  for (char c : node + "/" + uuid) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ULL;
  }
  const uint64_t h2 = h * 0x9E3779B97F4A7C15ULL;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(h >> 32),
                static_cast<unsigned>((h >> 16) & 0xffff), static_cast<unsigned>(h & 0xffff),
                static_cast<unsigned>(h2 >> 48),
                static_cast<unsigned long long>(h2 & 0xffffffffffffULL));
  return buf;
}

}  // namespace

double Sim::EnvDouble(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  auto d = ParseDouble(v);
  return d ? *d : fallback;
}

void Sim::ReadTimeConfig() {
  const char* file = std::getenv("FLYT_SIM_CLOCK_FILE");
  time.clock_file = file != nullptr ? file : "";
  time.fixed.reset();
  if (std::getenv("FLYT_SIM_TIME") != nullptr) time.fixed = EnvDouble("FLYT_SIM_TIME", 0);
  time.start = EnvDouble("FLYT_SIM_START", 0);
  time.speed = std::clamp(EnvDouble("FLYT_SIM_SPEED", 1), 0.0, 1e6);
  real_time = time.clock_file.empty() && !time.fixed;
}

nvmlReturn_t Sim::Load() {
  const char* env = std::getenv("FLYT_SIM_SCENARIO");
  if (loaded && env != nullptr && path == env) return NVML_SUCCESS;
  if (env == nullptr || *env == '\0') {
    std::fprintf(stderr,
                 "flyt-sim-nvml: FLYT_SIM_SCENARIO is not set; point it at a scenario file "
                 "(see sim/scenarios/)\n");
    return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  Result<Scenario> s = LoadScenario(env);
  if (!s.ok()) {
    std::fprintf(stderr, "flyt-sim-nvml: %s\n", s.status().message().c_str());
    return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  scenario = std::move(s).value();
  if (const char* node = std::getenv("FLYT_SIM_NODE"); node != nullptr && *node != '\0') {
    for (GpuSpec& g : scenario.gpus) g.uuid = NodeUuid(node, g.uuid);
  }
  path = env;
  event_sets.clear();
  devices.clear();
  devices.resize(scenario.gpus.size());
  for (size_t i = 0; i < devices.size(); ++i) devices[i].spec = &scenario.gpus[i];
  started = std::chrono::steady_clock::now();
  ReadTimeConfig();
  wall_start_us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  loaded = true;
  return NVML_SUCCESS;
}

Sim& Instance() {
  static Sim* sim = new Sim();  // never destroyed: exports may run during process exit
  return *sim;
}

namespace {

nvmlReturn_t CopyString(const std::string& value, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t ReadUint(nvmlDevice_t device, Field field, unsigned int* out,
                      unsigned int (*get)(const Sim&, Device&, double)) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, field, [&](Sim& sim, Device& dev, double t) {
    *out = get(sim, dev, t);
    return NVML_SUCCESS;
  });
}

const GpuReading& Reading(const Sim& sim, Device& dev, double t) {
  if (dev.reading_t != t) {
    dev.reading = ReadingAt(sim.scenario, *dev.spec, t);
    dev.reading_t = t;
  }
  return dev.reading;
}

}  // namespace

const char* ScenarioPath() noexcept {
  Sim& sim = Instance();
  std::scoped_lock lock(sim.mu);
  return sim.path.c_str();
}

nvmlReturn_t Init() noexcept {
  try {
    Sim& sim = Instance();
    std::scoped_lock lock(sim.mu);
    if (sim.init_count == 0) {
      nvmlReturn_t rc = sim.Load();
      if (rc != NVML_SUCCESS) return rc;
      sim.ReadTimeConfig();
    }
    ++sim.init_count;
    return NVML_SUCCESS;
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

nvmlReturn_t Shutdown() noexcept {
  Sim& sim = Instance();
  std::scoped_lock lock(sim.mu);
  if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --sim.init_count;
  return NVML_SUCCESS;
}

const char* ErrorString(nvmlReturn_t result) noexcept {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
      return "Timeout";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_UNKNOWN:
      return "Unknown Error";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t SystemGetDriverVersion(char* version, unsigned int length) noexcept {
  Sim& sim = Instance();
  std::scoped_lock lock(sim.mu);
  if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  return CopyString(sim.scenario.driver_version, version, length);
}

nvmlReturn_t SystemGetNVMLVersion(char* version, unsigned int length) noexcept {
  Sim& sim = Instance();
  std::scoped_lock lock(sim.mu);
  if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  return CopyString(sim.scenario.nvml_version, version, length);
}

nvmlReturn_t SystemGetCudaDriverVersion(int* version) noexcept {
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  Sim& sim = Instance();
  std::scoped_lock lock(sim.mu);
  if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  *version = sim.scenario.cuda_driver_version;
  return NVML_SUCCESS;
}

nvmlReturn_t DeviceGetCount(unsigned int* count) noexcept {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  Sim& sim = Instance();
  std::scoped_lock lock(sim.mu);
  if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  *count = static_cast<unsigned int>(sim.devices.size());
  return NVML_SUCCESS;
}

nvmlReturn_t DeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) noexcept {
  if (device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  Sim& sim = Instance();
  std::scoped_lock lock(sim.mu);
  if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (index >= sim.devices.size()) return NVML_ERROR_INVALID_ARGUMENT;
  if (sim.Lost(index, sim.Now())) return NVML_ERROR_GPU_IS_LOST;
  *device = reinterpret_cast<nvmlDevice_t>(&sim.devices[index]);
  return NVML_SUCCESS;
}

namespace {
// Identity calls: check initialised, handle and lost, but no field faults.
template <typename Body>
nvmlReturn_t IdentityCall(nvmlDevice_t handle, Body body) noexcept {
  try {
    Sim& sim = Instance();
    std::scoped_lock lock(sim.mu);
    if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    Device* dev = sim.FromHandle(handle);
    if (dev == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (sim.Lost(dev->spec->index, sim.Now())) return NVML_ERROR_GPU_IS_LOST;
    return body(*dev);
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}
}  // namespace

nvmlReturn_t DeviceGetIndex(nvmlDevice_t device, unsigned int* index) noexcept {
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return IdentityCall(device, [&](Device& dev) {
    *index = dev.spec->index;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) noexcept {
  return IdentityCall(device,
                      [&](Device& dev) { return CopyString(dev.spec->uuid, uuid, length); });
}

nvmlReturn_t DeviceGetName(nvmlDevice_t device, char* name, unsigned int length) noexcept {
  return IdentityCall(device,
                      [&](Device& dev) { return CopyString(dev.spec->name, name, length); });
}

nvmlReturn_t DeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) noexcept {
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return IdentityCall(device, [&](Device& dev) {
    *pci = nvmlPciInfo_t{};
    const std::string& bus_id = dev.spec->pci_bus_id;
    std::snprintf(pci->busId, sizeof(pci->busId), "%s", bus_id.c_str());
    // Legacy form: 4-digit domain, e.g. "0000:18:00.0".
    std::string legacy = bus_id.size() > 4 ? bus_id.substr(4) : bus_id;
    std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%s", legacy.c_str());
    unsigned int domain = 0, bus = 0, dev_no = 0, fn = 0;
    if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev_no, &fn) == 4) {
      pci->domain = domain;
      pci->bus = bus;
      pci->device = dev_no;
    }
    pci->pciDeviceId = dev.spec->pci_device_id;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetSerial(nvmlDevice_t device, char* serial, unsigned int length) noexcept {
  return DeviceCall(device, Field::kSerial, [&](Sim&, Device& dev, double) {
    return CopyString(dev.spec->serial, serial, length);
  });
}

nvmlReturn_t DeviceGetMemoryInfoV2(nvmlDevice_t device, nvmlMemory_v2_t* memory) noexcept {
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  return DeviceCall(device, Field::kMemory, [&](Sim& sim, Device& dev, double t) {
    const GpuSpec& g = *dev.spec;
    uint64_t used = Reading(sim, dev, t).memory_used_bytes;
    memory->total = g.memory_total_bytes;
    memory->reserved = g.memory_reserved_bytes;
    memory->used = used;
    memory->free = g.memory_total_bytes - g.memory_reserved_bytes - used;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) noexcept {
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kMemory, [&](Sim& sim, Device& dev, double t) {
    const GpuSpec& g = *dev.spec;
    // The v1 structure has no `reserved`: NVML counts reserved memory as used there.
    uint64_t used = Reading(sim, dev, t).memory_used_bytes + g.memory_reserved_bytes;
    memory->total = g.memory_total_bytes;
    memory->used = used;
    memory->free = g.memory_total_bytes - used;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetUtilizationRates(nvmlDevice_t device,
                                       nvmlUtilization_t* utilization) noexcept {
  if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kUtilization, [&](Sim& sim, Device& dev, double t) {
    GpuReading r = Reading(sim, dev, t);
    utilization->gpu = r.gpu_util;
    utilization->memory = r.mem_util;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                  unsigned int* temp) noexcept {
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  return ReadUint(device, Field::kTemperature, temp,
                  [](const Sim& s, Device& d, double t) { return Reading(s, d, t).temperature_c; });
}

nvmlReturn_t DeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power_mw) noexcept {
  return ReadUint(device, Field::kPower, power_mw,
                  [](const Sim&, Device& d, double t) { return PowerMwAt(*d.spec, t); });
}

nvmlReturn_t DeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit_mw) noexcept {
  return ReadUint(device, Field::kPowerLimit, limit_mw,
                  [](const Sim&, Device& d, double) { return d.spec->power_limit_mw; });
}

nvmlReturn_t DeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                             unsigned long long* energy_mj) noexcept {
  if (energy_mj == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kEnergy, [&](Sim&, Device& dev, double t) {
    *energy_mj = EnergyAt(*dev.spec, t, &dev.energy);
    return NVML_SUCCESS;
  });
}

namespace {
// The graphics clock follows SM; video runs at 90% of it.
nvmlReturn_t PickClock(nvmlClockType_t type, unsigned int sm, unsigned int mem, unsigned int* mhz) {
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM: *mhz = sm; return NVML_SUCCESS;
    case NVML_CLOCK_MEM: *mhz = mem; return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO: *mhz = sm * 9 / 10; return NVML_SUCCESS;
  }
  return NVML_ERROR_INVALID_ARGUMENT;
}
}  // namespace

nvmlReturn_t DeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                unsigned int* mhz) noexcept {
  if (mhz == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kClocks, [&](Sim& sim, Device& dev, double t) {
    const GpuReading& r = Reading(sim, dev, t);
    return PickClock(type, r.sm_clock_mhz, r.mem_clock_mhz, mhz);
  });
}

nvmlReturn_t DeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                   unsigned int* mhz) noexcept {
  if (mhz == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kMaxClocks, [&](Sim&, Device& dev, double) {
    return PickClock(type, dev.spec->max_sm_clock_mhz, dev.spec->max_mem_clock_mhz, mhz);
  });
}

nvmlReturn_t DeviceGetNumGpuCores(nvmlDevice_t device, unsigned int* cores) noexcept {
  if (cores == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kCores, [&](Sim&, Device& dev, double) {
    if (dev.spec->cores == 0) return NVML_ERROR_NOT_SUPPORTED;
    *cores = dev.spec->cores;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                     unsigned int* kb_per_s) noexcept {
  if (kb_per_s == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kPcie, [&](Sim& sim, Device& dev, double t) {
    GpuReading r = Reading(sim, dev, t);
    if (counter == NVML_PCIE_UTIL_RX_BYTES) {
      *kb_per_s = r.pcie_rx_kb_per_s;
    } else if (counter == NVML_PCIE_UTIL_TX_BYTES) {
      *kb_per_s = r.pcie_tx_kb_per_s;
    } else {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
  });
}

// Field values: only NVML_FI_DEV_MEMORY_TEMP is simulated (the GPU's temperature + 6 °C, as HBM
// runs hotter than the die's sensor); other ids, or a GPU whose memory temperature is
// unsupported, get NOT_SUPPORTED in the field's own code, as real NVML does.
nvmlReturn_t DeviceGetFieldValues(nvmlDevice_t device, int count,
                                  nvmlFieldValue_t* values) noexcept {
  if (count < 0 || (count > 0 && values == nullptr)) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kMemoryTemperature, [&](Sim& sim, Device& dev, double t) {
    for (int i = 0; i < count; ++i) {
      nvmlFieldValue_t& v = values[i];
      v.timestamp = static_cast<long long>(sim.TimestampUs(t));
      v.latencyUsec = 0;
      if (v.fieldId == NVML_FI_DEV_MEMORY_TEMP) {
        v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v.value.uiVal = Reading(sim, dev, t).temperature_c + 6;
        v.nvmlReturn = NVML_SUCCESS;
      } else {
        v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      }
    }
    return NVML_SUCCESS;
  });
}

namespace {
// NVENC / NVDEC utilisation from the scenario's load (0 without one), over a 167 ms window.
nvmlReturn_t CodecUtilization(nvmlDevice_t device, unsigned int* percent,
                              unsigned int* sampling_period_us,
                              std::optional<Load> GpuSpec::*load) {
  if (percent == nullptr || sampling_period_us == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kCodec, [&](Sim&, Device& dev, double t) {
    const std::optional<Load>& l = dev.spec->*load;
    *percent = l ? static_cast<unsigned int>(std::lround(std::clamp(l->At(t), 0.0, 100.0))) : 0;
    *sampling_period_us = 167000;
    return NVML_SUCCESS;
  });
}
}  // namespace

nvmlReturn_t DeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int* percent,
                                         unsigned int* sampling_period_us) noexcept {
  return CodecUtilization(device, percent, sampling_period_us, &GpuSpec::encoder_utilization);
}

nvmlReturn_t DeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int* percent,
                                         unsigned int* sampling_period_us) noexcept {
  return CodecUtilization(device, percent, sampling_period_us, &GpuSpec::decoder_utilization);
}

nvmlReturn_t DeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int* count) noexcept {
  return ReadUint(device, Field::kPcie, count, [](const Sim&, Device& d, double t) {
    // A flaky link: faults of kind "pcie_replay" would add here; a healthy one never retries.
    (void)d;
    (void)t;
    return 0u;
  });
}

nvmlReturn_t DeviceGetFanSpeed(nvmlDevice_t device, unsigned int* percent) noexcept {
  if (percent == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kFan, [&](Sim& sim, Device& dev, double t) {
    if (!dev.spec->has_fan) return NVML_ERROR_NOT_SUPPORTED;  // passively cooled
    *percent = Reading(sim, dev, t).fan_percent;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* state) noexcept {
  if (state == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kPerformanceState, [&](Sim& sim, Device& dev, double t) {
    *state = static_cast<nvmlPstates_t>(Reading(sim, dev, t).pstate);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) noexcept {
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kComputeMode, [&](Sim&, Device& dev, double) {
    const std::string& m = dev.spec->compute_mode;
    *mode = m == "exclusive_process" ? NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
            : m == "prohibited"      ? NVML_COMPUTEMODE_PROHIBITED
                                     : NVML_COMPUTEMODE_DEFAULT;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                              unsigned int* pending) noexcept {
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kMig, [&](Sim&, Device& dev, double) {
    *current = *pending = dev.spec->mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t error_type,
                                     nvmlEccCounterType_t counter_type,
                                     unsigned long long* count) noexcept {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kEcc, [&](Sim& sim, Device& dev, double t) {
    // Each XID 48 (double-bit ECC) fault that has happened counts as one uncorrected error.
    unsigned long long n = 0;
    if (error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED) {
      for (const Fault& f : sim.scenario.faults) {
        if (f.kind == FaultKind::kXid && f.xid == 48 && f.gpu == dev.spec->index && t >= f.at_s)
          ++n;
      }
    }
    (void)counter_type;
    *count = n;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceGetClocksEventReasons(nvmlDevice_t device,
                                         unsigned long long* reasons) noexcept {
  if (reasons == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kClockReasons, [&](Sim& sim, Device& dev, double t) {
    *reasons = Reading(sim, dev, t).clock_reasons;
    return NVML_SUCCESS;
  });
}

// The driver's buffered samples (nvmlDeviceGetSamples): utilisation is sampled at 6 Hz, at
// scenario times k/6 s, and the newest kSampleBuffer are kept (20 s), as a driver's ring buffer
// would. Each value is the scenario's load at that instant, so the samples are a pure function of
// scenario time. Returns the samples newer than `last_seen_us`, oldest first; with a buffer too
// small, as many as fit (the oldest), so that the caller picks up the rest next time.
nvmlReturn_t DeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                              unsigned long long last_seen_us, nvmlValueType_t* value_type,
                              unsigned int* count, nvmlSample_t* samples) noexcept {
  if (count == nullptr || value_type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kUtilization, [&](Sim& sim, Device& dev, double t) {
    if (type != NVML_GPU_UTILIZATION_SAMPLES && type != NVML_MEMORY_UTILIZATION_SAMPLES) {
      return NVML_ERROR_NOT_SUPPORTED;
    }
    if (dev.spec->mig_enabled) return NVML_ERROR_NOT_SUPPORTED;  // as on real MIG GPUs
    constexpr double kRateHz = 6;
    constexpr int64_t kSampleBuffer = 120;
    const GpuSpec& g = *dev.spec;
    const int64_t newest = static_cast<int64_t>(std::floor(t * kRateHz + 1e-9));
    std::vector<nvmlSample_t> out;
    for (int64_t k = std::max<int64_t>(0, newest - kSampleBuffer + 1); k <= newest; ++k) {
      const double at = static_cast<double>(k) / kRateHz;
      const unsigned long long ts = sim.TimestampUs(at);
      if (ts <= last_seen_us) continue;
      const double util = std::clamp(g.utilization.At(at), 0.0, 100.0);
      double v = util;
      if (type == NVML_MEMORY_UTILIZATION_SAMPLES) {
        v = std::clamp(g.memory_utilization ? g.memory_utilization->At(at) : util * 0.6, 0.0,
                       100.0);
      }
      nvmlSample_t s{};
      s.timeStamp = ts;
      s.sampleValue.uiVal = static_cast<unsigned int>(std::lround(v));
      out.push_back(s);
    }
    *value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (out.empty()) return NVML_ERROR_NOT_FOUND;
    if (samples == nullptr) {  // the size query
      *count = static_cast<unsigned int>(out.size());
      return NVML_SUCCESS;
    }
    const size_t n = std::min<size_t>(*count, out.size());
    std::copy(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), samples);
    *count = static_cast<unsigned int>(n);
    return NVML_SUCCESS;
  });
}

}  // namespace flyt::sim::api
