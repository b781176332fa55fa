// flyt's simulated NVML: the implementations behind the NVML C functions that the simulated
// library (libflyt-sim-nvml.so) exports. The exports themselves are expanded from
// FLYT_NVML_ENTRY_POINTS in sim_exports.cc, so the simulator offers exactly the functions and
// signatures the binding loads.
//
// State: like NVML itself (and like the CUDA runtime library, the one other exception to "no
// mutable globals"), a C API library has process-wide state; it lives in one lazily created
// object guarded by a mutex. Every function is noexcept and turns any failure into an NVML error
// code. Scenario time comes from, in order: $FLYT_SIM_CLOCK_FILE (a file holding seconds,
// re-read on every call, for tests in other processes), $FLYT_SIM_TIME (fixed seconds), else
// real time since the first nvmlInit × $FLYT_SIM_SPEED (default 1) + $FLYT_SIM_START (default 0).
#pragma once

#include "nvml/nvml_functions.h"

namespace flyt::sim::api {

#define FLYT_SIM_DECLARE(member, req, ret, params, args, ...) ret member params noexcept;
FLYT_NVML_ENTRY_POINTS(FLYT_SIM_DECLARE)
#undef FLYT_SIM_DECLARE

// The scenario file being played (empty before the first successful nvmlInit).
const char* ScenarioPath() noexcept;

}  // namespace flyt::sim::api
