// Moving and resizing remote leases and draining a node, in the cluster manager, against two
// fake node managers on loopback (the node side of a move is tested in src/node, the clients'
// live migration in src/remote; e2e.remote_moves runs them all together): the target share is
// reserved before anything moves, the lease moves in one step once its clients moved, nothing
// changes when none moved, a resize holds the larger share until the server took the new one,
// and a drained node is cordoned and emptied of remote leases.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "cluster/cluster_testing.h"
#include "cluster/fake_node_testing.h"
#include "common/json.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;
using test::FakeNode;
using test::GpuServers;
using test::Heartbeat;
using test::kNodeToken;

json Moved(int clients, const std::string& outcome = "moved", const std::string& message = "") {
  json list = json::array();
  for (int i = 0; i < clients; ++i) {
    list.push_back({{"outcome", outcome},
                    {"message", message},
                    {"client_id", i + 1},
                    {"new_client_id", i + 7},
                    {"bytes", 64 << 20},
                    {"pause_ms", 12.5}});
  }
  return {{"clients", list},
          {"moved", outcome == "moved" ? clients : 0},
          {"pending", outcome == "pending" ? clients : 0},
          {"failed", outcome == "failed" ? clients : 0}};
}

class RemoteMovesTest : public test::ClusterFixture {
 protected:
  void SetUp() override {
    ClusterFixture::SetUp();
    config_.node_api_token = kNodeToken;
    config_.remote_server_start_timeout = std::chrono::seconds(5);
    Open();
    cluster_->Start();
    node_b_.SetAddress("127.0.0.1:12600");
    ASSERT_TRUE(Beat("a").ok());
    ASSERT_TRUE(Beat("b").ok());
  }
  FakeNode& Api(const std::string& node) { return node == "a" ? node_a_ : node_b_; }
  Result<json> Beat(const std::string& node, json servers = json::array()) {
    json hb = Heartbeat(node, 2, Api(node).url());
    hb["gpu_servers"] = GpuServers(node, 2, /*shared=*/true, std::move(servers));
    return cluster_->Heartbeat(node_, hb);
  }
  std::string Lease(const std::string& node = "a", int sm = 60, int memory_mb = 20000) {
    auto l = cluster_->CreateRemoteLease(
        alice_, {{"sm_count", sm}, {"memory_mb", memory_mb}, {"node", node}, {"client", "c1"}});
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? (*l)["id"].get<std::string>() : "";
  }
  json Show(const std::string& id) {
    auto l = cluster_->RemoteLease(alice_, id);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? *l : json();
  }
  std::string AllEvents() {
    auto events = cluster_->Events(0, 1000);
    return events.ok() ? DumpJson(*events) : "";
  }
  json Desired(const std::string& node) {
    auto r = Beat(node);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["gpu_servers"]["desired"] : json();
  }

  FakeNode node_a_, node_b_;
};

