// ClientManager against a fake cluster manager (fake_cluster.h) and programs played by raw Unix
// socket clients: leases handed out and shared, released after the grace and not before, a
// killed program counted as gone, refusals and outages passed on with their codes, failed leases
// replaced, and hostile local clients cut off without harm to the others.
#include "client_manager/manager.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "client_manager/fake_cluster.h"
#include "common/clock.h"
#include "common/unique_fd.h"

namespace flyt::client_manager {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

bool WaitUntil(const std::function<bool()>& pred, milliseconds limit = milliseconds(15000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return pred();
}

sockaddr_un Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  return addr;
}

// A program's end of the socket.
class Program {
 public:
  explicit Program(const std::string& path) : fd_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_un addr = Address(path);
    connected_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  bool connected() const { return connected_; }
  bool Send(const std::string& text) {
    return ::send(fd_.get(), text.data(), text.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(text.size());
  }
  bool Acquire(const json& profile = nullptr) {
    json req{{"op", "acquire"}, {"pid", ::getpid()}, {"program", "test"}, {"version", 1}};
    if (!profile.is_null()) req["profile"] = profile;
    return Send(req.dump() + "\n");
  }
  // The next line as JSON; nullopt on timeout or close (closed() tells which).
  std::optional<json> Read(milliseconds timeout = milliseconds(15000)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      size_t nl = in_.find('\n');
      if (nl != std::string::npos) {
        std::string line = in_.substr(0, nl);
        in_.erase(0, nl + 1);
        return json::parse(line, nullptr, false);
      }
      auto left = std::chrono::duration_cast<milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        return std::nullopt;
      }
      in_.append(buf, static_cast<size_t>(n));
    }
  }
  // Whether the manager closes the connection within `timeout` (lines before it are skipped).
  bool ClosedWithin(milliseconds timeout = milliseconds(15000)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!closed_ && std::chrono::steady_clock::now() < end) {
      (void)Read(milliseconds(50));
    }
    return closed_;
  }
  void Close() { fd_.Reset(); }

 private:
  UniqueFd fd_;
  bool connected_ = false;
  bool closed_ = false;
  std::string in_;
};

class ManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/flyt-cm-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    config_.name = "client-a";
    config_.socket_path = dir_ + "/run/flyt/cm.sock";
    config_.cluster_manager = cluster_.url();
    config_.token = "client-token";
    config_.lease.sm_percent = 25;
    config_.lease.memory_mb = 4096;
    config_.release_after = seconds(30);
    config_.ttl_seconds = 60;
    config_.acquire_timeout = seconds(5);
    tuning_.max_poll = milliseconds(10);
  }
  void TearDown() override {
    manager_.reset();
    std::filesystem::remove_all(dir_);
  }
  ClientManager& Start(Clock& clock) {
    manager_ = std::make_unique<ClientManager>(config_, clock, tuning_);
    Status s = manager_->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return *manager_;
  }
  ManagerStats Stats() { return manager_->GetStats(); }
  // Waits for `passes` more loop passes: everything the loop can see now has been looked at.
  void Settle(int passes = 3) {
    const uint64_t from = Stats().loop_passes;
    manager_->Wake();
    ASSERT_TRUE(WaitUntil([&] { return Stats().loop_passes >= from + passes; }));
  }
  size_t ProgramsOn(const std::string& lease_id) {
    for (const LeaseView& l : Stats().leases) {
      if (l.id == lease_id) return l.programs;
    }
    return 0;
  }

  FakeCluster cluster_;
  std::string dir_;
  ClientManagerConfig config_;
  ManagerTuning tuning_;
  FakeClock fake_clock_;
  std::unique_ptr<ClientManager> manager_;
};

