// The exported C symbols of the simulated NVML library: every name of every entry point in
// FLYT_NVML_ENTRY_POINTS, each forwarding to flyt::sim::api::<member>. The legacy variant of the
// library hides the newer names with a linker version script (legacy.map), like an old driver.
#include "sim/sim_nvml.h"

#define FLYT_SIM_UNPAREN(...) __VA_ARGS__
#define FLYT_SIM_EXPORT_ONE(ctx, sym) FLYT_SIM_EXPORT_I(sym, FLYT_SIM_UNPAREN ctx)
#define FLYT_SIM_EXPORT_I(...) FLYT_SIM_EXPORT_II(__VA_ARGS__)
#define FLYT_SIM_EXPORT_II(sym, member, ret, params, args)                    \
  extern "C" __attribute__((visibility("default"))) ret sym params noexcept { \
    return flyt::sim::api::member args;                                       \
  }
#define FLYT_SIM_ENTRY(member, req, ret, params, args, ...) \
  FLYT_NVML_FOR_EACH_NAME(FLYT_SIM_EXPORT_ONE, (member, ret, params, args), __VA_ARGS__)

FLYT_NVML_ENTRY_POINTS(FLYT_SIM_ENTRY)

// Tells a loader that these GPUs are simulated, and which scenario plays; real NVML has no such
// symbol.
extern "C" __attribute__((visibility("default"))) const char* flytSimScenarioPath() noexcept {
  return flyt::sim::api::ScenarioPath();
}