TEST_F(RemoteMovesTest, AMoveStartsTheNextServerThereMovesTheClientsAndThenTheLease) {
  const std::string id = Lease("a");
  const json before = Show(id);
  node_a_.Answer("migrate", 200, Moved(1));
  auto moved = cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}, {"gpu", 1}});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  // The target was started under the lease's next server name, with the lease's secret and share.
  ASSERT_EQ(node_b_.puts().size(), 1u);
  const json put = node_b_.puts()[0];
  EXPECT_EQ(put["lease_id"], id + ".m1");
  EXPECT_EQ(put["gpu_uuid"], "GPU-b-1");
  EXPECT_EQ(put["secret"], before["secret"]);
  EXPECT_EQ(put["sm_count"], 64);
  EXPECT_EQ(put["memory_mb"], 20000);
  // The source node was asked to move its server's clients there.
  ASSERT_EQ(node_a_.actions().size(), 1u);
  EXPECT_EQ(node_a_.actions()[0].first, id + "/migrate");
  EXPECT_EQ(node_a_.actions()[0].second["to"], "127.0.0.1:12600");
  // The answer and the lease: on b's GPU 1 now, same id, secret and share.
  EXPECT_EQ((*moved)["node"], "b");
  EXPECT_EQ((*moved)["gpu"]["index"], 1);
  EXPECT_EQ((*moved)["migration"]["moved"], 1);
  EXPECT_EQ((*moved)["migration"]["from"]["node"], "a");
  EXPECT_EQ((*moved)["migration"]["to"]["gpu"], 1);
  EXPECT_EQ((*moved)["migrations"], 1);
  const json after = Show(id);
  EXPECT_EQ(after["node"], "b");
  EXPECT_EQ(after["server"]["address"], "127.0.0.1:12600");
  EXPECT_EQ(after["secret"], before["secret"]);
  EXPECT_EQ(after["sm_count"], 64);
  // The old server drains; the desired lists follow the lease.
  EXPECT_TRUE(node_a_.WaitForDelete(id));
  EXPECT_TRUE(Desired("a").empty());
  json desired_b = Desired("b");
  ASSERT_EQ(desired_b.size(), 1u);
  EXPECT_EQ(desired_b[0]["lease_id"], id + ".m1");
  // The share left a: a lease of 132 SMs fits on a's GPU 0 again; b's GPU 1 holds 64.
  bool checked = false;
  const json gpus = cluster_->Gpus();
  for (const json& g : gpus["gpus"]) {
    if (g["uuid"] == "GPU-b-1") {
      EXPECT_EQ(g["sm_free"], 68);
      checked = true;
    }
    if (g["uuid"] == "GPU-a-0" || g["uuid"] == "GPU-a-1") {
      EXPECT_EQ(g["sm_free"], 132);
    }
  }
  EXPECT_TRUE(checked);
  EXPECT_NE(AllEvents().find("remote_lease.migrated"), std::string::npos);
  EXPECT_EQ(AllEvents().find(before["secret"].get<std::string>()), std::string::npos);
  EXPECT_EQ(Metric("flyt_cluster_remote_lease_migrations_total"), "1");
  // It survives a restart: the stored lease is on b, under its moved server's name.
  Open();
  cluster_->Start();
  EXPECT_EQ(Show(id)["node"], "b");
  ASSERT_TRUE(Beat("b").ok());
  desired_b = Desired("b");
  ASSERT_EQ(desired_b.size(), 1u);
  EXPECT_EQ(desired_b[0]["lease_id"], id + ".m1");
  // A heartbeat reporting that server running keeps the lease ready; its old one, stopped, does
  // not fail it.
  json servers = json::array({{{"lease_id", id + ".m1"}, {"state", "running"}, {"address", "127.0.0.1:12600"}}});
  ASSERT_TRUE(Beat("b", servers).ok());
  json old = json::array({{{"lease_id", id}, {"state", "stopped"}}});
  ASSERT_TRUE(Beat("a", old).ok());
  EXPECT_EQ(Show(id)["state"], "ready");
}

TEST_F(RemoteMovesTest, WhenNoClientMovesTheLeaseStaysAndTheTargetIsGivenBack) {
  const std::string id = Lease("a");
  node_a_.Answer("migrate", 200, Moved(1, "pending", "the client made no call in 5 s"));
  auto moved = cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}});
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(moved.status().reason(), "migration_failed");
  EXPECT_NE(moved.status().message().find("made no call"), std::string::npos)
      << moved.status().message();
  EXPECT_EQ(Show(id)["node"], "a");
  EXPECT_EQ(Show(id)["server"]["address"], "127.0.0.1:12500");
  // The target's server drains and its share is free again.
  ASSERT_EQ(node_b_.puts().size(), 1u);
  EXPECT_TRUE(node_b_.WaitForDelete(id + ".m1"));
  EXPECT_TRUE(Desired("b").empty());
  const json gpus = cluster_->Gpus();
  for (const json& g : gpus["gpus"]) {
    if (g["node"] == "b") {
      EXPECT_EQ(g["sm_free"], 132) << g.dump();
    }
  }
  EXPECT_NE(AllEvents().find("remote_lease.migration_failed"), std::string::npos);
  // The source node could not be asked at all: the same.
  node_a_.Answer("migrate", 503, {{"error", "the server is not running"}, {"code", "unavailable"}});
  moved = cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}});
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().reason(), "migration_failed");
  EXPECT_EQ(Show(id)["node"], "a");
  // A target that does not start the server: nothing is asked of the source.
  const size_t asked = node_a_.actions().size();
  node_b_.Refuse("no free port");
  moved = cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}});
  ASSERT_FALSE(moved.ok());
  EXPECT_NE(moved.status().message().find("no free port"), std::string::npos);
  EXPECT_EQ(node_a_.actions().size(), asked);
  EXPECT_EQ(Show(id)["node"], "a");
  EXPECT_EQ(Metric("flyt_cluster_remote_lease_migration_failures_total"), "3");
}

