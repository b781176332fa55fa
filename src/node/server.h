// NodeServer: flyt-node-manager's HTTP endpoint — /metrics, /healthz and the v1 JSON API
// (docs/api.md) over a Monitor.
//
// Handlers only read what the Monitor already holds (its last snapshot, history, events) or
// open/close its sessions, so a request never waits on NVML and a bad request never disturbs
// sampling. Requests are routed by one table (common/http_router.h). Every error is JSON
// {"error", "code"} with a 4xx/5xx status: unknown route 404, wrong method 405 (with Allow),
// malformed or invalid body 400, oversized body 413, missing or wrong bearer token 401 (checked
// first, for every path but /healthz, so that without the token no path is revealed). The CUDA
// tracer's figures are read from a StatsSource (GET /api/v1/processes, /api/v1/processes/{pid}/cuda,
// /api/v1/trace, and /metrics). GPU servers for remote leases (PUT/GET/DELETE
// /api/v1/gpu-servers...) are a GpuServers' when [gpu-servers] is enabled. The GPUs' usage
// profiles (GET /api/v1/profiles, /api/v1/gpus/{index}/profile, "profile" on each GPU of
// /api/v1/gpus, and /metrics) are read from a ProfileSource; 503 when [profile] is off. The server
// runs its own thread pool; Start/Stop are not thread-safe with each other, handlers are.
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <variant>

#include "common/clock.h"
#include "common/http_router.h"
#include "common/http_server.h"
#include "common/mutex.h"
#include "common/status.h"
#include "gpu/monitor.h"
#include "node/config.h"
#include "node/gpu_servers.h"
#include "node/profiling.h"
#include "trace/stats.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace flyt::node {

class KubeAnnotationPublisher;

class NodeServer {
 public:
  // `cuda`: the CUDA tracer's statistics (tracing.h), or null when there is no tracer;
  // `gpu_servers`: the GPU server supervisor, or null when [gpu-servers] is off; `profiles`: the
  // usage profiles (profiling.h), or null when [profile] is off. All must outlive the server.
  NodeServer(gpu::Monitor& monitor, NodeConfig config, const Clock& clock, std::string version,
             const trace::StatsSource* cuda = nullptr, GpuServers* gpu_servers = nullptr,
             const ProfileSource* profiles = nullptr);
  ~NodeServer();
  NodeServer(const NodeServer&) = delete;
  NodeServer& operator=(const NodeServer&) = delete;

  // The Kubernetes annotation publisher (kube_annotations.h) whose status GET /api/v1/kubernetes
  // shows and whose series /metrics adds; null with `off_status` (DisabledStatusJson) when it is
  // off. Call before Start(); the publisher must outlive the server.
  void SetKubernetes(const KubeAnnotationPublisher* publisher, nlohmann::json off_status);

  // Binds the configured address (port 0 picks a free one) and starts serving.
  Status Start();
  void Stop();
  int port() const { return port_; }

 private:
  // kToken: the bearer token, when one is configured.
  enum class Access { kPublic, kToken };
  using Caller = std::monostate;  // one token: nothing to tell callers apart
  using Router = http::Router<Access, Caller>;

  void SetUpRoutes();
  void SetUpGpuServerRoutes();
  void SetUpProfileRoutes();
  // The router's access check.
  Result<Caller> Identify(const httplib::Request& req, const Access& access) const;

  gpu::Monitor& monitor_;
  const trace::StatsSource* const cuda_;
  GpuServers* const gpu_servers_;
  const ProfileSource* const profiles_;
  const KubeAnnotationPublisher* kube_ = nullptr;
  nlohmann::json kube_off_;
  const NodeConfig config_;
  const Clock& clock_;
  const std::string version_;
  const std::chrono::steady_clock::time_point started_;
  Router router_;
  std::unique_ptr<http::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<uint64_t> scrapes_{0};
  // GET /api/v1/gpus serialised once per snapshot (and profile update), not once per request.
  Mutex gpus_mu_;
  std::chrono::system_clock::time_point gpus_taken_at_ FLYT_GUARDED_BY(gpus_mu_);
  std::chrono::system_clock::time_point gpus_profiled_at_ FLYT_GUARDED_BY(gpus_mu_);
  std::shared_ptr<const std::string> gpus_body_ FLYT_GUARDED_BY(gpus_mu_);
};

}  // namespace flyt::node