TEST_F(ManagerTest, AnAcquireGetsTheServerAndTheSecret) {
  Start(fake_clock_);
  Program p(config_.socket_path);
  ASSERT_TRUE(p.connected());
  ASSERT_TRUE(p.Acquire());
  auto answer = p.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["ok"], true) << answer->dump();
  EXPECT_EQ((*answer)["server"], "127.0.0.1:12501");
  EXPECT_EQ((*answer)["secret"], "secret-1-0123456789abcdef0123456789abcdef");
  EXPECT_EQ((*answer)["lease_id"], "rlease-1");
  EXPECT_EQ((*answer)["node"], "node-a");
  EXPECT_EQ((*answer)["gpu_uuid"], "GPU-aaaa");
  EXPECT_EQ((*answer)["memory_mb"], 4096);
  // The lease request: the default profile, this client's name, the ttl, the client token.
  ASSERT_EQ(cluster_.bodies().size(), 1u);
  const json body = cluster_.bodies()[0];
  EXPECT_EQ(body["sm_percent"], 25);
  EXPECT_EQ(body["memory_mb"], 4096);
  EXPECT_EQ(body["client"], "client-a");
  EXPECT_EQ(body["ttl_seconds"], 60);
  EXPECT_FALSE(body.contains("sm_count"));
  EXPECT_EQ(cluster_.last_auth(), "Bearer client-token");
}

TEST_F(ManagerTest, AProgramsProfileOverridesTheDefaults) {
  Start(fake_clock_);
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire({{"sm_count", 32}, {"memory_mb", 1000}, {"gpu_model", "H100"}}));
  auto answer = p.Read();
  ASSERT_TRUE(answer && (*answer)["ok"] == true);
  const json body = cluster_.bodies().at(0);
  EXPECT_EQ(body["sm_count"], 32);
  EXPECT_FALSE(body.contains("sm_percent"));  // sm_count replaces the default's percent
  EXPECT_EQ(body["memory_mb"], 1000);
  EXPECT_EQ(body["gpu_model"], "H100");
}

TEST_F(ManagerTest, ProgramsWithOneProfileShareOneLeaseAndConcurrentOnesWaitForOneRequest) {
  cluster_.create_delay_ms = 300;
  Start(fake_clock_);
  std::vector<std::unique_ptr<Program>> programs;
  for (int i = 0; i < 5; ++i) {
    programs.push_back(std::make_unique<Program>(config_.socket_path));
    ASSERT_TRUE(programs.back()->Acquire());
  }
  for (auto& p : programs) {
    auto answer = p->Read();
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ((*answer)["lease_id"], "rlease-1");
  }
  Program later(config_.socket_path);
  ASSERT_TRUE(later.Acquire());
  auto answer = later.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["lease_id"], "rlease-1");
  EXPECT_EQ(cluster_.creates.load(), 1);
  EXPECT_TRUE(WaitUntil([&] { return ProgramsOn("rlease-1") == 6; }));
  // Another profile is another lease.
  Program other(config_.socket_path);
  ASSERT_TRUE(other.Acquire({{"memory_mb", 1}}));
  answer = other.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["lease_id"], "rlease-2");
}

TEST_F(ManagerTest, ReleasedReleaseAfterTheLastProgramLeftAndNotBefore) {
  Start(fake_clock_);
  auto a = std::make_unique<Program>(config_.socket_path);
  auto b = std::make_unique<Program>(config_.socket_path);
  ASSERT_TRUE(a->Acquire());
  ASSERT_TRUE(a->Read().has_value());
  ASSERT_TRUE(b->Acquire());
  ASSERT_TRUE(b->Read().has_value());
  a->Close();
  ASSERT_TRUE(WaitUntil([&] { return ProgramsOn("rlease-1") == 1; }));
  fake_clock_.Advance(seconds(60));  // one program still connected: kept (and renewed)
  Settle();
  EXPECT_TRUE(cluster_.deleted().empty());
  b->Close();
  ASSERT_TRUE(WaitUntil([&] { return ProgramsOn("rlease-1") == 0; }));
  fake_clock_.Advance(seconds(29));
  Settle();
  EXPECT_TRUE(cluster_.deleted().empty()) << "released before release_after";
  fake_clock_.Advance(seconds(2));
  ASSERT_TRUE(WaitUntil([&] { return cluster_.deleted().size() == 1; }));
  EXPECT_EQ(cluster_.deleted()[0], "rlease-1");
  ASSERT_TRUE(WaitUntil([&] { return Stats().leases.empty(); }));
  EXPECT_GE(cluster_.renews.load(), 1);
  // The next program gets a new lease.
  Program c(config_.socket_path);
  ASSERT_TRUE(c.Acquire());
  auto answer = c.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["lease_id"], "rlease-2");
}

