// SimAddressSpace (sim_address_space.h): first-fit allocation, alignment, exact reservation,
// overlap refused, release with coalescing, the space's bounds, and concurrent use.
#include "remote_sim/sim_address_space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace flyt::remote::sim_internal {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(SimAddressSpaceTest, AllocatesFirstFitFromTheBase) {
  SimAddressSpace space;
  auto a = space.Allocate(100);
  auto b = space.Allocate(1000);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, SimAddressSpace::kBase);
  EXPECT_EQ(*b, SimAddressSpace::kBase + 256);  // 100 bytes take 256
  EXPECT_EQ(space.free_bytes(), SimAddressSpace::kSize - 256 - 1024);
}

TEST(SimAddressSpaceTest, AlignsSmallTo256AndLargeTo2MiB) {
  SimAddressSpace space;
  auto small = space.Allocate(1);
  auto large = space.Allocate(2 * kMiB);
  auto small2 = space.Allocate(300);
  auto large2 = space.Allocate(3 * kMiB + 5);
  ASSERT_TRUE(small && large && small2 && large2);
  EXPECT_EQ(*small % 256, 0u);
  EXPECT_EQ(*large % (2 * kMiB), 0u);
  EXPECT_EQ(*large, SimAddressSpace::kBase + 2 * kMiB);  // the gap after `small` is left
  EXPECT_EQ(*small2, SimAddressSpace::kBase + 256);      // and filled by the next small one
  EXPECT_EQ(*large2 % (2 * kMiB), 0u);
  EXPECT_EQ(*large2, SimAddressSpace::kBase + 4 * kMiB);
  // Sizes just under 2 MiB are small: 256-byte aligned, right after large2 (3 MiB + 256 bytes
  // long), the gap before `large` being too short.
  auto under = space.Allocate(2 * kMiB - 1);
  ASSERT_TRUE(under);
  EXPECT_EQ(*under, *large2 + 3 * kMiB + 256);
  EXPECT_NE(*under % (2 * kMiB), 0u);
  // And a small one still fits in that gap.
  EXPECT_EQ(space.Allocate(1024), SimAddressSpace::kBase + 256 + 512);
}

TEST(SimAddressSpaceTest, ReleaseCoalescesWithBothNeighbours) {
  SimAddressSpace space;
  auto a = space.Allocate(256);
  auto b = space.Allocate(256);
  auto c = space.Allocate(256);
  auto d = space.Allocate(256);
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(space.free_ranges(), 1u);  // the tail
  space.Release(*a, 256);
  space.Release(*c, 256);
  EXPECT_EQ(space.free_ranges(), 3u);  // a, c, the tail
  space.Release(*b, 256);              // joins a and c
  EXPECT_EQ(space.free_ranges(), 2u);
  space.Release(*d, 256);  // joins a..c and the tail
  EXPECT_EQ(space.free_ranges(), 1u);
  EXPECT_EQ(space.free_bytes(), SimAddressSpace::kSize);
  // All one range again: the next allocation is at the base.
  EXPECT_EQ(space.Allocate(4 * kMiB), SimAddressSpace::kBase);
}

TEST(SimAddressSpaceTest, FreedRangesAreReusedFirstFit) {
  SimAddressSpace space;
  auto a = space.Allocate(1024);
  auto b = space.Allocate(1024);
  ASSERT_TRUE(a && b);
  space.Release(*a, 1024);
  EXPECT_EQ(space.Allocate(512), *a);
  EXPECT_EQ(space.Allocate(512), *a + 512);
  EXPECT_EQ(space.Allocate(512), *b + 1024);
}

TEST(SimAddressSpaceTest, ReservesExactlyTheRangeAsked) {
  SimAddressSpace space;
  const uint64_t at = SimAddressSpace::kBase + 10 * kMiB + 768;
  ASSERT_TRUE(space.Reserve(at, 1000));
  EXPECT_EQ(space.free_bytes(), SimAddressSpace::kSize - 1024);
  EXPECT_EQ(space.free_ranges(), 2u);
  // Allocation goes around it.
  auto a = space.Allocate(256);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, SimAddressSpace::kBase);
  // Right after it is free, right before it too.
  EXPECT_TRUE(space.Reserve(at + 1024, 256));
  EXPECT_TRUE(space.Reserve(at - 256, 256));
  space.Release(at, 1000);
  EXPECT_TRUE(space.Reserve(at, 1024));
}

TEST(SimAddressSpaceTest, RefusesOverlapsAndLeavesNothingTaken) {
  SimAddressSpace space;
  const uint64_t at = SimAddressSpace::kBase + 4 * kMiB;
  ASSERT_TRUE(space.Reserve(at, 4096));
  const uint64_t free_before = space.free_bytes();
  EXPECT_FALSE(space.Reserve(at, 4096));            // the same range
  EXPECT_FALSE(space.Reserve(at + 1024, 256));      // inside it
  EXPECT_FALSE(space.Reserve(at - 256, 512));       // its start
  EXPECT_FALSE(space.Reserve(at + 4096 - 256, 512));  // its end
  EXPECT_FALSE(space.Reserve(at - kMiB, 2 * kMiB + 8192));  // all of it and more
  EXPECT_EQ(space.free_bytes(), free_before);
  // An allocated range is taken just the same.
  auto a = space.Allocate(512);
  ASSERT_TRUE(a);
  EXPECT_FALSE(space.Reserve(*a, 256));
}

