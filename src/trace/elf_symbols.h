// What the tracer needs to know of an ELF file before it probes it: which probe symbols it
// defines and where (file offsets, from .dynsym and .symtab), its DT_NEEDED libraries, whether it
// is flyt's own libcudart (the flyt-only export `flyt_runtime_version`), and the signs of CUDA in
// an executable (.nv_fatbin, a reference to __cudaRegisterFatBinary). Classify() turns that into
// the library class and the probes to attach, or the reason a CUDA program cannot be probed (a
// stripped static binary).
//
// Read with libelf: a malformed or truncated file is an error Status, never a crash. Plain values
// and free functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "trace/probes.h"

namespace flyt::trace {

// The flyt-only data symbol flyt's libcudart.so.13 exports (src/runtime/libcudart.map).
inline constexpr const char* kFlytRuntimeMarker = "flyt_runtime_version";

struct ElfInfo {
  uint16_t type = 0;  // ET_EXEC, ET_DYN
  // Probe symbols (probes.h) the file defines: name -> file offset of the function.
  std::map<std::string, uint64_t> dynamic_functions;  // .dynsym
  std::map<std::string, uint64_t> static_functions;   // .symtab
  std::vector<std::string> needed;                    // DT_NEEDED
  bool has_symtab = false;
  bool has_nv_fatbin = false;
  bool references_register_fatbinary = false;  // __cudaRegisterFatBinary undefined in .dynsym
  bool flyt_runtime = false;                   // exports kFlytRuntimeMarker
  // File-offset ranges [begin, end) of the sections that hold code (SHF_EXECINSTR).
  std::vector<std::pair<uint64_t, uint64_t>> code_sections;
};

// Reads `path` (any path the kernel can open: /proc/<pid>/root/..., /proc/<pid>/exe).
Result<ElfInfo> ReadElfInfo(const std::string& path);

// The function symbols (.symtab, then .dynsym) that start at the given file offsets: offset →
// name as the file spells it (mangled). For the kernel names of a process attached late: an nvcc
// host stub's symbol is its kernel's mangled name. Offsets no function starts at are left out.
Result<std::map<uint64_t, std::string>> FunctionsAtOffsets(const std::string& path,
                                                           const std::set<uint64_t>& offsets);

struct ProbePoint {
  uint16_t func = 0;
  std::string symbol;
  uint64_t offset = 0;  // file offset, as a uprobe takes it
  // Bytes from the start of the code section holding the function to it, and from it to the
  // section's end (0, 0 when no code section holds it): where the library's code lies once mapped.
  uint64_t code_before = 0;
  uint64_t code_after = 0;
};

struct Classification {
  std::optional<LibraryClass> library;  // nullopt: nothing to probe
  std::vector<ProbePoint> probes;
  std::string unprobeable_reason;  // set for a CUDA program that cannot be probed
};

// What kind of file `name` (its basename) is by name alone: libcudart.so*, libcudart-*.so*
// (runtime), libcuda.so* (driver), libc.so* (libc); nullopt for anything else (an executable).
std::optional<LibraryClass> ClassByName(const std::string& basename);

// Decides from `info` (and the name-based guess) what to probe in the file.
Classification Classify(const std::string& basename, const ElfInfo& info);

}  // namespace flyt::trace