TEST_F(RemoteMovesTest, AMoveIsRefusedWithTheReasonBeforeAnythingStarts) {
  const std::string id = Lease("a", 128);
  node_a_.Answer("migrate", 200, Moved(1));
  // b's GPUs are taken by two other leases of 128 SMs.
  Lease("b", 128);
  Lease("b", 128);
  auto moved = cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}});
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().reason(), "insufficient_gpus");
  EXPECT_TRUE(node_a_.actions().empty());
  // Where it already is; a node that does not exist; another owner; bad bodies.
  EXPECT_EQ(cluster_->MigrateRemoteLease(alice_, id, {{"node", "a"}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->MigrateRemoteLease(alice_, id, {{"node", "zz"}}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(cluster_->MigrateRemoteLease(bob_, id, {{"node", "b"}}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}, {"nope", 1}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->MigrateRemoteLease(alice_, id, {{"gpu", 1}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->MigrateRemoteLease(alice_, "rlease-none", {{"node", "b"}}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(Show(id)["node"], "a");
}

TEST_F(RemoteMovesTest, AResizeHoldsTheLargerShareUntilTheServerTookTheNewOne) {
  const std::string id = Lease("a", 60, 20000);
  const std::string gpu = Show(id)["gpu"]["uuid"];
  json seen_during;
  node_a_.Answer("resize", 200,
                 {{"sm_count_granted", 32}, {"clients", 1}, {"clients_applied", 1},
                  {"clients_pending", 0}, {"pause_ms_max", 0.4}});
  auto resized = cluster_->ResizeRemoteLease(alice_, id, {{"sm_count", 30}, {"memory_mb", 30000}});
  ASSERT_TRUE(resized.ok()) << resized.status().ToString();
  ASSERT_EQ(node_a_.actions().size(), 1u);
  EXPECT_EQ(node_a_.actions()[0].first, id + "/resize");
  EXPECT_EQ(node_a_.actions()[0].second["sm_count"], 32);  // 30 in the GPU's steps of 8
  EXPECT_EQ(node_a_.actions()[0].second["memory_mb"], 30000);
  EXPECT_EQ((*resized)["sm_count"], 32);
  EXPECT_EQ((*resized)["memory_mb"], 30000);
  EXPECT_EQ((*resized)["resize"]["sm_count_before"], 64);
  EXPECT_EQ((*resized)["resize"]["server"]["clients_applied"], 1);
  EXPECT_EQ(Show(id)["sm_count_asked"], 30);
  const json gpus = cluster_->Gpus();
  for (const json& g : gpus["gpus"]) {
    if (g["uuid"] == gpu) {
      EXPECT_EQ(g["sm_free"], 100);
    }
  }
  // The desired spec carries the new share (the node's record already does).
  json desired = Desired("a");
  ASSERT_EQ(desired.size(), 1u);
  EXPECT_EQ(desired[0]["sm_count"], 32);
  EXPECT_EQ(desired[0]["memory_mb"], 30000);
  EXPECT_NE(AllEvents().find("remote_lease.resized"), std::string::npos);

  // Refused by the server: the old share stays, in the ledger too.
  node_a_.Answer("resize", 409,
                 {{"error", "30000 MiB are allocated now; the limit cannot go below that"},
                  {"code", "conflict"}});
  auto refused = cluster_->ResizeRemoteLease(alice_, id, {{"memory_mb", 100}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "resize_refused");
  EXPECT_NE(refused.status().message().find("allocated now"), std::string::npos);
  EXPECT_EQ(Show(id)["memory_mb"], 30000);
  EXPECT_EQ(Show(id)["sm_count"], 32);

  // More than the GPU has room for beside another lease: refused before the node is asked.
  Lease("a", 96);  // lands on the other GPU (binpack takes the fuller one only if it fits)
  const size_t asked = node_a_.actions().size();
  auto too_big = cluster_->ResizeRemoteLease(alice_, id, {{"sm_count", 200}});
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(node_a_.actions().size(), asked);
  EXPECT_EQ(cluster_->ResizeRemoteLease(alice_, id, json::object()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->ResizeRemoteLease(bob_, id, {{"sm_count", 8}}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(Metric("flyt_cluster_remote_lease_resizes_total"), "1");
  EXPECT_EQ(Metric("flyt_cluster_remote_lease_resize_failures_total"), "1");
}

TEST_F(RemoteMovesTest, ADrainedNodeIsCordonedAndItsRemoteLeasesMoveElsewhere) {
  const std::string one = Lease("a", 60);
  const std::string two = Lease("a", 60);
  node_a_.Answer("migrate", 200, Moved(1));
  EXPECT_EQ(cluster_->DrainNode(alice_, "a", json::object()).status().code(),
            StatusCode::kPermissionDenied);
  auto drained = cluster_->DrainNode(admin_, "a", json::object());
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ((*drained)["moved"], 2);
  EXPECT_EQ((*drained)["failed"], 0);
  EXPECT_EQ(Show(one)["node"], "b");
  EXPECT_EQ(Show(two)["node"], "b");
  // Cordoned: nothing new lands on a, remote or not; the refusal says why.
  const json nodes = cluster_->Nodes();
  for (const json& n : nodes["nodes"]) {
    if (n["name"] == "a") {
      EXPECT_TRUE(n["cordoned"].get<bool>());
    }
  }
  auto refused = cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 10}, {"node", "a"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cordoned"), std::string::npos)
      << refused.status().message();
  auto job_lease = cluster_->Allocate(alice_, {{"gpus", 2}});
  EXPECT_FALSE(job_lease.ok());  // b's GPUs hold remote shares; a is cordoned
  // The cordon survives a heartbeat and a restart, and is lifted by uncordon.
  ASSERT_TRUE(Beat("a").ok());
  Open();
  cluster_->Start();
  ASSERT_TRUE(Beat("a").ok());
  EXPECT_FALSE(cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 10}, {"node", "a"}}).ok());
  ASSERT_TRUE(cluster_->UncordonNode(admin_, "a").ok());
  EXPECT_TRUE(cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 10}, {"node", "a"}}).ok());
  EXPECT_NE(AllEvents().find("node.cordoned"), std::string::npos);
  EXPECT_NE(AllEvents().find("node.uncordoned"), std::string::npos);
  // A drain whose moves fail says which and why; the node stays cordoned.
  const std::string three = Lease("a", 8);
  node_a_.Answer("migrate", 200, Moved(1, "failed", "the client holds CUDA arrays"));
  drained = cluster_->DrainNode(admin_, "a", json::object());
  ASSERT_TRUE(drained.ok());
  EXPECT_GE((*drained)["failed"].get<int>(), 1);
  EXPECT_NE(DumpJson(*drained).find("CUDA arrays"), std::string::npos);
  EXPECT_EQ(cluster_->DrainNode(admin_, "nope", json::object()).status().code(),
            StatusCode::kNotFound);
}

// ---- A manager that dies between the clients' move and the lease's ----
//
// The move is written ahead into the lease's row before the source node is asked to move the
// clients. A manager stopped right after the source answered (the test hook: nothing more is
// done, written or drained) is replaced by a new one over the same store, which asks the nodes
// where the clients are: on the target, the lease moves; still on the source, it stays and the
// target goes; a node that cannot be reached leaves both servers in place until it answers.

class RemoteMoveCrashTest : public RemoteMovesTest {
 protected:
  // Moves `id` to b's GPU 1 and stops the manager once a's node answered; `moved` decides where
  // the client is then (the nodes' records, as their GET answers).
  void MoveAndDie(const std::string& id, bool moved, int timeout_s = 60) {
    node_a_.SetClients(id, 1);
    node_a_.Answer("migrate", 200, moved ? Moved(1) : Moved(1, "pending", "no call in 1 s"));
    cluster_->SetMoveHookForTest([&, id, moved](const std::string& point) {
      if (point != "clients_moved") return false;
      if (moved) {
        node_a_.SetClients(id, 0);
        node_b_.SetClients(id + ".m1", 1);
      }
      return true;
    });
    auto r = cluster_->MigrateRemoteLease(alice_, id,
                                          {{"node", "b"}, {"gpu", 1}, {"timeout_s", timeout_s}});
    ASSERT_FALSE(r.ok());
    // The manager is gone; another starts on the same store.
    Open();
  }
  std::vector<std::string> DesiredKeys(const std::string& node) {
    std::vector<std::string> keys;
    for (const json& d : Desired(node)) keys.push_back(d["lease_id"]);
    return keys;
  }
  bool Has(const std::vector<std::string>& list, const std::string& key) {
    return std::find(list.begin(), list.end(), key) != list.end();
  }
  int SmFree(const std::string& uuid) {
    const json gpus = cluster_->Gpus();
    for (const json& g : gpus["gpus"]) {
      if (g["uuid"] == uuid) return g["sm_free"].get<int>();
    }
    return -1;
  }
};

TEST_F(RemoteMoveCrashTest, ClientsOnTheTargetTheRestartedManagerMovesTheLeaseThere) {
  const std::string id = Lease("a");
  const json before = Show(id);
  MoveAndDie(id, /*moved=*/true);
  // Before anything is asked: the lease is still on a, the move is shown, both servers are
  // desired and the target's share is held.
  json shown = Show(id);
  EXPECT_EQ(shown["node"], "a");
  EXPECT_EQ(shown["moving_to"]["node"], "b");
  EXPECT_EQ(shown["moving_to"]["gpu"]["index"], 1);
  EXPECT_EQ(shown["moving_to"]["server"], "127.0.0.1:12600");
  EXPECT_EQ(SmFree("GPU-b-1"), 68);
  EXPECT_TRUE(Has(DesiredKeys("a"), id));
  EXPECT_TRUE(Has(DesiredKeys("b"), id + ".m1"));
  // Nothing else may change it meanwhile.
  auto resize = cluster_->ResizeRemoteLease(alice_, id, {{"sm_count", 8}});
  EXPECT_EQ(resize.status().reason(), "conflict") << resize.status().ToString();
  EXPECT_EQ(cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}}).status().reason(), "conflict");

  cluster_->Start();
  (void)cluster_->ResolveMoves();
  shown = Show(id);
  EXPECT_EQ(shown["node"], "b");
  EXPECT_EQ(shown["gpu"]["index"], 1);
  EXPECT_EQ(shown["migrations"], 1);
  EXPECT_EQ(shown["server"]["address"], "127.0.0.1:12600");
  EXPECT_EQ(shown["secret"], before["secret"]);
  EXPECT_EQ(shown["expires_at"], before["expires_at"]);
  EXPECT_FALSE(shown.contains("moving_to"));
  // The old server drains; the new one never was.
  EXPECT_TRUE(node_a_.WaitForDelete(id));
  EXPECT_FALSE(Has(node_b_.deletes(), id + ".m1"));
  EXPECT_TRUE(DesiredKeys("a").empty());
  EXPECT_EQ(DesiredKeys("b"), std::vector<std::string>{id + ".m1"});
  EXPECT_EQ(SmFree("GPU-b-1"), 68);
  EXPECT_EQ(SmFree("GPU-a-0"), 132);
  const std::string events = AllEvents();
  EXPECT_NE(events.find("remote_lease.migrated"), std::string::npos);
  EXPECT_NE(events.find("resolved after a restart"), std::string::npos);
  // And it stays so after another restart.
  Open();
  cluster_->Start();
  EXPECT_EQ(Show(id)["node"], "b");
  EXPECT_EQ(DesiredKeys("b"), std::vector<std::string>{id + ".m1"});
}

TEST_F(RemoteMoveCrashTest, ClientsStillOnTheSourceTheLeaseStaysAndTheTargetGoes) {
  auto created = cluster_->CreateRemoteLease(
      alice_, {{"sm_count", 60}, {"memory_mb", 20000}, {"node", "a"}, {"ttl_seconds", 3600}});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string id = (*created)["id"];
  MoveAndDie(id, /*moved=*/false, /*timeout_s=*/1);
  cluster_->Start();
  // The target holds no client, but a's node may still be moving it (for as long as the move's
  // call to it could last): nothing is decided, nothing drained.
  (void)cluster_->ResolveMoves();
  EXPECT_EQ(Show(id)["moving_to"]["node"], "b");
  EXPECT_TRUE(Has(DesiredKeys("b"), id + ".m1"));
  EXPECT_TRUE(node_b_.deletes().empty());
  EXPECT_TRUE(node_a_.deletes().empty());
  // Past that, the client is still on a: the move is undone.
  clock_.Advance(std::chrono::seconds(40));
  ASSERT_TRUE(Beat("a").ok());
  ASSERT_TRUE(Beat("b").ok());
  (void)cluster_->ResolveMoves();
  const json shown = Show(id);
  EXPECT_EQ(shown["node"], "a");
  EXPECT_EQ(shown["migrations"], 0);
  EXPECT_EQ(shown["server"]["address"], "127.0.0.1:12500");
  EXPECT_FALSE(shown.contains("moving_to"));
  EXPECT_TRUE(node_b_.WaitForDelete(id + ".m1"));
  EXPECT_FALSE(Has(node_a_.deletes(), id));
  EXPECT_EQ(SmFree("GPU-b-1"), 132);
  EXPECT_TRUE(DesiredKeys("b").empty());
  EXPECT_EQ(DesiredKeys("a"), std::vector<std::string>{id});
  const std::string events = AllEvents();
  EXPECT_NE(events.find("remote_lease.migration_failed"), std::string::npos);
  EXPECT_NE(events.find("resolved after a restart"), std::string::npos);
  EXPECT_NE(events.find("still on a"), std::string::npos) << events;
  // It may move again.
  node_a_.Answer("migrate", 200, Moved(1));
  cluster_->SetMoveHookForTest(nullptr);
  EXPECT_TRUE(cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}}).ok());
}

