// The node manager's calls into running GPU servers, against real flyt-gpu-server processes on
// the simulated device: POST /api/v1/gpu-servers/{lease}/migrate moves a client with its memory to
// another lease's server, and the refusals (unknown lease, bad body, a server not running); a
// desired set that differs from a running server only in its share neither restarts nor drains
// it; POST .../resize gives a server a new SM share and memory limit that GET, the heartbeat and a
// later PUT agree with, and refuses one without room or below what the clients hold. A client is
// the remote client library's Connection, as a program's runtime would hold it.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "gpu/monitor.h"
#include "node/gpu_servers.h"
#include "node/gpu_servers_testing.h"
#include "node/server.h"
#include "remote_client/client.h"
#include "remote_client/debug_stats.h"

namespace flyt::node {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kSecretA = "secret-a-0123456789abcdef0123456789abcdef";
const std::string kSecretB = "secret-b-0123456789abcdef0123456789abcdef";
const std::string kSecretC = "secret-c-0123456789abcdef0123456789abcdef";

// The node's HTTP API (test::NodeApi: its clock_, monitor_ and server_) over GpuServers that
// start the real flyt-gpu-server.
class GpuServerMovesTest : public ::testing::Test, protected test::NodeApi {
 protected:
  void SetUp() override {
    // Short: the servers' Unix sockets live in state_dir (a socket path has at most 108 bytes).
    static int n = 0;
    dir_ = test::FreshDir("flyt-moves-", std::to_string(++n));
    GpuServersConfig config;
    config.enabled = true;
    config.binary = std::string(FLYT_BINARY_DIR) + "/bin/flyt-gpu-server";
    config.backend = "sim";
    config.shared_all = true;
    config.state_dir = (dir_ / "state").string();
    config.port_min = 30000 + (getpid() % 300) * 20;
    config.port_max = config.port_min + 19;
    config.start_timeout = 20s;
    config.drain_grace = 3s;
    log_sink_ = test::CaptureLog(log_);
    auto s = GpuServers::Create(config, {{0, "GPU-a"}, {1, "GPU-b"}});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    servers_ = std::move(s).value();
    StartNodeServer(servers_.get());
  }
  void TearDown() override {
    server_.reset();
    // The servers outlive a GpuServers: ours go with the test. StopAll drains each (as the node
    // manager's clean stop does) and waits; what it could not stop is killed with its process
    // group below.
    servers_->StopAll(std::chrono::seconds(3));
    std::vector<pid_t> pids;
    for (const json& r : servers_->List()["servers"]) {
      if (r["pid"].is_number() && r["state"] != "stopped" && r["state"] != "failed") {
        pids.push_back(r["pid"].get<pid_t>());
      }
    }
    servers_.reset();
    for (pid_t pid : pids) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    test::ReleaseLog(log_sink_);
    for (const std::string& secret : {kSecretA, kSecretB, kSecretC}) {
      EXPECT_EQ(log_.str().find(secret), std::string::npos) << "a secret in the log";
    }
    std::filesystem::remove_all(dir_);
  }

  std::pair<int, json> Call(const std::string& method, const std::string& path,
                            const std::string& body = "") {
    return NodeCall(method, path, body, 60, {kSecretA, kSecretB, kSecretC});
  }
  std::pair<int, json> Post(const std::string& path, const json& body) {
    return Call("POST", path, body.dump());
  }

  // PUTs a lease's server and returns its record.
  json Lease(const std::string& lease, const std::string& gpu, const std::string& secret,
             uint32_t sm_count = 32, uint64_t memory_mb = 1024) {
    json body = {{"lease_id", lease},    {"gpu_uuid", gpu},  {"memory_mb", memory_mb},
                 {"sm_count", sm_count}, {"secret", secret}, {"owner", "alice"}};
    auto [status, record] = Call("PUT", "/api/v1/gpu-servers/" + lease, body.dump());
    EXPECT_EQ(status, 201) << record;
    return record;
  }

  std::unique_ptr<remote::Connection> Open(const std::string& address, const std::string& secret) {
    auto endpoint = remote::ParseEndpoint(address);
    EXPECT_TRUE(endpoint.ok());
    if (!endpoint.ok()) return nullptr;
    remote::ClientOptions options;
    options.label = "gpu_server_moves_test";
    options.pid = static_cast<uint32_t>(getpid());
    options.secret = secret;
    options.shared_memory = false;
    auto conn = remote::Connection::Open(*endpoint, options);
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return conn.ok() ? std::move(conn).value() : nullptr;
  }

