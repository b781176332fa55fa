#include "remote/address_ranges.h"

#include <gtest/gtest.h>

namespace flyt::remote {
namespace {

TEST(AddressRangesTest, FindsTheRangeHoldingAnAddress) {
  AddressRanges<int> ranges;
  ASSERT_TRUE(ranges.Add(0x1000, 0x100, 1));
  ASSERT_TRUE(ranges.Add(0x2000, 0x10, 2));
  EXPECT_EQ(ranges.Find(0x1000)->value, 1);
  EXPECT_EQ(ranges.Find(0x10FF)->value, 1);
  EXPECT_FALSE(ranges.Find(0x1100));
  EXPECT_FALSE(ranges.Find(0xFFF));
  EXPECT_EQ(ranges.Find(0x200F)->base, 0x2000u);
  EXPECT_FALSE(ranges.Find(0x2010));
}

TEST(AddressRangesTest, ContainsNeedsTheWholeSpanInOneRange) {
  AddressRanges<int> ranges;
  ASSERT_TRUE(ranges.Add(0x1000, 0x100));
  ASSERT_TRUE(ranges.Add(0x1100, 0x100));  // adjacent, not merged
  EXPECT_TRUE(ranges.Contains(0x1000, 0x100));
  EXPECT_TRUE(ranges.Contains(0x1080, 0x80));
  EXPECT_FALSE(ranges.Contains(0x1080, 0x81));  // crosses into the next allocation
  EXPECT_FALSE(ranges.Contains(0x10FF, ~uint64_t{0}));  // would wrap
  EXPECT_TRUE(ranges.Contains(0x10FF, 0));
  EXPECT_FALSE(ranges.Contains(0x3000, 0));
}

TEST(AddressRangesTest, RefusesEmptyWrappingAndOverlappingRanges) {
  AddressRanges<int> ranges;
  EXPECT_FALSE(ranges.Add(0x1000, 0));
  EXPECT_FALSE(ranges.Add(~uint64_t{0} - 4, 16));
  ASSERT_TRUE(ranges.Add(0x1000, 0x100));
  EXPECT_FALSE(ranges.Add(0x10F0, 0x20));
  EXPECT_FALSE(ranges.Add(0x0F00, 0x101));
  EXPECT_FALSE(ranges.Add(0x1000, 1));
  EXPECT_TRUE(ranges.Add(0x0F00, 0x100));
  EXPECT_EQ(ranges.size(), 2u);
}

TEST(AddressRangesTest, RemoveOnlyByExactBase) {
  AddressRanges<int> ranges;
  ASSERT_TRUE(ranges.Add(0x1000, 0x100, 7));
  EXPECT_FALSE(ranges.Remove(0x1001));
  auto removed = ranges.Remove(0x1000);
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->size, 0x100u);
  EXPECT_EQ(removed->value, 7);
  EXPECT_TRUE(ranges.empty());
}

}  // namespace
}  // namespace flyt::remote
