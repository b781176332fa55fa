#include "common/status.h"

#include <gtest/gtest.h>

namespace flyt {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  FLYT_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(StatusTest, OkAndErrorsRenderForPeople) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = NotFound("gpu 9 does not exist").WithContext("flytctl");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: flytctl: gpu 9 does not exist");
}

TEST(StatusTest, ResultPropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "3 is odd");
}

TEST(StatusTest, ErrnoErrorNamesContextAndCause) {
  Status s = ErrnoError("open /nope", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "open /nope: No such file or directory");
}

TEST(StatusTest, ReasonTravelsWithContextAndNeverMakesOkAnError) {
  const Status s = NotFound("job j-1").WithReason("already_ended");
  EXPECT_EQ(s.reason(), "already_ended");
  const Status wrapped = s.WithContext("cancel");
  EXPECT_EQ(wrapped.reason(), "already_ended");
  EXPECT_EQ(wrapped.message(), "cancel: job j-1");
  EXPECT_TRUE(Status::Ok().WithReason("x").ok());
  EXPECT_EQ(Status::Ok().WithReason("x").reason(), "");
  EXPECT_EQ(Internal("boom").reason(), "");
}

}  // namespace
}  // namespace flyt
