#include "trace/elf_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <set>
#include <vector>

#include "common/unique_fd.h"

namespace flyt::trace {
namespace {

Status ElfError(const std::string& path, const std::string& what) {
  return InvalidArgument(path + ": malformed ELF (" + what + "): " + elf_errmsg(-1));
}

struct ElfCloser {
  void operator()(Elf* e) const { elf_end(e); }
};

struct Section {
  GElf_Shdr header{};
  Elf_Scn* scn = nullptr;
  std::string name;
};

// File offset of virtual address `value` in section `index`, when the section holds it.
std::optional<uint64_t> FileOffset(const std::vector<Section>& sections, size_t index,
                                   uint64_t value) {
  if (index == SHN_UNDEF || index >= sections.size()) return std::nullopt;
  const GElf_Shdr& h = sections[index].header;
  if (h.sh_type == SHT_NOBITS) return std::nullopt;
  if (value < h.sh_addr || value - h.sh_addr >= h.sh_size) return std::nullopt;
  return value - h.sh_addr + h.sh_offset;
}

Status ReadSymbols(Elf* elf, const std::string& path, const std::vector<Section>& sections,
                   const Section& table, bool dynamic, ElfInfo* info) {
  Elf_Data* data = elf_getdata(table.scn, nullptr);
  if (data == nullptr) return ElfError(path, table.name);
  if (table.header.sh_entsize == 0) return InvalidArgument(path + ": " + table.name + ": entsize 0");
  size_t count = data->d_size / table.header.sh_entsize;
  auto& out = dynamic ? info->dynamic_functions : info->static_functions;
  for (size_t i = 1; i < count; ++i) {
    GElf_Sym sym;
    if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) {
      return ElfError(path, table.name + " entry " + std::to_string(i));
    }
    const char* raw = elf_strptr(elf, table.header.sh_link, sym.st_name);
    if (raw == nullptr) return ElfError(path, table.name + " name of entry " + std::to_string(i));
    std::string_view name(raw);
    if (sym.st_shndx == SHN_UNDEF) {
      if (dynamic && name == "__cudaRegisterFatBinary") info->references_register_fatbinary = true;
      continue;
    }
    if (dynamic && name == kFlytRuntimeMarker) info->flyt_runtime = true;
    int type = GELF_ST_TYPE(sym.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
    if (!FindProbe(name)) continue;
    std::optional<uint64_t> offset = FileOffset(sections, sym.st_shndx, sym.st_value);
    if (!offset) continue;
    out.emplace(std::string(name), *offset);  // the first definition wins
  }
  return Status::Ok();
}

Status ReadNeeded(Elf* elf, const std::string& path, const Section& dynamic, ElfInfo* info) {
  Elf_Data* data = elf_getdata(dynamic.scn, nullptr);
  if (data == nullptr) return ElfError(path, ".dynamic");
  if (dynamic.header.sh_entsize == 0) return Status::Ok();
  size_t count = data->d_size / dynamic.header.sh_entsize;
  for (size_t i = 0; i < count; ++i) {
    GElf_Dyn dyn;
    if (gelf_getdyn(data, static_cast<int>(i), &dyn) == nullptr) {
      return ElfError(path, ".dynamic entry " + std::to_string(i));
    }
    if (dyn.d_tag == DT_NULL) break;
    if (dyn.d_tag != DT_NEEDED) continue;
    const char* name = elf_strptr(elf, dynamic.header.sh_link, dyn.d_un.d_val);
    if (name == nullptr) return ElfError(path, "DT_NEEDED name");
    info->needed.emplace_back(name);
  }
  return Status::Ok();
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// An ELF file opened and its section table checked against the file's size.
struct OpenedElf {
  UniqueFd fd;
  std::unique_ptr<Elf, ElfCloser> elf;
  GElf_Ehdr ehdr{};
  std::vector<Section> sections;
};

Result<OpenedElf> OpenElf(const std::string& path) {
  static const bool kVersionOk = elf_version(EV_CURRENT) != EV_NONE;
  if (!kVersionOk) return Internal("libelf: " + std::string(elf_errmsg(-1)));
  OpenedElf out;
  out.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!out.fd.valid()) return ErrnoError("open " + path, errno);
  struct stat st {};
  if (::fstat(out.fd.get(), &st) != 0) return ErrnoError("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  out.elf.reset(elf_begin(out.fd.get(), ELF_C_READ_MMAP, nullptr));
  if (!out.elf) return ElfError(path, "elf_begin");
  Elf* elf = out.elf.get();
  if (elf_kind(elf) != ELF_K_ELF) return InvalidArgument(path + ": not an ELF file");
  GElf_Ehdr& ehdr = out.ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr) return ElfError(path, "header");
  if (gelf_getclass(elf) != ELFCLASS64) return InvalidArgument(path + ": not a 64-bit ELF");
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return ElfError(path, "section names");
  size_t count = 0;
  if (elf_getshdrnum(elf, &count) != 0) return ElfError(path, "section count");

  // The header's count (libelf shortens its own to what fits in a truncated file).
  uint64_t declared = ehdr.e_shnum != 0 ? ehdr.e_shnum : count;
  if (declared < count) declared = count;
  if (ehdr.e_shoff > static_cast<uint64_t>(st.st_size) ||
      declared * uint64_t{ehdr.e_shentsize} > static_cast<uint64_t>(st.st_size) - ehdr.e_shoff) {
    return InvalidArgument(path + ": malformed ELF (the section table lies past the end of the "
                           "file: truncated?)");
  }
  std::vector<Section>& sections = out.sections;
  sections.resize(count);
  for (size_t i = 0; i < count; ++i) {
    Elf_Scn* scn = elf_getscn(elf, i);
    if (scn == nullptr) return ElfError(path, "section " + std::to_string(i));
    sections[i].scn = scn;
    if (gelf_getshdr(scn, &sections[i].header) == nullptr) {
      return ElfError(path, "section header " + std::to_string(i));
    }
    if (i == 0) continue;
    const char* name = elf_strptr(elf, shstrndx, sections[i].header.sh_name);
    if (name == nullptr) return ElfError(path, "name of section " + std::to_string(i));
    sections[i].name = name;
    // Every section's bytes must lie inside the file (libelf checks the rest on access).
    const GElf_Shdr& h = sections[i].header;
    if (h.sh_type != SHT_NOBITS &&
        (h.sh_offset > static_cast<uint64_t>(st.st_size) ||
         h.sh_size > static_cast<uint64_t>(st.st_size) - h.sh_offset)) {
      return InvalidArgument(path + ": malformed ELF (section " + sections[i].name +
                             " lies past the end of the file: truncated?)");
    }
  }
  return out;
}

}  // namespace

Result<ElfInfo> ReadElfInfo(const std::string& path) {
  Result<OpenedElf> opened = OpenElf(path);
  if (!opened.ok()) return opened.status();
  Elf* elf = opened->elf.get();
  const std::vector<Section>& sections = opened->sections;
  ElfInfo info;
  info.type = opened->ehdr.e_type;
  for (const Section& s : sections) {
    if (s.name == ".nv_fatbin") info.has_nv_fatbin = true;
    if ((s.header.sh_flags & SHF_EXECINSTR) != 0 && s.header.sh_type != SHT_NOBITS) {
      info.code_sections.emplace_back(s.header.sh_offset, s.header.sh_offset + s.header.sh_size);
    }
    if (s.header.sh_type == SHT_SYMTAB) {
      info.has_symtab = true;
      FLYT_RETURN_IF_ERROR(ReadSymbols(elf, path, sections, s, false, &info));
    } else if (s.header.sh_type == SHT_DYNSYM) {
      FLYT_RETURN_IF_ERROR(ReadSymbols(elf, path, sections, s, true, &info));
    } else if (s.header.sh_type == SHT_DYNAMIC) {
      FLYT_RETURN_IF_ERROR(ReadNeeded(elf, path, s, &info));
    }
  }
  return info;
}

Result<std::map<uint64_t, std::string>> FunctionsAtOffsets(const std::string& path,
                                                           const std::set<uint64_t>& offsets) {
  Result<OpenedElf> opened = OpenElf(path);
  if (!opened.ok()) return opened.status();
  Elf* elf = opened->elf.get();
  const std::vector<Section>& sections = opened->sections;
  std::map<uint64_t, std::string> out;
  // .symtab first (it has the local and hidden functions), then .dynsym for what is left.
  for (uint32_t type : {SHT_SYMTAB, SHT_DYNSYM}) {
    for (const Section& table : sections) {
      if (table.header.sh_type != type || table.header.sh_entsize == 0) continue;
      Elf_Data* data = elf_getdata(table.scn, nullptr);
      if (data == nullptr) return ElfError(path, table.name);
      size_t count = data->d_size / table.header.sh_entsize;
      for (size_t i = 1; i < count && out.size() < offsets.size(); ++i) {
        GElf_Sym sym;
        if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) {
          return ElfError(path, table.name + " entry " + std::to_string(i));
        }
        int kind = GELF_ST_TYPE(sym.st_info);
        if (sym.st_shndx == SHN_UNDEF || (kind != STT_FUNC && kind != STT_GNU_IFUNC)) continue;
        std::optional<uint64_t> offset = FileOffset(sections, sym.st_shndx, sym.st_value);
        if (!offset || offsets.count(*offset) == 0 || out.count(*offset) > 0) continue;
        const char* name = elf_strptr(elf, table.header.sh_link, sym.st_name);
        if (name == nullptr || *name == 0) continue;
        out.emplace(*offset, name);
      }
    }
  }
  return out;
}

