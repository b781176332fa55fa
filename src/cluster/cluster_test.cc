#include "cluster/cluster.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <thread>
#include <set>

#include "cluster/auth.h"
#include "cluster/cluster_testing.h"
#include "cluster/config.h"
#include "common/strings.h"
#include "gpu/json.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;
using test::kGiB;
using test::OwnUuids;
using test::Snapshot;

// A node's heartbeat; its GPUs' UUIDs are its own ("GPU-<node>-<index>"), as real GPUs' are.
json NodeHeartbeat(const std::string& name, int gpus, uint64_t free_gib = 80,
               bool lost_first = false) {
  return {{"name", name}, {"snapshot", OwnUuids(Snapshot(gpus, free_gib, 0, lost_first), name)}};
}

json SmallTask(int tp_options = 1) {
  json tp = json::array();
  for (int i = 0; i < tp_options; ++i) tp.push_back(1 << i);
  return {{"task_name", "t"},
          {"model", {{"id_or_path", "meta-llama/Llama-3.1-8B-Instruct"}}},
          {"base_runtime", "vllm"},
          {"parameters", {{"max-model-len", json::array({8192})}}},
          {"parallel_config", {{"tp", tp}}}};
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-cluster-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    config_.var_dir = dir_.string();
    config_.store = "sqlite:" + (dir_ / "flyt.db").string();
    cluster_ = Open();
  }
  void TearDown() override {
    cluster_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<Cluster> Open() {
    auto store = store::Store::Open(config_.store);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    auto c = std::make_unique<Cluster>(std::move(store).value(), config_, clock_);
    Status s = c->Load();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return c;
  }
  std::vector<std::string> EventKinds(Cluster& c) {
    std::vector<std::string> kinds;
    auto events = c.Events(0, 10000);
    EXPECT_TRUE(events.ok());
    for (const json& e : (*events)["events"]) kinds.push_back(e["kind"]);
    return kinds;
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  ClusterConfig config_;
  std::unique_ptr<Cluster> cluster_;
  const Caller admin_{"admin", Role::kAdmin};
  // A node on this machine: its heartbeats come from 127.0.0.1, where its API is called.
  const Caller node_{"node", Role::kNode, "127.0.0.1"};
  const Caller alice_{"alice", Role::kClient};
  const Caller bob_{"bob", Role::kClient};
};

TEST_F(ClusterTest, HeartbeatsRegisterNodesAndTheirGpus) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  json nodes = cluster_->Nodes()["nodes"];
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["name"], "a");
  EXPECT_EQ(nodes[0]["state"], "reachable");
  EXPECT_EQ(nodes[0]["gpu_count"], 2);
  json gpus = cluster_->Gpus()["gpus"];
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]["allocation_state"], "free");
  EXPECT_DOUBLE_EQ(gpus[0]["score"].get<double>(), 1.0);
  EXPECT_EQ(EventKinds(*cluster_), std::vector<std::string>{"node.registered"});
}

