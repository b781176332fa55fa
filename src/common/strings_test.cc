#include "common/strings.h"

#include <gtest/gtest.h>

#include "common/status.h"

namespace flyt {
namespace {

TEST(StringsTest, FormatHostPortBracketsIpv6AndParsesBack) {
  EXPECT_EQ(FormatHostPort("127.0.0.1", 12500), "127.0.0.1:12500");
  EXPECT_EQ(FormatHostPort("::1", 12401), "[::1]:12401");
  auto back = ParseHostPort(FormatHostPort("::1", 12401));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->first, "::1");
  EXPECT_EQ(back->second, 12401);
}

TEST(StringsTest, SplitKeepsEmptyFields) {
  auto parts = Split("a,,b,", ',');
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0], "a");
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(parts[3], "");
}

TEST(StringsTest, NumbersMustBeWhole) {
  EXPECT_EQ(ParseInt(" 42 "), 42);
  EXPECT_EQ(ParseInt("-7"), -7);
  EXPECT_FALSE(ParseInt("42abc"));
  EXPECT_FALSE(ParseInt(""));
  EXPECT_FALSE(ParseUint("-1"));
  EXPECT_EQ(ParseUint("18446744073709551615"), 18446744073709551615ULL);
  EXPECT_FALSE(ParseUint("18446744073709551616"));  // overflow is not a number
  EXPECT_DOUBLE_EQ(*ParseDouble("61.25"), 61.25);
  EXPECT_FALSE(ParseDouble("[N/A]"));
  EXPECT_FALSE(ParseDouble("nan"));
  EXPECT_FALSE(ParseDouble("inf"));
  EXPECT_FALSE(ParseDouble("-inf"));
  EXPECT_FALSE(ParseDouble("1e999"));  // out of range
}

TEST(StringsTest, SanitizeUtf8KeepsValidTextAndReplacesTheRest) {
  EXPECT_EQ(SanitizeUtf8("python3 caf\xc3\xa9.py \xe2\x82\xac \xf0\x9f\x98\x80"),
            "python3 caf\xc3\xa9.py \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(SanitizeUtf8("caf\xe9"), "caf\xef\xbf\xbd");            // Latin-1
  EXPECT_EQ(SanitizeUtf8("\xff\xfe"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(SanitizeUtf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");  // overlong '/'
  EXPECT_EQ(SanitizeUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  EXPECT_EQ(SanitizeUtf8("ab\xe2\x82"), "ab\xef\xbf\xbd\xef\xbf\xbd");  // truncated
}

TEST(StringsTest, ReadFileRefusesDevicesAndOversizedFiles) {
  auto dev = ReadFile("/dev/zero");  // would never end
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.status().message().find("not a regular file"), std::string::npos);
  auto big = ReadFile("/proc/self/exe", 1024);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("larger than 1024 bytes"), std::string::npos);
}

TEST(StringsTest, ReadFileNamesTheMissingPath) {
  auto r = ReadFile("/nonexistent/flyt/file");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/flyt/file"), std::string::npos);
}

}  // namespace
}  // namespace flyt
