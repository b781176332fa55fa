// MpsWatch and its default probe: a fake control socket or pipe in a folder of the test's own
// (the daemon "killed" by closing it, which leaves the socket file behind as a killed daemon
// does), and the state machine over a probe and a start function of the test's, on a FakeClock.
#include "node/mps_watch.h"

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

#include "common/unique_fd.h"

namespace flyt::node {
namespace {

using namespace std::chrono_literals;

class MpsProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-mps-watch-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A listening Unix socket at dir_/control: a live control daemon.
  UniqueFd Listen() {
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = (dir_ / "control").string();
    EXPECT_LT(path.size(), sizeof(addr.sun_path));
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    unlink(path.c_str());
    EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd.get(), 4), 0);
    return fd;
  }

  std::filesystem::path dir_;
};

TEST_F(MpsProbeTest, NoControlEndpointDoesNotAnswer) {
  MpsReading r = ProbeMpsControl(dir_.string());
  EXPECT_FALSE(r.answers);
  EXPECT_NE(r.detail.find(dir_.string() + "/control"), std::string::npos) << r.detail;
}

TEST_F(MpsProbeTest, AKilledDaemonsSocketFileDoesNotAnswer) {
  UniqueFd daemon = Listen();
  EXPECT_TRUE(ProbeMpsControl(dir_.string()).answers);
  daemon.Reset();  // killed: the socket file stays
  ASSERT_TRUE(std::filesystem::exists(dir_ / "control"));
  MpsReading r = ProbeMpsControl(dir_.string());
  EXPECT_FALSE(r.answers);
  EXPECT_NE(r.detail.find("refuses connections"), std::string::npos) << r.detail;
  daemon = Listen();  // back
  EXPECT_TRUE(ProbeMpsControl(dir_.string()).answers);
}

TEST_F(MpsProbeTest, ThePidFileOfALiveDaemonIsEnoughAndAStaleOneIsNot) {
  UniqueFd daemon = Listen();
  daemon.Reset();  // a stale socket: only the pid file can say yes now
  const std::string pid_file = (dir_ / "nvidia-cuda-mps-control.pid").string();
  std::ofstream(pid_file) << getpid() << "\n";  // a live process, not the daemon
  EXPECT_FALSE(ProbeMpsControl(dir_.string()).answers);

  // A process named as the daemon is (a copy of sleep): its pid file says it runs.
  const std::string fake = (dir_ / "nvidia-cuda-mps-control").string();
  std::filesystem::copy_file(
      std::filesystem::exists("/usr/bin/sleep") ? "/usr/bin/sleep" : "/bin/sleep", fake);
  ASSERT_EQ(chmod(fake.c_str(), 0755), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl(fake.c_str(), fake.c_str(), "60", static_cast<char*>(nullptr));
    _exit(127);
  }
  bool named = false;  // bounded wait for the exec
  for (int i = 0; i < 500 && !named; ++i) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    std::getline(comm, name);
    named = name == "nvidia-cuda-mps";
    if (!named) usleep(10000);
  }
  std::ofstream(pid_file) << pid << "\n";
  EXPECT_TRUE(named);
  EXPECT_TRUE(ProbeMpsControl(dir_.string()).answers);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  // Killed: its pid file stays, names nothing, and the socket refuses.
  MpsReading r = ProbeMpsControl(dir_.string());
  EXPECT_FALSE(r.answers);
  EXPECT_NE(r.detail.find("refuses connections"), std::string::npos) << r.detail;
}

