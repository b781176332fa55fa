// Shared by flyt's remote-CUDA test programs (tests/remote/*.cu).
//
// FLYT_SIM_DEVICE=1 in the environment says the program runs against flyt's simulated device,
// where kernels do not execute: results that only a kernel could produce are then not checked,
// everything else (every API call, every byte copied) still is.
#pragma once

#include <cstring>

#include "../cuda/check.h"  // CHECK and FAIL, shared with the programs of tests/cuda

// The call must fail with exactly `want`.
#define EXPECT_ERROR(want, call)                                                         \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != (want)) {                                                                \
      std::fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__,   \
                   #call, cudaGetErrorName(err_), cudaGetErrorName(want));               \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

#define EXPECT_TRUE(cond)                                                                \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);           \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

inline bool SimulatedDevice() {
  const char* sim = std::getenv("FLYT_SIM_DEVICE");
  return sim != nullptr && std::strcmp(sim, "1") == 0;
}
