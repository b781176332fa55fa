#include "sim/scenario.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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
      {"[scenario]\nname = \"x\"\n[[gpu]]\nname = \"a\"\n",
       "<t>:3: gpu[0].memory_total_mib: required number is missing"},
      {WithGpuLine("utilization = { kind = \"sinus\", mean = 1 }"),
       "gpu[0].utilization.kind: unknown kind 'sinus'"},
      {std::string(kMinimal) + "memory_utilization = 140\n",
       "gpu[0].memory_utilization: value 140 is out of range [0, 100]"},
      {std::string(kMinimal) + "colour = \"red\"\n", "gpu[0].colour: unknown key"},
      {std::string(kMinimal) + "[[process]]\ngpu = 3\npid = 1\nmemory_mib = 1\n",
       "process[0].gpu: value 3 is out of range"},
      {std::string(kMinimal) + "[[process]]\ngpu = 0\npid = 1\nmemory_mib = 5000\n",
       "process[0].memory_mib: process needs more memory than GPU 0 has free"},
      {std::string(kMinimal) + "[[fault]]\nkind = \"melt\"\ngpu = 0\n",
       "fault[0].kind: unknown fault 'melt'"},
      {std::string(kMinimal) + "[[fault]]\nkind = \"error\"\ngpu = 0\nfield = \"colour\"\n",
       "fault[0].field: unknown field 'colour'"},
      {std::string(kMinimal) +
           "[[fault]]\nkind = \"error\"\ngpu = 0\nfield = \"power\"\nerror = \"oops\"\n",
       "fault[0].error: unknown error 'oops'"},
      {"[scenario\nname = 1\n", "<t>:1:"},
      {"[scenario]\nname = \"x\"\n", "gpu: a scenario needs at least one [[gpu]]"},
      {std::string(kMinimal) + "unsupported = [\"power\", \"colour\"]\n",
       "gpu[0].unsupported[1]: unknown field"},
      {WithGpuLine("utilization = { kind = \"step\", points = [[10, 1], [5, 2]] }"),
       "points[1]: times must increase"},
      {WithGpuLine("utilization = { kind = \"replay\", file = \"/nonexistent.csv\" }"),
       "gpu[0].utilization.file: cannot open /nonexistent.csv"},
      {WithGpuLine("utilization = { kind = \"replay\", file = \"/dev/zero\" }"),
       "gpu[0].utilization.file: /dev/zero is not a regular file"},
      // Hostile numbers: NaN, infinities and absurd magnitudes are refused, never converted.
      {WithGpuLine("utilization = nan"), "gpu[0].utilization: value nan is out of range"},
      {WithGpuLine("utilization = { kind = \"step\", points = [[-inf, 1]] }"),
       "points[0]: time -inf is out of range"},
      {WithGpuLine("utilization = { kind = \"sine\", mean = 50, amplitude = 1, period_s = 1e300 }"),
       "period_s: value 1e+300 is out of range"},
      {std::string(kMinimal) + "memory_reserved_mib = inf\n",
       "memory_reserved_mib: expected a finite number"},
      {"[scenario]\nname = \"x\"\n[[gpu]]\nname = \"a\"\nmemory_total_mib = 1e300\n",
       "memory_total_mib: value 1e+300 is out of range"},
      {std::string(kMinimal) + "[[process]]\ngpu = 0\npid = -5\nmemory_mib = 1\n",
       "process[0].pid: value -5 is out of range"},
      {std::string(kMinimal) + "[[fault]]\nkind = \"lost\"\ngpu = 0\nat_s = 1e12\n",
       "fault[0].at_s: value 1000000000000 is out of range"},
      {"[scenario]\nname = \"x\"\n[[gpu]]\ncount = 65\n", "gpu[0].count: value 65 is out of range"},
      {"[scenario]\nname = \"x\"\nquirks = [\"melt\"]\n", "scenario.quirks[0]: unknown quirk"},
      // A dotted key nested thousands deep: refused before toml++ recurses on it.
      {"[scenario]\nname = \"x\"\n" +
           [] {
             std::string k = "a";
             for (int i = 0; i < 20000; ++i) k += ".a";
             return k;
           }() +
           " = 1\n",
       "<t>:3: line longer than 16384 characters"},
  };
  for (const BadCase& c : cases) {
    auto s = ParseScenario(c.text, "<t>");
    ASSERT_FALSE(s.ok()) << "accepted:\n" << c.text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.expected), std::string::npos)
        << "message: " << s.status().message() << "\nexpected to contain: " << c.expected;
  }
}

TEST(ScenarioTest, TooManyGpusInTotal) {
  std::string text = "[scenario]\nname = \"x\"\n";
  for (int i = 0; i < 3; ++i) {
    text +=
        "[[gpu]]\ncount = 30\nname = \"g\"\nmemory_total_mib = 10\npower_limit_w = 1\n"
        "max_sm_clock_mhz = 1\nmax_mem_clock_mhz = 1\n";
  }
  auto s = ParseScenario(text, "<t>");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("gpu[2].count: a scenario has at most 64 GPUs"),
            std::string::npos)
      << s.status().message();
}

TEST(ScenarioTest, EveryLoadShapeGivesTheSameEnergyWhateverTheOrderOfQuestions) {
  const char* loads[] = {
      "utilization = 50",
      "utilization = { kind = \"ramp\", from = 0, to = 100, start_s = 5, duration_s = 30.5 }",
      "utilization = { kind = \"sine\", mean = 50, amplitude = 40, period_s = 37.3 }",
      "utilization = { kind = \"square\", low = 5, high = 95, period_s = 12, duty = 0.25 }",
      "utilization = { kind = \"step\", points = [[0, 5], [10, 80], [25, 30]], loop = true }",
      "utilization = { kind = \"step\", points = [[3, 5], [10, 80]] }",
  };
  for (const char* load : loads) {
    SCOPED_TRACE(load);
    auto s = ParseScenario(WithGpuLine(load), "<t>");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const GpuSpec& g = s->gpus[0];
    EnergyCache forward;
    std::vector<uint64_t> walked;
    for (double t = 0; t < 200; t += 0.7) walked.push_back(EnergyAt(g, t, &forward));
    size_t i = 0;
    for (double t = 0; t < 200; t += 0.7, ++i) {
      EXPECT_EQ(walked[i], EnergyAt(g, t)) << "t=" << t;  // fresh, no cache
      if (i > 0) {
        EXPECT_GE(walked[i], walked[i - 1]);  // a counter never goes down
      }
    }
    EnergyCache backward;
    EXPECT_EQ(EnergyAt(g, 150.5, &backward), EnergyAt(g, 150.5));
    EXPECT_EQ(EnergyAt(g, 20.25, &backward), EnergyAt(g, 20.25));
  }
}

TEST(ScenarioTest, MissingFileIsAClearError) {
  auto s = LoadScenario("/nonexistent/scenario.toml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent/scenario.toml"), std::string::npos);
}

}  // namespace
}  // namespace flyt::sim
