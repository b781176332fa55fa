#include "profile/json.h"

#include <algorithm>
#include <string>

#include "common/json.h"

namespace flyt::profile {
namespace {

using nlohmann::json;

// Bounds on what a peer may send (ProfileFromJson reads heartbeats from nodes).
constexpr size_t kMaxText = kMaxJsonText;
constexpr size_t kMaxProcesses = kMaxJsonProcesses;
constexpr size_t kMaxPhaseChanges = kMaxJsonPhaseChanges;
constexpr size_t kMaxInputs = 16;

template <typename T>
json Opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

std::string Time(std::chrono::system_clock::time_point t) { return FormatTimeRfc3339(t); }

json QuantilesJson(const std::optional<Quantiles>& q) {
  if (!q) return nullptr;
  return {{"p50", q->p50}, {"p95", q->p95}, {"p99", q->p99}, {"samples", q->samples}};
}

json CycleJson(const Cycle& c) {
  return {{"period_s", c.period_s},
          {"confidence", c.confidence},
          {"method", c.method},
          {"cycles_in_window", c.cycles_in_window},
          {"phase_origin", Time(c.phase_origin)},
          {"util_peak_offset_s", c.util_peak_offset_s},
          {"util_trough_offset_s", c.util_trough_offset_s},
          {"memory_peak_offset_s", Opt(c.memory_peak_offset_s)},
          {"memory_trough_offset_s", Opt(c.memory_trough_offset_s)},
          {"next_util_trough_at", Time(c.next_util_trough_at)}};
}

json ProcessesJson(const std::vector<ProcessUse>& processes) {
  json out = json::array();
  for (const ProcessUse& p : processes) out.push_back(ToJson(p));
  return out;
}

// ---- parsing ----

Status Missing(const std::string& key) {
  return InvalidArgument("profile: '" + key + "' is missing or has the wrong type");
}

Result<std::string> Text(const json& j, const char* key, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Missing(key);
    return std::string();
  }
  if (!it->is_string()) return Missing(key);
  std::string s = it->get<std::string>();
  if (s.size() > kMaxText) return InvalidArgument(std::string("profile: '") + key + "' is too long");
  return s;
}

std::optional<double> Num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// A number a peer sent, held to [lo, hi] (nlohmann has no NaN or inf from text).
double Clamped(const json& j, const char* key, double lo, double hi) {
  return std::clamp(Num(j, key).value_or(0), lo, hi);
}

std::optional<uint64_t> U64(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer()) {
    int64_t v = it->get<int64_t>();
    if (v < 0) return std::nullopt;
    return static_cast<uint64_t>(v);
  }
  double d = it->get<double>();
  if (!(d >= 0) || d > 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(d);
}

Result<std::chrono::system_clock::time_point> TimeField(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::chrono::system_clock::time_point{};
  if (!it->is_string()) return Missing(key);
  auto t = ParseTimeRfc3339(it->get<std::string>());
  if (!t.ok()) return InvalidArgument(std::string("profile: '") + key + "': " + t.status().message());
  return *t;
}

Result<std::vector<ProcessUse>> ProcessesFromJson(const json& j, const char* key) {
  std::vector<ProcessUse> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) return Missing(key);
  if (it->size() > kMaxProcesses) {
    return InvalidArgument(std::string("profile: '") + key + "' lists more than " +
                           std::to_string(kMaxProcesses) + " processes");
  }
  for (const json& p : *it) {
    if (!p.is_object()) return Missing(std::string(key) + "[]");
    ProcessUse u;
    auto pid = U64(p, "pid");
    if (!pid || *pid > UINT32_MAX) return Missing(std::string(key) + "[].pid");
    u.pid = static_cast<uint32_t>(*pid);
    auto name = Text(p, "name", false);
    if (!name.ok()) return name.status();
    if (!name->empty()) u.name = *name;
    auto user = Text(p, "user", false);
    if (!user.ok()) return user.status();
    if (!user->empty()) u.user = *user;
    u.memory_bytes = U64(p, "memory_bytes");
    out.push_back(std::move(u));
  }
  return out;
}