  // The clients connected to a lease's server, but for the one asking.
  std::vector<remote::ClientStats> Connected(const std::string& lease, const std::string& secret) {
    auto endpoint = remote::ParseEndpoint("unix:" + (dir_ / "state" / (lease + ".sock")).string());
    auto stats = remote::FetchStats(*endpoint, secret);
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    std::vector<remote::ClientStats> out;
    if (!stats.ok()) return out;
    for (const remote::ClientStats& c : stats->clients.clients) {
      if (c.connected && c.label.find("flyt-gpu-server stats") == std::string::npos) {
        out.push_back(c);
      }
    }
    return out;
  }

  bool WaitState(const std::string& lease, const std::string& state) {
    return test::WaitState(*servers_, lease, state, 10s);
  }

  std::filesystem::path dir_;
  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> log_sink_;
  std::unique_ptr<GpuServers> servers_;
};

TEST_F(GpuServerMovesTest, MigrateMovesAClientWithItsMemoryToAnotherLeasesServer) {
  const json a = Lease("lease-a", "GPU-a", kSecretA);
  const json b = Lease("lease-b", "GPU-b", kSecretB);
  ASSERT_EQ(a["state"], "running");
  ASSERT_EQ(b["state"], "running");
  auto conn = Open(a["address"], kSecretA);
  ASSERT_TRUE(conn);
  constexpr uint64_t kBytes = 1 << 20;
  auto ptr = conn->Malloc({kBytes});
  ASSERT_TRUE(ptr.ok());
  remote::Bytes pattern(kBytes);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::byte>(i * 13 + 5);
  ASSERT_TRUE(conn->MemcpyHtoD({ptr->ptr, kBytes, 0}, pattern).ok());
  const uint64_t id_on_a = conn->server().client_id;
  // GET counts the connected clients (what the cluster manager reads to settle a move).
  EXPECT_EQ(Call("GET", "/api/v1/gpu-servers/lease-a").second["clients"], 1);
  EXPECT_EQ(Call("GET", "/api/v1/gpu-servers/lease-b").second["clients"], 0);

  // The client moves at its next call: it goes on calling while the node asks.
  auto answer = std::async(std::launch::async, [&] {
    return Post("/api/v1/gpu-servers/lease-a/migrate",
                {{"to", b["address"]}, {"to_secret", kSecretB}, {"timeout_s", 60}});
  });
  while (answer.wait_for(2ms) != std::future_status::ready) {
    ASSERT_TRUE(conn->MemGetInfo({}).ok());
  }
  auto [status, reply] = answer.get();
  ASSERT_EQ(status, 200) << reply;
  EXPECT_EQ(reply["lease_id"], "lease-a");
  EXPECT_EQ(reply["to"], b["address"]);
  EXPECT_EQ(reply["moved"], 1);
  EXPECT_EQ(reply["pending"], 0);
  EXPECT_EQ(reply["failed"], 0);
  ASSERT_EQ(reply["clients"].size(), 1u) << reply;
  EXPECT_EQ(reply["clients"][0]["outcome"], "moved");
  EXPECT_EQ(reply["clients"][0]["client_id"], id_on_a);
  EXPECT_EQ(reply["clients"][0]["new_client_id"], conn->server().client_id);

  // Its memory, read through the same connection, now served by lease B's server.
  remote::Bytes back(kBytes);
  ASSERT_TRUE(conn->MemcpyDtoH({ptr->ptr, kBytes, 0}, back).ok());
  EXPECT_TRUE(back == pattern);
  EXPECT_TRUE(Connected("lease-a", kSecretA).empty());
  auto on_b = Connected("lease-b", kSecretB);
  ASSERT_EQ(on_b.size(), 1u);
  EXPECT_EQ(Call("GET", "/api/v1/gpu-servers/lease-a").second["clients"], 0);
  EXPECT_EQ(Call("GET", "/api/v1/gpu-servers/lease-b").second["clients"], 1);
  EXPECT_EQ(on_b[0].allocated_bytes, kBytes);

  // Nothing left to move: a success with zeros.
  auto [again, none] = Post("/api/v1/gpu-servers/lease-a/migrate", {{"to", b["address"]}});
  EXPECT_EQ(again, 200) << none;
  EXPECT_EQ(none["clients"], json::array());
  EXPECT_EQ(none["moved"], 0);
  EXPECT_EQ(none["pending"], 0);
  EXPECT_EQ(none["failed"], 0);

  // The node's events say so, with the counts.
  int migrated = 0;
  const json events = Call("GET", "/api/v1/events").second;
  for (const json& e : events["events"]) {
    if (e["type"] != "gpu_server_migrated") continue;
    ++migrated;
    EXPECT_EQ(e["lease_id"], "lease-a");
    EXPECT_EQ(e["uuid"], "GPU-a");
  }
  EXPECT_EQ(migrated, 2) << events;
}

TEST_F(GpuServerMovesTest, MigrateRefusesAnUnknownLeaseABadBodyAndAServerNotRunning) {
  const json a = Lease("lease-a", "GPU-a", kSecretA);
  const json to = {{"to", "127.0.0.1:1"}};
  auto [unknown, err] = Post("/api/v1/gpu-servers/lease-x/migrate", to);
  EXPECT_EQ(unknown, 404);
  EXPECT_EQ(err["code"], "not_found");

  const std::string path = "/api/v1/gpu-servers/lease-a/migrate";
  EXPECT_EQ(Call("POST", path, "{not json").first, 400);
  EXPECT_EQ(Post(path, json::object()).first, 400);                         // no "to"
  EXPECT_EQ(Post(path, {{"to", "127.0.0.1:1"}, {"extra", 1}}).first, 400);  // unknown field
  EXPECT_EQ(Post(path, {{"to", "unix:/tmp/x.sock"}}).first, 400);
  EXPECT_EQ(Post(path, {{"to", "127.0.0.1:1"}, {"timeout_s", 0}}).first, 400);
  EXPECT_EQ(Post(path, {{"to", "127.0.0.1:1"}, {"timeout_s", 601}}).first, 400);
  auto [short_secret, err2] = Post(path, {{"to", "127.0.0.1:1"}, {"to_secret", "tiny-secret"}});
  EXPECT_EQ(short_secret, 400);
  EXPECT_EQ(err2["error"].get<std::string>().find("tiny-secret"), std::string::npos);

  // A drained server (draining, then stopped) has no clients to move.
  Lease("lease-c", "GPU-b", kSecretC);
  EXPECT_EQ(Call("DELETE", "/api/v1/gpu-servers/lease-c").first, 202);
  auto [draining, err3] = Post("/api/v1/gpu-servers/lease-c/migrate", to);
  EXPECT_EQ(draining, 409);
  EXPECT_EQ(err3["code"], "conflict");
  ASSERT_TRUE(WaitState("lease-c", "stopped"));
  EXPECT_EQ(Post("/api/v1/gpu-servers/lease-c/migrate", to).first, 409);
  EXPECT_EQ(Call("GET", "/api/v1/gpu-servers/lease-a").second["state"], "running");
}

TEST_F(GpuServerMovesTest, ADesiredShareThatDiffersNeitherRestartsNorDrainsTheServer) {
  const json a = Lease("lease-a", "GPU-a", kSecretA, 32, 1024);
  GpuServerSpec desired;
  desired.lease_id = "lease-a";
  desired.gpu_uuid = "GPU-a";
  desired.sm_count = 64;
  desired.memory_mb = 2048;
  desired.secret = kSecretA;
  desired.owner = "alice";
  for (int i = 0; i < 3; ++i) servers_->Reconcile({desired}, {});
  const json now = Call("GET", "/api/v1/gpu-servers/lease-a").second;
  EXPECT_EQ(now["state"], "running");
  EXPECT_EQ(now["pid"], a["pid"]);
  EXPECT_EQ(now["started_at"], a["started_at"]);
  // It reports the share it runs with, so the cluster manager sees the difference.
  EXPECT_EQ(now["sm_count"], 32);
  EXPECT_EQ(now["memory_mb"], 1024);
}

TEST_F(GpuServerMovesTest, ResizeGivesTheServerANewShareThatTheRecordAndAPutAgreeWith) {
  const json a = Lease("lease-a", "GPU-a", kSecretA, 32, 1024);
  auto conn = Open(a["address"], kSecretA);
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->Malloc({1 << 20}).ok());
  auto [status, reply] =
      // The client makes no call: it applies the share at its next (pending after 1 s).
      Post("/api/v1/gpu-servers/lease-a/resize",
           {{"sm_count", 20}, {"memory_mb", 2048}, {"timeout_s", 1}});
  ASSERT_EQ(status, 200) << reply;
  EXPECT_EQ(reply["sm_count_asked"], 20);
  EXPECT_GE(reply["sm_count_granted"].get<uint32_t>(), 20u);
  EXPECT_EQ(reply["memory_limit_mb"], 2048);
  EXPECT_EQ(reply["record"]["sm_count"], 20);
  EXPECT_EQ(reply["record"]["memory_mb"], 2048);
  EXPECT_EQ(reply["record"]["sm_count_granted"], reply["sm_count_granted"]);
  EXPECT_EQ(reply["record"]["pid"], a["pid"]);
  // GET and the heartbeat say the same (GET also counts the connected clients).
  json record = Call("GET", "/api/v1/gpu-servers/lease-a").second;
  EXPECT_EQ(record["clients"], 1);
  record.erase("clients");
  EXPECT_EQ(record, reply["record"]);
  EXPECT_EQ(servers_->HeartbeatJson()["servers"][0], record);
  // The cluster manager's spec with the new share is the same server: 200, not a conflict.
  json same = {{"lease_id", "lease-a"}, {"gpu_uuid", "GPU-a"}, {"memory_mb", 2048},
               {"sm_count", 20},        {"secret", kSecretA},  {"owner", "alice"}};
  auto [put, again] = Call("PUT", "/api/v1/gpu-servers/lease-a", same.dump());
  EXPECT_EQ(put, 200) << again;
  EXPECT_EQ(again["pid"], a["pid"]);
  // A resize of the memory limit alone keeps the SM share.
  auto [memory_only, reply2] =
      Post("/api/v1/gpu-servers/lease-a/resize", {{"memory_mb", 512}, {"timeout_s", 1}});
  ASSERT_EQ(memory_only, 200) << reply2;
  EXPECT_EQ(reply2["record"]["sm_count"], 20);
  EXPECT_EQ(reply2["record"]["memory_mb"], 512);
  // The state file too, which a restarted node manager re-adopts the server from.
  std::ifstream in(dir_ / "state" / "lease-a.json");
  const json state = json::parse(in, nullptr, false);
  EXPECT_EQ(state["sm_count"], 20);
  EXPECT_EQ(state["memory_mb"], 512);
  EXPECT_EQ(state["sm_count_granted"], reply["sm_count_granted"]);
  bool resized = false;
  const json events = Call("GET", "/api/v1/events").second;
  for (const json& e : events["events"]) resized = resized || e["type"] == "gpu_server_resized";
  EXPECT_TRUE(resized) << events;
}

