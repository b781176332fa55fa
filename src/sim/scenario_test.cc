#include "sim/scenario.h"

#include <gtest/gtest.h>

#include <cmath>

namespace flyt::sim {
namespace {

const char* kBase = R"(
[scenario]
name = "t"
[[gpu]]
name = "Test GPU"
memory_total_mib = 1000
power_limit_w = 100
max_sm_clock_mhz = 1500
max_mem_clock_mhz = 800
)";
const std::string kMinimal = std::string(kBase) + "utilization = 50\n";

std::string WithGpuLine(const std::string& line) { return std::string(kBase) + line + "\n"; }

TEST(ScenarioTest, ShippedScenariosParse) {
  for (const char* name : {"h100x8-training", "mixed-inference", "faulty-node"}) {
    auto s = LoadScenario(std::string(FLYT_SOURCE_DIR) + "/sim/scenarios/" + name + ".toml");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->name, name);
  }
  auto h100 = LoadScenario(std::string(FLYT_SOURCE_DIR) + "/sim/scenarios/h100x8-training.toml");
  ASSERT_EQ(h100->gpus.size(), 8u);
  EXPECT_EQ(h100->processes.size(), 8u);
  EXPECT_EQ(h100->gpus[7].index, 7u);
  EXPECT_NE(h100->gpus[0].uuid, h100->gpus[1].uuid);
}

TEST(ScenarioTest, LoadsFollowTheirShape) {
  Load square;
  square.kind = LoadKind::kSquare;
  square.low = 10;
  square.high = 90;
  square.period_s = 100;
  square.duty = 0.8;
  EXPECT_EQ(square.At(0), 90);
  EXPECT_EQ(square.At(79.9), 90);
  EXPECT_EQ(square.At(80), 10);
  EXPECT_EQ(square.At(180), 10);
  EXPECT_EQ(square.At(200), 90);

  Load ramp;
  ramp.kind = LoadKind::kRamp;
  ramp.from = 0;
  ramp.to = 100;
  ramp.start_s = 10;
  ramp.duration_s = 100;
  EXPECT_EQ(ramp.At(5), 0);
  EXPECT_DOUBLE_EQ(ramp.At(60), 50);
  EXPECT_EQ(ramp.At(500), 100);

  Load sine;
  sine.kind = LoadKind::kSine;
  sine.mean = 50;
  sine.amplitude = 30;
  sine.period_s = 40;
  EXPECT_NEAR(sine.At(10), 80, 1e-9);
  EXPECT_NEAR(sine.At(30), 20, 1e-9);

  Load step;
  step.kind = LoadKind::kStep;
  step.points = {{0, 5}, {60, 45}, {150, 80}};
  step.loop = true;
  EXPECT_EQ(step.At(59), 5);
  EXPECT_EQ(step.At(60), 45);
  EXPECT_EQ(step.At(150 + 59), 5);  // looped: 209 → 59

  Load replay;
  replay.kind = LoadKind::kReplay;
  replay.points = {{0, 10}, {10, 30}};
  replay.interpolate = true;
  EXPECT_DOUBLE_EQ(replay.At(5), 20);
}

TEST(ScenarioTest, ReadingsAreAPureFunctionOfTime) {
  auto s = ParseScenario(kMinimal, "<inline>");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  GpuReading a = ReadingAt(*s, s->gpus[0], 42.5);
  GpuReading b = ReadingAt(*s, s->gpus[0], 42.5);
  EXPECT_EQ(a.gpu_util, 50u);
  EXPECT_EQ(a.power_mw, b.power_mw);
  EXPECT_EQ(a.temperature_c, b.temperature_c);
  // Energy at 100 s is the same asked fresh or after walking forward with a cache.
  EnergyCache cache;
  (void)EnergyAt(s->gpus[0], 30.2, &cache);
  EXPECT_EQ(EnergyAt(s->gpus[0], 100.0, &cache), EnergyAt(s->gpus[0], 100.0));
  // Constant power P mW for 100 s is 100·P mJ.
  EXPECT_EQ(EnergyAt(s->gpus[0], 100.0), 100ULL * PowerMwAt(s->gpus[0], 0));
  // Asking an earlier time after a later one still gives the exact value.
  EXPECT_EQ(EnergyAt(s->gpus[0], 10.0, &cache), 10ULL * PowerMwAt(s->gpus[0], 0));
}

struct BadCase {
  std::string text;
  std::string expected;  // substring of the error
};

TEST(ScenarioTest, BrokenFilesNameLineFieldAndProblem) {
  const BadCase cases[] = {
      {"[scenario]\nname = \"x\"\n[[gpu]]\nname = \"a\"\n", "<t>:3: gpu[0].memory_total_mib: required number is missing"},
      {WithGpuLine("utilization = { kind = \"sinus\", mean = 1 }"), "gpu[0].utilization.kind: unknown kind 'sinus'"},
      {std::string(kMinimal) + "memory_utilization = 140\n", "gpu[0].memory_utilization: value 140 is out of range [0, 100]"},
      {std::string(kMinimal) + "colour = \"red\"\n", "gpu[0].colour: unknown key"},
      {std::string(kMinimal) + "[[process]]\ngpu = 3\npid = 1\nmemory_mib = 1\n", "process[0].gpu: value 3 is out of range"},
      {std::string(kMinimal) + "[[process]]\ngpu = 0\npid = 1\nmemory_mib = 5000\n", "process[0].memory_mib: process needs more memory than GPU 0 has free"},
      {std::string(kMinimal) + "[[fault]]\nkind = \"melt\"\ngpu = 0\n", "fault[0].kind: unknown fault 'melt'"},
      {std::string(kMinimal) + "[[fault]]\nkind = \"error\"\ngpu = 0\nfield = \"colour\"\n", "fault[0].field: unknown field 'colour'"},
      {std::string(kMinimal) + "[[fault]]\nkind = \"error\"\ngpu = 0\nfield = \"power\"\nerror = \"oops\"\n", "fault[0].error: unknown error 'oops'"},
      {"[scenario\nname = 1\n", "<t>:1:"},
      {"[scenario]\nname = \"x\"\n", "gpu: a scenario needs at least one [[gpu]]"},
      {std::string(kMinimal) + "unsupported = [\"power\", \"colour\"]\n", "gpu[0].unsupported[1]: unknown field"},
      {WithGpuLine("utilization = { kind = \"step\", points = [[10, 1], [5, 2]] }"), "points[1]: times must increase"},
      {WithGpuLine("utilization = { kind = \"replay\", file = \"/nonexistent.csv\" }"), "gpu[0].utilization.file: cannot open /nonexistent.csv"},
  };
  for (const BadCase& c : cases) {
    auto s = ParseScenario(c.text, "<t>");
    ASSERT_FALSE(s.ok()) << "accepted:\n" << c.text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.expected), std::string::npos)
        << "message: " << s.status().message() << "\nexpected to contain: " << c.expected;
  }
}

TEST(ScenarioTest, MissingFileIsAClearError) {
  auto s = LoadScenario("/nonexistent/scenario.toml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent/scenario.toml"), std::string::npos);
}

}  // namespace
}  // namespace flyt::sim
