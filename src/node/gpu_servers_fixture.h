// The fixture of GpuServers' tests (gpu_servers_test.cc: starting, failing, draining, adopting,
// the desired set and the HTTP routes; gpu_servers_stop_test.cc: the node manager's clean stop and
// the servers no record adopts): a supervisor of fake servers (testdata/fake_gpu_server.sh) in a
// state dir and port range of the test's own, every log line captured, and whatever a test left
// running killed at its end.
#pragma once

#include "node/gpu_servers.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/http.h"
#include "common/strings.h"
#include "gpu/monitor.h"
#include "node/gpu_servers_testing.h"
#include "node/heartbeat.h"
#include "node/server.h"

namespace flyt::node {
namespace test {

inline const std::string kSecret = "s3cr3t-0123456789abcdef0123456789abcdef";
inline const std::string kFake = std::string(FLYT_SOURCE_DIR) + "/src/node/testdata/fake_gpu_server.sh";

inline int CountLines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// A lease's server spec as the tests ask for it: 1024 MiB, kSecret, owner alice.
inline GpuServerSpec ServerSpec(const std::string& lease, const std::string& gpu, uint32_t sms) {
  GpuServerSpec s;
  s.lease_id = lease;
  s.gpu_uuid = gpu;
  s.memory_mb = 1024;
  s.sm_count = sms;
  s.secret = kSecret;
  s.owner = "alice";
  return s;
}

// servers.Put(spec), with the server's pid added to `pids` (for the fixture's TearDown).
inline Result<GpuServers::PutResult> PutRemembering(GpuServers& servers, const GpuServerSpec& spec,
                                                    std::vector<pid_t>& pids) {
  auto r = servers.Put(spec);
  if (r.ok() && r->record["pid"].is_number()) pids.push_back(r->record["pid"].get<pid_t>());
  return r;
}

inline bool Alive(pid_t pid) {
  // Our own children stay zombies until reaped by the supervisor; /proc says whether they run.
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), {});
  if (all.empty()) return false;
  const std::string rest = all.substr(all.rfind(')') + 2);
  return rest[0] != 'Z' && rest[0] != 'X';
}

}  // namespace test

using nlohmann::json;
using namespace std::chrono_literals;
using test::Alive;
using test::kFake;
using test::kSecret;

class GpuServersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::FreshDir("flyt-gpu-servers-",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    config_.enabled = true;
    config_.binary = kFake;
    config_.backend = "sim";
    config_.state_dir = (dir_ / "state").string();
    // A port range of this test's own, away from the defaults and from other test binaries.
    config_.port_min = 20000 + (getpid() % 400) * 50;
    config_.port_max = config_.port_min + 9;
    config_.start_timeout = 2s;
    config_.drain_grace = 1s;
    starts_ = (dir_ / "starts.log").string();
    config_.extra_args = {"--fake-log", starts_};
    // Every log line of the supervisor, to check that the secret never shows.
    log_sink_ = test::CaptureLog(log_);
  }
  void TearDown() override {
    test::ReleaseLog(log_sink_);
    servers_.reset();
    // Whatever a test left running goes: only our fake servers, checked by their command line.
    for (pid_t pid : pids_) {
      auto cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
      if (Alive(pid) && cmdline.ok() && cmdline->find("fake_gpu_server.sh") != std::string::npos) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
      }
      waitpid(pid, nullptr, WNOHANG);
    }
    std::filesystem::remove_all(dir_);
  }

  void Create(std::vector<GpuDevice> gpus = {{0, "GPU-a"}, {1, "GPU-b"}}) {
    auto s = GpuServers::Create(config_, std::move(gpus));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    servers_ = std::move(s).value();
  }

  GpuServerSpec Spec(const std::string& lease, const std::string& gpu = "GPU-a",
                     uint32_t sms = 20) {
    GpuServerSpec s = test::ServerSpec(lease, gpu, sms);
    s.expires_at = "2030-01-01T00:00:00Z";
    return s;
  }

  // Puts and remembers the pid for TearDown.
  Result<GpuServers::PutResult> Put(const GpuServerSpec& spec) {
    return test::PutRemembering(*servers_, spec, pids_);
  }

  json Record(const std::string& lease) { return test::Record(*servers_, lease); }

  // Waits (at most `limit`) until the lease's record is in `state`.
  bool WaitState(const std::string& lease, const std::string& state,
                 std::chrono::milliseconds limit = 5000ms) {
    return test::WaitState(*servers_, lease, state, limit);
  }

  std::filesystem::path dir_;
  GpuServersConfig config_;
  std::string starts_;
  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> log_sink_;
  std::unique_ptr<GpuServers> servers_;
  std::vector<pid_t> pids_;
};

}  // namespace flyt::node