TEST_F(ManagerTest, AProgramThatComesBackWithinTheGraceKeepsTheLease) {
  Start(fake_clock_);
  auto a = std::make_unique<Program>(config_.socket_path);
  ASSERT_TRUE(a->Acquire());
  ASSERT_TRUE(a->Read().has_value());
  a.reset();
  ASSERT_TRUE(WaitUntil([&] { return ProgramsOn("rlease-1") == 0; }));
  fake_clock_.Advance(seconds(20));
  Program b(config_.socket_path);
  ASSERT_TRUE(b.Acquire());
  auto answer = b.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["lease_id"], "rlease-1");
  fake_clock_.Advance(seconds(20));
  Settle();
  EXPECT_TRUE(cluster_.deleted().empty());
}

TEST_F(ManagerTest, AKilledProgramCountsAsDisconnected) {
  Start(fake_clock_);
  // The child only makes system calls after fork (the test has threads).
  const std::string request =
      R"({"op":"acquire","pid":1,"program":"victim","version":1})" + std::string("\n");
  sockaddr_un addr = Address(config_.socket_path);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(2);
    if (::write(fd, request.data(), request.size()) < 0) ::_exit(3);
    char buf[4096];
    if (::read(fd, buf, sizeof buf) <= 0) ::_exit(4);
    if (::write(ready[1], "x", 1) != 1) ::_exit(5);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char x = 0;
  ASSERT_EQ(::read(ready[0], &x, 1), 1);
  ::close(ready[0]);
  ASSERT_TRUE(WaitUntil([&] { return ProgramsOn("rlease-1") == 1; }));
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WaitUntil([&] { return ProgramsOn("rlease-1") == 0; }));
  fake_clock_.Advance(seconds(31));
  ASSERT_TRUE(WaitUntil([&] { return cluster_.deleted().size() == 1; }));
}

TEST_F(ManagerTest, RefusalsReachTheProgramWithTheClustersReasons) {
  Start(fake_clock_);
  cluster_.create_mode = FakeCluster::CreateMode::kInsufficient;
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  auto answer = p.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["ok"], false);
  EXPECT_EQ((*answer)["code"], "insufficient_gpus");
  EXPECT_NE((*answer)["error"].get<std::string>().find(
                "node-b: 2 without room for 64 SMs, 1 without 40000 MiB free"),
            std::string::npos)
      << answer->dump();
  EXPECT_TRUE(p.ClosedWithin());

  cluster_.create_mode = FakeCluster::CreateMode::kNeverFits;
  Program q(config_.socket_path);
  ASSERT_TRUE(q.Acquire());
  answer = q.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["code"], "never_fits");
  // A refusal is not remembered: the next program asks again and may get one.
  cluster_.create_mode = FakeCluster::CreateMode::kGrant;
  Program r(config_.socket_path);
  ASSERT_TRUE(r.Acquire());
  answer = r.Read();
  ASSERT_TRUE(answer && (*answer)["ok"] == true);
}

TEST_F(ManagerTest, ALeaseWithoutARunningServerIsReleasedAndRefused) {
  Start(fake_clock_);
  cluster_.create_mode = FakeCluster::CreateMode::kNotReady;
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  auto answer = p.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["code"], "unavailable");
  EXPECT_NE((*answer)["error"].get<std::string>().find("the node did not start it"),
            std::string::npos);
  ASSERT_TRUE(WaitUntil([&] { return cluster_.deleted().size() == 1; }));
}

TEST_F(ManagerTest, AClusterManagerThatNeverAnswersCostsAcquireTimeoutAtMost) {
  // q asks just after p and joins p's call; when it times out, q has next to none of its own time
  // left and gets the call's answer, not a second call (q would have to ask a whole second later,
  // half its time, to be asked for again).
  config_.acquire_timeout = milliseconds(2000);
  cluster_.create_mode = FakeCluster::CreateMode::kHang;
  Start(SystemClock::Instance());
  Program p(config_.socket_path);
  Program q(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  ASSERT_TRUE(q.Acquire());
  for (Program* prog : {&p, &q}) {
    auto answer = prog->Read(milliseconds(15000));
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ((*answer)["ok"], false);
    EXPECT_EQ((*answer)["code"], "unavailable");
    EXPECT_NE((*answer)["error"].get<std::string>().find(cluster_.url()), std::string::npos)
        << answer->dump();
  }
  EXPECT_EQ(cluster_.creates.load(), 1);
}

TEST_F(ManagerTest, AnUnreachableClusterManagerIsUnavailable) {
  // A port nobody listens on: bound, then closed.
  {
    httplib::Server s;
    std::thread t;
    auto port = http::Listen(s, "127.0.0.1", 0, t);
    ASSERT_TRUE(port.ok());
    config_.cluster_manager = "http://127.0.0.1:" + std::to_string(*port);
    s.stop();
    t.join();
  }
  Start(fake_clock_);
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  auto answer = p.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["code"], "unavailable");
  EXPECT_NE((*answer)["error"].get<std::string>().find("cannot reach the cluster manager"),
            std::string::npos)
      << answer->dump();
}

