// The Prometheus text exposition (format 0.0.4) that flyt-node-manager serves at /metrics.
//
// Per-GPU series use dcgm-exporter's names, units and labels, so dashboards and alerts written for
// it work unchanged; flyt's own series follow Prometheus naming (base units, _total counters).
// The CUDA tracer's series are flyt_cuda_* (per process × GPU, labelled gpu, UUID, cuda_device,
// pid, comm, container) and flyt_cuda_tracer_* (its health).
// The usage profiles' series (flyt_gpu_state, flyt_gpu_cycle_*, flyt_gpu_*_quantile*, ...) carry
// the per-GPU label set of the dcgm-exporter series, plus state / window / quantile.
// Every family has HELP and TYPE lines; a reading that is absent is not emitted (never as 0); a
// lost GPU has no reading series, only flyt_gpu_lost 1 (and flyt_gpu_state{state="lost"} 1). Rendering only formats values the Monitor
// already has: it never calls NVML. Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "gpu/monitor.h"
#include "gpu/types.h"
#include "profile/profile.h"
#include "trace/stats.h"

namespace flyt::node {

struct MetricsInput {
  const gpu::GpuSnapshot* snapshot = nullptr;  // null before the first sample
  std::map<uint32_t, gpu::EventCounts> events;
  bool events_supported = false;
  gpu::MonitorStats stats;
  std::string hostname;
  std::string node_name;
  std::string version;
  uint64_t scrapes = 0;
  // The CUDA tracer (flyt_cuda_*): its health (null: no tracer families at all) and its
  // processes. Per-process series are bounded by [trace] max_processes, kernel series by
  // top_kernels (+ "other").
  const trace::TracerHealth* cuda_health = nullptr;
  const std::vector<trace::ProcessCuda>* cuda_processes = nullptr;
  // The usage profiles (null: [profile] is off, no profile families) and the phase changes seen
  // per GPU UUID. Profiles of GPUs not in the snapshot are not rendered.
  const std::vector<profile::GpuProfile>* profiles = nullptr;
  const std::map<std::string, uint64_t>* phase_changes = nullptr;
};

std::string RenderMetrics(const MetricsInput& in);

// Escapes a label value for the text format (backslash, double quote, newline).
std::string EscapeLabelValue(std::string_view value);

}  // namespace flyt::node
