// nvml::Library: NVML loaded at run time with dlopen, its entry points bound newest version first.
//
// Library owns the dlopen handle (DynamicLibrary) and the FunctionTable expanded from
// FLYT_NVML_ENTRY_POINTS; function pointers are valid while the Library lives. A Session is the
// RAII pair nvmlInit/nvmlShutdown; it borrows the Library, so it must be destroyed first (declare
// the Session after the Library it uses). NVML itself is thread-safe, and a loaded Library is
// immutable, so its table may be called from any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/dynamic_library.h"
#include "common/status.h"
#include "nvml/nvml_functions.h"

namespace flyt::nvml {

using Requirement = SymbolRequirement;

// One function pointer per entry point; nullptr when the library does not export any of its names.
struct FunctionTable {
#define FLYT_NVML_TABLE_MEMBER(member, req, ret, params, args, ...) ret(*member) params = nullptr;
  FLYT_NVML_ENTRY_POINTS(FLYT_NVML_TABLE_MEMBER)
#undef FLYT_NVML_TABLE_MEMBER
};

// What the loader did for one entry point, for diagnostics and tests.
using Binding = SymbolBinding;

// The library flyt loads unless told otherwise: $FLYT_NVML_LIBRARY, else "libnvidia-ml.so.1".
std::string DefaultLibraryPath();

class Library {
 public:
  // Loads `path` and binds every entry point. Fails when the file cannot be loaded or a required
  // entry point is missing (naming which).
  static Result<std::unique_ptr<Library>> Load(const std::string& path);

  const FunctionTable& api() const { return api_; }
  const std::vector<Binding>& bindings() const { return bindings_; }
  // The symbol bound for `member` ("DeviceGetCount" → "nvmlDeviceGetCount_v2"), empty if absent.
  std::string BoundSymbol(std::string_view member) const;

  // The library's own text for an error code when it has nvmlErrorString, else flyt's.
  std::string ErrorText(nvmlReturn_t code) const;

  // When the loaded library is flyt's simulated NVML, the scenario file it plays; else nullopt.
  // (The simulator exports `flytSimScenarioPath`; real NVML never does.) Used to tell users,
  // always, that the GPUs they see are simulated.
  std::optional<std::string> SimulatedScenario() const;

  const std::string& path() const { return path_; }

 private:
  Library() = default;
  DynamicLibrary lib_;
  FunctionTable api_;
  std::vector<Binding> bindings_;
  std::string path_;
};

// nvmlInit on construction, nvmlShutdown on destruction. Move-only.
class Session {
 public:
  static Result<Session> Start(const Library& library);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  Session(Session&& other) noexcept : library_(std::exchange(other.library_, nullptr)) {}
  Session& operator=(Session&& other) noexcept;
  ~Session();

 private:
  explicit Session(const Library* library) : library_(library) {}
  const Library* library_ = nullptr;
};

// "NVML_ERROR_GPU_IS_LOST" for 15, "NVML_ERROR_<n>" for codes flyt does not know.
std::string ReturnName(nvmlReturn_t code);

// The Status for a failed NVML call: "<call>: <text> (<NAME>)". `library` may be null.
Status NvmlError(const Library* library, std::string_view call, nvmlReturn_t code);

}  // namespace flyt::nvml
