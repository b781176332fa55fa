#include "ctl/render.h"

#include <fmt/format.h>

#include <cstdlib>
#include <ctime>

namespace flyt::ctl {
namespace {

constexpr double kMib = 1024.0 * 1024.0;

std::string Paint(const RenderOptions& o, const char* code, const std::string& text) {
  if (!o.color) return text;
  return std::string("\033[") + code + "m" + text + "\033[0m";
}

// nvitop's thresholds: < 10% light (green), < 75% moderate (yellow), else heavy (red).
const char* LoadColor(double percent) {
  if (percent < 10) return "32";
  if (percent < 75) return "33";
  return "31";
}

template <typename T>
std::string Or(const std::optional<T>& v, const char* fmt_str) {
  return v ? fmt::format(fmt::runtime(fmt_str), *v) : std::string("-");
}

std::string Memory(const gpu::GpuInfo& g) {
  std::string used = g.memory_used_bytes
                         ? fmt::format("{:.0f}", static_cast<double>(*g.memory_used_bytes) / kMib)
                         : "-";
  std::string total = g.memory_total_bytes
                          ? fmt::format("{:.0f}", static_cast<double>(*g.memory_total_bytes) / kMib)
                          : "-";
  return used + " / " + total + " MiB";
}

std::string Power(const gpu::GpuInfo& g) {
  std::string draw = g.power_draw_mw ? fmt::format("{:.0f}", *g.power_draw_mw / 1000.0) : "-";
  std::string limit = g.power_limit_mw ? fmt::format("{:.0f}", *g.power_limit_mw / 1000.0) : "-";
  return draw + " / " + limit + " W";
}

std::string ProcessLine(const gpu::ProcessInfo& p) {
  std::string mem =
      p.used_memory_bytes
          ? fmt::format("{:.0f} MiB", static_cast<double>(*p.used_memory_bytes) / kMib)
          : "- MiB";
  std::string sm = p.sm_util_percent ? fmt::format("SM {:>3}%", *p.sm_util_percent) : "SM   -";
  std::string command = Printable(p.command ? *p.command : (p.name ? *p.name : "-"));
  if (command.size() > 48) command = command.substr(0, 45) + "...";
  std::string container = p.container_id ? "  [" + p.container_id->substr(0, 12) + "]" : "";
  return fmt::format("      └ {:>7}  {:<10} {:>11}  {}  {}{}", p.pid,
                     Printable(p.user.value_or("-")), mem, sm, command, container);
}

}  // namespace

// Text from /proc belongs to whoever started the process: control characters (escape sequences
// that could rewrite the reader's terminal) are shown as "?", as ps does.
std::string Printable(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return out;
}

std::string SimulatedBanner(const gpu::GpuSnapshot& s) {
  if (!s.simulated_scenario) return {};
  // scripts/run.sh says why it chose the simulator (no driver on this machine).
  const char* why = std::getenv("FLYT_SIM_REASON");
  std::string reason = (why != nullptr && *why != '\0')
                           ? std::string(why)
                           : "FLYT_NVML_LIBRARY points at flyt's simulated NVML";
  return "SIMULATED GPUs (" + reason + ") — scenario " +
         (s.simulated_scenario->empty() ? std::string("?") : *s.simulated_scenario) +
         "; these are not real GPUs\n";
}

std::string RenderSnapshot(const gpu::GpuSnapshot& s, const RenderOptions& o) {
  std::string out = SimulatedBanner(s);
  std::time_t t = std::chrono::system_clock::to_time_t(s.taken_at);
  std::tm tm{};
  localtime_r(&t, &tm);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
  out += fmt::format("{}  {}  driver {}  CUDA {}  via {}\n",
                     o.hostname.empty() ? "localhost" : o.hostname, when,
                     s.driver_version.value_or("-"), s.cuda_driver_version.value_or("-"),
                     gpu::SourceName(s.source));
  if (s.gpus.empty()) {
    out += "No GPUs" + (s.reason.empty() ? std::string(".") : ": " + s.reason) + "\n";
    return out;
  }
  out += fmt::format("{:>3}  {:<26} {:>6} {:>5}  {:>21}  {:>13}  {}\n", "GPU", "NAME", "TEMP",
                     "UTIL", "MEMORY", "POWER", "PROCS");
  for (const gpu::GpuInfo& g : s.gpus) {
    std::string name = g.name.empty() ? "(unidentified)" : Printable(g.name.substr(0, 26));
    if (g.lost) {
      out += fmt::format("{:>3}  {:<26} {}\n", g.index, name,
                         Paint(o, "1;31", "LOST — fell off the bus; no readings"));
      continue;
    }
    std::string temp = Or(g.temperature_c, "{}°C");
    std::string util = fmt::format("{:>5}", Or(g.gpu_util_percent, "{}%"));
    if (g.gpu_util_percent) util = Paint(o, LoadColor(*g.gpu_util_percent), util);
    std::string mem = fmt::format("{:>21}", Memory(g));
    if (auto pct = g.MemoryUsagePercent()) mem = Paint(o, LoadColor(*pct), mem);
    out += fmt::format("{:>3}  {:<26} {:>6} {}  {}  {:>13}  {}\n", g.index, name, temp, util, mem,
                       Power(g), g.processes.size());
    if (o.show_processes) {
      for (const gpu::ProcessInfo& p : g.processes) out += ProcessLine(p) + "\n";
    }
  }
  if (!s.reason.empty()) out += "note: " + s.reason + "\n";
  return out;
}

std::string RenderAvailable(const std::vector<gpu::ScoredGpu>& ranked, const RenderOptions& o) {
  (void)o;
  if (ranked.empty()) return "No GPU meets the request.\n";
  std::string out =
      fmt::format("{:>4}  {:>3}  {:<26} {:>5}  {:>21}\n", "RANK", "GPU", "NAME", "SCORE", "MEMORY");
  int rank = 1;
  for (const gpu::ScoredGpu& s : ranked) {
    out += fmt::format("{:>4}  {:>3}  {:<26} {:>5.3f}  {:>21}\n", rank++, s.gpu.index,
                       Printable(s.gpu.name.substr(0, 26)), s.score, Memory(s.gpu));
  }
  return out;
}

std::string RenderProcesses(const gpu::GpuSnapshot& s, const RenderOptions& o) {
  std::string out = SimulatedBanner(s);
  out += fmt::format("{:>3}  {:>7}  {:<10} {:>11}  {:>4}  {}\n", "GPU", "PID", "USER", "GPU MEM",
                     "SM%", "COMMAND");
  size_t n = 0;
  for (const gpu::GpuInfo& g : s.gpus) {
    for (const gpu::ProcessInfo& p : g.processes) {
      ++n;
      std::string mem = p.used_memory_bytes
                            ? fmt::format("{:.0f} MiB", static_cast<double>(*p.used_memory_bytes) / kMib)
                            : "-";
      std::string sm = p.sm_util_percent ? std::to_string(*p.sm_util_percent) : "-";
      std::string command = Printable(p.command ? *p.command : (p.name ? *p.name : "-"));
      out += fmt::format("{:>3}  {:>7}  {:<10} {:>11}  {:>4}  {}\n", g.index, p.pid,
                         Printable(p.user.value_or("-")), mem, sm, command);
    }
  }
  (void)o;
  if (s.gpus.empty()) {
    out += "No GPUs" + (s.reason.empty() ? std::string(".") : ": " + s.reason) + "\n";
  } else if (n == 0) {
    out += "No processes on " + std::to_string(s.gpus.size()) + " GPU(s).\n";
  }
  return out;
}

std::string RenderEstimate(const sched::TaskEstimate& t) {
  std::string out = fmt::format("task {}: model {} ({}), runtime {}, {} experiment(s)\n",
                                t.task_name.empty() ? "-" : t.task_name, t.model, t.model_source,
                                t.runtime, t.experiments.size());
  out += fmt::format("{:>4}  {:>4}  {:>10}  {:>10}  {:>10}  {:>12}  {}\n", "EXP", "GPUS", "WEIGHTS",
                     "KV CACHE", "RESERVE", "PER GPU", "PARAMETERS");
  for (const sched::Experiment& e : t.experiments) {
    auto mib = [](double v) { return fmt::format("{:.0f} MiB", v); };
    std::string params;
    for (const auto& [k, v] : e.parameters.items()) params += (params.empty() ? "" : " ") + k + "=" + v.dump();
    if (e.memory) {
      out += fmt::format("{:>4}  {:>4}  {:>10}  {:>10}  {:>10}  {:>12}  {}\n", e.index, e.gpus,
                         mib(e.memory->weights_mib), mib(e.memory->kv_cache_mib),
                         mib(e.memory->reserve_mib), mib(e.min_free_memory_mib), Printable(params));
    } else {
      out += fmt::format("{:>4}  {:>4}  {:>10}  {:>10}  {:>10}  {:>12}  {}\n", e.index, e.gpus, "-",
                         "-", "-", mib(e.min_free_memory_mib) + "*", Printable(params));
    }
  }
  if (!t.experiments.empty()) out += "rule: " + t.experiments.front().engine_rule + "\n";
  if (t.model_source == "explicit") out += "* min_free_memory_mb from the task (model not in the catalog)\n";
  return out;
}

std::string RenderSession(const gpu::SessionStats& stats) {
  std::string out = fmt::format("session {}: {:.1f} s, {} samples\n", stats.id,
                                stats.monitoring_duration_seconds, stats.sample_count);
  out += fmt::format("{:>3}  {:<24} {:>18}  {:>22}  {:>16}  {:>20}\n", "GPU", "NAME", "UTIL %",
                     "MEMORY MiB", "TEMP C", "POWER W");
  auto cell = [](const std::optional<gpu::MetricStats>& m) {
    if (!m) return std::string("-");
    return fmt::format("{:.1f} ({:.0f}-{:.0f})", m->mean, m->min, m->max);
  };
  for (const auto& [index, g] : stats.gpu_stats) {
    out += fmt::format("{:>3}  {:<24} {:>18}  {:>22}  {:>16}  {:>20}\n", index,
                       Printable(g.name.substr(0, 24)), cell(g.utilization),
                       cell(g.memory_used_mb), cell(g.temperature_c), cell(g.power_draw_w));
  }
  return out;
}

}  // namespace flyt::ctl
