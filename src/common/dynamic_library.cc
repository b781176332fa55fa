#include "common/dynamic_library.h"

#include <dlfcn.h>

#include <utility>

namespace flyt {

Result<DynamicLibrary> DynamicLibrary::Open(const std::string& path) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return Unavailable("cannot load " + path + ": " + (err ? err : "unknown dlopen error"));
  }
  return DynamicLibrary(handle, path);
}

DynamicLibrary::~DynamicLibrary() { Close(); }

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    Close();
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

void DynamicLibrary::Close() {
  if (handle_ != nullptr) dlclose(handle_);
  handle_ = nullptr;
}

void* DynamicLibrary::Symbol(const char* name) const {
  if (handle_ == nullptr) return nullptr;
  return dlsym(handle_, name);
}

std::string BoundSymbol(const std::vector<SymbolBinding>& bindings, std::string_view member) {
  for (const SymbolBinding& b : bindings) {
    if (b.member == member) return b.bound;
  }
  return {};
}

void* SymbolBinder::Bind(std::string_view member, SymbolRequirement requirement,
                         std::initializer_list<const char*> names) {
  SymbolBinding binding{std::string(member), requirement, {}, {}};
  void* address = nullptr;
  for (const char* name : names) {
    binding.candidates.emplace_back(name);
    if (address == nullptr) {
      address = library_.Symbol(name);
      if (address != nullptr) binding.bound = name;
    }
  }
  if (address == nullptr && binding.required() && !binding.candidates.empty()) {
    missing_.push_back(binding.candidates.front());
  }
  bindings_.push_back(std::move(binding));
  return address;
}

void SymbolBinder::RequireAnyOf(std::initializer_list<std::string_view> members) {
  std::string alternatives;
  for (std::string_view member : members) {
    for (const SymbolBinding& b : bindings_) {
      if (b.member != member) continue;
      if (!b.bound.empty()) return;
      if (!b.candidates.empty()) {
        if (!alternatives.empty()) alternatives += " or ";
        alternatives += b.candidates.front();
      }
    }
  }
  if (!alternatives.empty()) missing_.push_back(std::move(alternatives));
}

Result<std::vector<SymbolBinding>> SymbolBinder::Finish() && {
  if (missing_.empty()) return std::move(bindings_);
  std::string message =
      library_.requested_path() + " is not a usable " + kind_ + ": it does not export ";
  for (size_t i = 0; i < missing_.size(); ++i) {
    if (i > 0) message += ", ";
    message += missing_[i];
  }
  return Unavailable(std::move(message));
}

}  // namespace flyt
