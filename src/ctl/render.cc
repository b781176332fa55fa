#include "ctl/render.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <map>

#include "common/strings.h"
#include "ctl/render_fields.h"
#include "gpu/json.h"

namespace flyt::ctl {

using namespace render_fields;  // NOLINT: the never-throwing field readers

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
// that could rewrite the reader's terminal) are shown as "?", as ps does. That includes the C1
// controls U+0080-U+009F (UTF-8 C2 80-C2 9F): U+009B is a one-character CSI to many terminals.
std::string Printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    auto u = static_cast<unsigned char>(s[i]);
    if (u < 0x20 || u == 0x7f) {
      out += '?';
    } else if (u == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      out += '?';
      ++i;
    } else {
      out += s[i];
    }
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
  std::string out = o.simulated_banner ? SimulatedBanner(s) : std::string();
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
  out += fmt::format("{:>3}  {:<26} {:>6} {:>5}  {:>21}  {:>13}  {}{}\n", "GPU", "NAME", "TEMP",
                     "UTIL", "MEMORY", "POWER", "PROCS", o.show_state ? "  STATE" : "");
  // The STATE column comes last: the columns before it keep their places.
  auto state = [&](const gpu::GpuInfo& g) -> std::string {
    if (!o.show_state) return "";
    auto it = o.states.find(g.index);
    return "  " + (it == o.states.end() ? std::string("-") : Printable(it->second));
  };
  for (const gpu::GpuInfo& g : s.gpus) {
    std::string name = g.name.empty() ? "(unidentified)" : Printable(g.name.substr(0, 26));
    if (g.lost) {
      out += fmt::format("{:>3}  {:<26} {}{}\n", g.index, name,
                         Paint(o, "1;31", "LOST — fell off the bus; no readings"),
                         o.show_state ? "  (" + state(g).substr(2) + ")" : "");
      continue;
    }
    std::string temp = Or(g.temperature_c, "{}°C");
    std::string util = fmt::format("{:>5}", Or(g.gpu_util_percent, "{}%"));
    if (g.gpu_util_percent) util = Paint(o, LoadColor(*g.gpu_util_percent), util);
    std::string mem = fmt::format("{:>21}", Memory(g));
    if (auto pct = g.MemoryUsagePercent()) mem = Paint(o, LoadColor(*pct), mem);
    // Without the STATE column the line ends as it always did.
    const std::string procs = o.show_state ? fmt::format("{:>5}", g.processes.size())
                                           : std::to_string(g.processes.size());
    out += fmt::format("{:>3}  {:<26} {:>6} {}  {}  {:>13}  {}{}\n", g.index, name, temp, util, mem,
                       Power(g), procs, state(g));
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

namespace {

// One line of `flytctl processes` (on the cluster, after the node column).
std::string ProcessLine(const gpu::GpuInfo& g, const gpu::ProcessInfo& p) {
  std::string mem =
      p.used_memory_bytes
          ? fmt::format("{:.0f} MiB", static_cast<double>(*p.used_memory_bytes) / kMib)
          : "-";
  std::string sm = p.sm_util_percent ? std::to_string(*p.sm_util_percent) : "-";
  std::string command = Printable(p.command ? *p.command : (p.name ? *p.name : "-"));
  return fmt::format("{:>3}  {:>7}  {:<10} {:>11}  {:>4}  {}\n", g.index, p.pid,
                     Printable(p.user.value_or("-")), mem, sm, command);
}

std::string ProcessHeader() {
  return fmt::format("{:>3}  {:>7}  {:<10} {:>11}  {:>4}  {}\n", "GPU", "PID", "USER", "GPU MEM",
                     "SM%", "COMMAND");
}

}  // namespace

std::string RenderProcesses(const gpu::GpuSnapshot& s, const RenderOptions& o) {
  std::string out = o.simulated_banner ? SimulatedBanner(s) : std::string();
  out += ProcessHeader();
  size_t n = 0;
  for (const gpu::GpuInfo& g : s.gpus) {
    for (const gpu::ProcessInfo& p : g.processes) {
      ++n;
      out += ProcessLine(g, p);
    }
  }
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
  auto mib = [](double v) { return fmt::format("{:.0f} MiB", v); };
  struct Row {
    std::string params, verdict;
  };
  std::vector<Row> rows;
  size_t params_width = std::string_view("PARAMETERS").size();
  for (const sched::Experiment& e : t.experiments) {
    Row r;
    for (const auto& [k, v] : e.parameters.items()) {
      r.params += (r.params.empty() ? "" : " ") + k + "=" + v.dump();
    }
    r.params = Printable(r.params);
    r.verdict = e.capacity ? Printable(e.capacity->message) : "-";
    params_width = std::max(params_width, r.params.size());
    rows.push_back(std::move(r));
  }
  const std::string row_format =
      "{:>4}  {:>4}  {:>10}  {:>10}  {:>9}  {:>5}  {:>10}  {:>10}  {:>8}  {:<" +
      std::to_string(params_width) + "}  {}\n";
  auto line = [&](auto&&... cells) { return fmt::format(fmt::runtime(row_format), cells...); };
  out += line("EXP", "GPUS", "WEIGHTS", "KV 1 SEQ", "RESERVE", "FRAC", "PER GPU", "KV TOKENS",
              "MAX SEQS", "PARAMETERS", "VERDICT");
  for (size_t i = 0; i < t.experiments.size(); ++i) {
    const sched::Experiment& e = t.experiments[i];
    if (e.memory) {
      const std::string tokens = e.capacity ? std::to_string(e.capacity->kv_tokens) : "-";
      const std::string seqs = e.capacity ? std::to_string(e.capacity->max_concurrency) : "-";
      const double fraction = e.capacity ? e.capacity->fraction : e.free_fraction;
      out += line(e.index, e.gpus, mib(e.memory->weights_mib), mib(e.memory->kv_cache_mib),
                  mib(e.memory->reserve_mib), fmt::format("{:.3g}", fraction),
                  mib(e.min_free_memory_mib), tokens, seqs, rows[i].params, rows[i].verdict);
    } else {
      out += line(e.index, e.gpus, "-", "-", "-", "-", mib(e.min_free_memory_mib) + "*", "-", "-",
                  rows[i].params, rows[i].verdict);
    }
  }
  if (!t.experiments.empty()) out += "rule: " + t.experiments.front().engine_rule + "\n";
  const bool any_memory = std::any_of(t.experiments.begin(), t.experiments.end(),
                                      [](const sched::Experiment& e) { return e.memory; });
  if (any_memory) {
    out +=
        "PER GPU: the smallest GPU the engine starts on, (WEIGHTS + KV for one max-model-len "
        "sequence + RESERVE) ÷ FRAC; each GPU needs that much free.\n";
    if (t.gpu_memory_mib > 0) {
      out += fmt::format(
          "KV TOKENS, MAX SEQS: what the KV cache holds on a {:.0f} MiB GPU, FRAC × GPU − WEIGHTS "
          "− "
          "RESERVE, and the max-model-len sequences it runs at once (per engine replica).\n",
          t.gpu_memory_mib);
    }
  }
  if (t.model_source == "explicit") {
    out += "* min_free_memory_mb from the task (model not in the catalog)\n";
  }
  return out;
}

namespace {

// Per GPU, mean (min-max) of each metric.
std::string SessionTable(const gpu::SessionStats& stats) {
  std::string out = fmt::format("{:>3}  {:<24} {:>18}  {:>22}  {:>16}  {:>20}\n", "GPU", "NAME",
                                "UTIL %", "MEMORY MiB", "TEMP C", "POWER W");
  auto cell = [](const std::optional<gpu::MetricStats>& m) {
    if (!m) return std::string("-");
    return fmt::format("{:.1f} ({:.0f}-{:.0f})", m->mean, m->min, m->max);
  };
  for (const auto& [index, g] : stats.gpu_stats) {
    out += fmt::format("{:>3}  {:<24} {:>18}  {:>22}  {:>16}  {:>20}\n", index,
                       Printable(g.name.substr(0, 24)), cell(g.utilization), cell(g.memory_used_mb),
                       cell(g.temperature_c), cell(g.power_draw_w));
  }
  return out;
}

}  // namespace

std::string RenderSession(const gpu::SessionStats& stats) {
  return fmt::format("session {}: {:.1f} s, {} samples\n", Printable(stats.id),
                     stats.monitoring_duration_seconds, stats.sample_count) +
         SessionTable(stats);
}

// ---- the cluster manager's answers ----------------------------------------------------------

namespace {

using nlohmann::json;

std::string Mib(std::optional<double> v) { return v ? fmt::format("{:.0f} MiB", *v) : "-"; }

// A JSON value as a person reads it: strings bare, everything else as compact JSON.
std::string Plain(const json& v) {
  if (v.is_string()) return Printable(v.get<std::string>());
  if (v.is_number_float()) {
    std::string t = fmt::format("{:.6g}", v.get<double>());
    return t;
  }
  return Printable(DumpJson(v));
}

std::string KeyValues(const json& object) {
  if (!object.is_object()) return "-";
  std::string out;
  for (const auto& [k, v] : object.items()) {
    out += (out.empty() ? "" : " ") + Printable(k) + "=" + Plain(v);
  }
  return out.empty() ? "-" : out;
}

// "llama-3.1-8b-throughput #3" (the experiment's index within its task).
std::string TaskCell(const json& j, size_t width) {
  std::string task = TextOr(j, "task_name");
  auto exp = Integer(j, "experiment");
  std::string suffix = exp ? " #" + std::to_string(*exp) : "";
  return Clip(task, std::max<size_t>(8, width - std::min(width, suffix.size()))) + suffix;
}

// The GPU column of a job: "2 (H100)" once placed, "2" while queued, with 📊 when the job has a
// monitoring summary.
std::string JobGpuCell(const json& j) {
  std::string cell = Integer(j, "gpus") ? std::to_string(*Integer(j, "gpus")) : "-";
  if (auto model = Text(j, "gpu_model"); model && !model->empty()) {
    cell += " (" + ShortGpuModel(*model) + ")";
  }
  if (Flag(j, "has_monitoring")) cell += " 📊";
  return cell;
}

std::optional<double> SecondsBetween(const json& j, const char* from_ms, const char* to_ms,
                                     std::chrono::system_clock::time_point now) {
  auto from = Integer(j, from_ms);
  if (!from) return std::nullopt;
  auto to = Integer(j, to_ms);
  int64_t end =
      to ? *to
         : std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  return static_cast<double>(end - *from) / 1000.0;
}

std::string SimulatedNodes(const json& nodes) {
  std::string out;
  for (const json& n : Array(nodes, "nodes")) {
    if (auto scenario = Text(n, "simulated_scenario")) {
      out += "SIMULATED GPUs on " + TextOr(n, "name") + " — scenario " + *scenario +
             "; these are not real GPUs\n";
    }
  }
  return out;
}

}  // namespace

std::string ShortGpuModel(std::string_view name) {
  std::vector<std::string> words;
  std::string word;
  for (char c : name) {
    if (c == ' ' || c == '-' || c == '_') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  auto vendor = [](const std::string& w) {
    std::string l = ToLower(w);
    return l == "nvidia" || l == "tesla" || l == "geforce" || l == "quadro";
  };
  auto has_digit = [](const std::string& w) {
    return w.find_first_of("0123456789") != std::string::npos;
  };
  size_t i = 0;
  while (i < words.size() && vendor(words[i])) ++i;
  if (i == words.size()) return Printable(name.empty() ? "?" : std::string(name));
  std::string out = words[i];
  // "RTX 4090", "RTX A6000", "RTX PRO 6000": the family word says little without the number.
  const std::string family = ToLower(words[i]);
  if (family == "rtx" || family == "gtx" || family == "titan") {
    for (size_t k = i + 1; k < words.size() && k <= i + 2; ++k) {
      out += " " + words[k];
      if (has_digit(words[k])) break;
    }
  }
  return Printable(out);
}

std::string HumanDuration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "-";
  auto s = static_cast<int64_t>(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string RenderNodes(const json& answer) {
  const json& nodes = Array(answer, "nodes");
  if (nodes.empty()) {
    return "No nodes have registered yet (start flyt-node-manager with --cluster-manager URL).\n";
  }
  std::string out = SimulatedNodes(answer);
  out += fmt::format("{:<20} {:<11} {:>4} {:>6} {:>4}  {:<26} {:>9}  {}\n", "NAME", "STATE", "GPUS",
                     "LEASED", "LOST", "MODEL", "HEARD", "LABELS");
  for (const json& n : nodes) {
    auto count = [&](const char* key) {
      auto v = Integer(n, key);
      return v ? std::to_string(*v) : std::string("-");
    };
    auto ago = Number(n, "seconds_since_heartbeat");
    const json* labels = Find(n, "labels");
    out += fmt::format("{:<20} {:<11} {:>4} {:>6} {:>4}  {:<26} {:>9}  {}\n",
                       Clip(TextOr(n, "name"), 20),
                       n.value("cordoned", false) && TextOr(n, "state") == "reachable"
                           ? std::string("cordoned")
                           : TextOr(n, "state"),
                       count("gpu_count"),
                       count("gpus_leased"), count("gpus_lost"), Clip(TextOr(n, "gpu_model"), 26),
                       ago ? HumanDuration(*ago) + " ago" : "-",
                       labels != nullptr && !labels->empty() ? KeyValues(*labels) : "-");
  }
  return out;
}

std::string RenderNode(const json& node) {
  const std::string name = TextOr(node, "name");
  std::string out = fmt::format("node {}: {}, last heartbeat {}, version {}, API {}\n", name,
                                TextOr(node, "state"), TextOr(node, "last_heartbeat"),
                                TextOr(node, "version"), TextOr(node, "api_url"));
  // Where the manager calls the node when that is not simply what it advertised, and why.
  const std::string source = TextOr(node, "api_url_source");
  if (source == "source_address" || source == "none") {
    out += "API address: " + Printable(TextOr(node, "api_url_note")) + "\n";
  }
  if (const json* labels = Find(node, "labels"); labels != nullptr && !labels->empty()) {
    out += "labels: " + KeyValues(*labels) + "\n";
  }
  const json* snapshot = Find(node, "snapshot");
  auto snap = gpu::SnapshotFromJson(snapshot != nullptr ? *snapshot : json());
  if (!snap.ok())
    return out + "No readable GPU snapshot: " + Printable(snap.status().message()) + "\n";
  RenderOptions o;
  o.hostname = name;
  return out + RenderSnapshot(*snap, o);
}

std::string RenderClusterGpus(const json& answer, const json& nodes) {
  const json& gpus = Array(answer, "gpus");
  std::string out = SimulatedNodes(nodes);
  if (gpus.empty()) return out + "No GPUs in the cluster (no node has registered any).\n";
  // ALLOCATION: free, leased, shared, lost or unreachable; STATE: the GPU's usage profile.
  out += fmt::format("{:<16} {:>3}  {:<24} {:<11} {:<21} {:>6} {:>5}  {:>21}  {:>13}  {:>5}  {}\n",
                     "NODE", "GPU", "NAME", "ALLOCATION", "STATE", "TEMP", "UTIL", "MEMORY", "POWER",
                     "SCORE", "HELD BY");
  std::map<std::string, int> states;
  for (const json& g : gpus) {
    const std::string state = TextOr(g, "allocation_state");
    ++states[state];
    auto index = Integer(g, "index");
    std::string held;
    for (const json& l : Array(g, "leases")) {
      held += (held.empty() ? "" : ", ") + TextOr(l, "owner") + " (" + TextOr(l, "lease_id") +
              (Flag(l, "exclusive") ? "" : ", shared") + ")";
    }
    if (held.empty()) held = "-";
    std::string name = Clip(TextOr(g, "name", "(unidentified)"), 24);
    const json* profile = Find(g, "profile");
    const std::string usage = Clip(profile != nullptr ? ProfileStateText(*profile) : "-", 21);
    if (Flag(g, "lost")) {
      out += fmt::format("{:<16} {:>3}  {:<24} {:<11} {:<21} {}\n", Clip(TextOr(g, "node"), 16),
                         index ? std::to_string(*index) : "-", name, state, usage,
                         "LOST — fell off the bus; no readings");
      continue;
    }
    auto temp = Integer(g, "temperature_c");
    auto util = Integer(g, "gpu_util_percent");
    auto used = Number(g, "memory_used_bytes");
    auto total = Number(g, "memory_total_bytes");
    auto draw = Number(g, "power_draw_mw");
    auto limit = Number(g, "power_limit_mw");
    auto score = Number(g, "score");
    std::string mem = (used ? fmt::format("{:.0f}", *used / kMib) : "-") + " / " +
                      (total ? fmt::format("{:.0f}", *total / kMib) : "-") + " MiB";
    std::string power = (draw ? fmt::format("{:.0f}", *draw / 1000) : "-") + " / " +
                        (limit ? fmt::format("{:.0f}", *limit / 1000) : "-") + " W";
    out +=
        fmt::format("{:<16} {:>3}  {:<24} {:<11} {:<21} {:>6} {:>5}  {:>21}  {:>13}  {:>5}  {}\n",
                    Clip(TextOr(g, "node"), 16), index ? std::to_string(*index) : "-", name, state,
                    usage, temp ? fmt::format("{}°C", *temp) : "-", util ? fmt::format("{}%", *util) : "-",
                    mem, power, score ? fmt::format("{:.3f}", *score) : "-", held);
  }
  out += fmt::format("{} GPU(s): {}\n", gpus.size(), render_fields::StateCounts(states));
  return out;
}

std::string RenderClusterProcesses(const std::vector<NodeSnapshot>& snapshots, const json& nodes) {
  std::string out = SimulatedNodes(nodes);
  if (snapshots.empty()) return out + "No nodes have registered yet.\n";
  out += fmt::format("{:<16} ", "NODE") + ProcessHeader();
  size_t gpus = 0, n = 0;
  for (const NodeSnapshot& ns : snapshots) {
    gpus += ns.snapshot.gpus.size();
    for (const gpu::GpuInfo& g : ns.snapshot.gpus) {
      for (const gpu::ProcessInfo& p : g.processes) {
        ++n;
        out += fmt::format("{:<16} ", Clip(ns.node, 16)) + ProcessLine(g, p);
      }
    }
  }
  if (n == 0) {
    out += "No processes on " + std::to_string(gpus) + " GPU(s) of " +
           std::to_string(snapshots.size()) + " node(s).\n";
  }
  return out;
}

std::string RenderLease(const json& lease) {
  const json& gpus = Array(lease, "gpus");
  std::string out =
      fmt::format("lease {}: {} GPU(s) on {}, {}, owner {}\n", TextOr(lease, "id"), gpus.size(),
                  TextOr(lease, "node"), Flag(lease, "exclusive") ? "exclusive" : "shared",
                  TextOr(lease, "owner"));
  std::string expiry = "expires " + TextOr(lease, "expires_at");
  if (auto in = Number(lease, "expires_in_seconds")) {
    expiry += " (in " + HumanDuration(*in) + ")";
  } else if (auto ttl = Number(lease, "ttl_seconds")) {
    expiry += " (TTL " + HumanDuration(*ttl) + "; renew with flytctl renew)";
  }
  out += expiry + "\n";
  if (const json* labels = Find(lease, "labels"); labels != nullptr && !labels->empty()) {
    out += "labels: " + KeyValues(*labels) + "\n";
  }
  out += fmt::format("{:>5}  {:<24} {:<42} {:>5}\n", "GPU", "NAME", "UUID", "SCORE");
  std::string uuids;
  for (const json& g : gpus) {
    auto index = Integer(g, "index");
    auto score = Number(g, "score");
    const std::string uuid = TextOr(g, "uuid");
    uuids += (uuids.empty() ? "" : ",") + uuid;
    out +=
        fmt::format("{:>5}  {:<24} {:<42} {:>5}\n", index ? std::to_string(*index) : "-",
                    Clip(TextOr(g, "name"), 24), uuid, score ? fmt::format("{:.3f}", *score) : "-");
  }
  // UUIDs, not indexes: CUDA numbers devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID,
  // NVML by PCI bus; a UUID means the same GPU to both.
  if (!gpus.empty())
    out += "on " + TextOr(lease, "node") + ": CUDA_VISIBLE_DEVICES=" + uuids + "\n";
  return out;
}

std::string RenderAllocations(const json& answer) {
  const json& leases = Array(answer, "allocations");
  if (leases.empty()) return "No active leases.\n";
  std::string out = fmt::format("{:<20} {:<14} {:<16} {:<12} {:<9} {:>10}  {:<18} {}\n", "LEASE",
                                "OWNER", "NODE", "GPUS", "MODE", "EXPIRES IN", "JOB", "LABELS");
  for (const json& l : leases) {
    std::string gpus;
    for (const json& g : Array(l, "gpus")) {
      auto index = Integer(g, "index");
      gpus += (gpus.empty() ? "" : ",") + (index ? std::to_string(*index) : "?");
    }
    auto in = Number(l, "expires_in_seconds");
    const json* labels = Find(l, "labels");
    out += fmt::format("{:<20} {:<14} {:<16} {:<12} {:<9} {:>10}  {:<18} {}\n", TextOr(l, "id"),
                       Clip(TextOr(l, "owner"), 14), Clip(TextOr(l, "node"), 16),
                       gpus.empty() ? "-" : gpus, Flag(l, "exclusive") ? "exclusive" : "shared",
                       in ? HumanDuration(*in) : "-", TextOr(l, "job_id"),
                       labels != nullptr && !labels->empty() ? KeyValues(*labels) : "-");
  }
  return out;
}

std::string RenderSubmission(const json& answer) {
  const json& jobs = Array(answer, "jobs");
  std::string out =
      fmt::format("submitted {} ({}) as {}: {} job(s)\n", TextOr(answer, "task_name"),
                  TextOr(answer, "model_source"), TextOr(answer, "submission"), jobs.size());
  out += fmt::format("{:<18} {:>4} {:>5} {:>13}  {:<9} {}\n", "JOB", "EXP", "GPUS", "MIN FREE/GPU",
                     "STATUS", "PARAMETERS");
  for (const json& j : jobs) {
    auto exp = Integer(j, "experiment");
    auto gpus = Integer(j, "gpus");
    const json* params = Find(j, "parameters");
    out += fmt::format("{:<18} {:>4} {:>5} {:>13}  {:<9} {}\n", TextOr(j, "id"),
                       exp ? std::to_string(*exp) : "-", gpus ? std::to_string(*gpus) : "-",
                       Mib(Number(j, "min_free_memory_mb")), TextOr(j, "status"),
                       params != nullptr ? KeyValues(*params) : "-");
  }
  return out;
}

std::string RenderJobs(const json& answer, std::string_view status_filter) {
  constexpr std::string_view kJobRow =
      "{:<17} {:<28} {:<10} {:<12} {:<12} {:<10} {:>3} {:>6} {:>7}  {}\n";
  const json& jobs = Array(answer, "jobs");
  if (jobs.empty()) {
    return status_filter.empty() ? "No jobs.\n" : "No " + Printable(status_filter) + " jobs.\n";
  }
  std::string out = fmt::format(kJobRow, "JOB", "TASK", "STATUS", "GPUS", "NODE", "OWNER", "PRI",
                                "WAIT", "RUNTIME", "MESSAGE");
  for (const json& j : jobs) {
    auto priority = Integer(j, "priority");
    auto wait = Number(j, "wait_seconds");
    auto run = Number(j, "runtime_seconds");
    out +=
        fmt::format(kJobRow, TextOr(j, "id"), TaskCell(j, 28), TextOr(j, "status"), JobGpuCell(j),
                    Clip(TextOr(j, "node"), 12), Clip(TextOr(j, "owner"), 10),
                    priority ? std::to_string(*priority) : "-", wait ? HumanDuration(*wait) : "-",
                    run ? HumanDuration(*run) : "-", Clip(TextOr(j, "message", ""), 60));
  }
  auto total = Integer(answer, "total");
  if (status_filter.empty() && total && static_cast<size_t>(*total) > jobs.size()) {
    out += fmt::format("newest {} of {} job(s); --limit N shows more\n", jobs.size(), *total);
  }
  return out;
}

std::string RenderJob(const json& job, std::chrono::system_clock::time_point now) {
  auto line = [](const char* label, const std::string& text) {
    return fmt::format("{:<13}{}\n", std::string(label) + ":", text);
  };
  const std::string status = TextOr(job, "status");
  std::string out = "job " + TextOr(job, "id") + " — " + TextOr(job, "task_name");
  if (auto exp = Integer(job, "experiment")) {
    out += ", experiment " + std::to_string(*exp);
    if (auto n = Integer(job, "experiments")) out += " of " + std::to_string(*n);
  }
  if (auto sub = Text(job, "submission")) out += " (submission " + *sub + ")";
  out += "\n";
  std::string message = TextOr(job, "message", "");
  out += line("status", status + (message.empty() ? "" : " — " + message));
  if (auto pos = Integer(job, "queue_position")) {
    out += line("queue", "position " + std::to_string(*pos));
  }

  const json* estimate = Find(job, "estimate");
  std::string model = TextOr(job, "model");
  if (auto runtime = Text(job, "runtime")) model += " on " + *runtime;
  if (estimate != nullptr) {
    if (auto source = Text(*estimate, "model_source")) model += " (" + *source + ")";
  }
  out += line("model", model);
  if (const json* params = Find(job, "parameters")) out += line("parameters", KeyValues(*params));
  auto priority = Integer(job, "priority");
  out += line("owner", TextOr(job, "owner") + ", priority " +
                           (priority ? std::to_string(*priority) : std::string("-")));

  std::string times = TextOr(job, "submitted_at");
  auto waited = SecondsBetween(
      job, "submitted_at_ms", Find(job, "started_at_ms") ? "started_at_ms" : "finished_at_ms", now);
  if (waited)
    times += status == "queued" ? ", waiting " + HumanDuration(*waited)
                                : ", waited " + HumanDuration(*waited);
  out += line("submitted", times);
  if (auto started = Text(job, "started_at")) {
    auto ran = SecondsBetween(job, "started_at_ms", "finished_at_ms", now);
    out += line("started",
                *started + (ran ? (Find(job, "finished_at_ms") ? ", ran " : ", running for ") +
                                      HumanDuration(*ran)
                                : ""));
  }
  if (auto finished = Text(job, "finished_at")) out += line("finished", *finished);

  if (const json* req = Find(job, "requirement")) {
    auto gpus = Integer(*req, "gpus");
    std::string r = (gpus ? std::to_string(*gpus) : std::string("-")) + " GPU(s)";
    if (Flag(*req, "same_node")) r += " on one node";
    r += ", each ≥ " + Mib(Number(*req, "min_free_memory_mb")) + " free";
    if (auto f = Number(*req, "min_free_fraction"); f && *f > 0) {
      r += fmt::format(" and ≥ {:.0f}% of its memory free", *f * 100);
    }
    if (auto spread = Number(*req, "max_free_spread"); spread && *spread > 0) {
      r += fmt::format(", free memory within {:.0f}% across the GPUs", *spread * 100);
    }
    if (auto util = Integer(*req, "max_utilization"); util && *util < 100) {
      r += fmt::format(", utilisation ≤ {}%", *util);
    }
    r += ", model " + TextOr(*req, "gpu_model", "any") + ", policy " + TextOr(*req, "policy") +
         (Flag(*req, "exclusive") ? ", exclusive" : ", shared");
    out += line("requirement", r);
    std::string limits;
    if (auto ttl = Number(*req, "ttl_seconds")) limits += "lease TTL " + HumanDuration(*ttl);
    if (auto timeout = Number(job, "timeout_seconds")) {
      limits += (limits.empty() ? "" : ", ") + std::string("gives up after ") +
                HumanDuration(*timeout) + " in the queue";
    }
    if (!limits.empty()) out += line("limits", limits);
  }
  if (estimate != nullptr) {
    std::string e;
    if (const json* mem = Find(*estimate, "memory_per_gpu")) {
      e = Mib(Number(*mem, "total_mib")) + " per GPU = weights " +
          Mib(Number(*mem, "weights_mib")) + " + KV cache " + Mib(Number(*mem, "kv_cache_mib")) +
          " + reserve " + Mib(Number(*mem, "reserve_mib"));
    } else {
      e = Mib(Number(*estimate, "min_free_memory_mb")) + " per GPU (given by the task)";
    }
    if (auto rule = Text(*estimate, "engine_rule")) e += "; " + *rule;
    out += line("estimate", e);
  }

  if (const json* info = Find(job, "gpu_info"); info != nullptr && info->is_object()) {
    std::string devices;
    for (const json& d : Array(*info, "device_ids")) {
      devices += (devices.empty() ? "" : ",") + Plain(d);
    }
    auto count = Integer(*info, "count");
    auto world = Integer(*info, "world_size");
    out += line("placement",
                fmt::format("{}, {} × {}, devices [{}], world size {}, lease {}, {}",
                            TextOr(*info, "node"), count ? std::to_string(*count) : "-",
                            TextOr(*info, "model"), devices, world ? std::to_string(*world) : "-",
                            TextOr(*info, "lease_id"), TextOr(*info, "allocation_method")));
    const json& details = Array(*info, "allocation_details");
    if (!details.empty()) {
      out += fmt::format("  {:>3}  {:<24} {:<42} {:>5} {:>10} {:>10} {:>5}\n", "GPU", "NAME",
                         "UUID", "SCORE", "FREE MiB", "TOTAL MiB", "UTIL");
      for (const json& d : details) {
        auto index = Integer(d, "index");
        auto score = Number(d, "availability_score");
        auto free = Number(d, "memory_free_mb");
        auto total = Number(d, "memory_total_mb");
        auto util = Integer(d, "utilization_percent");
        out += fmt::format(
            "  {:>3}  {:<24} {:<42} {:>5} {:>10} {:>10} {:>5}\n",
            index ? std::to_string(*index) : "-", Clip(TextOr(d, "name"), 24), TextOr(d, "uuid"),
            score ? fmt::format("{:.3f}", *score) : "-", free ? fmt::format("{:.0f}", *free) : "-",
            total ? fmt::format("{:.0f}", *total) : "-", util ? fmt::format("{}%", *util) : "-");
      }
    }
  }

  const json* metrics = Find(job, "metrics");
  if (const json* monitoring = metrics ? Find(*metrics, "gpu_monitoring") : nullptr) {
    auto stats = gpu::SessionStatsFromJson(*monitoring);
    if (stats.ok()) {
      // The node's session ended with the job: no id to show, the same table as `monitor show`.
      out += fmt::format(
          "📊 GPU monitoring over {:.1f} s, {} samples: mean (min-max) of utilization, memory, "
          "temperature and power\n",
          stats->monitoring_duration_seconds, stats->sample_count);
      out += SessionTable(*stats);
    } else {
      out += line("monitoring", "unreadable summary: " + Printable(stats.status().message()));
    }
  } else if (auto session = Text(job, "monitoring_session")) {
    out +=
        line("monitoring", "session " + *session + " open on the node; summary when the job ends");
  }
  if (auto error = metrics ? Text(*metrics, "gpu_monitoring_error") : std::nullopt) {
    out += line("monitoring", "failed: " + *error);
  }
  if (metrics != nullptr && metrics->is_object()) {
    std::string other;
    for (const auto& [k, v] : metrics->items()) {
      if (k == "gpu_monitoring" || k == "gpu_monitoring_error") continue;
      other += fmt::format("  {:<28} {}\n", Printable(k), Plain(v));
    }
    if (!other.empty()) out += "metrics:\n" + other;
  }
  return out;
}

std::string RenderJobOutcome(const json& job) {
  std::string task = TaskCell(job, 40);
  std::string message = TextOr(job, "message", "");
  std::string where;
  if (const json* info = Find(job, "gpu_info"); info != nullptr && info->is_object()) {
    std::string devices;
    for (const json& d : Array(*info, "device_ids")) {
      devices += (devices.empty() ? "" : ",") + Plain(d);
    }
    where = fmt::format(" [GPUs {} ({})]", devices, ShortGpuModel(TextOr(*info, "model", "")));
  }
  return fmt::format("{:<18} {:<10} {}{}{}\n", TextOr(job, "id"), TextOr(job, "status"), task,
                     message.empty() ? "" : ": " + message, where);
}

std::string RenderQueue(const json& answer) {
  const json& queue = Array(answer, "queue");
  if (queue.empty()) return "The queue is empty.\n";
  std::string out = fmt::format("{:>3}  {:<18} {:<30} {:<10} {:>4} {:>4} {:>13} {:>8} {:>9}  {}\n",
                                "POS", "JOB", "TASK", "OWNER", "PRI", "GPUS", "MIN FREE/GPU",
                                "WAITING", "GIVES UP", "WHY IT WAITS");
  for (const json& q : queue) {
    auto pos = Integer(q, "position");
    auto priority = Integer(q, "priority");
    const json* req = Find(q, "requirement");
    auto gpus = req ? Integer(*req, "gpus") : std::nullopt;
    auto mem = req ? Number(*req, "min_free_memory_mb") : std::nullopt;
    auto waiting = Number(q, "waiting_seconds");
    auto left = Number(q, "timeout_in_seconds");
    out += fmt::format(
        "{:>3}  {:<18} {:<30} {:<10} {:>4} {:>4} {:>13} {:>8} {:>9}  {}\n",
        pos ? std::to_string(*pos) : "-", TextOr(q, "job_id"), TaskCell(q, 30),
        Clip(TextOr(q, "owner"), 10), priority ? std::to_string(*priority) : "-",
        gpus ? std::to_string(*gpus) : "-", Mib(mem), waiting ? HumanDuration(*waiting) : "-",
        left ? "in " + HumanDuration(std::max(0.0, *left)) : "-", TextOr(q, "reason", "-"));
  }
  return out;
}

std::string RenderEvents(const json& answer) {
  const json& events = Array(answer, "events");
  if (events.empty()) return "No events.\n";
  std::string out = fmt::format("{:>6}  {:<24}  {:<16} {}\n", "ID", "AT", "KIND", "MESSAGE");
  for (const json& e : events) {
    auto id = Integer(e, "id");
    out += fmt::format("{:>6}  {:<24}  {:<16} {}\n", id ? std::to_string(*id) : "-",
                       TextOr(e, "at"), TextOr(e, "kind"), TextOr(e, "message", ""));
  }
  return out;
}

std::string RenderWhoami(const json& answer, std::string_view url) {
  return TextOr(answer, "name") + " (role " + TextOr(answer, "role") + ") at " + Printable(url) +
         "\n";
}

}  // namespace flyt::ctl
