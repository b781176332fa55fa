#include "trace/elf_symbols.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace flyt::trace {
namespace {

namespace fs = std::filesystem;

class ElfSymbolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/flyt-trace-elf-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // Runs a shell command in the temp folder; false when it failed.
  bool Sh(const std::string& command) {
    return std::system(("cd " + dir_ + " && " + command + " >/dev/null 2>&1").c_str()) == 0;
  }

  std::string dir_;
};

constexpr const char* kRuntimeSource = R"(
int cudaMalloc(void** p, unsigned long n) { *p = (void*)n; return 0; }
int cudaFree(void* p) { return p == 0; }
int cudaGetDeviceCount(int* n) { *n = 1; return 0; }
int main(void) { void* p; cudaMalloc(&p, 8); return cudaFree(p); }
)";

TEST_F(ElfSymbolsTest, SharedRuntimeByNameAndDynsym) {
  Write("rt.c", kRuntimeSource);
  ASSERT_TRUE(Sh("gcc -shared -fPIC -o libcudart.so.13 rt.c"));
  Result<ElfInfo> info = ReadElfInfo(dir_ + "/libcudart.so.13");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->dynamic_functions.count("cudaMalloc"), 1u);
  EXPECT_EQ(info->dynamic_functions.count("cudaFree"), 1u);
  EXPECT_EQ(info->dynamic_functions.count("cudaGetDeviceCount"), 0u);  // not probed
  EXPECT_FALSE(info->flyt_runtime);
  Classification c = Classify("libcudart.so.13", *info);
  ASSERT_TRUE(c.library);
  EXPECT_EQ(*c.library, LibraryClass::kNvidiaRuntime);
  ASSERT_EQ(c.probes.size(), 2u);
  for (const ProbePoint& p : c.probes) EXPECT_GT(p.offset, 0u);
  // A wheel's hashed name is a runtime too; flyt's marker makes it flyt's.
  EXPECT_EQ(ClassByName("libcudart-9a8b7c6d.so.12"), LibraryClass::kNvidiaRuntime);
  EXPECT_EQ(ClassByName("libcuda.so.1"), LibraryClass::kDriver);
  EXPECT_EQ(ClassByName("libcudnn.so.9"), std::nullopt);
  Write("marker.c", std::string(kRuntimeSource) + "const int flyt_runtime_version = 1;\n");
  ASSERT_TRUE(Sh("gcc -shared -fPIC -o libcudart-flyt.so.13 marker.c"));
  Result<ElfInfo> flyt = ReadElfInfo(dir_ + "/libcudart-flyt.so.13");
  ASSERT_TRUE(flyt.ok());
  EXPECT_TRUE(flyt->flyt_runtime);
  EXPECT_EQ(Classify("libcudart.so.13", *flyt).library, LibraryClass::kFlytRuntime);
}

TEST_F(ElfSymbolsTest, StaticRuntimeInSymtabAndStrippedFatbin) {
  Write("app.c", kRuntimeSource);
  ASSERT_TRUE(Sh("gcc -O0 -o app app.c"));
  Result<ElfInfo> info = ReadElfInfo(dir_ + "/app");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->has_symtab);
  Classification c = Classify("app", *info);
  ASSERT_TRUE(c.library);
  EXPECT_EQ(*c.library, LibraryClass::kStaticRuntime);
  EXPECT_EQ(c.probes.size(), 2u);

  // Stripped, with a fatbin: CUDA that cannot be probed, and said so.
  Write("fatbin.bin", "not really a fatbin");
  ASSERT_TRUE(Sh("objcopy --add-section .nv_fatbin=fatbin.bin app app.fat && strip app.fat"));
  Result<ElfInfo> stripped = ReadElfInfo(dir_ + "/app.fat");
  ASSERT_TRUE(stripped.ok()) << stripped.status().ToString();
  EXPECT_FALSE(stripped->has_symtab);
  EXPECT_TRUE(stripped->has_nv_fatbin);
  Classification s = Classify("app.fat", *stripped);
  EXPECT_FALSE(s.library);
  EXPECT_NE(s.unprobeable_reason.find("stripped static binary"), std::string::npos);

  // Stripped without a fatbin: just not CUDA.
  ASSERT_TRUE(Sh("strip -o app.plain app"));
  Result<ElfInfo> plain = ReadElfInfo(dir_ + "/app.plain");
  ASSERT_TRUE(plain.ok());
  Classification p = Classify("app.plain", *plain);
  EXPECT_FALSE(p.library);
  EXPECT_TRUE(p.unprobeable_reason.empty());
}

TEST_F(ElfSymbolsTest, TruncatedAndGarbageFilesAreErrors) {
  Write("rt.c", kRuntimeSource);
  ASSERT_TRUE(Sh("gcc -shared -fPIC -o libcudart.so.13 rt.c"));
  std::string full = dir_ + "/libcudart.so.13";
  uintmax_t size = fs::file_size(full);
  for (uintmax_t cut : {uintmax_t{0}, uintmax_t{10}, uintmax_t{64}, uintmax_t{200}, size / 2,
                        size - 100, size - 1}) {
    std::string path = dir_ + "/cut" + std::to_string(cut);
    fs::copy_file(full, path);
    fs::resize_file(path, cut);
    Result<ElfInfo> info = ReadElfInfo(path);
    EXPECT_FALSE(info.ok()) << "cut at " << cut;
  }
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 131 + 7);
  Result<ElfInfo> g = ReadElfInfo(Write("garbage.so", garbage));
  EXPECT_FALSE(g.ok());
  // An ELF header followed by garbage section offsets.
  std::string bad = "\x7f" "ELF\x02\x01\x01" + std::string(57, '\xff');
  Result<ElfInfo> b = ReadElfInfo(Write("badheader.so", bad + garbage));
  EXPECT_FALSE(b.ok());
  EXPECT_FALSE(ReadElfInfo(dir_ + "/missing.so").ok());
  EXPECT_FALSE(ReadElfInfo(dir_).ok());  // a directory
}

}  // namespace
}  // namespace flyt::trace
