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

}  // namespace
}  // namespace flyt::gpu
