// The JSON forms of the tracer's statistics, printed alike by the node manager's API
// (GET /api/v1/processes/{pid}/cuda, /api/v1/trace) and the flyt-trace program. Keys are stats.h's
// field names; time points are RFC 3339 UTC strings; an absent exit code is null; launch shapes
// are {grid:[x,y,z], block:[x,y,z], shared_bytes, launches}. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "trace/stats.h"

namespace flyt::trace {

nlohmann::json ToJson(const CopyBytes& copies);
nlohmann::json ToJson(const KernelStats& kernel);
nlohmann::json ToJson(const StreamStats& stream);
nlohmann::json ToJson(const ProcessCuda& process);
nlohmann::json ToJson(const TracerHealth& health);

// What a node's heartbeat carries per traced process × GPU (the caller bounds how many): pid,
// comm, gpu_uuid, remote, launches, launches_per_second, device_memory_bytes,
// device_memory_peak_bytes, leaked_bytes, busy_seconds, core_usage, exited.
nlohmann::json SummaryToJson(const ProcessCuda& process);

}  // namespace flyt::trace
