#include "trace/kernel_names.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

#include "common/strings.h"
#include "trace/elf_symbols.h"

namespace flyt::trace {

std::string Demangle(std::string_view mangled) {
  if (StartsWith(mangled, "_Z")) {
    std::string text(mangled);
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> out(
        abi::__cxa_demangle(text.c_str(), nullptr, nullptr, &status), &std::free);
    if (status == 0 && out != nullptr) return SanitizeUtf8(out.get());
  }
  return SanitizeUtf8(mangled);
}

bool KernelNames::RegisterFunction(uint64_t stub, std::string_view mangled) {
  auto it = stubs_.find(stub);
  if (it == stubs_.end() && !HasRoom()) return false;
  std::string name = Demangle(mangled);
  if (it == stubs_.end()) {
    stubs_.emplace(stub, std::move(name));
  } else {
    it->second = std::move(name);
  }
  return true;
}

bool KernelNames::GetKernel(uint64_t handle, uint64_t stub) {
  auto it = handles_.find(handle);
  if (it == handles_.end() && !HasRoom()) return false;
  handles_[handle] = stub;
  return true;
}

bool KernelNames::ModuleFunction(uint64_t function, std::string_view mangled) {
  auto it = functions_.find(function);
  if (it == functions_.end() && !HasRoom()) return false;
  functions_[function] = Demangle(mangled);
  return true;
}

const std::string& KernelNames::Resolve(uint64_t function) const {
  static const std::string* const unknown = new std::string(kUnknownKernel);
  if (auto s = stubs_.find(StubOf(function)); s != stubs_.end()) return s->second;
  if (auto f = functions_.find(function); f != functions_.end()) return f->second;
  return *unknown;
}

bool KernelNames::Knows(uint64_t function) const {
  return stubs_.count(StubOf(function)) > 0 || functions_.count(function) > 0;
}

uint64_t KernelNames::StubOf(uint64_t function) const {
  auto h = handles_.find(function);
  return h == handles_.end() ? function : h->second;
}

std::vector<FileMapping> ParseMaps(std::string_view text, size_t max) {
  // "start-end perms offset dev inode   path"
  std::vector<FileMapping> out;
  for (std::string_view line : Split(text, '\n')) {
    if (out.size() >= max) break;
    std::vector<std::string_view> f;
    size_t i = 0;
    while (f.size() < 5 && i < line.size()) {
      size_t j = line.find(' ', i);
      if (j == std::string_view::npos) j = line.size();
      if (j > i) f.push_back(line.substr(i, j - i));
      i = j + 1;
    }
    if (f.size() < 5 || i >= line.size()) continue;
    std::string_view path = Trim(line.substr(i));
    if (path.empty() || path[0] != '/' || f[1].size() < 3 || f[1][2] != 'x') continue;
    constexpr std::string_view kDeleted = " (deleted)";
    if (path.size() >= kDeleted.size() && path.substr(path.size() - kDeleted.size()) == kDeleted) {
      continue;  // the file on disk is not that one any more
    }  // the file on disk is not that one any more
    size_t dash = f[0].find('-');
    if (dash == std::string_view::npos) continue;
    FileMapping m;
    char* end = nullptr;
    std::string start(f[0].substr(0, dash)), stop(f[0].substr(dash + 1)), offset(f[2]);
    m.start = std::strtoull(start.c_str(), &end, 16);
    if (*end != 0) continue;
    m.end = std::strtoull(stop.c_str(), &end, 16);
    if (*end != 0 || m.end <= m.start) continue;
    m.offset = std::strtoull(offset.c_str(), &end, 16);
    if (*end != 0) continue;
    m.path = std::string(path);
    out.push_back(std::move(m));
  }
  return out;
}

std::optional<std::string> StubSymbolizer::Lookup(const std::vector<FileMapping>& mappings,
                                                  uint64_t address) {
  const FileMapping* m = nullptr;
  for (const FileMapping& candidate : mappings) {
    if (address >= candidate.start && address < candidate.end) {
      m = &candidate;
      break;
    }
  }
  if (m == nullptr) return std::nullopt;
  uint64_t offset = address - m->start + m->offset;
  auto file = files_.find(m->path);
  if (file != files_.end()) {
    if (auto it = file->second.find(offset); it != file->second.end()) return it->second;
  }
  std::optional<std::string> name;
  if (Result<std::map<uint64_t, std::string>> found = FunctionsAtOffsets(m->path, {offset});
      found.ok() && !found->empty()) {
    name = found->begin()->second;
  }
  if (file == files_.end() && files_.size() < kMaxFiles) {
    file = files_.emplace(m->path, std::unordered_map<uint64_t, std::optional<std::string>>())
               .first;
  }
  if (file != files_.end() && file->second.size() < kMaxPerFile) file->second[offset] = name;
  return name;
}

void KernelTable::Add(const std::string& name, const uint32_t grid[3], const uint32_t block[3],
                      uint32_t shared_bytes, bool shape) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    if (by_name_.size() >= max_kernels_) {
      ++overflow_launches_;
      return;
    }
    it = by_name_.emplace(name, KernelStats{}).first;
    it->second.name = name;
  }
  KernelStats& k = it->second;
  ++k.launches;
  if (!shape) return;
  for (LaunchShape& s : k.shapes) {
    if (std::equal(grid, grid + 3, s.grid) && std::equal(block, block + 3, s.block) &&
        s.shared_bytes == shared_bytes) {
      ++s.launches;
      return;
    }
  }
  if (k.shapes.size() >= kMaxShapesPerKernel) {
    ++k.other_shapes;
    return;
  }
  LaunchShape s;
  std::copy(grid, grid + 3, s.grid);
  std::copy(block, block + 3, s.block);
  s.shared_bytes = shared_bytes;
  s.launches = 1;
  k.shapes.push_back(s);
}

std::vector<KernelStats> KernelTable::Top(uint32_t top) const {
  std::vector<const KernelStats*> all;
  all.reserve(by_name_.size());
  for (const auto& [name, k] : by_name_) all.push_back(&k);
  std::sort(all.begin(), all.end(), [](const KernelStats* a, const KernelStats* b) {
    if (a->launches != b->launches) return a->launches > b->launches;
    return a->name < b->name;
  });
  std::vector<KernelStats> out;
  KernelStats other;
  other.name = kOtherKernel;
  other.launches = overflow_launches_;
  for (const KernelStats* k : all) {
    // A kernel the program itself named "other" is folded into the rest, so the name stays one row.
    if (out.size() < top && k->name != kOtherKernel) {
      out.push_back(*k);
    } else {
      other.launches += k->launches;
    }
  }
  if (other.launches > 0) {
    other.other_shapes = other.launches;
    out.push_back(std::move(other));
  }
  return out;
}

}  // namespace flyt::trace