TEST_F(ManagerTest, ARenewAnsweredLeaseFailedDropsTheLeaseAndTheNextProgramGetsANewOne) {
  Start(fake_clock_);
  Program a(config_.socket_path);
  ASSERT_TRUE(a.Acquire());
  ASSERT_TRUE(a.Read().has_value());
  cluster_.renew_mode = FakeCluster::RenewMode::kLeaseFailed;
  fake_clock_.Advance(config_.RenewInterval() + milliseconds(1));
  auto event = a.Read();
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ((*event)["event"], "lease_failed");
  EXPECT_EQ((*event)["lease_id"], "rlease-1");
  EXPECT_NE((*event)["error"].get<std::string>().find("exited with signal 9"), std::string::npos);
  // The failed lease's share is given back.
  ASSERT_TRUE(WaitUntil([&] { return cluster_.deleted().size() == 1; }));
  Program b(config_.socket_path);
  ASSERT_TRUE(b.Acquire());
  auto answer = b.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["lease_id"], "rlease-2");
  EXPECT_EQ(Stats().leases_dropped, 1u);
}

TEST_F(ManagerTest, ARenewAnsweredAlreadyEndedDropsTheLease) {
  Start(fake_clock_);
  Program a(config_.socket_path);
  ASSERT_TRUE(a.Acquire());
  ASSERT_TRUE(a.Read().has_value());
  cluster_.renew_mode = FakeCluster::RenewMode::kAlreadyEnded;
  fake_clock_.Advance(config_.RenewInterval() + milliseconds(1));
  auto event = a.Read();
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ((*event)["event"], "lease_failed");
  EXPECT_EQ((*event)["code"], "already_ended");
  ASSERT_TRUE(WaitUntil([&] { return Stats().leases.empty(); }));
  EXPECT_TRUE(cluster_.deleted().empty());  // nothing left to release
}

TEST_F(ManagerTest, ARenewOfALeaseTheClusterNoLongerKnowsDropsIt) {
  Start(fake_clock_);
  Program a(config_.socket_path);
  ASSERT_TRUE(a.Acquire());
  ASSERT_TRUE(a.Read().has_value());
  cluster_.renew_mode = FakeCluster::RenewMode::kNotFound;
  fake_clock_.Advance(config_.RenewInterval() + milliseconds(1));
  auto event = a.Read();
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ((*event)["event"], "lease_failed");
  EXPECT_EQ((*event)["code"], "not_found");
  ASSERT_TRUE(WaitUntil([&] { return Stats().leases.empty(); }));
  cluster_.renew_mode = FakeCluster::RenewMode::kOk;
  Program b(config_.socket_path);
  ASSERT_TRUE(b.Acquire());
  auto answer = b.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["lease_id"], "rlease-2");  // a new lease, not the forgotten one
}

TEST_F(ManagerTest, ATransientRenewFailureKeepsTheLease) {
  Start(fake_clock_);
  Program a(config_.socket_path);
  ASSERT_TRUE(a.Acquire());
  ASSERT_TRUE(a.Read().has_value());
  cluster_.renew_mode = FakeCluster::RenewMode::kDown;
  fake_clock_.Advance(config_.RenewInterval() + milliseconds(1));
  ASSERT_TRUE(WaitUntil([&] { return cluster_.renews.load() >= 1; }));
  cluster_.renew_mode = FakeCluster::RenewMode::kOk;
  // The retry comes a quarter interval after the failure was seen, whenever that was.
  ASSERT_TRUE(WaitUntil([&] {
    fake_clock_.Advance(seconds(1));
    auto leases = Stats().leases;
    return leases.size() == 1 && leases[0].renewals >= 1;
  }));
  EXPECT_FALSE(a.Read(milliseconds(100)).has_value());  // no event pushed
}

