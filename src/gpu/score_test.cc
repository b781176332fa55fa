#include "gpu/score.h"

#include <gtest/gtest.h>

namespace flyt::gpu {
namespace {

constexpr uint64_t kGiB = 1024ULL * 1024 * 1024;

GpuInfo Gpu(uint32_t index, uint64_t total_gib, uint64_t free_gib, uint32_t util) {
  GpuInfo g;
  g.index = index;
  g.name = "GPU" + std::to_string(index);
  g.memory_total_bytes = total_gib * kGiB;
  g.memory_free_bytes = free_gib * kGiB;
  g.memory_used_bytes = (total_gib - free_gib) * kGiB;
  g.gpu_util_percent = util;
  return g;
}

TEST(ScoreTest, DefaultWeightsAreSixtyFortyOfFreeMemoryAndIdleness) {
  // 0.6 · 40/80 + 0.4 · (100 − 25)/100 = 0.3 + 0.3
  EXPECT_DOUBLE_EQ(*AvailabilityScore(Gpu(0, 80, 40, 25)), 0.6);
  EXPECT_DOUBLE_EQ(*AvailabilityScore(Gpu(0, 80, 80, 0)), 1.0);
  EXPECT_DOUBLE_EQ(*AvailabilityScore(Gpu(0, 80, 0, 100)), 0.0);
}

TEST(ScoreTest, WeightsAreConfigurableAndNormalised) {
  ScoreWeights mem_only{1.0, 0.0};
  EXPECT_DOUBLE_EQ(*AvailabilityScore(Gpu(0, 80, 20, 0), mem_only), 0.25);
  ScoreWeights doubled{1.2, 0.8};  // same ratio as the default: same score
  EXPECT_DOUBLE_EQ(*AvailabilityScore(Gpu(0, 80, 40, 25), doubled), 0.6);
  EXPECT_FALSE(ScoreWeights({-1, 1}).Validate().ok());
  EXPECT_FALSE(ScoreWeights({0, 0}).Validate().ok());
}

TEST(ScoreTest, UnknownReadingsOrLostGpusHaveNoScore) {
  GpuInfo no_util = Gpu(0, 80, 40, 0);
  no_util.gpu_util_percent.reset();
  EXPECT_FALSE(AvailabilityScore(no_util));
  GpuInfo no_mem = Gpu(0, 80, 40, 0);
  no_mem.memory_free_bytes.reset();
  EXPECT_FALSE(AvailabilityScore(no_mem));
  GpuInfo lost = Gpu(0, 80, 40, 0);
  lost.lost = true;
  EXPECT_FALSE(AvailabilityScore(lost));
}

TEST(ScoreTest, RankingFiltersThenSortsBestFirst) {
  GpuInfo unknown = Gpu(4, 80, 80, 0);
  unknown.gpu_util_percent.reset();
  std::vector<GpuInfo> gpus = {Gpu(0, 80, 10, 0), Gpu(1, 80, 70, 50), Gpu(2, 80, 60, 5),
                               Gpu(3, 80, 79, 95), unknown};
  auto ranked = RankAvailableGpus(gpus, 20 * kGiB, 90);
  ASSERT_EQ(ranked.size(), 2u);  // 0: too little memory, 3: too busy, 4: unknown (fails closed)
  EXPECT_EQ(ranked[0].gpu.index, 2u);  // 0.6·0.75 + 0.4·0.95 = 0.83
  EXPECT_EQ(ranked[1].gpu.index, 1u);  // 0.6·0.875 + 0.4·0.5 = 0.725
  EXPECT_NEAR(ranked[0].score, 0.83, 1e-9);
}

}  // namespace
}  // namespace flyt::gpu
