// `flytctl nodes` (and `nodes remove`), `events` and `whoami`: the cluster manager's inventory and log.
#include <chrono>
#include <string>

#include <cstdio>

#include "ctl/commands.h"
#include "ctl/render.h"

namespace flyt::ctl {

int RunNodes(const GlobalFlags& g, const std::string& name) {
  if (!name.empty() && BadId(name, "node")) return kExitUsage;
  return WithManager(g, [&](Manager& m) {
    if (name.empty()) {
      return m.Print(m.client().Get("/api/v1/nodes"), "cannot list the nodes", "nodes",
                     RenderNodes);
    }
    return m.Print(m.client().Get("/api/v1/nodes/" + name), "cannot show node " + name, nullptr,
                   RenderNode);
  });
}

int RunNodesRemove(const GlobalFlags& g, const std::string& name, bool force) {
  if (BadId(name, "node")) return kExitUsage;
  return WithManager(g, [&](Manager& m) {
    return m.Print(m.client().Delete("/api/v1/nodes/" + name + (force ? "?force=true" : "")),
                   "cannot remove node " + name, nullptr, [&](const nlohmann::json& j) {
                     std::string out = "removed node " + name;
                     const nlohmann::json* leases = j.is_object() && j.contains("leases_released")
                                                        ? &j["leases_released"]
                                                        : nullptr;
                     if (leases != nullptr && leases->is_array() && !leases->empty()) {
                       out += "; released " + std::to_string(leases->size()) + " lease(s):";
                       for (const nlohmann::json& id : *leases) {
                         if (id.is_string()) out += " " + id.get<std::string>();
                       }
                     }
                     return out + "\n";
                   });
  });
}

int RunNodesDrain(const GlobalFlags& g, const std::string& name, int64_t timeout_s) {
  if (BadId(name, "node")) return kExitUsage;
  return WithManager(g, [&](Manager& m) {
    // Each of the node's remote leases moves in turn.
    m.client().SetTimeouts(std::chrono::seconds(10), std::chrono::hours(1));
    auto answer = m.client().Post("/api/v1/nodes/" + name + "/drain", {{"timeout_s", timeout_s}});
    const int code = m.Print(answer, "cannot drain node " + name, nullptr, RenderDrain);
    // Some lease could not move: the drain is not complete, and the exit status says so.
    if (code == kExitOk && answer.ok() && answer->value("failed", 0) > 0) return kExitError;
    return code;
  });
}

int RunNodesUncordon(const GlobalFlags& g, const std::string& name) {
  if (BadId(name, "node")) return kExitUsage;
  return WithManager(g, [&](Manager& m) {
    return m.Print(m.client().Post("/api/v1/nodes/" + name + "/uncordon", nlohmann::json::object()),
                   "cannot uncordon node " + name, nullptr, [&](const nlohmann::json&) {
                     return "node " + name + " uncordoned: new leases may land on it again\n";
                   });
  });
}

int RunEvents(const GlobalFlags& g, std::optional<int64_t> after, std::optional<int64_t> limit) {
  // Without --after: the newest events (50 unless --limit), the way `tail` shows a log.
  std::string query = after ? "after=" + std::to_string(*after) +
                                  (limit ? "&limit=" + std::to_string(*limit) : std::string())
                            : "latest=" + std::to_string(limit.value_or(50));
  return WithManager(g, [&](Manager& m) {
    auto answer = m.client().Get("/api/v1/events?" + query);
    const int code = m.Print(answer, "cannot list the events", "events", RenderEvents);
    // A page: the manager says when more follow, and where the next one starts.
    if (after && answer.ok() && answer->is_object() && answer->value("more", false) && !g.json) {
      std::fprintf(stderr, "(more events follow: --after %lld)\n",
                   static_cast<long long>(answer->value("next_after", int64_t{0})));
    }
    return code;
  });
}

int RunWhoami(const GlobalFlags& g) {
  return WithManager(g, [&](Manager& m) {
    return m.Print(m.client().Get("/api/v1/whoami"), "cannot ask who I am", nullptr,
                   [&](const nlohmann::json& j) { return RenderWhoami(j, m.url()); });
  });
}

}  // namespace flyt::ctl