// ---- issue 32: idempotent lease creation -------------------------------------------------------

TEST_F(ManagerTest, ALostAnswerIsRetriedWithTheSameKeyAndGetsTheOneLease) {
  // The cluster manager makes the lease, and its answer never reaches the client manager in
  // time: the retry with the same Idempotency-Key gets that lease, not a second one.
  config_.acquire_timeout = seconds(10);
  tuning_.create_attempt_timeout = milliseconds(300);
  tuning_.create_retry_pause = milliseconds(10);
  cluster_.lost_answers = 1;
  Start(fake_clock_);
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  auto answer = p.Read();
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ((*answer)["ok"], true) << answer->dump();
  EXPECT_EQ((*answer)["lease_id"], "rlease-1");
  EXPECT_EQ(cluster_.granted.load(), 1);  // one lease, so one GPU server
  const auto keys = cluster_.keys();
  ASSERT_GE(keys.size(), 2u);
  EXPECT_FALSE(keys[0].empty());
  for (const std::string& k : keys) EXPECT_EQ(k, keys[0]);
  EXPECT_TRUE(cluster_.deleted().empty());
  // The next lease (another profile) is another intended lease: a key of its own.
  Program q(config_.socket_path);
  ASSERT_TRUE(q.Acquire(json{{"memory_mb", 2048}}));
  auto other = q.Read();
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ((*other)["lease_id"], "rlease-2");
  EXPECT_NE(cluster_.keys().back(), keys[0]);
}

TEST_F(ManagerTest, ALeaseWhoseServerIsStartingIsAskedForAgainWithItsKey) {
  tuning_.create_retry_pause = milliseconds(10);
  cluster_.starting_answers = 2;
  Start(fake_clock_);
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  auto answer = p.Read();
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ((*answer)["ok"], true) << answer->dump();
  EXPECT_EQ((*answer)["lease_id"], "rlease-1");
  EXPECT_EQ(cluster_.creates.load(), 3);
  EXPECT_EQ(cluster_.granted.load(), 1);
  EXPECT_TRUE(cluster_.deleted().empty());
}

TEST_F(ManagerTest, AnUnsettledCreationsKeyIsReusedByTheNextAcquire) {
  // Past acquire_timeout with no answer: the program is refused, and the lease the cluster may
  // have made is not orphaned — the next acquire of the profile asks with the same key and gets it.
  config_.acquire_timeout = milliseconds(400);
  cluster_.lost_answers = 1;
  cluster_.lost_answer_ms = 2000;
  Start(SystemClock::Instance());
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  auto refused = p.Read();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ((*refused)["code"], "unavailable");
  Program q(config_.socket_path);
  ASSERT_TRUE(q.Acquire());
  auto answer = q.Read();
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ((*answer)["ok"], true) << answer->dump();
  EXPECT_EQ((*answer)["lease_id"], "rlease-1");
  EXPECT_EQ(cluster_.granted.load(), 1);
  const auto keys = cluster_.keys();
  ASSERT_GE(keys.size(), 2u);
  EXPECT_EQ(keys.front(), keys.back());
}

TEST_F(ManagerTest, AProgramThatJoinsAnUnansweredCallIsNotFailedWithItsResult) {
  // p asks; the cluster manager makes the lease and its answer is lost (held 3 s). p's
  // acquire_timeout passes on the fake clock while the call still waits (1.5 s of real time), and
  // q asks for the same share then: it joins the call under way. The call ends with no answer,
  // which was never q's result: q, whose own time has not passed, is asked for again with the same
  // key and gets the one lease (a loaded machine made this race in full-suite runs).
  config_.acquire_timeout = milliseconds(1500);
  tuning_.create_attempt_timeout = milliseconds(1500);
  cluster_.lost_answers = 1;
  cluster_.lost_answer_ms = 3000;
  Start(fake_clock_);
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  // p is waiting once its call has reached the cluster manager.
  for (int i = 0; i < 500 && cluster_.creates.load() == 0; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(cluster_.creates.load(), 1);
  fake_clock_.Advance(milliseconds(1501));
  auto refused = p.Read();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ((*refused)["code"], "unavailable");
  Program q(config_.socket_path);
  ASSERT_TRUE(q.Acquire());
  auto answer = q.Read(seconds(10));
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ((*answer)["ok"], true) << answer->dump();
  EXPECT_EQ((*answer)["lease_id"], "rlease-1");
  EXPECT_EQ(cluster_.granted.load(), 1);
  const auto keys = cluster_.keys();
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.front(), keys.back());
}

