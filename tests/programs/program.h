// Shared by the public-program suite (tests/programs): every CUDA call is checked, and results are
// checked on the host only where a kernel really ran.
//
// CHECK(call) exits 1 naming the call and its error when it does not return cudaSuccess, and
// FAIL(...) prints "FAIL: ..." and exits 1 (both from tests/cuda/check.h).
// EXPECT_ERR(call, code) exits 1 unless the call returns exactly `code` (a documented refusal).
// KERNELS_RUN is false under flyt's simulated device (FLYT_SIM_DEVICE=1), where kernels are
// recorded, not executed: a program skips checks of values only a kernel could produce, and keeps
// every check of what the API itself returns (copies, memsets, attributes, error codes).
// PASS() prints "PASS <program>" and exits 0; the runner requires that line.
#pragma once

#include <cuda_runtime.h>

#include "../cuda/check.h"  // CHECK and FAIL, as the tests/cuda programs have them

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define EXPECT_ERR(call, code)                                                             \
  do {                                                                                     \
    cudaError_t err_ = (call);                                                             \
    if (err_ != (code)) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorName(err_), cudaGetErrorName(code));                        \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

static inline bool KernelsRun() {
  const char* sim = std::getenv("FLYT_SIM_DEVICE");
  return sim == nullptr || std::strcmp(sim, "1") != 0;
}
#define KERNELS_RUN (KernelsRun())

#define PASS()                                                             \
  do {                                                                     \
    std::printf("PASS %s\n", __FILE__);                                    \
    std::exit(0);                                                          \
  } while (0)
