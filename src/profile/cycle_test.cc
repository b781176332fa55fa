// The cycle test's properties, one at a time, on hand-made series (the statistical accuracy over
// many seeded series is tests/profile/accuracy_test.cc).
#include "profile/cycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

namespace flyt::profile {
namespace {

using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = std::numbers::pi;

std::vector<double> Sine(size_t n, double dt_s, double period_s, double noise = 0,
                         uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = 50 + 40 * std::sin(2 * kPi * static_cast<double>(i) * dt_s / period_s) +
           noise * normal(rng);
  }
  return v;
}

std::vector<double> Noise(size_t n, double level, double sigma, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> v(n);
  for (double& x : v) x = level + sigma * normal(rng);
  return v;
}

TEST(CycleTest, FindsTheFundamentalOfASineInSeconds) {
  CycleResult r = DetectCycle(Sine(600, 1.0, 30, 3), 1.0);
  ASSERT_TRUE(r.cyclic) << r.reason;
  EXPECT_NEAR(r.period_s, 30, 0.3);
  EXPECT_EQ(r.method, "autocorrelation");
  EXPECT_NEAR(r.cycles_in_window, 20, 0.3);
  EXPECT_GT(r.confidence, 0.9);
  EXPECT_LE(r.confidence, 1.0);
  EXPECT_TRUE(r.reason.empty());
  EXPECT_FALSE(r.insufficient);
  // The same load sampled at 2 Hz: the period is in seconds, not samples.
  CycleResult half = DetectCycle(Sine(1200, 0.5, 30, 3), 0.5);
  ASSERT_TRUE(half.cyclic) << half.reason;
  EXPECT_NEAR(half.period_s, 30, 0.3);
}

TEST(CycleTest, IgnoresTheLagZeroLobe) {
  // Smoothed noise: its autocorrelation stays high for ~40 lags after lag 0, then decays, and
  // never rises again. A test that counts lags above a threshold calls it cyclic at lag 1.
  std::vector<double> noise = Noise(640, 50, 20);
  std::vector<double> smooth(600);
  for (size_t i = 0; i < smooth.size(); ++i) {
    double s = 0;
    for (size_t j = 0; j < 40; ++j) s += noise[i + j];
    smooth[i] = s / 40;
  }
  CycleResult r = DetectCycle(smooth, 1.0);
  EXPECT_FALSE(r.cyclic) << r.period_s;
  EXPECT_FALSE(r.reason.empty());
}

TEST(CycleTest, NoiseStaysUnderTheSignificanceBound) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    CycleResult r = DetectCycle(Noise(600, 50, 10, seed), 1.0);
    EXPECT_FALSE(r.cyclic) << "seed " << seed << ": " << r.period_s;
  }
  CycleResult r = DetectCycle(Noise(600, 80, 3, 3), 1.0);
  EXPECT_THAT(r.reason, HasSubstr("significance bound"));
  // A sine far below the noise (amplitude 2 % in N(0, 20)) is not claimed.
  std::vector<double> weak = Noise(600, 50, 20, 4);
  for (size_t i = 0; i < weak.size(); ++i) weak[i] += 2 * std::sin(2 * kPi * i / 30.0);
  EXPECT_FALSE(DetectCycle(weak, 1.0).cyclic);
}

TEST(CycleTest, NeedsMinCyclesInTheWindow) {
  // 250 s in 600 s: 2.4 cycles.
  CycleResult r = DetectCycle(Sine(600, 1.0, 250, 2), 1.0);
  EXPECT_FALSE(r.cyclic);
  EXPECT_THAT(r.reason, HasSubstr(" cycles in the window, 3 needed"));
  // Allowing two cycles, it is found.
  CycleOptions two;
  two.min_cycles = 2;
  CycleResult r2 = DetectCycle(Sine(600, 1.0, 250, 2), 1.0, two);
  ASSERT_TRUE(r2.cyclic) << r2.reason;
  EXPECT_NEAR(r2.period_s, 250, 10);
  EXPECT_GE(r2.cycles_in_window, 2.0);
  // A load that stops (NaN tail) after 70 s of a 30 s cycle holds 2.3 cycles.
  std::vector<double> lost = Sine(600, 1.0, 30, 2);
  std::fill(lost.begin() + 70, lost.end(), kNaN);
  CycleResult r3 = DetectCycle(lost, 1.0);
  EXPECT_FALSE(r3.cyclic) << r3.period_s;
}

