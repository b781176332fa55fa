#include "gpu/json.h"

#include <gtest/gtest.h>

namespace flyt::gpu {
namespace {

TEST(JsonTest, AbsentReadingsAreNullNotZero) {
  GpuInfo g;
  g.index = 3;
  g.gpu_util_percent = 0;  // a real zero
  nlohmann::json j = ToJson(g);
  EXPECT_EQ(j["gpu_util_percent"], 0);
  EXPECT_TRUE(j["power_draw_mw"].is_null());
  EXPECT_TRUE(j["memory_usage_percent"].is_null());
}

TEST(JsonTest, ProcessTitlesThatAreNotUtf8DoNotBreakOutput) {
  GpuInfo g;
  ProcessInfo p;
  p.pid = 1;
  p.command = std::string("python caf\xe9.py");  // Latin-1, as a user may have started it
  g.processes.push_back(p);
  GpuSnapshot s;
  s.gpus.push_back(g);
  std::string out;
  ASSERT_NO_THROW(out = DumpJson(ToJson(s)));
  auto back = nlohmann::json::parse(out);
  EXPECT_EQ(back["gpus"][0]["processes"][0]["command"], "python caf\xef\xbf\xbd.py");
}

TEST(JsonTest, SessionStatsHaveTheAutotunerShape) {
  SessionStats stats;
  stats.monitoring_duration_seconds = 90;
  stats.sample_count = 90;
  GpuSessionStats g;
  g.index = 0;
  g.name = "NVIDIA H100 80GB HBM3";
  g.utilization = MetricStats{12, 97, 80, 97, 97, 97, 90};
  stats.gpu_stats[0] = g;
  nlohmann::json j = ToJson(stats);
  EXPECT_EQ(j["monitoring_duration_seconds"], 90.0);
  EXPECT_EQ(j["sample_count"], 90);
  const auto& u = j["gpu_stats"]["0"]["utilization"];
  EXPECT_EQ(u["min"], 12.0);
  EXPECT_EQ(u["max"], 97.0);
  EXPECT_EQ(u["mean"], 80.0);
  EXPECT_EQ(u["samples"], 90);
  EXPECT_EQ(u["p95"], 97.0);
  EXPECT_TRUE(j["gpu_stats"]["0"]["power_draw_w"].is_null());
}

TEST(JsonTest, SnapshotSurvivesARoundTrip) {
  GpuSnapshot s;
  s.source = Source::kNvml;
  s.driver_version = "580.65.06";
  s.simulated_scenario = "x.toml";
  GpuInfo g;
  g.index = 2;
  g.uuid = "GPU-x";
  g.name = "NVIDIA H100 80GB HBM3";
  g.gpu_util_percent = 97;
  g.memory_used_bytes = 1ULL << 40;
  g.lost = false;
  ProcessInfo p;
  p.pid = 7;
  p.type = ProcessType::kGraphics;
  p.user = "bob";
  g.processes.push_back(p);
  s.gpus.push_back(g);
  auto back = SnapshotFromJson(nlohmann::json::parse(DumpJson(ToJson(s))));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->source, Source::kNvml);
  EXPECT_EQ(back->driver_version, "580.65.06");
  EXPECT_EQ(back->simulated_scenario, "x.toml");
  ASSERT_EQ(back->gpus.size(), 1u);
  EXPECT_EQ(back->gpus[0].index, 2u);
  EXPECT_EQ(back->gpus[0].gpu_util_percent, 97u);
  EXPECT_EQ(back->gpus[0].memory_used_bytes, 1ULL << 40);
  EXPECT_FALSE(back->gpus[0].power_draw_mw);  // null stays absent
  EXPECT_EQ(back->gpus[0].processes[0].type, ProcessType::kGraphics);
  EXPECT_EQ(back->gpus[0].processes[0].user, "bob");
}

TEST(JsonTest, WrongTypesFromARemoteNodeAreErrorsOrIgnoredNeverThrown) {
  auto s = SnapshotFromJson(nlohmann::json::parse(
      R"({"source": 7, "gpus":[{"index":0,"uuid":"u","name":"x","lost":"yes","pci_bus_id":3,
          "gpu_util_percent":-5,"processes":[{"pid":1,"type":9}]}]})"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->gpus[0].lost);
  EXPECT_FALSE(s->gpus[0].gpu_util_percent);  // a negative reading is no reading
  auto stats = SessionStatsFromJson(nlohmann::json::parse(
      R"({"sample_count": 1e300, "gpu_stats": {"0": {"name": 3, "utilization": {"samples": -1, "mean": "x"}}}})"));
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->sample_count, 0u);
  EXPECT_EQ(stats->gpu_stats.at(0).utilization->samples, 0u);
  auto bad = SessionStatsFromJson(nlohmann::json::parse(R"({"gpu_stats": {"0": 5}})"));
  EXPECT_FALSE(bad.ok());
}

TEST(JsonTest, MalformedSnapshotsNameWhatIsWrong) {
  EXPECT_NE(SnapshotFromJson(nlohmann::json::parse("[]")).status().message().find("'gpus'"),
            std::string::npos);
  auto no_uuid = SnapshotFromJson(nlohmann::json::parse(R"({"gpus":[{"index":0,"name":"x"}]})"));
  EXPECT_NE(no_uuid.status().message().find("'uuid'"), std::string::npos);
  auto bad_pid = SnapshotFromJson(nlohmann::json::parse(
      R"({"gpus":[{"index":0,"uuid":"u","name":"x","processes":[{"pid":-1}]}]})"));
  EXPECT_NE(bad_pid.status().message().find("'pid'"), std::string::npos);
}

}  // namespace
}  // namespace flyt::gpu
