// A node manager's gpu-servers API on 127.0.0.1 for the cluster manager's remote-lease tests
// (remote_test.cc, remote_moves_test.cc): PUT starts (or refuses) and keeps a record that GET
// answers (with the connected clients the test sets), DELETE drains, POST .../migrate and
// .../resize answer what the test set; every call is recorded. Down/Up make it unreachable.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/http.h"
#include "common/json.h"

namespace flyt::cluster::test {

using nlohmann::json;

inline constexpr const char* kNodeToken = "node-api-token-0123456789";

// A node manager's gpu-servers API on 127.0.0.1: PUT starts (or refuses), GET answers the
// record, DELETE drains; every call is recorded. `during_put` runs inside the PUT handler (the
// manager is waiting on it).
class FakeNode {
 public:
  FakeNode() { Serve(0); }
  ~FakeNode() { Down(); }
  FakeNode(const FakeNode&) = delete;
  FakeNode& operator=(const FakeNode&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Stops answering (connections are refused) / answers again on the same port, with the
  // records it had: a node manager that cannot be reached for a while.
  void Down() {
    if (!server_) return;
    server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
  }
  void Up() {
    if (!server_) Serve(port_);
  }
  void Refuse(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    refusal_ = why;
  }
  void DuringPut(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    during_put_ = std::move(hook);
  }
  // The address a started server has (PUT's answer).
  void SetAddress(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu_);
    address_ = address;
  }
  // POST .../{key}/{action} ("migrate", "resize") answers `status` with `body`.
  void Answer(const std::string& action, int status, json body) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_[action] = {status, std::move(body)};
  }
  // The record GET /api/v1/gpu-servers/{key} answers (a PUT makes one: running, no clients; a
  // DELETE makes it draining). No record: 404.
  void SetRecord(const std::string& key, json record) {
    std::lock_guard<std::mutex> lock(mu_);
    records_[key] = std::move(record);
  }
  // How many clients are connected to the server of `key` (the record's "clients").
  void SetClients(const std::string& key, int clients) {
    std::lock_guard<std::mutex> lock(mu_);
    records_[key]["clients"] = clients;
  }
  std::optional<json> Record(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(key);
    if (it == records_.end()) return std::nullopt;
    return it->second;
  }
  // The POSTs, as ("<key>/<action>", body).
  std::vector<std::pair<std::string, json>> actions() {
    std::lock_guard<std::mutex> lock(mu_);
    return actions_;
  }
  std::vector<std::string> deletes() {
    std::lock_guard<std::mutex> lock(mu_);
    return deletes_;
  }
  std::vector<json> puts() {
    std::lock_guard<std::mutex> lock(mu_);
    return puts_;
  }
  // The keys GET was asked about.
  std::vector<std::string> gets() {
    std::lock_guard<std::mutex> lock(mu_);
    return gets_;
  }
  // Waits (real time, at most 5 s) until the node was told to drain `id`.
  bool WaitForDelete(const std::string& id) {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (std::find(deletes_.begin(), deletes_.end(), id) != deletes_.end()) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  static bool Authorized(const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") == std::string("Bearer ") + kNodeToken) return true;
    res.status = 401;
    return false;
  }

  void Serve(int at) {
    server_ = std::make_unique<httplib::Server>();
    server_->Put(R"(/api/v1/gpu-servers/([A-Za-z0-9._-]+))",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   if (!Authorized(req, res)) return;
                   std::function<void()> hook;
                   {
                     std::lock_guard<std::mutex> lock(mu_);
                     puts_.push_back(json::parse(req.body));
                     hook = during_put_;
                   }
                   if (hook) hook();
                   std::lock_guard<std::mutex> lock(mu_);
                   if (!refusal_.empty()) {
                     res.status = 503;
                     res.set_content(DumpJson({{"error", refusal_}, {"code", "unavailable"}}),
                                     "application/json");
                     return;
                   }
                   const json record = {{"lease_id", req.matches[1].str()},
                                        {"state", "running"},
                                        {"address", address_},
                                        {"pid", 4242},
                                        {"clients", 0}};
                   records_[req.matches[1].str()] = record;
                   res.status = 201;
                   res.set_content(DumpJson(record), "application/json");
                 });
    server_->Get(R"(/api/v1/gpu-servers/([A-Za-z0-9._-]+))",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   if (!Authorized(req, res)) return;
                   std::lock_guard<std::mutex> lock(mu_);
                   gets_.push_back(req.matches[1].str());
                   auto it = records_.find(req.matches[1].str());
                   if (it == records_.end()) {
                     res.status = 404;
                     res.set_content(
                         DumpJson({{"error", "no GPU server for lease " + req.matches[1].str()},
                                   {"code", "not_found"}}),
                         "application/json");
                     return;
                   }
                   res.status = 200;
                   res.set_content(DumpJson(it->second), "application/json");
                 });
    server_->Post(R"(/api/v1/gpu-servers/([A-Za-z0-9._-]+)/(migrate|resize))",
                  [this](const httplib::Request& req, httplib::Response& res) {
                    if (!Authorized(req, res)) return;
                    std::lock_guard<std::mutex> lock(mu_);
                    const std::string action = req.matches[2].str();
                    actions_.push_back({req.matches[1].str() + "/" + action, json::parse(req.body)});
                    auto answer = answers_.find(action);
                    if (answer == answers_.end()) {
                      res.status = 404;
                      res.set_content(DumpJson({{"error", "no answer set"}, {"code", "not_found"}}),
                                      "application/json");
                      return;
                    }
                    res.status = answer->second.first;
                    res.set_content(DumpJson(answer->second.second), "application/json");
                  });
    server_->Delete(R"(/api/v1/gpu-servers/([A-Za-z0-9._-]+))",
                    [this](const httplib::Request& req, httplib::Response& res) {
                      std::lock_guard<std::mutex> lock(mu_);
                      deletes_.push_back(req.matches[1].str());
                      auto it = records_.find(req.matches[1].str());
                      if (it != records_.end()) it->second["state"] = "draining";
                      res.status = 202;
                      res.set_content(DumpJson({{"draining", req.matches[1].str()}}),
                                      "application/json");
                    });
    auto port = http::Listen(*server_, "127.0.0.1", at, thread_);
    EXPECT_TRUE(port.ok()) << port.status().ToString();
    port_ = port.ok() ? *port : 0;
  }

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::string refusal_;
  std::function<void()> during_put_;
  std::vector<json> puts_;
  std::vector<std::string> deletes_;
  std::vector<std::string> gets_;
  std::map<std::string, json> records_;
  std::string address_ = "127.0.0.1:12500";
  std::map<std::string, std::pair<int, json>> answers_;
  std::vector<std::pair<std::string, json>> actions_;
};

// The heartbeat's gpu_servers part: `gpus` H100s of 132 SMs (steps of 8), shared (MPS) or not,
// and the given server records.
inline json GpuServers(const std::string& node, int gpus, bool shared, json servers = json::array()) {
  json capacity = json::array();
  for (int i = 0; i < gpus; ++i) {
    capacity.push_back({{"uuid", "GPU-" + node + "-" + std::to_string(i)},
                        {"index", i},
                        {"sm_count", 132},
                        {"sm_granularity", 8},
                        {"memory_total_mb", 81920},
                        {"shared", shared},
                        {"mps", shared ? "running" : "off"}});
  }
  return {{"enabled", true}, {"servers", servers}, {"gpus", capacity}};
}

}  // namespace flyt::cluster::test