std::optional<LibraryClass> ClassByName(const std::string& basename) {
  if (StartsWith(basename, "libcudart.so") ||
      (StartsWith(basename, "libcudart-") && basename.find(".so") != std::string::npos)) {
    return LibraryClass::kNvidiaRuntime;
  }
  if (StartsWith(basename, "libcuda.so")) return LibraryClass::kDriver;
  if (StartsWith(basename, "libc.so")) return LibraryClass::kLibc;
  return std::nullopt;
}

Classification Classify(const std::string& basename, const ElfInfo& info) {
  Classification out;
  std::optional<LibraryClass> by_name = ClassByName(basename);
  const std::map<std::string, uint64_t>* symbols = &info.dynamic_functions;
  if (by_name) {
    out.library = *by_name;
    if (*by_name == LibraryClass::kNvidiaRuntime && info.flyt_runtime) {
      out.library = LibraryClass::kFlytRuntime;
    }
    if (info.dynamic_functions.empty()) symbols = &info.static_functions;
  } else {
    // An executable (or another library) that carries the runtime in its .symtab.
    bool has_runtime = false;
    for (const auto& [name, offset] : info.static_functions) {
      std::optional<ProbeSpec> spec = FindProbe(name);
      if (spec && spec->family == ProbeFamily::kRuntime) has_runtime = true;
    }
    if (has_runtime) {
      out.library = LibraryClass::kStaticRuntime;
      symbols = &info.static_functions;
    } else {
      bool needs_cudart = false;
      for (const std::string& n : info.needed) {
        if (ClassByName(n) == LibraryClass::kNvidiaRuntime) needs_cudart = true;
      }
      if (!info.has_symtab && info.has_nv_fatbin && !needs_cudart &&
          !info.references_register_fatbinary) {
        out.unprobeable_reason =
            "stripped static binary: no .symtab, carries .nv_fatbin and no libcudart";
      }
      return out;
    }
  }
  for (const auto& [name, offset] : *symbols) {
    std::optional<ProbeSpec> spec = FindProbe(name);
    if (!spec || !Carries(*out.library, *spec)) continue;
    ProbePoint p{spec->func, name, offset};
    for (const auto& [begin, end] : info.code_sections) {
      if (offset >= begin && offset < end) {
        p.code_before = offset - begin;
        p.code_after = end - offset;
        break;
      }
    }
    out.probes.push_back(std::move(p));
  }
  if (out.probes.empty()) out.library.reset();
  return out;
}

}  // namespace flyt::trace