TEST_F(ClusterTest, BadHeartbeatsAreRefusedWithTheField) {
  auto r = cluster_->Heartbeat(node_, {{"name", "a b"}, {"snapshot", Snapshot(1)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("name"), std::string::npos);
  r = cluster_->Heartbeat(node_, {{"name", "a"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("snapshot is missing"), std::string::npos);
  r = cluster_->Heartbeat(node_, {{"name", "a"}, {"snapshot", Snapshot(1)}, {"extra", 1}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown field 'extra'"), std::string::npos);
  json dup = Snapshot(2);
  dup["gpus"][1]["index"] = 0u;
  r = cluster_->Heartbeat(node_, {{"name", "a"}, {"snapshot", dup}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("appears twice"), std::string::npos) << r.status().message();
  EXPECT_TRUE(cluster_->Nodes()["nodes"].empty());
}

TEST_F(ClusterTest, AllocateRenewReleaseAndRefuseWithReasons) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  auto lease = cluster_->Allocate(alice_, {{"gpus", 2}, {"ttl_seconds", 60}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ((*lease)["owner"], "alice");
  EXPECT_EQ((*lease)["gpus"].size(), 2u);
  auto refused = cluster_->Allocate(bob_, {{"gpus", 1}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("a: 0 available, 2 leased"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(refused.status().reason(), "insufficient_gpus");  // they may be released
  auto never = cluster_->Allocate(bob_, {{"gpus", 4}});
  ASSERT_FALSE(never.ok());
  EXPECT_EQ(never.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(never.status().reason(), "never_fits");  // no node has 4 GPUs
  EXPECT_NE(never.status().message().find("it can never be met in this cluster"),
            std::string::npos)
      << never.status().message();
  const std::string id = (*lease)["id"];
  // bob may not touch alice's lease; alice may.
  EXPECT_EQ(cluster_->Release(bob_, id).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(cluster_->Renew(bob_, id, json::object()).status().code(),
            StatusCode::kPermissionDenied);
  clock_.Advance(std::chrono::seconds(30));
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  auto renewed = cluster_->Renew(alice_, id, {{"ttl_seconds", 120}});
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  EXPECT_EQ((*renewed)["ttl_seconds"], 120);
  ASSERT_TRUE(cluster_->Release(alice_, id).ok());
  Status again = cluster_->Release(alice_, id);
  EXPECT_EQ(again.code(), StatusCode::kNotFound);
  EXPECT_EQ(again.reason(), "already_ended");
  EXPECT_EQ(cluster_->Renew(alice_, id, json::object()).status().reason(), "already_ended");
  // An id that never was is plain not found.
  Status unknown = cluster_->Release(alice_, "lease-000000000000");
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_EQ(unknown.reason(), "");
  // A restarted manager knows it from the store's tombstone.
  cluster_.reset();
  cluster_ = Open();
  EXPECT_EQ(cluster_->Release(alice_, id).reason(), "already_ended");
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  EXPECT_TRUE(cluster_->Allocate(bob_, {{"gpus", 1}}).ok());
  auto bad = cluster_->Allocate(bob_, {{"gpus", 0}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->Allocate(bob_, {{"gpus", 1}, {"owner", "alice"}}).status().code(),
            StatusCode::kPermissionDenied);
}

TEST_F(ClusterTest, LeasesExpireAndUnreachableNodesLoseThemAfterTheGrace) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 1)).ok());
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("b", 1)).ok());
  ASSERT_TRUE(cluster_->Allocate(alice_, {{"gpus", 1}, {"ttl_seconds", 10}}).ok());
  auto on_other = cluster_->Allocate(alice_, {{"gpus", 1}, {"ttl_seconds", 3600}});
  ASSERT_TRUE(on_other.ok());
  const std::string long_node = (*on_other)["node"];
  const std::string live_node = long_node == "a" ? "b" : "a";
  clock_.Advance(std::chrono::seconds(11));
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat(live_node, 1)).ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 1u);  // the 10 s one expired
  // long_node stops sending heartbeats: unreachable after 15 s, its lease gone 60 s later.
  clock_.Advance(std::chrono::seconds(10));
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat(live_node, 1)).ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  json nodes = cluster_->Nodes()["nodes"];
  for (const json& n : nodes) {
    EXPECT_EQ(n["state"], n["name"] == long_node ? "unreachable" : "reachable") << n.dump();
  }
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 1u);  // kept through the grace
  clock_.Advance(std::chrono::seconds(60));
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat(live_node, 1)).ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 0u);
  auto kinds = EventKinds(*cluster_);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "lease.expired"), 2);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "node.unreachable"), 1);
  // It comes back on its own.
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat(long_node, 1)).ok());
  nodes = cluster_->Nodes()["nodes"];
  for (const json& n : nodes) EXPECT_EQ(n["state"], "reachable");
  kinds = EventKinds(*cluster_);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "node.reachable"), 1);
}

