// The secret file's checks (mode, size, content), the ready file's and probe's JSON, and the
// atomic write.
#include "gpu_server/server_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace flyt::gpu_server {
namespace {

class ServerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-server-files-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content, mode_t mode) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::trunc) << content;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::filesystem::path dir_;
};

const std::string kSecret(48, 'k');

TEST_F(ServerFilesTest, ASecretFileOfModeSixHundredIsReadWithoutItsNewline) {
  auto secret = ReadSecretFile(Write("s", kSecret + "\n", 0600));
  ASSERT_TRUE(secret.ok()) << secret.status().ToString();
  EXPECT_EQ(*secret, kSecret);
  secret = ReadSecretFile(Write("crlf", kSecret + "\r\n", 0400));
  ASSERT_TRUE(secret.ok()) << secret.status().ToString();
  EXPECT_EQ(*secret, kSecret);
}

TEST_F(ServerFilesTest, ASecretFileOthersCanReadIsRefusedWithoutEchoingIt) {
  for (mode_t mode : {0644, 0640, 0604, 0660}) {
    auto secret = ReadSecretFile(Write("open", kSecret, mode));
    ASSERT_FALSE(secret.ok()) << std::oct << mode;
    EXPECT_EQ(secret.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(secret.status().message().find("chmod 600"), std::string::npos);
    EXPECT_EQ(secret.status().message().find(kSecret), std::string::npos);
  }
}

TEST_F(ServerFilesTest, MissingEmptyShortLongAndOddSecretsAreRefused) {
  EXPECT_FALSE(ReadSecretFile((dir_ / "absent").string()).ok());
  auto empty = ReadSecretFile(Write("empty", "\n", 0600));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  EXPECT_FALSE(ReadSecretFile(Write("short", std::string(31, 'a'), 0600)).ok());
  EXPECT_TRUE(ReadSecretFile(Write("min", std::string(32, 'a'), 0600)).ok());
  EXPECT_TRUE(ReadSecretFile(Write("max", std::string(128, 'a'), 0600)).ok());
  EXPECT_FALSE(ReadSecretFile(Write("long", std::string(129, 'a'), 0600)).ok());
  EXPECT_FALSE(ReadSecretFile(Write("space", std::string(20, 'a') + " " + std::string(20, 'b'),
                                    0600))
                   .ok());
  EXPECT_FALSE(ReadSecretFile(Write("two", kSecret + "\n\n", 0600)).ok());
  std::string target = Write("target", kSecret, 0600);
  std::filesystem::create_symlink(target, dir_ / "link");
  EXPECT_FALSE(ReadSecretFile((dir_ / "link").string()).ok());
  EXPECT_FALSE(ReadSecretFile(dir_.string()).ok());
}

TEST_F(ServerFilesTest, ReadyFileHasTheContractsFieldsAndIsWrittenWhole) {
  ReadyInfo info;
  info.address = "127.0.0.1:12500";
  info.pid = 42;
  info.backend = "sim";
  info.device.sm_count_total = 132;
  info.device.sm_count_granted = 40;
  info.device.total_memory_bytes = uint64_t{81559} << 20;
  info.device.simulated = true;
  auto j = nlohmann::json::parse(ReadyJson(info));
  EXPECT_EQ(j["address"], "127.0.0.1:12500");
  EXPECT_EQ(j["pid"], 42);
  EXPECT_EQ(j["sm_count_total"], 132);
  EXPECT_EQ(j["sm_count_granted"], 40);
  EXPECT_EQ(j["memory_total_mb"], 81559);
  EXPECT_TRUE(j["memory_limit_mb"].is_null());
  EXPECT_EQ(j["backend"], "sim");
  EXPECT_EQ(j["simulated"], true);
  EXPECT_EQ(j["mps"], false);
  info.memory_limit_mb = 20000;
  EXPECT_EQ(nlohmann::json::parse(ReadyJson(info))["memory_limit_mb"], 20000);

  std::string path = (dir_ / "ready.json").string();
  ASSERT_TRUE(WriteFileAtomically(path, ReadyJson(info)).ok());
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in)["pid"], 42);
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos);
  }
  EXPECT_FALSE(WriteFileAtomically((dir_ / "no" / "such" / "dir").string(), "{}").ok());
}

TEST_F(ServerFilesTest, ProbeJsonNamesTheDevicePart) {
  remote::DeviceIdentity id;
  id.name = "NVIDIA H100";
  id.sm_count_total = 132;
  id.sm_granularity = 8;
  id.total_memory_bytes = uint64_t{1} << 30;
  auto j = nlohmann::json::parse(ProbeJson(id, "driver"));
  EXPECT_EQ(j["sm_count_total"], 132);
  EXPECT_EQ(j["sm_granularity"], 8);
  EXPECT_EQ(j["memory_total_mb"], 1024);
  EXPECT_EQ(j["name"], "NVIDIA H100");
  EXPECT_EQ(j["backend"], "driver");
  EXPECT_EQ(j["simulated"], false);
  EXPECT_EQ(j["mps"], false);
}

}  // namespace
}  // namespace flyt::gpu_server