TEST(SimAddressSpaceTest, RefusesMisalignedAndOutOfSpaceAddresses) {
  SimAddressSpace space;
  EXPECT_FALSE(space.Reserve(SimAddressSpace::kBase + 128, 256));   // not 256-aligned
  EXPECT_FALSE(space.Reserve(SimAddressSpace::kBase - 256, 256));   // below the space
  EXPECT_FALSE(space.Reserve(0x7f0000001000, 256));                 // a host address
  const uint64_t end = SimAddressSpace::kBase + SimAddressSpace::kSize;
  EXPECT_FALSE(space.Reserve(end, 256));             // past the end
  EXPECT_FALSE(space.Reserve(end - 256, 512));       // runs past the end
  EXPECT_TRUE(space.Reserve(end - 256, 256));        // the last 256 bytes
  EXPECT_FALSE(space.Reserve(SimAddressSpace::kBase, UINT64_MAX));  // no overflow
  EXPECT_FALSE(space.Allocate(UINT64_MAX));
  EXPECT_EQ(space.free_bytes(), SimAddressSpace::kSize - 256);
}

TEST(SimAddressSpaceTest, ASmallSpaceRunsOutAndRecovers) {
  SimAddressSpace space(SimAddressSpace::kBase, 4 * kMiB);
  auto a = space.Allocate(2 * kMiB);
  auto b = space.Allocate(2 * kMiB);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(space.Allocate(256));
  EXPECT_EQ(space.free_bytes(), 0u);
  space.Release(*a, 2 * kMiB);
  EXPECT_EQ(space.Allocate(256), *a);
}

TEST(SimAddressSpaceTest, AllocationStartsAtTheOriginAndWrapsRound) {
  const uint64_t base = SimAddressSpace::kBase;
  SimAddressSpace space(base, 8 * kMiB, base + 4 * kMiB + 12345);
  EXPECT_EQ(space.origin(), base + 4 * kMiB);  // rounded down to 2 MiB
  EXPECT_EQ(space.Allocate(256), base + 4 * kMiB);
  EXPECT_EQ(space.Allocate(2 * kMiB), base + 6 * kMiB);
  // Above the origin is full (but for 2 MiB - 256 bytes): the next large one wraps to the base.
  EXPECT_EQ(space.Allocate(2 * kMiB), base);
  EXPECT_EQ(space.Allocate(1024), base + 4 * kMiB + 256);  // small ones still fit above
  // Reserve is not bound to the origin.
  EXPECT_TRUE(space.Reserve(base + 2 * kMiB, 4096));
  EXPECT_EQ(space.Allocate(2 * kMiB), std::nullopt);
  // An origin outside the space is the base.
  SimAddressSpace outside(base, 8 * kMiB, base + 64 * kMiB);
  EXPECT_EQ(outside.origin(), base);
}

TEST(SimAddressSpaceTest, ADoubleReleaseIsIgnored) {
  SimAddressSpace space;
  auto a = space.Allocate(512);
  auto b = space.Allocate(512);
  ASSERT_TRUE(a && b);
  space.Release(*a, 512);
  const uint64_t free_before = space.free_bytes();
  space.Release(*a, 512);
  space.Release(*a + 256, 512);  // half free, half b's
  EXPECT_EQ(space.free_bytes(), free_before);
  EXPECT_FALSE(space.Reserve(*b, 512));
}

TEST(SimAddressSpaceTest, ThreadsGetDisjointRanges) {
  SimAddressSpace space;
  constexpr int kThreads = 4;
  constexpr int kEach = 500;
  struct Held {
    uint64_t address;
    uint64_t bytes;
  };
  std::vector<std::vector<Held>> held(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&space, &mine = held[t]] {
      for (int i = 0; i < kEach; ++i) {
        const uint64_t bytes = 256 * (1 + i % 3);
        if (auto a = space.Allocate(bytes)) mine.push_back({*a, bytes});
        if (i % 4 == 3) {  // give one back now and then
          space.Release(mine.back().address, mine.back().bytes);
          mine.pop_back();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // No two ranges held overlap, and what is held is what is missing from the space.
  std::vector<Held> all;
  uint64_t held_bytes = 0;
  for (const auto& v : held) {
    all.insert(all.end(), v.begin(), v.end());
    for (const Held& h : v) held_bytes += h.bytes;
  }
  std::sort(all.begin(), all.end(), [](const Held& x, const Held& y) { return x.address < y.address; });
  for (size_t i = 1; i < all.size(); ++i) {
    ASSERT_GE(all[i].address, all[i - 1].address + all[i - 1].bytes) << i;
  }
  EXPECT_EQ(all.size(), size_t{kThreads} * (kEach - kEach / 4));
  EXPECT_EQ(space.free_bytes(), SimAddressSpace::kSize - held_bytes);
}

}  // namespace
}  // namespace flyt::remote::sim_internal
