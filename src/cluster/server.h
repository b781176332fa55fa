// ClusterServer: flyt-cluster-manager's HTTP endpoint — the v1 JSON API (docs/api.md), the live
// stream (Server-Sent Events), /metrics, /healthz and the dashboard's files — over a Cluster.
//
// Every request is routed through one table of (path, method, access): an unknown path is 404, a
// wrong method 405 (with Allow), a missing or unknown token 401, a role that may not do it 403 —
// all as JSON {"error": ...}. Handlers validate every field (400 with the field named); a request
// the ledger cannot meet is 409 with the reasons per node. The dashboard's files are public (they
// hold no data); everything they show comes from the API with the viewer's token. A live stream
// holds one pool thread while it is open, so their number is capped (web.max_streams) and the
// pool is that much larger. Start/Stop are not thread-safe with each other; handlers run on the
// server's thread pool; Stop ends open streams first.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/auth.h"
#include "cluster/cluster.h"
#include "cluster/web_assets.h"
#include "common/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace flyt::cluster {

class ClusterServer {
 public:
  // `web`: the dashboard's files; without them / says how to build the dashboard.
  ClusterServer(Cluster& cluster, Auth auth, const ClusterConfig& config, std::string version,
                std::optional<WebAssets> web = std::nullopt);
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
  void AddWebRoutes();
  void Stream(httplib::Response& res);
  void ServeFile(const httplib::Request& req, httplib::Response& res, const std::string& name);
  void ProxyHistory(const httplib::Request& req, httplib::Response& res, const std::string& node,
                    const std::string& index);
  // Sleeps `d`, or less when Stop begins. False once stopping.
  bool Pause(std::chrono::milliseconds d);
  void Dispatch(const httplib::Request& req, httplib::Response& res);
  static bool Allowed(Access access, Role role);

  Cluster& cluster_;
  const Auth auth_;
  const ClusterConfig config_;
  const std::string version_;
  const std::optional<WebAssets> web_;
  std::atomic<int> streams_{0};
  std::mutex closing_mu_;
  std::condition_variable closing_cv_;
  bool closing_ = false;  // guarded by closing_mu_
  std::vector<Route> routes_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace flyt::cluster