// ---- issue 32: a dead GPU server is replaced at once --------------------------------------------

// A loopback TCP address nobody listens on (bound, then closed), or one that accepts.
std::string ClosedAddress() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return "";
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}
struct Listener {
  Listener() : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return;
    if (::listen(fd.get(), 16) != 0) return;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  UniqueFd fd;
  std::string address;
};

json DeadReport(const std::string& lease_id, const std::string& server) {
  return json{{"op", "server_dead"}, {"lease_id", lease_id}, {"server", server}};
}
// The next line that is not an event.
std::optional<json> ReadAnswer(Program& p) {
  for (int i = 0; i < 8; ++i) {
    auto line = p.Read();
    if (!line || !line->contains("event")) return line;
  }
  return std::nullopt;
}

TEST_F(ManagerTest, ADeadServerIsReplacedAtOnceAndTheNextProgramGetsTheNewLease) {
  const std::string dead = ClosedAddress();
  ASSERT_FALSE(dead.empty());
  Listener fresh;
  ASSERT_FALSE(fresh.address.empty());
  cluster_.SetServerAddress(dead);
  Start(fake_clock_);  // the clock never moves: no renewal can notice anything
  Program a(config_.socket_path);
  ASSERT_TRUE(a.Acquire());
  auto granted = a.Read();
  ASSERT_TRUE(granted.has_value());
  ASSERT_EQ((*granted)["server"], dead);
  Program other(config_.socket_path);  // a second program on the same lease
  ASSERT_TRUE(other.Acquire());
  ASSERT_TRUE(other.Read().has_value());
  cluster_.SetServerAddress(fresh.address);
  ASSERT_TRUE(a.Send(DeadReport("rlease-1", dead).dump() + "\n"));
  auto verdict = ReadAnswer(a);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ((*verdict)["ok"], true) << verdict->dump();
  EXPECT_EQ((*verdict)["replaced"], true);
  // The other program on it is told; the lease is released and a new one asked for unasked.
  auto event = other.Read();
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ((*event)["event"], "lease_failed");
  ASSERT_TRUE(WaitUntil([&] { return cluster_.deleted() == std::vector<std::string>{"rlease-1"}; }));
  ASSERT_TRUE(WaitUntil([&] { return cluster_.granted.load() == 2; }));
  Program b(config_.socket_path);
  ASSERT_TRUE(b.Acquire());
  auto answer = b.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["lease_id"], "rlease-2");
  EXPECT_EQ((*answer)["server"], fresh.address);
  EXPECT_EQ(cluster_.renews.load(), 0);
  EXPECT_EQ(Stats().dead_servers_replaced, 1u);
  EXPECT_EQ(cluster_.granted.load(), 2);  // the program joined the replacement, no third lease
}

TEST_F(ManagerTest, AReportForAServerThatAnswersOrAnotherLeaseDropsNothing) {
  Listener alive;
  ASSERT_FALSE(alive.address.empty());
  cluster_.SetServerAddress(alive.address);
  Start(fake_clock_);
  Program a(config_.socket_path);
  ASSERT_TRUE(a.Acquire());
  ASSERT_TRUE(a.Read().has_value());
  ASSERT_TRUE(a.Send(DeadReport("rlease-1", alive.address).dump() + "\n"));
  auto verdict = ReadAnswer(a);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ((*verdict)["ok"], false);
  EXPECT_EQ((*verdict)["code"], "conflict");
  EXPECT_NE((*verdict)["error"].get<std::string>().find("accepts connections"), std::string::npos);
  // A second report on the connection is a protocol error.
  ASSERT_TRUE(a.Send(DeadReport("rlease-1", alive.address).dump() + "\n"));
  EXPECT_TRUE(a.ClosedWithin());
  // A program that was not given the lease, or names another server, is refused.
  Program b(config_.socket_path);
  ASSERT_TRUE(b.Send(DeadReport("rlease-1", alive.address).dump() + "\n"));
  auto stranger = ReadAnswer(b);
  ASSERT_TRUE(stranger.has_value());
  EXPECT_EQ((*stranger)["code"], "permission_denied");
  Program c(config_.socket_path);
  ASSERT_TRUE(c.Acquire());
  ASSERT_TRUE(c.Read().has_value());
  ASSERT_TRUE(c.Send(DeadReport("rlease-1", "127.0.0.1:1").dump() + "\n"));
  auto wrong = ReadAnswer(c);
  ASSERT_TRUE(wrong.has_value());
  EXPECT_EQ((*wrong)["code"], "invalid_argument");
  Settle();
  EXPECT_TRUE(cluster_.deleted().empty());
  EXPECT_EQ(cluster_.granted.load(), 1);
  EXPECT_EQ(Stats().dead_servers_replaced, 0u);
  ASSERT_EQ(Stats().leases.size(), 1u);
  EXPECT_EQ(Stats().leases[0].id, "rlease-1");
}

