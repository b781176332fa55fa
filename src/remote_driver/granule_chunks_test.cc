// GranuleChunks: placing allocations at arbitrary addresses in granule-sized chunks, as the
// driver backend's MallocAt does for a migrated client's memory.
#include "remote_driver/granule_chunks.h"

#include <gtest/gtest.h>

#include <string>

namespace flyt::remote {
namespace {

constexpr uint64_t kG = 2 << 20;
using Chunks = GranuleChunks<std::string>;

// Places [address, address + bytes) and makes a chunk for each planned run, named by its base.
bool Place(Chunks& c, uint64_t address, uint64_t bytes, std::vector<Chunks::Run>* made = nullptr) {
  auto runs = c.Plan(address, bytes);
  if (!runs) return false;
  std::vector<std::string> payloads;
  for (const auto& r : *runs) payloads.push_back("chunk@" + std::to_string(r.base / kG));
  c.Commit(address, bytes, *runs, payloads);
  if (made) *made = *runs;
  return true;
}

TEST(GranuleChunksTest, AnAlignedAllocationIsOneChunkOfItsOwnSize) {
  Chunks c(kG);
  std::vector<Chunks::Run> made;
  ASSERT_TRUE(Place(c, 10 * kG, 3 * kG, &made));
  ASSERT_EQ(made.size(), 1u);
  EXPECT_EQ(made[0].base, 10 * kG);
  EXPECT_EQ(made[0].bytes, 3 * kG);
  std::vector<Chunks::Chunk> released;
  ASSERT_TRUE(c.Remove(10 * kG, released));
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].payload, "chunk@10");
  EXPECT_EQ(c.chunks(), 0u);
}

// Small allocations that cuMemAlloc put inside one granule (the common case): the first makes
// the granule's chunk, the others use it, and it goes with the last of them.
TEST(GranuleChunksTest, SmallAllocationsInOneGranuleShareItsChunk) {
  Chunks c(kG);
  std::vector<Chunks::Run> made;
  ASSERT_TRUE(Place(c, 4 * kG + 512, 4096, &made));
  ASSERT_EQ(made.size(), 1u);
  EXPECT_EQ(made[0].base, 4 * kG);
  EXPECT_EQ(made[0].bytes, kG);
  ASSERT_TRUE(Place(c, 4 * kG + 8192, 1 << 20, &made));
  EXPECT_TRUE(made.empty());
  EXPECT_EQ(c.chunks(), 1u);
  std::vector<Chunks::Chunk> released;
  ASSERT_TRUE(c.Remove(4 * kG + 512, released));
  EXPECT_TRUE(released.empty());
  ASSERT_TRUE(c.Remove(4 * kG + 8192, released));
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].base, 4 * kG);
}

// An allocation that reaches into a chunk another one holds: only the granules not covered are
// made, and the shared chunk counts both users.
TEST(GranuleChunksTest, AnAllocationReachingIntoAChunkMakesOnlyTheMissingGranules) {
  Chunks c(kG);
  ASSERT_TRUE(Place(c, 4 * kG + 10, kG));          // chunk [4G, 6G)
  ASSERT_TRUE(Place(c, 5 * kG + 100, 100));        // in it
  std::vector<Chunks::Chunk> released;
  ASSERT_TRUE(c.Remove(4 * kG + 10, released));   // the chunk stays for the second
  EXPECT_TRUE(released.empty());
  std::vector<Chunks::Run> made;
  ASSERT_TRUE(Place(c, 2 * kG + 7, 2 * kG + 50, &made));  // [2G+7, 4G+57): granules 2..4
  ASSERT_EQ(made.size(), 1u);
  EXPECT_EQ(made[0].base, 2 * kG);
  EXPECT_EQ(made[0].bytes, 2 * kG);
  ASSERT_TRUE(Place(c, 5 * kG + 4096, 3 * kG, &made));  // [5G+4096, 8G+4096): granules 5..8
  ASSERT_EQ(made.size(), 1u);
  EXPECT_EQ(made[0].base, 6 * kG);
  EXPECT_EQ(made[0].bytes, 3 * kG);
  EXPECT_EQ(c.chunks(), 3u);
  ASSERT_TRUE(c.Remove(5 * kG + 100, released));
  EXPECT_TRUE(released.empty());  // [4G, 6G) still serves both neighbours
  ASSERT_TRUE(c.Remove(2 * kG + 7, released));
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].payload, "chunk@2");
  ASSERT_TRUE(c.Remove(5 * kG + 4096, released));
  EXPECT_EQ(released.size(), 3u);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.chunks(), 0u);
}

TEST(GranuleChunksTest, OverlapsEmptyAndWrappingRangesAreRefused) {
  Chunks c(kG);
  ASSERT_TRUE(Place(c, kG + 4096, 8192));
  EXPECT_FALSE(c.Plan(kG + 8192, 16).has_value());      // inside it
  EXPECT_FALSE(c.Plan(kG, 4097).has_value());           // runs into it
  EXPECT_TRUE(c.Plan(kG + 4096 + 8192, 16).has_value());  // just after: the same chunk
  EXPECT_FALSE(c.Plan(kG, 0).has_value());
  EXPECT_FALSE(c.Plan(UINT64_MAX - 10, 100).has_value());
  std::vector<Chunks::Chunk> released;
  EXPECT_FALSE(c.Remove(kG, released));  // not an allocation's start
  auto all = c.TakeAll();
  EXPECT_EQ(all.size(), 1u);
  EXPECT_TRUE(c.empty());
}

}  // namespace
}  // namespace flyt::remote
