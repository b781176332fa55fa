// The names failed CUDA calls are counted under: cudaError_t names for the runtime's entry points
// ("cudaErrorMemoryAllocation"), CUresult names for the driver's ("CUDA_ERROR_OUT_OF_MEMORY"),
// "error <n>" for a code without a name. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace flyt::trace {

// `driver`: the code is a CUresult (a cu* entry point), else a cudaError_t.
std::string CudaErrorName(int32_t code, bool driver);

}  // namespace flyt::trace
