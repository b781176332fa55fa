#include "remote/arena_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace flyt::remote {
namespace {

constexpr uint64_t kPage = ArenaAllocator::kAlignment;

TEST(ArenaAllocatorTest, RoundsToPagesAndRefusesWhenFull) {
  ArenaAllocator arena(4 * kPage + 100);  // the partial page is not usable
  EXPECT_EQ(arena.bytes(), 4 * kPage);
  auto a = arena.Allocate(1);
  auto b = arena.Allocate(kPage + 1);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, kPage);
  EXPECT_EQ(arena.BlockSize(*b), 2 * kPage);
  EXPECT_EQ(arena.used_bytes(), 3 * kPage);
  EXPECT_FALSE(arena.Allocate(2 * kPage));
  EXPECT_TRUE(arena.Allocate(kPage));
  EXPECT_FALSE(arena.Allocate(1));
  EXPECT_FALSE(arena.Allocate(UINT64_MAX));
}

TEST(ArenaAllocatorTest, FreeMergesNeighboursAndRejectsUnknownOffsets) {
  ArenaAllocator arena(8 * kPage);
  auto a = arena.Allocate(2 * kPage);
  auto b = arena.Allocate(2 * kPage);
  auto c = arena.Allocate(2 * kPage);
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(arena.Free(*a + 1));
  EXPECT_TRUE(arena.Free(*a));
  EXPECT_FALSE(arena.Free(*a));  // twice
  EXPECT_TRUE(arena.Free(*c));
  EXPECT_TRUE(arena.Free(*b));  // merges with both sides and the tail
  EXPECT_EQ(arena.free_blocks(), 1u);
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_TRUE(arena.Allocate(8 * kPage));
}

TEST(ArenaAllocatorTest, RandomWorkloadNeverOverlaps) {
  ArenaAllocator arena(256 * kPage);
  std::mt19937 rng(7);
  std::vector<std::pair<uint64_t, uint64_t>> live;
  for (int i = 0; i < 5000; ++i) {
    if (!live.empty() && (rng() % 2 == 0)) {
      size_t k = rng() % live.size();
      ASSERT_TRUE(arena.Free(live[k].first));
      live.erase(live.begin() + k);
      continue;
    }
    uint64_t want = 1 + rng() % (8 * kPage);
    auto got = arena.Allocate(want);
    if (!got) continue;
    uint64_t size = arena.BlockSize(*got);
    ASSERT_GE(size, want);
    ASSERT_LE(*got + size, arena.bytes());
    for (const auto& [off, n] : live) ASSERT_TRUE(*got + size <= off || off + n <= *got);
    live.emplace_back(*got, size);
  }
  for (const auto& [off, n] : live) ASSERT_TRUE(arena.Free(off));
  EXPECT_EQ(arena.free_blocks(), 1u);
}

}  // namespace
}  // namespace flyt::remote
