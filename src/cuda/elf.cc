#include "cuda/elf.h"

#include <cinttypes>
#include <cstdio>
#include <string>

#include "cuda/bytes.h"

namespace flyt::cuda {
namespace {

using internal::Hex;
using internal::InRange;
using internal::Load;

constexpr uint64_t kEhdrBytes = 64;
constexpr uint64_t kShdrBytes = 64;
constexpr uint64_t kSymBytes = 24;
constexpr uint16_t kShnXindex = 0xffff;
constexpr uint32_t kShnLoreserve = 0xff00;
constexpr uint32_t kSectionSymtabShndx = 18;  // SHT_SYMTAB_SHNDX

// The NUL-terminated string at `offset` of string table `table`, or an error naming `what`.
Result<std::string_view> StringAt(std::span<const std::byte> table, uint64_t offset,
                                  const std::string& what, std::string_view table_name) {
  if (offset >= table.size()) {
    return InvalidArgument(what + ": name offset " + Hex(offset) + " is past the end of " +
                           std::string(table_name) + " (" + std::to_string(table.size()) +
                           " bytes)");
  }
  const char* begin = reinterpret_cast<const char*>(table.data()) + offset;
  const size_t room = table.size() - offset;
  const void* nul = std::memchr(begin, '\0', room);
  if (nul == nullptr) {
    return InvalidArgument(what + ": name at " + Hex(offset) + " in " + std::string(table_name) +
                           " is not NUL-terminated");
  }
  return std::string_view(begin, static_cast<const char*>(nul) - begin);
}

}  // namespace

namespace internal {
std::string Hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, value);
  return buf;
}
}  // namespace internal

Result<ElfFile> ElfFile::Parse(std::span<const std::byte> bytes, std::string_view what) {
  ElfFile elf;
  elf.bytes_ = bytes;
  elf.what_ = std::string(what);
  const std::string& w = elf.what_;
  if (bytes.size() < kEhdrBytes) {
    return InvalidArgument(w + ": " + std::to_string(bytes.size()) +
                           " bytes is too short for an ELF header (64)");
  }
  static constexpr unsigned char kMagic[4] = {0x7f, 'E', 'L', 'F'};
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return InvalidArgument(w + ": not an ELF file (bad magic at offset 0)");
  }
  const auto elf_class = Load<uint8_t>(bytes, 4);
  const auto data = Load<uint8_t>(bytes, 5);
  if (elf_class != 2) {
    return InvalidArgument(w + ": ELF class " + std::to_string(elf_class) +
                           " is not supported (only 64-bit ELF)");
  }
  if (data != 1) {
    return InvalidArgument(w + ": ELF data encoding " + std::to_string(data) +
                           " is not supported (only little-endian)");
  }
  elf.abi_version_ = Load<uint8_t>(bytes, 8);
  elf.type_ = Load<uint16_t>(bytes, 16);
  elf.machine_ = Load<uint16_t>(bytes, 18);
  elf.flags_ = Load<uint32_t>(bytes, 48);
  const auto shoff = Load<uint64_t>(bytes, 40);
  const auto shentsize = Load<uint16_t>(bytes, 58);
  uint64_t shnum = Load<uint16_t>(bytes, 60);
  uint32_t shstrndx = Load<uint16_t>(bytes, 62);
  if (shoff == 0) return elf;  // no section table: nothing to read, not an error
  if (shentsize < kShdrBytes) {
    return InvalidArgument(w + ": section header size " + std::to_string(shentsize) +
                           " is smaller than 64");
  }
  if (!InRange(bytes.size(), shoff, kShdrBytes)) {
    return InvalidArgument(w + ": section table offset " + Hex(shoff) + " is past the end (" +
                           std::to_string(bytes.size()) + " bytes)");
  }
  // Extended numbering: the real count and string-table index live in section 0.
  if (shnum == 0) shnum = Load<uint64_t>(bytes, shoff + 32);
  if (shstrndx == kShnXindex) shstrndx = Load<uint32_t>(bytes, shoff + 40);
  uint64_t table_bytes = 0;
  if (!internal::CheckedMul(shnum, shentsize, &table_bytes) ||
      !InRange(bytes.size(), shoff, table_bytes)) {
    return InvalidArgument(w + ": section table (" + std::to_string(shnum) + " x " +
                           std::to_string(shentsize) + " bytes at " + Hex(shoff) +
                           ") does not fit in the file (" + std::to_string(bytes.size()) +
                           " bytes)");
  }
  elf.sections_.reserve(shnum);
  std::vector<uint32_t> name_offsets;
  name_offsets.reserve(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + i * shentsize;
    ElfSection s;
    s.index = static_cast<uint32_t>(i);
    name_offsets.push_back(Load<uint32_t>(bytes, h));
    s.type = Load<uint32_t>(bytes, h + 4);
    s.flags = Load<uint64_t>(bytes, h + 8);
    s.offset = Load<uint64_t>(bytes, h + 24);
    s.size_bytes = Load<uint64_t>(bytes, h + 32);
    s.link = Load<uint32_t>(bytes, h + 40);
    s.info = Load<uint32_t>(bytes, h + 44);
    s.entry_size = Load<uint64_t>(bytes, h + 56);
    if (i > 0 && s.type != kElfSectionNoBits && s.type != 0) {
      if (!InRange(bytes.size(), s.offset, s.size_bytes)) {
        return InvalidArgument(w + ": section " + std::to_string(i) + " (" +
                               std::to_string(s.size_bytes) + " bytes at " + Hex(s.offset) +
                               ") runs past the end of the file (" + std::to_string(bytes.size()) +
                               " bytes)");
      }
      s.data = bytes.subspan(s.offset, s.size_bytes);
    }
    elf.sections_.push_back(s);
  }
  if (shnum == 0) return elf;
  if (shstrndx >= shnum || shstrndx == 0) {
    return InvalidArgument(w + ": section-name table index " + std::to_string(shstrndx) +
                           " is not a section (" + std::to_string(shnum) + " sections)");
  }
  const std::span<const std::byte> names = elf.sections_[shstrndx].data;
  for (uint64_t i = 1; i < shnum; ++i) {
    FLYT_ASSIGN_OR_RETURN(elf.sections_[i].name,
                          StringAt(names, name_offsets[i], w + ": section " + std::to_string(i),
                                   "the section names"));
  }
  return elf;
}

