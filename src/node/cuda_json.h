// The JSON form of the CUDA tracer's statistics (trace/stats.h) as the node manager's API, its
// heartbeats and flytctl show them: ToJson(ProcessCuda), ToJson(TracerHealth), and the short
// per-process summary a heartbeat carries (CudaSummaryJson).
//
// Keys are the stats.h field names; time points are RFC 3339 strings; a launch shape is
// {grid:[x,y,z], block:[x,y,z], shared_bytes, launches}; copies an object of CopyBytes' fields;
// failures an object name → count; exit_code null when absent. This file stands in for
// trace/json.h (same functions, same shape) until that lands: swap the include and drop this
// file. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "trace/stats.h"

namespace flyt::node {

nlohmann::json ToJson(const trace::ProcessCuda& p);
nlohmann::json ToJson(const trace::TracerHealth& h);

// What a heartbeat carries per traced process × GPU (bounded by the caller): pid, comm,
// gpu_uuid, remote, launches, launches_per_second, device_memory_bytes,
// device_memory_peak_bytes, leaked_bytes, busy_seconds, core_usage, exited.
nlohmann::json CudaSummaryJson(const trace::ProcessCuda& p);

}  // namespace flyt::node
