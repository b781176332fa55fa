// FakeCluster: a loopback HTTP server playing flyt-cluster-manager's remote-lease endpoints
// (docs/api.md, "Remote leases") for the client manager's tests, with switches for refusals,
// failures and a manager that never answers. It keeps the Idempotency-Key of each creation: a
// request with a key it has seen answers that key's lease again ("replayed"), as the real one
// does; answers can be held back after the lease is made (a lost answer) or say "starting".
// Thread-safe: the switches and counters are atomics
// or under a mutex; handlers run on httplib's threads.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
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
                     case RenewMode::kOk: {
                       nlohmann::json answer{{"id", req.matches[1].str()}};
                       std::lock_guard<std::mutex> lock(mu_);
                       if (!renew_address_.empty()) {
                         answer["server"] = {{"address", renew_address_}, {"state", "running"}};
                       }
                       http::SendJson(res, 200, answer);
                       return;
                     }
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
  // The Idempotency-Key of each creation request ("" for none), in order.
  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }
  // The server address of the leases granted from now on (default 127.0.0.1:<12500 + n>).
  void SetServerAddress(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu_);
    address_ = address;
  }

  // The server address renewals answer with from now on (a lease moved to another server); empty:
  // no address in the answer.
  void SetRenewAddress(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu_);
    renew_address_ = address;
  }

  std::atomic<CreateMode> create_mode{CreateMode::kGrant};
  std::atomic<RenewMode> renew_mode{RenewMode::kOk};
  std::atomic<int> create_delay_ms{0};
  std::atomic<int> creates{0};
  std::atomic<int> renews{0};
  std::atomic<int> granted{0};  // leases made (a replayed key makes none)
  // The first `lost_answers` creations make their lease, then hold the answer for
  // lost_answer_ms (longer than the client waits: the answer is lost to it).
  std::atomic<int> lost_answers{0};
  std::atomic<int> lost_answer_ms{30000};
  // The next `starting_answers` answers say the lease's server is still starting.
  std::atomic<int> starting_answers{0};

 private:
  void Create(const httplib::Request& req, httplib::Response& res) {
    ++creates;
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    const std::string key = req.get_header_value("Idempotency-Key");
    {
      std::unique_lock<std::mutex> lock(mu_);
      bodies_.push_back(body);
      keys_.push_back(key);
      last_auth_ = req.get_header_value("Authorization");
      if (auto known = by_key_.find(key); !key.empty() && known != by_key_.end()) {
        nlohmann::json again = known->second;
        again["replayed"] = true;
        if (starting_answers.load() > 0) {
          --starting_answers;
          again["state"] = "starting";
          again["server"] = {{"address", ""}, {"state", "starting"}};
        }
        lock.unlock();
        http::SendJson(res, 201, again);
        return;
      }
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
    const int n = ++granted;
    std::unique_lock<std::mutex> lock(mu_);
    const std::string address =
        address_.empty() ? "127.0.0.1:" + std::to_string(12500 + n) : address_;
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
        {"server", {{"address", ready ? address : ""},
                    {"state", ready ? "running" : "failed"}}},
        {"secret", "secret-" + std::to_string(n) + "-0123456789abcdef0123456789abcdef"},
        {"ttl_seconds", body.value("ttl_seconds", 60)}};
    if (!ready) lease["reason"] = "the node did not start it";
    if (!key.empty()) by_key_[key] = lease;
    if (lost_answers.load() > 0) {
      --lost_answers;
      cv_.wait_for(lock, std::chrono::milliseconds(lost_answer_ms.load()), [&] { return closing_; });
    }
    if (ready && starting_answers.load() > 0) {
      --starting_answers;
      lease["state"] = "starting";
      lease["server"] = {{"address", ""}, {"state", "starting"}};
    }
    lock.unlock();
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
  std::vector<std::string> keys_;
  std::map<std::string, nlohmann::json> by_key_;
  std::string address_;
  std::string renew_address_;
};

}  // namespace flyt::client_manager
