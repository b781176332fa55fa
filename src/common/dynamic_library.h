// DynamicLibrary: sole owner of a dlopen() handle; dlclose() on destruction. Move-only.
// SymbolBinder: binds a loaded library's entry points, each by the first of its exported names
// (newest first), and refuses the library naming every required entry it lacks. The NVML loader
// (nvml/library.h) and the CUDA driver loader (cuda_driver/library.h) expand their entry-point
// lists into calls of one SymbolBinder.
//
// Symbols looked up through a DynamicLibrary are valid only while it lives, so whoever holds
// function pointers from it must also hold (or outlive-bound) the DynamicLibrary. Lookups are
// thread-safe (dlsym is); Open/destruction are not concurrent with lookups. A SymbolBinder borrows
// its DynamicLibrary and is used by one thread, during a loader's Load.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace flyt {

class DynamicLibrary {
 public:
  // Opens `path` with RTLD_NOW | RTLD_LOCAL. The error names the path and dlerror()'s text.
  static Result<DynamicLibrary> Open(const std::string& path);

  DynamicLibrary() = default;
  ~DynamicLibrary();
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;

  // Returns the address of `name`, or nullptr when the library does not export it.
  void* Symbol(const char* name) const;

  const std::string& requested_path() const { return path_; }
  bool loaded() const { return handle_ != nullptr; }

 private:
  DynamicLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void Close();

  void* handle_ = nullptr;
  std::string path_;
};

// kRequired entries must resolve or the library is refused; kOptional ones may be absent.
enum class SymbolRequirement { kRequired, kOptional };

// What a loader bound for one entry point, for diagnostics and tests.
struct SymbolBinding {
  std::string member;  // the loader's name for the entry point, e.g. "MemAlloc"
  SymbolRequirement requirement = SymbolRequirement::kOptional;
  std::vector<std::string> candidates;  // exported names tried, newest first ("cuMemAlloc_v2")
  std::string bound;                    // the name bound; empty when the library exports none

  bool required() const { return requirement == SymbolRequirement::kRequired; }
};

// The symbol bound for `member` in `bindings`; empty when it is absent or unknown.
std::string BoundSymbol(const std::vector<SymbolBinding>& bindings, std::string_view member);

class SymbolBinder {
 public:
  // `library` must outlive the binder. `kind` names what the library should be, for the error
  // ("NVML library", "CUDA driver library").
  SymbolBinder(const DynamicLibrary& library, std::string kind)
      : library_(library), kind_(std::move(kind)) {}

  // Returns the address of the first of `names` the library exports, or nullptr when it exports
  // none; a required entry without any is remembered (by its first name) for Finish.
  void* Bind(std::string_view member, SymbolRequirement requirement,
             std::initializer_list<const char*> names);

  // The same, stored into a function pointer of the entry's own type (POSIX guarantees that a
  // dlsym result converts to a function pointer).
  template <typename Fn>
  void Bind(Fn*& slot, std::string_view member, SymbolRequirement requirement,
            std::initializer_list<const char*> names) {
    slot = reinterpret_cast<Fn*>(Bind(member, requirement, names));
  }

  // A need that any one of several (optional) entries already bound meets, e.g. context creation
  // through cuCtxCreate_v4 or cuCtxCreate_v2. When none of `members` was bound, their first names,
  // joined by " or ", count as one missing entry.
  void RequireAnyOf(std::initializer_list<std::string_view> members);

  // The bindings, in the order bound; or, when a required entry is missing, kUnavailable:
  // "<path> is not a usable <kind>: it does not export <name>, <name>".
  [[nodiscard]] Result<std::vector<SymbolBinding>> Finish() &&;

 private:
  const DynamicLibrary& library_;
  std::string kind_;
  std::vector<SymbolBinding> bindings_;
  std::vector<std::string> missing_;
};

}  // namespace flyt
