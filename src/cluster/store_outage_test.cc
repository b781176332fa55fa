// The cluster through a store outage: reads keep answering from the last good state, writes are
// refused with store_unavailable and change nothing, no lease is released because of the outage
// itself, and everything resumes when the store is back. The store fails the two ways real ones
// do (cluster_testing.h's FlakyStore): SQLite that cannot write, PostgreSQL gone altogether.
#include <gtest/gtest.h>

#include "cluster/cluster_testing.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;
using test::FlakyStore;
using test::Heartbeat;
using test::Task;

class StoreOutageTest : public test::ClusterFixture {
 protected:
  void SetUp() override {
    ClusterFixture::SetUp();
    Open();
    ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 2)).ok());
    auto lease = cluster_->Allocate(alice_, {{"gpus", 1}, {"ttl_seconds", 3600}});
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    lease_ = (*lease)["id"];
    // A job that waits: it needs both GPUs, one is leased.
    auto job = cluster_->Submit(alice_, Task({2}, {{"timeout_seconds", 86400}}));
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    job_ = (*job)["jobs"][0]["id"];
    ASSERT_TRUE(cluster_->Tick().ok());
  }

  // What a reader sees: the leases, the GPUs' states, the jobs and the nodes.
  std::string View() {
    json gpus = cluster_->Gpus()["gpus"];
    std::string out;
    for (const json& g : gpus) out += g["allocation_state"].get<std::string>() + " ";
    for (const std::string& id : LeaseIds()) out += id + " ";
    const auto jobs = cluster_->Jobs("", 100);
    EXPECT_TRUE(jobs.ok());
    for (const json& j : jobs->at("jobs")) out += j["id"].get<std::string>() + ":" +
                                                 j["status"].get<std::string>() + " ";
    const json nodes = cluster_->Nodes();
    for (const json& n : nodes["nodes"]) out += n["name"].get<std::string>() + " ";
    return out;
  }

  static void ExpectStoreUnavailable(const Status& s) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_EQ(s.reason(), "store_unavailable") << s.ToString();
    EXPECT_NE(s.message().find("store"), std::string::npos) << s.message();
  }

  std::string lease_;
  std::string job_;
};

TEST_F(StoreOutageTest, WithTheDatabaseGoneReadsAnswerFromTheLastGoodState) {
  const std::string before = View();
  ASSERT_NE(before.find(lease_), std::string::npos) << before;
  mode_ = FlakyStore::Mode::kDown;
  ExpectStoreUnavailable(cluster_->Allocate(bob_, {{"gpus", 1}}).status());
  EXPECT_EQ(View(), before);
  ExpectStoreUnavailable(cluster_->Release(alice_, lease_));
  EXPECT_EQ(View(), before);
  ExpectStoreUnavailable(cluster_->Heartbeat(node_, Heartbeat("a", 2)).status());
  ExpectStoreUnavailable(cluster_->Submit(alice_, Task({1})).status());
  ExpectStoreUnavailable(cluster_->Cancel(alice_, job_).status());
  EXPECT_FALSE(cluster_->Tick().ok());
  EXPECT_EQ(View(), before);
  auto job = cluster_->GetJob(job_);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["status"], "queued");
  EXPECT_EQ(Metric("flyt_cluster_store_up"), "0");
}

TEST_F(StoreOutageTest, AWriteThatCannotCommitLeavesNoTraceAndLaterWritesAreRefused) {
  const std::string before = View();
  mode_ = FlakyStore::Mode::kWritesFail;
  // The grant happens in memory, then the commit fails: no phantom lease.
  auto refused = cluster_->Allocate(bob_, {{"gpus", 1}});
  ExpectStoreUnavailable(refused.status());
  EXPECT_EQ(View(), before);
  ExpectStoreUnavailable(cluster_->Release(alice_, lease_));
  EXPECT_EQ(View(), before);
  EXPECT_EQ(cluster_->Jobs("", 100)->at("jobs").size(), 1u);
  EXPECT_EQ(Metric("flyt_cluster_store_up"), "0");
  EXPECT_NE(Metric("flyt_cluster_store_errors_total"), "0");

  // Back: the next write works, and the state is as it was.
  mode_ = FlakyStore::Mode::kOk;
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(Metric("flyt_cluster_store_up"), "1");
  EXPECT_EQ(Metric("flyt_cluster_store_outages_total"), "1");
  EXPECT_TRUE(cluster_->Release(alice_, lease_).ok());
  EXPECT_TRUE(LeaseIds().empty() || LeaseIds().count(lease_) == 0);
}

