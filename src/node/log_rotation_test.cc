// RotateLog against a writer that keeps its own O_APPEND descriptor, as a GPU server does.
#include "node/log_rotation.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/unique_fd.h"

namespace flyt::node {
namespace {

class LogRotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-log-rotation-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "lease.log").string();
    writer_.Reset(open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    ASSERT_TRUE(writer_.valid());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& text) {
    ASSERT_EQ(write(writer_.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  uint64_t Size(const std::string& path) { return std::filesystem::file_size(path); }

  std::filesystem::path dir_;
  std::string path_;
  UniqueFd writer_;
};

TEST_F(LogRotationTest, ASmallOrMissingLogIsLeftAlone) {
  Write("hello\n");
  auto r = RotateLog(path_, 100, 3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(*r);
  EXPECT_EQ(Slurp(path_), "hello\n");
  r = RotateLog((dir_ / "none.log").string(), 100, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
}

TEST_F(LogRotationTest, ALogPastTheCapKeepsNOldFilesOfAtMostTheCapAndTheWriterGoesOn) {
  constexpr uint64_t kCap = 1000;
  const std::string line(99, 'x');
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 15; ++i) Write(std::to_string(round) + line.substr(1) + "\n");  // 1500 B
    auto r = RotateLog(path_, kCap, 3);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(*r);
    // The writer's next line lands at the start of the emptied file, not after a hole.
    Write("after " + std::to_string(round) + "\n");
    EXPECT_EQ(Slurp(path_), "after " + std::to_string(round) + "\n");
  }
  EXPECT_TRUE(std::filesystem::exists(path_ + ".1"));
  EXPECT_TRUE(std::filesystem::exists(path_ + ".2"));
  EXPECT_TRUE(std::filesystem::exists(path_ + ".3"));
  EXPECT_FALSE(std::filesystem::exists(path_ + ".4"));
  EXPECT_FALSE(std::filesystem::exists(path_ + ".1.tmp"));
  uint64_t total = Size(path_);
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(Size(path_ + "." + std::to_string(i)), kCap);
    total += Size(path_ + "." + std::to_string(i));
  }
  EXPECT_LE(total, 4 * kCap);
  // Newest first: .1 has round 5's lines (the newest 1000 bytes: its last 10 lines), .3 round 3's.
  const std::string newest = Slurp(path_ + ".1");
  EXPECT_EQ(newest.substr(newest.size() - 100), "5" + line.substr(1) + "\n");
  EXPECT_EQ(newest.find("after"), std::string::npos);
  const std::string oldest = Slurp(path_ + ".3");
  EXPECT_EQ(oldest.substr(oldest.size() - 100), "3" + line.substr(1) + "\n");
}

TEST_F(LogRotationTest, WithoutOldFilesTheLogIsOnlyTruncated) {
  Write(std::string(300, 'y'));
  auto r = RotateLog(path_, 100, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_EQ(Size(path_), 0u);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".1"));
}

TEST_F(LogRotationTest, ASymbolicLinkIsNotFollowed) {
  const std::string target = (dir_ / "elsewhere").string();
  std::ofstream(target) << std::string(300, 'z');
  const std::string link = (dir_ / "link.log").string();
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_FALSE(RotateLog(link, 100, 3).ok());
  EXPECT_EQ(Size(target), 300u);
}

}  // namespace
}  // namespace flyt::node
