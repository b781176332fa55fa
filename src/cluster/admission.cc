#include "cluster/admission.h"

#include "cluster/cluster.h"

namespace flyt::cluster {

http::Admission Admit(const Auth& auth, const ClusterConfig::RateLimits& limits,
                      const http::RequestHead& head) {
  http::Admission a;
  a.priority = http::IsHealthOrMetrics(head) ||
               (head.method == "POST" && head.path == "/api/v1/nodes/heartbeat");
  std::optional<Caller> who;
  if (head.bearer_token) who = auth.Identify(std::string(*head.bearer_token));
  if (!who) {
    a.limit = limits.anonymous;
    a.limit_key = "address:" + std::string(head.peer_ip);
    a.label = "anonymous";
    return a;
  }
  switch (who->role) {
    case Role::kNode: return a;  // never limited
    case Role::kViewer: a.limit = limits.viewer; break;
    case Role::kClient: a.limit = limits.client; break;
    case Role::kAdmin: a.limit = limits.admin; break;
  }
  a.label = RoleName(who->role);
  a.limit_key = a.label + ":" + who->name;
  return a;
}

std::vector<std::string> AdmissionLabels() { return {"viewer", "client", "admin", "anonymous"}; }

}  // namespace flyt::cluster