TEST(CycleTest, CountsCyclesOverTheValidSpan) {
  std::vector<double> lost = Sine(600, 1.0, 20, 2);
  std::fill(lost.begin() + 200, lost.end(), kNaN);  // the GPU fell off the bus at 200 s
  CycleResult r = DetectCycle(lost, 1.0);
  ASSERT_TRUE(r.cyclic) << r.reason;
  EXPECT_NEAR(r.period_s, 20, 0.5);
  EXPECT_NEAR(r.cycles_in_window, 10, 0.3);
}

TEST(CycleTest, SkipsMissingSamples) {
  // A steady load with every 10th sample missing: read as 0 the holes would be a 10 s cycle.
  std::vector<double> v = Noise(600, 80, 2);
  for (size_t i = 0; i < v.size(); i += 10) v[i] = kNaN;
  CycleResult r = DetectCycle(v, 1.0);
  EXPECT_FALSE(r.cyclic) << r.period_s;
  // Infinities count as missing too.
  for (size_t i = 5; i < v.size(); i += 10) v[i] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(DetectCycle(v, 1.0).cyclic);
  // A sine with a fifth of its samples dropped and a 40 s hole keeps its period.
  std::vector<double> s = Sine(600, 1.0, 24, 3);
  std::mt19937_64 rng(9);
  for (double& x : s) {
    if (rng() % 5 == 0) x = kNaN;
  }
  std::fill(s.begin() + 300, s.begin() + 340, kNaN);
  CycleResult rs = DetectCycle(s, 1.0);
  ASSERT_TRUE(rs.cyclic) << rs.reason;
  EXPECT_NEAR(rs.period_s, 24, 0.5);
}

TEST(CycleTest, IdleAndConstantSeriesAreNeverCyclic) {
  CycleResult idle = DetectCycle(std::vector<double>(600, 0.0), 1.0);
  EXPECT_FALSE(idle.cyclic);
  EXPECT_FALSE(idle.insufficient);
  EXPECT_THAT(idle.reason, HasSubstr("idle"));
  // Blips within the idle level, however regular, are idle.
  std::vector<double> blips(600, 0.0);
  for (size_t i = 0; i < blips.size(); i += 10) blips[i] = 2;
  EXPECT_THAT(DetectCycle(blips, 1.0).reason, HasSubstr("idle"));
  CycleResult flat = DetectCycle(std::vector<double>(600, 73.0), 1.0);
  EXPECT_FALSE(flat.cyclic);
  EXPECT_THAT(flat.reason, HasSubstr("constant"));
}

TEST(CycleTest, BurstSpacingFindsJitteredSpikes) {
  // 3 s bursts at 95 % on an idle GPU, their spacing jittering +-20 % around 30 s.
  std::vector<double> v(600, 1.0);
  const double spacing[] = {24, 35, 27, 33, 25, 36, 30, 26, 34, 28, 32, 24, 36, 29, 31, 25, 35,
                            27, 33, 30, 26};
  double start = 4;
  for (double s : spacing) {
    for (size_t i = 0; i < 3 && start + i < v.size(); ++i) v[static_cast<size_t>(start) + i] = 95;
    start += s;
    if (start >= 600) break;
  }
  CycleResult r = DetectCycle(v, 1.0);
  ASSERT_TRUE(r.cyclic) << r.reason;
  EXPECT_NEAR(r.period_s, 30, 1.5);
  EXPECT_EQ(r.method, "burst_spacing");
}

