#include "ctl/api_client.h"

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
            "cannot list the jobs: the cluster manager at http://m:1 failed: bad gateway");
  Status down(StatusCode::kUnavailable,
              "http://m:1/api/v1/jobs: HTTP 503: the store is unavailable");
  EXPECT_EQ(ExplainError(down, "cannot list the jobs", "http://m:1"),
            "cannot list the jobs: the cluster manager at http://m:1 is unavailable: the store "
            "is unavailable");
}

TEST(ClusterCliTest, ANodeManagersErrorsNameTheNodeAndItsFlag) {
  Status down(StatusCode::kUnavailable,
              "cannot reach the node manager at http://127.0.0.1:1 (Connection error: is it "
              "running, and is the address right?)");
  std::string line =
      ExplainError(down, "cannot read the GPUs", "http://127.0.0.1:1", Peer::kNodeManager);
  EXPECT_NE(line.find("cannot reach the node manager at http://127.0.0.1:1"), std::string::npos);
  EXPECT_NE(line.find("--node URL"), std::string::npos);
  EXPECT_EQ(line.find("FLYT_CLUSTER_MANAGER"), std::string::npos);
  Status unknown(StatusCode::kFailedPrecondition,
                 "http://n:1/api/v1/gpus: HTTP 401: missing or unknown bearer token");
  EXPECT_NE(ExplainError(unknown, "cannot read the GPUs", "http://n:1", Peer::kNodeManager)
                .find("the node manager at http://n:1 does not accept the token"),
            std::string::npos);
}

TEST(ClusterCliTest, NoErrorLineCarriesTheHttpStatus) {
  for (int code : {400, 401, 403, 404, 409, 413, 429, 500, 502, 503}) {
    Status s(StatusCode::kUnavailable,
             "http://m:1/api/v1/x: HTTP " + std::to_string(code) + ": it went wrong");
    std::string line = ExplainError(s, "cannot do x", "http://m:1");
    EXPECT_EQ(line.find("HTTP"), std::string::npos) << line;
    EXPECT_NE(line.find("it went wrong"), std::string::npos) << line;
  }
}

TEST(SourceTest, NodeThenServerThenTheEnvironmentThenThisMachine) {
  auto node = ChooseSource("http://n:1", "", "http://env:2");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->kind, SourceKind::kNodeManager);
  EXPECT_EQ(node->url, "http://n:1");
  auto server = ChooseSource("", "http://s:3", "http://env:2");
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(server->kind, SourceKind::kClusterManager);
  EXPECT_EQ(server->url, "http://s:3");
  auto env = ChooseSource("", "", "http://env:2");
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->kind, SourceKind::kClusterManager);
  EXPECT_EQ(env->url, "http://env:2");
  for (const char* none : {static_cast<const char*>(nullptr), ""}) {
    auto local = ChooseSource("", "", none);
    ASSERT_TRUE(local.ok());
    EXPECT_EQ(local->kind, SourceKind::kLocal);
    EXPECT_EQ(local->url, "");
  }
  auto both = ChooseSource("http://n:1", "http://s:3", nullptr);
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ExitCode(both.status()), 1);  // the caller makes it a usage error (2)
}

TEST(SourceTest, TheFirstLineNamesTheSource) {
  EXPECT_EQ(SourceLine({SourceKind::kClusterManager, "http://127.0.0.1:12400"}),
            "Source: cluster manager http://127.0.0.1:12400\n");
  EXPECT_EQ(SourceLine({SourceKind::kNodeManager, "http://n:1"}),
            "Source: node manager http://n:1\n");
  EXPECT_EQ(SourceLine({}, "NVML"), "Source: local machine (NVML)\n");
  EXPECT_EQ(SourceLine({}), "Source: local machine\n");
}

// What JsonClient makes of an error answer: the HTTP status in the message, the body's "code" as
// the reason where the server sent one.
Status HttpFailure(int http, std::string_view code = "") {
  Status s(StatusCode::kUnavailable,
           "http://m:1/api/v1/allocations: HTTP " + std::to_string(http) + ": refused");
  return code.empty() ? s : s.WithReason(std::string(code));
}