TEST_F(RemoteMoveCrashTest, AnUnreachableTargetKeepsBothServersUntilItAnswers) {
  const std::string id = Lease("a");
  MoveAndDie(id, /*moved=*/true);
  node_b_.Down();
  cluster_->Start();
  json outcome = cluster_->ResolveMoves();
  EXPECT_TRUE(Has(outcome["undecided"].get<std::vector<std::string>>(), id)) << outcome;
  // Nothing drained, nothing moved: the lease is on a, both servers desired.
  ASSERT_TRUE(Beat("a").ok());
  EXPECT_EQ(Show(id)["node"], "a");
  EXPECT_EQ(Show(id)["moving_to"]["node"], "b");
  EXPECT_TRUE(Has(DesiredKeys("a"), id));
  EXPECT_TRUE(Has(DesiredKeys("b"), id + ".m1"));
  EXPECT_TRUE(node_a_.deletes().empty());
  // b answers again: the next pass (its heartbeat queues one) settles it.
  node_b_.Up();
  ASSERT_TRUE(Beat("b").ok());  // queues a pass
  (void)cluster_->ResolveMoves();
  const json shown = Show(id);
  EXPECT_EQ(shown["node"], "b");
  EXPECT_EQ(shown["migrations"], 1);
  EXPECT_FALSE(shown.contains("moving_to"));
  EXPECT_FALSE(Has(node_b_.deletes(), id + ".m1"));
  EXPECT_TRUE(node_a_.WaitForDelete(id));
  EXPECT_NE(AllEvents().find("resolved after a restart"), std::string::npos);
}