std::optional<Quantiles> QuantilesFromJson(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return std::nullopt;
  Quantiles q;
  q.p50 = Num(*it, "p50").value_or(0);
  q.p95 = Num(*it, "p95").value_or(0);
  q.p99 = Num(*it, "p99").value_or(0);
  q.samples = U64(*it, "samples").value_or(0);
  return q;
}

}  // namespace

namespace {

void Cut(std::string& s) {
  if (s.size() <= kMaxText) return;
  size_t n = kMaxText;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not mid-character
  s.resize(n);
}

void Bound(std::vector<ProcessUse>& processes) {
  if (processes.size() > kMaxProcesses) {
    std::stable_sort(processes.begin(), processes.end(),
                     [](const ProcessUse& a, const ProcessUse& b) {
                       return a.memory_bytes.value_or(0) > b.memory_bytes.value_or(0);
                     });
    processes.resize(kMaxProcesses);
  }
  for (ProcessUse& p : processes) {
    if (p.name) Cut(*p.name);
    if (p.user) Cut(*p.user);
  }
}

}  // namespace

GpuProfile BoundedForTransport(GpuProfile p) {
  Cut(p.uuid);
  Cut(p.name);
  Cut(p.insufficient_data);
  if (p.cycle) Cut(p.cycle->method);
  Bound(p.processes);
  if (p.allocated_idle) Bound(p.allocated_idle->processes);
  if (p.phase_changes.size() > kMaxPhaseChanges) {
    p.phase_changes.erase(p.phase_changes.begin(),
                          p.phase_changes.end() - static_cast<ptrdiff_t>(kMaxPhaseChanges));
  }
  for (PhaseChange& c : p.phase_changes) {
    Cut(c.kind);
    Cut(c.detail);
  }
  if (p.inputs.size() > 16) p.inputs.resize(16);
  for (std::string& in : p.inputs) Cut(in);
  return p;
}

json ToJson(const ProcessUse& p) {
  return {{"pid", p.pid},
          {"name", Opt(p.name)},
          {"user", Opt(p.user)},
          {"memory_bytes", Opt(p.memory_bytes)}};
}

json ToJson(const GpuProfile& p) {
  json windows = json::object();
  for (const Window& w : p.windows) {
    windows[w.name] = {{"length_s", w.length.count()},
                       {"util_percent", QuantilesJson(w.util_percent)},
                       {"memory_used_bytes", QuantilesJson(w.memory_used_bytes)},
                       {"power_w", QuantilesJson(w.power_w)}};
  }
  json changes = json::array();
  for (const PhaseChange& c : p.phase_changes) {
    changes.push_back({{"at", Time(c.at)},
                       {"from", StateName(c.from)},
                       {"to", StateName(c.to)},
                       {"kind", c.kind},
                       {"detail", c.detail}});
  }
  json idle = nullptr;
  if (p.allocated_idle) {
    idle = {{"seconds", p.allocated_idle->seconds},
            {"memory_bytes", Opt(p.allocated_idle->memory_bytes)},
            {"processes", ProcessesJson(p.allocated_idle->processes)}};
  }
  return {{"schema", kSchemaVersion},
          {"index", p.index},
          {"uuid", p.uuid},
          {"name", p.name},
          {"computed_at", Time(p.computed_at)},
          {"state", StateName(p.state)},
          {"state_since", Time(p.state_since)},
          {"state_seconds", p.state_seconds},
          {"insufficient_data", p.insufficient_data.empty() ? json(nullptr)
                                                            : json(p.insufficient_data)},
          {"cycle", p.cycle ? CycleJson(*p.cycle) : json(nullptr)},
          {"allocated_idle", idle},
          {"windows", windows},
          {"memory",
           {{"total_bytes", Opt(p.memory.total_bytes)},
            {"peak_used_bytes", Opt(p.memory.peak_used_bytes)},
            {"headroom_bytes", Opt(p.memory.headroom_bytes)},
            {"peak_window_s", p.memory.peak_window_s}}},
          {"processes", ProcessesJson(p.processes)},
          {"launches_per_second", Opt(p.launches_per_second)},
          {"inputs", p.inputs},
          {"util_rate_hz", p.util_rate_hz},
          {"phase_changes", changes}};
}

