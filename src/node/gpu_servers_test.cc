// GpuServers, the node manager's supervisor of flyt-gpu-server processes, against a fake server
// (testdata/fake_gpu_server.sh: writes the ready file, sleeps, handles SIGTERM; --fake-mode makes
// it crash, ignore SIGTERM, never get ready or exit at once). Also the HTTP routes, the heartbeat
// reply's desired set, and the secret's absence from every answer, event, metric and log line.
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
#include "node/gpu_servers_fixture.h"
#include "node/gpu_servers_testing.h"
#include "node/heartbeat.h"
#include "node/server.h"

namespace flyt::node {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using test::CountLines;


TEST_F(GpuServersTest, StartsAServerThatBecomesRunningWithItsAddress) {
  Create();
  auto r = Put(Spec("rlease-1", "GPU-b", 20));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->created);
  const json& rec = r->record;
  EXPECT_EQ(rec["state"], "running");
  EXPECT_EQ(rec["lease_id"], "rlease-1");
  EXPECT_EQ(rec["gpu_uuid"], "GPU-b");
  EXPECT_EQ(rec["gpu_index"], 1);
  // The first free port of the range (another program may hold port_min itself).
  const std::string address = rec["address"];
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  EXPECT_EQ(address.substr(0, address.rfind(':')), "127.0.0.1");
  EXPECT_GE(port, config_.port_min);
  EXPECT_LE(port, config_.port_max);
  EXPECT_EQ(rec["sm_count"], 20);
  // GPU-b is not shared: its one lease's server gets no --sm-count and has all 132 SMs.
  EXPECT_EQ(rec["sm_count_granted"], 132);
  EXPECT_EQ(rec["memory_mb"], 1024);
  EXPECT_TRUE(rec["pid"].is_number());
  EXPECT_TRUE(Alive(rec["pid"].get<pid_t>()));
  EXPECT_FALSE(rec.contains("secret"));
  // The capacity the probe reported, per GPU.
  json list = servers_->List();
  ASSERT_EQ(list["gpus"].size(), 2u);
  EXPECT_EQ(list["gpus"][1]["uuid"], "GPU-b");
  EXPECT_EQ(list["gpus"][1]["sm_count"], 132);
  EXPECT_EQ(list["gpus"][1]["sm_granularity"], 8);
  EXPECT_EQ(list["gpus"][1]["memory_total_mb"], 81559);
  EXPECT_EQ(list["gpus"][1]["shared"], false);
  EXPECT_EQ(list["gpus"][1]["mps"], "off");
  // The flags it was started with (the fake's start log names the listen address).
  std::ifstream in(starts_);
  std::string line;
  std::getline(in, line);
  EXPECT_NE(line.find("127.0.0.1:" + std::to_string(config_.port_min)), std::string::npos);
  EXPECT_NE(servers_->MetricsText().find("flyt_node_gpu_servers{state=\"running\"} 1"),
            std::string::npos);
}

