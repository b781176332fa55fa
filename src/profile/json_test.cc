#include "profile/json.h"

#include <gtest/gtest.h>

#include "common/json.h"

namespace flyt::profile {
namespace {

using std::chrono::system_clock;

GpuProfile Sample() {
  GpuProfile p;
  p.index = 2;
  p.uuid = "GPU-abc";
  p.name = "NVIDIA H100 80GB HBM3";
  p.computed_at = system_clock::time_point(std::chrono::milliseconds(1767225600123));
  p.state = State::kCyclic;
  p.state_since = p.computed_at - std::chrono::seconds(90);
  p.state_seconds = 90;
  Cycle c;
  c.period_s = 12.0;
  c.confidence = 0.9;
  c.method = "autocorrelation";
  c.cycles_in_window = 7.5;
  c.phase_origin = p.state_since;
  c.util_trough_offset_s = 9;
  c.memory_trough_offset_s = 10;
  c.next_util_trough_at = p.computed_at + std::chrono::seconds(3);
  p.cycle = c;
  Window w;
  w.name = "15m";
  w.length = std::chrono::seconds(900);
  w.util_percent = Quantiles{50, 95, 99, 900};
  p.windows.push_back(w);
  p.memory.total_bytes = 80ull << 30;
  p.memory.peak_used_bytes = 60ull << 30;
  p.memory.headroom_bytes = 20ull << 30;
  for (uint32_t i = 0; i < 10; ++i) {
    p.processes.push_back(ProcessUse{100 + i, "python", "alice", uint64_t{i} << 30});
  }
  p.phase_changes.push_back(PhaseChange{p.state_since, State::kSteady, State::kCyclic, "state", ""});
  return p;
}

TEST(ProfileJsonTest, RoundTrips) {
  GpuProfile p = Sample();
  auto back = ProfileFromJson(ToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(ToJson(*back), ToJson(p));
  EXPECT_EQ(ToJson(p)["state"], "cyclic");
  EXPECT_EQ(ToJson(p)["computed_at"], "2026-01-01T00:00:00.123Z");
}

TEST(ProfileJsonTest, RefusesWhatAPeerMustNotSend) {
  nlohmann::json j = ToJson(Sample());
  j["state"] = "sleepy";
  EXPECT_NE(ProfileFromJson(j).status().message().find("unknown state 'sleepy'"),
            std::string::npos);
  j = ToJson(Sample());
  j.erase("uuid");
  EXPECT_NE(ProfileFromJson(j).status().message().find("'uuid'"), std::string::npos);
  j = ToJson(Sample());
  j["schema"] = 99;
  EXPECT_NE(ProfileFromJson(j).status().message().find("schema 99"), std::string::npos);
  j = ToJson(Sample());
  j["name"] = std::string(10000, 'x');
  EXPECT_FALSE(ProfileFromJson(j).ok());
  j = ToJson(Sample());
  j["processes"] = nlohmann::json::array();
  for (int i = 0; i < 1000; ++i) j["processes"].push_back({{"pid", i}});
  EXPECT_FALSE(ProfileFromJson(j).ok());
  EXPECT_FALSE(ProfileFromJson(nlohmann::json::array()).ok());
  // Numbers out of their range: held to it, or refused where no value makes sense.
  j = ToJson(Sample());
  j["cycle"]["confidence"] = 1e300;
  j["state_seconds"] = -5;
  auto held = ProfileFromJson(j);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->cycle->confidence, 1.0);
  EXPECT_EQ(held->state_seconds, 0.0);
  j["cycle"]["period_s"] = 1e308;
  EXPECT_FALSE(ProfileFromJson(j).ok());
}

TEST(ProfileJsonTest, ABoundedProfileAlwaysParses) {
  GpuProfile p = Sample();
  p.processes.clear();
  for (uint32_t i = 0; i < 500; ++i) {
    p.processes.push_back(ProcessUse{i, std::string(1000, 'p'), "bob", uint64_t{i} << 20});
  }
  p.allocated_idle = AllocatedIdle{10, 1, p.processes};
  p.insufficient_data = std::string(300, 'x') + "\xc3\xa9";
  p.phase_changes.assign(100, p.phase_changes[0]);
  EXPECT_FALSE(ProfileFromJson(ToJson(p)).ok());
  GpuProfile b = BoundedForTransport(p);
  auto back = ProfileFromJson(ToJson(b));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->processes.size(), kMaxJsonProcesses);
  EXPECT_EQ(back->processes[0].pid, 499u);  // the most memory first
  EXPECT_EQ(back->allocated_idle->processes.size(), kMaxJsonProcesses);
  EXPECT_EQ(back->processes[0].name->size(), kMaxJsonText);
  EXPECT_EQ(back->phase_changes.size(), kMaxJsonPhaseChanges);
  // Within the bounds: unchanged.
  EXPECT_EQ(ToJson(BoundedForTransport(Sample())), ToJson(Sample()));
}

TEST(ProfileJsonTest, AnnotationIsCompact) {
  nlohmann::json a = AnnotationJson(Sample());
  EXPECT_EQ(a["v"], kSchemaVersion);
  EXPECT_EQ(a["state"], "cyclic");
  EXPECT_EQ(a["period_s"], 12.0);
  EXPECT_EQ(a["util_p95"], 95.0);
  EXPECT_EQ(a["headroom_bytes"], 20ull << 30);
  ASSERT_EQ(a["processes"].size(), 8u);
  EXPECT_EQ(a["processes"][0]["pid"], 109);  // the most memory first
}

TEST(TimeTest, ParsesWhatItFormats) {
  auto t = system_clock::time_point(std::chrono::milliseconds(1767225600123));
  auto back = ParseTimeRfc3339(FormatTimeRfc3339(t));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, t);
  EXPECT_TRUE(ParseTimeRfc3339("2026-01-01T01:00:00+01:00").ok());
  EXPECT_EQ(*ParseTimeRfc3339("2026-01-01T01:00:00+01:00"),
            system_clock::time_point(std::chrono::seconds(1767225600)));
  EXPECT_FALSE(ParseTimeRfc3339("yesterday").ok());
  EXPECT_FALSE(ParseTimeRfc3339("2026-01-01T00:00:00").ok());
  EXPECT_FALSE(ParseTimeRfc3339("2026-13-01T00:00:00Z").ok());
}

}  // namespace
}  // namespace flyt::profile
