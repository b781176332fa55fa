// Usage profiles through the cluster manager (issue 16): a node's heartbeat carries "profiles"
// (profile/json.h ToJson, built here by hand as the node manager's encoder builds them); the
// manager keeps them in memory, shows each on its GPU, raises gpu.state_changed (rate-limited),
// counts them in /metrics, and places leases, jobs and remote leases on them (avoid_states,
// prefer_idle).
#include <gtest/gtest.h>

#include "cluster/cluster.h"
#include "cluster/cluster_testing.h"
#include "common/json.h"
#include "profile/json.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;
using profile::State;

// A profile of GPU `index` of node `node` (UUIDs as test::OwnUuids names them) in `state`; a
// cyclic one has a 12 s period.
profile::GpuProfile Profile(const std::string& node, uint32_t index, State state) {
  profile::GpuProfile p;
  p.index = index;
  p.uuid = "GPU-" + node + "-" + std::to_string(index);
  p.name = "NVIDIA H100 80GB HBM3";
  p.computed_at = std::chrono::system_clock::now();
  p.state = state;
  p.state_since = p.computed_at - std::chrono::seconds(30);
  p.state_seconds = 30;
  if (state == State::kUnknown) p.insufficient_data = "no samples yet";
  if (state == State::kCyclic) {
    profile::Cycle c;
    c.period_s = 12;
    c.confidence = 0.9;
    c.method = "autocorrelation";
    c.phase_origin = p.computed_at;
    c.next_util_trough_at = p.computed_at;
    p.cycle = c;
  }
  return p;
}

// A heartbeat of node `name` with one GPU per state (GPU i in states[i]); a GPU whose state is
// nullopt has no profile.
json Beat(const std::string& name, const std::vector<std::optional<State>>& states) {
  json hb = test::Heartbeat(name, static_cast<int>(states.size()));
  json profiles = json::array();
  for (size_t i = 0; i < states.size(); ++i) {
    if (states[i]) profiles.push_back(profile::ToJson(Profile(name, static_cast<uint32_t>(i), *states[i])));
  }
  hb["profiles"] = profiles;
  return hb;
}

class ProfileHeartbeatTest : public test::ClusterFixture {
 protected:
  void SetUp() override {
    ClusterFixture::SetUp();
    Open();
  }
  void Send(const json& hb) {
    auto r = cluster_->Heartbeat(node_, hb);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  std::vector<json> StateEvents() {
    std::vector<json> out;
    auto events = cluster_->Events(0, 100000);
    EXPECT_TRUE(events.ok());
    for (const json& e : (*events)["events"]) {
      if (e["kind"] == "gpu.state_changed") out.push_back(e);
    }
    return out;
  }
};

TEST_F(ProfileHeartbeatTest, EachGpuShowsItsFullProfileOrNull) {
  Send(Beat("a", {State::kCyclic, std::nullopt}));
  const json gpus = cluster_->Gpus()["gpus"];
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]["profile"]["state"], "cyclic");
  EXPECT_EQ(gpus[0]["profile"]["schema"], 1);
  EXPECT_EQ(gpus[0]["profile"]["cycle"]["period_s"], 12.0);
  EXPECT_TRUE(gpus[0]["profile"].contains("windows"));  // the full form, not the summary
  EXPECT_TRUE(gpus[1]["profile"].is_null());
  auto detail = cluster_->Gpu("a", 0);
  ASSERT_TRUE(detail.ok());
  EXPECT_EQ((*detail)["profile"]["uuid"], "GPU-a-0");
  // The same through the cached body of GET /api/v1/gpus.
  const json body = json::parse(*cluster_->GpusBody());
  EXPECT_EQ(body["gpus"][0]["profile"]["state"], "cyclic");
}

TEST_F(ProfileHeartbeatTest, ProfilesAreMatchedByUuidNotIndex) {
  json hb = Beat("a", {std::nullopt, std::nullopt});
  profile::GpuProfile p = Profile("a", 1, State::kIdle);
  p.index = 0;  // renumbered: the UUID decides
  hb["profiles"] = json::array({profile::ToJson(p)});
  Send(hb);
  const json gpus = cluster_->Gpus()["gpus"];
  EXPECT_TRUE(gpus[0]["profile"].is_null());
  EXPECT_EQ(gpus[1]["profile"]["state"], "idle");
}