TEST_F(GpuServerMovesTest, ResizeBelowWhatTheClientsHoldIsAConflictThatChangesNothing) {
  const json a = Lease("lease-a", "GPU-a", kSecretA, 32, 1024);
  auto conn = Open(a["address"], kSecretA);
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->Malloc({64 << 20}).ok());
  auto [status, err] =
      Post("/api/v1/gpu-servers/lease-a/resize", {{"sm_count", 16}, {"memory_mb", 16}});
  EXPECT_EQ(status, 409) << err;
  EXPECT_EQ(err["code"], "conflict");
  json record = Call("GET", "/api/v1/gpu-servers/lease-a").second;
  record.erase("clients");
  EXPECT_EQ(record, a);
  // The server still has its old limit: the client may allocate up to it.
  EXPECT_TRUE(conn->Malloc({128 << 20}).ok());
}

TEST_F(GpuServerMovesTest, ResizeRefusesAShareWithoutRoomABadBodyAndAnUnknownLease) {
  const json a = Lease("lease-a", "GPU-a", kSecretA, 32, 1024);
  Lease("lease-b", "GPU-a", kSecretB, 96, 1024);  // the shared GPU's other 96 of 132 SMs
  const std::string path = "/api/v1/gpu-servers/lease-a/resize";
  auto [no_room, err] = Post(path, {{"sm_count", 40}});
  EXPECT_EQ(no_room, 409) << err;
  EXPECT_EQ(err["code"], "conflict");
  EXPECT_EQ(Post(path, {{"sm_count", 200}}).first, 400);  // more than the GPU has
  EXPECT_EQ(Post(path, json::object()).first, 400);
  EXPECT_EQ(Post(path, {{"sm_count", 0}}).first, 400);
  EXPECT_EQ(Post(path, {{"sm_count", 8}, {"gpu", 1}}).first, 400);
  EXPECT_EQ(Call("POST", path, "[").first, 400);
  EXPECT_EQ(Post("/api/v1/gpu-servers/lease-x/resize", {{"sm_count", 8}}).first, 404);
  json unchanged = Call("GET", "/api/v1/gpu-servers/lease-a").second;
  unchanged.erase("clients");
  EXPECT_EQ(unchanged, a);
  // Within the room left: fine.
  EXPECT_EQ(Post(path, {{"sm_count", 36}}).first, 200);
}

}  // namespace
}  // namespace flyt::node
