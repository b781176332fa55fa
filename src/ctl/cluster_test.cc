#include "ctl/cluster.h"

#include <gtest/gtest.h>

#include <map>

namespace flyt::ctl {
namespace {

using nlohmann::json;

TEST(ClusterCliTest, ServerComesFromTheFlagThenTheEnvironmentThenTheDefault) {
  EXPECT_EQ(ClusterManagerUrl("http://a:1", "http://b:2"), "http://a:1");
  EXPECT_EQ(ClusterManagerUrl("", "http://b:2"), "http://b:2");
  EXPECT_EQ(ClusterManagerUrl("", ""), "http://127.0.0.1:12400");
  EXPECT_EQ(ClusterManagerUrl("", nullptr), "http://127.0.0.1:12400");
}

TEST(ClusterCliTest, IdsThatWouldChangeThePathAreRefused) {
  EXPECT_TRUE(CheckId("job-59bfe518acd6", "job").ok());
  EXPECT_TRUE(CheckId("lease-0b47b7271204", "lease").ok());
  for (const char* bad : {"", ".", "..", "../nodes", "a/b", "job?status=x", "a b", "job\033x"}) {
    Status s = CheckId(bad, "job");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().find('\033'), std::string::npos);
  }
  EXPECT_NE(CheckId("a/b", "lease").message().find("'a/b' is not a lease id"), std::string::npos);
}

TEST(ClusterCliTest, AConflictShowsTheManagersReasonsAfterWhatFailed) {
  Status refused(StatusCode::kResourceExhausted,
                 "http://127.0.0.1:18500/api/v1/allocations: HTTP 409: no 9 GPU(s) on one node "
                 "meet the request; node-a: 6 available, 2 leased");
  EXPECT_EQ(ExplainError(refused, "cannot allocate 9 GPU(s)", "http://127.0.0.1:18500"),
            "cannot allocate 9 GPU(s): no 9 GPU(s) on one node meet the request; node-a: 6 "
            "available, 2 leased");
}

TEST(ClusterCliTest, AnUnreachableManagerNamesTheUrlAndWhereItComesFrom) {
  Status down(StatusCode::kUnavailable,
              "cannot reach the cluster manager at http://127.0.0.1:1 (Connection error: is it "
              "running, and is the address right?)");
  std::string line = ExplainError(down, "cannot list the jobs", "http://127.0.0.1:1");
  EXPECT_NE(line.find("cannot reach the cluster manager at http://127.0.0.1:1"), std::string::npos);
  EXPECT_NE(line.find("--server URL or FLYT_CLUSTER_MANAGER"), std::string::npos);
}

TEST(ClusterCliTest, TokenAndPermissionErrorsSayWhatToDo) {
  Status unknown(StatusCode::kFailedPrecondition,
                 "http://m:1/api/v1/jobs: HTTP 401: missing or unknown bearer token");
  std::string line = ExplainError(unknown, "cannot list the jobs", "http://m:1");
  EXPECT_NE(line.find("does not accept the token"), std::string::npos);
  EXPECT_NE(line.find("--token or FLYT_TOKEN"), std::string::npos);
  Status denied(StatusCode::kPermissionDenied,
                "http://m:1/api/v1/allocations: HTTP 403: a viewer token may not POST "
                "/api/v1/allocations");
  EXPECT_EQ(ExplainError(denied, "cannot allocate 1 GPU(s)", "http://m:1"),
            "cannot allocate 1 GPU(s): not allowed: a viewer token may not POST "
            "/api/v1/allocations");
  Status wrong_server(StatusCode::kNotFound,
                      "http://m:1/api/v1/queue: HTTP 404: no such endpoint: /api/v1/queue");
  EXPECT_NE(ExplainError(wrong_server, "cannot show the queue", "http://m:1")
                .find("is http://m:1 a flyt cluster manager?"),
            std::string::npos);
  Status odd(StatusCode::kUnavailable, "http://m:1/api/v1/jobs: HTTP 502: bad gateway");
  EXPECT_EQ(ExplainError(odd, "cannot list the jobs", "http://m:1"),
            "cannot list the jobs: the cluster manager answered HTTP 502: bad gateway");
}

TEST(ClusterCliTest, AllocationFlagsBecomeTheRequestBody) {
  AllocationFlags f;
  f.gpus = 2;
  f.min_free_memory_mb = 40000;
  f.max_utilization_percent = 10;
  f.gpu_model = "H100";
  f.policy = "binpack";
  f.ttl_seconds = 600;
  f.shared = true;
  f.any_node = true;
  f.labels = {"team=infer", "purpose=a=b"};
  auto body = AllocationBody(f);
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_EQ(*body, json::parse(R"({"gpus":2,"min_free_memory_mb":40000.0,"max_utilization":10,
      "gpu_model":"H100","policy":"binpack","ttl_seconds":600,"exclusive":false,
      "same_node":false,"labels":{"team":"infer","purpose":"a=b"}})"));
  // Unset flags leave the manager's defaults alone.
  EXPECT_EQ(*AllocationBody(AllocationFlags{}), json::parse(R"({"gpus":1})"));
  f.labels = {"team"};
  EXPECT_EQ(AllocationBody(f).status().message(), "--label 'team': expected KEY=VALUE");
}

TEST(ClusterCliTest, SubmitFlagsOverrideTheTasksSchedulingAndKeepTheRest) {
  json task =
      json::parse(R"({"task_name":"t","scheduling":{"priority":1,"lease_ttl_seconds":60}})");
  SubmitFlags f;
  f.priority = 5;
  f.timeout_seconds = 30;
  f.gpu_model = "A100";
  auto body = SubmissionBody(task, f);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["scheduling"], json::parse(R"({"priority":5,"lease_ttl_seconds":60,
      "timeout_seconds":30,"gpu_model":"A100"})"));
  EXPECT_EQ((*body)["task_name"], "t");
  EXPECT_FALSE(SubmissionBody(json::parse(R"({"task_name":"t"})"), {})->contains("scheduling"));
  EXPECT_FALSE(SubmissionBody(json::array(), f).ok());
  EXPECT_FALSE(SubmissionBody(json::parse(R"({"scheduling":3})"), f).ok());
}

