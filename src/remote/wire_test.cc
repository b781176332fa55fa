#include "remote/wire.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace flyt::remote {
namespace {

TEST(WireTest, IntegersAreLittleEndianAndRoundTrip) {
  Bytes out;
  Writer w(out);
  w.Put(uint32_t{0x11223344});
  w.Put(int32_t{-2});
  w.Put(uint64_t{0x0102030405060708});
  w.Put(uint8_t{0xAB});
  w.Put(true);
  ASSERT_EQ(out.size(), 4u + 4 + 8 + 1 + 1);
  EXPECT_EQ(out[0], std::byte{0x44});
  EXPECT_EQ(out[3], std::byte{0x11});
  EXPECT_EQ(out[4], std::byte{0xFE});
  EXPECT_EQ(out[7], std::byte{0xFF});

  Reader r(out);
  uint32_t a = 0;
  int32_t b = 0;
  uint64_t c = 0;
  uint8_t d = 0;
  bool e = false;
  ASSERT_TRUE(r.Get(a) && r.Get(b) && r.Get(c) && r.Get(d) && r.Get(e));
  EXPECT_EQ(a, 0x11223344u);
  EXPECT_EQ(b, -2);
  EXPECT_EQ(c, 0x0102030405060708u);
  EXPECT_EQ(d, 0xAB);
  EXPECT_TRUE(e);
  EXPECT_TRUE(r.done());
}

TEST(WireTest, BoolOtherThanZeroOrOneIsMalformed) {
  Bytes in{std::byte{2}};
  Reader r(in);
  bool b = false;
  EXPECT_FALSE(r.Get(b));
  EXPECT_TRUE(r.failed());
}

TEST(WireTest, FloatsKeepEveryBit) {
  Bytes out;
  Writer w(out);
  w.Put(1.5f);
  w.Put(std::numeric_limits<float>::quiet_NaN());
  Reader r(out);
  float x = 0, y = 0;
  ASSERT_TRUE(r.Get(x) && r.Get(y));
  EXPECT_EQ(x, 1.5f);
  EXPECT_TRUE(std::isnan(y));
}

TEST(WireTest, StringsAndBytesAreLengthPrefixed) {
  Bytes out;
  Writer w(out);
  w.Put(std::string("kernel"));
  w.Put(Bytes{std::byte{1}, std::byte{2}});
  Reader r(out);
  std::string s;
  Bytes b;
  ASSERT_TRUE(r.Get(s) && r.Get(b));
  EXPECT_EQ(s, "kernel");
  EXPECT_EQ(b, (Bytes{std::byte{1}, std::byte{2}}));
  EXPECT_TRUE(r.done());
}

TEST(WireTest, TruncatedInputFailsAndStaysFailed) {
  Bytes out;
  Writer w(out);
  w.Put(std::string("abcdef"));
  out.pop_back();
  Reader r(out);
  std::string s;
  EXPECT_FALSE(r.Get(s));
  uint8_t more = 0;
  EXPECT_FALSE(r.Get(more));
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_FALSE(r.done());
}

TEST(WireTest, LyingLengthsCannotAllocate) {
  // A blob claiming 4 GiB in an 8-byte message.
  Bytes in{std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF},
           std::byte{1},    std::byte{2},    std::byte{3},    std::byte{4}};
  {
    Reader r(in);
    Bytes b;
    EXPECT_FALSE(r.Get(b));
  }
  {
    Reader r(in);
    std::vector<uint64_t> v;
    EXPECT_FALSE(Decode(r, v));
    EXPECT_TRUE(v.capacity() < 1000);
  }
}

TEST(WireTest, VectorsRoundTrip) {
  Bytes out;
  Writer w(out);
  std::vector<uint32_t> v{1, 2, 3};
  std::vector<std::string> s{"a", "", "ccc"};
  Encode(w, v);
  Encode(w, s);
  Reader r(out);
  std::vector<uint32_t> v2;
  std::vector<std::string> s2;
  ASSERT_TRUE(Decode(r, v2) && Decode(r, s2));
  EXPECT_EQ(v, v2);
  EXPECT_EQ(s, s2);
  EXPECT_TRUE(r.done());
}

TEST(WireTest, TrailingBytesAreNotDone) {
  Bytes out;
  Writer w(out);
  w.Put(uint16_t{7});
  w.Put(uint8_t{0});
  Reader r(out);
  uint16_t x = 0;
  ASSERT_TRUE(r.Get(x));
  EXPECT_FALSE(r.done());
}

}  // namespace
}  // namespace flyt::remote
