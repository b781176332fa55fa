// The simulated NVML's process entry points (see sim_nvml_internal.h): the running-process lists
// (_v3, _v2 and unversioned, compute and graphics) and per-process utilisation samples, from the
// scenario's processes.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "sim/sim_nvml.h"
#include "sim/sim_nvml_internal.h"

namespace flyt::sim::api {
namespace {

// The record some early R535 drivers wrote through the _v3 process queries.
struct ProcessInfoStride32 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
};
static_assert(sizeof(ProcessInfoStride32) == 32);

template <typename Info>
nvmlReturn_t RunningProcesses(nvmlDevice_t device, unsigned int* count, Info* infos,
                              ProcessKind kind) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kProcesses, [&](Sim& sim, Device& dev, double t) {
    std::vector<const ProcessSpec*> running;
    for (size_t i : sim.scenario.processes_by_gpu[dev.spec->index]) {
      const ProcessSpec& p = sim.scenario.processes[i];
      if (p.kind == kind && p.Active(t)) running.push_back(&p);
    }
    const unsigned int capacity = *count;
    *count = static_cast<unsigned int>(running.size());
    if (running.empty()) return NVML_SUCCESS;
    if (capacity < running.size()) return NVML_ERROR_INSUFFICIENT_SIZE;
    if (infos == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    for (size_t i = 0; i < running.size(); ++i) {
      Info info{};
      info.pid = running[i]->pid;
      info.usedGpuMemory = running[i]->memory_bytes;
      if constexpr (!std::is_same_v<Info, nvmlProcessInfo_v1_t>) {
        info.gpuInstanceId = kNvmlInstanceIdNone;
        info.computeInstanceId = kNvmlInstanceIdNone;
      }
      infos[i] = info;
    }
    return NVML_SUCCESS;
  });
}

}  // namespace

// The _v3 entry points. With the scenario quirk "process_info_v3_stride_32" they behave like some
// early R535 drivers: each record written is 32 bytes (an extra 8-byte field at the end), not the
// documented 24.
namespace {
nvmlReturn_t RunningProcessesV3(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos,
                                ProcessKind kind) {
  if (Instance().scenario.quirk_process_v3_stride_32) {
    return RunningProcesses(device, count, reinterpret_cast<ProcessInfoStride32*>(infos), kind);
  }
  return RunningProcesses(device, count, infos, kind);
}
}  // namespace

nvmlReturn_t DeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                              nvmlProcessInfo_t* infos) noexcept {
  return RunningProcessesV3(device, count, infos, ProcessKind::kCompute);
}
nvmlReturn_t DeviceGetComputeRunningProcessesV2(nvmlDevice_t device, unsigned int* count,
                                                nvmlProcessInfo_t* infos) noexcept {
  return RunningProcesses(device, count, infos, ProcessKind::kCompute);
}
nvmlReturn_t DeviceGetGraphicsRunningProcessesV2(nvmlDevice_t device, unsigned int* count,
                                                 nvmlProcessInfo_t* infos) noexcept {
  return RunningProcesses(device, count, infos, ProcessKind::kGraphics);
}
nvmlReturn_t DeviceGetComputeRunningProcessesV1(nvmlDevice_t device, unsigned int* count,
                                                nvmlProcessInfo_v1_t* infos) noexcept {
  return RunningProcesses(device, count, infos, ProcessKind::kCompute);
}
nvmlReturn_t DeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                               nvmlProcessInfo_t* infos) noexcept {
  return RunningProcessesV3(device, count, infos, ProcessKind::kGraphics);
}
nvmlReturn_t DeviceGetGraphicsRunningProcessesV1(nvmlDevice_t device, unsigned int* count,
                                                 nvmlProcessInfo_v1_t* infos) noexcept {
  return RunningProcesses(device, count, infos, ProcessKind::kGraphics);
}

nvmlReturn_t DeviceGetProcessUtilization(nvmlDevice_t device,
                                         nvmlProcessUtilizationSample_t* samples,
                                         unsigned int* count,
                                         unsigned long long last_seen_us) noexcept {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kProcessUtilization, [&](Sim& sim, Device& dev, double t) {
    if (dev.spec->mig_enabled) return NVML_ERROR_NOT_SUPPORTED;  // as on real MIG GPUs
    // The driver samples once per scenario second; the newest sample is at floor(t).
    const double sample_t = std::floor(t);
    const unsigned long long ts = sim.TimestampUs(sample_t);
    std::vector<nvmlProcessUtilizationSample_t> out;
    if (ts > last_seen_us) {
      for (size_t i : sim.scenario.processes_by_gpu[dev.spec->index]) {
        const ProcessSpec& p = sim.scenario.processes[i];
        if (!p.Active(sample_t)) continue;
        ProcessReading r = ProcessReadingAt(sim.scenario, p, sample_t);
        if (r.sm_util == 0 && r.mem_util == 0) continue;  // NVML reports busy processes only
        nvmlProcessUtilizationSample_t s{};
        s.pid = p.pid;
        s.timeStamp = ts;
        s.smUtil = r.sm_util;
        s.memUtil = r.mem_util;
        out.push_back(s);
      }
    }
    if (out.empty()) return NVML_ERROR_NOT_FOUND;
    if (samples == nullptr || *count < out.size()) {
      *count = static_cast<unsigned int>(out.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::copy(out.begin(), out.end(), samples);
    *count = static_cast<unsigned int>(out.size());
    return NVML_SUCCESS;
  });
}

}  // namespace flyt::sim::api
