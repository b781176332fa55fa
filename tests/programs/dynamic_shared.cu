// Dynamic shared memory: a block reverses its slice of an array through `extern __shared__`
// memory sized at launch; then, after opting in with cudaFuncSetAttribute, a launch with more
// dynamic shared memory than the default 48 KiB per block.
#include <algorithm>
#include <vector>

#include "program.h"

__global__ void ReverseBlocks(int* data, int n) {
  extern __shared__ int s[];
  const int base = blockIdx.x * blockDim.x;
  const int i = base + threadIdx.x;
  if (i < n) s[threadIdx.x] = data[i];
  __syncthreads();
  const int count = min(static_cast<int>(blockDim.x), n - base);
  if (threadIdx.x < count) data[i] = s[count - 1 - threadIdx.x];
}

__global__ void BigShared(int* out, int words) {
  extern __shared__ int s[];
  for (int w = threadIdx.x; w < words; w += blockDim.x) s[w] = w;
  __syncthreads();
  if (threadIdx.x == 0) {
    int sum = 0;
    for (int w = 0; w < words; ++w) sum += s[w] & 1;
    out[blockIdx.x] = sum;
  }
}

int main() {
  const int n = 1000, threads = 128;
  std::vector<int> host(n), back(n);
  for (int i = 0; i < n; ++i) host[i] = i;
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, n * sizeof(int)));
  CHECK(cudaMemcpy(dev, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  ReverseBlocks<<<(n + threads - 1) / threads, threads, threads * sizeof(int)>>>(dev, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(back.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost));
  if (KERNELS_RUN) {
    for (int i = 0; i < n; ++i) {
      const int base = i / threads * threads;
      const int count = std::min(threads, n - base);
      const int want = base + (count - 1 - (i - base));
      if (back[i] != want) FAIL("data[%d] = %d, expected %d", i, back[i], want);
    }
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t big = 64 * 1024;
  if (prop.sharedMemPerBlockOptin >= big) {
    CHECK(cudaFuncSetAttribute(BigShared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(big)));
    cudaFuncAttributes attr{};
    CHECK(cudaFuncGetAttributes(&attr, BigShared));
    if (attr.maxDynamicSharedSizeBytes != static_cast<int>(big)) {
      FAIL("max dynamic shared %d after setting %zu", attr.maxDynamicSharedSizeBytes, big);
    }
    const int words = static_cast<int>(big / sizeof(int));
    BigShared<<<4, 256, big>>>(dev, words);
    CHECK(cudaGetLastError());
    int sums[4] = {};
    CHECK(cudaMemcpy(sums, dev, sizeof(sums), cudaMemcpyDeviceToHost));
    if (KERNELS_RUN) {
      for (int b = 0; b < 4; ++b) {
        if (sums[b] != words / 2) FAIL("block %d counted %d odd words", b, sums[b]);
      }
    }
  } else {
    std::printf("opt-in shared memory %zu < %zu: skipping the large launch\n",
                prop.sharedMemPerBlockOptin, big);
  }
  CHECK(cudaFree(dev));
  PASS();
}