Result<GpuProfile> ProfileFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("profile: not a JSON object");
  auto schema = U64(j, "schema");
  if (!schema) return Missing("schema");
  if (*schema != static_cast<uint64_t>(kSchemaVersion)) {
    return InvalidArgument("profile: schema " + std::to_string(*schema) + " is not supported (" +
                           std::to_string(kSchemaVersion) + " is)");
  }
  GpuProfile p;
  auto index = U64(j, "index");
  if (!index || *index > UINT32_MAX) return Missing("index");
  p.index = static_cast<uint32_t>(*index);
  auto uuid = Text(j, "uuid", true);
  if (!uuid.ok()) return uuid.status();
  if (uuid->empty()) return Missing("uuid");
  p.uuid = *uuid;
  auto name = Text(j, "name", false);
  if (!name.ok()) return name.status();
  p.name = *name;
  auto state = Text(j, "state", true);
  if (!state.ok()) return state.status();
  auto st = StateFromName(*state);
  if (!st) return InvalidArgument("profile: unknown state '" + *state + "'");
  p.state = *st;
  auto computed = TimeField(j, "computed_at");
  if (!computed.ok()) return computed.status();
  p.computed_at = *computed;
  auto since = TimeField(j, "state_since");
  if (!since.ok()) return since.status();
  p.state_since = *since;
  p.state_seconds = Clamped(j, "state_seconds", 0, 1e10);
  auto why = Text(j, "insufficient_data", false);
  if (!why.ok()) return why.status();
  p.insufficient_data = *why;

  if (auto it = j.find("cycle"); it != j.end() && it->is_object()) {
    Cycle c;
    auto period = Num(*it, "period_s");
    if (!period || !(*period > 0) || *period > 1e7) return Missing("cycle.period_s");
    c.period_s = *period;
    c.confidence = Clamped(*it, "confidence", 0, 1);
    auto method = Text(*it, "method", false);
    if (!method.ok()) return method.status();
    c.method = *method;
    c.cycles_in_window = Clamped(*it, "cycles_in_window", 0, 1e7);
    auto origin = TimeField(*it, "phase_origin");
    if (!origin.ok()) return origin.status();
    c.phase_origin = *origin;
    c.util_peak_offset_s = Clamped(*it, "util_peak_offset_s", 0, c.period_s);
    c.util_trough_offset_s = Clamped(*it, "util_trough_offset_s", 0, c.period_s);
    c.memory_peak_offset_s = Num(*it, "memory_peak_offset_s");
    c.memory_trough_offset_s = Num(*it, "memory_trough_offset_s");
    auto next = TimeField(*it, "next_util_trough_at");
    if (!next.ok()) return next.status();
    c.next_util_trough_at = *next;
    p.cycle = c;
  }
  if (auto it = j.find("allocated_idle"); it != j.end() && it->is_object()) {
    AllocatedIdle a;
    a.seconds = Clamped(*it, "seconds", 0, 1e10);
    a.memory_bytes = U64(*it, "memory_bytes");
    auto procs = ProcessesFromJson(*it, "processes");
    if (!procs.ok()) return procs.status();
    a.processes = std::move(*procs);
    p.allocated_idle = std::move(a);
  }
  if (auto it = j.find("windows"); it != j.end() && it->is_object()) {
    for (const char* w : {"1m", "15m", "1h"}) {
      auto wi = it->find(w);
      if (wi == it->end() || !wi->is_object()) continue;
      Window win;
      win.name = w;
      win.length = std::chrono::seconds(U64(*wi, "length_s").value_or(0));
      win.util_percent = QuantilesFromJson(*wi, "util_percent");
      win.memory_used_bytes = QuantilesFromJson(*wi, "memory_used_bytes");
      win.power_w = QuantilesFromJson(*wi, "power_w");
      p.windows.push_back(std::move(win));
    }
  }
  if (auto it = j.find("memory"); it != j.end() && it->is_object()) {
    p.memory.total_bytes = U64(*it, "total_bytes");
    p.memory.peak_used_bytes = U64(*it, "peak_used_bytes");
    p.memory.headroom_bytes = U64(*it, "headroom_bytes");
    p.memory.peak_window_s = Num(*it, "peak_window_s").value_or(0);
  }
  auto procs = ProcessesFromJson(j, "processes");
  if (!procs.ok()) return procs.status();
  p.processes = std::move(*procs);
  p.launches_per_second = Num(j, "launches_per_second");
  if (auto it = j.find("inputs"); it != j.end() && it->is_array()) {
    if (it->size() > kMaxInputs) return InvalidArgument("profile: 'inputs' is too long");
    for (const json& s : *it) {
      if (!s.is_string() || s.get<std::string>().size() > kMaxText) return Missing("inputs[]");
      p.inputs.push_back(s.get<std::string>());
    }
  }
  p.util_rate_hz = Clamped(j, "util_rate_hz", 0, 1e3);
  if (auto it = j.find("phase_changes"); it != j.end() && it->is_array()) {
    if (it->size() > kMaxPhaseChanges) {
      return InvalidArgument("profile: 'phase_changes' lists more than " +
                             std::to_string(kMaxPhaseChanges));
    }
    for (const json& c : *it) {
      if (!c.is_object()) return Missing("phase_changes[]");
      PhaseChange pc;
      auto at = TimeField(c, "at");
      if (!at.ok()) return at.status();
      pc.at = *at;
      auto from = Text(c, "from", true);
      if (!from.ok()) return from.status();
      auto to = Text(c, "to", true);
      if (!to.ok()) return to.status();
      auto fs = StateFromName(*from), ts = StateFromName(*to);
      if (!fs || !ts) return InvalidArgument("profile: unknown state in phase_changes");
      pc.from = *fs;
      pc.to = *ts;
      auto kind = Text(c, "kind", false);
      if (!kind.ok()) return kind.status();
      pc.kind = *kind;
      auto detail = Text(c, "detail", false);
      if (!detail.ok()) return detail.status();
      pc.detail = *detail;
      p.phase_changes.push_back(std::move(pc));
    }
  }
  return p;
}

