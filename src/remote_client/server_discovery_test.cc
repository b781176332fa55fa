// Server discovery against a fake flyt-client-manager socket: the request the runtime sends,
// the answer it reads, and every failure as the CUDA error and message a program sees — no
// manager, a manager that never answers, refusals with the cluster's reasons, bad variables.
#include "remote_client/server_discovery.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace flyt::remote {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// A manager that accepts one connection at a time, reads one line and answers with `answer`
// (nothing when empty), then keeps the connection until the test ends.
class FakeManager {
 public:
  FakeManager(const std::string& path, std::string answer) : answer_(std::move(answer)) {
    fd_.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_.get(), 8), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeManager() {
    stop_ = true;
    ::shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
  }
  json request() {
    while (!got_.load()) std::this_thread::sleep_for(milliseconds(5));
    return json::parse(request_);
  }
  void Push(const std::string& line) { (void)!::write(conn_.get(), line.data(), line.size()); }

 private:
  void Serve() {
    int c = ::accept(fd_.get(), nullptr, nullptr);
    if (c < 0) return;
    conn_.Reset(c);
    std::string in;
    char buf[4096];
    while (in.find('\n') == std::string::npos) {
      ssize_t n = ::read(c, buf, sizeof buf);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
    }
    request_ = in.substr(0, in.find('\n'));
    got_ = true;
    if (!answer_.empty()) (void)!::write(c, answer_.data(), answer_.size());
    while (!stop_) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0 && ::read(c, buf, sizeof buf) <= 0) return;
    }
  }

  UniqueFd fd_;
  UniqueFd conn_;
  std::string answer_;
  std::string request_;
  std::atomic<bool> got_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class DiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/flyt-discovery.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    options_.socket_path = dir_ + "/cm.sock";
    options_.timeout = milliseconds(5000);
    options_.program = "vector_add";
    options_.pid = 42;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  DiscoveryOptions options_;
};

TEST_F(DiscoveryTest, TheAnswerGivesTheServerAndSecret) {
  options_.profile = json{{"sm_percent", 50}, {"memory_mb", 2048}};
  FakeManager manager(options_.socket_path,
                      R"({"ok":true,"server":"10.0.0.5:12501","secret":"s3cr3t","lease_id":"rlease-1",)"
                      R"("node":"node-a","gpu_uuid":"GPU-1","sm_count":66,"memory_mb":2048})" "\n");
  auto session = ManagerSession::Acquire(options_);
  ASSERT_TRUE(session.ok()) << session.status().message();
  const LeasedServer& s = (*session)->server();
  EXPECT_EQ(s.address, "10.0.0.5:12501");
  EXPECT_EQ(s.secret, "s3cr3t");
  EXPECT_EQ(s.lease_id, "rlease-1");
  EXPECT_EQ(s.node, "node-a");
  EXPECT_EQ(s.gpu_uuid, "GPU-1");
  EXPECT_EQ(s.sm_count, 66);
  const json req = manager.request();
  EXPECT_EQ(req["op"], "acquire");
  EXPECT_EQ(req["pid"], 42);
  EXPECT_EQ(req["program"], "vector_add");
  EXPECT_EQ(req["version"], 1);
  EXPECT_EQ(req["profile"]["sm_percent"], 50);
  EXPECT_EQ(req["profile"]["memory_mb"], 2048);
}

