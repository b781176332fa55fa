#include "cuda/elf.h"

#include <gtest/gtest.h>

#include "cuda/testing.h"

namespace flyt::cuda {
namespace {

using testing::BuildElf;
using testing::BuildSymbols;
using testing::TestSection;

std::string ElfErrorOf(std::span<const std::byte> bytes) {
  auto r = ElfFile::Parse(bytes, "test.elf");
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

void Put(std::vector<std::byte>& b, size_t at, auto v) { std::memcpy(&b[at], &v, sizeof(v)); }

TEST(CudaElfTest, ReadsThisTestProgram) {
  // The test binary itself is an x86-64 (or aarch64) ELF with sections and symbols.
  const std::vector<std::byte> self = testing::ReadBytes("/proc/self/exe");
  auto elf = ElfFile::Parse(self, "self");
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  EXPECT_NE(elf->machine(), kElfMachineCuda);
  const ElfSection* text = elf->FindSection(".text");
  ASSERT_NE(text, nullptr);
  EXPECT_GT(text->data.size(), 0u);
  EXPECT_EQ(elf->FindSection(".nv_fatbin"), nullptr);
}

TEST(CudaElfTest, SectionsAndSymbols) {
  auto [strtab, symtab] = BuildSymbols({{"alpha", 0x12, 0x10, 3}, {"beta", 0x11, 0, 0xfff1}});
  const std::vector<std::byte> bytes = BuildElf({{".strtab", 3, 0, 0, 0, 0, strtab},
                                                 {".symtab", 2, 0, 1, 0, 24, symtab},
                                                 {".data", 1, 0, 0, 0, 0, testing::Bytes("xyz")},
                                                 {".bss", 8, 0, 0, 0, 0, {}, 4096}});
  auto elf = ElfFile::Parse(bytes);
  ASSERT_TRUE(elf.ok()) << elf.status().ToString();
  EXPECT_EQ(elf->sections().size(), 6u);  // null, 4, .shstrtab
  const ElfSection* data = elf->FindSection(".data");
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(testing::AsText(data->data), "xyz");
  const ElfSection* bss = elf->FindSection(".bss");
  ASSERT_NE(bss, nullptr);
  EXPECT_EQ(bss->size_bytes, 4096u);
  EXPECT_TRUE(bss->data.empty());
  auto symbols = elf->Symbols();
  ASSERT_TRUE(symbols.ok()) << symbols.status().ToString();
  ASSERT_EQ(symbols->size(), 3u);
  EXPECT_EQ((*symbols)[1].name, "alpha");
  EXPECT_EQ((*symbols)[1].section, 3u);
  EXPECT_EQ((*symbols)[1].other, 0x10);
  EXPECT_EQ((*symbols)[2].section, 0u);  // SHN_ABS is not a section
}

TEST(CudaElfTest, HeaderErrors) {
  const std::vector<std::byte> good = BuildElf({{".data", 1, 0, 0, 0, 0, testing::Bytes("x")}});
  ASSERT_TRUE(ElfFile::Parse(good).ok());
  auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(message.rfind("test.elf: ", 0), 0u) << message;
  };
  has(ElfErrorOf(std::span(good).first(40)), "too short");
  auto b = good;
  b[1] = std::byte{'X'};
  has(ElfErrorOf(b), "bad magic");
  b = good;
  b[4] = std::byte{1};
  has(ElfErrorOf(b), "only 64-bit");
  b = good;
  b[5] = std::byte{2};
  has(ElfErrorOf(b), "only little-endian");
  b = good;
  Put(b, 58, uint16_t{32});
  has(ElfErrorOf(b), "section header size 32");
  b = good;
  Put(b, 40, uint64_t{1} << 40);
  has(ElfErrorOf(b), "section table offset");
  b = good;
  Put(b, 60, uint16_t{60000});
  has(ElfErrorOf(b), "does not fit");
  // Section 1's offset, in its header at shoff + 64 + 24.
  uint64_t shoff = 0;
  std::memcpy(&shoff, &good[40], 8);
  b = good;
  Put(b, shoff + 64 + 24, uint64_t{1} << 50);
  has(ElfErrorOf(b), "section 1 (1 bytes at 0x4000000000000) runs past the end");
  b = good;
  Put(b, shoff + 64, uint32_t{1000});  // name offset past .shstrtab
  has(ElfErrorOf(b), "section 1: name offset 0x3e8 is past the end");
  b = good;
  Put(b, 62, uint16_t{9});
  has(ElfErrorOf(b), "section-name table index 9");
}

TEST(CudaElfTest, SymbolErrors) {
  auto [strtab, symbols] = BuildSymbols({{"alpha", 0x12, 0x10, 7}});
  // clang 14 does not let a lambda capture a structured binding (C++20 allows it): copy it.
  auto build = [symtab = symbols](uint32_t link, uint64_t entsize, std::vector<std::byte> strings) {
    return BuildElf(
        {{".strtab", 3, 0, 0, 0, 0, strings}, {".symtab", 2, 0, link, 0, entsize, symtab}});
  };
  auto symbols_error = [](const std::vector<std::byte>& bytes) {
    auto elf = ElfFile::Parse(bytes, "test.elf");
    EXPECT_TRUE(elf.ok()) << elf.status().ToString();
    auto s = elf->Symbols();
    EXPECT_FALSE(s.ok());
    return s.ok() ? "" : s.status().message();
  };
  EXPECT_NE(symbols_error(build(1, 24, strtab)).find("names section 7 of 4"), std::string::npos);
  EXPECT_NE(symbols_error(build(9, 24, strtab)).find("string table index 9"), std::string::npos);
  EXPECT_NE(symbols_error(build(1, 8, strtab)).find("entry size 8"), std::string::npos);
  // A name that runs to the end of its table without a NUL.
  auto [strtab2, symtab2] = BuildSymbols({{"alpha", 0x12, 0x10, 0}});
  strtab2.pop_back();
  const std::vector<std::byte> bytes =
      BuildElf({{".strtab", 3, 0, 0, 0, 0, strtab2}, {".symtab", 2, 0, 1, 0, 24, symtab2}});
  auto elf = ElfFile::Parse(bytes);  // keeps views into `bytes`
  ASSERT_TRUE(elf.ok());
  auto s = elf->Symbols();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not NUL-terminated"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace flyt::cuda
