#include "gpu/json.h"

#include <cmath>
#include <ctime>

namespace flyt::gpu {
namespace {

using nlohmann::json;

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json Float(float v) { return std::isnan(v) ? json(nullptr) : json(v); }

json Metric(const std::optional<MetricStats>& m) {
  if (!m) return nullptr;
  return {{"min", m->min}, {"max", m->max}, {"mean", m->mean}, {"samples", m->samples},
          {"p50", m->p50}, {"p95", m->p95}, {"p99", m->p99}};
}

const char* ProcessTypeName(ProcessType t) {
  switch (t) {
    case ProcessType::kCompute:
      return "compute";
    case ProcessType::kGraphics:
      return "graphics";
    case ProcessType::kComputeAndGraphics:
      return "compute+graphics";
  }
  return "compute";
}

}  // namespace

std::string DumpJson(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string FormatTime(std::chrono::system_clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

json ToJson(const ProcessInfo& p) {
  return {{"pid", p.pid},
          {"type", ProcessTypeName(p.type)},
          {"used_memory_bytes", Opt(p.used_memory_bytes)},
          {"name", Opt(p.name)},
          {"command", Opt(p.command)},
          {"user", Opt(p.user)},
          {"container_id", Opt(p.container_id)},
          {"sm_util_percent", Opt(p.sm_util_percent)},
          {"memory_util_percent", Opt(p.memory_util_percent)},
          {"encoder_util_percent", Opt(p.encoder_util_percent)},
          {"decoder_util_percent", Opt(p.decoder_util_percent)},
          {"util_sample_timestamp_us", Opt(p.util_sample_timestamp_us)},
          {"gpu_instance_id", Opt(p.gpu_instance_id)},
          {"compute_instance_id", Opt(p.compute_instance_id)}};
}

json ToJson(const GpuInfo& g) {
  json procs = json::array();
  for (const ProcessInfo& p : g.processes) procs.push_back(ToJson(p));
  json reasons = nullptr;
  if (g.clock_event_reasons) reasons = ClockEventReasonNames(*g.clock_event_reasons);
  return {{"index", g.index},
          {"uuid", g.uuid},
          {"name", g.name},
          {"pci_bus_id", g.pci_bus_id},
          {"serial", Opt(g.serial)},
          {"lost", g.lost},
          {"memory_total_bytes", Opt(g.memory_total_bytes)},
          {"memory_used_bytes", Opt(g.memory_used_bytes)},
          {"memory_free_bytes", Opt(g.memory_free_bytes)},
          {"memory_reserved_bytes", Opt(g.memory_reserved_bytes)},
          {"memory_usage_percent", Opt(g.MemoryUsagePercent())},
          {"gpu_util_percent", Opt(g.gpu_util_percent)},
          {"memory_util_percent", Opt(g.memory_util_percent)},
          {"temperature_c", Opt(g.temperature_c)},
          {"power_draw_mw", Opt(g.power_draw_mw)},
          {"power_limit_mw", Opt(g.power_limit_mw)},
          {"energy_mj", Opt(g.energy_mj)},
          {"sm_clock_mhz", Opt(g.sm_clock_mhz)},
          {"memory_clock_mhz", Opt(g.memory_clock_mhz)},
          {"max_sm_clock_mhz", Opt(g.max_sm_clock_mhz)},
          {"max_memory_clock_mhz", Opt(g.max_memory_clock_mhz)},
          {"pcie_rx_kb_per_s", Opt(g.pcie_rx_kb_per_s)},
          {"pcie_tx_kb_per_s", Opt(g.pcie_tx_kb_per_s)},
          {"pcie_replay_count", Opt(g.pcie_replay_count)},
          {"encoder_util_percent", Opt(g.encoder_util_percent)},
          {"decoder_util_percent", Opt(g.decoder_util_percent)},
          {"fan_speed_percent", Opt(g.fan_speed_percent)},
          {"performance_state", Opt(g.performance_state)},
          {"compute_mode", Opt(g.compute_mode)},
          {"mig_enabled", Opt(g.mig_enabled)},
          {"mig_pending", Opt(g.mig_pending)},
          {"ecc_errors",
           {{"volatile_corrected", Opt(g.ecc.volatile_corrected)},
            {"volatile_uncorrected", Opt(g.ecc.volatile_uncorrected)},
            {"aggregate_corrected", Opt(g.ecc.aggregate_corrected)},
            {"aggregate_uncorrected", Opt(g.ecc.aggregate_uncorrected)}}},
          {"clock_event_reasons", reasons},
          {"processes", procs}};
}

json ToJson(const GpuSnapshot& s) {
  json gpus = json::array();
  for (const GpuInfo& g : s.gpus) gpus.push_back(ToJson(g));
  return {{"taken_at", FormatTime(s.taken_at)},
          {"source", SourceName(s.source)},
          {"reason", s.reason.empty() ? json(nullptr) : json(s.reason)},
          {"driver_version", Opt(s.driver_version)},
          {"cuda_driver_version", Opt(s.cuda_driver_version)},
          {"nvml_version", Opt(s.nvml_version)},
          {"simulated_scenario", Opt(s.simulated_scenario)},
          {"gpus", gpus}};
}

json ToJson(const GpuEvent& e) {
  return {{"at", FormatTime(e.at)},        {"gpu", e.gpu_index}, {"uuid", e.gpu_uuid},
          {"type", EventTypeName(e.type)}, {"xid", Opt(e.xid)},  {"description", e.description}};
}

json ToJson(const HistoryPoint& p) {
  return {{"t_ms", p.t_ms},
          {"gpu_util_percent", Float(p.gpu_util_percent)},
          {"memory_util_percent", Float(p.memory_util_percent)},
          {"memory_used_mib", Float(p.memory_used_mib)},
          {"temperature_c", Float(p.temperature_c)},
          {"power_draw_w", Float(p.power_draw_w)},
          {"sm_clock_mhz", Float(p.sm_clock_mhz)}};
}

json ToJson(const ScoredGpu& s) {
  json j = ToJson(s.gpu);
  j["score"] = s.score;
  return j;
}

json ToJson(const SessionStats& stats) {
  json gpus = json::object();
  for (const auto& [index, g] : stats.gpu_stats) {
    gpus[std::to_string(index)] = {{"name", g.name},
                                   {"utilization", Metric(g.utilization)},
                                   {"memory_used_mb", Metric(g.memory_used_mb)},
                                   {"memory_usage_percent", Metric(g.memory_usage_percent)},
                                   {"temperature_c", Metric(g.temperature_c)},
                                   {"power_draw_w", Metric(g.power_draw_w)}};
  }
  return {{"id", stats.id},
          {"monitoring_duration_seconds", stats.monitoring_duration_seconds},
          {"sample_count", stats.sample_count},
          {"gpu_stats", gpus}};
}

}  // namespace flyt::gpu
