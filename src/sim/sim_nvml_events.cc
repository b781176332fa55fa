// The simulated NVML's event entry points (see sim_nvml_internal.h): event sets, registering a
// GPU's events, and delivering the scenario's XID faults (XID 48 as a double-bit ECC error) to a
// waiting nvmlEventSetWait.
#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "sim/sim_nvml.h"
#include "sim/sim_nvml_internal.h"

namespace flyt::sim::api {

nvmlReturn_t EventSetCreate(nvmlEventSet_t* set) noexcept {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  try {
    Sim& sim = Instance();
    std::scoped_lock lock(sim.mu);
    if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
    sim.event_sets.push_back(std::make_unique<EventSet>());
    *set = reinterpret_cast<nvmlEventSet_t>(sim.event_sets.back().get());
    return NVML_SUCCESS;
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

namespace {
EventSet* FindSet(Sim& sim, nvmlEventSet_t set) {
  for (auto& s : sim.event_sets) {
    if (reinterpret_cast<nvmlEventSet_t>(s.get()) == set) return s.get();
  }
  return nullptr;
}
constexpr unsigned long long kSimEventTypes =
    nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeSingleBitEccError;
}  // namespace

nvmlReturn_t DeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* types) noexcept {
  if (types == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return DeviceCall(device, Field::kEvents, [&](Sim&, Device&, double) {
    *types = kSimEventTypes;
    return NVML_SUCCESS;
  });
}

nvmlReturn_t DeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                  nvmlEventSet_t set) noexcept {
  return DeviceCall(device, Field::kEvents, [&](Sim& sim, Device& dev, double) {
    EventSet* s = FindSet(sim, set);
    if (s == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if ((types & ~kSimEventTypes) != 0) return NVML_ERROR_NOT_SUPPORTED;
    s->mask |= types;
    s->devices.insert(dev.spec->index);
    return NVML_SUCCESS;
  });
}

nvmlReturn_t EventSetWait(nvmlEventSet_t set, nvmlEventData_t* data,
                          unsigned int timeout_ms) noexcept {
  if (data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  try {
    Sim& sim = Instance();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      {
        std::scoped_lock lock(sim.mu);
        if (sim.init_count == 0) return NVML_ERROR_UNINITIALIZED;
        EventSet* s = FindSet(sim, set);
        if (s == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        double t = sim.Now();
        // The earliest undelivered XID fault that has happened on a registered GPU.
        size_t best = sim.scenario.faults.size();
        for (size_t i = 0; i < sim.scenario.faults.size(); ++i) {
          const Fault& f = sim.scenario.faults[i];
          if (f.kind != FaultKind::kXid || f.at_s > t || s->delivered.count(i) != 0) continue;
          if (s->devices.count(f.gpu) == 0) continue;
          unsigned long long type =
              f.xid == 48 ? nvmlEventTypeDoubleBitEccError : nvmlEventTypeXidCriticalError;
          if ((s->mask & type) == 0) continue;
          if (best == sim.scenario.faults.size() || f.at_s < sim.scenario.faults[best].at_s)
            best = i;
        }
        if (best < sim.scenario.faults.size()) {
          const Fault& f = sim.scenario.faults[best];
          s->delivered.insert(best);
          *data = nvmlEventData_t{};
          data->device = reinterpret_cast<nvmlDevice_t>(&sim.devices[f.gpu]);
          data->eventType =
              f.xid == 48 ? nvmlEventTypeDoubleBitEccError : nvmlEventTypeXidCriticalError;
          data->eventData = f.xid;
          data->gpuInstanceId = kNvmlInstanceIdNone;
          data->computeInstanceId = kNvmlInstanceIdNone;
          return NVML_SUCCESS;
        }
      }
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return NVML_ERROR_TIMEOUT;
      // Sleep until the next XID is due (real or fixed time: predictable), or poll every 20 ms
      // when a clock file can move time at any moment. Like real NVML, an idle wait costs
      // (almost) no CPU.
      std::chrono::steady_clock::duration nap = deadline - now;
      {
        std::scoped_lock lock(sim.mu);
        if (!sim.time.clock_file.empty()) {
          nap = std::min<std::chrono::steady_clock::duration>(nap, std::chrono::milliseconds(20));
        } else if (!sim.time.fixed && sim.time.speed > 0) {
          double t = sim.Now();
          for (const Fault& f : sim.scenario.faults) {
            if (f.kind != FaultKind::kXid || f.at_s <= t) continue;
            auto due = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>((f.at_s - t) / sim.time.speed));
            nap = std::min(nap, due + std::chrono::milliseconds(1));
          }
        }
      }
      std::this_thread::sleep_for(nap);
    }
  } catch (...) {
    return NVML_ERROR_UNKNOWN;
  }
}

nvmlReturn_t EventSetFree(nvmlEventSet_t set) noexcept {
  Sim& sim = Instance();
  std::scoped_lock lock(sim.mu);
  auto it = std::find_if(sim.event_sets.begin(), sim.event_sets.end(), [&](const auto& s) {
    return reinterpret_cast<nvmlEventSet_t>(s.get()) == set;
  });
  if (it == sim.event_sets.end()) return NVML_ERROR_INVALID_ARGUMENT;
  sim.event_sets.erase(it);
  return NVML_SUCCESS;
}

}  // namespace flyt::sim::api
