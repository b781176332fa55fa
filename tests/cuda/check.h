// Shared by the CUDA test programs: abort with a message when a runtime call fails.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorName(err_), cudaGetErrorString(err_));                \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Prints the failure and exits non-zero.
#define FAIL(...)                               \
  do {                                          \
    std::fprintf(stderr, "FAIL: " __VA_ARGS__); \
    std::fprintf(stderr, "\n");                 \
    std::exit(1);                               \
  } while (0)
