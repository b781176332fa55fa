#include "common/json_fields.h"

#include <gtest/gtest.h>

#include <limits>

namespace flyt {
namespace {

using nlohmann::json;

// The error a getter gave: InvalidArgument, naming the field.
::testing::AssertionResult RefusedNaming(const Status& s, const std::string& field) {
  if (s.ok()) return ::testing::AssertionFailure() << "accepted";
  if (s.code() != StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "not InvalidArgument: " << s.ToString();
  }
  if (s.message().rfind(field + " ", 0) != 0) {
    return ::testing::AssertionFailure()
           << "does not begin with '" << field << "': " << s.message();
  }
  return ::testing::AssertionSuccess();
}

TEST(JsonFieldsTest, UnknownFieldsAreNamedWithTheExpectedOnes) {
  json j = {{"a", 1}, {"colour", "red"}};
  JsonFields f(j);
  EXPECT_TRUE(f.Only({"a", "colour"}).ok());
  Status s = f.Only({"a", "b"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "unknown field 'colour' (expected a, b)");
}

TEST(JsonFieldsTest, AbsentAndNullKeepTheDefaultOrAreMissing) {
  json j = {{"n", nullptr}};
  JsonFields f(j);
  EXPECT_FALSE(f.Has("n"));
  EXPECT_FALSE(f.Has("x"));
  std::string s = "default";
  ASSERT_TRUE(f.OptionalString("n", 10, s).ok());
  EXPECT_EQ(s, "default");
  int64_t i = 7;
  ASSERT_TRUE(f.OptionalInt<int64_t>("x", 0, 10, i).ok());
  EXPECT_EQ(i, 7);
  auto r = f.RequiredString("n", 10);
  EXPECT_TRUE(RefusedNaming(r.status(), "n"));
  EXPECT_EQ(r.status().message(), "n is missing");
  EXPECT_TRUE(RefusedNaming(f.RequiredInt<int>("x", 0, 1).status(), "x"));
  EXPECT_TRUE(RefusedNaming(f.RequiredBool("x").status(), "x"));
  EXPECT_TRUE(RefusedNaming(f.RequiredNumber("x", 0, 1).status(), "x"));
  EXPECT_TRUE(RefusedNaming(f.RequiredArray("x", 1).status(), "x"));
  EXPECT_TRUE(RefusedNaming(f.RequiredObject("x").status(), "x"));
  EXPECT_TRUE(RefusedNaming(f.RequiredEnum("x", {"a"}).status(), "x"));
}

TEST(JsonFieldsTest, StringsAreBoundedAndTyped) {
  json j = {{"name", "abc"}, {"long", std::string(11, 'x')}, {"num", 5}};
  JsonFields f(j);
  auto name = f.RequiredString("name", 3);
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(*name, "abc");
  std::string out;
  EXPECT_TRUE(RefusedNaming(f.OptionalString("long", 10, out), "long"));
  EXPECT_TRUE(RefusedNaming(f.OptionalString("num", 10, out), "num"));
  EXPECT_EQ(out, "");
}

TEST(JsonFieldsTest, BoolsAreOnlyTrueOrFalse) {
  json j = {{"yes", true}, {"one", 1}, {"text", "true"}};
  JsonFields f(j);
  bool b = false;
  ASSERT_TRUE(f.OptionalBool("yes", b).ok());
  EXPECT_TRUE(b);
  EXPECT_TRUE(RefusedNaming(f.OptionalBool("one", b), "one"));
  EXPECT_TRUE(RefusedNaming(f.OptionalBool("text", b), "text"));
}

TEST(JsonFieldsTest, IntegersAreCheckedAgainstTheRangeAndTheType) {
  json j = json::parse(R"({"ok": 42, "neg": -3, "huge": 18446744073709551615, "half": 1.5,
                           "whole_float": 2.0, "text": "4", "big": 9223372036854775807})");
  JsonFields f(j);
  int64_t i = 0;
  ASSERT_TRUE(f.OptionalInt<int64_t>("ok", -100, 100, i).ok());
  EXPECT_EQ(i, 42);
  ASSERT_TRUE(f.OptionalInt<int64_t>("neg", -100, 100, i).ok());
  EXPECT_EQ(i, -3);
  // 2^64-1 is not -1 to a signed field, whatever its range.
  Status s = f.OptionalInt<int64_t>("huge", -1000, 1000, i);
  EXPECT_TRUE(RefusedNaming(s, "huge"));
  EXPECT_EQ(s.message(), "huge must be an integer from -1000 to 1000");
  EXPECT_TRUE(RefusedNaming(f.OptionalInt<int64_t>("huge", std::numeric_limits<int64_t>::min(),
                                                   std::numeric_limits<int64_t>::max(), i),
                            "huge"));
  ASSERT_TRUE(f.OptionalInt<int64_t>("big", 0, std::numeric_limits<int64_t>::max(), i).ok());
  EXPECT_EQ(i, std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(RefusedNaming(f.OptionalInt<int64_t>("half", 0, 10, i), "half"));
  EXPECT_TRUE(RefusedNaming(f.OptionalInt<int64_t>("whole_float", 0, 10, i), "whole_float"));
  EXPECT_TRUE(RefusedNaming(f.OptionalInt<int64_t>("text", 0, 10, i), "text"));
  EXPECT_TRUE(RefusedNaming(f.OptionalInt<int64_t>("ok", 0, 41, i), "ok"));
  EXPECT_TRUE(RefusedNaming(f.OptionalInt<int64_t>("neg", 0, 10, i), "neg"));
  EXPECT_EQ(i, std::numeric_limits<int64_t>::max());  // unchanged by the refusals

  // Unsigned fields take the whole range and refuse negatives.
  uint64_t u = 0;
  ASSERT_TRUE(f.OptionalInt<uint64_t>("huge", 0, std::numeric_limits<uint64_t>::max(), u).ok());
  EXPECT_EQ(u, 18446744073709551615ULL);
  EXPECT_TRUE(RefusedNaming(f.OptionalInt<uint64_t>("neg", 0, 10, u), "neg"));
  uint32_t small = 0;
  EXPECT_TRUE(RefusedNaming(f.OptionalInt<uint32_t>("huge", 0, 100, small), "huge"));
  auto req = f.RequiredInt<int>("ok", 1, 64);
  ASSERT_TRUE(req.ok());
  EXPECT_EQ(*req, 42);
}

TEST(JsonFieldsTest, NumbersTakeFractionsAndRefuseTheRest) {
  json j = {{"x", 0.5}, {"i", 3}, {"s", "1"}, {"big", 1e9}};
  JsonFields f(j);
  double d = 0;
  ASSERT_TRUE(f.OptionalNumber("x", 0, 1, d).ok());
  EXPECT_DOUBLE_EQ(d, 0.5);
  ASSERT_TRUE(f.OptionalNumber("i", 0, 10, d).ok());
  EXPECT_DOUBLE_EQ(d, 3);
  EXPECT_TRUE(RefusedNaming(f.OptionalNumber("s", 0, 10, d), "s"));
  Status s = f.OptionalNumber("big", 0, 1e8, d);
  EXPECT_TRUE(RefusedNaming(s, "big"));
  EXPECT_EQ(s.message(), "big must be a number from 0 to 100000000");
}

TEST(JsonFieldsTest, ArraysAndObjectsAreTyped) {
  json j = {{"list", {1, 2, 3}}, {"obj", {{"k", 1}}}, {"str", "x"}};
  JsonFields f(j);
  const json* list = nullptr;
  ASSERT_TRUE(f.OptionalArray("list", 3, list).ok());
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(list->size(), 3u);
  EXPECT_TRUE(RefusedNaming(f.OptionalArray("list", 2, list), "list"));
  EXPECT_EQ(f.OptionalArray("list", 2, list).message(), "list must be an array of at most 2 items");
  EXPECT_EQ(f.OptionalArray("str", 2, list).message(), "str must be an array");
  EXPECT_TRUE(RefusedNaming(f.OptionalArray("obj", 10, list), "obj"));
  auto obj = f.RequiredObject("obj");
  ASSERT_TRUE(obj.ok());
  EXPECT_EQ((**obj)["k"], 1);
  EXPECT_TRUE(RefusedNaming(f.RequiredObject("str").status(), "str"));
  const json* none = nullptr;
  ASSERT_TRUE(f.OptionalObject("absent", none).ok());
  EXPECT_EQ(none, nullptr);
}

TEST(JsonFieldsTest, NestedObjectsNameTheirFieldsWithThePath) {
  json j = {{"scheduling", {{"priority", 2000}, {"extra", 1}}}, {"bad", 3}};
  JsonFields f(j);
  auto nested = f.OptionalFields("scheduling");
  ASSERT_TRUE(nested.ok());
  int64_t p = 0;
  EXPECT_TRUE(RefusedNaming(nested->OptionalInt<int64_t>("priority", -1000, 1000, p),
                            "scheduling.priority"));
  EXPECT_EQ(nested->Only({"priority"}).message(),
            "unknown field 'scheduling.extra' (expected priority)");
  EXPECT_TRUE(RefusedNaming(f.OptionalFields("bad").status(), "bad"));
  auto absent = f.OptionalFields("absent");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->Has("priority"));
  EXPECT_TRUE(RefusedNaming(JsonFields::Of(json::array(), "body").status(), "body"));
  EXPECT_TRUE(JsonFields::Of(json::object(), "body").ok());
}

TEST(JsonFieldsTest, EnumsComeFromTheList) {
  json j = {{"policy", "spread"}, {"other", "fifo"}, {"num", 1}};
  JsonFields f(j);
  std::string policy = "score";
  ASSERT_TRUE(f.OptionalEnum("policy", {"score", "binpack", "spread"}, policy).ok());
  EXPECT_EQ(policy, "spread");
  Status s = f.OptionalEnum("other", {"score", "binpack", "spread"}, policy);
  EXPECT_TRUE(RefusedNaming(s, "other"));
  EXPECT_EQ(s.message(), "other must be score, binpack or spread");
  EXPECT_TRUE(RefusedNaming(f.OptionalEnum("num", {"a", "b"}, policy), "num"));
  EXPECT_EQ(policy, "spread");
}

TEST(JsonFieldsTest, StringMapsAreBoundedPerEntry) {
  json j = {
      {"labels", {{"team", "ml"}, {"zone", "a"}}}, {"numbers", {{"team", 1}}}, {"list", {"a"}}};
  JsonFields f(j);
  std::map<std::string, std::string> labels;
  ASSERT_TRUE(f.OptionalStringMap("labels", 64, 128, 1024, labels).ok());
  EXPECT_EQ(labels.at("team"), "ml");
  EXPECT_EQ(labels.size(), 2u);
  std::map<std::string, std::string> none;
  EXPECT_TRUE(RefusedNaming(f.OptionalStringMap("labels", 1, 128, 1024, none), "labels"));
  EXPECT_TRUE(RefusedNaming(f.OptionalStringMap("numbers", 64, 128, 1024, none), "numbers.team"));
  EXPECT_TRUE(RefusedNaming(f.OptionalStringMap("list", 64, 128, 1024, none), "list"));
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace flyt
