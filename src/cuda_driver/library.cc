#include "cuda_driver/library.h"

#include <utility>

namespace flyt::cuda_driver {

Result<std::unique_ptr<Library>> Library::Load(const std::string& path) {
  FLYT_ASSIGN_OR_RETURN(DynamicLibrary lib, DynamicLibrary::Open(path));
  if (lib.Symbol("flyt_libcuda_version") != nullptr) {
    // flyt's own libcuda.so.1 (a client library: LD_LIBRARY_PATH names build/lib/flyt) would
    // send this server's calls to a flyt GPU server, itself perhaps.
    return Unavailable("the CUDA driver library " + path +
                       " is flyt's remote libcuda.so.1, not NVIDIA's driver: start the GPU server "
                       "without flyt's client libraries on LD_LIBRARY_PATH, or name the driver "
                       "with --cuda-library");
  }
  std::unique_ptr<Library> library(new Library());
  library->lib_ = std::move(lib);
  library->path_ = path;
  SymbolBinder binder(library->lib_, "CUDA driver library");
#define FLYT_CUDA_DRIVER_BIND(member, req, params, ...)        \
  binder.Bind(library->api_.member, #member, Requirement::req, \
              {FLYT_CUDA_DRIVER_FOR_EACH_NAME(FLYT_CUDA_DRIVER_STRINGIFY_NAME, _, __VA_ARGS__)});
  FLYT_CUDA_DRIVER_ENTRY_POINTS(FLYT_CUDA_DRIVER_BIND)
#undef FLYT_CUDA_DRIVER_BIND
  // Contexts are created through cuCtxCreate_v4 (CUDA 12.5+) or cuCtxCreate_v2; a driver needs one.
  binder.RequireAnyOf({"CtxCreateV4", "CtxCreate"});
  FLYT_ASSIGN_OR_RETURN(library->bindings_, std::move(binder).Finish());
  return library;
}

std::string Library::BoundSymbol(std::string_view member) const {
  return flyt::BoundSymbol(bindings_, member);
}

std::string Library::ErrorName(CUresult code) const {
  const char* name = nullptr;
  if (api_.GetErrorName != nullptr && api_.GetErrorName(code, &name) == CUDA_SUCCESS &&
      name != nullptr) {
    return name;
  }
  return "CUresult " + std::to_string(code);
}

std::string Library::ErrorMessage(std::string_view call, CUresult code) const {
  std::string message(call);
  message += ": ";
  message += ErrorName(code);
  const char* text = nullptr;
  if (api_.GetErrorString != nullptr && api_.GetErrorString(code, &text) == CUDA_SUCCESS &&
      text != nullptr && *text != '\0') {
    message += " (";
    message += text;
    message += ")";
  }
  return message;
}

}  // namespace flyt::cuda_driver
