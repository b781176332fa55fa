// DynamicLibrary: sole owner of a dlopen() handle; dlclose() on destruction. Move-only.
//
// Symbols looked up through it are valid only while the DynamicLibrary lives, so whoever holds
// function pointers from it must also hold (or outlive-bound) the DynamicLibrary. Lookups are
// thread-safe (dlsym is); Open/destruction are not concurrent with lookups.
#pragma once

#include <string>
#include <string_view>

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

}  // namespace flyt
