// Remote leases in the cluster manager (issue 15, section 3 of the contract) against a fake node
// manager on loopback: the grant answers only once the node's GPU server is up, a node that does
// not start it gets the lease released and the caller a 503, the secret reaches only its owner,
// a failed server fails its lease (renew: 409 lease_failed), a release drains the server, the
// heartbeat reply's desired list reconciles the node, and leases survive a manager restart.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "cluster/cluster_testing.h"
#include "cluster/fake_node_testing.h"
#include "cluster/server.h"
#include "common/http.h"
#include "common/json.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;
using test::FakeNode;
using test::GpuServers;
using test::Heartbeat;
using test::kNodeToken;

class RemoteLeaseTest : public test::ClusterFixture {
 protected:
  void SetUp() override {
    ClusterFixture::SetUp();
    config_.node_api_token = kNodeToken;
    config_.remote_server_start_timeout = std::chrono::seconds(5);
    Open();
    cluster_->Start();
  }
  void Reopen() {
    Open();
    cluster_->Start();
  }
  // A heartbeat of node "a" (2 GPUs) from 127.0.0.1 with its API at the fake node.
  Result<json> Beat(json servers = json::array(), bool shared = true) {
    json hb = Heartbeat("a", 2, node_api_.url());
    hb["gpu_servers"] = GpuServers("a", 2, shared, std::move(servers));
    return cluster_->Heartbeat(node_, hb);
  }
  std::string AllEvents() {
    auto events = cluster_->Events(0, 1000);
    EXPECT_TRUE(events.ok());
    return events.ok() ? DumpJson(*events) : "";
  }
  json Desired(json servers = json::array()) {
    auto r = Beat(std::move(servers));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["gpu_servers"]["desired"] : json();
  }

  FakeNode node_api_;
};