TEST_F(GpuServersTest, ASecondPutOfTheSameLeaseIsIdempotentAndADifferentOneConflicts) {
  Create();
  auto first = Put(Spec("rlease-1"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto again = Put(Spec("rlease-1"));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->record["pid"], first->record["pid"]);
  EXPECT_EQ(CountLines(starts_), 1);

  GpuServerSpec other = Spec("rlease-1", "GPU-a", 40);
  auto conflict = Put(other);
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(http::HttpStatus(conflict.status()), 409);
  EXPECT_EQ(http::ErrorCode(conflict.status()), "conflict");
  other = Spec("rlease-1");
  other.secret = std::string(40, 'x');
  EXPECT_EQ(http::HttpStatus(Put(other).status()), 409);
  // A GPU not shared takes one lease at a time.
  auto busy = Put(Spec("rlease-2", "GPU-a"));
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(http::HttpStatus(busy.status()), 409);
  EXPECT_NE(busy.status().message().find("not shared and already serves lease rlease-1"),
            std::string::npos)
      << busy.status().message();
  EXPECT_EQ(CountLines(starts_), 1);
}

TEST_F(GpuServersTest, AServerThatNeverGetsReadyIsKilledAnd503CarriesItsOutput) {
  config_.extra_args = {"--fake-mode", "no-ready"};
  config_.start_timeout = 1s;
  Create();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Put(Spec("rlease-slow"));
  ASSERT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(http::HttpStatus(r.status()), 503);
  EXPECT_EQ(http::ErrorCode(r.status()), "unavailable");
  EXPECT_NE(r.status().message().find("did not write its ready file within 1 s"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("stuck initialising the device"), std::string::npos)
      << r.status().message();
  json rec = Record("rlease-slow");
  EXPECT_EQ(rec["state"], "failed");
  EXPECT_FALSE(Alive(rec["pid"].get<pid_t>()));
  // Its files are gone; nothing left in state_dir.
  EXPECT_TRUE(std::filesystem::is_empty(config_.state_dir));
}

TEST_F(GpuServersTest, AServerThatExitsBeforeReadyFailsWithItsExitCodeAndOutput) {
  config_.extra_args = {"--fake-mode", "exit-early"};
  Create();
  auto r = Put(Spec("rlease-x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(http::HttpStatus(r.status()), 503);
  EXPECT_NE(r.status().message().find("exited with code 4 before it was ready"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("cannot open CUDA device"), std::string::npos);
  // A PUT again (the cluster retrying) starts it afresh rather than answering from the record.
  EXPECT_FALSE(Put(Spec("rlease-x")).ok());
}

TEST_F(GpuServersTest, ACrashIsFailedWithTheReasonInTheRecordTheHeartbeatAndTheEvents) {
  config_.extra_args = {"--fake-log", starts_, "--fake-mode", "crash"};
  Create();
  auto r = Put(Spec("rlease-c"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(WaitState("rlease-c", "failed"));
  json rec = Record("rlease-c");
  EXPECT_EQ(rec["reason"].get<std::string>().rfind("exited with code 3", 0), 0u) << rec;
  EXPECT_NE(rec["reason"].get<std::string>().find("CUDA error 999"), std::string::npos) << rec;
  EXPECT_TRUE(rec.contains("ended_at"));
  json hb = servers_->HeartbeatJson();
  EXPECT_EQ(hb["enabled"], true);
  ASSERT_EQ(hb["servers"].size(), 1u);
  EXPECT_EQ(hb["servers"][0]["state"], "failed");
  EXPECT_EQ(hb["servers"][0]["reason"], rec["reason"]);
  json events = servers_->Events();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0]["type"], "gpu_server_started");
  EXPECT_EQ(events.back()["type"], "gpu_server_failed");
  EXPECT_EQ(events.back()["lease_id"], "rlease-c");
  EXPECT_NE(servers_->MetricsText().find("flyt_node_gpu_server_failures_total 1"),
            std::string::npos);
  // A reconcile that still lists it (the cluster has not seen the failure yet) does not restart it.
  servers_->Reconcile({Spec("rlease-c")}, {});
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(CountLines(starts_), 1);
}

TEST_F(GpuServersTest, DeleteDrainsWithSigtermAndKillsAServerIgnoringIt) {
  Create();
  auto polite = Put(Spec("rlease-p", "GPU-a"));
  ASSERT_TRUE(polite.ok()) << polite.status().ToString();
  ASSERT_TRUE(servers_->Drain("rlease-p").ok());
  EXPECT_EQ(Record("rlease-p")["state"], "draining");
  ASSERT_TRUE(WaitState("rlease-p", "stopped", 900ms));  // before the 1 s grace: SIGTERM did it
  EXPECT_EQ(Record("rlease-p")["reason"], "drained (exited with code 0)");

  servers_.reset();
  config_.extra_args = {"--fake-mode", "ignore-term"};
  Create();
  auto stubborn = Put(Spec("rlease-s", "GPU-b"));
  ASSERT_TRUE(stubborn.ok()) << stubborn.status().ToString();
  const pid_t pid = stubborn->record["pid"];
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(servers_->Drain("rlease-s").ok());
  ASSERT_TRUE(WaitState("rlease-s", "stopped", 3000ms));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_FALSE(Alive(pid));
  EXPECT_NE(Record("rlease-s")["reason"].get<std::string>().find("SIGKILL after the 1 s drain"),
            std::string::npos);
  EXPECT_NE(servers_->MetricsText().find("flyt_node_gpu_server_drain_kills_total 1"),
            std::string::npos);
  EXPECT_EQ(servers_->Drain("rlease-none").code(), StatusCode::kNotFound);
}

TEST_F(GpuServersTest, ALeaseForAGpuWhoseServerDrainsWaitsForTheDrain) {
  // The cluster freed the share when it released the old lease and places the next one on the
  // same GPU (not shared) while the old server still drains: the new one waits, then starts.
  config_.extra_args = {"--fake-mode", "ignore-term"};
  Create();
  ASSERT_TRUE(Put(Spec("rlease-old", "GPU-b")).ok());
  ASSERT_TRUE(servers_->Drain("rlease-old").ok());
  auto next = Put(Spec("rlease-next", "GPU-b"));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->record["state"], "running");
  EXPECT_EQ(Record("rlease-old")["state"], "stopped");  // started only once the old one was gone
}

TEST_F(GpuServersTest, SigtermReachesTheServerEvenWhenTheNodeManagerBlocksIt) {
  // flyt-node-manager blocks SIGTERM in every thread (it sigwaits): the servers must not inherit
  // it.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  Create();
  auto r = Put(Spec("rlease-m"));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(servers_->Drain("rlease-m").ok());
  ASSERT_TRUE(WaitState("rlease-m", "stopped", 900ms));
}

TEST_F(GpuServersTest, AnExhaustedPortRangeIsAClearError) {
  config_.port_max = config_.port_min;
  Create();
  // The only port is taken by another program.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(config_.port_min));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  auto r = Put(Spec("rlease-1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(http::HttpStatus(r.status()), 503);
  EXPECT_NE(r.status().message().find("no free port in [gpu-servers] port_min-port_max"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("1 in use by other programs"), std::string::npos);
  close(fd);
  // Freed: one server takes it, and a second (another GPU) finds the range full of ours.
  ASSERT_TRUE(Put(Spec("rlease-1", "GPU-a")).ok());
  auto second = Put(Spec("rlease-2", "GPU-b"));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("1 held by this node's GPU servers"), std::string::npos)
      << second.status().message();
  EXPECT_EQ(CountLines(starts_), 1);
}

TEST_F(GpuServersTest, ARestartedSupervisorReadoptsTheLiveServerAndReportsTheDeadOne) {
  Create();
  auto live = Put(Spec("rlease-live", "GPU-a"));
  auto dead = Put(Spec("rlease-dead", "GPU-b"));
  ASSERT_TRUE(live.ok() && dead.ok());
  const pid_t live_pid = live->record["pid"];
  const pid_t dead_pid = dead->record["pid"];
  servers_.reset();  // the node manager stops; its servers do not
  EXPECT_TRUE(Alive(live_pid));
  kill(dead_pid, SIGKILL);
  waitpid(dead_pid, nullptr, 0);

  Create();
  json rec = Record("rlease-live");
  EXPECT_EQ(rec["state"], "running");
  EXPECT_EQ(rec["pid"], live_pid);
  EXPECT_EQ(rec["address"], live->record["address"]);
  EXPECT_EQ(rec["sm_count_granted"], live->record["sm_count_granted"]);
  EXPECT_EQ(CountLines(starts_), 2);  // nothing started twice
  // An idempotent PUT answers the adopted record; a reconcile that wants it leaves it alone.
  auto again = Put(Spec("rlease-live", "GPU-a"));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->created);
  servers_->Reconcile({Spec("rlease-live", "GPU-a")}, {});
  EXPECT_EQ(CountLines(starts_), 2);
  json gone = Record("rlease-dead");
  EXPECT_EQ(gone["state"], "failed");
  EXPECT_EQ(gone["reason"], "exited while the node manager was not running");
  EXPECT_FALSE(std::filesystem::exists(config_.state_dir + "/rlease-dead.json"));
  EXPECT_FALSE(std::filesystem::exists(config_.state_dir + "/rlease-dead.secret"));
  // The adopted one is still watched: it drains, and its end is seen without being our child.
  ASSERT_TRUE(servers_->Drain("rlease-live").ok());
  ASSERT_TRUE(WaitState("rlease-live", "stopped", 3000ms));
  EXPECT_FALSE(Alive(live_pid));
}

TEST_F(GpuServersTest, AReusedPidIsNotAdopted) {
  Create();
  auto r = Put(Spec("rlease-1"));
  ASSERT_TRUE(r.ok());
  servers_.reset();
  const pid_t server = r->record["pid"];
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  // The record's pid now belongs to another program, started later (as when the pid is reused):
  // its start time does not match the record's.
  const pid_t other = fork();
  ASSERT_GE(other, 0);
  if (other == 0) {
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string path = config_.state_dir + "/rlease-1.json";
  json j = json::parse(*ReadFile(path));
  j["pid"] = other;
  std::ofstream(path) << j.dump();
  Create();
  EXPECT_EQ(Record("rlease-1")["state"], "failed");
  EXPECT_TRUE(Alive(other));  // someone else's process: left alone
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
}

// ---- stopping the node ----

TEST_F(GpuServersTest, TheDesiredSetStartsTheMissingDrainsTheExtraAndAbsentChangesNothing) {
  Create();
  ASSERT_TRUE(Put(Spec("rlease-old", "GPU-a")).ok());
  // The reply from a manager that knows nothing of GPU servers: no opinion.
  ApplyHeartbeatReply(json{{"ok", true}}, *servers_);
  EXPECT_EQ(Record("rlease-old")["state"], "running");
  // desired = [rlease-new]: rlease-old drains, rlease-new starts (without waiting).
  json spec = {{"lease_id", "rlease-new"},
               {"gpu_uuid", "GPU-b"},
               {"memory_mb", 512},
               {"sm_count", 16},
               {"secret", kSecret},
               {"owner", "bob"},
               {"expires_at", "2030-01-01T00:00:00Z"}};
  ApplyHeartbeatReply(json{{"gpu_servers", {{"desired", {spec}}}}}, *servers_);
  EXPECT_EQ(Record("rlease-old")["state"], "draining");
  ASSERT_TRUE(WaitState("rlease-new", "running"));
  ASSERT_TRUE(WaitState("rlease-old", "stopped"));
  pids_.push_back(Record("rlease-new")["pid"].get<pid_t>());
  // The same set again: nothing new.
  ApplyHeartbeatReply(json{{"gpu_servers", {{"desired", {spec}}}}}, *servers_);
  EXPECT_EQ(CountLines(starts_), 2);
  // An entry that does not parse keeps its server; a block that is not an object changes nothing.
  json broken = spec;
  broken["memory_mb"] = "lots";
  ApplyHeartbeatReply(json{{"gpu_servers", {{"desired", {broken}}}}}, *servers_);
  ApplyHeartbeatReply(json{{"gpu_servers", 7}}, *servers_);
  EXPECT_EQ(Record("rlease-new")["state"], "running");
  // An empty set drains everything.
  ApplyHeartbeatReply(json{{"gpu_servers", {{"desired", json::array()}}}}, *servers_);
  ASSERT_TRUE(WaitState("rlease-new", "stopped"));
  // A desired server that cannot start is reported failed with why (once, not retried).
  ApplyHeartbeatReply(json{{"gpu_servers",
                            {{"desired",
                              {{{"lease_id", "rlease-bad"},
                                {"gpu_uuid", "GPU-zzz"},
                                {"memory_mb", 1},
                                {"sm_count", 1},
                                {"secret", kSecret}}}}}}},
                      *servers_);
  json bad = Record("rlease-bad");
  EXPECT_EQ(bad["state"], "failed");
  EXPECT_NE(bad["reason"].get<std::string>().find("no GPU GPU-zzz on this node"),
            std::string::npos);
}

TEST_F(GpuServersTest, AReplyDecidedBeforeAServerStartedDoesNotDrainIt) {
  Create();
  // The heartbeat leaves; the manager grants a lease and its PUT overtakes the heartbeat's reply,
  // whose desired set was decided before the lease existed.
  const auto sent_at = std::chrono::system_clock::now() - std::chrono::milliseconds(5);
  ASSERT_TRUE(Put(Spec("rlease-new", "GPU-a", 8)).ok());
  ApplyHeartbeatReply(json{{"gpu_servers", {{"desired", json::array()}}}}, *servers_, sent_at);
  EXPECT_EQ(Record("rlease-new")["state"], "running");
  // The next reply, decided after the start, does drain it when it is not desired.
  ApplyHeartbeatReply(json{{"gpu_servers", {{"desired", json::array()}}}}, *servers_,
                      std::chrono::system_clock::now());
  ASSERT_TRUE(WaitState("rlease-new", "stopped"));
}

TEST_F(GpuServersTest, TheSecretIsNeverInAnAnswerOrALogAndTheStateFilesAre0600) {
  config_.extra_args.push_back("--fake-mode");
  config_.extra_args.push_back("crash");
  Create();
  auto r = Put(Spec("rlease-1", "GPU-a"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string state = config_.state_dir;
  struct stat st {};
  ASSERT_EQ(stat(state.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const char* f : {"/rlease-1.json", "/rlease-1.secret", "/rlease-1.log"}) {
    ASSERT_EQ(stat((state + f).c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
  EXPECT_EQ(*ReadFile(state + "/rlease-1.secret"), kSecret + "\n");
  // The secret is on no command line (ps shows those).
  auto cmdline = ReadFile("/proc/" + std::to_string(r->record["pid"].get<pid_t>()) + "/cmdline");
  ASSERT_TRUE(cmdline.ok());
  EXPECT_EQ(cmdline->find(kSecret), std::string::npos);
  ASSERT_TRUE(WaitState("rlease-1", "failed"));
  // Conflicting and invalid PUTs, drains, reconciles: none of them says it either.
  GpuServerSpec other = Spec("rlease-2", "GPU-zzz");
  EXPECT_EQ(Put(other).status().message().find(kSecret), std::string::npos);
  json bad = {{"lease_id", "x"},
              {"gpu_uuid", "GPU-a"},
              {"memory_mb", 1},
              {"sm_count", 1},
              {"secret", kSecret + std::string(200, 'y')}};
  auto parsed = GpuServerSpecFromJson(bad);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message().find(kSecret), std::string::npos);
  servers_->Reconcile({}, {});
  for (const std::string& text :
       {servers_->List().dump(), servers_->HeartbeatJson().dump(), servers_->Events().dump(),
        servers_->MetricsText(), Record("rlease-1").dump(), log_.str()}) {
    EXPECT_EQ(text.find(kSecret), std::string::npos) << text;
  }
  EXPECT_NE(log_.str().find("rlease-1"), std::string::npos);  // the log did see it all
}

TEST_F(GpuServersTest, AGroupWritableStateDirAndAMissingBinaryAreRefused) {
  std::filesystem::create_directories(config_.state_dir);
  chmod(config_.state_dir.c_str(), 0770);
  auto s = GpuServers::Create(config_, {{0, "GPU-a"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("group- or world-writable"), std::string::npos);
  chmod(config_.state_dir.c_str(), 0700);
  config_.binary = "/nonexistent/flyt-gpu-server";
  s = GpuServers::Create(config_, {{0, "GPU-a"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent/flyt-gpu-server"), std::string::npos);
}

TEST_F(GpuServersTest, AGpuWhoseProbeFailsTakesNoServerAndSaysWhy) {
  setenv("FAKE_PROBE_FAIL", "1", 1);
  Create();
  unsetenv("FAKE_PROBE_FAIL");
  auto r = Put(Spec("rlease-1"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(http::HttpStatus(r.status()), 503);
  EXPECT_NE(r.status().message().find("driver not loaded"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(servers_->HeartbeatJson()["gpus"].empty());  // the cluster places nothing here
  json list = servers_->List();
  ASSERT_EQ(list["gpus"].size(), 2u);
  EXPECT_NE(list["gpus"][0]["probe_error"].get<std::string>().find("driver not loaded"),
            std::string::npos);
}

TEST_F(GpuServersTest, ASharedSimulatedGpuTakesSeveralLeasesWithoutMps) {
  config_.shared = {"GPU-a"};
  config_.mps_pipe_dir = (dir_ / "no-mps-here").string();
  Create();
  json gpus = servers_->List()["gpus"];
  EXPECT_EQ(gpus[0]["mps"], "simulated");
  EXPECT_EQ(gpus[0]["shared"], true);
  EXPECT_EQ(gpus[1]["shared"], false);  // not listed in shared
  auto first = Put(Spec("rlease-1", "GPU-a", 20));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->record["sm_count_granted"], 24);  // a share: --sm-count, rounded up to 8
  ASSERT_TRUE(Put(Spec("rlease-2", "GPU-a", 64)).ok());
  ASSERT_TRUE(Put(Spec("rlease-3", "GPU-b", 64)).ok());
  auto second = Put(Spec("rlease-4", "GPU-b", 8));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(http::HttpStatus(second.status()), 409);
}

// A fake MPS: nvidia-cuda-mps-control (doing nothing) first on PATH, and the folder for its
// control endpoint, returned. Sets *old_path to the PATH to restore.
std::string FakeMpsOnPath(const std::filesystem::path& dir, std::string* old_path) {
  const std::string bin = (dir / "bin").string();
  std::filesystem::create_directories(bin);
  std::ofstream(bin + "/nvidia-cuda-mps-control") << "#!/bin/sh\nexit 0\n";
  chmod((bin + "/nvidia-cuda-mps-control").c_str(), 0755);
  *old_path = std::getenv("PATH");
  setenv("PATH", (bin + ":" + *old_path).c_str(), 1);
  const std::string pipes = (dir / "mps").string();
  std::filesystem::create_directories(pipes);
  return pipes;
}

TEST_F(GpuServersTest, AnMpsControlSocketCountsAsARunningDaemon) {
  // CUDA 13's control daemon listens on a Unix socket named control, not a named pipe.
  std::string old_path;
  const std::string pipes = FakeMpsOnPath(dir_, &old_path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = pipes + "/control";
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 4), 0);  // a socket nobody listens on is a dead daemon's (mps_watch.h)
  config_.backend = "driver";
  config_.shared = {"GPU-a"};
  config_.mps_pipe_dir = pipes;
  Create();
  setenv("PATH", old_path.c_str(), 1);
  close(fd);
  EXPECT_EQ(servers_->List()["gpus"][0]["mps"], "running");
}

TEST_F(GpuServersTest, SharedGpusNeedMpsAndThenTakeSeveralLeasesWithinTheirSms) {
  // A fake MPS: nvidia-cuda-mps-control on PATH and its control pipe.
  std::string old_path;
  const std::string pipes = FakeMpsOnPath(dir_, &old_path);
  config_.backend = "driver";  // the sim backend has no MPS to check (below)
  config_.shared = {"GPU-a", "GPU-b"};
  config_.mps_pipe_dir = pipes;
  Create();  // no control pipe yet: not running
  json gpus = servers_->List()["gpus"];
  EXPECT_EQ(gpus[0]["mps"], "not_running");
  EXPECT_EQ(gpus[0]["shared"], false);
  EXPECT_NE(gpus[0]["mps_reason"].get<std::string>().find(pipes + "/control"), std::string::npos);
  servers_.reset();

  ASSERT_EQ(mkfifo((pipes + "/control").c_str(), 0600), 0);
  // The daemon reads its pipe: a pipe nobody reads is a dead daemon's (mps_watch.h).
  UniqueFd daemon(open((pipes + "/control").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_TRUE(daemon.valid());
  Create();
  setenv("PATH", old_path.c_str(), 1);
  gpus = servers_->List()["gpus"];
  EXPECT_EQ(gpus[0]["mps"], "running");
  EXPECT_EQ(gpus[0]["shared"], true);
  EXPECT_NE(servers_->MetricsText().find(
                "flyt_node_gpu_mps{gpu=\"0\",uuid=\"GPU-a\",state=\"running\"} 1"),
            std::string::npos);
  ASSERT_TRUE(Put(Spec("rlease-1", "GPU-a", 64)).ok());
  ASSERT_TRUE(Put(Spec("rlease-2", "GPU-a", 64)).ok());
  auto full = Put(Spec("rlease-3", "GPU-a", 8));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(http::HttpStatus(full.status()), 409);
  EXPECT_NE(full.status().message().find("no room for 8 more SMs (128 of 132 held)"),
            std::string::npos)
      << full.status().message();
  auto huge = Put(Spec("rlease-4", "GPU-b", 200));
  EXPECT_EQ(http::HttpStatus(huge.status()), 400);
}

// ---- the HTTP routes ----

// The node's HTTP API (test::NodeApi: its clock_, monitor_ and server_) over the supervisor.
class GpuServersHttpTest : public GpuServersTest, protected test::NodeApi {
 protected:
  void StartServer(bool with_servers) {
    if (with_servers) Create();
    StartNodeServer(with_servers ? servers_.get() : nullptr);
  }
  void TearDown() override {
    server_.reset();
    GpuServersTest::TearDown();
  }
  std::pair<int, json> Call(const std::string& method, const std::string& path,
                            const json& body = nullptr) {
    return NodeCall(method, path, body.dump(), 10, {kSecret});
  }
  json Body(const std::string& lease, const std::string& gpu = "GPU-a") {
    return {{"lease_id", lease},
            {"gpu_uuid", gpu},
            {"memory_mb", 2048},
            {"sm_count", 32},
            {"secret", kSecret},
            {"owner", "alice"},
            {"expires_at", "2030-01-01T00:00:00Z"}};
  }
};

TEST_F(GpuServersHttpTest, PutGetDeleteAsTheApiSays) {
  StartServer(true);
  auto [created, rec] = Call("PUT", "/api/v1/gpu-servers/rlease-1", Body("rlease-1"));
  ASSERT_EQ(created, 201) << rec;
  EXPECT_EQ(rec["state"], "running");
  pids_.push_back(rec["pid"]);
  EXPECT_EQ(Call("PUT", "/api/v1/gpu-servers/rlease-1", Body("rlease-1")).first, 200);
  json different = Body("rlease-1");
  different["memory_mb"] = 4096;
  auto [conflict, err] = Call("PUT", "/api/v1/gpu-servers/rlease-1", different);
  EXPECT_EQ(conflict, 409);
  EXPECT_EQ(err["code"], "conflict");
  auto [mismatch, err2] = Call("PUT", "/api/v1/gpu-servers/rlease-9", Body("rlease-1"));
  EXPECT_EQ(mismatch, 400);
  EXPECT_NE(err2["error"].get<std::string>().find("differs from the path"), std::string::npos);
  json no_secret = Body("rlease-2");
  no_secret.erase("secret");
  EXPECT_EQ(Call("PUT", "/api/v1/gpu-servers/rlease-2", no_secret).first, 400);

  auto [listed, list] = Call("GET", "/api/v1/gpu-servers");
  EXPECT_EQ(listed, 200);
  EXPECT_EQ(list["servers"].size(), 1u);
  EXPECT_EQ(list["gpus"].size(), 2u);
  EXPECT_EQ(Call("GET", "/api/v1/gpu-servers/rlease-1").second["address"], rec["address"]);
  EXPECT_EQ(Call("GET", "/api/v1/gpu-servers/rlease-7").first, 404);

  auto [drained, answer] = Call("DELETE", "/api/v1/gpu-servers/rlease-1");
  EXPECT_EQ(drained, 202);
  EXPECT_EQ(answer, json({{"draining", "rlease-1"}}));
  EXPECT_EQ(Call("DELETE", "/api/v1/gpu-servers/rlease-7").first, 404);
  ASSERT_TRUE(WaitState("rlease-1", "stopped"));
  // The node's events carry the server's start and stop among the GPUs' events.
  json events = Call("GET", "/api/v1/events").second["events"];
  std::vector<std::string> types;
  for (const json& e : events) types.push_back(e["type"]);
  EXPECT_NE(std::find(types.begin(), types.end(), "gpu_server_started"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "gpu_server_stopped"), types.end());
  // Without the token: 401, as every other route.
  httplib::Client c("127.0.0.1", server_->port());
  EXPECT_EQ(c.Get("/api/v1/gpu-servers")->status, 401);
  // /metrics has the series.
  httplib::Headers h = {{"Authorization", "Bearer node-token"}};
  auto metrics = c.Get("/metrics", h);
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("flyt_node_gpu_servers{state=\"stopped\"} 1"), std::string::npos);
}

TEST_F(GpuServersHttpTest, AStartTimeoutIs503WithTheServersOutput) {
  config_.extra_args = {"--fake-mode", "no-ready"};
  config_.start_timeout = 1s;
  StartServer(true);
  auto [status, err] = Call("PUT", "/api/v1/gpu-servers/rlease-1", Body("rlease-1"));
  EXPECT_EQ(status, 503);
  EXPECT_EQ(err["code"], "unavailable");
  EXPECT_NE(err["error"].get<std::string>().find("stuck initialising the device"),
            std::string::npos)
      << err;
}

TEST_F(GpuServersHttpTest, WithoutGpuServersTheRoutesSaySo) {
  StartServer(false);
  auto [status, err] = Call("GET", "/api/v1/gpu-servers");
  EXPECT_EQ(status, 404);
  EXPECT_NE(err["error"].get<std::string>().find("[gpu-servers] enabled = false"),
            std::string::npos);
  EXPECT_EQ(Call("PUT", "/api/v1/gpu-servers/rlease-1", Body("rlease-1")).first, 404);
}

}  // namespace
}  // namespace flyt::node

namespace flyt::node {
namespace {

// The heartbeat carries the servers and capacity; the fake cluster manager's reply starts one.
TEST_F(GpuServersHttpTest, HeartbeatsCarryTheServersAndApplyTheDesiredSet) {
  ASSERT_TRUE(monitor_.SampleOnce().ok());
  Create();
  Mutex mu;
  std::vector<json> bodies;
  httplib::Server manager;
  manager.Post("/api/v1/nodes/heartbeat", [&](const httplib::Request& req, httplib::Response& res) {
    {
      MutexLock lock(mu);
      bodies.push_back(json::parse(req.body));
    }
    json reply = {{"ok", true}, {"gpu_servers", {{"desired", {Body("rlease-hb", "GPU-b")}}}}};
    res.set_content(reply.dump(), "application/json");
  });
  const int port = manager.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { manager.listen_after_bind(); });
  struct Joiner {
    httplib::Server& server;
    std::thread& thread;
    ~Joiner() {
      server.stop();
      if (thread.joinable()) thread.join();
    }
  } joiner{manager, serving};
  NodeConfig config;
  config.name = "node-a";
  config.cluster_manager = "http://127.0.0.1:" + std::to_string(port);
  config.heartbeat_interval = 1s;
  HeartbeatSender sender(monitor_, config, "http://127.0.0.1:1", "test", nullptr, servers_.get());
  sender.Start();
  ASSERT_TRUE(WaitState("rlease-hb", "running")) << log_.str();
  pids_.push_back(Record("rlease-hb")["pid"].get<pid_t>());
  // A later heartbeat reports it running, with the GPUs' capacity; never the secret.
  bool reported = false;
  for (int i = 0; i < 60 && !reported; ++i) {
    std::this_thread::sleep_for(50ms);
    MutexLock lock(mu);
    for (const json& b : bodies) {
      EXPECT_EQ(b.dump().find(kSecret), std::string::npos);
      const json& gs = b["gpu_servers"];
      EXPECT_EQ(gs["enabled"], true);
      EXPECT_EQ(gs["gpus"].size(), 2u);
      for (const json& s : gs["servers"]) {
        reported = reported || (s["lease_id"] == "rlease-hb" && s["state"] == "running");
      }
    }
  }
  EXPECT_TRUE(reported);
  sender.Stop();
}

}  // namespace
}  // namespace flyt::node
