#include "common/subprocess.h"

#include <gtest/gtest.h>

#include <csignal>
#include <string>

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

TEST(SubprocessTest, ChildrenDoNotInheritBlockedOrIgnoredSignals) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  auto previous = signal(SIGPIPE, SIG_IGN);
  // /proc/self/status of the child: SigBlk and SigIgn must not carry SIGTERM (15) or SIGPIPE (13).
  auto r = RunCommand({"sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status"});
  signal(SIGPIPE, previous);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(r.ok());
  for (const char* line : {"SigBlk", "SigIgn"}) {
    size_t at = r->stdout_text.find(line);
    ASSERT_NE(at, std::string::npos) << r->stdout_text;
    uint64_t mask = std::stoull(r->stdout_text.substr(at + 7, 16), nullptr, 16);
    EXPECT_EQ(mask & ((1ULL << (SIGTERM - 1)) | (1ULL << (SIGPIPE - 1))), 0u) << line;
  }
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