TEST_F(ClusterTest, JobsRunWithGpuInfoAndTimeOutWithTheReasons) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("b", 4)).ok());
  ASSERT_TRUE(cluster_->Allocate(admin_, {{"gpus", 4}, {"ttl_seconds", 3600}}).ok());  // all of b
  json task = SmallTask(/*tp_options=*/3);  // tp 1, 2, 4: three experiments
  task["scheduling"] = {{"timeout_seconds", 300}};
  auto sub = cluster_->Submit(alice_, task);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_EQ((*sub)["jobs"].size(), 3u);
  EXPECT_EQ((*sub)["jobs"][2]["gpus"], 4);
  ASSERT_TRUE(cluster_->Tick().ok());
  auto first = cluster_->GetJob((*sub)["jobs"][0]["id"]);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)["status"], "running");
  EXPECT_EQ((*first)["gpu_info"]["count"], 1);
  EXPECT_EQ((*first)["gpu_info"]["world_size"], 1);
  EXPECT_EQ((*first)["gpu_info"]["model"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ((*first)["gpu_info"]["allocation_details"][0]["allocation_method"],
            "flyt-ledger/binpack");
  EXPECT_TRUE((*first)["gpu_info"]["allocation_details"][0]["memory_free_mb"].is_number());
  // tp=2 cannot fit next to it on a 2-GPU node; tp=4 never fits.
  auto second = cluster_->GetJob((*sub)["jobs"][1]["id"]);
  EXPECT_EQ((*second)["status"], "queued");
  EXPECT_EQ((*second)["queue_position"], 1);
  EXPECT_NE((*second)["message"].get<std::string>().find("a: 1 available, 1 leased"),
            std::string::npos)
      << (*second)["message"];
  // The first ends: the second starts at once (event-driven, no polling).
  auto done = cluster_->Complete(alice_, (*sub)["jobs"][0]["id"], {{"metrics", {{"tps", 5}}}});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ((*done)["status"], "completed");
  EXPECT_EQ((*done)["metrics"]["tps"], 5);
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ((*cluster_->GetJob((*sub)["jobs"][1]["id"]))["status"], "running");
  clock_.Advance(std::chrono::seconds(301));
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("b", 4)).ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  auto third = cluster_->GetJob((*sub)["jobs"][2]["id"]);
  EXPECT_EQ((*third)["status"], "failed");
  EXPECT_NE((*third)["message"].get<std::string>().find("Insufficient GPUs after waiting 301 s"),
            std::string::npos)
      << (*third)["message"];
  EXPECT_NE((*third)["message"].get<std::string>().find("no 4 GPU(s) on one node"),
            std::string::npos);
  // Ended jobs cannot be cancelled or completed; another client cannot cancel alice's.
  auto ended = cluster_->Cancel(alice_, (*sub)["jobs"][2]["id"]);
  EXPECT_EQ(ended.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ended.status().reason(), "already_ended");
  ended = cluster_->Complete(alice_, (*sub)["jobs"][0]["id"], json::object());
  EXPECT_EQ(ended.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ended.status().reason(), "already_ended");
  // The lease of an ended job has ended too.
  const std::string first_lease = (*first)["lease_id"];
  EXPECT_EQ(cluster_->Release(alice_, first_lease).reason(), "already_ended");
  EXPECT_EQ(cluster_->Cancel(bob_, (*sub)["jobs"][1]["id"]).status().code(),
            StatusCode::kPermissionDenied);
  auto cancelled = cluster_->Cancel(alice_, (*sub)["jobs"][1]["id"]);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ((*cancelled)["status"], "cancelled");
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 1u);  // only admin's hold on b
}

TEST_F(ClusterTest, AnExperimentNoNodeCouldHoldFailsAtOnce) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  json task = SmallTask(/*tp_options=*/3);  // tp 4 needs more GPUs than any node has
  auto sub = cluster_->Submit(alice_, task);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_EQ((*sub)["jobs"][0]["status"], "queued");
  EXPECT_FALSE((*sub)["jobs"][0].contains("code"));
  EXPECT_EQ((*sub)["jobs"][2]["status"], "failed");
  EXPECT_EQ((*sub)["jobs"][2]["code"], "never_fits");
  // A queued job has not started: completing it is refused, but it has not ended.
  auto early = cluster_->Complete(alice_, (*sub)["jobs"][0]["id"], json::object());
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(early.status().reason(), "");
  EXPECT_NE((*sub)["jobs"][2]["message"].get<std::string>().find(
                "cannot run in this cluster: needs 4 GPU(s) on one node that can hold it; the most "
                "on any node is 2"),
            std::string::npos)
      << (*sub)["jobs"][2];
  task = SmallTask();
  task["scheduling"] = {{"gpu_model", "B200"}};
  sub = cluster_->Submit(alice_, task);
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ((*sub)["jobs"][0]["status"], "failed");
  EXPECT_NE((*sub)["jobs"][0]["message"].get<std::string>().find("largest B200 GPU"),
            std::string::npos)
      << (*sub)["jobs"][0];
}

TEST_F(ClusterTest, SubmissionsAreValidatedAndUnknownModelsFailClosed) {
  json task = SmallTask();
  task["model"]["id_or_path"] = "someone/unknown-model";
  auto r = cluster_->Submit(alice_, task);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not in flyt's catalog"), std::string::npos);
  task = SmallTask();
  task["model"]["config_json"] = "/etc/passwd";
  r = cluster_->Submit(alice_, task);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not read"), std::string::npos);
  task = SmallTask();
  task["scheduling"] = {{"priority", "high"}};
  r = cluster_->Submit(alice_, task);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("priority"), std::string::npos);
  EXPECT_EQ((*cluster_->Jobs("", 100))["jobs"].size(), 0u);
}

