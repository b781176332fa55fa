#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>

#include "common/subprocess.h"
#include "cuda/fatbin.h"
#include "cuda/testing.h"

namespace flyt::cuda {
namespace {

using testing::Append;
using testing::BuildElf;
using testing::BuildSymbols;
using testing::Find;
using testing::Hval;
using testing::KernelsOfData;
using testing::Kparam;
using testing::Layout;
using testing::Sval;
using testing::TestSection;
using Pairs = std::vector<std::pair<uint32_t, uint32_t>>;

// ---- kernels nvcc compiled (committed fatbins; values as ptxas reported them) ---------------

TEST(CubinTest, LargeAndOddlyAlignedParameters) {
  const auto kernels = KernelsOfData("layouts.fatbin");
  for (uint32_t sm : {80u, 90u}) {
    SCOPED_TRACE(sm);
    // A 20000-byte struct: described by EIATTR_KPARAM_INFO_V2, whose size field is 32 bits.
    const KernelInfo* big = Find(kernels, "_Z8BigParam3BigPi", sm);
    ASSERT_NE(big, nullptr);
    EXPECT_EQ(Layout(*big), (Pairs{{0, 20000}, {20000, 8}}));
    EXPECT_EQ(big->param_bytes, 20008u);
    EXPECT_EQ(big->max_threads_per_block, 256u);
    // Aligned(Odd{char[3]}, Wide (alignas 16), char, Wide, int*, __half, float4, bool).
    const KernelInfo* aligned = Find(kernels, "_Z7Aligned3Odd4WidecS0_Pi6__half6float4b", sm);
    ASSERT_NE(aligned, nullptr);
    EXPECT_EQ(Layout(*aligned),
              (Pairs{{0, 3}, {16, 16}, {32, 1}, {48, 16}, {64, 8}, {72, 2}, {80, 16}, {96, 1}}));
    EXPECT_EQ(aligned->param_bytes, 97u);  // no padding after the trailing bool
    EXPECT_EQ(aligned->max_threads_per_block, 128u);
    EXPECT_EQ(aligned->static_shared_bytes, 256u);  // float[64]; sm_90's reserved 1 KiB not counted
    const KernelInfo* dynamic = Find(kernels, "_Z13DynamicSharedPf", sm);
    ASSERT_NE(dynamic, nullptr);
    EXPECT_EQ(dynamic->static_shared_bytes, 0u);  // extern __shared__ is not static
    const KernelInfo* none = Find(kernels, "_Z8NoParamsv", sm);
    ASSERT_NE(none, nullptr);
    EXPECT_TRUE(none->params.empty());
    EXPECT_EQ(none->param_bytes, 0u);
    EXPECT_EQ(none->registers, 4u);
  }
  EXPECT_EQ(Find(kernels, "_Z8BigParam3BigPi", 80)->const_bytes, 26792u);
  EXPECT_EQ(Find(kernels, "_Z7Aligned3Odd4WidecS0_Pi6__half6float4b", 80)->const_bytes, 449u);
}

TEST(CubinTest, SharedMemoryRegistersAndLocalMemory) {
  const auto matmul = KernelsOfData("matrix_mul.fatbin");
  for (uint32_t sm : {80u, 90u}) {
    const KernelInfo* k = Find(matmul, "_Z6MatMulPKfS0_Pfi", sm);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->registers, 32u);
    EXPECT_EQ(k->static_shared_bytes, 2048u);
    EXPECT_EQ(k->max_threads_per_block, 256u);
    EXPECT_EQ(k->local_bytes, 0u);
  }
  const auto templated = KernelsOfData("templated.fatbin");
  for (uint32_t sm : {80u, 90u}) {
    const KernelInfo* hist = Find(templated, "_Z10Histogram8PKiPii", sm);
    ASSERT_NE(hist, nullptr);
    EXPECT_EQ(hist->local_bytes, 256u);  // int counts[64] indexed by data
    for (const char* saxpy : {"_Z5SaxpyIfLi1EEvT_PKS0_PS0_i", "_Z5SaxpyIdLi4EEvT_PKS0_PS0_i",
                              "_Z5SaxpyIiLi2EEvT_PKS0_PS0_i"}) {
      const KernelInfo* k = Find(templated, saxpy, sm);
      ASSERT_NE(k, nullptr) << saxpy;
      // (T a, const T* x, T* y, int n): a double moves the pointers along.
      const uint32_t a = std::string(saxpy).find("Id") != std::string::npos ? 8 : 4;
      EXPECT_EQ(Layout(*k), (Pairs{{0, a}, {8, 8}, {16, 8}, {24, 4}})) << saxpy;
    }
  }
}

TEST(CubinTest, ArchitectureComesFromTheElfFlagsWhenNotGiven) {
  auto fatbin = ParseFatbin(testing::ReadData("many_params.fatbin"));
  ASSERT_TRUE(fatbin.ok());
  for (size_t i : {0, 1}) {
    auto kernels = ParseCubin(fatbin->entries[i].payload);
    ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
    ASSERT_EQ(kernels->size(), 1u);
    EXPECT_EQ((*kernels)[0].sm_arch, fatbin->entries[i].sm_arch);
  }
}

// Parses ptxas's --resource-usage report: per (kernel, sm), registers, smem, cmem[0], frame.
struct PtxasUsage {
  uint32_t registers = 0;
  uint32_t shared = 0;
  std::optional<uint32_t> cmem0;
  uint32_t frame = 0;
};

std::map<std::pair<std::string, uint32_t>, PtxasUsage> ParsePtxasReport(const std::string& text) {
  std::map<std::pair<std::string, uint32_t>, PtxasUsage> out;
  static const std::regex kEntry(R"(Compiling entry function '([^']+)' for 'sm_(\d+)')");
  static const std::regex kFrame(R"((\d+) bytes stack frame)");
  static const std::regex kUsed(R"(Used (\d+) registers)");
  static const std::regex kSmem(R"((\d+) bytes smem)");
  static const std::regex kCmem(R"((\d+) bytes cmem\[0\])");
  PtxasUsage* current = nullptr;
  std::istringstream lines(text);
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, kEntry)) {
      current = &out[{m[1], static_cast<uint32_t>(std::stoul(m[2]))}];
      continue;
    }
    if (current == nullptr) continue;
    if (std::regex_search(line, m, kFrame)) current->frame = std::stoul(m[1]);
    if (std::regex_search(line, m, kUsed)) {
      current->registers = std::stoul(m[1]);
      if (std::regex_search(line, m, kSmem)) current->shared = std::stoul(m[1]);
      if (std::regex_search(line, m, kCmem)) current->cmem0 = std::stoul(m[1]);
    }
  }
  return out;
}

