// flytctl's views of GPU usage profiles (issue 16): the STATE cell of `flytctl gpus`, the list
// and the detail of `flytctl profile`. Built straight from the JSON of profile/json.h — the full
// form (node GET /api/v1/profiles, the cluster's GPU "profile") or, for the STATE cell, the
// node's short summary — so a field that is absent or of another type prints as "-".
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>

#include "ctl/render.h"
#include "ctl/render_fields.h"

namespace flyt::ctl {

using nlohmann::json;
using namespace render_fields;  // NOLINT: the never-throwing field readers

namespace {

// A number the summary has at `summary_key`, or the full form at `object`.`full_key`.
std::optional<double> EitherNumber(const json& p, const char* summary_key, const char* object,
                                   const char* full_key) {
  if (auto v = Number(p, summary_key)) return v;
  if (const json* o = Find(p, object)) return Number(*o, full_key);
  return std::nullopt;
}

std::string BytesOr(std::optional<double> v) { return v ? HumanBytes(*v) : "-"; }

std::string Seconds1(std::optional<double> v) {
  return v ? fmt::format("{:.1f} s", *v) : std::string("-");
}

// "python (alice, pid 4242, 30.0 GiB)"
std::string Holder(const json& p) {
  std::string out = TextOr(p, "name", "?") + " (";
  if (auto user = Text(p, "user")) out += *user + ", ";
  out += "pid " + (Integer(p, "pid") ? std::to_string(*Integer(p, "pid")) : std::string("?"));
  if (auto mem = Number(p, "memory_bytes")) out += ", " + HumanBytes(*mem);
  return out + ")";
}

std::string ProcessTable(const json& processes) {
  std::string out = fmt::format("  {:>7}  {:<16} {:<12} {:>10}\n", "PID", "NAME", "USER", "MEMORY");
  for (const json& p : processes) {
    auto pid = Integer(p, "pid");
    out += fmt::format("  {:>7}  {:<16} {:<12} {:>10}\n", pid ? std::to_string(*pid) : "-",
                       Clip(TextOr(p, "name"), 16), Clip(TextOr(p, "user"), 12),
                       BytesOr(Number(p, "memory_bytes")));
  }
  return out;
}

// "45 / 90 / 98" of one reading's quantiles, each through `cell`.
template <typename F>
std::string Quantiles(const json* q, F cell) {
  if (q == nullptr) return "-";
  auto p50 = Number(*q, "p50"), p95 = Number(*q, "p95"), p99 = Number(*q, "p99");
  if (!p50 || !p95 || !p99) return "-";
  return cell(*p50) + " / " + cell(*p95) + " / " + cell(*p99);
}

std::string Percent(double v) { return fmt::format("{:.0f}%", v); }
std::string Watts(double v) { return fmt::format("{:.0f} W", v); }
std::string Bytes(double v) { return HumanBytes(v); }

}  // namespace

std::string ProfileStateText(const json& profile) {
  auto state = Text(profile, "state");
  if (!state || state->empty()) return "-";
  if (*state == "cyclic") {
    if (auto period = EitherNumber(profile, "period_s", "cycle", "period_s")) {
      return fmt::format("cyclic {:.1f}s", *period);
    }
  }
  if (*state == "allocated-idle") {
    if (auto s = EitherNumber(profile, "allocated_idle_seconds", "allocated_idle", "seconds")) {
      return "allocated-idle " + HumanDuration(*s);
    }
  }
  return *state;
}

std::string RenderProfiles(const json& answer) {
  const json& profiles = Array(answer, "profiles");
  if (profiles.empty()) return "No GPU profiles.\n";
  std::string out =
      fmt::format("{:>3}  {:<10} {:<22} {:>7}  {:>9}  {:>10}  {:>10}  {}\n", "GPU", "NAME", "STATE",
                  "FOR", "UTIL P95", "MEM PEAK", "HEADROOM", "NOTE");
  for (const json& p : profiles) {
    auto index = Integer(p, "index");
    std::string p95 = "-";
    if (const json* windows = Find(p, "windows")) {
      if (const json* w = Find(*windows, "15m")) {
        if (const json* u = Find(*w, "util_percent")) {
          if (auto v = Number(*u, "p95")) p95 = Percent(*v);
        }
      }
    }
    const json* memory = Find(p, "memory");
    const json empty = json::object();
    const json& m = memory != nullptr ? *memory : empty;
    std::string note;
    if (auto why = Text(p, "insufficient_data"); why && !why->empty()) note = *why;
    if (const json* idle = Find(p, "allocated_idle")) {
      for (const json& holder : Array(*idle, "processes")) {
        note += (note.empty() ? "held by " : ", ") + Holder(holder);
      }
    }
    auto since = Number(p, "state_seconds");
    out += fmt::format("{:>3}  {:<10} {:<22} {:>7}  {:>9}  {:>10}  {:>10}  {}\n",
                       index ? std::to_string(*index) : "-",
                       Clip(ShortGpuModel(TextOr(p, "name", "")), 10),
                       Clip(ProfileStateText(p), 22), since ? HumanDuration(*since) : "-", p95,
                       BytesOr(Number(m, "peak_used_bytes")), BytesOr(Number(m, "headroom_bytes")),
                       note.empty() ? "" : Printable(note));
  }
  return out;
}

std::string RenderProfile(const json& p) {
  auto index = Integer(p, "index");
  auto seconds = Number(p, "state_seconds");
  // The state with its period; an allocated-idle one's time is the "for" that follows.
  const std::string state = TextOr(p, "state");
  std::string out = fmt::format("GPU {} ({}, {}): {}", index ? std::to_string(*index) : "?",
                                TextOr(p, "name"), TextOr(p, "uuid"),
                                state == "allocated-idle" ? state : ProfileStateText(p));
  out += seconds ? " for " + HumanDuration(*seconds) + " (since " + TextOr(p, "state_since") + ")"
                 : std::string();
  out += "\n";
  std::string inputs;
  for (const json& i : Array(p, "inputs")) {
    if (i.is_string()) inputs += (inputs.empty() ? "" : ", ") + Printable(i.get<std::string>());
  }
  out += "computed " + TextOr(p, "computed_at") + "; inputs: " + (inputs.empty() ? "-" : inputs);
  if (auto hz = Number(p, "util_rate_hz"); hz && *hz > 0) {
    out += fmt::format(" (utilisation at {:.1f} Hz)", *hz);
  }
  if (auto rate = Number(p, "launches_per_second")) {
    out += fmt::format("; {:.0f} kernel launches/s", *rate);
  }
  out += "\n";
  if (auto why = Text(p, "insufficient_data"); why && !why->empty()) {
    out += "insufficient data: " + *why + "\n";
  }
  if (const json* c = Find(p, "cycle")) {
    auto confidence = Number(*c, "confidence");
    auto cycles = Number(*c, "cycles_in_window");
    out += "cycle: period " + Seconds1(Number(*c, "period_s")) + ", confidence " +
           (confidence ? fmt::format("{:.2f}", *confidence) : std::string("-")) + " (" +
           TextOr(*c, "method") +
           (cycles ? fmt::format(", {:.1f} cycles in the window", *cycles) : std::string()) +
           ")\n";
    out += "  phase (seconds after " + TextOr(*c, "phase_origin") + "): utilisation peak +" +
           Seconds1(Number(*c, "util_peak_offset_s")) + ", trough +" +
           Seconds1(Number(*c, "util_trough_offset_s"));
    auto mem_peak = Number(*c, "memory_peak_offset_s");
    auto mem_trough = Number(*c, "memory_trough_offset_s");
    if (mem_peak || mem_trough) {
      out += "; memory peak +" + Seconds1(mem_peak) + ", trough +" + Seconds1(mem_trough);
    }
    out += "\n  next utilisation trough: " + TextOr(*c, "next_util_trough_at") + "\n";
  }
  if (const json* idle = Find(p, "allocated_idle")) {
    auto s = Number(*idle, "seconds");
    out += "allocated but idle for " + (s ? HumanDuration(*s) : std::string("-")) + ", " +
           BytesOr(Number(*idle, "memory_bytes")) + " held by:\n";
    const json& holders = Array(*idle, "processes");
    out += holders.empty() ? "  (processes not readable)\n" : ProcessTable(holders);
  } else if (!Array(p, "processes").empty()) {
    out += "processes:\n" + ProcessTable(Array(p, "processes"));
  }
  out += fmt::format("{:<7} {:>22}  {:>34}  {:>22}  {:>7}\n", "WINDOW", "UTIL P50 / P95 / P99",
                     "MEMORY USED P50 / P95 / P99", "POWER P50 / P95 / P99", "SAMPLES");
  const json* windows = Find(p, "windows");
  for (const char* name : {"1m", "15m", "1h"}) {
    const json* w = windows != nullptr ? Find(*windows, name) : nullptr;
    const json* util = w != nullptr ? Find(*w, "util_percent") : nullptr;
    const json* mem = w != nullptr ? Find(*w, "memory_used_bytes") : nullptr;
    const json* power = w != nullptr ? Find(*w, "power_w") : nullptr;
    auto samples = util != nullptr ? Integer(*util, "samples") : std::nullopt;
    out += fmt::format("{:<7} {:>22}  {:>34}  {:>22}  {:>7}\n", name, Quantiles(util, Percent),
                       Quantiles(mem, Bytes), Quantiles(power, Watts),
                       samples ? std::to_string(*samples) : "-");
  }
  if (const json* m = Find(p, "memory")) {
    auto window = Number(*m, "peak_window_s");
    out += "memory: peak " + BytesOr(Number(*m, "peak_used_bytes")) + " of " +
           BytesOr(Number(*m, "total_bytes")) +
           (window && *window > 0 ? " over the last " + HumanDuration(*window) : std::string()) +
           ", headroom " + BytesOr(Number(*m, "headroom_bytes")) + "\n";
  }
  const json& changes = Array(p, "phase_changes");
  if (changes.empty()) {
    out += "phase changes: none seen\n";
  } else {
    constexpr size_t kShown = 10;
    out += "phase changes (newest last" +
           (changes.size() > kShown ? fmt::format(", the last {} of {}", kShown, changes.size())
                                    : std::string()) +
           "):\n";
    for (size_t i = changes.size() > kShown ? changes.size() - kShown : 0; i < changes.size();
         ++i) {
      const json& c = changes[i];
      std::string what = TextOr(c, "kind") == "level"
                             ? TextOr(c, "to") + " (level)"
                             : TextOr(c, "from") + " -> " + TextOr(c, "to");
      const std::string detail = TextOr(c, "detail", "");
      out += "  " + TextOr(c, "at") + "  " + what + (detail.empty() ? "" : ": " + detail) + "\n";
    }
  }
  return out;
}

}  // namespace flyt::ctl
