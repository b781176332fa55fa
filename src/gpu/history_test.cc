#include "gpu/history.h"

#include <gtest/gtest.h>

namespace flyt::gpu {
namespace {

HistoryPoint At(int64_t t_ms, float util) {
  HistoryPoint p;
  p.t_ms = t_ms;
  p.gpu_util_percent = util;
  return p;
}

TEST(HistoryTest, KeepsOnlyTheNewestPointsWithinCapacity) {
  History h(3);
  for (int i = 0; i < 5; ++i) h.Add(0, At(i * 1000, static_cast<float>(i)));
  auto pts = h.Query(0, 0, 0);
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_EQ(pts[0].t_ms, 2000);
  EXPECT_EQ(pts[2].t_ms, 4000);
  EXPECT_EQ(h.MemoryBytes(), 3 * sizeof(HistoryPoint));
}

TEST(HistoryTest, SinceAndStepDownsampleByAveraging) {
  History h(100);
  for (int i = 0; i < 10; ++i) h.Add(1, At(i * 1000, static_cast<float>(i * 10)));
  auto pts = h.Query(1, 4000, 5000);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0].t_ms, 0);  // bucket [0, 5000): only t=4000 is >= since
  EXPECT_FLOAT_EQ(pts[0].gpu_util_percent, 40);
  EXPECT_EQ(pts[1].t_ms, 5000);
  EXPECT_FLOAT_EQ(pts[1].gpu_util_percent, 70);  // mean of 50..90
  EXPECT_TRUE(std::isnan(pts[1].power_draw_w));  // never read: stays absent
  EXPECT_TRUE(h.Query(7, 0, 0).empty());
}

}  // namespace
}  // namespace flyt::gpu
