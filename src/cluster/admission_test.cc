// The cluster manager's admission (issue 32, point 6): which requests the priority lane serves
// and which bucket each request counts against, and the [http] keys that set the rates.
#include "cluster/admission.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cluster/cluster.h"
#include "common/clock.h"
#include "common/rate_limit.h"

namespace flyt::cluster {
namespace {

constexpr char kConfig[] = R"(
[manager]
var_dir = "/nonexistent-flyt-test"
[auth]
tokens = [
  { name = "ops", token = "admin-token-0000000000", role = "admin" },
  { name = "nodes", token = "node-token-00000000000", role = "node" },
  { name = "alice", token = "alice-token-0000000000", role = "client" },
  { name = "bob", token = "bob-token-000000000000", role = "client" },
  { name = "grafana", token = "viewer-token-000000000", role = "viewer" },
]
[http]
rate_per_second = 2
rate_burst = 3
[http.role_rates.admin]
rate_per_second = 50
)";

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = ParseClusterConfig(kConfig, "cm.toml");
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = *config;
    auto built = Auth::Build(config_, "");
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    auth_ = std::move(built->auth);
  }
  http::Admission AdmitAs(std::optional<std::string_view> token, std::string_view method = "GET",
                          std::string_view path = "/api/v1/gpus",
                          std::string_view from = "127.0.0.9") {
    http::RequestHead head;
    head.method = method;
    head.path = path;
    head.peer_ip = from;
    head.bearer_token = token;
    return Admit(auth_, config_.rate_limits, head);
  }

  ClusterConfig config_;
  Auth auth_;
};

TEST_F(AdmissionTest, TheConfigSetsEachRolesRate) {
  const auto& l = config_.rate_limits;
  EXPECT_EQ(l.client.rate_per_second, 2);
  EXPECT_EQ(l.client.burst, 3);
  EXPECT_EQ(l.viewer.rate_per_second, 2);
  EXPECT_EQ(l.anonymous.rate_per_second, 2);
  EXPECT_EQ(l.admin.rate_per_second, 50);
  // The defaults: viewer, client and anonymous limited, admin not.
  auto d = ParseClusterConfig("", "cm.toml");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->rate_limits.client.limited());
  EXPECT_TRUE(d->rate_limits.anonymous.limited());
  EXPECT_FALSE(d->rate_limits.admin.limited());
  // 0 turns a limit off.
  auto off = ParseClusterConfig("[http]\nrate_per_second = 0\n", "cm.toml");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->rate_limits.client.limited());
  // Refused, naming the key.
  for (const char* bad : {"[http]\nrate_burst = 0\n", "[http]\nrate_per_second = -1\n",
                          "[http.role_rates.node]\nrate_per_second = 1\n",
                          "[http.role_rates.robot]\nrate_per_second = 1\n",
                          "[http.role_rates.client]\nrate = 1\n", "[http]\nrole_rates = 5\n"}) {
    auto c = ParseClusterConfig(bad, "cm.toml");
    EXPECT_FALSE(c.ok()) << bad;
    if (!c.ok()) {
      EXPECT_NE(c.status().message().find("http."), std::string::npos) << c.status().message();
    }
  }
}

TEST_F(AdmissionTest, HeartbeatsHealthAndMetricsTakeThePriorityLane) {
  EXPECT_TRUE(AdmitAs("node-token-00000000000", "POST", "/api/v1/nodes/heartbeat").priority);
  EXPECT_TRUE(AdmitAs(std::nullopt, "GET", "/healthz").priority);
  EXPECT_TRUE(AdmitAs(std::nullopt, "HEAD", "/readyz").priority);
  EXPECT_TRUE(AdmitAs("viewer-token-000000000", "GET", "/metrics").priority);
  EXPECT_FALSE(AdmitAs("alice-token-0000000000", "POST", "/api/v1/allocations").priority);
  EXPECT_FALSE(AdmitAs("alice-token-0000000000", "GET", "/api/v1/nodes/heartbeat").priority);
  EXPECT_FALSE(AdmitAs(std::nullopt, "POST", "/healthz").priority);
}

TEST_F(AdmissionTest, EachTokenHasItsBucketNodesNone) {
  const http::Admission alice = AdmitAs("alice-token-0000000000");
  EXPECT_EQ(alice.limit_key, "client:alice");
  EXPECT_EQ(alice.label, "client");
  EXPECT_TRUE(alice.limit.limited());
  EXPECT_EQ(alice.limit_key.find("alice-token"), std::string::npos);  // never the token
  EXPECT_EQ(AdmitAs("bob-token-000000000000").limit_key, "client:bob");
  EXPECT_EQ(AdmitAs("viewer-token-000000000").label, "viewer");
  EXPECT_EQ(AdmitAs("admin-token-0000000000").limit.rate_per_second, 50);
  const http::Admission node = AdmitAs("node-token-00000000000", "POST", "/api/v1/nodes/heartbeat");
  EXPECT_FALSE(node.limit.limited());
  // No token, or one the manager does not know: the source address's bucket.
  const http::Admission none = AdmitAs(std::nullopt, "GET", "/healthz", "127.0.0.5");
  EXPECT_EQ(none.limit_key, "address:127.0.0.5");
  EXPECT_EQ(none.label, "anonymous");
  const http::Admission unknown = AdmitAs("made-up-token-00000000", "GET", "/x", "127.0.0.5");
  EXPECT_EQ(unknown.limit_key, "address:127.0.0.5");
  EXPECT_EQ(unknown.label, "anonymous");
  const auto labels = AdmissionLabels();
  for (const auto* a : {&alice, &none}) {
    EXPECT_NE(std::find(labels.begin(), labels.end(), a->label), labels.end());
  }
}

// A flooding token against the limiter: it is refused, another token and the node are not.
TEST_F(AdmissionTest, AFloodingTokenIsLimitedOthersAreNot) {
  FakeClock clock;
  RateLimiter limiter(clock);
  auto take = [&](std::optional<std::string_view> token, std::string_view method = "POST",
                  std::string_view path = "/api/v1/allocations") {
    const http::Admission a = AdmitAs(token, method, path);
    return limiter.Take(a.limit_key, a.limit);
  };
  int refused = 0;
  RateLimiter::Verdict last;
  for (int i = 0; i < 100; ++i) {
    last = take("alice-token-0000000000");
    if (!last.allowed) ++refused;
  }
  EXPECT_EQ(refused, 97);  // a burst of 3, no time passed
  EXPECT_EQ(RateLimiter::RetryAfterSeconds(last.retry_after), 1);  // one back at 2 per second
  EXPECT_TRUE(take("bob-token-000000000000").allowed);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(take("node-token-00000000000", "POST", "/api/v1/nodes/heartbeat").allowed) << i;
  }
  clock.Advance(std::chrono::milliseconds(500));
  EXPECT_TRUE(take("alice-token-0000000000").allowed);
}

}  // namespace
}  // namespace flyt::cluster
