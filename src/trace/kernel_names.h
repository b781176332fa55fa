// Kernel names of one traced process, and its per-kernel launch counts.
//
// KernelNames resolves what a launch record carries to a kernel's name. nvcc's programs register
// each kernel's host stub with its device function's (mangled) name (__cudaRegisterFunction);
// CUDA 13's stubs launch through a kernel handle obtained from __cudaGetKernel(stub); the driver
// API launches a CUfunction obtained from cuModuleGetFunction(name). Names are demangled once, when
// registered (the mangled text is kept when demangling fails, e.g. for a name cut to fit).
// The three tables together hold at most `max_names` entries; what does not fit is refused (the
// caller counts it) and its launches resolve to "unknown".
//
// KernelTable counts launches per name, with at most kMaxShapesPerKernel launch shapes per kernel
// (the rest in other_shapes) and at most `max_kernels` names (the rest under "other").
//
// Neither is thread-safe: the aggregator holds its lock around them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trace/stats.h"

namespace flyt::trace {

inline constexpr size_t kMaxShapesPerKernel = 8;
inline constexpr const char* kUnknownKernel = "unknown";
inline constexpr const char* kGraphKernel = "graph";
inline constexpr const char* kOtherKernel = "other";

// abi::__cxa_demangle's result, or `mangled` itself when it is not a mangled C++ name or does not
// demangle. Invalid UTF-8 becomes U+FFFD.
std::string Demangle(std::string_view mangled);

class KernelNames {
 public:
  explicit KernelNames(uint32_t max_names) : max_names_(max_names) {}

  // Each returns false when the tables are full and the entry is new (it is not kept).
  bool RegisterFunction(uint64_t stub, std::string_view mangled);
  bool GetKernel(uint64_t handle, uint64_t stub);
  bool ModuleFunction(uint64_t function, std::string_view mangled);

  // handle → stub → name, stub → name, CUfunction → name; "unknown" when none knows it.
  const std::string& Resolve(uint64_t function) const;
  bool Knows(uint64_t function) const;
  // The host stub a launch's `function` stands for: the stub its kernel handle was obtained for,
  // or `function` itself (cudaLaunchKernel(Ex) pass the stub).
  uint64_t StubOf(uint64_t function) const;

  size_t size() const { return stubs_.size() + handles_.size() + functions_.size(); }

 private:
  bool HasRoom() const { return size() < max_names_; }

  uint32_t max_names_;
  std::unordered_map<uint64_t, std::string> stubs_;      // stub → demangled name
  std::unordered_map<uint64_t, uint64_t> handles_;       // kernel handle → stub
  std::unordered_map<uint64_t, std::string> functions_;  // CUfunction → demangled name
};

// One executable, file-backed mapping of a process (a line of /proc/<pid>/maps).
struct FileMapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t offset = 0;  // file offset of `start`
  std::string path;
};

// The executable file-backed mappings of /proc/<pid>/maps text (at most `max` of them).
std::vector<FileMapping> ParseMaps(std::string_view text, size_t max = 4096);

// Kernel names of a process attached late, whose __cudaRegisterFunction calls ran before the
// probes: a host stub's address → the mapping holding it (a snapshot of /proc/<pid>/maps taken
// while the process was alive) → file + offset → the function symbol there (.symtab/.dynsym; an
// nvcc host stub's symbol is its kernel's mangled name). Results are cached per file (at most
// kMaxFiles files and kMaxPerFile offsets each; beyond, files are read again). Reads files:
// the drain thread only, without the aggregator's lock. Not thread-safe.
class StubSymbolizer {
 public:
  static constexpr size_t kMaxFiles = 64;
  static constexpr size_t kMaxPerFile = 4096;
  // The mangled name of the function starting at `address`, if a mapping and a symbol say so.
  std::optional<std::string> Lookup(const std::vector<FileMapping>& mappings, uint64_t address);

 private:
  std::unordered_map<std::string, std::unordered_map<uint64_t, std::optional<std::string>>> files_;
};

class KernelTable {
 public:
  explicit KernelTable(uint32_t max_kernels) : max_kernels_(max_kernels) {}

  // One launch of `name`; `shape` false for graph launches (no grid/block to record).
  void Add(const std::string& name, const uint32_t grid[3], const uint32_t block[3],
           uint32_t shared_bytes, bool shape = true);

  // The `top` kernels by launches (ties by name), then "other" with the rest when there is any.
  std::vector<KernelStats> Top(uint32_t top) const;

 private:
  uint32_t max_kernels_;
  std::unordered_map<std::string, KernelStats> by_name_;
  uint64_t overflow_launches_ = 0;  // launches of names that did not fit
};

}  // namespace flyt::trace
