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

// History keeps floats; printed as doubles they show float noise (661.760009765625), so they are
// rounded to 3 decimals, within a float's precision for these magnitudes.
json Float(float v) {
  if (std::isnan(v)) return nullptr;
  return std::round(static_cast<double>(v) * 1000.0) / 1000.0;
}

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

std::string FormatTime(std::chrono::system_clock::time_point t) { return FormatTimeRfc3339(t); }

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
          {"cores", Opt(g.cores)},
          {"lost", g.lost},
          {"memory_total_bytes", Opt(g.memory_total_bytes)},
          {"memory_used_bytes", Opt(g.memory_used_bytes)},
          {"memory_free_bytes", Opt(g.memory_free_bytes)},
          {"memory_reserved_bytes", Opt(g.memory_reserved_bytes)},
          {"memory_usage_percent", Opt(g.MemoryUsagePercent())},
          {"gpu_util_percent", Opt(g.gpu_util_percent)},
          {"memory_util_percent", Opt(g.memory_util_percent)},
          {"temperature_c", Opt(g.temperature_c)},
          {"memory_temperature_c", Opt(g.memory_temperature_c)},
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

namespace {

template <typename T>
void Get(const json& j, const char* key, std::optional<T>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) out = it->get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (it->is_boolean()) out = it->get<bool>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (it->is_number()) out = it->get<T>();
  } else {
    if (it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0)) {
      out = it->get<T>();
    }
  }
}

std::string StringOr(const json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

double DoubleOr(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

uint64_t CountOr(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

Result<ProcessInfo> ProcessFromJson(const json& j) {
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_unsigned()) {
    return InvalidArgument("process: 'pid' is missing or not a non-negative integer");
  }
  ProcessInfo p;
  p.pid = j["pid"].get<uint32_t>();
  std::string type = StringOr(j, "type", "compute");
  p.type = type == "graphics"           ? ProcessType::kGraphics
           : type == "compute+graphics" ? ProcessType::kComputeAndGraphics
                                        : ProcessType::kCompute;
  Get(j, "used_memory_bytes", p.used_memory_bytes);
  Get(j, "name", p.name);
  Get(j, "command", p.command);
  Get(j, "user", p.user);
  Get(j, "container_id", p.container_id);
  Get(j, "sm_util_percent", p.sm_util_percent);
  Get(j, "memory_util_percent", p.memory_util_percent);
  Get(j, "encoder_util_percent", p.encoder_util_percent);
  Get(j, "decoder_util_percent", p.decoder_util_percent);
  Get(j, "util_sample_timestamp_us", p.util_sample_timestamp_us);
  Get(j, "gpu_instance_id", p.gpu_instance_id);
  Get(j, "compute_instance_id", p.compute_instance_id);
  return p;
}

Result<GpuInfo> GpuFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("gpu: expected an object");
  if (!j.contains("index") || !j["index"].is_number_unsigned()) {
    return InvalidArgument("gpu: 'index' is missing or not a non-negative integer");
  }
  for (const char* key : {"uuid", "name"}) {
    if (!j.contains(key) || !j[key].is_string()) {
      return InvalidArgument(std::string("gpu: '") + key + "' is missing or not a string");
    }
  }
  GpuInfo g;
  g.index = j["index"].get<uint32_t>();
  g.uuid = j["uuid"].get<std::string>();
  g.name = j["name"].get<std::string>();
  g.pci_bus_id = StringOr(j, "pci_bus_id", "");
  g.lost = j.contains("lost") && j["lost"].is_boolean() && j["lost"].get<bool>();
  Get(j, "serial", g.serial);
  Get(j, "memory_total_bytes", g.memory_total_bytes);
  Get(j, "memory_used_bytes", g.memory_used_bytes);
  Get(j, "memory_free_bytes", g.memory_free_bytes);
  Get(j, "memory_reserved_bytes", g.memory_reserved_bytes);
  Get(j, "gpu_util_percent", g.gpu_util_percent);
  Get(j, "memory_util_percent", g.memory_util_percent);
  Get(j, "temperature_c", g.temperature_c);
  Get(j, "memory_temperature_c", g.memory_temperature_c);
  Get(j, "power_draw_mw", g.power_draw_mw);
  Get(j, "power_limit_mw", g.power_limit_mw);
  Get(j, "energy_mj", g.energy_mj);
  Get(j, "sm_clock_mhz", g.sm_clock_mhz);
  Get(j, "memory_clock_mhz", g.memory_clock_mhz);
  Get(j, "max_sm_clock_mhz", g.max_sm_clock_mhz);
  Get(j, "cores", g.cores);
  Get(j, "max_memory_clock_mhz", g.max_memory_clock_mhz);
  Get(j, "pcie_rx_kb_per_s", g.pcie_rx_kb_per_s);
  Get(j, "pcie_tx_kb_per_s", g.pcie_tx_kb_per_s);
  Get(j, "pcie_replay_count", g.pcie_replay_count);
  Get(j, "encoder_util_percent", g.encoder_util_percent);
  Get(j, "decoder_util_percent", g.decoder_util_percent);
  Get(j, "fan_speed_percent", g.fan_speed_percent);
  Get(j, "performance_state", g.performance_state);
  Get(j, "compute_mode", g.compute_mode);
  Get(j, "mig_enabled", g.mig_enabled);
  Get(j, "mig_pending", g.mig_pending);
  if (j.contains("processes") && j["processes"].is_array()) {
    for (const json& p : j["processes"]) {
      FLYT_ASSIGN_OR_RETURN(ProcessInfo process, ProcessFromJson(p));
      g.processes.push_back(std::move(process));
    }
  }
  return g;
}

std::optional<MetricStats> MetricFromJson(const json& j) {
  if (!j.is_object()) return std::nullopt;
  MetricStats m;
  m.min = DoubleOr(j, "min");
  m.max = DoubleOr(j, "max");
  m.mean = DoubleOr(j, "mean");
  m.p50 = DoubleOr(j, "p50");
  m.p95 = DoubleOr(j, "p95");
  m.p99 = DoubleOr(j, "p99");
  m.samples = CountOr(j, "samples");
  return m;
}

}  // namespace

