// flytctl's tables of remote GPUs: `remote alloc|renew|list`, `clients` and `servers`. Built
// straight from the cluster manager's JSON (docs/api.md, "Remote leases"); a field that is absent
// or of another type prints as "-", and the lease's secret is printed by RenderRemoteLease only
// when asked (the answer to `remote alloc`), never by a list.
#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "ctl/render.h"
#include "ctl/render_fields.h"
#include "gpu/json.h"

namespace flyt::ctl {

using nlohmann::json;
using namespace render_fields;  // NOLINT: the never-throwing field readers

namespace {

std::string IntOr(std::optional<int64_t> v, const char* fallback = "-") {
  return v ? std::to_string(*v) : std::string(fallback);
}

std::string MibOr(std::optional<int64_t> v) { return v ? std::to_string(*v) + " MiB" : "-"; }

// "3 (H100)" from a lease's {"gpu": {"index", "name"}}.
std::string GpuCell(const json* gpu) {
  if (gpu == nullptr) return "-";
  auto index = Integer(*gpu, "index");
  std::string cell = IntOr(index, "?");
  if (auto name = Text(*gpu, "name"); name && !name->empty()) {
    cell += " (" + ShortGpuModel(*name) + ")";
  }
  return cell;
}

// A lease still holds its share while it is starting or ready (and, failed, until it is released
// or expires: the manager keeps it so the client learns why).
bool Live(const std::string& state) { return state == "starting" || state == "ready"; }

// A time the API gave as ISO text, or as milliseconds (or seconds) since the epoch.
std::string TimeText(const json& j, const char* key) {
  if (auto text = Text(j, key)) return text->empty() ? "-" : *text;
  if (auto n = Integer(j, key)) {
    const int64_t ms = *n > 100000000000 ? *n : *n * 1000;  // after 1973 in ms, else seconds
    return gpu::FormatTime(std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
  }
  return "-";
}

}  // namespace

std::string RenderRemoteLease(const json& lease, bool show_secret) {
  const std::string id = TextOr(lease, "id");
  const std::string state = TextOr(lease, "state");
  const json* gpu = Find(lease, "gpu");
  std::string sms = IntOr(Integer(lease, "sm_count")) + " SMs";
  std::string asked;
  if (auto a = Integer(lease, "sm_count_asked"); a && a != Integer(lease, "sm_count")) {
    asked = "asked " + std::to_string(*a);
  }
  if (auto pct = Integer(lease, "sm_percent")) {
    asked += (asked.empty() ? "" : ", ") + std::to_string(*pct) + "%";
  }
  if (!asked.empty()) sms += " (" + asked + ")";
  std::string out =
      fmt::format("remote lease {}: {} and {} of GPU {} on {}\n", id, sms,
                  MibOr(Integer(lease, "memory_mb")), GpuCell(gpu), TextOr(lease, "node"));
  const std::string reason = TextOr(lease, "reason", "");
  out +=
      fmt::format("state {}{}; client {}, owner {}\n", state, reason.empty() ? "" : " — " + reason,
                  TextOr(lease, "client"), TextOr(lease, "owner"));
  if (gpu != nullptr) out += "gpu " + TextOr(*gpu, "uuid") + "\n";
  const json* server = Find(lease, "server");
  const std::string address = server != nullptr ? TextOr(*server, "address") : "-";
  if (server != nullptr) {
    std::string detail = TextOr(*server, "state", "");
    if (auto pid = Integer(*server, "pid")) {
      detail += (detail.empty() ? "" : ", ") + std::string("pid ") + std::to_string(*pid);
    }
    out += "server " + address + (detail.empty() ? "" : " (" + detail + ")") + "\n";
  } else {
    out += "server - (not started)\n";
  }
  if (Live(state) || state == "-") {
    std::string expiry = "expires " + TextOr(lease, "expires_at");
    if (auto in = Number(lease, "expires_in_seconds")) {
      expiry += " (in " + HumanDuration(*in) + ")";
    } else if (auto ttl = Number(lease, "ttl_seconds")) {
      expiry += " (TTL " + HumanDuration(*ttl) + ")";
    }
    out += expiry + "; renew with: flytctl remote renew " + id + "\n";
  }
  if (const json* labels = Find(lease, "labels");
      labels != nullptr && labels->is_object() && !labels->empty()) {
    std::string text;
    for (const auto& [k, v] : labels->items()) {
      text += (text.empty() ? "" : " ") + Printable(k) + "=" +
              (v.is_string() ? Printable(v.get<std::string>()) : Printable(v.dump()));
    }
    out += "labels: " + text + "\n";
  }
  if (show_secret) {
    if (auto secret = Text(lease, "secret"); secret && !secret->empty()) {
      out += "secret " + *secret + " (shown once: lists never show it; keep it like a password)\n";
      out += "a program uses it with: FLYT_SERVER=" + address + " FLYT_SERVER_SECRET=" + *secret +
             " <program>\n";
    } else {
      out += "secret - (the manager sent none)\n";
    }
  }
  return out;
}

std::string RenderRemoteLeases(const json& answer) {
  const json& leases = Array(answer, "remote_leases");
  if (leases.empty()) return "No remote leases.\n";
  constexpr std::string_view kRow = "{:<20} {:<14} {:<14} {:<12} {:>5} {:>10}  {:<9} {:<22} {}\n";
  std::string out = fmt::format(kRow, "ID", "CLIENT", "NODE", "GPU", "SMS", "MEMORY", "STATE",
                                "SERVER", "EXPIRES");
  std::map<std::string, int> states;
  std::string reasons;
  for (const json& l : leases) {
    const std::string state = TextOr(l, "state");
    ++states[state];
    const json* server = Find(l, "server");
    auto in = Number(l, "expires_in_seconds");
    std::string expires = "-";
    if (in && Live(state)) expires = "in " + HumanDuration(*in);
    out += fmt::format(kRow, TextOr(l, "id"), Clip(TextOr(l, "client"), 14),
                       Clip(TextOr(l, "node"), 14), Clip(GpuCell(Find(l, "gpu")), 12),
                       IntOr(Integer(l, "sm_count")), MibOr(Integer(l, "memory_mb")), state,
                       Clip(server != nullptr ? TextOr(*server, "address") : "-", 22), expires);
    if (auto reason = Text(l, "reason"); reason && !reason->empty()) {
      reasons += TextOr(l, "id") + " " + state + ": " + *reason + "\n";
    }
  }
  out += reasons;
  out += fmt::format("{} remote lease(s): {}\n", leases.size(), render_fields::StateCounts(states));
  return out;
}

std::string RenderClients(const json& answer, std::chrono::system_clock::time_point now) {
  const json& clients = Array(answer, "clients");
  if (clients.empty()) {
    return "No client has registered (flyt-client-manager registers its node when it starts).\n";
  }
  // The remote leases last: a client node may hold several, and their ids are not cut.
  constexpr std::string_view kRow = "{:<20} {:<22} {:>6}  {:>10}  {:<24}  {}\n";
  std::string out =
      fmt::format(kRow, "NAME", "ADDRESS", "LEASES", "LAST SEEN", "LABELS", "REMOTE LEASES");
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  for (const json& c : clients) {
    std::string remote;
    for (const json& id : Array(c, "remote_leases")) {
      if (id.is_string()) remote += (remote.empty() ? "" : ",") + Printable(id.get<std::string>());
    }
    std::string seen = TextOr(c, "last_seen");
    if (auto ms = Integer(c, "last_seen_ms"); ms && *ms > 0) {
      seen = HumanDuration(static_cast<double>(now_ms - *ms) / 1000.0) + " ago";
    }
    std::string labels;
    if (const json* l = Find(c, "labels"); l != nullptr && l->is_object()) {
      for (const auto& [k, v] : l->items()) {
        labels += (labels.empty() ? "" : " ") + Printable(k) + "=" +
                  (v.is_string() ? Printable(v.get<std::string>()) : Printable(v.dump()));
      }
    }
    out += fmt::format(kRow, Clip(TextOr(c, "name"), 20), Clip(TextOr(c, "address"), 22),
                       IntOr(Integer(c, "leases")), seen, labels.empty() ? "-" : Clip(labels, 24),
                       remote.empty() ? "-" : remote);
  }
  return out;
}

std::string RenderGpuServers(const json& answer) {
  const json& servers = Array(answer, "servers");
  if (servers.empty()) return "No GPU servers.\n";
  constexpr std::string_view kRow =
      "{:<14} {:<20} {:>3}  {:<8} {:<22} {:>7} {:>5} {:>10}  {:<24} {}\n";
  std::string out = fmt::format(kRow, "NODE", "LEASE", "GPU", "STATE", "ADDRESS", "PID", "SMS",
                                "MEMORY", "STARTED", "REASON");
  std::map<std::string, int> states;
  for (const json& s : servers) {
    const std::string state = TextOr(s, "state");
    ++states[state];
    // What the device granted when the server said so, else what was asked.
    auto sms = Integer(s, "sm_count_granted");
    if (!sms) sms = Integer(s, "sm_count");
    out += fmt::format(kRow, Clip(TextOr(s, "node"), 14), Clip(TextOr(s, "lease_id"), 20),
                       IntOr(Integer(s, "gpu_index")), state, Clip(TextOr(s, "address"), 22),
                       IntOr(Integer(s, "pid")), IntOr(sms), MibOr(Integer(s, "memory_mb")),
                       Clip(TimeText(s, "started_at"), 24), TextOr(s, "reason"));
  }
  out += fmt::format("{} GPU server(s): {}\n", servers.size(), render_fields::StateCounts(states));
  return out;
}

namespace {

std::string PlaceText(const json* place) {
  if (place == nullptr) return "-";
  return TextOr(*place, "node") + ":" + IntOr(Integer(*place, "gpu"));
}

}  // namespace

std::string RenderRemoteMigration(const json& lease) {
  const json* m = Find(lease, "migration");
  if (m == nullptr) return RenderRemoteLease(lease, false);
  const auto moved = Integer(*m, "moved").value_or(0);
  const auto left = Integer(*m, "left_behind").value_or(0);
  std::string out = fmt::format(
      "moved {} from {} to {}: {} client{}, {} MiB, longest pause {} ms; server {}\n",
      TextOr(lease, "id"), PlaceText(Find(*m, "from")), PlaceText(Find(*m, "to")), moved,
      moved == 1 ? "" : "s", Integer(*m, "bytes").value_or(0) >> 20,
      fmt::format("{:.1f}", Number(*m, "pause_ms_max").value_or(0)), TextOr(*m, "server"));
  if (left > 0) {
    out += fmt::format("{} client{} did not move and lost their GPU state:\n", left,
                       left == 1 ? "" : "s");
    if (const json* clients = Find(*m, "clients"); clients != nullptr && clients->is_array()) {
      for (const json& c : *clients) {
        if (TextOr(c, "outcome") == "moved") continue;
        out += "  client " + IntOr(Integer(c, "client_id")) + ": " + TextOr(c, "outcome") + " — " +
               Printable(TextOr(c, "message")) + "\n";
      }
    }
  }
  return out + RenderRemoteLease(lease, false);
}

std::string RenderRemoteResize(const json& lease) {
  const json* r = Find(lease, "resize");
  if (r == nullptr) return RenderRemoteLease(lease, false);
  std::string out = fmt::format("resized {}: {} → {} SMs, {} → {}", TextOr(lease, "id"),
                                IntOr(Integer(*r, "sm_count_before")), IntOr(Integer(*r, "sm_count")),
                                MibOr(Integer(*r, "memory_mb_before")), MibOr(Integer(*r, "memory_mb")));
  if (const json* server = Find(*r, "server"); server != nullptr) {
    const auto pending = Integer(*server, "clients_pending").value_or(0);
    out += fmt::format("; granted {} SMs; {} of {} clients applied it", 
                       IntOr(Integer(*server, "sm_count_granted")),
                       IntOr(Integer(*server, "clients_applied")), IntOr(Integer(*server, "clients")));
    if (pending > 0) out += fmt::format(" ({} at their next CUDA call)", pending);
    if (auto pause = Number(*server, "pause_ms_max")) out += fmt::format(", longest pause {:.1f} ms", *pause);
  }
  return out + "\n" + RenderRemoteLease(lease, false);
}

std::string RenderDrain(const json& answer) {
  const std::string node = TextOr(answer, "node");
  std::string out = "node " + node + " cordoned: no new lease lands on it (undo: flytctl nodes uncordon " +
                    node + ")\n";
  const json& moves = Array(answer, "remote_leases");
  if (moves.empty()) out += "no remote lease to move\n";
  for (const json& m : moves) {
    if (TextOr(m, "outcome") == "moved") {
      out += "  " + TextOr(m, "lease_id") + ": moved to " + PlaceText(Find(m, "to")) + "\n";
    } else {
      out += "  " + TextOr(m, "lease_id") + ": NOT moved — " + Printable(TextOr(m, "message")) + "\n";
    }
  }
  out += fmt::format("{} moved, {} failed", IntOr(Integer(answer, "moved")),
                     IntOr(Integer(answer, "failed")));
  if (auto other = Integer(answer, "other_leases"); other && *other > 0) {
    out += fmt::format("; {} job lease{} stay until {} end", *other, *other == 1 ? "" : "s",
                       *other == 1 ? "it" : "they");
  }
  return out + "\n";
}

}  // namespace flyt::ctl
