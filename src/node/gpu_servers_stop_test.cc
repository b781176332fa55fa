// GpuServers in the node manager's clean stop (StopAll drains every server and waits; without it
// the servers outlive the supervisor for a restart) and at start, where a server of the state dir
// that no record adopts is stopped. The fixture is gpu_servers_fixture.h.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "node/gpu_servers_fixture.h"
#include "node/gpu_servers_testing.h"

namespace flyt::node {
namespace {

using test::CountLines;

TEST_F(GpuServersTest, StopAllDrainsEveryServerWaitsForItAndStartsNothingMore) {
  Create();
  auto a = Put(Spec("rlease-a", "GPU-a"));
  auto b = Put(Spec("rlease-b", "GPU-b"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(servers_->StopAll(), 0);
  // Returned only once both had exited, on SIGTERM (no SIGKILL needed).
  for (const char* lease : {"rlease-a", "rlease-b"}) {
    const json rec = Record(lease);
    EXPECT_EQ(rec["state"], "stopped") << rec;
    EXPECT_EQ(rec["reason"], "drained (exited with code 0)") << rec;
    EXPECT_FALSE(Alive(rec["pid"].get<pid_t>()));
  }
  EXPECT_TRUE(std::filesystem::is_empty(config_.state_dir));
  // A stopping node starts nothing: neither a PUT nor the cluster's desired set.
  auto put = Put(Spec("rlease-c", "GPU-a"));
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(http::HttpStatus(put.status()), 503);
  EXPECT_NE(put.status().message().find("stopping"), std::string::npos) << put.status().message();
  servers_->Reconcile({Spec("rlease-d", "GPU-b")}, {});
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(CountLines(starts_), 2);
  EXPECT_EQ(Record("rlease-d"), json::object());
  EXPECT_EQ(servers_->StopAll(), 0);  // again: nothing to do
}

TEST_F(GpuServersTest, StopAllKillsAServerThatIgnoresSigtermAfterTheGrace) {
  config_.extra_args = {"--fake-mode", "ignore-term"};
  Create();
  auto r = Put(Spec("rlease-s", "GPU-b"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(servers_->StopAll(), 0);
  const json rec = Record("rlease-s");
  EXPECT_EQ(rec["state"], "stopped");
  EXPECT_NE(rec["reason"].get<std::string>().find("SIGKILL after the 1 s drain"),
            std::string::npos)
      << rec;
  EXPECT_FALSE(Alive(r->record["pid"].get<pid_t>()));
}

TEST_F(GpuServersTest, WithoutStopAllTheServersOutliveTheSupervisorForARestart) {
  // What flyt-node-manager does on SIGUSR2: the supervisor goes, its servers stay for the next.
  Create();
  auto r = Put(Spec("rlease-keep"));
  ASSERT_TRUE(r.ok());
  const pid_t pid = r->record["pid"];
  servers_.reset();
  EXPECT_TRUE(Alive(pid));
  EXPECT_TRUE(std::filesystem::exists(config_.state_dir + "/rlease-keep.json"));
  Create();
  EXPECT_EQ(Record("rlease-keep")["state"], "running");
  EXPECT_EQ(Record("rlease-keep")["pid"], pid);
  EXPECT_TRUE(Alive(pid));
}

TEST_F(GpuServersTest, AServerWhoseRecordIsMissingIsStoppedAtStart) {
  Create();
  auto kept = Put(Spec("rlease-kept", "GPU-a"));
  auto orphan = Put(Spec("rlease-orphan", "GPU-b"));
  ASSERT_TRUE(kept.ok() && orphan.ok());
  const pid_t kept_pid = kept->record["pid"], orphan_pid = orphan->record["pid"];
  servers_.reset();
  std::filesystem::remove(config_.state_dir + "/rlease-orphan.json");
  Create();  // returns once the orphan is gone
  EXPECT_FALSE(Alive(orphan_pid));
  EXPECT_TRUE(Alive(kept_pid));
  EXPECT_EQ(Record("rlease-kept")["state"], "running");
  EXPECT_EQ(Record("rlease-orphan"), json::object());  // no record: nothing the cluster must see
  EXPECT_NE(log_.str().find("pid " + std::to_string(orphan_pid) +
                            " is a GPU server of lease rlease-orphan"),
            std::string::npos)
      << log_.str();
  // Its event, wherever it stands: the adopted server's may come after it (a loaded machine).
  json stopped;
  for (const json& e : servers_->Events()) {
    if (e["lease_id"] == "rlease-orphan") stopped = e;
  }
  ASSERT_TRUE(stopped.is_object()) << servers_->Events().dump();
  EXPECT_EQ(stopped["type"], "gpu_server_stopped");
  EXPECT_EQ(stopped["uuid"], "GPU-b");
  EXPECT_EQ(stopped["gpu"], 1);
  // Its leftover files went with it; the adopted server's stay.
  EXPECT_FALSE(std::filesystem::exists(config_.state_dir + "/rlease-orphan.secret"));
  EXPECT_TRUE(std::filesystem::exists(config_.state_dir + "/rlease-kept.secret"));
  EXPECT_EQ(log_.str().find(kSecret), std::string::npos);
}

TEST_F(GpuServersTest, AServerWhoseRecordIsUnreadableIsStoppedAtStart) {
  Create();
  auto r = Put(Spec("rlease-1"));
  ASSERT_TRUE(r.ok());
  servers_.reset();
  std::ofstream(config_.state_dir + "/rlease-1.json") << "{torn";
  Create();
  EXPECT_FALSE(Alive(r->record["pid"].get<pid_t>()));
  EXPECT_TRUE(std::filesystem::is_empty(config_.state_dir));
}

TEST_F(GpuServersTest, AServerOfADeletedStateDirIsStoppedEvenIfItIgnoresSigterm) {
  // The demo's restart deleted the whole state_dir while a server of the last run still ran.
  config_.extra_args = {"--fake-mode", "ignore-term"};
  Create();
  auto r = Put(Spec("rlease-1"));
  ASSERT_TRUE(r.ok());
  servers_.reset();
  std::filesystem::remove_all(config_.state_dir);
  Create();
  EXPECT_FALSE(Alive(r->record["pid"].get<pid_t>()));
  EXPECT_NE(log_.str().find("SIGKILL"), std::string::npos) << log_.str();
  // Its event says so. (Not necessarily the last event: the fake server's shell may have a
  // subshell with the same command line, stopped in the same pass, in either order.)
  const std::string pid = "(pid " + std::to_string(r->record["pid"].get<pid_t>()) + ")";
  bool said = false;
  for (const json& e : servers_->Events()) {
    const std::string d = e["description"].get<std::string>();
    said = said || (d.find(pid) != std::string::npos && d.find("SIGKILL") != std::string::npos);
  }
  EXPECT_TRUE(said) << json(servers_->Events()).dump();
}

TEST_F(GpuServersTest, AServerOfAnotherStateDirIsLeftAlone) {
  Create();
  auto r = Put(Spec("rlease-1"));
  ASSERT_TRUE(r.ok());
  servers_.reset();
  // Another node manager on this host, with a state_dir of its own (ours is a prefix of its name).
  config_.state_dir = config_.state_dir + "-other";
  Create();
  EXPECT_TRUE(Alive(r->record["pid"].get<pid_t>()));
  EXPECT_EQ(Record("rlease-1"), json::object());
}

}  // namespace
}  // namespace flyt::node
