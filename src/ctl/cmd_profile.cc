// `flytctl profile [INDEX]`: GPU usage profiles (issue 16) — every GPU's in one table, or one
// GPU's in full. Read from a node manager (--node URL; by default this machine's at
// kDefaultNodeManager: GET /api/v1/profiles, GET /api/v1/gpus/{index}/profile) or from the
// cluster manager (--server URL --node-name NAME: the "profile" of that node's GPUs in GET
// /api/v1/gpus, GET /api/v1/nodes/{name}/gpus/{index}). --json prints the API's JSON.
#include <string>

#include "common/http.h"
#include "common/json.h"
#include "ctl/commands.h"
#include "ctl/render.h"

namespace flyt::ctl {

namespace {

using nlohmann::json;

int RunNodeProfile(const GlobalFlags& g, const ProfileArgs& a, SourceChoice choice) {
  auto client = http::JsonClient::Connect(choice.url, g.token, "the node manager");
  if (!client.ok()) return Fail(client.status().message(), kExitUsage);
  choice.url = (*client)->url();
  return Repeat(a.watch_s, g.json, [&]() -> Result<std::string> {
    if (a.index) {
      const std::string index = std::to_string(*a.index);
      auto profile = (*client)->Get("/api/v1/gpus/" + index + "/profile");
      if (!profile.ok()) {
        return Explained(profile.status(), "cannot read the profile of GPU " + index, choice.url,
                         Peer::kNodeManager);
      }
      if (g.json) return DumpJson(*profile, a.watch_s ? -1 : 2) + "\n";
      return SourceLine(choice) + RenderProfile(*profile);
    }
    auto all = (*client)->Get("/api/v1/profiles");
    if (!all.ok()) {
      return Explained(all.status(), "cannot read the GPU profiles", choice.url,
                       Peer::kNodeManager);
    }
    if (!all->is_object() || !all->contains("profiles") || !(*all)["profiles"].is_array()) {
      return Internal("unexpected answer from " + choice.url +
                      " (no \"profiles\" list); is it a flyt node manager of this version?");
    }
    if (g.json) return DumpJson(*all, a.watch_s ? -1 : 2) + "\n";
    return SourceLine(choice) + RenderProfiles(*all);
  });
}

// What the cluster manager has of one node's profiles: from its GPU list (one call).
Result<json> ClusterNodeProfiles(Manager& m, const std::string& node) {
  auto gpus = m.client().Get("/api/v1/gpus");
  if (!gpus.ok()) return Explained(gpus.status(), "cannot list the GPUs", m.url());
  if (!gpus->is_object() || !gpus->contains("gpus") || !(*gpus)["gpus"].is_array()) {
    return Internal("unexpected answer from " + m.url() +
                    " (no \"gpus\" list); is it a flyt cluster manager?");
  }
  json profiles = json::array();
  bool known = false;
  for (const json& gpu : (*gpus)["gpus"]) {
    if (!gpu.is_object() || gpu.value("node", std::string()) != node) continue;
    known = true;
    if (gpu.contains("profile") && gpu["profile"].is_object()) profiles.push_back(gpu["profile"]);
  }
  if (!known) {
    return Status(StatusCode::kNotFound, "no node " + node + " with GPUs at " + m.url() +
                                             " (flytctl nodes lists them)")
        .WithReason("not_found");
  }
  if (profiles.empty()) {
    return Status(StatusCode::kUnavailable,
                  "node " + node + " sends no GPU profiles (its [profile] enabled = false, an " +
                      "older node manager, or no heartbeat since the cluster manager started)")
        .WithReason("unavailable");
  }
  return json{{"node", node}, {"profiles", profiles}};
}

int RunClusterProfile(const GlobalFlags& g, const ProfileArgs& a) {
  if (a.node_name.empty()) {
    return Fail("--server reads the cluster manager: name the node with --node-name NAME "
                "(flytctl nodes lists them), or ask the node itself with --node URL",
                kExitUsage);
  }
  if (!CheckId(a.node_name, "node name").ok()) {
    return Fail("--node-name: not a node name: " + a.node_name, kExitUsage);
  }
  return WithManager(g, [&](Manager& m) {
    SourceChoice shown{SourceKind::kClusterManager, m.url()};
    return Repeat(a.watch_s, g.json, [&]() -> Result<std::string> {
      if (!a.index) {
        FLYT_ASSIGN_OR_RETURN(json all, ClusterNodeProfiles(m, a.node_name));
        if (g.json) return DumpJson(all, a.watch_s ? -1 : 2) + "\n";
        return SourceLine(shown) + "node " + a.node_name + " (as of its last heartbeat)\n" +
               RenderProfiles(all);
      }
      const std::string index = std::to_string(*a.index);
      auto gpu = m.client().Get("/api/v1/nodes/" + a.node_name + "/gpus/" + index);
      if (!gpu.ok()) {
        return Explained(gpu.status(),
                         "cannot read GPU " + index + " of node " + a.node_name, m.url());
      }
      if (!gpu->is_object() || !gpu->contains("profile") || !(*gpu)["profile"].is_object()) {
        return Status(StatusCode::kUnavailable,
                      "node " + a.node_name + " sends no profile of GPU " + index +
                          " (its [profile] enabled = false, an older node manager, or no "
                          "heartbeat since the cluster manager started)")
            .WithReason("unavailable");
      }
      if (g.json) return DumpJson((*gpu)["profile"], a.watch_s ? -1 : 2) + "\n";
      return SourceLine(shown) + "node " + a.node_name + " (as of its last heartbeat)\n" +
             RenderProfile((*gpu)["profile"]);
    });
  });
}

}  // namespace

int RunProfile(const GlobalFlags& g, const ProfileArgs& a) {
  if (!g.node.empty() && !g.server.empty()) {
    return Fail("give --node URL (a node manager) or --server URL --node-name NAME, not both",
                kExitUsage);
  }
  if (!g.server.empty()) return RunClusterProfile(g, a);
  if (!a.node_name.empty()) {
    return Fail("--node-name goes with --server URL (the cluster manager)", kExitUsage);
  }
  SourceChoice choice{SourceKind::kNodeManager, g.node.empty() ? kDefaultNodeManager : g.node};
  return RunNodeProfile(g, a, choice);
}

}  // namespace flyt::ctl