// A lease moved to another server (flytctl remote migrate) keeps its id and gets a new address,
// which its renewals carry: new programs are sent there, and a report that the old, closed
// address is dead no longer matches the lease, so the moved programs keep their GPU.
TEST_F(ManagerTest, ARenewalWithANewAddressSendsNewProgramsThereAndOutdatesReportsOfTheOld) {
  const std::string old_address = ClosedAddress();
  ASSERT_FALSE(old_address.empty());
  Listener moved;
  ASSERT_FALSE(moved.address.empty());
  cluster_.SetServerAddress(old_address);
  Start(fake_clock_);
  Program a(config_.socket_path);
  ASSERT_TRUE(a.Acquire());
  auto granted = a.Read();
  ASSERT_TRUE(granted.has_value());
  ASSERT_EQ((*granted)["server"], old_address);
  cluster_.SetRenewAddress(moved.address);
  fake_clock_.Advance(config_.RenewInterval() + milliseconds(1));
  ASSERT_TRUE(WaitUntil([&] {
    auto leases = Stats().leases;
    return leases.size() == 1 && leases[0].renewals >= 1;
  }));
  Program b(config_.socket_path);
  ASSERT_TRUE(b.Acquire());
  auto answer = b.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["lease_id"], "rlease-1");
  EXPECT_EQ((*answer)["server"], moved.address);
  ASSERT_TRUE(b.Send(DeadReport("rlease-1", old_address).dump() + "\n"));
  auto verdict = ReadAnswer(b);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ((*verdict)["ok"], false) << verdict->dump();
  Settle();
  EXPECT_TRUE(cluster_.deleted().empty());
  EXPECT_EQ(cluster_.granted.load(), 1);
  EXPECT_EQ(Stats().dead_servers_replaced, 0u);
}

TEST_F(ManagerTest, DeadServerReplacementsAreRateLimitedPerProfile) {
  const std::string dead = ClosedAddress();
  ASSERT_FALSE(dead.empty());
  tuning_.dead_server_interval = std::chrono::hours(1);
  cluster_.SetServerAddress(dead);  // the replacement's server is dead too
  Start(fake_clock_);
  Program a(config_.socket_path);
  ASSERT_TRUE(a.Acquire());
  ASSERT_TRUE(a.Read().has_value());
  ASSERT_TRUE(a.Send(DeadReport("rlease-1", dead).dump() + "\n"));
  auto first = ReadAnswer(a);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ((*first)["ok"], true);
  Program b(config_.socket_path);
  ASSERT_TRUE(b.Acquire());
  auto second_lease = b.Read();
  ASSERT_TRUE(second_lease.has_value());
  ASSERT_EQ((*second_lease)["lease_id"], "rlease-2");
  ASSERT_TRUE(b.Send(DeadReport("rlease-2", dead).dump() + "\n"));
  auto second = ReadAnswer(b);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ((*second)["ok"], false);
  EXPECT_EQ((*second)["code"], "unavailable");
  Settle();
  EXPECT_EQ(cluster_.granted.load(), 2);
  EXPECT_EQ(cluster_.deleted(), std::vector<std::string>{"rlease-1"});
  EXPECT_EQ(Stats().dead_servers_replaced, 1u);
}