TEST_F(ClusterTest, RequestFieldsAreCheckedByTypeAndNamedWithTheirPath) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  // 2^64-1 is not -1 to a signed field: refused, not read as a priority in range.
  json task = SmallTask();
  task["scheduling"] = json::parse(R"({"priority": 18446744073709551615})");
  auto r = cluster_->Submit(alice_, task);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "scheduling.priority must be an integer from -1000 to 1000");
  task["scheduling"] = {{"colour", "red"}};
  r = cluster_->Submit(alice_, task);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown field 'scheduling.colour'"), std::string::npos)
      << r.status().message();
  task["scheduling"] = "soon";
  EXPECT_EQ(cluster_->Submit(alice_, task).status().message(), "scheduling must be an object");
  EXPECT_EQ((*cluster_->Jobs("", 100))["jobs"].size(), 0u);

  for (const json& body : {json{{"gpus", 1.5}}, json{{"gpus", "1"}}, json{{"gpus", -1}},
                           json::parse(R"({"gpus": 18446744073709551615})")}) {
    auto a = cluster_->Allocate(alice_, body);
    ASSERT_FALSE(a.ok()) << body;
    EXPECT_EQ(a.status().message(), "gpus must be an integer from 1 to 64") << body;
  }
  EXPECT_EQ(cluster_->Allocate(alice_, {{"policy", "fifo"}}).status().message(),
            "policy must be score, binpack or spread");
  EXPECT_EQ(cluster_->Allocate(alice_, {{"same_node", 1}}).status().message(),
            "same_node must be true or false");
  EXPECT_EQ(cluster_->Allocate(alice_, {{"labels", {{"team", 7}}}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(cluster_->Allocate(alice_, {{"policy", ""}}).ok());  // empty: the default
  EXPECT_EQ(cluster_->Heartbeat(node_, {{"name", "a"}, {"snapshot", Snapshot(1)}, {"events", 3}})
                .status()
                .message(),
            "events must be an array");
}

TEST_F(ClusterTest, PriorityThenFifoAndRestartKeepsTheQueueAndLeases) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 1)).ok());
  auto blocker = cluster_->Allocate(admin_, {{"gpus", 1}, {"ttl_seconds", 600}});
  ASSERT_TRUE(blocker.ok());
  std::vector<std::string> ids;
  for (int p : {0, 0, 5}) {
    json task = SmallTask();
    task["scheduling"] = {{"priority", p}};
    auto sub = cluster_->Submit(alice_, task);
    ASSERT_TRUE(sub.ok());
    ids.push_back((*sub)["jobs"][0]["id"]);
  }
  ASSERT_TRUE(cluster_->Tick().ok());
  auto order = [&](Cluster& c) {
    std::vector<std::string> out;
    const json queue = c.Queue();
    for (const json& q : queue["queue"]) out.push_back(q["job_id"]);
    return out;
  };
  const std::vector<std::string> expected = {ids[2], ids[0], ids[1]};
  EXPECT_EQ(order(*cluster_), expected) << cluster_->Jobs("", 10)->dump();

  // A crash: a new manager on the same store has the same leases and queue order.
  cluster_.reset();
  cluster_ = Open();
  EXPECT_EQ(order(*cluster_), expected);
  json leases = cluster_->Allocations()["allocations"];
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0]["id"], (*blocker)["id"]);
  EXPECT_EQ(leases[0]["expires_at"], (*blocker)["expires_at"]);
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 1)).ok());
  ASSERT_TRUE(cluster_->Release(admin_, (*blocker)["id"]).ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ((*cluster_->GetJob(ids[2]))["status"], "running");  // priority 5 first
}

TEST_F(ClusterTest, TwoManagersOnOneStoreNeverGrantAGpuTwice) {
  auto other = Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 4)).ok());
  ASSERT_TRUE(other->Heartbeat(node_, NodeHeartbeat("b", 4)).ok());
  std::set<std::string> granted;
  int ok = 0;
  for (int i = 0; i < 12; ++i) {
    Cluster& c = i % 2 == 0 ? *cluster_ : *other;
    auto lease = c.Allocate(alice_, {{"gpus", 1}, {"same_node", true}});
    if (!lease.ok()) {
      EXPECT_EQ(lease.status().code(), StatusCode::kResourceExhausted);
      continue;
    }
    ++ok;
    for (const json& g : (*lease)["gpus"]) {
      const std::string key = g["node"].get<std::string>() + "/" + g["uuid"].get<std::string>();
      EXPECT_TRUE(granted.insert(key).second) << key << " granted twice";
    }
  }
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(cluster_->Allocate(alice_, {{"gpus", 1}}).status().reason(), "insufficient_gpus");
  // Each sees the other's leases.
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 8u);
  ASSERT_TRUE(cluster_->Tick().ok());
  ASSERT_TRUE(other->Tick().ok());
  EXPECT_EQ(other->Allocations()["allocations"].size(), 8u);
  // A lease one released is ended for the other too (the store's change feed).
  const std::string id = cluster_->Allocations()["allocations"][0]["id"];
  ASSERT_TRUE(cluster_->Release(admin_, id).ok());
  Status again = other->Release(admin_, id);
  EXPECT_EQ(again.code(), StatusCode::kNotFound);
  EXPECT_EQ(again.reason(), "already_ended");
}

