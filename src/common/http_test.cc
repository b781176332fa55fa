#include "common/http.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

namespace flyt::http {
namespace {

using nlohmann::json;

TEST(HttpErrorTest, TheCodeIsTheReasonElseTheStatusCode) {
  EXPECT_EQ(ErrorCode(NotFound("no job job-1")), "not_found");
  EXPECT_EQ(ErrorCode(InvalidArgument("x")), "invalid_argument");
  EXPECT_EQ(ErrorCode(Status(StatusCode::kFailedPrecondition, "x")), "failed_precondition");
  EXPECT_EQ(ErrorCode(Status(StatusCode::kResourceExhausted, "x")), "resource_exhausted");
  EXPECT_EQ(ErrorCode(Unavailable("x")), "unavailable");
  EXPECT_EQ(
      ErrorCode(
          Status(StatusCode::kResourceExhausted, "no 4 GPUs").WithReason("insufficient_gpus")),
      "insufficient_gpus");
}

TEST(HttpErrorTest, TheCodeOfABareHttpStatus) {
  EXPECT_EQ(ErrorCodeForHttpStatus(400), "invalid_argument");
  EXPECT_EQ(ErrorCodeForHttpStatus(401), "unauthenticated");
  EXPECT_EQ(ErrorCodeForHttpStatus(403), "permission_denied");
  EXPECT_EQ(ErrorCodeForHttpStatus(404), "not_found");
  EXPECT_EQ(ErrorCodeForHttpStatus(405), "method_not_allowed");
  EXPECT_EQ(ErrorCodeForHttpStatus(409), "conflict");
  EXPECT_EQ(ErrorCodeForHttpStatus(413), "payload_too_large");
  EXPECT_EQ(ErrorCodeForHttpStatus(414), "invalid_argument");
  EXPECT_EQ(ErrorCodeForHttpStatus(429), "resource_exhausted");
  EXPECT_EQ(ErrorCodeForHttpStatus(500), "internal");
  EXPECT_EQ(ErrorCodeForHttpStatus(502), "unavailable");
  EXPECT_EQ(ErrorCodeForHttpStatus(503), "unavailable");
}

TEST(HttpErrorTest, HttpStatusByStatusCode) {
  EXPECT_EQ(HttpStatus(InvalidArgument("x")), 400);
  EXPECT_EQ(HttpStatus(PermissionDenied("x")), 403);
  EXPECT_EQ(HttpStatus(NotFound("x")), 404);
  EXPECT_EQ(HttpStatus(AlreadyExists("x")), 409);
  EXPECT_EQ(HttpStatus(Status(StatusCode::kFailedPrecondition, "x")), 409);
  EXPECT_EQ(HttpStatus(Status(StatusCode::kResourceExhausted, "x")), 429);
  EXPECT_EQ(HttpStatus(Unavailable("x")), 503);
  EXPECT_EQ(HttpStatus(NotSupported("x")), 501);
  EXPECT_EQ(HttpStatus(Internal("x")), 500);
}

TEST(HttpErrorTest, AnErrorBodyHasTheMessageAndTheCode) {
  httplib::Response res;
  SendError(res, 409,
            Status(StatusCode::kFailedPrecondition, "job job-1 has already ended")
                .WithReason("already_ended"));
  EXPECT_EQ(res.status, 409);
  EXPECT_EQ(json::parse(res.body),
            (json{{"error", "job job-1 has already ended"}, {"code", "already_ended"}}));
  httplib::Response bare;
  SendError(bare, 400, "limit must be 1-100000");
  EXPECT_EQ(json::parse(bare.body),
            (json{{"error", "limit must be 1-100000"}, {"code", "invalid_argument"}}));
}

}  // namespace
}  // namespace flyt::http