TEST_F(RemoteLeaseTest, TheGrantAnswersOnceTheServerIsUpAndTheSecretOnlyToItsOwner) {
  ASSERT_TRUE(Beat().ok());
  // While the node starts the server, the manager holds no lock: it answers other calls, and the
  // lease is already held (state starting).
  json seen_while_starting;
  node_api_.DuringPut([&] { seen_while_starting = cluster_->RemoteLeases("", ""); });
  auto lease = cluster_->CreateRemoteLease(
      alice_, {{"sm_count", 60}, {"memory_mb", 20000}, {"client", "laptop-1"}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(seen_while_starting["remote_leases"].size(), 1u);
  EXPECT_EQ(seen_while_starting["remote_leases"][0]["state"], "starting");
  EXPECT_FALSE(seen_while_starting["remote_leases"][0].contains("secret"));
  const json& l = *lease;
  EXPECT_EQ(l["kind"], "remote");
  EXPECT_EQ(l["state"], "ready");
  EXPECT_EQ(l["owner"], "alice");
  EXPECT_EQ(l["client"], "laptop-1");
  EXPECT_EQ(l["node"], "a");
  EXPECT_EQ(l["sm_count"], 64);  // 60 rounded up to the GPU's steps of 8
  EXPECT_EQ(l["sm_count_asked"], 60);
  EXPECT_EQ(l["memory_mb"], 20000);
  EXPECT_EQ(l["server"]["address"], "127.0.0.1:12500");
  EXPECT_EQ(l["server"]["pid"], 4242);
  EXPECT_EQ(l["ttl_seconds"], 60);
  const std::string secret = l["secret"];
  EXPECT_EQ(secret.size(), 64u);
  // What the node was asked to run.
  ASSERT_EQ(node_api_.puts().size(), 1u);
  const json put = node_api_.puts()[0];
  EXPECT_EQ(put["lease_id"], l["id"]);
  EXPECT_EQ(put["gpu_uuid"], l["gpu"]["uuid"]);
  EXPECT_EQ(put["sm_count"], 64);
  EXPECT_EQ(put["memory_mb"], 20000);
  EXPECT_EQ(put["secret"], secret);
  EXPECT_EQ(put["owner"], "alice");
  // The secret: in the owner's (and an admin's) GET, nowhere else.
  const std::string id = l["id"];
  EXPECT_EQ((*cluster_->RemoteLease(alice_, id))["secret"], secret);
  EXPECT_EQ((*cluster_->RemoteLease(admin_, id))["secret"], secret);
  EXPECT_EQ(DumpJson(cluster_->RemoteLeases("", "")).find(secret), std::string::npos);
  EXPECT_EQ(DumpJson(cluster_->Allocations()).find(secret), std::string::npos);
  EXPECT_EQ(DumpJson(cluster_->Gpus()).find(secret), std::string::npos);
  EXPECT_EQ(AllEvents().find(secret), std::string::npos);
  EXPECT_NE(AllEvents().find("remote_lease.granted"), std::string::npos);
  // The views: the GPU's share, the client, the filters, the metrics.
  json gpus = cluster_->Gpus();
  bool found = false;
  for (const json& g : gpus["gpus"]) {
    if (g["uuid"] != l["gpu"]["uuid"]) continue;
    found = true;
    EXPECT_EQ(g["sm_count"], 132);
    EXPECT_EQ(g["sm_free"], 68);
    ASSERT_EQ(g["remote_shares"].size(), 1u);
    EXPECT_EQ(g["remote_shares"][0]["client"], "laptop-1");
    EXPECT_EQ(g["remote_shares"][0]["state"], "ready");
  }
  EXPECT_TRUE(found);
  json clients = cluster_->Clients();
  ASSERT_EQ(clients["clients"].size(), 1u);
  EXPECT_EQ(clients["clients"][0]["name"], "laptop-1");
  EXPECT_EQ(clients["clients"][0]["remote_leases"], json::array({id}));
  EXPECT_EQ(cluster_->RemoteLeases("", "laptop-2")["remote_leases"].size(), 0u);
  EXPECT_EQ(cluster_->RemoteLeases("a", "laptop-1")["remote_leases"].size(), 1u);
  EXPECT_EQ(Metric("flyt_cluster_remote_leases{state=\"ready\"}"), "1");
  EXPECT_EQ(Metric("flyt_cluster_remote_lease_grants_total"), "1");
  // An exclusive allocation does not take the shared GPU; the other one is free.
  auto exclusive = cluster_->Allocate(admin_, {{"gpus", 2}});
  ASSERT_FALSE(exclusive.ok());
  EXPECT_EQ(exclusive.status().reason(), "insufficient_gpus");
}

TEST_F(RemoteLeaseTest, ANodeThatDoesNotStartTheServerGetsTheLeaseReleasedAnd503) {
  ASSERT_TRUE(Beat().ok());
  node_api_.Refuse("flyt-gpu-server exited with status 1: no CUDA device");
  auto lease = cluster_->CreateRemoteLease(alice_, {{"sm_percent", 50}, {"memory_mb", 1000}});
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(HttpStatusOf(lease.status()), 503);
  EXPECT_NE(lease.status().message().find("no CUDA device"), std::string::npos)
      << lease.status().message();
  EXPECT_EQ(cluster_->RemoteLeases("", "")["remote_leases"].size(), 0u);
  const std::string id = node_api_.puts().at(0)["lease_id"];
  EXPECT_TRUE(node_api_.WaitForDelete(id));  // whatever it half-started is drained
  const std::string events = AllEvents();
  EXPECT_NE(events.find("server_not_started"), std::string::npos) << events;
  EXPECT_EQ(Metric("flyt_cluster_remote_lease_start_failures_total"), "1");
  // The share is free again.
  node_api_.Refuse("");
  EXPECT_TRUE(cluster_->CreateRemoteLease(alice_, {{"sm_percent", 100}, {"memory_mb", 81920}}).ok());
}

// Issue 32: a client whose answer was lost (its time-out shorter than the server's start) asks
// again with the same Idempotency-Key: it gets the lease being started, not a second lease with a
// second server; once started, the key answers the lease with its server and secret.
TEST_F(RemoteLeaseTest, ARetryWithTheKeyWhileTheServerStartsGetsTheSameLeaseAndNoSecondServer) {
  ASSERT_TRUE(Beat().ok());
  const json body{{"sm_percent", 50}, {"memory_mb", 1000}, {"client", "laptop-1"}};
  std::atomic<bool> retried{false};
  Result<json> retry = Status(StatusCode::kInternal, "not retried");
  node_api_.DuringPut([&] {
    if (retried.exchange(true)) return;  // the retry's own PUT, if there were one
    retry = cluster_->CreateRemoteLease(alice_, body, "lease-key-1");
  });
  auto first = cluster_->CreateRemoteLease(alice_, body, "lease-key-1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_EQ((*retry)["id"], (*first)["id"]);
  EXPECT_EQ((*retry)["state"], "starting");
  EXPECT_EQ((*retry)["replayed"], true);
  EXPECT_EQ(node_api_.puts().size(), 1u);  // one server
  EXPECT_EQ(cluster_->RemoteLeases("", "")["remote_leases"].size(), 1u);
  // Asked again once started: the lease with its server and secret.
  auto again = cluster_->CreateRemoteLease(alice_, body, "lease-key-1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)["id"], (*first)["id"]);
  EXPECT_EQ((*again)["state"], "ready");
  EXPECT_EQ((*again)["secret"], (*first)["secret"]);
  EXPECT_EQ((*again)["server"]["address"], (*first)["server"]["address"]);
  EXPECT_EQ(node_api_.puts().size(), 1u);
  // The same key with another body is still refused.
  auto other = cluster_->CreateRemoteLease(alice_, {{"sm_percent", 25}, {"memory_mb", 1000}},
                                           "lease-key-1");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().reason(), "idempotency_key_reused");
}

// A start the node refused leaves no lease, so the key is free for the retry; a granted key
// answers its lease across a restart and starts nothing more.
TEST_F(RemoteLeaseTest, AFailedStartFreesTheKeyAndAGrantedKeySurvivesARestart) {
  ASSERT_TRUE(Beat().ok());
  const json body{{"sm_percent", 50}, {"memory_mb", 1000}};
  node_api_.Refuse("slow start");  // the first attempt's answer is lost: the caller sees 503
  std::string placed;
  node_api_.DuringPut([&] { placed = cluster_->RemoteLeases("", "")["remote_leases"][0]["id"]; });
  ASSERT_FALSE(cluster_->CreateRemoteLease(alice_, body, "lease-key-2").ok());
  ASSERT_FALSE(placed.empty());
  // A refused start frees the key: the retry places a new lease, which starts.
  node_api_.Refuse("");
  node_api_.DuringPut(nullptr);
  auto retry = cluster_->CreateRemoteLease(alice_, body, "lease-key-2");
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_NE((*retry)["id"], placed);
  EXPECT_FALSE(retry->contains("replayed"));
  // Across a restart the key still answers that lease, and starts nothing more.
  const size_t puts = node_api_.puts().size();
  cluster_.reset();
  Reopen();
  auto after = cluster_->CreateRemoteLease(alice_, body, "lease-key-2");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ((*after)["id"], (*retry)["id"]);
  EXPECT_EQ((*after)["replayed"], true);
  EXPECT_EQ(node_api_.puts().size(), puts);
}

TEST_F(RemoteLeaseTest, AFailedServerFailsItsLeaseAndRenewSays409LeaseFailed) {
  ASSERT_TRUE(Beat().ok());
  auto lease = cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 1000}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const std::string id = (*lease)["id"];
  ASSERT_TRUE(cluster_->RenewRemoteLease(alice_, id, {{"ttl_seconds", 120}}).ok());
  json failed = {{"lease_id", id},
                 {"gpu_uuid", (*lease)["gpu"]["uuid"]},
                 {"state", "failed"},
                 {"reason", "exited with signal 9"}};
  json desired = Desired(json::array({failed}));
  EXPECT_EQ(desired.size(), 0u);  // failed: not desired any more
  auto renew = cluster_->RenewRemoteLease(alice_, id, json::object());
  ASSERT_FALSE(renew.ok());
  EXPECT_EQ(renew.status().reason(), "lease_failed");
  EXPECT_EQ(HttpStatusOf(renew.status()), 409);
  EXPECT_NE(renew.status().message().find("exited with signal 9"), std::string::npos);
  const std::string events = AllEvents();
  EXPECT_NE(events.find("remote_lease.failed"), std::string::npos);
  EXPECT_NE(events.find("gpu_server.failed"), std::string::npos);
  // The share stays held until the client releases it; the release tells the node.
  auto view = cluster_->RemoteLease(alice_, id);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ((*view)["state"], "failed");
  EXPECT_EQ(Metric("flyt_cluster_remote_leases{state=\"failed\"}"), "1");
  auto released = cluster_->ReleaseRemoteLease(alice_, id);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ((*released)["released"], id);
  EXPECT_TRUE(node_api_.WaitForDelete(id));
  auto again = cluster_->ReleaseRemoteLease(alice_, id);
  EXPECT_EQ(again.status().reason(), "already_ended");
  EXPECT_EQ(cluster_->RenewRemoteLease(alice_, id, json::object()).status().reason(),
            "already_ended");
}

TEST_F(RemoteLeaseTest, HeartbeatsReconcileAndARestartStartsNothingTwice) {
  ASSERT_TRUE(Beat().ok());
  auto lease = cluster_->CreateRemoteLease(alice_, {{"sm_count", 16}, {"memory_mb", 4096}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const std::string id = (*lease)["id"];
  json running = {{"lease_id", id},
                  {"gpu_uuid", (*lease)["gpu"]["uuid"]},
                  {"state", "running"},
                  {"address", "127.0.0.1:12500"},
                  {"pid", 4242},
                  {"secret", "a node must never echo it; the manager drops it"}};
  json stray = {{"lease_id", "rlease-unknown"}, {"state", "running"}, {"address", "127.0.0.1:1"}};
  json desired = Desired(json::array({running, stray}));
  ASSERT_EQ(desired.size(), 1u);  // the unknown lease's server is left out: the node drains it
  EXPECT_EQ(desired[0]["lease_id"], id);
  EXPECT_EQ(desired[0]["secret"], (*lease)["secret"]);
  EXPECT_EQ(desired[0]["sm_count"], 16);
  EXPECT_EQ(desired[0]["memory_mb"], 4096);
  // The servers the nodes report; never a secret.
  json servers = cluster_->GpuServers("");
  ASSERT_EQ(servers["servers"].size(), 2u);
  EXPECT_EQ(servers["servers"][0]["node"], "a");
  EXPECT_FALSE(servers["servers"][0].contains("secret"));
  EXPECT_EQ(cluster_->GpuServers("b")["servers"].size(), 0u);
  EXPECT_EQ(Metric("flyt_cluster_gpu_servers{state=\"running\"}"), "2");
  // A node without gpu_servers gets no opinion in the reply.
  auto plain = cluster_->Heartbeat(Caller{"node-b", Role::kNode, "127.0.0.1"}, Heartbeat("b", 1));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->contains("gpu_servers"));
  // A restarted manager keeps the lease, its secret and its server: desired is the same, and the
  // node is asked to start nothing again.
  Reopen();
  json after = Desired(json::array({running}));
  EXPECT_EQ(after, desired);
  EXPECT_EQ(node_api_.puts().size(), 1u);
  auto view = cluster_->RemoteLease(alice_, id);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ((*view)["secret"], (*lease)["secret"]);
  EXPECT_EQ((*view)["server"]["address"], "127.0.0.1:12500");
  EXPECT_EQ((*view)["state"], "ready");
}

// A restart slower than the lease's TTL margin (the manager down longer than the holder's last
// renewal had left) keeps the lease, its server and its secret: the node is asked to start and to
// drain nothing, and the holder's next renewal succeeds (e2e.remote_service lost them under load).
TEST_F(RemoteLeaseTest, ARestartSlowerThanTheTtlKeepsTheLeaseAndItsServer) {
  ASSERT_TRUE(Beat().ok());
  auto lease = cluster_->CreateRemoteLease(
      alice_, {{"sm_count", 16}, {"memory_mb", 4096}, {"ttl_seconds", 10}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const std::string id = (*lease)["id"];
  json running = {{"lease_id", id},
                  {"gpu_uuid", (*lease)["gpu"]["uuid"]},
                  {"state", "running"},
                  {"address", "127.0.0.1:12500"},
                  {"pid", 4242}};
  ASSERT_EQ(Desired(json::array({running})).size(), 1u);
  cluster_.reset();
  clock_.Advance(std::chrono::seconds(12));
  Reopen();
  ASSERT_TRUE(cluster_->Tick().ok());
  json after = Desired(json::array({running}));
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0]["lease_id"], id);
  EXPECT_EQ(after[0]["secret"], (*lease)["secret"]);
  auto renewed = cluster_->RenewRemoteLease(alice_, id, json::object());
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  EXPECT_EQ((*renewed)["state"], "ready");
  EXPECT_EQ(node_api_.puts().size(), 1u);
  EXPECT_TRUE(node_api_.deletes().empty());
  EXPECT_EQ(AllEvents().find("remote_lease.expired"), std::string::npos);
}

TEST_F(RemoteLeaseTest, AnotherTokenCannotReadRenewOrReleaseSomeoneElsesLease) {
  ASSERT_TRUE(Beat().ok());
  auto lease = cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 100}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const std::string id = (*lease)["id"];
  for (const Status& s : {cluster_->RemoteLease(bob_, id).status(),
                          cluster_->RenewRemoteLease(bob_, id, json::object()).status(),
                          cluster_->ReleaseRemoteLease(bob_, id).status(),
                          cluster_->Release(bob_, id)}) {
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
    EXPECT_EQ(HttpStatusOf(s), 403);
  }
  EXPECT_TRUE(cluster_->RemoteLease(alice_, id).ok());
  // Requests are checked field by field.
  EXPECT_EQ(cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}}).status().code(),
            StatusCode::kInvalidArgument);  // memory_mb missing
  EXPECT_EQ(cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"sm_percent", 5},
                                                 {"memory_mb", 1}})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 1}, {"ttl_seconds", 5}})
          .status()
          .code(),
      StatusCode::kInvalidArgument);
  // No GPU with room, and a request no GPU could ever hold.
  auto full = cluster_->CreateRemoteLease(alice_, {{"sm_count", 132}, {"memory_mb", 81000},
                                                   {"node", "a"}});
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  auto refused = cluster_->CreateRemoteLease(alice_, {{"sm_count", 132}, {"memory_mb", 100}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "insufficient_gpus");
  EXPECT_NE(refused.status().message().find("a: 2 without room for 132 SMs"), std::string::npos)
      << refused.status().message();
  auto never = cluster_->CreateRemoteLease(alice_, {{"sm_count", 200}, {"memory_mb", 100}});
  EXPECT_EQ(never.status().reason(), "never_fits");
  EXPECT_EQ(Metric("flyt_cluster_remote_lease_refusals_total"), "2");
}