// The parser against the compiler's own account: compiles the test sources with
// --resource-usage and compares every kernel's registers, static shared memory, constant bank 0
// and stack frame with what ParseCubin reads from the resulting cubins. (cuobjdump is not part
// of the toolkit installed here; ptxas's report is the same numbers from the source.)
TEST(CubinTest, AgreesWithPtxasResourceUsage) {
  std::string nvcc = "/usr/local/cuda/bin/nvcc";
  if (!std::filesystem::exists(nvcc)) nvcc = FindOnPath("nvcc");
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc in /usr/local/cuda/bin or on PATH";
  const std::string src = std::string(FLYT_SOURCE_DIR) + "/tests/cuda/";
  const std::string out = ::testing::TempDir() + "/flyt_resource_usage.fatbin";
  size_t compared = 0;
  for (const std::string& file : {src + "many_params.cu", src + "matrix_mul.cu",
                                  src + "templated.cu", testing::DataPath("src/layouts.cu")}) {
    SCOPED_TRACE(file);
    CommandOptions options;
    options.timeout = std::chrono::seconds(120);
    auto run = RunCommand(
        {nvcc, "-fatbin", "--resource-usage", "-I" + src, "-gencode", "arch=compute_80,code=sm_80",
         "-gencode", "arch=compute_90,code=sm_90", "-o", out, file},
        options);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    ASSERT_EQ(run->exit_code, 0) << run->stderr_text;
    const auto report = ParsePtxasReport(run->stdout_text + run->stderr_text);
    ASSERT_FALSE(report.empty());
    auto fatbin = ParseFatbin(testing::ReadBytes(out));
    ASSERT_TRUE(fatbin.ok()) << fatbin.status().ToString();
    auto kernels = KernelsOf(*fatbin);
    ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
    EXPECT_EQ(kernels->size(), report.size());
    for (const auto& [key, usage] : report) {
      SCOPED_TRACE(key.first + " sm_" + std::to_string(key.second));
      const KernelInfo* k = Find(*kernels, key.first, key.second);
      ASSERT_NE(k, nullptr);
      EXPECT_EQ(k->registers, usage.registers);
      EXPECT_EQ(k->static_shared_bytes, usage.shared);
      EXPECT_EQ(k->local_bytes, usage.frame);
      if (usage.cmem0) {
        EXPECT_EQ(k->const_bytes, *usage.cmem0);
      }
      ++compared;
    }
  }
  EXPECT_GE(compared, 16u);
}