const ElfSection* ElfFile::FindSection(std::string_view name) const {
  for (const ElfSection& s : sections_) {
    if (s.index != 0 && s.name == name) return &s;
  }
  return nullptr;
}

Result<std::vector<ElfSymbol>> ElfFile::Symbols() const {
  std::vector<ElfSymbol> symbols;
  const ElfSection* symtab = nullptr;
  for (const ElfSection& s : sections_) {
    if (s.type == kElfSectionSymtab) {
      symtab = &s;
      break;
    }
  }
  if (symtab == nullptr) return symbols;
  const std::string where =
      what_ + ": symbol table (section " + std::to_string(symtab->index) + ")";
  if (symtab->entry_size < kSymBytes) {
    return InvalidArgument(where + ": entry size " + std::to_string(symtab->entry_size) +
                           " is smaller than 24");
  }
  if (symtab->link == 0 || symtab->link >= sections_.size() ||
      sections_[symtab->link].type == kElfSectionNoBits) {
    return InvalidArgument(where + ": its string table index " + std::to_string(symtab->link) +
                           " is not a section with contents");
  }
  const std::span<const std::byte> strings = sections_[symtab->link].data;
  // Section indexes past SHN_LORESERVE are kept in a SHT_SYMTAB_SHNDX section linked to it.
  std::span<const std::byte> shndx_table;
  for (const ElfSection& s : sections_) {
    if (s.type == kSectionSymtabShndx && s.link == symtab->index) shndx_table = s.data;
  }
  const uint64_t count = symtab->data.size() / symtab->entry_size;
  symbols.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t e = i * symtab->entry_size;
    ElfSymbol sym;
    sym.index = static_cast<uint32_t>(i);
    const auto name_offset = Load<uint32_t>(symtab->data, e);
    sym.info = Load<uint8_t>(symtab->data, e + 4);
    sym.other = Load<uint8_t>(symtab->data, e + 5);
    sym.section = Load<uint16_t>(symtab->data, e + 6);
    sym.value = Load<uint64_t>(symtab->data, e + 8);
    sym.size_bytes = Load<uint64_t>(symtab->data, e + 16);
    if (sym.section == kShnXindex) {
      if (!InRange(shndx_table.size(), i * 4, 4)) {
        return InvalidArgument(where + ": symbol " + std::to_string(i) +
                               " has an extended section index but no SHT_SYMTAB_SHNDX entry");
      }
      sym.section = Load<uint32_t>(shndx_table, i * 4);
    } else if (sym.section >= kShnLoreserve) {
      sym.section = 0;  // SHN_ABS, SHN_COMMON, ...: not a section of this file
    }
    if (sym.section >= sections_.size()) {
      return InvalidArgument(where + ": symbol " + std::to_string(i) + " names section " +
                             std::to_string(sym.section) + " of " +
                             std::to_string(sections_.size()));
    }
    FLYT_ASSIGN_OR_RETURN(sym.name,
                          StringAt(strings, name_offset, where + ": symbol " + std::to_string(i),
                                   "the symbol names"));
    symbols.push_back(sym);
  }
  return symbols;
}

}  // namespace flyt::cuda
