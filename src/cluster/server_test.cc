#include "cluster/server.h"

#include <gtest/gtest.h>

namespace flyt::cluster {
namespace {

Status Refusal(StatusCode code, const std::string& reason) {
  return Status(code, "refused").WithReason(reason);
}

TEST(HttpStatusOfTest, TheReasonsOfTheApiVocabulary) {
  EXPECT_EQ(HttpStatusOf(Refusal(StatusCode::kResourceExhausted, "insufficient_gpus")), 409);
  EXPECT_EQ(HttpStatusOf(Refusal(StatusCode::kResourceExhausted, "never_fits")), 409);
  // A job that can never fit may come as an invalid argument: its reason still decides.
  EXPECT_EQ(HttpStatusOf(Refusal(StatusCode::kInvalidArgument, "never_fits")), 409);
  EXPECT_EQ(HttpStatusOf(Refusal(StatusCode::kFailedPrecondition, "already_ended")), 409);
  EXPECT_EQ(HttpStatusOf(Refusal(StatusCode::kResourceExhausted, "too_many_queued")), 429);
  EXPECT_EQ(HttpStatusOf(Refusal(StatusCode::kInvalidArgument, "payload_too_large")), 413);
  EXPECT_EQ(HttpStatusOf(Refusal(StatusCode::kUnavailable, "store_unavailable")), 503);
  EXPECT_EQ(HttpStatusOf(Refusal(StatusCode::kInternal, "store_unavailable")), 503);
}

TEST(HttpStatusOfTest, WithoutAReasonAsBefore) {
  // What the ledger cannot meet now conflicts with its state: 409, not a rate limit.
  EXPECT_EQ(HttpStatusOf(Status(StatusCode::kResourceExhausted, "no 4 GPUs")), 409);
  EXPECT_EQ(HttpStatusOf(Status(StatusCode::kFailedPrecondition, "job ended")), 409);
  EXPECT_EQ(HttpStatusOf(AlreadyExists("x")), 409);
  EXPECT_EQ(HttpStatusOf(InvalidArgument("x")), 400);
  EXPECT_EQ(HttpStatusOf(NotFound("x")), 404);
  EXPECT_EQ(HttpStatusOf(PermissionDenied("x")), 403);
  EXPECT_EQ(HttpStatusOf(Unavailable("x")), 503);
  EXPECT_EQ(HttpStatusOf(Internal("x")), 500);
  // A reason outside the vocabulary does not change the status.
  EXPECT_EQ(HttpStatusOf(Refusal(StatusCode::kNotFound, "no_such_job")), 404);
}

}  // namespace
}  // namespace flyt::cluster
