#include "gpu/proc.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace flyt::gpu {
namespace {

TEST(ProcReaderTest, ContainerIdFromCgroupV2Docker) {
  std::string id(64, 'a');
  EXPECT_EQ(ProcReader::ContainerIdFromCgroup("0::/system.slice/docker-" + id + ".scope\n"), id);
}

TEST(ProcReaderTest, ContainerIdFromKubernetesCgroupV1) {
  std::string id = "3f0c1e4b9a7d2c6e8f1a0b3c5d7e9f1a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d1e";
  std::string text = "12:memory:/kubepods/burstable/pod1234-5678/" + id + "\n1:name=systemd:/\n";
  EXPECT_EQ(ProcReader::ContainerIdFromCgroup(text), id);
}

TEST(ProcReaderTest, NoContainerOnAHostProcess) {
  EXPECT_FALSE(
      ProcReader::ContainerIdFromCgroup("0::/user.slice/user-1000.slice/session-3.scope\n"));
  // 65 hex digits is not an id.
  EXPECT_FALSE(ProcReader::ContainerIdFromCgroup("0::/x/" + std::string(65, 'b') + "\n"));
}

TEST(ProcReaderTest, FillsNameCommandUserFromAFixtureTree) {
  auto root = std::filesystem::temp_directory_path() / ("flyt-proc-" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "4242");
  std::ofstream(root / "4242" / "comm") << "python3\n";
  std::string cmdline("python3\0train.py\0--epochs=3\0", 29);
  std::ofstream(root / "4242" / "cmdline", std::ios::binary) << cmdline;
  std::string id(64, 'c');
  std::ofstream(root / "4242" / "cgroup") << "0::/system.slice/cri-containerd-" << id << ".scope\n";
  ProcReader reader(root.string());
  ProcessInfo p;
  p.pid = 4242;
  reader.Fill(p);
  EXPECT_EQ(p.name, "python3");
  EXPECT_EQ(p.command, "python3 train.py --epochs=3");
  EXPECT_EQ(p.container_id, id);
  ASSERT_TRUE(p.user);  // owner of the directory: whoever runs the test

  ProcessInfo gone;
  gone.pid = 999999;
  reader.Fill(gone);
  EXPECT_FALSE(gone.name);
  EXPECT_FALSE(gone.user);
  std::filesystem::remove_all(root);
}

// What a user sees through the cache: a process that stays on the GPU keeps its details without
// re-reading /proc; a PID that left and came back (possibly another process) is read afresh; a
// retitled process shows its new title once the TTL has passed.
TEST(ProcReaderTest, PidThatLeftAndReturnedIsReadAfresh) {
  auto root =
      std::filesystem::temp_directory_path() / ("flyt-proc-ttl-" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "7");
  std::ofstream(root / "7" / "comm") << "first\n";
  FakeClock clock;
  ProcReader reader(root.string(), std::chrono::seconds(30), clock);
  auto fill = [&](uint32_t pid) {
    ProcessInfo p;
    p.pid = pid;
    reader.Fill(p);
    return p.name.value_or("");
  };
  reader.BeginSample();
  EXPECT_EQ(fill(7), "first");

  // The process goes on; something else takes its /proc name (as a PID reuse would look).
  std::ofstream(root / "7" / "comm", std::ios::trunc) << "second\n";
  clock.Advance(std::chrono::seconds(1));
  reader.BeginSample();
  EXPECT_EQ(fill(7), "first");  // still on the GPU in consecutive samples: same process

  // A sample without PID 7 (it left the GPU), then it is back: read again.
  clock.Advance(std::chrono::seconds(1));
  reader.BeginSample();
  clock.Advance(std::chrono::seconds(1));
  reader.BeginSample();
  EXPECT_EQ(fill(7), "second");

  // Retitled while staying on the GPU: the new title shows after the TTL.
  std::ofstream(root / "7" / "comm", std::ios::trunc) << "third\n";
  for (int s = 0; s < 29; ++s) {
    clock.Advance(std::chrono::seconds(1));
    reader.BeginSample();
    EXPECT_EQ(fill(7), "second");
  }
  clock.Advance(std::chrono::seconds(2));
  reader.BeginSample();
  EXPECT_EQ(fill(7), "third");
  std::filesystem::remove_all(root);
}

TEST(ProcReaderTest, ReadsThisProcessFromTheRealProc) {
  ProcReader reader;
  ProcessInfo p;
  p.pid = static_cast<uint32_t>(getpid());
  reader.Fill(p);
  ASSERT_TRUE(p.name);
  EXPECT_EQ(*p.name, "gpu_unit_test");
  ASSERT_TRUE(p.command);
  EXPECT_NE(p.command->find("gpu_unit_test"), std::string::npos);
}

}  // namespace
}  // namespace flyt::gpu
