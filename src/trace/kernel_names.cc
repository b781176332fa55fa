#include "trace/kernel_names.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "common/strings.h"

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
  uint64_t stub = function;
  if (auto h = handles_.find(function); h != handles_.end()) stub = h->second;
  if (auto s = stubs_.find(stub); s != stubs_.end()) return s->second;
  if (auto f = functions_.find(function); f != functions_.end()) return f->second;
  return *unknown;
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