TEST_F(ProfileHeartbeatTest, ABadProfileIsDroppedAndCountedButTheHeartbeatIsKept) {
  // A bad entry (an unknown state, no UUID, one GPU profiled twice) costs only that profile:
  // the node's readings and liveness do not hang on its profiles.
  json hb = Beat("a", {State::kIdle, State::kSteady});
  hb["profiles"][1]["state"] = "sleeping";
  ASSERT_TRUE(cluster_->Heartbeat(node_, hb).ok());
  json gpus = cluster_->Gpus()["gpus"];
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]["profile"]["state"], "idle");
  EXPECT_TRUE(gpus[1]["profile"].is_null());
  hb = Beat("a", {State::kIdle, State::kIdle});
  hb["profiles"][0].erase("uuid");
  hb["profiles"][1]["processes"] = json::array();
  for (int i = 0; i < 1000; ++i) hb["profiles"][1]["processes"].push_back({{"pid", i}});
  ASSERT_TRUE(cluster_->Heartbeat(node_, hb).ok());
  hb = Beat("a", {State::kIdle, State::kCyclic});
  hb["profiles"][1]["uuid"] = "GPU-a-0";  // profiled twice: the first one counts
  ASSERT_TRUE(cluster_->Heartbeat(node_, hb).ok());
  gpus = cluster_->Gpus()["gpus"];
  EXPECT_EQ(gpus[0]["profile"]["state"], "idle");
  EXPECT_TRUE(gpus[1]["profile"].is_null());
  EXPECT_NE(cluster_->Metrics().find("flyt_cluster_profiles_refused_total 4"),
            std::string::npos);
  // Not an array, or more than 64 entries: the heartbeat breaks the protocol and is refused.
  hb = Beat("a", {State::kIdle});
  hb["profiles"] = json::array();
  for (int i = 0; i < 65; ++i) hb["profiles"].push_back(profile::ToJson(Profile("a", 0, State::kIdle)));
  auto r = cluster_->Heartbeat(node_, hb);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("profiles"), std::string::npos) << r.status().message();
  hb["profiles"] = "cyclic";
  EXPECT_FALSE(cluster_->Heartbeat(node_, hb).ok());
}

TEST_F(ProfileHeartbeatTest, TheSnapshotsIndexIsShownNotTheProfiles) {
  json hb = Beat("a", {State::kIdle, State::kSteady});
  hb["profiles"][1]["index"] = 0;  // a node cannot put one GPU's profile under another's index
  Send(hb);
  const json gpus = cluster_->Gpus()["gpus"];
  EXPECT_EQ(gpus[1]["profile"]["index"], 1);
  EXPECT_EQ(gpus[1]["profile"]["state"], "steady");
}

TEST_F(ProfileHeartbeatTest, AnUnreachableNodesProfilesAreStillShown) {
  Send(Beat("a", {State::kSteady}));
  clock_.Advance(config_.ledger.unreachable_after + std::chrono::seconds(1));
  const json g = cluster_->Gpus()["gpus"][0];
  EXPECT_EQ(g["allocation_state"], "unreachable");
  EXPECT_EQ(g["profile"]["state"], "steady");
}

TEST_F(ProfileHeartbeatTest, ProfilesAreKeptInMemoryOnly) {
  Send(Beat("a", {State::kIdle}));
  Open();  // a restarted manager: the node is known, its profile not until its next heartbeat
  const json gpus = cluster_->Gpus()["gpus"];
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_TRUE(gpus[0]["profile"].is_null());
}