TEST(CycleTest, IrregularBurstsAreNotCyclic) {
  std::vector<double> v(600, 1.0);
  const double starts[] = {10, 25, 90, 100, 230, 260, 270, 400, 530, 560};
  for (double s : starts) {
    for (size_t i = 0; i < 3; ++i) v[static_cast<size_t>(s) + i] = 95;
  }
  CycleResult r = DetectCycle(v, 1.0);
  EXPECT_FALSE(r.cyclic) << r.period_s << " " << r.method;
  EXPECT_THAT(r.reason, HasSubstr("burst"));
}

TEST(CycleTest, PrefersTheFundamentalToAHarmonic) {
  // Every 30 s: a 6 s burst at 90 %, and 15 s later a 6 s burst at 45 %. The pattern repeats
  // every 30 s; the 15 s sub-pattern is a harmonic.
  std::vector<double> v = Noise(600, 10, 1);
  for (size_t i = 0; i < v.size(); ++i) {
    size_t phase = i % 30;
    if (phase < 6) v[i] += 80;
    if (phase >= 15 && phase < 21) v[i] += 35;
  }
  CycleResult r = DetectCycle(v, 1.0);
  ASSERT_TRUE(r.cyclic) << r.reason;
  EXPECT_NEAR(r.period_s, 30, 0.5);
  // A pure sine peaks at P, 2P, 3P: P is reported, not a multiple.
  CycleResult s = DetectCycle(Sine(600, 1.0, 40, 1), 1.0);
  ASSERT_TRUE(s.cyclic);
  EXPECT_NEAR(s.period_s, 40, 0.4);
}

TEST(CycleTest, RefinesThePeriodBelowOneSample) {
  for (double period : {12.5, 7.3, 41.7}) {
    CycleResult r = DetectCycle(Sine(600, 1.0, period, 1), 1.0);
    ASSERT_TRUE(r.cyclic) << period << ": " << r.reason;
    EXPECT_NEAR(r.period_s, period, 0.01 * period) << period;
  }
}

TEST(CycleTest, SixHertzSeriesAreDecimatedAndRefinedAtFullRate) {
  // 10 minutes of the driver's 6 Hz samples: a 3.3 s iteration.
  CycleResult r = DetectCycle(Sine(3600, 1.0 / 6, 3.3, 5), 1.0 / 6);
  ASSERT_TRUE(r.cyclic) << r.reason;
  EXPECT_NEAR(r.period_s, 3.3, 0.03);
  // A 1 s cycle is under min_period_s (2 s): not reported, not even as its 2 s multiple.
  CycleResult fast = DetectCycle(Sine(3600, 1.0 / 6, 1.0, 2), 1.0 / 6);
  EXPECT_FALSE(fast.cyclic) << fast.period_s;
  EXPECT_THAT(fast.reason, HasSubstr("under the shortest"));
}

TEST(CycleTest, InsufficientDataSaysWhy) {
  std::vector<double> v(600, kNaN);
  for (size_t i = 0; i < 10; ++i) v[i * 7] = 50;
  CycleResult r = DetectCycle(v, 1.0);
  EXPECT_TRUE(r.insufficient);
  EXPECT_FALSE(r.cyclic);
  EXPECT_THAT(r.reason, HasSubstr("too few valid samples: 10 of 600"));
  EXPECT_TRUE(DetectCycle(std::vector<double>{}, 1.0).insufficient);
  CycleResult bad_dt = DetectCycle(Sine(600, 1.0, 30), 0.0);
  EXPECT_TRUE(bad_dt.insufficient);
  EXPECT_THAT(bad_dt.reason, HasSubstr("sample interval"));
}

TEST(CycleTest, NotCyclicStillCarriesTheBestCandidatesConfidence) {
  // Heavy noise on a 30 s sine: a peak is there but not confident enough.
  CycleResult r = DetectCycle(Sine(600, 1.0, 30, 45, 2), 1.0);
  EXPECT_FALSE(r.cyclic);
  EXPECT_GT(r.confidence, 0.0);
  EXPECT_LT(r.confidence, 0.5);
}