TEST_F(ClusterTest, ANodeIsUpdatedOnlyByTheTokenThatRegisteredIt) {
  const Caller node_a{"node-a-token", Role::kNode}, node_b{"node-b-token", Role::kNode};
  ASSERT_TRUE(cluster_->Heartbeat(node_a, NodeHeartbeat("a", 2)).ok());
  auto hijack = cluster_->Heartbeat(node_b, NodeHeartbeat("a", 2, /*free_gib=*/1));
  ASSERT_FALSE(hijack.ok());
  EXPECT_EQ(hijack.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(cluster_->Heartbeat(node_a, NodeHeartbeat("a", 2)).ok());
  EXPECT_TRUE(cluster_->Heartbeat(admin_, NodeHeartbeat("a", 2)).ok());
  json bad = NodeHeartbeat("b", 1);
  bad["api_url"] = "file:///etc/passwd";
  EXPECT_EQ(cluster_->Heartbeat(node_b, bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClusterTest, GpusWithoutAUniqueUuidAreRefused) {
  json snap = Snapshot(2);
  snap["gpus"][1]["uuid"] = snap["gpus"][0]["uuid"];
  auto r = cluster_->Heartbeat(node_, {{"name", "a"}, {"snapshot", snap}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("appears twice"), std::string::npos) << r.status().message();
  snap["gpus"][1]["uuid"] = "";
  r = cluster_->Heartbeat(node_, {{"name", "a"}, {"snapshot", snap}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs a UUID"), std::string::npos);
}

TEST_F(ClusterTest, AGpuLostBeforeItsUuidWasReadIsStillListed) {
  json snap = Snapshot(2);
  snap["gpus"][1]["uuid"] = "";
  snap["gpus"][1]["lost"] = true;
  auto r = cluster_->Heartbeat(node_, {{"name", "a"}, {"snapshot", snap}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto gpu = cluster_->Gpu("a", 1);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ((*gpu)["allocation_state"], "lost");
  EXPECT_EQ((*gpu)["uuid"], "GPU-lost-at-index-1");
  EXPECT_EQ(cluster_->Gpu("a", 7).status().code(), StatusCode::kNotFound);
  // A leased GPU names its holder.
  auto lease = cluster_->Allocate(alice_, {{"gpus", 1}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  gpu = cluster_->Gpu("a", 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ((*gpu)["allocation_state"], "leased");
  ASSERT_EQ((*gpu)["leases"].size(), 1u);
  EXPECT_EQ((*gpu)["leases"][0]["owner"], "alice");
  EXPECT_EQ((*gpu)["leases"][0]["lease_id"], (*lease)["id"]);
  EXPECT_EQ(cluster_->Gpu("nope", 0).status().code(), StatusCode::kNotFound);
}

TEST_F(ClusterTest, TheCachedGpuListShowsALeaseAtOnce) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  auto leased = [&] {
    int n = 0;
    const json body = json::parse(*cluster_->GpusBody());
    for (const json& g : body["gpus"]) n += g["allocation_state"] == "leased";
    return n;
  };
  EXPECT_EQ(leased(), 0);
  // Within the second the body may be kept for heartbeats, a lease still shows at once.
  auto lease = cluster_->Allocate(alice_, {{"gpus", 1}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(leased(), 1);
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  EXPECT_EQ(leased(), 1);
}

TEST_F(ClusterTest, TheLiveStreamLearnsWhichTopicsChanged) {
  auto topic = [](const ChangeMark& m, Topic t) { return m.topics[static_cast<size_t>(t)]; };
  const ChangeMark start = cluster_->Changes();
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  ChangeMark m = cluster_->WaitForChange(start.seq, std::chrono::milliseconds(0));
  EXPECT_GT(m.seq, start.seq);
  EXPECT_GT(topic(m, Topic::kNodes), topic(start, Topic::kNodes));
  EXPECT_GT(topic(m, Topic::kEvents), topic(start, Topic::kEvents));  // node.registered
  EXPECT_EQ(topic(m, Topic::kLeases), topic(start, Topic::kLeases));
  EXPECT_EQ(topic(m, Topic::kJobs), topic(start, Topic::kJobs));

  const ChangeMark before = m;
  ASSERT_TRUE(cluster_->Allocate(alice_, {{"gpus", 1}}).ok());
  m = cluster_->Changes();
  EXPECT_GT(topic(m, Topic::kLeases), topic(before, Topic::kLeases));
  EXPECT_EQ(topic(m, Topic::kJobs), topic(before, Topic::kJobs));

  // A refusal changes nothing, so a waiter is not woken for it.
  const ChangeMark quiet = m;
  EXPECT_FALSE(cluster_->Allocate(alice_, {{"gpus", 8}}).ok());
  EXPECT_EQ(cluster_->WaitForChange(quiet.seq, std::chrono::milliseconds(0)).seq, quiet.seq);

  // A waiter blocked on no change is released at once when the streams close.
  std::thread closer([&] { cluster_->CloseStreams(); });
  m = cluster_->WaitForChange(quiet.seq, std::chrono::hours(1));
  closer.join();
  EXPECT_EQ(m.seq, quiet.seq);
  EXPECT_TRUE(cluster_->StreamsClosed());
}

TEST_F(ClusterTest, RenewingALeasePastItsTtlIsAlreadyEnded) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 1)).ok());
  auto lease = cluster_->Allocate(alice_, {{"gpus", 1}, {"ttl_seconds", 10}});
  ASSERT_TRUE(lease.ok());
  clock_.Advance(std::chrono::seconds(11));  // expired, but no expiry pass ran yet
  auto renewed = cluster_->Renew(alice_, (*lease)["id"], json::object());
  ASSERT_FALSE(renewed.ok());
  EXPECT_EQ(renewed.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(renewed.status().reason(), "already_ended");
  ASSERT_TRUE(cluster_->Tick().ok());  // now expiry removes it
  EXPECT_EQ(cluster_->Renew(alice_, (*lease)["id"], json::object()).status().reason(),
            "already_ended");
}

TEST_F(ClusterTest, AnExpiredLeaseFreesItsGpusBeforeTheSchedulerRuns) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  ASSERT_TRUE(cluster_->Allocate(alice_, {{"gpus", 2}, {"ttl_seconds", 10}}).ok());
  clock_.Advance(std::chrono::seconds(11));
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  auto again = cluster_->Allocate(bob_, {{"gpus", 2}});  // no Tick in between
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 1u);
  auto kinds = EventKinds(*cluster_);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "lease.expired"), 1);
}

TEST_F(ClusterTest, AfterARestartASilentNodeOffersNothingButItsLeasesGetTheGrace) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  auto lease = cluster_->Allocate(alice_, {{"gpus", 1}, {"ttl_seconds", 86400}});
  ASSERT_TRUE(lease.ok());
  cluster_.reset();
  clock_.Advance(std::chrono::hours(1));  // the manager was down; so, it turns out, was node a
  cluster_ = Open();
  auto refused = cluster_->Allocate(bob_, {{"gpus", 1}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("a: unreachable"), std::string::npos)
      << refused.status().message();
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 1u);  // within the grace
  clock_.Advance(std::chrono::seconds(61));
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 0u);
  // A heartbeat brings it back.
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  EXPECT_TRUE(cluster_->Allocate(bob_, {{"gpus", 1}}).ok());
}

// Nor is it its holders being gone: no renewal could get in while no manager ran. A lease whose
// TTL ran out meanwhile gets unreachable_after + lease_grace from the restart (the first
// scheduler pass, before the API listens, would otherwise expire it), and is renewed as usual.
TEST_F(ClusterTest, AfterARestartALeaseWhoseTtlRanOutWhileTheManagerWasDownGetsTheGrace) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  auto kept = cluster_->Allocate(alice_, {{"gpus", 1}, {"ttl_seconds", 10}});
  auto gone = cluster_->Allocate(bob_, {{"gpus", 1}, {"ttl_seconds", 10}});
  ASSERT_TRUE(kept.ok() && gone.ok());
  cluster_.reset();
  clock_.Advance(std::chrono::seconds(30));  // down longer than the TTL
  cluster_ = Open();
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 2u);
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  const std::string kept_id = (*kept)["id"];
  auto renewed = cluster_->Renew(alice_, kept_id, {{"ttl_seconds", 600}});
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  auto events = cluster_->Events(0, 10000);
  ASSERT_TRUE(events.ok());
  EXPECT_NE(DumpJson(*events).find("manager_restart"), std::string::npos);
  // A holder that is gone for good lets its lease go after that grace (75 s here).
  clock_.Advance(std::chrono::seconds(70));
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  clock_.Advance(std::chrono::seconds(6));
  ASSERT_TRUE(cluster_->Tick().ok());
  json left = cluster_->Allocations()["allocations"];
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0]["id"], kept_id);
}