// A manager that serves connections one after another (the next once the previous one closed),
// answering each line of connection n with script(n, request).
class ScriptedManager {
 public:
  using Script = std::function<std::string(int conn, const json& request)>;
  ScriptedManager(const std::string& path, Script script) : script_(std::move(script)) {
    fd_.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_.get(), 8), 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedManager() {
    stop_ = true;
    ::shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
  }
  std::vector<std::pair<int, json>> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Serve() {
    for (int n = 0; !stop_; ++n) {
      int c = ::accept(fd_.get(), nullptr, nullptr);
      if (c < 0) return;
      UniqueFd conn(c);
      std::string in;
      char buf[4096];
      while (!stop_) {
        pollfd p{c, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        ssize_t got = ::read(c, buf, sizeof buf);
        if (got <= 0) break;
        in.append(buf, static_cast<size_t>(got));
        for (size_t nl = in.find('\n'); nl != std::string::npos; nl = in.find('\n')) {
          json request = json::parse(in.substr(0, nl), nullptr, false);
          in.erase(0, nl + 1);
          {
            std::lock_guard<std::mutex> lock(mu_);
            requests_.emplace_back(n, request);
          }
          const std::string answer = script_(n, request);
          (void)!::write(c, answer.data(), answer.size());
        }
      }
    }
  }

  Script script_;
  UniqueFd fd_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<int, json>> requests_;
  std::thread thread_;
};

std::string Granted(const std::string& lease, const std::string& server) {
  return json{{"ok", true},         {"server", server}, {"secret", "secret-" + lease},
              {"lease_id", lease},  {"node", "node-a"}, {"gpu_uuid", "GPU-1"}}
             .dump() +
         "\n";
}

TEST_F(DiscoveryTest, ADeadServerIsReportedAndTheNewLeaseTaken) {
  ScriptedManager manager(options_.socket_path, [](int conn, const json& req) -> std::string {
    if (req["op"] == "acquire") {
      return conn == 0 ? Granted("rlease-1", "127.0.0.1:12501") : Granted("rlease-2", "127.0.0.1:12502");
    }
    // The lease's holders hear of its end before the reporter gets its answer.
    return R"({"event":"lease_failed","lease_id":"rlease-1","code":"lease_failed","error":"gone"})"
           "\n"
           R"({"ok":true,"replaced":true})"
           "\n";
  });
  auto session = ManagerSession::Acquire(options_);
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto next = ManagerSession::ReplaceDeadServer(std::move(session).value(), options_);
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_EQ((*next)->server().address, "127.0.0.1:12502");
  EXPECT_EQ((*next)->server().lease_id, "rlease-2");
  EXPECT_EQ((*next)->server().secret, "secret-rlease-2");
  const auto requests = manager.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[1].first, 0);  // on the lease's own connection
  EXPECT_EQ(requests[1].second["op"], "server_dead");
  EXPECT_EQ(requests[1].second["lease_id"], "rlease-1");
  EXPECT_EQ(requests[1].second["server"], "127.0.0.1:12501");
  EXPECT_EQ(requests[2].first, 1);
  EXPECT_EQ(requests[2].second["op"], "acquire");
}

TEST_F(DiscoveryTest, AReportTheManagerRefusesKeepsTheLeaseAndSaysWhy) {
  ScriptedManager manager(options_.socket_path, [](int, const json& req) -> std::string {
    if (req["op"] == "acquire") return Granted("rlease-1", "127.0.0.1:12501");
    return R"({"ok":false,"code":"conflict","error":"the GPU server accepts connections"})" "\n";
  });
  auto session = ManagerSession::Acquire(options_);
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto next = ManagerSession::ReplaceDeadServer(std::move(session).value(), options_);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), CudaError::kDevicesUnavailable);
  EXPECT_NE(next.status().message().find("accepts connections"), std::string::npos)
      << next.status().message();
  EXPECT_EQ(manager.requests().size(), 2u);  // no second acquire
}

TEST_F(DiscoveryTest, AManagerThatDoesNotAnswerTheReportIsBounded) {
  options_.timeout = milliseconds(200);
  ScriptedManager manager(options_.socket_path, [](int, const json& req) -> std::string {
    return req["op"] == "acquire" ? Granted("rlease-1", "127.0.0.1:12501") : "";
  });
  auto session = ManagerSession::Acquire(options_);
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto next = ManagerSession::ReplaceDeadServer(std::move(session).value(), options_);
  ASSERT_FALSE(next.ok());
  EXPECT_NE(next.status().message().find("did not answer the report"), std::string::npos);
}

TEST(ServerOutOfReachTest, OnlyAnUnreachableServerIsReported) {
  EXPECT_TRUE(ServerOutOfReach("connect to 10.0.0.5:12501: Connection refused"));
  EXPECT_TRUE(ServerOutOfReach("connect to unix:/run/s.sock: No such file or directory"));
  EXPECT_TRUE(ServerOutOfReach("connect to 10.0.0.5:12501: No route to host"));
  EXPECT_FALSE(ServerOutOfReach("10.0.0.5:12501: the server closed the connection"));
  EXPECT_FALSE(ServerOutOfReach("connect to 10.0.0.5:12501: Connection timed out"));
}

TEST_F(DiscoveryTest, NoManagerIsNoDeviceNamingTheSocket) {
  const auto start = std::chrono::steady_clock::now();
  auto session = ManagerSession::Acquire(options_);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), CudaError::kNoDevice);
  const std::string& m = session.status().message();
  EXPECT_NE(m.find("FLYT_SERVER is not set"), std::string::npos) << m;
  EXPECT_NE(m.find("no flyt-client-manager listens on " + options_.socket_path), std::string::npos)
      << m;
  EXPECT_NE(m.find("No such file or directory"), std::string::npos) << m;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

