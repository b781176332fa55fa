// A fake CUDA driver for the loader's tests: every name of every entry point in
// FLYT_CUDA_DRIVER_ENTRY_POINTS, each answering CUDA_ERROR_NO_DEVICE, like a driver on a machine
// whose GPUs are gone. It implements nothing; it exists so that binding (newest names, fallbacks,
// missing entries) is tested on every machine, not only where the CUDA toolkit's stub is.
//
// Variants hide names by renaming them before the list is expanded (compile definitions):
//   FLYT_FAKE_DRIVER_OLD     — an old driver: no cuEventElapsedTime_v2 (the unversioned name is
//                              there), no cuCtxCreate_v4/_v3, no cuFuncGetParamInfo.
//   FLYT_FAKE_DRIVER_BROKEN  — not a usable driver: no cuMemAlloc_v2, and no context creation
//                              (neither cuCtxCreate_v4 nor cuCtxCreate_v2).
#include "cuda_driver/cuda_driver_functions.h"

#if defined(FLYT_FAKE_DRIVER_OLD)
#define cuEventElapsedTime_v2 flyt_fake_hidden_cuEventElapsedTime_v2
#define cuCtxCreate_v4 flyt_fake_hidden_cuCtxCreate_v4
#define cuCtxCreate_v3 flyt_fake_hidden_cuCtxCreate_v3
#define cuFuncGetParamInfo flyt_fake_hidden_cuFuncGetParamInfo
#elif defined(FLYT_FAKE_DRIVER_BROKEN)
#define cuMemAlloc_v2 flyt_fake_hidden_cuMemAlloc_v2
#define cuCtxCreate_v4 flyt_fake_hidden_cuCtxCreate_v4
#define cuCtxCreate_v2 flyt_fake_hidden_cuCtxCreate_v2
#endif

#pragma GCC diagnostic ignored "-Wunused-parameter"

namespace flyt::cuda_driver {

#define FLYT_FAKE_EXPORT_ONE(params, sym)                                          \
  extern "C" __attribute__((visibility("default"))) CUresult sym params noexcept { \
    return CUDA_ERROR_NO_DEVICE;                                                   \
  }
#define FLYT_FAKE_ENTRY(member, req, params, ...) \
  FLYT_CUDA_DRIVER_FOR_EACH_NAME(FLYT_FAKE_EXPORT_ONE, params, __VA_ARGS__)

FLYT_CUDA_DRIVER_ENTRY_POINTS(FLYT_FAKE_ENTRY)

}  // namespace flyt::cuda_driver