TEST_F(MpsProbeTest, AControlPipeAnswersWhileSomeoneReadsIt) {
  const std::string path = (dir_ / "control").string();
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  MpsReading r = ProbeMpsControl(dir_.string());
  EXPECT_FALSE(r.answers);
  EXPECT_NE(r.detail.find("nobody reads"), std::string::npos) << r.detail;
  UniqueFd reader(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_TRUE(reader.valid());
  EXPECT_TRUE(ProbeMpsControl(dir_.string()).answers);
}

TEST_F(MpsProbeTest, AFileIsNotAControlEndpoint) {
  std::ofstream(dir_ / "control") << "x";
  MpsReading r = ProbeMpsControl(dir_.string());
  EXPECT_FALSE(r.answers);
  EXPECT_NE(r.detail.find("neither a pipe nor a socket"), std::string::npos) << r.detail;
}

// ---- the state machine ----

struct FakeDaemon {
  bool up = false;
  bool start_brings_it_up = true;
  int starts = 0;
  MpsProbe Probe() {
    return [this] { return MpsReading{up, up ? "" : "no pipe or socket /fake/control"}; };
  }
  std::function<Status()> Start() {
    return [this] {
      ++starts;
      if (start_brings_it_up) up = true;
      return start_brings_it_up ? Status::Ok() : Unavailable("exited with code 1");
    };
  }
};

TEST(MpsWatchTest, RunningThenDownWithTheReasonThenRunningAgain) {
  FakeClock clock;
  FakeDaemon d;
  d.up = true;
  MpsWatch watch(d.Probe(), nullptr, clock);
  MpsStatus s = watch.Check();
  EXPECT_EQ(s.state, "running");
  EXPECT_TRUE(s.changed);
  EXPECT_TRUE(s.reason.empty());
  clock.Advance(5s);
  EXPECT_FALSE(watch.Check().changed);

  d.up = false;  // killed
  clock.Advance(5s);
  s = watch.Check();
  EXPECT_EQ(s.state, "down");
  EXPECT_TRUE(s.changed);
  EXPECT_EQ(s.since, clock.WallNow());
  EXPECT_NE(s.reason.find("stopped answering at 2026-01-01T00:00:10"), std::string::npos)
      << s.reason;
  EXPECT_NE(s.reason.find("/fake/control"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("mps_start = true"), std::string::npos) << s.reason;
  const auto since = s.since;
  clock.Advance(5s);
  s = watch.Check();
  EXPECT_EQ(s.state, "down");
  EXPECT_FALSE(s.changed);
  EXPECT_EQ(s.since, since);  // down since it stopped, not since the last look

  d.up = true;  // back
  s = watch.Check();
  EXPECT_EQ(s.state, "running");
  EXPECT_TRUE(s.changed);
  EXPECT_TRUE(s.reason.empty());
  EXPECT_EQ(d.starts, 0);  // never started without a start function
}

TEST(MpsWatchTest, ADaemonNeverSeenIsNotRunningAndIsRunningOnceItAnswers) {
  FakeClock clock;
  FakeDaemon d;
  MpsWatch watch(d.Probe(), nullptr, clock);
  MpsStatus s = watch.Check();
  EXPECT_EQ(s.state, "not_running");
  EXPECT_NE(s.reason.find("no MPS control daemon: no pipe or socket /fake/control"),
            std::string::npos)
      << s.reason;
  EXPECT_FALSE(watch.Check().changed);
  d.up = true;
  EXPECT_EQ(watch.Check().state, "running");
}

TEST(MpsWatchTest, WithAStartFunctionADeadDaemonIsStartedAgain) {
  FakeClock clock;
  FakeDaemon d;
  d.up = true;
  MpsWatch watch(d.Probe(), d.Start(), clock);
  EXPECT_EQ(watch.Check().state, "running");
  EXPECT_EQ(d.starts, 0);
  d.up = false;
  MpsStatus s = watch.Check();  // started again at once
  EXPECT_EQ(d.starts, 1);
  EXPECT_EQ(s.state, "running");
}

TEST(MpsWatchTest, AStartThatFailsIsRetriedWithABackoffThatDoubles) {
  FakeClock clock;
  FakeDaemon d;
  d.start_brings_it_up = false;
  MpsWatch watch(d.Probe(), d.Start(), clock, {5s, 20s});
  MpsStatus s = watch.Check();
  EXPECT_EQ(s.state, "not_running");
  EXPECT_EQ(d.starts, 1);
  EXPECT_NE(s.reason.find("starting it failed (exited with code 1), next try at "
                          "2026-01-01T00:00:05"),
            std::string::npos)
      << s.reason;
  clock.Advance(4s);
  watch.Check();
  EXPECT_EQ(d.starts, 1);  // not before the backoff
  clock.Advance(1s);
  watch.Check();
  EXPECT_EQ(d.starts, 2);  // at 5 s; the next after 10 s more
  clock.Advance(9s);
  watch.Check();
  EXPECT_EQ(d.starts, 2);
  clock.Advance(1s);
  watch.Check();
  EXPECT_EQ(d.starts, 3);  // at 15 s; then every 20 s (the cap)
  clock.Advance(20s);
  watch.Check();
  EXPECT_EQ(d.starts, 4);
  clock.Advance(20s);
  watch.Check();
  EXPECT_EQ(d.starts, 5);

  // It comes back by itself: running, and the backoff starts over at the next death.
  d.up = true;
  EXPECT_EQ(watch.Check().state, "running");
  EXPECT_EQ(d.starts, 5);
  d.up = false;
  s = watch.Check();
  EXPECT_EQ(d.starts, 6);
  EXPECT_EQ(s.state, "down");
  clock.Advance(5s);
  watch.Check();
  EXPECT_EQ(d.starts, 7);
}

}  // namespace
}  // namespace flyt::node