// ---- hand-built cubins: the paths nvcc never takes -------------------------------------------

// One kernel "k" (symbol 1) with parameters (8 bytes at 0, 4 bytes at 8) and resources.
struct CubinParts {
  std::vector<std::byte> module_info;  // .nv.info
  std::vector<std::byte> kernel_info;  // .nv.info.k
  uint32_t text_info = (20u << 24) | 1;
  uint64_t shared_bytes = 64;
  bool reserved_shared = false;
  bool with_kernel_info = true;
  uint8_t symbol_other = 0x10;
  uint16_t machine = 190;
  uint8_t abi_version = 8;
  uint32_t flags = 86 << 8;

  CubinParts() {
    Sval(module_info, 0x2f, {1, 12});  // REGCOUNT: symbol 1, 12 registers
    Sval(module_info, 0x11, {1, 16});  // FRAME_SIZE: symbol 1, 16 bytes
    Kparam(kernel_info, 1, 8, 4);
    Kparam(kernel_info, 0, 0, 8);
    Hval(kernel_info, 0x19, 12);  // CBANK_PARAM_SIZE
  }

  std::vector<std::byte> Build() const {
    auto [strtab, symtab] = BuildSymbols({{"k", 0x12, symbol_other, 5}});
    std::vector<TestSection> sections = {
        {".strtab", 3, 0, 0, 0, 0, strtab},                 // 1
        {".symtab", 2, 0, 1, 0, 24, symtab},                // 2
        {".nv.info", 0x70000000, 0, 2, 0, 0, module_info},  // 3
        {with_kernel_info ? ".nv.info.k" : ".nv.info.other", 0x70000000, 0x40, 2, 5, 0,
         kernel_info},                                                    // 4
        {".text.k", 1, 6, 2, text_info, 0, std::vector<std::byte>(128)},  // 5
        {".nv.shared.k", 8, 3, 0, 5, 0, {}, shared_bytes},                // 6
        {".nv.constant0.k", 1, 2, 0, 5, 0, std::vector<std::byte>(364)},  // 7
    };
    if (reserved_shared) sections.push_back({".nv.shared.reserved.0", 8, 3, 0, 0, 0, {}, 0});
    return BuildElf(sections, machine, flags, abi_version);
  }
};

std::string CubinError(const CubinParts& parts) {
  auto r = ParseCubin(parts.Build());
  EXPECT_FALSE(r.ok()) << "a corrupt cubin parsed";
  return r.ok() ? "" : r.status().message();
}

TEST(CubinTest, HandBuiltCubinParses) {
  CubinParts parts;
  auto kernels = ParseCubin(parts.Build());
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  ASSERT_EQ(kernels->size(), 1u);
  const KernelInfo& k = (*kernels)[0];
  EXPECT_EQ(k.name, "k");
  EXPECT_EQ(k.sm_arch, 86u);                      // ELF ABI 8: e_flags bits 8-15
  EXPECT_EQ(Layout(k), (Pairs{{0, 8}, {8, 4}}));  // sorted by ordinal
  EXPECT_EQ(k.param_bytes, 12u);
  EXPECT_EQ(k.registers, 12u);  // .nv.info wins over .text's sh_info
  EXPECT_EQ(k.local_bytes, 16u);
  EXPECT_EQ(k.static_shared_bytes, 64u);
  EXPECT_EQ(k.const_bytes, 364u);
  EXPECT_EQ(k.max_threads_per_block, std::nullopt);
  EXPECT_EQ(ParseCubin(parts.Build(), 75)->at(0).sm_arch, 75u);  // the caller's arch wins
}

TEST(CubinTest, FallbacksForOlderCubins) {
  CubinParts parts;
  parts.module_info.clear();
  parts.abi_version = 7;
  parts.flags = 0x00500050;  // before ELF ABI 8: SM in bits 0-7
  parts.kernel_info.clear();
  Kparam(parts.kernel_info, 0, 0, 8);
  Sval(parts.kernel_info, 0x0a, {4, 0x00080160});  // PARAM_CBANK: offset 0x160, size 8
  auto kernels = ParseCubin(parts.Build());
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  const KernelInfo& k = (*kernels)[0];
  EXPECT_EQ(k.sm_arch, 0x50u);
  EXPECT_EQ(k.registers, 20u);  // from .text's sh_info
  EXPECT_EQ(k.local_bytes, std::nullopt);
  EXPECT_EQ(k.param_bytes, 8u);
}