// A manager whose queue empties one job per poll; the clock moves only when the waiter sleeps.
struct FakeManager {
  std::vector<std::string> queue;
  std::map<std::string, std::string> final_status;
  int unreachable_polls = 0;
  int polls = 0;

  JobSource Source() {
    JobSource s;
    s.queued_ids = [this]() -> Result<std::vector<std::string>> {
      ++polls;
      if (unreachable_polls > 0) {
        --unreachable_polls;
        return Unavailable("cannot reach the cluster manager at http://m:1 (Connection error)");
      }
      std::vector<std::string> now = queue;
      if (!queue.empty()) queue.erase(queue.begin());  // the head starts before the next poll
      return now;
    };
    s.job = [this](const std::string& id) -> Result<json> {
      if (!final_status.count(id)) return NotFound("no job " + id);
      return json{{"id", id}, {"status", final_status[id]}};
    };
    return s;
  }
};

TEST(ClusterCliTest, WaitingEndsWhenEveryJobHasLeftTheQueue) {
  FakeClock clock;
  FakeManager m;
  m.queue = {"j1", "j2", "j3"};
  m.final_status = {{"j1", "running"}, {"j2", "failed"}, {"j3", "completed"}};
  std::vector<std::string> seen;
  auto r = WaitUntilPlaced(
      {"j1", "j2", "j3"}, m.Source(), clock, [&](std::chrono::milliseconds d) { clock.Advance(d); },
      {}, [&](const json& job) { seen.push_back(job["id"].get<std::string>()); });
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(seen, (std::vector<std::string>{"j1", "j2", "j3"}));  // each once, as it left
  EXPECT_EQ(JobStatus(r->jobs[1]), "failed");
  EXPECT_FALSE(JobSucceeded(r->jobs[1]));
  EXPECT_TRUE(JobSucceeded(r->jobs[0]));
  EXPECT_TRUE(JobSucceeded(r->jobs[2]));
}

TEST(ClusterCliTest, WaitingGivesUpAtItsTimeoutAndSaysWhichStillWait) {
  FakeClock clock;
  FakeManager m;
  m.queue = {"j1", "j2", "j3", "j4", "j5", "j6", "j7", "j8"};
  m.final_status = {{"j8", "running"}};
  WaitOptions o;
  o.timeout = std::chrono::seconds(1);
  auto r = WaitUntilPlaced(
      {"j8"}, m.Source(), clock, [&](std::chrono::milliseconds d) { clock.Advance(d); }, o,
      [](const json&) {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(JobStatus(r->jobs[0]), "queued");
  EXPECT_EQ(m.polls, 3);  // at 0, 0.5 and 1 s
}

TEST(ClusterCliTest, WaitingRidesOutAShortOutageButNotALongOne) {
  FakeClock clock;
  FakeManager m;
  m.queue = {"j1"};
  m.final_status = {{"j1", "running"}};
  m.unreachable_polls = 4;  // 2 s
  auto sleep = [&](std::chrono::milliseconds d) { clock.Advance(d); };
  auto r = WaitUntilPlaced({"j1"}, m.Source(), clock, sleep, {}, [](const json&) {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(JobStatus(r->jobs[0]), "running");

  FakeManager gone;
  gone.queue = {"j1"};
  gone.unreachable_polls = 1000;
  WaitOptions o;
  o.unreachable_grace = std::chrono::seconds(5);
  r = WaitUntilPlaced({"j1"}, gone.Source(), clock, sleep, o, [](const json&) {});
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot reach"), std::string::npos);
}

TEST(ClusterCliTest, OtherErrorsEndTheWaitAtOnce) {
  FakeClock clock;
  FakeManager m;
  m.queue = {};
  auto r = WaitUntilPlaced(
      {"j-gone"}, m.Source(), clock, [&](std::chrono::milliseconds d) { clock.Advance(d); }, {},
      [](const json&) {});
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace flyt::ctl