TEST_F(RemoteLeaseTest, TtlExpiryFreesTheShareAndAnUnreachableNodeGetsTheGrace) {
  ASSERT_TRUE(Beat().ok());
  auto lease = cluster_->CreateRemoteLease(
      alice_, {{"sm_percent", 100}, {"memory_mb", 1000}, {"ttl_seconds", 10}, {"node", "a"}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const std::string id = (*lease)["id"];
  clock_.Advance(std::chrono::seconds(11));
  ASSERT_TRUE(Beat().ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_TRUE(node_api_.WaitForDelete(id));
  EXPECT_EQ(cluster_->RemoteLeases("", "")["remote_leases"].size(), 0u);
  EXPECT_NE(AllEvents().find("remote_lease.expired"), std::string::npos);
  EXPECT_EQ(cluster_->RenewRemoteLease(alice_, id, json::object()).status().reason(),
            "already_ended");
  // A silent node: its GPUs are not offered, its leases held for the grace, then released.
  auto held = cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 1000},
                                                   {"ttl_seconds", 3600}});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  clock_.Advance(config_.ledger.unreachable_after + std::chrono::seconds(1));
  ASSERT_TRUE(cluster_->Tick().ok());
  auto refused = cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 1000}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("a: unreachable"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(cluster_->RemoteLeases("", "")["remote_leases"].size(), 1u);
  clock_.Advance(config_.ledger.lease_grace);
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(cluster_->RemoteLeases("", "")["remote_leases"].size(), 0u);
  EXPECT_NE(AllEvents().find("node_unreachable"), std::string::npos);
}

TEST(RemoteConfigTest, TheRemoteSectionIsCheckedAndLeaseFailedIs409) {
  auto c = ParseClusterConfig(
      "[remote]\nenabled = false\ndefault_ttl_s = 30\nmax_ttl_s = 600\n"
      "server_start_timeout_s = 20\n",
      "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->remote_enabled);
  EXPECT_EQ(c->remote_default_ttl, std::chrono::seconds(30));
  EXPECT_EQ(c->remote_max_ttl, std::chrono::seconds(600));
  EXPECT_EQ(c->remote_server_start_timeout, std::chrono::seconds(20));
  EXPECT_FALSE(ParseClusterConfig("[remote]\ndefault_ttl_s = 700\nmax_ttl_s = 600\n", "t").ok());
  EXPECT_FALSE(ParseClusterConfig("[remote]\nttl = 1\n", "t").ok());
  EXPECT_EQ(HttpStatusOf(Status(StatusCode::kFailedPrecondition, "x").WithReason("lease_failed")),
            409);
}

}  // namespace
}  // namespace flyt::cluster
