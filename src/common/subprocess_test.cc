#include "common/subprocess.h"

#include <gtest/gtest.h>

namespace flyt {
namespace {

TEST(SubprocessTest, CapturesStdoutStderrAndExitCode) {
  auto r = RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_text, "out\n");
  EXPECT_EQ(r->stderr_text, "err\n");
  EXPECT_EQ(r->exit_code, 3);
}

TEST(SubprocessTest, MissingProgramIsNotFound) {
  auto r = RunCommand({"flyt-no-such-program-xyz"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(SubprocessTest, HungProgramIsKilledAtTheDeadline) {
  CommandOptions options;
  options.timeout = std::chrono::milliseconds(200);
  auto r = RunCommand({"sleep", "30"}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
}

TEST(SubprocessTest, OutputBeyondTheLimitIsAnError) {
  CommandOptions options;
  options.max_output_bytes = 1000;
  auto r = RunCommand({"sh", "-c", "head -c 100000 /dev/zero"}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace flyt