TEST_F(RemoteMoveCrashTest, ALostAnswerLeavesTheMoveRecordedUntilTheNodesCanTell) {
  auto created = cluster_->CreateRemoteLease(
      alice_, {{"sm_count", 60}, {"memory_mb", 20000}, {"node", "a"}, {"ttl_seconds", 3600}});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string id = (*created)["id"];
  node_a_.SetClients(id, 1);
  // a's node does not answer the move (its API is down): whether a client moved is unknown.
  node_a_.Down();
  auto moved = cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}, {"timeout_s", 1}});
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().reason(), "migration_in_doubt") << moved.status().ToString();
  EXPECT_EQ(Show(id)["node"], "a");
  EXPECT_EQ(Show(id)["moving_to"]["node"], "b");
  EXPECT_TRUE(Has(DesiredKeys("b"), id + ".m1"));
  EXPECT_TRUE(node_b_.deletes().empty());
  // a answers again, past the move's time: its client never left.
  node_a_.Up();
  clock_.Advance(std::chrono::seconds(40));
  ASSERT_TRUE(Beat("a").ok());
  ASSERT_TRUE(Beat("b").ok());
  (void)cluster_->ResolveMoves();
  EXPECT_EQ(Show(id)["node"], "a");
  EXPECT_FALSE(Show(id).contains("moving_to"));
  EXPECT_TRUE(node_b_.WaitForDelete(id + ".m1"));
  EXPECT_NE(AllEvents().find("answer to moving the clients was lost"), std::string::npos);
}

