// JSON forms of the device model, shared by `flytctl --json` and the HTTP APIs, so that every
// consumer sees the same field names. Absent readings are JSON null (never 0). Units are in the
// key names. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "common/json.h"
#include "common/status.h"
#include "gpu/history.h"
#include "gpu/monitor.h"
#include "gpu/score.h"
#include "gpu/types.h"

namespace flyt::gpu {

nlohmann::json ToJson(const ProcessInfo& process);
nlohmann::json ToJson(const GpuInfo& gpu);
nlohmann::json ToJson(const GpuSnapshot& snapshot);
nlohmann::json ToJson(const GpuEvent& event);
nlohmann::json ToJson(const HistoryPoint& point);
nlohmann::json ToJson(const ScoredGpu& scored);
// The LLM autotuner's monitoring structure: {monitoring_duration_seconds, sample_count,
// gpu_stats: {"<index>": {name, utilization{min,max,mean,samples,p50,p95,p99}, memory_used_mb,
// memory_usage_percent, temperature_c, power_draw_w}}}.
nlohmann::json ToJson(const SessionStats& stats);

// The inverse of ToJson, for clients of the API (flytctl --node). Unknown keys are ignored;
// a missing or wrongly typed required key (index, uuid, name, pid) is an error naming it.
Result<GpuSnapshot> SnapshotFromJson(const nlohmann::json& j);
Result<SessionStats> SessionStatsFromJson(const nlohmann::json& j);

// Serialises for output (common/json.h): text from /proc need not be valid UTF-8.
using ::flyt::DumpJson;

// RFC 3339 UTC with milliseconds: "2026-01-01T00:00:00.000Z".
std::string FormatTime(std::chrono::system_clock::time_point t);

}  // namespace flyt::gpu
