#include "sched/queue.h"

#include <gtest/gtest.h>

namespace flyt::sched {
namespace {

constexpr uint64_t kOneGiB = 1ULL << 30;

std::vector<GpuState> IdleGpus(int n) {
  std::vector<GpuState> out;
  for (int i = 0; i < n; ++i) {
    GpuState g;
    g.index = static_cast<uint32_t>(i);
    g.uuid = "GPU-" + std::to_string(i);
    g.name = "NVIDIA H100 80GB HBM3";
    g.memory_total_bytes = 80 * kOneGiB;
    g.memory_free_bytes = 80 * kOneGiB;
    g.utilization_percent = 0;
    out.push_back(g);
  }
  return out;
}

class QueueTest : public ::testing::Test {
 protected:
  QueuedJob Job(const std::string& id, int gpus, int priority = 0) {
    QueuedJob j;
    j.id = id;
    j.priority = priority;
    j.order = ++order_;
    j.request.gpus = gpus;
    j.request.owner = id;
    j.submitted_at = clock_.WallNow();
    j.deadline = j.submitted_at + std::chrono::seconds(300);
    return j;
  }
  std::vector<std::string> Started(const SchedulePass& p) {
    std::vector<std::string> ids;
    for (const auto& s : p.started) ids.push_back(s.job_id);
    return ids;
  }

  FakeClock clock_;
  Ledger ledger_{clock_};
  JobQueue queue_{QueueOptions{std::chrono::seconds(0)}};
  int64_t order_ = 0;
};

TEST_F(QueueTest, PriorityThenFifo) {
  ledger_.UpdateNode("a", IdleGpus(2));
  queue_.Add(Job("first", 1));
  queue_.Add(Job("second", 1));
  queue_.Add(Job("urgent", 1, /*priority=*/5));
  auto pass = queue_.Schedule(ledger_, clock_.WallNow());
  EXPECT_EQ(Started(pass), (std::vector<std::string>{"urgent", "first"}));
  ASSERT_EQ(queue_.size(), 1u);
  EXPECT_EQ(queue_.Ordered()[0].id, "second");
  EXPECT_NE(queue_.Ordered()[0].last_reason.find("a: 0 available, 2 leased"), std::string::npos)
      << queue_.Ordered()[0].last_reason;
}

TEST_F(QueueTest, SmallerJobsBackfillAroundOneThatDoesNotFit) {
  ledger_.UpdateNode("a", IdleGpus(4));
  queue_.Add(Job("big", 8));
  queue_.Add(Job("small", 2));
  auto pass = queue_.Schedule(ledger_, clock_.WallNow());
  EXPECT_EQ(Started(pass), (std::vector<std::string>{"small"}));
  EXPECT_TRUE(queue_.Contains("big"));
}

TEST_F(QueueTest, AJobWaitingLongerThanTheHoldStopsBackfill) {
  JobQueue held{QueueOptions{std::chrono::seconds(60)}};
  ledger_.UpdateNode("a", IdleGpus(4));
  auto big = Job("big", 4);
  auto lease = ledger_.Allocate(big.request);  // something else holds 2 of the 4 GPUs
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(ledger_.Release(lease->id).ok());
  AllocationRequest two;
  two.gpus = 2;
  auto other = ledger_.Allocate(two);
  ASSERT_TRUE(other.ok());
  held.Add(big);
  clock_.Advance(std::chrono::seconds(61));
  ledger_.UpdateNode("a", IdleGpus(4));  // a heartbeat: the node is still there
  held.Add(Job("small", 1));
  auto pass = held.Schedule(ledger_, clock_.WallNow());
  EXPECT_TRUE(pass.started.empty());
  ASSERT_TRUE(ledger_.Release(other->id).ok());
  pass = held.Schedule(ledger_, clock_.WallNow());
  EXPECT_EQ(Started(pass), (std::vector<std::string>{"big"}));
}

TEST_F(QueueTest, TimedOutJobsLeaveWithTheirLastReason) {
  ledger_.UpdateNode("a", IdleGpus(1));
  queue_.Add(Job("wants-two", 2));
  auto pass = queue_.Schedule(ledger_, clock_.WallNow());
  EXPECT_TRUE(pass.started.empty());
  EXPECT_TRUE(pass.timed_out.empty());
  ASSERT_TRUE(queue_.NextDeadline().has_value());
  EXPECT_EQ(*queue_.NextDeadline(), clock_.WallNow() + std::chrono::seconds(300));
  clock_.Advance(std::chrono::seconds(300));
  ledger_.UpdateNode("a", IdleGpus(1));
  pass = queue_.Schedule(ledger_, clock_.WallNow());
  ASSERT_EQ(pass.timed_out.size(), 1u);
  EXPECT_EQ(pass.timed_out[0].job_id, "wants-two");
  EXPECT_EQ(pass.timed_out[0].waited, std::chrono::seconds(300));
  EXPECT_NE(pass.timed_out[0].reason.find("no 2 GPU(s) on one node"), std::string::npos);
  EXPECT_EQ(queue_.size(), 0u);
  EXPECT_FALSE(queue_.NextDeadline().has_value());
}

TEST_F(QueueTest, IdenticalRefusedRequestsAreTriedOncePerPass) {
  ledger_.UpdateNode("a", IdleGpus(2));
  for (int i = 0; i < 100; ++i) queue_.Add(Job("j" + std::to_string(i), 4));
  queue_.Add(Job("fits", 1));
  auto pass = queue_.Schedule(ledger_, clock_.WallNow());
  EXPECT_EQ(pass.tried, 2u);
  EXPECT_EQ(Started(pass), (std::vector<std::string>{"fits"}));
  for (const QueuedJob& j : queue_.Ordered()) EXPECT_FALSE(j.last_reason.empty()) << j.id;
}

TEST_F(QueueTest, RequestsHarderThanARefusedOneAreNotTried) {
  ledger_.UpdateNode("a", IdleGpus(2));
  auto small = Job("needs-3", 3);
  queue_.Add(small);
  for (int i = 0; i < 50; ++i) {
    auto j = Job("bigger" + std::to_string(i), 3 + i % 4);
    j.request.min_free_memory_bytes = static_cast<uint64_t>(i) * kOneGiB;
    queue_.Add(j);
  }
  auto other_model = Job("other-model", 4);
  other_model.request.gpu_model = "A100";  // not comparable: tried on its own
  queue_.Add(other_model);
  queue_.Add(Job("fits", 2));
  auto pass = queue_.Schedule(ledger_, clock_.WallNow());
  EXPECT_EQ(pass.tried, 3u);
  EXPECT_EQ(Started(pass), (std::vector<std::string>{"fits"}));
}

TEST_F(QueueTest, CancelRemoves) {
  queue_.Add(Job("x", 1));
  EXPECT_TRUE(queue_.Remove("x"));
  EXPECT_FALSE(queue_.Remove("x"));
  EXPECT_EQ(queue_.size(), 0u);
}

}  // namespace
}  // namespace flyt::sched