// ---- A manager that dies halfway through a resize ----
//
// The resize is written ahead into the lease's row (the larger of both shares held) before the
// node is asked. A manager stopped right after that (nothing asked) or right after the node
// answered (nothing settled) is replaced by a new one over the same store: the lease shows
// "resizing_to" while the larger share stays held, and it is settled to the share the node says
// its server runs with (GET's sm_count and memory_mb).

class RemoteResizeCrashTest : public RemoteMoveCrashTest {
 protected:
  // A lease of 60 SMs (64 granted) and 20000 MiB on a's GPU 0, for an hour, whose server's
  // record on the node (GET) says so.
  std::string ResizableLease() {
    auto created = cluster_->CreateRemoteLease(
        alice_, {{"sm_count", 60}, {"memory_mb", 20000}, {"node", "a"}, {"ttl_seconds", 3600}});
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return "";
    const std::string id = (*created)["id"];
    ServerRuns(id, 64, 20000);
    return id;
  }
  // The share the node's record of the lease's server shows.
  void ServerRuns(const std::string& id, int sm_count, int memory_mb) {
    node_a_.SetRecord(id, {{"lease_id", id},
                           {"state", "running"},
                           {"address", "127.0.0.1:12500"},
                           {"pid", 4242},
                           {"clients", 1},
                           {"sm_count", sm_count},
                           {"memory_mb", memory_mb}});
  }
  // Resizes `id` with `body` and stops the manager at `at` ("resize_recorded": the node was
  // never asked; "resize_applied": it answered, `then` runs there); another starts on the store.
  void ResizeAndDie(const std::string& id, const std::string& at, const json& body,
                    std::function<void()> then = nullptr) {
    cluster_->SetMoveHookForTest([at, then](const std::string& point) {
      if (point != at) return false;
      if (then) then();
      return true;
    });
    auto r = cluster_->ResizeRemoteLease(alice_, id, body);
    ASSERT_FALSE(r.ok());
    Open();
  }
};

