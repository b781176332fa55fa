// Test-only helpers for the cuda library's tests: committed test data, the CUDA test programs
// built by nvcc, and small lookups. Not linked into the library.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "common/strings.h"
#include "cuda/fatbin.h"

namespace flyt::cuda::testing {

inline std::string DataPath(const std::string& name) {
  return std::string(FLYT_SOURCE_DIR) + "/tests/data/cuda/" + name;
}

// A CUDA test program (or fatbin) built from tests/cuda, or "" when nvcc was not there.
inline std::string ProgramPath(const std::string& name) {
  const std::string path = std::string(FLYT_BINARY_DIR) + "/tests/cuda/" + name;
  return std::filesystem::exists(path) ? path : "";
}

inline std::vector<std::byte> ReadBytes(const std::string& path) {
  auto text = ReadFile(path, size_t{256} << 20);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  if (!text.ok()) return {};
  std::vector<std::byte> out(text->size());
  std::memcpy(out.data(), text->data(), text->size());
  return out;
}

inline std::vector<std::byte> ReadData(const std::string& name) {
  return ReadBytes(DataPath(name));
}

inline std::string_view AsText(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The kernel `name` for `sm_arch` in `kernels`, or nullptr.
inline const KernelInfo* Find(const std::vector<KernelInfo>& kernels, const std::string& name,
                              uint32_t sm_arch) {
  for (const KernelInfo& k : kernels) {
    if (k.name == name && k.sm_arch == sm_arch) return &k;
  }
  return nullptr;
}

// Parses one committed container and returns its kernels; fails the test on error.
inline std::vector<KernelInfo> KernelsOfData(const std::string& name) {
  const std::vector<std::byte> bytes = ReadData(name);
  auto fatbin = ParseFatbin(bytes);
  EXPECT_TRUE(fatbin.ok()) << name << ": " << fatbin.status().ToString();
  if (!fatbin.ok()) return {};
  auto kernels = KernelsOf(*fatbin);
  EXPECT_TRUE(kernels.ok()) << name << ": " << kernels.status().ToString();
  return kernels.ok() ? *kernels : std::vector<KernelInfo>{};
}

// "param i at offset o, size s" for every parameter, in ordinal order.
inline std::vector<std::pair<uint32_t, uint32_t>> Layout(const KernelInfo& k) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (size_t i = 0; i < k.params.size(); ++i) {
    EXPECT_EQ(k.params[i].ordinal, i) << k.name;
    out.emplace_back(k.params[i].offset, k.params[i].size_bytes);
  }
  return out;
}

// ---- building small ELF files by hand, for the error paths no compiler produces ----------

struct TestSection {
  std::string name;
  uint32_t type = 1;  // SHT_PROGBITS
  uint64_t flags = 0;
  uint32_t link = 0;
  uint32_t info = 0;
  uint64_t entry_size = 0;
  std::vector<std::byte> data;
  uint64_t nobits_size = 0;  // sh_size of an SHT_NOBITS section
};

struct TestSymbol {
  std::string name;
  uint8_t info = 0x12;   // STB_GLOBAL, STT_FUNC
  uint8_t other = 0x10;  // STO_CUDA_ENTRY
  uint16_t section = 0;
};

template <typename T>
void Append(std::vector<std::byte>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

inline std::vector<std::byte> Bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// An ELF64 file with section 0 empty, then `sections`, then .shstrtab (the last section).
inline std::vector<std::byte> BuildElf(const std::vector<TestSection>& sections,
                                       uint16_t machine = 190, uint32_t flags = 90 << 8,
                                       uint8_t abi_version = 8) {
  std::vector<std::byte> out(64);
  std::vector<uint64_t> offsets;
  for (const TestSection& s : sections) {
    offsets.push_back(out.size());
    out.insert(out.end(), s.data.begin(), s.data.end());
  }
  std::string names(1, '\0');
  std::vector<uint32_t> name_offsets;
  for (const TestSection& s : sections) {
    name_offsets.push_back(static_cast<uint32_t>(names.size()));
    names += s.name + '\0';
  }
  const uint32_t shstrtab_name = static_cast<uint32_t>(names.size());
  names += std::string(".shstrtab") + '\0';
  const uint64_t names_at = out.size();
  const std::vector<std::byte> name_bytes = Bytes(names);
  out.insert(out.end(), name_bytes.begin(), name_bytes.end());
  while (out.size() % 8 != 0) out.push_back(std::byte{0});
  const uint64_t shoff = out.size();
  auto header = [&](uint32_t name, uint32_t type, uint64_t fl, uint64_t offset, uint64_t size,
                    uint32_t link, uint32_t info, uint64_t entsize) {
    Append<uint32_t>(out, name);
    Append<uint32_t>(out, type);
    Append<uint64_t>(out, fl);
    Append<uint64_t>(out, 0);  // addr
    Append<uint64_t>(out, offset);
    Append<uint64_t>(out, size);
    Append<uint32_t>(out, link);
    Append<uint32_t>(out, info);
    Append<uint64_t>(out, 1);  // addralign
    Append<uint64_t>(out, entsize);
  };
  header(0, 0, 0, 0, 0, 0, 0, 0);
  for (size_t i = 0; i < sections.size(); ++i) {
    const TestSection& s = sections[i];
    header(name_offsets[i], s.type, s.flags, offsets[i],
           s.type == 8 ? s.nobits_size : s.data.size(), s.link, s.info, s.entry_size);
  }
  header(shstrtab_name, 3, 0, names_at, name_bytes.size(), 0, 0, 0);
  const uint16_t shnum = static_cast<uint16_t>(sections.size() + 2);
  const unsigned char ident[16] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x41, abi_version};
  std::memcpy(out.data(), ident, 16);
  auto put = [&](size_t at, auto v) { std::memcpy(out.data() + at, &v, sizeof(v)); };
  put(16, uint16_t{2});  // ET_EXEC
  put(18, machine);
  put(20, uint32_t{1});
  put(40, shoff);
  put(48, flags);
  put(52, uint16_t{64});
  put(58, uint16_t{64});
  put(60, shnum);
  put(62, static_cast<uint16_t>(shnum - 1));
  return out;
}

// .strtab and .symtab contents for `symbols` (symbol 0, the null symbol, is added first).
inline std::pair<std::vector<std::byte>, std::vector<std::byte>> BuildSymbols(
    const std::vector<TestSymbol>& symbols) {
  std::string strtab(1, '\0');
  std::vector<std::byte> symtab(24);
  for (const TestSymbol& sym : symbols) {
    Append<uint32_t>(symtab, static_cast<uint32_t>(strtab.size()));
    strtab += sym.name + '\0';
    Append<uint8_t>(symtab, sym.info);
    Append<uint8_t>(symtab, sym.other);
    Append<uint16_t>(symtab, sym.section);
    Append<uint64_t>(symtab, 0);
    Append<uint64_t>(symtab, 0);
  }
  return {Bytes(strtab), symtab};
}

// .nv.info attribute records.
inline void Sval(std::vector<std::byte>& out, uint8_t attribute, std::vector<uint32_t> words) {
  Append<uint8_t>(out, 4);
  Append<uint8_t>(out, attribute);
  Append<uint16_t>(out, static_cast<uint16_t>(words.size() * 4));
  for (uint32_t w : words) Append<uint32_t>(out, w);
}
inline void Hval(std::vector<std::byte>& out, uint8_t attribute, uint16_t value) {
  Append<uint8_t>(out, 3);
  Append<uint8_t>(out, attribute);
  Append<uint16_t>(out, value);
}
// EIATTR_KPARAM_INFO: u32 index, u16 ordinal, u16 offset, u32 with the size in bits 18-31.
inline void Kparam(std::vector<std::byte>& out, uint16_t ordinal, uint16_t offset, uint32_t size) {
  Sval(out, 0x17, {0, uint32_t{ordinal} | uint32_t{offset} << 16, size << 18 | 0x1f000});
}

}  // namespace flyt::cuda::testing
