// Keeping the job list bounded: finished jobs are pruned by age and count (from memory and from
// the store), an owner may have only so many experiments queued, and the [jobs] settings that
// say how much. Also: a monitoring session opened while its job ends is closed again.
#include <gtest/gtest.h>
#include <httplib.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "cluster/cluster_testing.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;
using test::Heartbeat;
using test::Task;

class RetentionTest : public test::ClusterFixture {
 protected:
  // Submits a task no node can hold: its job fails at once. Returns the job's id.
  std::string FinishedJob() {
    auto r = cluster_->Submit(alice_, Task({8}));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return "";
    EXPECT_EQ((*r)["jobs"][0]["status"], "failed");
    return (*r)["jobs"][0]["id"];
  }
  bool Known(const std::string& id) { return cluster_->GetJob(id).ok(); }
};

TEST_F(RetentionTest, FinishedJobsGoAfterKeepFinishedForAndStayGoneAfterARestart) {
  config_.keep_finished_for = std::chrono::hours(1);
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 2)).ok());
  const std::string old_failed = FinishedJob();
  auto running = cluster_->Submit(alice_, Task({1}, {{"lease_ttl_seconds", 86400}}));
  ASSERT_TRUE(running.ok());
  auto queued = cluster_->Submit(alice_, Task({2}, {{"timeout_seconds", 86400}}));
  ASSERT_TRUE(queued.ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  const std::string running_id = (*running)["jobs"][0]["id"];
  const std::string queued_id = (*queued)["jobs"][0]["id"];
  ASSERT_EQ((*cluster_->GetJob(running_id))["status"], "running");

  clock_.Advance(std::chrono::minutes(50));
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 2)).ok());
  const std::string newer_failed = FinishedJob();
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_TRUE(Known(old_failed)) << "not an hour old yet";

  clock_.Advance(std::chrono::minutes(11));
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 2)).ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  EXPECT_FALSE(Known(old_failed));
  EXPECT_TRUE(Known(newer_failed));
  EXPECT_TRUE(Known(running_id));
  EXPECT_TRUE(Known(queued_id));
  EXPECT_EQ(cluster_->Jobs("", 100)->at("total"), 3);

  Open();  // a restart reads the store: the pruned job is gone from there too
  EXPECT_FALSE(Known(old_failed));
  EXPECT_TRUE(Known(newer_failed));
  EXPECT_TRUE(Known(running_id));
  EXPECT_TRUE(Known(queued_id));
}

TEST_F(RetentionTest, OnlyTheNewestKeepFinishedMaxFinishedJobsStay) {
  config_.keep_finished_max = 2;
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 1)).ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(FinishedJob());
    clock_.Advance(std::chrono::seconds(1));
  }
  auto queued = cluster_->Submit(alice_, Task({1}, {{"timeout_seconds", 86400}}));
  ASSERT_TRUE(queued.ok());
  ASSERT_TRUE(cluster_->Tick().ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Known(ids[i]), i >= 3) << i;
  Open();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Known(ids[i]), i >= 3) << i;
  EXPECT_TRUE(Known((*queued)["jobs"][0]["id"]));
}

