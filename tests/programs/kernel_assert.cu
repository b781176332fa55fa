// assert in kernels (NVIDIA's simpleAssert): a kernel whose assertion holds completes; one whose
// assertion fails traps, and the next synchronising call — and every call after it, the error
// being sticky — returns cudaErrorAssert. Under the sim device kernels do not run, so no
// assertion can fail and only the API path is checked.
#include <cassert>

#include "program.h"

__global__ void CheckBelow(const int* data, int n, int limit) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) assert(data[i] < limit);
}

int main() {
  const int n = 256;
  int host[n];
  for (int i = 0; i < n; ++i) host[i] = i;
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, sizeof(host)));
  CHECK(cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice));
  CheckBelow<<<2, 128>>>(dev, n, n);  // holds everywhere
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CheckBelow<<<2, 128>>>(dev, n, 100);  // fails for i >= 100
  {
    // The launch itself is fine; on a GPU the trap may already have been seen by now.
    const cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess && !(KERNELS_RUN && launched == cudaErrorAssert)) CHECK(launched);
  }
  if (KERNELS_RUN) {
    EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorAssert);
    // Sticky: the context is unusable from here on.
    void* more = nullptr;
    EXPECT_ERR(cudaMalloc(&more, 16), cudaErrorAssert);
    EXPECT_ERR(cudaGetLastError(), cudaErrorAssert);
    EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorAssert);
  } else {
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(dev));
  }
  PASS();
}