TEST_F(DiscoveryTest, AManagerThatNeverAnswersIsBoundedByTheTimeout) {
  options_.timeout = milliseconds(300);
  FakeManager manager(options_.socket_path, "");
  auto session = ManagerSession::Acquire(options_);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), CudaError::kDevicesUnavailable);
  EXPECT_NE(session.status().message().find("within 300 ms (FLYT_CLIENT_MANAGER_TIMEOUT_MS)"),
            std::string::npos)
      << session.status().message();
}

TEST_F(DiscoveryTest, RefusalsBecomeCudaErrorsWithTheClustersReasons) {
  const std::map<std::string, CudaError> cases = {
      {"insufficient_gpus", CudaError::kDevicesUnavailable},
      {"never_fits", CudaError::kNoDevice},
      {"unavailable", CudaError::kDevicesUnavailable},
      {"unauthenticated", CudaError::kNoDevice},
  };
  for (const auto& [code, error] : cases) {
    std::filesystem::remove(options_.socket_path);
    FakeManager manager(options_.socket_path,
                        json{{"ok", false},
                             {"code", code},
                             {"error", "node-b: 2 without room for 64 SMs"}}.dump() + "\n");
    auto session = ManagerSession::Acquire(options_);
    ASSERT_FALSE(session.ok()) << code;
    EXPECT_EQ(session.status().code(), error) << code;
    EXPECT_NE(session.status().message().find("node-b: 2 without room for 64 SMs (" + code + ")"),
              std::string::npos)
        << session.status().message();
    EXPECT_NE(session.status().message().find(options_.socket_path), std::string::npos);
  }
}

TEST_F(DiscoveryTest, AClosedOrGarbledAnswerIsAClearError) {
  {
    FakeManager manager(options_.socket_path, "not json\n");
    auto session = ManagerSession::Acquire(options_);
    ASSERT_FALSE(session.ok());
    EXPECT_EQ(session.status().code(), CudaError::kNoDevice);
  }
  std::filesystem::remove(options_.socket_path);
  {
    FakeManager manager(options_.socket_path, R"({"ok":true})" "\n");
    auto session = ManagerSession::Acquire(options_);
    ASSERT_FALSE(session.ok());
    EXPECT_NE(session.status().message().find("without a server"), std::string::npos);
  }
}

TEST_F(DiscoveryTest, TheEnvironmentGivesSocketTimeoutAndProfile) {
  std::map<std::string, std::string> env = {
      {"FLYT_CLIENT_MANAGER", "/tmp/x.sock"},      {"FLYT_CLIENT_MANAGER_TIMEOUT_MS", "1500"},
      {"FLYT_REMOTE_SM_COUNT", "16"},              {"FLYT_REMOTE_MEMORY_MB", "4096"},
      {"FLYT_REMOTE_GPU_MODEL", "NVIDIA H100"}};
  auto lookup = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto o = DiscoveryOptions::FromEnvironment(lookup);
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->socket_path, "/tmp/x.sock");
  EXPECT_EQ(o->timeout, milliseconds(1500));
  EXPECT_EQ(o->profile, (json{{"sm_count", 16}, {"memory_mb", 4096}, {"gpu_model", "NVIDIA H100"}}));

  env.clear();
  o = DiscoveryOptions::FromEnvironment(lookup);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->socket_path, "/run/flyt/client-manager.sock");
  EXPECT_EQ(o->timeout, milliseconds(60000));
  EXPECT_TRUE(o->profile.is_null());

  for (const auto& [name, value] :
       std::map<std::string, std::string>{{"FLYT_CLIENT_MANAGER_TIMEOUT_MS", "soon"},
                                          {"FLYT_REMOTE_SM_PERCENT", "101"},
                                          {"FLYT_REMOTE_MEMORY_MB", "-1"}}) {
    env = {{name, value}};
    o = DiscoveryOptions::FromEnvironment(lookup);
    ASSERT_FALSE(o.ok()) << name;
    EXPECT_EQ(o.status().code(), CudaError::kInitializationError);
    EXPECT_NE(o.status().message().find(name + "=" + value), std::string::npos);
  }
  env = {{"FLYT_REMOTE_SM_PERCENT", "10"}, {"FLYT_REMOTE_SM_COUNT", "8"}};
  EXPECT_FALSE(DiscoveryOptions::FromEnvironment(lookup).ok());
}

}  // namespace
}  // namespace flyt::remote