TEST_F(RetentionTest, AnOwnerMayHaveOnlyMaxQueuedPerOwnerExperimentsWaiting) {
  config_.max_queued_per_owner = 3;
  Open();
  // No node yet: every experiment waits.
  auto first = cluster_->Submit(alice_, Task({1, 2}));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto refused = cluster_->Submit(alice_, Task({1, 2}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().reason(), "too_many_queued");
  EXPECT_NE(refused.status().message().find("alice has 2 experiment(s) queued"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("max_queued_per_owner"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(cluster_->Jobs("queued", 100)->at("total"), 2) << "the refused submission stored nothing";
  // Someone else's queue is their own; an admin submitting for alice counts against alice.
  EXPECT_TRUE(cluster_->Submit(bob_, Task({1, 2, 4})).ok());
  auto for_alice = cluster_->Submit(admin_, Task({1, 2}, {{"owner", "alice"}}));
  EXPECT_EQ(for_alice.status().reason(), "too_many_queued");
  EXPECT_TRUE(cluster_->Submit(alice_, Task({1})).ok());  // exactly up to the cap
  // A cancelled experiment no longer counts.
  ASSERT_TRUE(cluster_->Cancel(alice_, (*first)["jobs"][0]["id"]).ok());
  EXPECT_TRUE(cluster_->Submit(alice_, Task({1})).ok());
}

TEST(JobsConfigTest, TheJobsSectionIsParsedAndChecked) {
  auto c = ParseClusterConfig(
      "[jobs]\nkeep_finished_for = \"36h\"\nkeep_finished_max = 5\nmax_queued_per_owner = 0\n",
      "cm.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->keep_finished_for, std::chrono::hours(36));
  EXPECT_EQ(c->keep_finished_max, 5u);
  EXPECT_EQ(c->max_queued_per_owner, 0u);
  for (const char* bad : {"\"7\"", "\"7y\"", "\"-1d\"", "\"d\"", "7", "\"99999999w\""}) {
    auto r = ParseClusterConfig(std::string("[jobs]\nkeep_finished_for = ") + bad + "\n", "cm.toml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("cm.toml:2: jobs.keep_finished_for"), std::string::npos)
        << r.status().message();
  }
  EXPECT_FALSE(ParseClusterConfig("[jobs]\nkeep_finished_max = -1\n", "cm.toml").ok());
  EXPECT_FALSE(ParseClusterConfig("[jobs]\nkeep = 1\n", "cm.toml").ok());
  EXPECT_EQ(ParseDuration("0", std::chrono::hours(1)).value(), std::chrono::seconds(0));
  EXPECT_EQ(ParseDuration("90s", std::chrono::hours(1)).value(), std::chrono::seconds(90));
  EXPECT_EQ(ParseDuration("2w", std::chrono::hours(24 * 365)).value(), std::chrono::hours(336));

  auto shipped = LoadClusterConfig(std::string(FLYT_SOURCE_DIR) + "/configs/cluster-manager.toml");
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  ClusterConfig d;
  EXPECT_EQ(shipped->keep_finished_for, d.keep_finished_for);
  EXPECT_EQ(shipped->keep_finished_max, d.keep_finished_max);
  EXPECT_EQ(shipped->max_queued_per_owner, d.max_queued_per_owner);
}

// A node manager that answers the monitoring calls, holding each "open" until the test lets it
// go, and that remembers which sessions are still open.
class FakeNode {
 public:
  FakeNode() {
    server_.Post("/api/v1/monitoring/sessions", [this](const httplib::Request&,
                                                       httplib::Response& res) {
      std::unique_lock lock(mu_);
      ++opens_waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return release_opens_; });
      const std::string id = "s" + std::to_string(++next_);
      open_.insert(id);
      res.set_content(json{{"id", id}}.dump(), "application/json");
    });
    server_.Delete(R"(/api/v1/monitoring/sessions/(\w+))", [this](const httplib::Request& req,
                                                                  httplib::Response& res) {
      std::scoped_lock lock(mu_);
      open_.erase(req.matches[1].str());
      ++closes_;
      cv_.notify_all();
      res.set_content(R"({"sample_count":1,"gpu_stats":{}})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeNode() {
    ReleaseOpens();
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void WaitForOpen() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return opens_waiting_ > 0; });
  }
  void ReleaseOpens() {
    std::scoped_lock lock(mu_);
    release_opens_ = true;
    cv_.notify_all();
  }
  // Waits (bounded) until no session is open and at least one was closed.
  bool AllClosed() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20),
                        [&] { return open_.empty() && next_ > 0 && closes_ > 0; });
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int opens_waiting_ = 0;
  bool release_opens_ = false;
  int next_ = 0;
  int closes_ = 0;
  std::set<std::string> open_;
};

// The job ends (its lease released) while the node is still opening its session: when the open
// returns, the manager closes that session again instead of leaving it open on the node.
TEST_F(RetentionTest, ASessionOpenedWhileItsJobEndedIsClosedAgain) {
  FakeNode node;
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 1, node.url())).ok());
  auto job = cluster_->Submit(alice_, Task({1}));
  ASSERT_TRUE(job.ok());
  const std::string id = (*job)["jobs"][0]["id"];
  cluster_->Start();
  ASSERT_TRUE(cluster_->Tick().ok());
  node.WaitForOpen();
  auto completed = cluster_->Complete(alice_, id, {{"status", "completed"}});
  ASSERT_TRUE(completed.ok()) << completed.status().ToString();
  node.ReleaseOpens();
  EXPECT_TRUE(node.AllClosed()) << "the session opened for the ended job is still open";
  cluster_->Stop();
}

// The narrower window: the node worker records the session after Complete closed what it saw
// (nothing) and before it ends the job. Ending the job must close that session too.
TEST_F(RetentionTest, ASessionRecordedWhileItsJobIsBeingCompletedIsClosed) {
  FakeNode node;
  Open();
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 1, node.url())).ok());
  auto job = cluster_->Submit(alice_, Task({1}));
  ASSERT_TRUE(job.ok());
  const std::string id = (*job)["jobs"][0]["id"];
  bool recorded = false;
  cluster_->SetCompleteHookForTest([&] {
    node.ReleaseOpens();
    for (int i = 0; i < 2000 && !recorded; ++i) {
      auto j = cluster_->GetJob(id);
      recorded = j.ok() && (*j)["monitoring_session"].is_string();
      if (!recorded) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  cluster_->Start();
  ASSERT_TRUE(cluster_->Tick().ok());
  node.WaitForOpen();
  auto completed = cluster_->Complete(alice_, id, {{"status", "completed"}});
  ASSERT_TRUE(completed.ok()) << completed.status().ToString();
  ASSERT_TRUE(recorded) << "the worker never recorded the session";
  EXPECT_TRUE(node.AllClosed()) << "the session recorded during Complete is still open";
  cluster_->Stop();
}

}  // namespace
}  // namespace flyt::cluster