TEST_F(ManagerTest, HostileClientsAreCutOffAndTheOthersAreServed) {
  tuning_.first_line_timeout = milliseconds(200);
  Start(SystemClock::Instance());
  Program garbage(config_.socket_path);
  ASSERT_TRUE(garbage.Send("this is not json\n"));
  auto answer = garbage.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["code"], "invalid_argument");
  EXPECT_TRUE(garbage.ClosedWithin());

  Program wrong_type(config_.socket_path);
  ASSERT_TRUE(wrong_type.Send(R"({"op":"acquire","profile":{"memory_mb":"lots"}})" "\n"));
  EXPECT_TRUE(wrong_type.ClosedWithin());
  Program unknown_op(config_.socket_path);
  ASSERT_TRUE(unknown_op.Send(R"({"op":"format-disk"})" "\n"));
  EXPECT_TRUE(unknown_op.ClosedWithin());

  Program huge(config_.socket_path);
  std::string big(70 << 10, 'x');
  (void)huge.Send(big);
  EXPECT_TRUE(huge.ClosedWithin());

  Program silent(config_.socket_path);
  EXPECT_TRUE(silent.ClosedWithin());  // first_line_timeout

  Program twice(config_.socket_path);
  ASSERT_TRUE(twice.Acquire());
  ASSERT_TRUE(twice.Read().has_value());
  ASSERT_TRUE(twice.Acquire());
  EXPECT_TRUE(twice.ClosedWithin());

  EXPECT_TRUE(WaitUntil([&] { return Stats().closed_protocol >= 6; }))
      << Stats().closed_protocol;
  Program good(config_.socket_path);
  ASSERT_TRUE(good.Acquire());
  answer = good.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["ok"], true);
}

TEST_F(ManagerTest, NoMemorySizeAnywhereIsAClearRefusal) {
  config_.lease.memory_mb.reset();
  Start(fake_clock_);
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  auto answer = p.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["code"], "invalid_argument");
  EXPECT_NE((*answer)["error"].get<std::string>().find("FLYT_REMOTE_MEMORY_MB"),
            std::string::npos);
  EXPECT_EQ(cluster_.creates.load(), 0);
}

TEST_F(ManagerTest, TooManyConnectionsAreRefused) {
  config_.max_connections = 2;
  Start(fake_clock_);
  Program a(config_.socket_path), b(config_.socket_path);
  ASSERT_TRUE(WaitUntil([&] { return Stats().connections == 2; }));
  Program c(config_.socket_path);
  auto answer = c.Read();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ((*answer)["code"], "resource_exhausted");
  EXPECT_TRUE(c.ClosedWithin());
}

TEST_F(ManagerTest, TheSocketGetsItsModeAndDirectoryAndAStaleOneIsReplaced) {
  config_.socket_mode = 0660;
  // A socket file left by a manager that died (bound, never listened on, closed).
  std::filesystem::create_directories(dir_ + "/run/flyt");
  {
    UniqueFd stale(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un addr = Address(config_.socket_path);
    ASSERT_EQ(::bind(stale.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }
  Start(fake_clock_);
  struct stat st{};
  ASSERT_EQ(::stat(config_.socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  Program p(config_.socket_path);
  ASSERT_TRUE(p.Acquire());
  ASSERT_TRUE(p.Read().has_value());

  // A second manager on the same path refuses to start and leaves the first alone.
  ClientManager second(config_, fake_clock_, tuning_);
  Status s = second.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("already listens"), std::string::npos) << s.ToString();
  Program q(config_.socket_path);
  ASSERT_TRUE(q.Acquire());
  ASSERT_TRUE(q.Read().has_value());

  // Stopping releases the lease and removes the socket.
  manager_->Stop();
  EXPECT_EQ(cluster_.deleted().size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(config_.socket_path));
}

TEST_F(ManagerTest, AFileThatIsNotASocketIsNeverRemoved) {
  std::filesystem::create_directories(dir_ + "/run/flyt");
  std::ofstream(config_.socket_path) << "precious";
  ClientManager manager(config_, fake_clock_, tuning_);
  Status s = manager.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a socket"), std::string::npos) << s.ToString();
  std::ifstream in(config_.socket_path);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "precious");
}

}  // namespace
}  // namespace flyt::client_manager
