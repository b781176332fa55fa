// A minimal reader for 64-bit little-endian ELF files: the section table and the symbol table.
//
// Two kinds of ELF reach flyt: cubins (e_machine EM_CUDA, one per fatbin entry) and the x86-64 or
// aarch64 host programs that carry fatbins in their .nv_fatbin section. Both only need sections
// and symbols, so this reader does nothing else (no program headers, no relocations).
//
// ElfFile::Parse validates the header and every section header against the size of the buffer:
// afterwards each ElfSection::data lies inside the buffer (empty for SHT_NOBITS) and each name is
// a NUL-terminated string inside its string table. ElfFile keeps views into the caller's bytes,
// so the bytes must outlive it. It is immutable after Parse and safe to share between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace flyt::cuda {

inline constexpr uint16_t kElfMachineCuda = 190;  // EM_CUDA
inline constexpr uint32_t kElfSectionNoBits = 8;  // SHT_NOBITS
inline constexpr uint32_t kElfSectionSymtab = 2;  // SHT_SYMTAB

struct ElfSection {
  uint32_t index = 0;
  std::string_view name;
  uint32_t type = 0;
  uint64_t flags = 0;
  uint64_t offset = 0;
  uint64_t size_bytes = 0;  // sh_size; for SHT_NOBITS the size it occupies when loaded
  uint32_t link = 0;
  uint32_t info = 0;
  uint64_t entry_size = 0;
  std::span<const std::byte> data;  // the section's bytes in the file; empty for SHT_NOBITS
};

struct ElfSymbol {
  uint32_t index = 0;
  std::string_view name;
  uint8_t info = 0;   // binding << 4 | type
  uint8_t other = 0;  // visibility; for cubins also STO_CUDA_* bits
  uint32_t section = 0;
  uint64_t value = 0;
  uint64_t size_bytes = 0;

  uint8_t type() const { return info & 0xf; }
};

class ElfFile {
 public:
  // Validates the header and section table. `what` names the file in error messages ("cubin",
  // "host binary a.out").
  [[nodiscard]] static Result<ElfFile> Parse(std::span<const std::byte> bytes,
                                             std::string_view what = "ELF file");

  uint16_t type() const { return type_; }  // ET_EXEC, ET_REL, ...
  uint16_t machine() const { return machine_; }
  uint32_t flags() const { return flags_; }
  uint8_t abi_version() const { return abi_version_; }
  const std::vector<ElfSection>& sections() const { return sections_; }

  // The first section named `name`, or nullptr.
  const ElfSection* FindSection(std::string_view name) const;

  // The entries of the first SHT_SYMTAB section (empty when there is none), every name and
  // section index checked.
  [[nodiscard]] Result<std::vector<ElfSymbol>> Symbols() const;

 private:
  ElfFile() = default;

  std::span<const std::byte> bytes_;
  std::string what_;
  uint16_t type_ = 0;
  uint16_t machine_ = 0;
  uint32_t flags_ = 0;
  uint8_t abi_version_ = 0;
  std::vector<ElfSection> sections_;
};

}  // namespace flyt::cuda