TEST_F(ProfileHeartbeatTest, StateChangesAreEventsButNotTheFirstHeartbeatNorFromUnknown) {
  Send(Beat("a", {State::kIdle, State::kUnknown}));  // first heartbeat: no event
  EXPECT_TRUE(StateEvents().empty());
  Send(Beat("a", {State::kCyclic, State::kSteady}));  // idle -> cyclic; unknown -> steady: none
  std::vector<json> events = StateEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["node"], "a");
  EXPECT_EQ(events[0]["gpu"], 0);
  EXPECT_EQ(events[0]["uuid"], "GPU-a-0");
  EXPECT_EQ(events[0]["from"], "idle");
  EXPECT_EQ(events[0]["to"], "cyclic");
  EXPECT_EQ(events[0]["period_s"], 12.0);
  EXPECT_EQ(events[0]["message"], "GPU 0 on a: idle -> cyclic (period 12.0 s)");
  // A GPU whose profile has no data for a while (unknown) and comes back in the same state
  // changed nothing.
  clock_.Advance(std::chrono::seconds(60));
  Send(Beat("a", {State::kUnknown, State::kSteady}));
  Send(Beat("a", {State::kCyclic, State::kSteady}));
  EXPECT_EQ(StateEvents().size(), 1u);
  EXPECT_EQ(Metric("flyt_cluster_gpu_state_changes_total"), "1");
  EXPECT_EQ(Metric("flyt_cluster_gpus_by_state{state=\"cyclic\"}"), "1");
  EXPECT_EQ(Metric("flyt_cluster_gpus_by_state{state=\"steady\"}"), "1");
  EXPECT_EQ(Metric("flyt_cluster_gpus_by_state{state=\"idle\"}"), "0");
}

TEST_F(ProfileHeartbeatTest, AFlappingGpuRaisesAtMostOneEventPer30SecondsAndTheLastStateWins) {
  Send(Beat("a", {State::kIdle}));
  Send(Beat("a", {State::kSteady}));  // reported at once: idle -> steady
  for (int i = 0; i < 10; ++i) {  // flapping within the 30 s
    clock_.Advance(std::chrono::seconds(2));
    Send(Beat("a", {i % 2 == 0 ? State::kBursty : State::kSteady}));
  }
  clock_.Advance(std::chrono::seconds(2));
  Send(Beat("a", {State::kCyclic}));
  ASSERT_EQ(StateEvents().size(), 1u);
  EXPECT_EQ(Metric("flyt_cluster_gpu_state_changes_held_total"), "11");
  clock_.Advance(std::chrono::seconds(10));  // past 30 s since the event: the state now is told
  Send(Beat("a", {State::kCyclic}));
  std::vector<json> events = StateEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["from"], "steady");
  EXPECT_EQ(events[1]["to"], "cyclic");
  EXPECT_EQ(events[1]["changes_held"], 11);
  EXPECT_EQ(Metric("flyt_cluster_gpu_state_changes_total"), "2");
  // Back to the reported state within the window: nothing to tell.
  Send(Beat("a", {State::kSteady}));
  clock_.Advance(std::chrono::seconds(60));
  Send(Beat("a", {State::kCyclic}));
  EXPECT_EQ(StateEvents().size(), 2u);
}

TEST_F(ProfileHeartbeatTest, GpusWithoutAProfileCountAsUnknown) {
  Send(Beat("a", {std::nullopt, State::kAllocatedIdle}));
  EXPECT_EQ(Metric("flyt_cluster_gpus_by_state{state=\"unknown\"}"), "1");
  EXPECT_EQ(Metric("flyt_cluster_gpus_by_state{state=\"allocated-idle\"}"), "1");
  EXPECT_EQ(Metric("flyt_cluster_gpus_by_state{state=\"lost\"}"), "0");
}

// ---- placement --------------------------------------------------------------------------------

