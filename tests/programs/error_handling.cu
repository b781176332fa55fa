// Error handling: what CUDA returns for common misuse, and how the last error behaves —
// cudaGetLastError reads and clears it, cudaPeekAtLastError reads it, an error from a bad launch
// configuration or a failed allocation is not sticky (the next call works).
#include "program.h"

__global__ void Noop(int* p) {
  if (p != nullptr && threadIdx.x == 0) *p = 1;
}

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  CHECK(cudaGetLastError());
  // Too many threads per block.
  Noop<<<1, prop.maxThreadsPerBlock + 1>>>(nullptr);
  EXPECT_ERR(cudaPeekAtLastError(), cudaErrorInvalidConfiguration);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError());  // cleared
  // A zero-sized grid; a block dimension over its limit.
  Noop<<<0, 32>>>(nullptr);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
  Noop<<<1, dim3(1, 1, prop.maxThreadsDim[2] + 1)>>>(nullptr);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
  Noop<<<dim3(1, prop.maxGridSize[1] + 1u), 1>>>(nullptr);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // The device still works: a valid launch after the bad ones.
  int* flag = nullptr;
  CHECK(cudaMalloc(&flag, sizeof(int)));
  CHECK(cudaMemset(flag, 0, sizeof(int)));
  Noop<<<1, 32>>>(flag);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int value = -1;
  CHECK(cudaMemcpy(&value, flag, sizeof(int), cudaMemcpyDeviceToHost));
  if (KERNELS_RUN ? value != 1 : value != 0) FAIL("flag is %d", value);
  // An allocation larger than the device.
  void* huge = nullptr;
  EXPECT_ERR(cudaMalloc(&huge, prop.totalGlobalMem * 4), cudaErrorMemoryAllocation);
  EXPECT_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
  // Bad arguments.
  EXPECT_ERR(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT_ERR(cudaSetDevice(count), cudaErrorInvalidDevice);
  EXPECT_ERR(cudaGetDeviceProperties(&prop, count), cudaErrorInvalidDevice);
  EXPECT_ERR(cudaMemcpy(&value, flag, sizeof(int), static_cast<cudaMemcpyKind>(42)),
             cudaErrorInvalidMemcpyDirection);
  cudaEvent_t never_recorded;
  CHECK(cudaEventCreate(&never_recorded));
  cudaEvent_t recorded;
  CHECK(cudaEventCreate(&recorded));
  CHECK(cudaEventRecord(recorded, 0));
  CHECK(cudaEventSynchronize(recorded));
  float ms = 0;
  EXPECT_ERR(cudaEventElapsedTime(&ms, recorded, never_recorded), cudaErrorInvalidResourceHandle);
  CHECK(cudaEventDestroy(never_recorded));
  CHECK(cudaEventDestroy(recorded));
  // Successful calls since leave the last error alone: it is the elapsed-time one, once.
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  CHECK(cudaGetLastError());
  // Names and strings for every code a program prints.
  if (std::strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") != 0) {
    FAIL("cudaGetErrorName(cudaErrorInvalidValue) = %s", cudaGetErrorName(cudaErrorInvalidValue));
  }
  if (std::strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") != 0) {
    FAIL("cudaGetErrorName(cudaErrorMemoryAllocation)");
  }
  const char* text = cudaGetErrorString(cudaErrorInvalidConfiguration);
  if (text == nullptr || text[0] == '\0') FAIL("no text for cudaErrorInvalidConfiguration");
  // Still a working device at the end.
  CHECK(cudaFree(flag));
  CHECK(cudaDeviceSynchronize());
  PASS();
}