TEST(CycleTest, AnySeriesGetsAnAnswerInRange) {
  // Random lengths, levels, gaps, infinities and sample intervals: never a crash, a confidence
  // outside 0..1, a verdict without a period, or a refusal without a reason.
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 300; ++trial) {
    size_t n = rng() % 700;
    std::vector<double> v(n);
    double period = 2 + static_cast<double>(rng() % 100);
    for (size_t i = 0; i < n; ++i) {
      switch (rng() % 12) {
        case 0: v[i] = kNaN; break;
        case 1: v[i] = (rng() % 2 ? 1 : -1) * std::numeric_limits<double>::infinity(); break;
        default: v[i] = 50 + 40 * std::sin(2 * kPi * i / period) + static_cast<double>(rng() % 20);
      }
    }
    double dt = trial % 3 == 0 ? 1.0 / 6 : 1.0;
    CycleResult r = DetectCycle(v, dt);
    EXPECT_GE(r.confidence, 0.0);
    EXPECT_LE(r.confidence, 1.0);
    if (r.cyclic) {
      EXPECT_GT(r.period_s, 0);
      EXPECT_GE(r.cycles_in_window, 3.0);
      EXPECT_FALSE(r.method.empty());
    } else {
      EXPECT_FALSE(r.reason.empty());
    }
    std::optional<Phase> p = FoldPhase(v, dt, period);
    if (p) {
      EXPECT_GE(p->peak_offset_s, 0);
      EXPECT_LT(p->peak_offset_s, period);
      EXPECT_GE(p->trough_offset_s, 0);
      EXPECT_LT(p->trough_offset_s, period);
    }
  }
}

TEST(FoldPhaseTest, SquareWaveOffsets) {
  // 20 s period, high for the first 10 s of each period (from the first sample), low after.
  std::vector<double> v(200);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 20) < 10 ? 90 : 10;
  std::optional<Phase> p = FoldPhase(v, 1.0, 20);
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->peak_offset_s, 5, 0.6);
  EXPECT_NEAR(p->trough_offset_s, 15, 0.6);
}

TEST(FoldPhaseTest, SineOffsetsWithNoiseAndGaps) {
  std::vector<double> v = Sine(600, 1.0, 40, 5);  // peak at 10 s, trough at 30 s
  for (size_t i = 0; i < v.size(); i += 7) v[i] = kNaN;
  std::optional<Phase> p = FoldPhase(v, 1.0, 40);
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->peak_offset_s, 10, 1.5);
  EXPECT_NEAR(p->trough_offset_s, 30, 1.5);
  // Offsets stay in [0, period) when the peak sits at the fold's edge.
  std::vector<double> c(600);
  for (size_t i = 0; i < c.size(); ++i) c[i] = 50 + 40 * std::cos(2 * kPi * i / 40.0);
  std::optional<Phase> q = FoldPhase(c, 1.0, 40);
  ASSERT_TRUE(q.has_value());
  EXPECT_GE(q->peak_offset_s, 0);
  EXPECT_LT(q->peak_offset_s, 40);
  double d = std::min(q->peak_offset_s, 40 - q->peak_offset_s);
  EXPECT_LT(d, 1.5);
  EXPECT_NEAR(q->trough_offset_s, 20, 1.5);
}

TEST(FoldPhaseTest, NeedsTwoPeriodsAndAProfileThatMoves) {
  EXPECT_FALSE(FoldPhase(Sine(50, 1.0, 30), 1.0, 30).has_value());  // 1.7 periods
  EXPECT_TRUE(FoldPhase(Sine(60, 1.0, 30), 1.0, 30).has_value());
  EXPECT_FALSE(FoldPhase(std::vector<double>(600, 40.0), 1.0, 30).has_value());
  EXPECT_FALSE(FoldPhase(Noise(600, 50, 10, 5), 1.0, 30).has_value());  // flat within noise
  EXPECT_FALSE(FoldPhase(Sine(600, 1.0, 30), 1.0, 0).has_value());
  EXPECT_FALSE(FoldPhase(Sine(600, 1.0, 30), 0.0, 30).has_value());
}

}  // namespace
}  // namespace flyt::profile
