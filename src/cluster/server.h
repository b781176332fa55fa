// ClusterServer: flyt-cluster-manager's HTTP endpoint — the v1 JSON API (docs/api.md),
// /metrics and /healthz — over a Cluster.
//
// Every request is routed through one table of (path, method, access): an unknown path is 404, a
// wrong method 405 (with Allow), a missing or unknown token 401, a role that may not do it 403 —
// all as JSON {"error": ...}. Handlers validate every field (400 with the field named); a request
// the ledger cannot meet is 409 with the reasons per node. Start/Stop are not thread-safe with
// each other; handlers run on the server's thread pool.
#pragma once

#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/auth.h"
#include "cluster/cluster.h"
#include "common/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace flyt::cluster {

class ClusterServer {
 public:
  ClusterServer(Cluster& cluster, Auth auth, const ClusterConfig& config, std::string version);
  ~ClusterServer();
  ClusterServer(const ClusterServer&) = delete;
  ClusterServer& operator=(const ClusterServer&) = delete;

  Status Start();
  void Stop();
  int port() const { return port_; }

 private:
  enum class Access { kPublic, kAny, kRead, kClient, kNode, kAdmin };
  using Handler = std::function<void(const httplib::Request&, httplib::Response&, const Caller&,
                                     const std::smatch&)>;
  struct Route {
    std::regex pattern;
    std::string method;
    Access access;
    Handler handler;
  };
  void AddRoutes();
  void Dispatch(const httplib::Request& req, httplib::Response& res);
  static bool Allowed(Access access, Role role);

  Cluster& cluster_;
  const Auth auth_;
  const ClusterConfig config_;
  const std::string version_;
  std::vector<Route> routes_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace flyt::cluster