TEST(ExitCodeTest, TheErrorCodeDecidesWhereTheServerSentOne) {
  EXPECT_EQ(ExitCode(HttpFailure(409, "insufficient_gpus")), 6);
  EXPECT_EQ(ExitCode(HttpFailure(409, "already_ended")), 7);
  EXPECT_EQ(ExitCode(HttpFailure(409, "resource_exhausted")), 6);
  EXPECT_EQ(ExitCode(HttpFailure(429, "resource_exhausted")), 10);
  EXPECT_EQ(ExitCode(HttpFailure(503, "timeout")), 9);
  EXPECT_EQ(ExitCode(HttpFailure(405, "method_not_allowed")), 1);
  EXPECT_EQ(ExitCode(HttpFailure(409, "never_fits")), 8);
  EXPECT_EQ(ExitCode(HttpFailure(409, "already_exists")), 1);
  EXPECT_EQ(ExitCode(HttpFailure(409, "conflict")), 1);
  EXPECT_EQ(ExitCode(HttpFailure(400, "invalid_argument")), 2);
  EXPECT_EQ(ExitCode(HttpFailure(413, "payload_too_large")), 2);
  EXPECT_EQ(ExitCode(HttpFailure(401, "unauthenticated")), 5);
  EXPECT_EQ(ExitCode(HttpFailure(403, "permission_denied")), 5);
  EXPECT_EQ(ExitCode(HttpFailure(404, "not_found")), 4);
  EXPECT_EQ(ExitCode(HttpFailure(503, "store_unavailable")), 9);
  EXPECT_EQ(ExitCode(HttpFailure(503, "unavailable")), 9);
  EXPECT_EQ(ExitCode(HttpFailure(429, "too_many_queued")), 10);
  EXPECT_EQ(ExitCode(HttpFailure(429, "rate_limited")), 9);
  EXPECT_EQ(ExitCode(HttpFailure(500, "internal")), 1);
  EXPECT_EQ(ExitCode(HttpFailure(405, "method_not_allowed")), 1);
  EXPECT_EQ(ExitCode(HttpFailure(418, "something_new")), 1);
  // A remote lease whose GPU server failed is over, like an ended one: get a new lease.
  EXPECT_EQ(ExitCode(HttpFailure(409, "lease_failed")), 7);
}

TEST(ExitCodeTest, TheServersOwnWordsComeWithoutUrlAndStatus) {
  Status refused(StatusCode::kUnavailable,
                 "http://m:1/api/v1/remote-leases: HTTP 503: node-b did not start the GPU server: "
                 "exited with status 1");
  EXPECT_EQ(ApiMessage(refused), "node-b did not start the GPU server: exited with status 1");
  Status down(StatusCode::kUnavailable, "cannot reach the cluster manager at http://m:1 (x)");
  EXPECT_EQ(ApiMessage(down), down.message());
}

TEST(ExitCodeTest, WithoutACodeTheHttpStatusDecides) {
  const std::map<int, int> expected = {{400, 2}, {401, 5},  {403, 5}, {404, 4}, {409, 1},
                                       {413, 2}, {429, 10}, {503, 9}, {500, 1}, {502, 1}};
  for (const auto& [http, exit_code] : expected) {
    EXPECT_EQ(ExitCode(HttpFailure(http)), exit_code) << http;
  }
}

TEST(ExitCodeTest, AnUnreachableServerIsThreeAndOtherLocalErrorsOne) {
  Status down(StatusCode::kUnavailable,
              "cannot reach the cluster manager at http://127.0.0.1:1 (Connection error: is it "
              "running, and is the address right?)");
  EXPECT_EQ(ApiReason(down), "unreachable");
  EXPECT_EQ(ExitCode(down), 3);
  EXPECT_EQ(ExitCode(down.WithReason("unavailable")), 3);  // no answer is not a 503
  EXPECT_EQ(ExitCode(Unavailable("NVML unavailable: libnvidia-ml.so.1 not found")), 1);
  EXPECT_EQ(ExitCode(NotFound("task.json: no such file")), 1);
  EXPECT_EQ(ExitCode(Status::Ok()), 0);
}

TEST(ExitCodeTest, ExplainingAnErrorKeepsItsExitCode) {
  for (int http : {400, 401, 403, 404, 409, 413, 429, 500, 503}) {
    Status s = HttpFailure(http);
    Status explained = Explained(s, "cannot allocate 2 GPU(s)", "http://m:1");
    EXPECT_EQ(ExitCode(explained), ExitCode(s)) << http;
    EXPECT_EQ(explained.message().find("HTTP"), std::string::npos) << explained.message();
  }
  Status fits = HttpFailure(409, "never_fits");
  EXPECT_EQ(ExitCode(Explained(fits, "cannot allocate 64 GPU(s)", "http://m:1")), 8);
  Status down(StatusCode::kUnavailable, "cannot reach the cluster manager at http://m:1 (x)");
  EXPECT_EQ(ExitCode(Explained(down, "", "http://m:1")), 3);
}

