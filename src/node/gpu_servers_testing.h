// Test helpers shared by the node's GPU-server tests (gpu_servers_test.cc, against a fake server
// script; gpu_server_moves_test.cc, against real flyt-gpu-server processes): a Monitor backend
// with two GPUs, a node manager's HTTP API over it with a GpuServers (or none), the log lines
// captured to look for secrets in, a fresh temporary folder, and a wait for a lease's state.
// Test-only.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "gpu/monitor.h"
#include "node/gpu_servers.h"
#include "node/server.h"

namespace flyt::node::test {

// Two NVML GPUs and nothing else: index 0 "GPU-a", index 1 "GPU-b".
class TwoGpus final : public gpu::Backend {
 public:
  gpu::Source source() const override { return gpu::Source::kNvml; }
  Result<gpu::GpuSnapshot> Snapshot() override {
    gpu::GpuSnapshot snap;
    snap.source = gpu::Source::kNvml;
    for (uint32_t i = 0; i < 2; ++i) {
      gpu::GpuInfo g;
      g.index = i;
      g.uuid = i == 0 ? "GPU-a" : "GPU-b";
      snap.gpus.push_back(g);
    }
    return snap;
  }
};

// An empty folder of the temporary directory, named "<prefix><pid>-<suffix>".
inline std::filesystem::path FreshDir(const std::string& prefix, const std::string& suffix) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    (prefix + std::to_string(getpid()) + "-" + suffix);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Every log line from now until ReleaseLog goes to `out` too (to check that a secret never shows).
inline std::shared_ptr<spdlog::sinks::ostream_sink_mt> CaptureLog(std::ostringstream& out) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::default_logger()->sinks().push_back(sink);
  return sink;
}

inline void ReleaseLog(const std::shared_ptr<spdlog::sinks::ostream_sink_mt>& sink) {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink), sinks.end());
}

// A lease's record, {} when there is none.
inline nlohmann::json Record(const GpuServers& servers, const std::string& lease) {
  auto r = servers.Get(lease);
  return r.ok() ? *r : nlohmann::json::object();
}

// Waits (at most `limit`) until the lease's record is in `state`.
inline bool WaitState(const GpuServers& servers, const std::string& lease,
                      const std::string& state, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Record(servers, lease).value("state", "") == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A node manager's HTTP API over TwoGpus, for a test fixture to derive from besides
// ::testing::Test: StartNodeServer, then NodeCall; the bearer token is "node-token".
class NodeApi {
 protected:
  // Takes a first sample and serves on a free port, with `servers` (null: without GPU servers).
  void StartNodeServer(GpuServers* servers) {
    ASSERT_TRUE(monitor_.SampleOnce().ok());
    NodeConfig config;
    config.listen_port = 0;
    config.bearer_token = "node-token";
    server_ = std::make_unique<NodeServer>(monitor_, config, clock_, "test", nullptr, servers);
    ASSERT_TRUE(server_->Start().ok());
  }

  // GET, PUT, POST or DELETE with the token: the HTTP status (0 when there was no answer) and the
  // body parsed (discarded when not JSON). None of `secrets` may show in the body.
  std::pair<int, nlohmann::json> NodeCall(const std::string& method, const std::string& path,
                                          const std::string& body, int read_timeout_s,
                                          const std::vector<std::string>& secrets) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(read_timeout_s, 0);
    httplib::Headers h = {{"Authorization", "Bearer node-token"}};
    httplib::Result res = method == "PUT"      ? c.Put(path, h, body, "application/json")
                          : method == "POST"   ? c.Post(path, h, body, "application/json")
                          : method == "DELETE" ? c.Delete(path, h)
                                               : c.Get(path, h);
    if (!res) return {0, nlohmann::json()};
    for (const std::string& secret : secrets) {
      EXPECT_EQ(res->body.find(secret), std::string::npos) << "a secret in " << path;
    }
    return {res->status, nlohmann::json::parse(res->body, nullptr, false)};
  }

  FakeClock clock_;
  gpu::Monitor monitor_{std::make_unique<TwoGpus>(), clock_};
  std::unique_ptr<NodeServer> server_;
};

}  // namespace flyt::node::test
