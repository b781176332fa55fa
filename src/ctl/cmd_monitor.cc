// `flytctl monitor start|show|stop|list --node URL`: a node manager's monitoring sessions.
#include <cstdio>
#include <string>

#include "common/http.h"
#include "ctl/commands.h"
#include "ctl/render.h"
#include "gpu/json.h"

namespace flyt::ctl {

int RunMonitor(const GlobalFlags& g, const MonitorArgs& a) {
  if (g.node.empty()) return Fail("monitor " + a.action + " needs --node URL", kExitUsage);
  auto client = http::JsonClient::Connect(g.node, g.token, "the node manager");
  if (!client.ok()) return Fail(client.status().message(), kExitUsage);
  Result<nlohmann::json> answer = Internal("no action");
  if (a.action == "start") {
    nlohmann::json body = nlohmann::json::object();
    if (!a.gpus.empty()) body["gpus"] = a.gpus;
    if (a.interval_s) body["interval_seconds"] = *a.interval_s;
    answer = (*client)->Post("/api/v1/monitoring/sessions", body);
    if (answer.ok() && !g.json) {
      if (!answer->is_object() || !(*answer)["id"].is_string()) {
        return Fail("unexpected answer from the node (no session id)");
      }
      std::printf("%s\n", Printable((*answer)["id"].get<std::string>()).c_str());
      return kExitOk;
    }
  } else if (a.action == "list") {
    answer = (*client)->Get("/api/v1/monitoring/sessions");
    if (answer.ok() && !g.json) {
      if (!answer->is_object() || !(*answer)["sessions"].is_array()) {
        return Fail("unexpected answer from the node (no session list)");
      }
      for (const auto& s : (*answer)["sessions"]) {
        if (s.is_string()) std::printf("%s\n", Printable(s.get<std::string>()).c_str());
      }
      return kExitOk;
    }
  } else {
    if (BadId(a.id, "monitoring session")) return kExitUsage;
    const std::string path = "/api/v1/monitoring/sessions/" + a.id;
    answer = a.action == "stop" ? (*client)->Delete(path) : (*client)->Get(path);
    if (answer.ok() && !g.json) {
      auto stats = gpu::SessionStatsFromJson(*answer);
      if (!stats.ok()) return Fail("unexpected answer: " + stats.status().message());
      std::fputs(RenderSession(*stats).c_str(), stdout);
      return kExitOk;
    }
  }
  // The node's own words, as scripts have matched them so far (URL and HTTP status included).
  if (!answer.ok()) return Fail(answer.status());
  std::printf("%s\n", gpu::DumpJson(*answer, 2).c_str());
  return kExitOk;
}

}  // namespace flyt::ctl