TEST(ExitCodeTest, TheHelpListsEveryCode) {
  const std::string help = ExitCodesHelp();
  for (int code = 0; code <= 10; ++code) {
    EXPECT_NE(help.find(" " + std::to_string(code) + " "), std::string::npos) << code;
  }
}

TEST(AvailableTest, FreeGpusThatMeetTheRequestBestScoreFirst) {
  json answer = {{"gpus",
                  {{{"node", "a"},
                    {"index", 0},
                    {"allocation_state", "free"},
                    {"score", 0.5},
                    {"memory_free_bytes", 40960.0 * 1048576},
                    {"gpu_util_percent", 10},
                    {"reserved_memory_mb", 0}},
                   {{"node", "a"},
                    {"index", 1},
                    {"allocation_state", "leased"},
                    {"score", 0.9},
                    {"memory_free_bytes", 81920.0 * 1048576},
                    {"gpu_util_percent", 0}},
                   {{"node", "b"},
                    {"index", 0},
                    {"allocation_state", "free"},
                    {"score", 0.8},
                    {"memory_free_bytes", 81920.0 * 1048576},
                    {"gpu_util_percent", 0}},
                   {{"node", "b"},
                    {"index", 1},
                    {"allocation_state", "free"},
                    {"score", 0.7},
                    {"memory_free_bytes", 81920.0 * 1048576},
                    {"gpu_util_percent", 90}},
                   {{"node", "c"},
                    {"index", 0},
                    {"allocation_state", "free"},
                    {"score", nullptr},
                    {"memory_free_bytes", nullptr},
                    {"gpu_util_percent", nullptr}}}}};
  auto names = [](const json& j) {
    std::string out;
    for (const json& g : j["gpus"]) {
      out += g["node"].get<std::string>() + std::to_string(g["index"].get<int>()) + " ";
    }
    return out;
  };
  EXPECT_EQ(names(AvailableClusterGpus(answer, 0, 100)), "b0 b1 a0 ");
  EXPECT_EQ(names(AvailableClusterGpus(answer, 50000, 100)), "b0 b1 ");
  EXPECT_EQ(names(AvailableClusterGpus(answer, 0, 50)), "b0 a0 ");
  EXPECT_EQ(names(AvailableClusterGpus(json::object(), 0, 100)), "");
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

TEST(ClusterCliTest, RemoteLeaseFlagsBecomeTheRequestBody) {
  RemoteLeaseFlags f;
  f.sm_count = 64;
  f.memory_mb = 40000;
  f.gpu_model = "H100";
  f.node = "node-b";
  f.client = "client-1";
  f.ttl_seconds = 120;
  f.labels = {"team=infer"};
  auto body = RemoteLeaseBody(f);
  ASSERT_TRUE(body.ok()) << body.status().message();
  EXPECT_EQ(*body, json::parse(R"({"sm_count":64,"memory_mb":40000,"gpu_model":"H100",
      "node":"node-b","client":"client-1","ttl_seconds":120,"labels":{"team":"infer"}})"));
  // Unset flags leave the manager's defaults alone (SMs: the manager's choice).
  RemoteLeaseFlags least;
  least.memory_mb = 1024;
  EXPECT_EQ(*RemoteLeaseBody(least), json::parse(R"({"memory_mb":1024})"));
  least.sm_percent = 25;
  EXPECT_EQ(*RemoteLeaseBody(least), json::parse(R"({"memory_mb":1024,"sm_percent":25})"));
  least.sm_count = 8;
  EXPECT_EQ(RemoteLeaseBody(least).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RemoteLeaseBody(RemoteLeaseFlags{}).status().code(), StatusCode::kInvalidArgument);
  f.labels = {"=x"};
  EXPECT_EQ(RemoteLeaseBody(f).status().message(), "--label '=x': expected KEY=VALUE");
}

TEST(ClusterCliTest, QueryValuesAreEncodedAndEmptyOnesLeftOut) {
  EXPECT_EQ(WithQuery("/api/v1/remote-leases", {{"node", ""}, {"client", ""}}),
            "/api/v1/remote-leases");
  EXPECT_EQ(WithQuery("/api/v1/remote-leases", {{"node", "node-b"}, {"client", ""}}),
            "/api/v1/remote-leases?node=node-b");
  EXPECT_EQ(WithQuery("/x", {{"node", ""}, {"client", "a b&c=d/é"}}),
            "/x?client=a%20b%26c%3Dd%2F%C3%A9");
  EXPECT_EQ(WithQuery("/x", {{"a", "1"}, {"b", "2"}}), "/x?a=1&b=2");
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