// A manager that restarts over and over (a crash loop) gives that grace once per renewal: a lease
// whose holder never renews again ends at the end of the first grace, however often the manager
// restarts within it; one that renews is extended again at the next restart.
TEST_F(ClusterTest, AManagerRestartingOverAndOverGivesAnUnrenewedLeaseTheGraceOnce) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
  auto abandoned = cluster_->Allocate(alice_, {{"gpus", 1}, {"ttl_seconds", 10}});
  auto renewing = cluster_->Allocate(bob_, {{"gpus", 1}, {"ttl_seconds", 10}});
  ASSERT_TRUE(abandoned.ok() && renewing.ok());
  const std::string renewing_id = (*renewing)["id"];
  cluster_.reset();
  clock_.Advance(std::chrono::seconds(30));
  cluster_ = Open();
  ASSERT_TRUE(cluster_->Tick().ok());
  auto shown = cluster_->Allocations()["allocations"];
  ASSERT_EQ(shown.size(), 2u);
  EXPECT_EQ(shown[0]["grace_extended"], true) << shown.dump();
  // Restarts every 20 s; the node heartbeats and bob renews in between, alice never does.
  for (int restart = 0; restart < 4; ++restart) {
    ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 2)).ok());
    ASSERT_TRUE(cluster_->Renew(bob_, renewing_id, {{"ttl_seconds", 10}}).ok());
    cluster_.reset();
    clock_.Advance(std::chrono::seconds(20));
    cluster_ = Open();
    ASSERT_TRUE(cluster_->Tick().ok());
  }
  // 30 + 4 * 20 = 110 s after alice's last renewal, past the one 75 s grace from the first restart.
  json left = cluster_->Allocations()["allocations"];
  ASSERT_EQ(left.size(), 1u) << left.dump();
  EXPECT_EQ(left[0]["id"], renewing_id);
  EXPECT_EQ(left[0]["grace_extended"], true);  // bob has not renewed since this restart's grace
  ASSERT_TRUE(cluster_->Renew(bob_, renewing_id, {{"ttl_seconds", 10}}).ok());
  EXPECT_EQ(cluster_->Allocations()["allocations"][0]["grace_extended"], false);
}
// Overload is not silence: while the manager could not receive (its HTTP server refused
// connections or kept requests waiting), a node's silence does not count toward the grace.
TEST_F(ClusterTest, SilenceWhileTheManagerCouldNotReceiveReleasesNoLease) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, NodeHeartbeat("a", 1)).ok());
  ASSERT_TRUE(cluster_->Allocate(alice_, {{"gpus", 1}, {"ttl_seconds", 3600}}).ok());
  // Node a's heartbeats stop arriving, and the manager's front door is flooded all along:
  // unreachable after 15 s, but 15 + 60 s later the lease is still there.
  for (int s = 0; s < 80; s += 5) {
    clock_.Advance(std::chrono::seconds(5));
    cluster_->NoteIngestImpaired();
    ASSERT_TRUE(cluster_->Tick().ok());
  }
  EXPECT_EQ(cluster_->Nodes()["nodes"][0]["state"], "unreachable");
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 1u);
  // The flood ends. The grace counts from its last moment: 74 s later the lease is still held...
  clock_.Advance(std::chrono::seconds(74));
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 1u);
  // ... and after unreachable_after + lease_grace (75 s) of silence the manager could have
  // heard, it is released.
  clock_.Advance(std::chrono::seconds(2));
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 0u);
  EXPECT_NE(cluster_->Metrics().find("flyt_cluster_ingest_impaired_total 16"), std::string::npos);
}

