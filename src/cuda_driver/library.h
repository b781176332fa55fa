// cuda_driver::Library: the CUDA driver (libcuda.so.1) loaded at run time with dlopen, its entry
// points bound newest version first.
//
// Library owns the dlopen handle (DynamicLibrary) and the FunctionTable expanded from
// FLYT_CUDA_DRIVER_ENTRY_POINTS; function pointers are valid while the Library lives, so whoever
// keeps a driver object (context, module, pinned buffer) keeps the Library too (the driver
// backend shares it through a shared_ptr). Load does not initialise the driver (no cuInit): it is
// safe on NVIDIA's link-time stub libcuda.so, which exports every symbol and implements none. A
// loaded Library is immutable and the driver API is thread-safe, so the table may be called from
// any thread (which context is current is the caller's business).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dynamic_library.h"
#include "common/status.h"
#include "cuda_driver/cuda_driver_functions.h"

namespace flyt::cuda_driver {

using Requirement = SymbolRequirement;
// What the loader bound for one entry point (diagnostics and tests).
using Binding = SymbolBinding;

// One function pointer per entry point; nullptr when the library exports none of its names.
struct FunctionTable {
#define FLYT_CUDA_DRIVER_TABLE_MEMBER(member, req, params, ...) CUresult(*member) params = nullptr;
  FLYT_CUDA_DRIVER_ENTRY_POINTS(FLYT_CUDA_DRIVER_TABLE_MEMBER)
#undef FLYT_CUDA_DRIVER_TABLE_MEMBER
};

// The driver's soname, which flyt-gpu-server loads unless told otherwise (--cuda-library).
inline constexpr const char* kDefaultLibraryPath = "libcuda.so.1";

class Library {
 public:
  // Loads `path` (a path or a soname) and binds every entry point. Fails with kUnavailable when
  // the file cannot be loaded or a required entry point is missing (naming each).
  [[nodiscard]] static Result<std::unique_ptr<Library>> Load(const std::string& path);

  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const FunctionTable& api() const { return api_; }
  const std::vector<Binding>& bindings() const { return bindings_; }
  // The symbol bound for `member` ("MemAlloc" → "cuMemAlloc_v2"); empty when absent.
  std::string BoundSymbol(std::string_view member) const;
  const std::string& path() const { return path_; }

  // "CUDA_ERROR_OUT_OF_MEMORY", or "CUresult 1234" when the driver does not know the number (or
  // has no cuGetErrorName).
  std::string ErrorName(CUresult code) const;
  // "<call>: CUDA_ERROR_OUT_OF_MEMORY (out of memory)": the driver's own name and text for a
  // failed call. Callers turn it into their error type (the driver backend: a CudaStatus with
  // the runtime's code).
  std::string ErrorMessage(std::string_view call, CUresult code) const;

 private:
  Library() = default;
  DynamicLibrary lib_;
  FunctionTable api_;
  std::vector<Binding> bindings_;
  std::string path_;
};

}  // namespace flyt::cuda_driver
