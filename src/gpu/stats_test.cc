#include "gpu/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace flyt::gpu {
namespace {

double ExactQuantile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  double pos = p * static_cast<double>(v.size() - 1);
  auto lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

TEST(StatsTest, EmptyHasNoSummary) { EXPECT_FALSE(RunningStats().Get()); }

TEST(StatsTest, MinMaxMeanAreExact) {
  RunningStats s;
  for (double x : {10.0, 20.0, 30.0, 40.0}) s.Add(x);
  auto sum = *s.Get();
  EXPECT_EQ(sum.samples, 4u);
  EXPECT_DOUBLE_EQ(sum.min, 10);
  EXPECT_DOUBLE_EQ(sum.max, 40);
  EXPECT_DOUBLE_EQ(sum.mean, 25);
  EXPECT_DOUBLE_EQ(sum.p50, 20);  // nearest rank: the 2nd of 4
  EXPECT_DOUBLE_EQ(sum.p99, 40);
}

TEST(StatsTest, RepeatedValuesGiveExactPercentiles) {
  RunningStats s;
  for (int i = 0; i < 72; ++i) s.Add(97);
  for (int i = 0; i < 18; ++i) s.Add(12);
  auto sum = *s.Get();
  EXPECT_DOUBLE_EQ(sum.p50, 97);
  EXPECT_DOUBLE_EQ(sum.p95, 97);
  EXPECT_DOUBLE_EQ(sum.mean, 80);
}

TEST(StatsTest, MemoryStaysBoundedWhateverTheSampleCount) {
  QuantileHistogram h;
  for (int i = 0; i < 1000000; ++i) h.Add(static_cast<double>(i % 100000) / 7.0);
  EXPECT_EQ(h.count(), 1000000u);
  EXPECT_LE(h.buckets(), 2402u);
  h.Add(0);
  h.Add(-5);    // below the smallest bucket: shares the zero bucket
  h.Add(1e12);  // beyond the largest: shares the top bucket
  EXPECT_LE(h.buckets(), 2402u);
}

TEST(StatsTest, PercentilesOfAUniformStreamAreClose) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(0, 100);
  RunningStats s;
  std::vector<double> all;
  for (int i = 0; i < 20000; ++i) {
    double x = dist(rng);
    s.Add(x);
    all.push_back(x);
  }
  auto sum = *s.Get();
  EXPECT_NEAR(sum.p50, ExactQuantile(all, 0.50), 1.0);
  EXPECT_NEAR(sum.p95, ExactQuantile(all, 0.95), 1.0);
  EXPECT_NEAR(sum.p99, ExactQuantile(all, 0.99), 1.0);
}

TEST(StatsTest, PercentilesOfACyclicLoadAreClose) {
  // A training-like square wave: 80% of the time at 97%, 20% at 8%.
  RunningStats s;
  std::vector<double> all;
  for (int i = 0; i < 3600; ++i) {
    double x = (i % 90) < 72 ? 97.0 : 8.0;
    x += (i % 7) * 0.1;
    s.Add(x);
    all.push_back(x);
  }
  auto sum = *s.Get();
  EXPECT_NEAR(sum.p50, ExactQuantile(all, 0.50), 0.01 * 97.6);
  EXPECT_NEAR(sum.p95, ExactQuantile(all, 0.95), 0.01 * 97.6);
  EXPECT_LE(sum.p99, sum.max);
  EXPECT_GE(sum.p50, sum.min);
}

}  // namespace
}  // namespace flyt::gpu
