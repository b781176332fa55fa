// FakeCluster: a loopback HTTP server playing flyt-cluster-manager's remote-lease endpoints
// (docs/api.md, "Remote leases") for the client manager's tests, with switches for refusals,
// failures and a manager that never answers. Thread-safe: the switches and counters are atomics
// or under a mutex; handlers run on httplib's threads.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/http.h"

namespace flyt::client_manager {

class FakeCluster {
 public:
  enum class CreateMode { kGrant, kInsufficient, kNeverFits, kHang, kNotReady };
  enum class RenewMode { kOk, kLeaseFailed, kAlreadyEnded, kNotFound, kDown };

  FakeCluster() {
    server_.Post("/api/v1/remote-leases", [this](const httplib::Request& req,
                                                 httplib::Response& res) { Create(req, res); });
    server_.Post(R"(/api/v1/remote-leases/([^/]+)/renew)",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   ++renews;
                   switch (renew_mode.load()) {
                     case RenewMode::kOk:
                       http::SendJson(res, 200, nlohmann::json{{"id", req.matches[1].str()}});
                       return;
                     case RenewMode::kLeaseFailed:
                       http::SendError(res, 409, "the GPU server of this lease exited with signal 9",
                                       "lease_failed");
                       return;
                     case RenewMode::kAlreadyEnded:
                       http::SendError(res, 409, "lease expired", "already_ended");
                       return;
                     case RenewMode::kNotFound:
                       http::SendError(res, 404, "no such remote lease", "not_found");
                       return;
                     case RenewMode::kDown:
                       http::SendError(res, 503, "store down", "store_unavailable");
                       return;
                   }
                 });
    server_.Delete(R"(/api/v1/remote-leases/([^/]+))",
                   [this](const httplib::Request& req, httplib::Response& res) {
                     {
                       std::lock_guard<std::mutex> lock(mu_);
                       deleted_.push_back(req.matches[1].str());
                     }
                     http::SendJson(res, 200, nlohmann::json{{"released", req.matches[1].str()}});
                   });
    auto port = http::Listen(server_, "127.0.0.1", 0, thread_);
    port_ = port.ok() ? *port : 0;
  }
  ~FakeCluster() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> deleted() {
    std::lock_guard<std::mutex> lock(mu_);
    return deleted_;
  }
  std::vector<nlohmann::json> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  std::string last_auth() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_auth_;
  }

  std::atomic<CreateMode> create_mode{CreateMode::kGrant};
  std::atomic<RenewMode> renew_mode{RenewMode::kOk};
  std::atomic<int> create_delay_ms{0};
  std::atomic<int> creates{0};
  std::atomic<int> renews{0};

 private:
  void Create(const httplib::Request& req, httplib::Response& res) {
    const int n = ++creates;
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    {
      std::unique_lock<std::mutex> lock(mu_);
      bodies_.push_back(body);
      last_auth_ = req.get_header_value("Authorization");
      const auto delay = std::chrono::milliseconds(
          create_mode.load() == CreateMode::kHang ? 60000 : create_delay_ms.load());
      cv_.wait_for(lock, delay, [&] { return closing_; });
    }
    switch (create_mode.load()) {
      case CreateMode::kInsufficient:
        http::SendError(res, 409,
                        "no GPU can take 64 SMs and 40000 MiB now: node-b: 2 without room for 64 "
                        "SMs, 1 without 40000 MiB free",
                        "insufficient_gpus");
        return;
      case CreateMode::kNeverFits:
        http::SendError(res, 409, "no GPU of this cluster has 999999 MiB", "never_fits");
        return;
      case CreateMode::kHang:
        http::SendError(res, 503, "hung", "unavailable");
        return;
      case CreateMode::kNotReady:
      case CreateMode::kGrant:
        break;
    }
    const bool ready = create_mode.load() == CreateMode::kGrant;
    nlohmann::json lease{
        {"id", "rlease-" + std::to_string(n)},
        {"kind", "remote"},
        {"owner", "client-token"},
        {"client", body.value("client", "")},
        {"node", "node-a"},
        {"gpu", {{"uuid", "GPU-aaaa"}, {"index", 0}, {"name", "NVIDIA H100"}}},
        {"sm_count", body.value("sm_count", 16)},
        {"memory_mb", body.value("memory_mb", 0)},
        {"state", ready ? "ready" : "failed"},
        {"server", {{"address", ready ? "127.0.0.1:" + std::to_string(12500 + n) : ""},
                    {"state", ready ? "running" : "failed"}}},
        {"secret", "secret-" + std::to_string(n) + "-0123456789abcdef0123456789abcdef"},
        {"ttl_seconds", body.value("ttl_seconds", 60)}};
    if (!ready) lease["reason"] = "the node did not start it";
    http::SendJson(res, 201, lease);
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  std::vector<std::string> deleted_;
  std::vector<nlohmann::json> bodies_;
  std::string last_auth_;
};

}  // namespace flyt::client_manager
