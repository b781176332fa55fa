// Server discovery: how flyt's libcudart finds its GPU server when FLYT_SERVER is not set. It
// asks the machine's flyt-client-manager (a Unix socket, FLYT_CLIENT_MANAGER, default
// /run/flyt/client-manager.sock) for a lease on a remote GPU share and gets back the server's
// address and the lease's secret (docs/design.md, "flyt-client-manager").
//
// The connection to the manager stays open for the life of the process: the manager counts the
// program as connected while it is open (the kernel closes it at exit, crash or kill -9) and
// releases the lease a grace after the last program went. The manager may push events on it
// ({"event":"lease_failed"}), which a watcher thread logs.
//
// Every failure is a CudaStatus with a message that names the socket and the reason, and every
// wait is bounded (FLYT_CLIENT_MANAGER_TIMEOUT_MS, default 60000): no manager listening →
// cudaErrorNoDevice; no answer in time, or the cluster has no room now (insufficient_gpus) →
// cudaErrorDevicesUnavailable (worth trying again later); any other refusal (never_fits,
// unavailable, unauthenticated, ...) → cudaErrorNoDevice; a bad FLYT_REMOTE_* or
// FLYT_CLIENT_MANAGER_TIMEOUT_MS → cudaErrorInitializationError naming the variable.
//
// A dead server: when the program cannot connect to the server it was given (refused, socket
// gone, unreachable), ReplaceDeadServer tells the manager ({"op":"server_dead"} on the session's
// connection). The manager checks the address itself and, when the server is gone, drops the
// lease and asks the cluster for a new one; the runtime then asks once more and gets the new
// server. A manager that finds the server alive (or has replaced one too recently) keeps the
// lease, and the program keeps its own connect error.
//
// Thread-safety: Acquire may be called from any thread; a ManagerSession is owned by one holder
// (the Runtime, under its connect lock) and its watcher thread only logs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "remote/cuda_status.h"

namespace spdlog {
class logger;
}

namespace flyt::remote {

inline constexpr const char* kDefaultClientManagerSocket = "/run/flyt/client-manager.sock";

struct DiscoveryOptions {
  std::string socket_path = kDefaultClientManagerSocket;
  std::chrono::milliseconds timeout{60000};
  nlohmann::json profile;  // null, or {"sm_count"|"sm_percent", "memory_mb", "gpu_model"}
  std::string program;
  uint32_t pid = 0;

  // From FLYT_CLIENT_MANAGER, FLYT_CLIENT_MANAGER_TIMEOUT_MS and FLYT_REMOTE_SM_COUNT,
  // FLYT_REMOTE_SM_PERCENT, FLYT_REMOTE_MEMORY_MB, FLYT_REMOTE_GPU_MODEL, read through `getenv`.
  static CudaResult<DiscoveryOptions> FromEnvironment(
      const std::function<const char*(const char*)>& getenv);
};

// Whether a failure to open a connection to a leased server says the server is out of reach
// (connection refused, its socket gone, no route): worth a server_dead report.
bool ServerOutOfReach(const std::string& connect_error);

// What the manager answered.
struct LeasedServer {
  std::string address;  // HOST:PORT or unix:PATH
  std::string secret;
  std::string lease_id;
  std::string node;
  std::string gpu_uuid;
  std::optional<int64_t> sm_count;
  std::optional<int64_t> memory_mb;
};

class ManagerSession {
 public:
  // Connects to the manager, asks for a lease and waits for the answer (at most
  // options.timeout in all).
  static CudaResult<std::unique_ptr<ManagerSession>> Acquire(
      const DiscoveryOptions& options);
  ~ManagerSession();
  ManagerSession(const ManagerSession&) = delete;
  ManagerSession& operator=(const ManagerSession&) = delete;

  const LeasedServer& server() const { return server_; }
  const std::string& socket_path() const { return socket_path_; }
  // Starts the thread that logs what the manager pushes, and its going away, on `log`.
  void Watch(std::shared_ptr<spdlog::logger> log);

  // Reports this session's server dead (before Watch) and waits, at most `timeout`, for the
  // manager's verdict: Ok when it replaced the lease; else why not (kDevicesUnavailable).
  CudaStatus ReportDeadServer(std::chrono::milliseconds timeout);
  // ReportDeadServer on `dead`, then, when the manager replaced the lease, a new Acquire (the
  // old session is closed first). Either failure is the status, naming the manager's reason.
  static CudaResult<std::unique_ptr<ManagerSession>> ReplaceDeadServer(
      std::unique_ptr<ManagerSession> dead, const DiscoveryOptions& options);

 private:
  ManagerSession() = default;

  UniqueFd fd_;
  std::string socket_path_;
  std::string pending_;  // bytes after the answer's line
  LeasedServer server_;
  std::shared_ptr<std::atomic<bool>> closing_ = std::make_shared<std::atomic<bool>>(false);
  std::thread watcher_;
};

}  // namespace flyt::remote