TEST_F(ProfileHeartbeatTest, AllocationsAvoidListedStatesAndSayWhy) {
  Send(Beat("a", {State::kCyclic, State::kCyclic}));
  auto refused = cluster_->Allocate(alice_, {{"avoid_states", {"cyclic"}}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "insufficient_gpus");
  EXPECT_NE(refused.status().message().find("a: 0 available, 2 avoided: state cyclic"),
            std::string::npos)
      << refused.status().message();
  // Not avoided: granted, and the lease says how it was placed.
  auto lease = cluster_->Allocate(alice_, {{"avoid_states", {"bursty", "unknown"}}});
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ((*lease)["avoid_states"], json({"bursty", "unknown"}));
  EXPECT_EQ((*lease)["prefer_idle"], true);
}

TEST_F(ProfileHeartbeatTest, UnknownStateNamesAreRefusedNamingTheField) {
  Send(Beat("a", {State::kIdle}));
  auto r = cluster_->Allocate(alice_, {{"avoid_states", {"cyclic", "sleepy"}}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("avoid_states[1]: unknown state \"sleepy\""),
            std::string::npos)
      << r.status().message();
  r = cluster_->Allocate(alice_, {{"avoid_states", "cyclic"}});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  r = cluster_->Allocate(alice_, {{"prefer_idle", "yes"}});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  auto job = cluster_->Submit(alice_, test::Task({1}, {{"avoid_states", {"idle", 3}}}));
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("scheduling.avoid_states[1]"), std::string::npos)
      << job.status().message();
  auto remote = cluster_->CreateRemoteLease(
      alice_, {{"sm_count", 8}, {"memory_mb", 1024}, {"avoid_states", {"busy"}}});
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(remote.status().message().find("avoid_states[0]"), std::string::npos)
      << remote.status().message();
}

TEST_F(ProfileHeartbeatTest, PreferIdleDefaultsToTheConfigAndPicksTheIdleGpu) {
  // GPU 0 scores better than GPU 1 (more free memory) but is busy by its profile.
  json hb = Beat("a", {State::kSteady, State::kIdle});
  hb["snapshot"]["gpus"][1]["memory_free_bytes"] = 40 * test::kGiB;
  Send(hb);
  auto lease = cluster_->Allocate(alice_, {{"ttl_seconds", 60}});
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["gpus"][0]["index"], 1);
  ASSERT_TRUE(cluster_->Release(alice_, (*lease)["id"]).ok());
  lease = cluster_->Allocate(alice_, {{"ttl_seconds", 60}, {"prefer_idle", false}});
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["gpus"][0]["index"], 0);
  EXPECT_EQ((*lease)["prefer_idle"], false);
  ASSERT_TRUE(cluster_->Release(alice_, (*lease)["id"]).ok());
  // [ledger] prefer_idle = false: the score decides unless the request asks.
  config_.prefer_idle = false;
  Open();
  Send(hb);
  lease = cluster_->Allocate(alice_, {{"ttl_seconds", 60}});
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["gpus"][0]["index"], 0);
}

TEST_F(ProfileHeartbeatTest, AReplayedRequestWithItsPlacementFieldsGetsTheFirstAnswer) {
  Send(Beat("a", {State::kIdle, State::kIdle}));
  const json body = {{"avoid_states", {"cyclic"}}, {"prefer_idle", true}};
  auto first = cluster_->Allocate(alice_, body, "key-1");
  ASSERT_TRUE(first.ok());
  auto again = cluster_->Allocate(alice_, body, "key-1");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)["id"], (*first)["id"]);
  EXPECT_EQ((*again)["replayed"], true);
  auto other = cluster_->Allocate(alice_, {{"avoid_states", {"bursty"}}}, "key-1");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().reason(), "idempotency_key_reused");
}

TEST_F(ProfileHeartbeatTest, JobsKeepTheirPlacementFieldsAcrossARestart) {
  Send(Beat("a", {State::kCyclic, State::kCyclic}));
  auto sub = cluster_->Submit(alice_, test::Task({1}, {{"avoid_states", {"cyclic"}}}));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  const std::string id = (*sub)["jobs"][0]["id"];
  ASSERT_TRUE(cluster_->Tick().ok());
  auto job = cluster_->GetJob(id);
  EXPECT_EQ((*job)["status"], "queued");
  EXPECT_NE((*job)["message"].get<std::string>().find("2 avoided: state cyclic"),
            std::string::npos)
      << (*job)["message"];
  EXPECT_EQ((*job)["requirement"]["avoid_states"], json({"cyclic"}));
  EXPECT_EQ((*job)["requirement"]["prefer_idle"], true);  // resolved at submission
  Open();
  EXPECT_EQ((*cluster_->GetJob(id))["requirement"]["avoid_states"], json({"cyclic"}));
  Send(Beat("a", {State::kCyclic, State::kIdle}));
  ASSERT_TRUE(cluster_->Tick().ok());
  job = cluster_->GetJob(id);
  EXPECT_EQ((*job)["status"], "running");
  const json lease = cluster_->Allocations()["allocations"][0];
  EXPECT_EQ(lease["gpus"][0]["index"], 1);
}

TEST(ProfileConfigTest, LedgerPreferIdleIsReadAndChecked) {
  auto c = ParseClusterConfig("[ledger]\nprefer_idle = false\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->prefer_idle);
  EXPECT_TRUE(ParseClusterConfig("", "t.toml")->prefer_idle);
  auto bad = ParseClusterConfig("[ledger]\nprefer_idle = \"yes\"\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("prefer_idle"), std::string::npos);
}

}  // namespace
}  // namespace flyt::cluster
