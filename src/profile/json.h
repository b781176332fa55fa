// JSON forms of profiles, shared by the node manager's API and heartbeats, the cluster manager,
// flytctl and the Kubernetes annotations, so that every consumer reads the same keys. Units are
// in the key names; timestamps are RFC 3339 UTC with milliseconds; absent values are null.
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "profile/profile.h"

namespace flyt::profile {

// The full profile (docs/api.md, "GPU profiles"):
// {"schema": 1, "index", "uuid", "name", "computed_at", "state", "state_since", "state_seconds",
//  "insufficient_data": null | "why",
//  "cycle": null | {"period_s", "confidence", "method", "cycles_in_window", "phase_origin",
//                   "util_peak_offset_s", "util_trough_offset_s", "memory_peak_offset_s",
//                   "memory_trough_offset_s", "next_util_trough_at"},
//  "allocated_idle": null | {"seconds", "memory_bytes", "processes": [process...]},
//  "windows": {"1m": {"length_s", "util_percent": null | {"p50","p95","p99","samples"},
//                     "memory_used_bytes": ..., "power_w": ...}, "15m": ..., "1h": ...},
//  "memory": {"total_bytes", "peak_used_bytes", "headroom_bytes", "peak_window_s"},
//  "processes": [{"pid", "name", "user", "memory_bytes"}],
//  "launches_per_second": null | x, "inputs": [...], "util_rate_hz",
//  "phase_changes": [{"at", "from", "to", "kind", "detail"}]}
nlohmann::json ToJson(const GpuProfile& profile);
nlohmann::json ToJson(const ProcessUse& process);
// The inverse, for the cluster manager (heartbeats) and flytctl. Unknown keys are ignored; a
// missing or mistyped required key (schema, index, uuid, state) or an unknown state is an error
// naming it; strings are bounded (a hostile node cannot grow the manager's memory).
Result<GpuProfile> ProfileFromJson(const nlohmann::json& j);

// What ProfileFromJson accepts at most: processes per list, phase changes, and bytes per string.
inline constexpr size_t kMaxJsonProcesses = 64;
inline constexpr size_t kMaxJsonPhaseChanges = 64;
inline constexpr size_t kMaxJsonText = 256;
// `profile` cut to what ProfileFromJson accepts (for heartbeats): the processes holding the most
// memory (kMaxJsonProcesses of each list), the newest phase changes, strings cut at a UTF-8
// character boundary. A profile within the bounds is returned as it is.
GpuProfile BoundedForTransport(GpuProfile profile);

// The short form each GPU of the node manager's GET /api/v1/gpus carries as "profile":
// {"state", "state_since", "state_seconds", "insufficient_data", "period_s": null|x,
//  "confidence": null|x, "allocated_idle_seconds": null|x, "headroom_bytes": null|x}
nlohmann::json SummaryJson(const GpuProfile& profile);

// The compact form for a Kubernetes node annotation (flyt.dev/gpu-<index>):
// {"v": 1, "uuid", "state", "since", "period_s": null|x, "confidence": null|x,
//  "util_p95": null|x (15 min window), "memory_peak_bytes", "headroom_bytes",
//  "processes": [{"pid", "name", "user", "memory_bytes"}] (at most 8, the most memory first)}
nlohmann::json AnnotationJson(const GpuProfile& profile);

}  // namespace flyt::profile