TEST_F(RemoteResizeCrashTest, DiedOnceRecordedTheNodeNeverTookItAndTheOldShareStays) {
  const std::string id = ResizableLease();
  ResizeAndDie(id, "resize_recorded", {{"sm_count", 96}, {"memory_mb", 30000}, {"timeout_s", 1}});
  EXPECT_TRUE(node_a_.actions().empty());
  // Before anything is asked: the lease shows the share it had and the one it is resizing to;
  // the larger of both is held.
  json shown = Show(id);
  EXPECT_EQ(shown["sm_count"], 64);
  EXPECT_EQ(shown["memory_mb"], 20000);
  EXPECT_EQ(shown["resizing_to"]["sm_count"], 96);
  EXPECT_EQ(shown["resizing_to"]["memory_mb"], 30000);
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 96);
  // Nothing else may change it meanwhile.
  EXPECT_EQ(cluster_->ResizeRemoteLease(alice_, id, {{"sm_count", 8}}).status().reason(),
            "conflict");
  EXPECT_EQ(cluster_->MigrateRemoteLease(alice_, id, {{"node", "b"}}).status().reason(),
            "conflict");

  cluster_->Start();
  // The server still runs with the old share, but the node may still be applying the new one
  // (for as long as the manager's call to it could last): nothing is decided.
  (void)cluster_->ResolveMoves();
  EXPECT_EQ(Show(id)["resizing_to"]["sm_count"], 96);
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 96);
  EXPECT_TRUE(node_a_.actions().empty());
  // Past that, the old share it is.
  clock_.Advance(std::chrono::seconds(40));
  ASSERT_TRUE(Beat("a").ok());
  ASSERT_TRUE(Beat("b").ok());
  (void)cluster_->ResolveMoves();
  shown = Show(id);
  EXPECT_EQ(shown["sm_count"], 64);
  EXPECT_EQ(shown["memory_mb"], 20000);
  EXPECT_EQ(shown["sm_count_asked"], 60);
  EXPECT_FALSE(shown.contains("resizing_to"));
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 64);
  const std::string events = AllEvents();
  EXPECT_NE(events.find("remote_lease.resizing"), std::string::npos);
  EXPECT_NE(events.find("remote_lease.resize_failed"), std::string::npos);
  EXPECT_NE(events.find("resolved after a restart"), std::string::npos);
  EXPECT_EQ(Metric("flyt_cluster_remote_lease_resize_failures_total"), "1");
  // It stays so after another restart, and may be resized again.
  Open();
  cluster_->Start();
  EXPECT_FALSE(Show(id).contains("resizing_to"));
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 64);
  node_a_.Answer("resize", 200, {{"sm_count_granted", 96}});
  auto again = cluster_->ResizeRemoteLease(alice_, id, {{"sm_count", 96}});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)["sm_count"], 96);
  EXPECT_FALSE(again->contains("resizing_to"));
}

