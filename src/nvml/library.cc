#include "nvml/library.h"

#include <cstdlib>

namespace flyt::nvml {
namespace {

const char* KnownReturnName(nvmlReturn_t code) {
  switch (code) {
    case NVML_SUCCESS:
      return "NVML_SUCCESS";
    case NVML_ERROR_UNINITIALIZED:
      return "NVML_ERROR_UNINITIALIZED";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "NVML_ERROR_INVALID_ARGUMENT";
    case NVML_ERROR_NOT_SUPPORTED:
      return "NVML_ERROR_NOT_SUPPORTED";
    case NVML_ERROR_NO_PERMISSION:
      return "NVML_ERROR_NO_PERMISSION";
    case NVML_ERROR_ALREADY_INITIALIZED:
      return "NVML_ERROR_ALREADY_INITIALIZED";
    case NVML_ERROR_NOT_FOUND:
      return "NVML_ERROR_NOT_FOUND";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "NVML_ERROR_INSUFFICIENT_SIZE";
    case NVML_ERROR_INSUFFICIENT_POWER:
      return "NVML_ERROR_INSUFFICIENT_POWER";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "NVML_ERROR_DRIVER_NOT_LOADED";
    case NVML_ERROR_TIMEOUT:
      return "NVML_ERROR_TIMEOUT";
    case NVML_ERROR_IRQ_ISSUE:
      return "NVML_ERROR_IRQ_ISSUE";
    case NVML_ERROR_LIBRARY_NOT_FOUND:
      return "NVML_ERROR_LIBRARY_NOT_FOUND";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "NVML_ERROR_FUNCTION_NOT_FOUND";
    case NVML_ERROR_CORRUPTED_INFOROM:
      return "NVML_ERROR_CORRUPTED_INFOROM";
    case NVML_ERROR_GPU_IS_LOST:
      return "NVML_ERROR_GPU_IS_LOST";
    case NVML_ERROR_RESET_REQUIRED:
      return "NVML_ERROR_RESET_REQUIRED";
    case NVML_ERROR_OPERATING_SYSTEM:
      return "NVML_ERROR_OPERATING_SYSTEM";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
      return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
    case NVML_ERROR_IN_USE:
      return "NVML_ERROR_IN_USE";
    case NVML_ERROR_MEMORY:
      return "NVML_ERROR_MEMORY";
    case NVML_ERROR_NO_DATA:
      return "NVML_ERROR_NO_DATA";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
      return "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "NVML_ERROR_INSUFFICIENT_RESOURCES";
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
      return "NVML_ERROR_FREQ_NOT_SUPPORTED";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "NVML_ERROR_ARGUMENT_VERSION_MISMATCH";
    case NVML_ERROR_DEPRECATED:
      return "NVML_ERROR_DEPRECATED";
    case NVML_ERROR_NOT_READY:
      return "NVML_ERROR_NOT_READY";
    case NVML_ERROR_GPU_NOT_FOUND:
      return "NVML_ERROR_GPU_NOT_FOUND";
    case NVML_ERROR_INVALID_STATE:
      return "NVML_ERROR_INVALID_STATE";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED:
      return "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED";
    case NVML_ERROR_UNKNOWN:
      return "NVML_ERROR_UNKNOWN";
  }
  return nullptr;
}

StatusCode CodeFor(nvmlReturn_t code) {
  switch (code) {
    case NVML_SUCCESS:
      return StatusCode::kOk;
    case NVML_ERROR_INVALID_ARGUMENT:
      return StatusCode::kInvalidArgument;
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return StatusCode::kNotSupported;
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_GPU_NOT_FOUND:
      return StatusCode::kNotFound;
    case NVML_ERROR_TIMEOUT:
      return StatusCode::kTimeout;
    case NVML_ERROR_NO_PERMISSION:
    case NVML_ERROR_UNINITIALIZED:
      return StatusCode::kFailedPrecondition;
    case NVML_ERROR_INSUFFICIENT_SIZE:
    case NVML_ERROR_MEMORY:
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return StatusCode::kResourceExhausted;
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_LIBRARY_NOT_FOUND:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
    case NVML_ERROR_RESET_REQUIRED:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

}  // namespace

std::string DefaultLibraryPath() {
  const char* env = std::getenv("FLYT_NVML_LIBRARY");
  if (env != nullptr && *env != '\0') return env;
  return "libnvidia-ml.so.1";
}

Result<std::unique_ptr<Library>> Library::Load(const std::string& path) {
  FLYT_ASSIGN_OR_RETURN(DynamicLibrary lib, DynamicLibrary::Open(path));
  std::unique_ptr<Library> library(new Library());
  library->lib_ = std::move(lib);
  library->path_ = path;
  SymbolBinder binder(library->lib_, "NVML library");
#define FLYT_NVML_BIND(member, req, ret, params, args, ...)    \
  binder.Bind(library->api_.member, #member, Requirement::req, \
              {FLYT_NVML_FOR_EACH_NAME(FLYT_NVML_STRINGIFY_NAME, _, __VA_ARGS__)});
  FLYT_NVML_ENTRY_POINTS(FLYT_NVML_BIND)
#undef FLYT_NVML_BIND
  FLYT_ASSIGN_OR_RETURN(library->bindings_, std::move(binder).Finish());
  return library;
}

std::string Library::BoundSymbol(std::string_view member) const {
  return flyt::BoundSymbol(bindings_, member);
}

std::string Library::ErrorText(nvmlReturn_t code) const {
  if (api_.ErrorString != nullptr) {
    const char* text = api_.ErrorString(code);
    if (text != nullptr && *text != '\0') return text;
  }
  return ReturnName(code);
}

std::optional<std::string> Library::SimulatedScenario() const {
  using ScenarioPathFn = const char* (*)();
  auto fn = reinterpret_cast<ScenarioPathFn>(lib_.Symbol("flytSimScenarioPath"));
  if (fn == nullptr) return std::nullopt;
  const char* path = fn();
  return std::string(path != nullptr ? path : "");
}

Result<Session> Session::Start(const Library& library) {
  nvmlReturn_t rc = library.api().Init();
  if (rc != NVML_SUCCESS) return NvmlError(&library, library.BoundSymbol("Init"), rc);
  return Session(&library);
}

Session& Session::operator=(Session&& other) noexcept {
  if (this != &other) {
    if (library_ != nullptr) library_->api().Shutdown();
    library_ = std::exchange(other.library_, nullptr);
  }
  return *this;
}

Session::~Session() {
  if (library_ != nullptr) library_->api().Shutdown();
}

std::string ReturnName(nvmlReturn_t code) {
  const char* name = KnownReturnName(code);
  if (name != nullptr) return name;
  return "NVML_ERROR_" + std::to_string(static_cast<int>(code));
}

Status NvmlError(const Library* library, std::string_view call, nvmlReturn_t code) {
  std::string message(call);
  message += ": ";
  std::string name = ReturnName(code);
  std::string text = library != nullptr ? library->ErrorText(code) : name;
  message += text;
  if (text != name) message += " (" + name + ")";
  return {CodeFor(code), std::move(message)};
}

}  // namespace flyt::nvml