json SummaryJson(const GpuProfile& p) {
  return {{"state", StateName(p.state)},
          {"state_since", Time(p.state_since)},
          {"state_seconds", p.state_seconds},
          {"insufficient_data", p.insufficient_data.empty() ? json(nullptr)
                                                            : json(p.insufficient_data)},
          {"period_s", p.cycle ? json(p.cycle->period_s) : json(nullptr)},
          {"confidence", p.cycle ? json(p.cycle->confidence) : json(nullptr)},
          {"allocated_idle_seconds",
           p.allocated_idle ? json(p.allocated_idle->seconds) : json(nullptr)},
          {"headroom_bytes", Opt(p.memory.headroom_bytes)}};
}

json AnnotationJson(const GpuProfile& p) {
  std::optional<double> util_p95;
  for (const Window& w : p.windows) {
    if (w.name == "15m" && w.util_percent) util_p95 = w.util_percent->p95;
  }
  std::vector<ProcessUse> procs = p.processes;
  std::stable_sort(procs.begin(), procs.end(), [](const ProcessUse& a, const ProcessUse& b) {
    return a.memory_bytes.value_or(0) > b.memory_bytes.value_or(0);
  });
  if (procs.size() > 8) procs.resize(8);
  return {{"v", kSchemaVersion},
          {"uuid", p.uuid},
          {"state", StateName(p.state)},
          {"since", Time(p.state_since)},
          {"period_s", p.cycle ? json(p.cycle->period_s) : json(nullptr)},
          {"confidence", p.cycle ? json(p.cycle->confidence) : json(nullptr)},
          {"util_p95", Opt(util_p95)},
          {"memory_peak_bytes", Opt(p.memory.peak_used_bytes)},
          {"headroom_bytes", Opt(p.memory.headroom_bytes)},
          {"processes", ProcessesJson(procs)}};
}

}  // namespace flyt::profile