// The nodes cannot send heartbeats (the manager refuses them) and the clients cannot renew: the
// outage must not count against them. Nothing expires while the store is down; afterwards each
// node's silence is counted without the outage, and a lease whose TTL ran out meanwhile gets the
// grace to be renewed.
TEST_F(StoreOutageTest, NoLeaseIsReleasedBecauseOfTheOutage) {
  auto short_lease = cluster_->Allocate(bob_, {{"gpus", 1}, {"ttl_seconds", 30}});
  ASSERT_TRUE(short_lease.ok()) << short_lease.status().ToString();
  const std::string short_id = (*short_lease)["id"];
  clock_.Advance(std::chrono::seconds(5));
  mode_ = FlakyStore::Mode::kDown;
  EXPECT_FALSE(cluster_->Heartbeat(node_, Heartbeat("a", 2)).ok());
  for (int minute = 0; minute < 10; ++minute) {
    clock_.Advance(std::chrono::minutes(1));
    EXPECT_FALSE(cluster_->Tick().ok());
    // (The short lease's TTL has run out: it is not listed, but not released either.)
    EXPECT_EQ(LeaseIds().count(lease_), 1u) << "minute " << minute;
  }
  mode_ = FlakyStore::Mode::kOk;
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(LeaseIds(), (std::set<std::string>{lease_, short_id}));
  json nodes = cluster_->Nodes()["nodes"];
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0]["state"], "reachable");
  auto renewed = cluster_->Renew(bob_, short_id, {{"ttl_seconds", 600}});
  EXPECT_TRUE(renewed.ok()) << renewed.status().ToString();
  auto kinds = EventKinds();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "lease.expired"), 0);

  // Normal rules again: a node silent past unreachable_after + lease_grace loses its leases.
  clock_.Advance(config_.ledger.unreachable_after + config_.ledger.lease_grace +
                 std::chrono::seconds(1));
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_TRUE(LeaseIds().empty());
}

TEST_F(StoreOutageTest, TheStoreComingBackBringsWhatOthersWroteMeanwhile) {
  mode_ = FlakyStore::Mode::kDown;
  EXPECT_FALSE(cluster_->Tick().ok());
  // Another replica (here: a second cluster on the same file) writes while this one is cut off.
  {
    auto store = store::Store::Open(config_.store);
    ASSERT_TRUE(store.ok());
    Cluster other(std::move(store).value(), config_, clock_);
    ASSERT_TRUE(other.Load().ok());
    ASSERT_TRUE(other.Release(alice_, lease_).ok());
  }
  mode_ = FlakyStore::Mode::kOk;
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(LeaseIds().count(lease_), 0u);
  // The waiting job got the freed GPU.
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ((*cluster_->GetJob(job_))["status"], "running");
}

// A refused allocation first runs expiry (so that GPUs past their TTL can be granted): the leases
// it dropped from memory are dropped from the store in the same commit, with their events, not
// left behind in a rolled-back transaction (memory without the lease, the store with it).
TEST_F(StoreOutageTest, ARefusedAllocationCommitsTheExpiryItRan) {
  auto short_lease = cluster_->Allocate(bob_, {{"gpus", 1}, {"ttl_seconds", 30}});
  ASSERT_TRUE(short_lease.ok()) << short_lease.status().ToString();
  const std::string short_id = (*short_lease)["id"];
  clock_.Advance(std::chrono::seconds(31));
  // Two GPUs: alice holds one, bob's lease has run out; two are asked for.
  auto refused = cluster_->Allocate(bob_, {{"gpus", 2}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "insufficient_gpus") << refused.status().ToString();
  EXPECT_EQ(LeaseIds(), std::set<std::string>{lease_});
  auto kinds = EventKinds();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "lease.expired"), 1);
  // The store agrees: a restarted manager has the same leases, and bob's GPU is free.
  Open();
  EXPECT_EQ(LeaseIds(), std::set<std::string>{lease_});
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 2)).ok());
  auto granted = cluster_->Allocate(bob_, {{"gpus", 1}});
  EXPECT_TRUE(granted.ok()) << granted.status().ToString();
}

// Issue 13: garbage over the GPU claims left /healthz at 200 while every allocation failed,
// unlogged. Damage found by a transaction or by the periodic check is in /healthz and /metrics
// (the message without where the store is), and clears when a check finds the file sound.
TEST_F(StoreOutageTest, DamageIsReportedInHealthAndMetrics) {
  EXPECT_EQ(cluster_->StoreHealth()["state"], "ok");
  EXPECT_EQ(Metric("flyt_cluster_store_healthy"), "1");
  const std::string before = View();
  mode_ = FlakyStore::Mode::kDamaged;
  auto refused = cluster_->Allocate(bob_, {{"gpus", 1}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(View(), before);
  json health = cluster_->StoreHealth();
  EXPECT_EQ(health["state"], "damaged") << health.dump();
  const std::string message = health.value("message", "");
  EXPECT_NE(message.find("malformed"), std::string::npos) << message;
  EXPECT_EQ(message.find(dir_.string()), std::string::npos) << message;
  EXPECT_EQ(Metric("flyt_cluster_store_healthy"), "0");
  EXPECT_EQ(Metric("flyt_cluster_store_error_kinds_total{kind=\"damaged\"}"), "1");

  // The periodic check finds the file sound again...
  mode_ = FlakyStore::Mode::kOk;
  clock_.Advance(config_.store_check_interval + std::chrono::seconds(1));
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_EQ(cluster_->StoreHealth()["state"], "ok");
  EXPECT_EQ(Metric("flyt_cluster_store_healthy"), "1");
  // ... or damaged, with what it found, before any transaction trips over it.
  mode_ = FlakyStore::Mode::kDamaged;
  clock_.Advance(config_.store_check_interval + std::chrono::seconds(1));
  (void)cluster_->Tick();
  health = cluster_->StoreHealth();
  EXPECT_EQ(health["state"], "damaged") << health.dump();
  EXPECT_NE(health.value("message", "").find("quick_check"), std::string::npos) << health.dump();
}

}  // namespace
}  // namespace flyt::cluster
