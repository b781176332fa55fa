// GpuServers' housekeeping: the MPS control daemon watched after the start (a fake daemon: a Unix
// socket this test listens on, killed by closing it, which leaves the socket file behind as a
// killed daemon does; or, with mps_start, a fake nvidia-cuda-mps-control that starts a process
// reading a control pipe), and the servers' logs rotated past their cap. Against the fake server
// of gpu_servers_test.cc (testdata/fake_gpu_server.sh).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/http.h"
#include "common/strings.h"
#include "node/gpu_servers.h"
#include "node/gpu_servers_fixture.h"
#include "node/gpu_servers_testing.h"

namespace flyt::node {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

using test::CountLines;
using test::kFake;

class GpuServersMpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: the control socket's path must fit in a socket address.
    static int n = 0;
    dir_ = test::FreshDir("flyt-mps-", std::to_string(++n));
    config_.enabled = true;
    config_.binary = kFake;
    config_.backend = "driver";  // the sim backend has no MPS to watch
    config_.state_dir = (dir_ / "state").string();
    config_.port_min = 20010 + (getpid() % 400) * 50;
    config_.port_max = config_.port_min + 9;
    config_.start_timeout = 2s;
    config_.drain_grace = 1s;
    config_.shared = {"GPU-a"};
    pipes_ = (dir_ / "mps").string();
    config_.mps_pipe_dir = pipes_;
    std::filesystem::create_directories(pipes_);
    // nvidia-cuda-mps-control first on PATH: with -d it starts a process that reads the control
    // pipe (the daemon), its pid in dir_/daemon.pid; anything else does nothing.
    const std::string bin = (dir_ / "bin").string();
    std::filesystem::create_directories(bin);
    std::ofstream(bin + "/nvidia-cuda-mps-control")
        << "#!/bin/bash\n"
           "[[ \"$1\" == -d ]] || exit 0\n"
           "echo start >> "
        << (dir_ / "starts").string()
        << "\n"
           "[[ -p \"$CUDA_MPS_PIPE_DIRECTORY/control\" ]] || "
           "mkfifo \"$CUDA_MPS_PIPE_DIRECTORY/control\"\n"
           "sleep 300 <> \"$CUDA_MPS_PIPE_DIRECTORY/control\" > /dev/null 2>&1 &\n"
           "echo $! > "
        << (dir_ / "daemon.pid").string() << "\n";
    chmod((bin + "/nvidia-cuda-mps-control").c_str(), 0755);
    old_path_ = std::getenv("PATH");
    setenv("PATH", (bin + ":" + old_path_).c_str(), 1);
  }
  void TearDown() override {
    servers_.reset();
    setenv("PATH", old_path_.c_str(), 1);
    for (pid_t pid : pids_) {
      auto cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
      if (cmdline.ok() && cmdline->find("fake_gpu_server.sh") != std::string::npos) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
      }
      waitpid(pid, nullptr, WNOHANG);
    }
    KillFakeDaemon();
    std::filesystem::remove_all(dir_);
  }

  // A control daemon that answers: a listening socket at pipes_/control.
  void DaemonUp() {
    daemon_.Reset(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = pipes_ + "/control";
    ASSERT_LT(path.size(), sizeof(addr.sun_path));
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    unlink(path.c_str());  // a dead daemon's file, as a new daemon replaces it
    ASSERT_EQ(bind(daemon_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(listen(daemon_.get(), 4), 0);
  }
  // Killed: the socket file stays, nobody answers on it.
  void DaemonKilled() { daemon_.Reset(); }

  // The process the fake nvidia-cuda-mps-control -d started, if any: SIGKILL.
  bool KillFakeDaemon() {
    auto text = ReadFile((dir_ / "daemon.pid").string());
    if (!text.ok()) return false;
    auto pid = ParseUint(Trim(*text));
    if (!pid) return false;
    kill(static_cast<pid_t>(*pid), SIGKILL);
    std::filesystem::remove(dir_ / "daemon.pid");
    return true;
  }

  void Create() {
    auto s = GpuServers::Create(config_, {{0, "GPU-a"}, {1, "GPU-b"}});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    servers_ = std::move(s).value();
  }

  GpuServerSpec Spec(const std::string& lease, const std::string& gpu, uint32_t sms) {
    return test::ServerSpec(lease, gpu, sms);
  }
  Result<GpuServers::PutResult> Put(const GpuServerSpec& spec) {
    return test::PutRemembering(*servers_, spec, pids_);
  }
  json Gpu(const json& list, const std::string& uuid) {
    for (const json& g : list["gpus"]) {
      if (g["uuid"] == uuid) return g;
    }
    return json::object();
  }
  json EventsOf(const std::string& type) {
    json out = json::array();
    for (const json& e : servers_->Events()) {
      if (e["type"] == type) out.push_back(e);
    }
    return out;
  }
  // Waits (bounded) until GPU-a's mps state is `state`; the housekeeping thread moves it.
  bool WaitMps(const std::string& state) {
    for (int i = 0; i < 300; ++i) {
      if (Gpu(servers_->List(), "GPU-a").value("mps", "") == state) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  std::filesystem::path dir_;
  std::string pipes_;
  std::string old_path_;
  GpuServersConfig config_;
  UniqueFd daemon_;
  std::unique_ptr<GpuServers> servers_;
  std::vector<pid_t> pids_;
};

TEST_F(GpuServersMpsTest, AKilledDaemonTakesTheSharedGpusDownUntilItIsBack) {
  DaemonUp();
  Create();
  json a = Gpu(servers_->List(), "GPU-a");
  ASSERT_EQ(a["mps"], "running");
  EXPECT_EQ(a["shared"], true);
  ASSERT_TRUE(Put(Spec("rlease-1", "GPU-a", 64)).ok());
  ASSERT_TRUE(Put(Spec("rlease-2", "GPU-a", 32)).ok());

  DaemonKilled();
  servers_->CheckMpsNow();
  // Down, with the reason and the leases whose servers run there, in the API and the heartbeat.
  for (const json& list : {servers_->List(), servers_->HeartbeatJson()}) {
    a = Gpu(list, "GPU-a");
    EXPECT_EQ(a["mps"], "down") << a.dump();
    EXPECT_EQ(a["shared"], false);
    const std::string reason = a.value("mps_reason", "");
    EXPECT_NE(reason.find("the MPS control daemon stopped answering at "), std::string::npos)
        << reason;
    EXPECT_NE(reason.find(pipes_ + "/control refuses connections"), std::string::npos) << reason;
    EXPECT_EQ(a["mps_servers"], json({"rlease-1", "rlease-2"}));
    EXPECT_EQ(Gpu(list, "GPU-b")["mps"], "off");  // not shared: not concerned
  }
  // The running servers are left running.
  EXPECT_EQ(test::Record(*servers_, "rlease-1")["state"], "running");
  EXPECT_EQ(test::Record(*servers_, "rlease-2")["state"], "running");
  // No new lease beside them: the GPU takes one server at a time now.
  auto refused = Put(Spec("rlease-3", "GPU-a", 8));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(http::HttpStatus(refused.status()), 409);
  EXPECT_NE(refused.status().message().find("is not shared (MPS is down)"), std::string::npos)
      << refused.status().message();
  json down = EventsOf("gpu_mps_down");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0]["uuid"], "GPU-a");
  EXPECT_TRUE(down[0]["lease_id"].is_null());
  EXPECT_NE(down[0]["description"].get<std::string>().find("leases rlease-1, rlease-2"),
            std::string::npos)
      << down[0].dump();
  EXPECT_NE(
      servers_->MetricsText().find("flyt_node_gpu_mps{gpu=\"0\",uuid=\"GPU-a\",state=\"down\"} 1"),
      std::string::npos);
  servers_->CheckMpsNow();  // still down: one event per change
  EXPECT_EQ(EventsOf("gpu_mps_down").size(), 1u);

  DaemonUp();
  servers_->CheckMpsNow();
  a = Gpu(servers_->List(), "GPU-a");
  EXPECT_EQ(a["mps"], "running");
  EXPECT_EQ(a["shared"], true);
  EXPECT_FALSE(a.contains("mps_reason"));
  EXPECT_FALSE(a.contains("mps_servers"));
  EXPECT_EQ(EventsOf("gpu_mps_up").size(), 1u);
  auto placed = Put(Spec("rlease-3", "GPU-a", 8));
  EXPECT_TRUE(placed.ok()) << placed.status().ToString();
}

TEST_F(GpuServersMpsTest, TheHousekeepingThreadNoticesByItself) {
  config_.mps_check_interval = 1s;
  DaemonUp();
  Create();
  ASSERT_EQ(Gpu(servers_->List(), "GPU-a")["mps"], "running");
  DaemonKilled();
  EXPECT_TRUE(WaitMps("down"));
  DaemonUp();
  EXPECT_TRUE(WaitMps("running"));
}

TEST_F(GpuServersMpsTest, WithMpsStartADeadDaemonIsStartedAgain) {
  config_.mps_start = true;
  Create();  // none at first: started
  ASSERT_EQ(Gpu(servers_->List(), "GPU-a")["mps"], "running");
  ASSERT_TRUE(KillFakeDaemon());
  // Wait (bounded) for the kill to land: the pipe has no reader then.
  for (int i = 0; i < 200 && ProbeMpsControl(pipes_).answers; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_FALSE(ProbeMpsControl(pipes_).answers);
  servers_->CheckMpsNow();
  EXPECT_EQ(Gpu(servers_->List(), "GPU-a")["mps"], "running");
  EXPECT_EQ(CountLines((dir_ / "starts").string()), 2);
}

TEST_F(GpuServersMpsTest, ALogPastItsCapIsRotatedKeepingLogFilesOldOnes) {
  config_.backend = "sim";
  config_.log_max_bytes = 4096;
  config_.log_files = 2;
  Create();
  auto put = Put(Spec("rlease-1", "GPU-b", 8));
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  const std::string log = config_.state_dir + "/rlease-1.log";
  // The server's output goes on through its own descriptor (O_APPEND, as it was given).
  UniqueFd out(open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  ASSERT_TRUE(out.valid());
  const std::string chunk(1000, 'x');
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 10; ++i) ASSERT_EQ(write(out.get(), chunk.data(), chunk.size()), 1000);
    servers_->RotateLogsNow();
    EXPECT_EQ(std::filesystem::file_size(log), 0u);
  }
  uint64_t total = 0;
  for (const char* kept : {".1", ".2"}) {
    ASSERT_TRUE(std::filesystem::exists(log + kept)) << kept;
    EXPECT_EQ(std::filesystem::file_size(log + kept), 4096u);
    total += std::filesystem::file_size(log + kept);
  }
  EXPECT_FALSE(std::filesystem::exists(log + ".3"));
  EXPECT_LE(total, 2u * 4096u);

  // A server adopted by a restarted node manager is rotated too.
  servers_.reset();
  Create();
  for (int i = 0; i < 10; ++i) ASSERT_EQ(write(out.get(), chunk.data(), chunk.size()), 1000);
  servers_->RotateLogsNow();
  EXPECT_EQ(std::filesystem::file_size(log), 0u);

  // Its old logs go with it.
  ASSERT_TRUE(servers_->Drain("rlease-1").ok());
  ASSERT_TRUE(test::WaitState(*servers_, "rlease-1", "stopped", 5000ms));
  EXPECT_FALSE(std::filesystem::exists(log + ".1"));
  EXPECT_FALSE(std::filesystem::exists(log + ".2"));
}

}  // namespace
}  // namespace flyt::node
