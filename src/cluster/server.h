// ClusterServer: flyt-cluster-manager's HTTP endpoint — the v1 JSON API (docs/api.md), the live
// stream (Server-Sent Events), /metrics, /healthz and the dashboard's files — over a Cluster.
//
// Every request is routed through one table of (method, path, access) — common/http_router.h —
// with this file's role check: an unknown path is 404, a wrong method 405 (with Allow), a missing
// or unknown token 401, a role that may not do it 403. Every error is JSON {"error", "code"}
// (docs/api.md, "Errors"), its HTTP status from HttpStatusOf below. Handlers validate every field
// (400 with the field named); a request the ledger cannot meet is 409 with the reasons per node.
// The dashboard's files are public (they hold no data); everything they show comes from the API
// with the viewer's token. A live stream holds one pool thread while it is open, so their number is
// capped (web.max_streams) and the pool is that much larger. Start/Stop are not thread-safe with
// each other; handlers run on the server's thread pool; Stop ends open streams first.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cluster/auth.h"
#include "cluster/cluster.h"
#include "cluster/web_assets.h"
#include "common/http_router.h"
#include "common/http_server.h"
#include "common/mutex.h"
#include "common/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace flyt::cluster {

// The HTTP status of an error of the cluster's API. By reason: insufficient_gpus, never_fits,
// already_ended 409; too_many_queued 429; payload_too_large 413; store_unavailable 503. Without
// one, by StatusCode (http::HttpStatus), except that a refusal the cluster cannot meet now
// (kResourceExhausted) is a conflict with its state, 409, not a rate limit.
int HttpStatusOf(const Status& status);

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
  using Router = http::Router<Access, Caller>;
  using Handler = Router::Handler;
  void AddRoutes();
  void AddWebRoutes();
  void Stream(httplib::Response& res);
  void ServeFile(const httplib::Request& req, httplib::Response& res, const std::string& name);
  void ProxyHistory(const httplib::Request& req, httplib::Response& res, const std::string& node,
                    const std::string& index);
  // Sleeps `d`, or less when Stop begins. False once stopping.
  bool Pause(std::chrono::milliseconds d);
  // The router's access check: who asks, and whether that role may use a route of `access`.
  Result<Caller> Identify(const httplib::Request& req, const Access& access) const;
  static bool Allowed(Access access, Role role);

  Cluster& cluster_;
  const Auth auth_;
  const ClusterConfig config_;
  const std::string version_;
  const std::optional<WebAssets> web_;
  std::atomic<int> streams_{0};
  Mutex closing_mu_;
  CondVar closing_cv_;
  bool closing_ FLYT_GUARDED_BY(closing_mu_) = false;
  Router router_;
  std::unique_ptr<http::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace flyt::cluster