TEST(CubinTest, LaunchBoundsAndReservedShared) {
  CubinParts parts;
  Sval(parts.kernel_info, 0x05, {1024, 1, 1});  // MAX_THREADS
  Sval(parts.kernel_info, 0x10, {16, 8, 2});    // REQNTID: the exact block, preferred
  parts.reserved_shared = true;
  parts.shared_bytes = 1024 + 96;
  auto kernels = ParseCubin(parts.Build());
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  EXPECT_EQ((*kernels)[0].max_threads_per_block, 256u);
  EXPECT_EQ((*kernels)[0].static_shared_bytes, 96u);
}

TEST(CubinTest, ParameterV2RecordsWin) {
  CubinParts parts;
  Sval(parts.kernel_info, 0x45, {0, 0 | (0u << 16), 6});  // V2: ordinal 0, offset 0, 6 bytes
  auto kernels = ParseCubin(parts.Build());
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  EXPECT_EQ(Layout((*kernels)[0]), (Pairs{{0, 6}, {8, 4}}));
}

TEST(CubinTest, BrokenParameterTablesAreErrors) {
  auto expect = [](const CubinParts& parts, const std::string& part) {
    const std::string message = CubinError(parts);
    EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_NE(message.find("kernel k"), std::string::npos) << message;
  };
  CubinParts gap;
  gap.kernel_info.clear();
  Kparam(gap.kernel_info, 0, 0, 8);
  Kparam(gap.kernel_info, 2, 8, 4);
  expect(gap, "parameter 1 is missing");
  CubinParts twice;
  Kparam(twice.kernel_info, 0, 0, 8);
  expect(twice, "parameter 0 is described twice");
  CubinParts overflow;
  Hval(overflow.kernel_info, 0x19, 10);
  expect(overflow, "parameters end at byte 12 but the parameter buffer is 10 bytes");
  CubinParts short_record;
  Sval(short_record.kernel_info, 0x17, {0, 1});
  expect(short_record, "should carry 12 bytes");
  CubinParts bad_format;
  Append<uint8_t>(bad_format.kernel_info, 9);
  Append<uint8_t>(bad_format.kernel_info, 0x17);
  Append<uint16_t>(bad_format.kernel_info, 0);
  expect(bad_format, "unknown format 9");
  CubinParts overrun;
  Append<uint8_t>(overrun.kernel_info, 4);
  Append<uint8_t>(overrun.kernel_info, 0x17);
  Append<uint16_t>(overrun.kernel_info, 200);
  expect(overrun, "past the end of the section");
  CubinParts cut;
  Append<uint8_t>(cut.kernel_info, 4);
  expect(cut, "cut off by the end of the section");
  CubinParts zero_threads;
  Sval(zero_threads.kernel_info, 0x05, {0, 1, 1});
  expect(zero_threads, "launch bound");
  CubinParts huge_threads;
  Sval(huge_threads.kernel_info, 0x10, {0xffffffff, 0xffffffff, 0xffffffff});
  expect(huge_threads, "launch bound");
  CubinParts no_info;
  no_info.with_kernel_info = false;
  expect(no_info, "no .nv.info.k section");
}

TEST(CubinTest, OnlyEntryFunctionsAreKernels) {
  CubinParts device_function;
  device_function.symbol_other = 0;
  auto kernels = ParseCubin(device_function.Build());
  ASSERT_TRUE(kernels.ok()) << kernels.status().ToString();
  EXPECT_TRUE(kernels->empty());
  CubinParts x86;
  x86.machine = 62;
  EXPECT_NE(CubinError(x86).find("not EM_CUDA"), std::string::npos);
}

TEST(CubinTest, TruncatedCubinsNeverCrash) {
  auto fatbin = ParseFatbin(testing::ReadData("many_params.fatbin"));
  ASSERT_TRUE(fatbin.ok());
  const std::vector<std::byte>& cubin = fatbin->entries[0].payload;
  uint64_t shoff = 0;
  uint16_t shnum = 0;
  std::memcpy(&shoff, &cubin[40], 8);
  std::memcpy(&shnum, &cubin[60], 2);
  const uint64_t table_end = shoff + uint64_t{shnum} * 64;
  ASSERT_LE(table_end, cubin.size());
  for (size_t len = 0; len < cubin.size(); ++len) {
    std::vector<std::byte> cut(cubin.begin(), cubin.begin() + len);
    auto r = ParseCubin(cut);
    // Without the whole section table nothing can be read; past it (program headers of an
    // ET_EXEC cubin) the kernels are all there.
    if (len < table_end) {
      EXPECT_FALSE(r.ok()) << "length " << len;
    } else {
      EXPECT_TRUE(r.ok()) << "length " << len;
    }
  }
}

}  // namespace
}  // namespace flyt::cuda