TEST_F(RemoteResizeCrashTest, DiedAfterTheNodeTookItTheNewShareIsKeptAndNoMore) {
  const std::string id = ResizableLease();
  node_a_.Answer("resize", 200, {{"sm_count_granted", 32}, {"clients", 1}, {"clients_applied", 1}});
  // Fewer SMs, more memory: the larger of both is 64 SMs and 30000 MiB.
  ResizeAndDie(id, "resize_applied", {{"sm_count", 30}, {"memory_mb", 30000}},
               [&] { ServerRuns(id, 32, 30000); });
  ASSERT_EQ(node_a_.actions().size(), 1u);
  EXPECT_EQ(node_a_.actions()[0].second["sm_count"], 32);
  json shown = Show(id);
  EXPECT_EQ(shown["sm_count"], 64);
  EXPECT_EQ(shown["resizing_to"]["sm_count"], 32);
  EXPECT_EQ(shown["resizing_to"]["memory_mb"], 30000);
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 64);

  cluster_->Start();
  (void)cluster_->ResolveMoves();
  shown = Show(id);
  EXPECT_EQ(shown["sm_count"], 32);
  EXPECT_EQ(shown["memory_mb"], 30000);
  EXPECT_EQ(shown["sm_count_asked"], 30);
  EXPECT_FALSE(shown.contains("resizing_to"));
  // The ledger holds exactly the new share: the SMs it gave up are free again.
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 32);
  json desired = Desired("a");
  ASSERT_EQ(desired.size(), 1u);
  EXPECT_EQ(desired[0]["sm_count"], 32);
  EXPECT_EQ(desired[0]["memory_mb"], 30000);
  const std::string events = AllEvents();
  EXPECT_NE(events.find("remote_lease.resized"), std::string::npos);
  EXPECT_NE(events.find("resolved after a restart"), std::string::npos);
  EXPECT_EQ(Metric("flyt_cluster_remote_lease_resizes_total"), "1");
  Open();
  cluster_->Start();
  EXPECT_EQ(Show(id)["sm_count"], 32);
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 32);
}

TEST_F(RemoteResizeCrashTest, AnUnreachableNodeKeepsTheLargerShareHeldUntilItAnswers) {
  const std::string id = ResizableLease();
  node_a_.Answer("resize", 200, {{"sm_count_granted", 96}});
  ResizeAndDie(id, "resize_applied", {{"sm_count", 96}}, [&] { ServerRuns(id, 96, 20000); });
  node_a_.Down();
  cluster_->Start();
  (void)cluster_->ResolveMoves();
  EXPECT_EQ(Show(id)["resizing_to"]["sm_count"], 96);
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 96);
  // Past the call's limit too: a node that cannot be asked decides nothing. (Its heartbeats
  // keep coming, so that its lease is not released for its silence meanwhile.)
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(std::chrono::seconds(20));
    ASSERT_TRUE(Beat("a").ok());
    ASSERT_TRUE(Beat("b").ok());
  }
  (void)cluster_->ResolveMoves();
  EXPECT_EQ(Show(id)["resizing_to"]["sm_count"], 96);
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 96);
  // It answers again: its heartbeat queues a pass, which settles the new share.
  node_a_.Up();
  ASSERT_TRUE(Beat("a").ok());
  (void)cluster_->ResolveMoves();
  const json shown = Show(id);
  EXPECT_EQ(shown["sm_count"], 96);
  EXPECT_FALSE(shown.contains("resizing_to"));
  EXPECT_EQ(SmFree("GPU-a-0"), 132 - 96);
}

TEST_F(RemoteResizeCrashTest, ALostAnswerIsInDoubtUntilTheNodeCanTell) {
  const std::string id = ResizableLease();
  // The node's API is down: whether the server took the new share is unknown.
  node_a_.Down();
  auto resized = cluster_->ResizeRemoteLease(alice_, id, {{"memory_mb", 40000}, {"timeout_s", 1}});
  ASSERT_FALSE(resized.ok());
  EXPECT_EQ(resized.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(resized.status().reason(), "resize_in_doubt") << resized.status().ToString();
  EXPECT_EQ(Show(id)["resizing_to"]["memory_mb"], 40000);
  EXPECT_EQ(Show(id)["memory_mb"], 20000);
  // It answers again, past the call's limit: its server still has the old share.
  node_a_.Up();
  clock_.Advance(std::chrono::seconds(40));
  ASSERT_TRUE(Beat("a").ok());
  ASSERT_TRUE(Beat("b").ok());
  (void)cluster_->ResolveMoves();
  EXPECT_EQ(Show(id)["memory_mb"], 20000);
  EXPECT_FALSE(Show(id).contains("resizing_to"));
  EXPECT_NE(AllEvents().find("answer to the resize was lost"), std::string::npos);
  // Released while a resize waits: the lease ends with it.
  node_a_.Down();
  resized = cluster_->ResizeRemoteLease(alice_, id, {{"memory_mb", 40000}, {"timeout_s", 1}});
  EXPECT_EQ(resized.status().reason(), "resize_in_doubt") << resized.status().ToString();
  ASSERT_TRUE(cluster_->ReleaseRemoteLease(alice_, id).ok());
  json outcome = cluster_->ResolveMoves();
  EXPECT_TRUE(outcome["undecided"].empty()) << outcome;
  EXPECT_EQ(SmFree("GPU-a-0"), 132);
}

}  // namespace
}  // namespace flyt::cluster