Result<GpuSnapshot> SnapshotFromJson(const json& j) {
  if (!j.is_object() || !j.contains("gpus") || !j["gpus"].is_array()) {
    return InvalidArgument("snapshot: expected an object with a 'gpus' array");
  }
  GpuSnapshot s;
  s.taken_at = std::chrono::system_clock::now();
  std::string source = StringOr(j, "source", "none");
  s.source = source == "nvml" ? Source::kNvml
             : source == "nvidia-smi" ? Source::kNvidiaSmi
                                      : Source::kNone;
  if (j.contains("reason") && j["reason"].is_string()) s.reason = j["reason"].get<std::string>();
  Get(j, "driver_version", s.driver_version);
  Get(j, "cuda_driver_version", s.cuda_driver_version);
  Get(j, "nvml_version", s.nvml_version);
  Get(j, "simulated_scenario", s.simulated_scenario);
  for (const json& g : j["gpus"]) {
    FLYT_ASSIGN_OR_RETURN(GpuInfo gpu, GpuFromJson(g));
    s.gpus.push_back(std::move(gpu));
  }
  return s;
}

Result<SessionStats> SessionStatsFromJson(const json& j) {
  if (!j.is_object() || !j.contains("gpu_stats") || !j["gpu_stats"].is_object()) {
    return InvalidArgument("session: expected an object with 'gpu_stats'");
  }
  SessionStats s;
  s.id = StringOr(j, "id", "");
  s.monitoring_duration_seconds = DoubleOr(j, "monitoring_duration_seconds");
  s.sample_count = CountOr(j, "sample_count");
  for (const auto& [key, g] : j["gpu_stats"].items()) {
    if (!g.is_object()) return InvalidArgument("session: gpu_stats." + key + " is not an object");
    GpuSessionStats gs;
    auto index = std::strtoul(key.c_str(), nullptr, 10);
    gs.index = static_cast<uint32_t>(index);
    gs.name = StringOr(g, "name", "");
    if (g.contains("utilization")) gs.utilization = MetricFromJson(g["utilization"]);
    if (g.contains("memory_used_mb")) gs.memory_used_mb = MetricFromJson(g["memory_used_mb"]);
    if (g.contains("memory_usage_percent")) {
      gs.memory_usage_percent = MetricFromJson(g["memory_usage_percent"]);
    }
    if (g.contains("temperature_c")) gs.temperature_c = MetricFromJson(g["temperature_c"]);
    if (g.contains("power_draw_w")) gs.power_draw_w = MetricFromJson(g["power_draw_w"]);
    s.gpu_stats.emplace(gs.index, std::move(gs));
  }
  return s;
}

}  // namespace flyt::gpu
