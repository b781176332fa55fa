#include "common/strings.h"

#include <gtest/gtest.h>

#include "common/status.h"

namespace flyt {
namespace {

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
}

TEST(StringsTest, ReadFileNamesTheMissingPath) {
  auto r = ReadFile("/nonexistent/flyt/file");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/flyt/file"), std::string::npos);
}

}  // namespace
}  // namespace flyt
