// Test support, header only: an in-process flyt-gpu-server on the simulated device, listening on
// a Unix socket in a temporary folder, for the server-level tests of the CUDA families
// (graphs_test.cc, arrays_test.cc, managed_test.cc). Parameterised by Isolation, so every case
// runs with a thread per client and with a process per client.
//
// Owns the folder, the backend (Isolation::kThread) and the server; TearDown stops the server and
// removes the folder. Used by one test thread.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "remote_client/client.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"

namespace flyt::remote::testing {

class SimServerTest : public ::testing::TestWithParam<Isolation> {
 protected:
  // `name` names the temporary folder and the client label ("<name>_test").
  explicit SimServerTest(std::string name) : name_(std::move(name)) {}

  void SetUp() override { StartServer(); }
  void TearDown() override {
    if (server_) server_->Stop();
    std::filesystem::remove_all(dir_);
  }

  // (Re)starts the server with `memory_limit_bytes` (0: the device's own); a launch log in the
  // folder when `launch_log`.
  void StartServer(uint64_t memory_limit_bytes = 0, bool launch_log = false) {
    if (server_) server_->Stop();
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-" + name_ + "-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ServerOptions options;
    options.listen.push_back(*ParseEndpoint("unix:" + (dir_ / "s.sock").string()));
    options.memory_limit_bytes = memory_limit_bytes;
    if (launch_log) options.launch_log_path = (dir_ / "launches.jsonl").string();
    if (GetParam() == Isolation::kThread) {
      backend_ = MakeSimBackend();
      server_ = std::make_unique<Server>(*backend_, options);
    } else {
      server_ = std::make_unique<Server>(
          []() -> Result<std::unique_ptr<Backend>> { return MakeSimBackend(); }, options);
    }
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // A new client connection; null (and the test failed) when it cannot connect.
  std::unique_ptr<Connection> Open() {
    ClientOptions options;
    options.label = name_ + "_test";
    options.pid = static_cast<uint32_t>(::getpid());
    auto conn = Connection::Open(server_->endpoints()[0], options);
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return conn.ok() ? std::move(conn).value() : nullptr;
  }

  std::string name_;
  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Server> server_;
};

}  // namespace flyt::remote::testing
