// The profiler with the real cycle test (DetectCycle, FoldPhase): hand-made loads at 1 Hz and
// with the driver's 6 Hz samples reach the right state and period.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "profile/profiler.h"

namespace flyt::profile {
namespace {

using std::chrono::seconds;
using TimePoint = std::chrono::system_clock::time_point;
const TimePoint kT0 = TimePoint(seconds(1'700'000'000));

TimePoint At(double s) {
  return kT0 + std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(s));
}

Sample Load(double t, double util) {
  Sample s;
  s.at = At(t);
  s.util_percent = util;
  s.memory_total_bytes = 80ull << 30;
  s.memory_used_bytes = 20ull << 30;
  s.processes = {ProcessUse{1234, "python3", "bob", 20ull << 30}};
  return s;
}

// A 12 s square load: 8 s at 95 %, 4 s at 0 %, with a little noise.
double Square12(int t, std::mt19937& rng) {
  std::normal_distribution<double> noise(0, 2);
  return std::clamp((t % 12 < 8 ? 95.0 : 0.0) + noise(rng), 0.0, 100.0);
}

TEST(ProfilerCycleTest, CleanTwelveSecondSquareLoadIsCyclic) {
  Profiler profiler;
  std::mt19937 rng(11);
  for (int t = 0; t < 240; ++t) profiler.Add(0, "GPU-a", "H100", Load(t, Square12(t, rng)));
  GpuProfile p = profiler.Profile(0).value();
  ASSERT_EQ(p.state, State::kCyclic) << p.insufficient_data;
  ASSERT_TRUE(p.cycle.has_value());
  EXPECT_NEAR(p.cycle->period_s, 12.0, 1.2);
  EXPECT_GT(p.cycle->confidence, 0.5);
  EXPECT_DOUBLE_EQ(p.util_rate_hz, 1.0);
  // The trough (0 % for 4 s of every 12) falls in the load's quiet part.
  const double phase =
      std::fmod(std::chrono::duration<double>(p.cycle->next_util_trough_at - kT0).count(), 12.0);
  EXPECT_GE(phase, 7.0);
  EXPECT_LE(phase, 12.5);
  // Headroom over 3 periods.
  EXPECT_NEAR(p.memory.peak_window_s, 3 * p.cycle->period_s, 1.0);
  EXPECT_EQ(p.memory.headroom_bytes, 60ull << 30);
  EXPECT_TRUE(p.phase_changes.empty());  // unknown -> cyclic, with no bursty spell before
}

TEST(ProfilerCycleTest, SteadyAndIdleAreNotCyclic) {
  Profiler profiler;
  std::mt19937 rng(12);
  std::normal_distribution<double> noise(0, 3);
  for (int t = 0; t < 600; ++t) {
    profiler.Add(0, "GPU-a", "H100", Load(t, std::clamp(70 + noise(rng), 0.0, 100.0)));
    Sample idle = Load(t, std::abs(noise(rng)) / 3);
    idle.processes.clear();
    profiler.Add(1, "GPU-b", "H100", idle);
  }
  EXPECT_EQ(profiler.Profile(0)->state, State::kSteady);
  EXPECT_EQ(profiler.Profile(1)->state, State::kIdle);
  EXPECT_TRUE(profiler.Profile(0)->phase_changes.empty());
}

TEST(ProfilerCycleTest, DriverSamplesResolveAShortIteration) {
  // A 3 s iteration (2 s busy, 1 s idle): the 6 Hz driver samples carry it.
  Profiler profiler;
  for (int t = 0; t < 180; ++t) {
    Sample s = Load(t, 66);
    for (int k = 0; k < 6; ++k) {
      const double at = t - 1 + (k + 1) / 6.0;
      s.util_samples.push_back({At(at), std::fmod(at, 3.0) < 2.0 ? 100.0 : 0.0});
    }
    profiler.Add(0, "GPU-a", "H100", s);
  }
  GpuProfile p = profiler.Profile(0).value();
  ASSERT_EQ(p.state, State::kCyclic) << p.insufficient_data;
  EXPECT_NEAR(p.cycle->period_s, 3.0, 0.3);
  EXPECT_NEAR(p.util_rate_hz, 6.0, 1e-6);
}

TEST(ProfilerCycleTest, TrainingThenEvaluationIsAPhaseChange) {
  Profiler profiler;
  std::mt19937 rng(13);
  std::normal_distribution<double> noise(0, 2);
  for (int t = 0; t < 300; ++t) profiler.Add(0, "GPU-a", "H100", Load(t, Square12(t, rng)));
  ASSERT_EQ(profiler.Profile(0)->state, State::kCyclic);
  for (int t = 300; t < 420; ++t) {
    profiler.Add(0, "GPU-a", "H100", Load(t, std::clamp(60 + noise(rng), 0.0, 100.0)));
  }
  GpuProfile p = profiler.Profile(0).value();
  EXPECT_EQ(p.state, State::kSteady);
  // One change: no bursty spell before the cycle was found, none between cyclic and steady.
  ASSERT_EQ(p.phase_changes.size(), 1u);
  EXPECT_EQ(p.phase_changes.back().from, State::kCyclic);
  EXPECT_EQ(p.phase_changes.back().to, State::kSteady);
  EXPECT_GE(p.phase_changes.back().at, At(300));
  EXPECT_LE(p.phase_changes.back().at, At(360));
}

}  // namespace
}  // namespace flyt::profile