TEST(ClusterConfigTest, BrokenConfigsNameTheKey) {
  auto c = ParseClusterConfig("[manager]\nlisten = \"nowhere\"\n", "cm.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cm.toml:2: manager.listen"), std::string::npos)
      << c.status().message();
  c = ParseClusterConfig("[[auth.tokens]]\nname = \"x\"\ntoken = \"short\"\nrole = \"admin\"\n",
                         "cm.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("at least 16"), std::string::npos);
  c = ParseClusterConfig(
      "[[auth.tokens]]\nname = \"x\"\ntoken = \"0123456789abcdef\"\nrole = \"root\"\n", "cm.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unknown role 'root'"), std::string::npos);
  c = ParseClusterConfig("[queue]\njob_timeout_seconds = 0\n", "cm.toml");
  ASSERT_FALSE(c.ok());
  c = ParseClusterConfig("[ledger]\nunreachable = 3\n", "cm.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unknown key"), std::string::npos);
  c = ParseClusterConfig(
      "[manager]\nlisten = \"0.0.0.0:9\"\n[[auth.tokens]]\nname = \"n\"\ntoken = "
      "\"0123456789abcdef\"\nrole = \"node\"\n[queue]\njob_timeout_seconds = 60\n",
      "cm.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen_port, 9);
  EXPECT_EQ(c->tokens[0].role, Role::kNode);
  EXPECT_EQ(c->job_timeout, std::chrono::seconds(60));
  c = ParseClusterConfig("[http]\nmax_connections_per_peer = 0\n", "cm.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cm.toml:2: http.max_connections_per_peer"),
            std::string::npos)
      << c.status().message();
  c = ParseClusterConfig("[http]\nmax_connections = 10\n", "cm.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("must not be above max_connections"), std::string::npos)
      << c.status().message();
  c = ParseClusterConfig("[http]\nrequest_deadline_seconds = 3\nidle_timeout_seconds = 2\n"
                         "max_connections_per_peer = 8\nthreads = 4\n",
                         "cm.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->http.request_deadline_seconds, 3);
  EXPECT_EQ(c->http.idle_timeout_seconds, 2);
  EXPECT_EQ(c->http.max_connections_per_peer, 8);
  EXPECT_EQ(c->http.threads, 4);
}

TEST(ClusterConfigTest, TheShippedConfigIsTheDefaults) {
  auto c = LoadClusterConfig(std::string(FLYT_SOURCE_DIR) + "/configs/cluster-manager.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ClusterConfig d;
  EXPECT_EQ(c->listen_port, d.listen_port);
  EXPECT_EQ(c->store, d.store);
  EXPECT_EQ(c->ledger.unreachable_after, d.ledger.unreachable_after);
  EXPECT_EQ(c->ledger.lease_grace, d.ledger.lease_grace);
  EXPECT_EQ(c->job_timeout, d.job_timeout);
  EXPECT_EQ(c->job_lease_ttl, d.job_lease_ttl);
  EXPECT_EQ(c->queue.backfill_hold, d.queue.backfill_hold);
  EXPECT_EQ(c->max_body_bytes, d.max_body_bytes);
  EXPECT_EQ(c->event_retention, d.event_retention);
  EXPECT_EQ(c->web_enabled, d.web_enabled);
  EXPECT_EQ(c->web_dir, d.web_dir);
  EXPECT_EQ(c->max_streams, d.max_streams);
  EXPECT_EQ(c->stream_min_gap, d.stream_min_gap);
  EXPECT_EQ(c->http.threads, d.http.threads);
  EXPECT_EQ(c->http.max_connections_per_peer, d.http.max_connections_per_peer);
  EXPECT_EQ(c->http.max_connections, d.http.max_connections);
  EXPECT_EQ(c->http.request_deadline_seconds, d.http.request_deadline_seconds);
  EXPECT_EQ(c->http.idle_timeout_seconds, d.http.idle_timeout_seconds);
  EXPECT_EQ(c->remote_enabled, d.remote_enabled);
  EXPECT_EQ(c->remote_default_ttl, d.remote_default_ttl);
  EXPECT_EQ(c->remote_max_ttl, d.remote_max_ttl);
  EXPECT_EQ(c->remote_server_start_timeout, d.remote_server_start_timeout);
  EXPECT_TRUE(c->tokens.empty());
}

TEST(AuthTest, GeneratesAnAdminTokenOnceAndKeepsItPrivate) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("flyt-auth-test-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  ClusterConfig config;
  config.var_dir = (dir / "var").string();
  auto first = Auth::Build(config, "");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->generated_now);
  struct stat st {};
  ASSERT_EQ(stat((dir / "var/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto token = ReadFile((dir / "var/admin.token").string());
  ASSERT_TRUE(token.ok());
  const std::string t(Trim(*token));
  auto who = first->auth.Identify(t);
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->role, Role::kAdmin);
  EXPECT_FALSE(first->auth.Identify(std::string("wrong")).has_value());
  EXPECT_FALSE(first->auth.Identify(std::nullopt).has_value());  // never open by accident
  auto second = Auth::Build(config, "");
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->generated_now);
  EXPECT_TRUE(second->auth.Identify(t).has_value());
  // A configured or environment token means nothing is generated.
  auto env = Auth::Build(config, "env-admin-token-0123");
  ASSERT_TRUE(env.ok());
  EXPECT_TRUE(env->generated_token_path.empty());
  EXPECT_FALSE(env->auth.Identify(t).has_value());
  EXPECT_FALSE(Auth::Build(config, "short").ok());
  config.anonymous_read = true;
  config.tokens.push_back({"viewer", "viewer-token-0123456", Role::kViewer});
  auto anon = Auth::Build(config, "");
  ASSERT_TRUE(anon.ok());
  EXPECT_EQ(anon->auth.Identify(std::nullopt)->role, Role::kViewer);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flyt::cluster
