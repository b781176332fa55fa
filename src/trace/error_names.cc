#include "trace/error_names.h"

#include <iterator>

namespace flyt::trace {
namespace {

struct NamedCode {
  int32_t code;
  const char* name;
};

// The runtime's codes, from the one list flyt keeps of them (header-only X-macro: nothing of the
// remote library is linked).
constexpr NamedCode kRuntime[] = {
#define FLYT_CUDA_ERROR(Name, value, sticky, description) {value, "cudaError" #Name},
#include "cuda/cuda_errors.def"
#undef FLYT_CUDA_ERROR
};

// CUresult: the codes a traced program commonly meets (cuda.h's names).
constexpr NamedCode kDriver[] = {
    {1, "CUDA_ERROR_INVALID_VALUE"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"},
    {4, "CUDA_ERROR_DEINITIALIZED"},
    {5, "CUDA_ERROR_PROFILER_DISABLED"},
    {34, "CUDA_ERROR_STUB_LIBRARY"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
    {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"},
    {102, "CUDA_ERROR_DEVICE_NOT_LICENSED"},
    {200, "CUDA_ERROR_INVALID_IMAGE"},
    {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {205, "CUDA_ERROR_MAP_FAILED"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE"},
    {218, "CUDA_ERROR_INVALID_PTX"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {300, "CUDA_ERROR_INVALID_SOURCE"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND"},
    {400, "CUDA_ERROR_INVALID_HANDLE"},
    {401, "CUDA_ERROR_ILLEGAL_STATE"},
    {500, "CUDA_ERROR_NOT_FOUND"},
    {600, "CUDA_ERROR_NOT_READY"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"},
    {710, "CUDA_ERROR_ASSERT"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS"},
    {719, "CUDA_ERROR_LAUNCH_FAILED"},
    {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"},
    {800, "CUDA_ERROR_NOT_PERMITTED"},
    {801, "CUDA_ERROR_NOT_SUPPORTED"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
    {999, "CUDA_ERROR_UNKNOWN"},
};

template <size_t N>
const char* Find(const NamedCode (&table)[N], int32_t code) {
  for (const NamedCode& c : table) {
    if (c.code == code) return c.name;
  }
  return nullptr;
}

}  // namespace

std::string CudaErrorName(int32_t code, bool driver) {
  const char* name = driver ? Find(kDriver, code) : Find(kRuntime, code);
  if (name != nullptr) return name;
  return "error " + std::to_string(code);
}

}  // namespace flyt::trace
