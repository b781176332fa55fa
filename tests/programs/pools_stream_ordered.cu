// Stream-ordered allocation as an inference loop uses it: cudaMallocAsync / cudaFreeAsync on a
// stream, the default pool's release threshold keeping memory for the next iteration, the pool's
// accounting attributes, trim, and copies through pool memory byte-exact.
#include "program.h"

#include <cstdint>
#include <vector>

__global__ void Scale(float* x, int n, float f) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= f;
}

int main() {
  int supported = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  if (!supported) FAIL("memory pools not supported");
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  cudaMemPool_t current;
  CHECK(cudaDeviceGetMemPool(&current, 0));
  if (current != pool) FAIL("the current pool is not the default pool");
  uint64_t threshold = UINT64_MAX;  // keep everything between iterations
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

  constexpr int n = 1 << 20;
  std::vector<float> host(n), back(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);
  for (int iter = 0; iter < 10; ++iter) {
    float* x = nullptr;
    CHECK(cudaMallocAsync(reinterpret_cast<void**>(&x), n * sizeof(float), stream));
    CHECK(cudaMemcpyAsync(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
    Scale<<<(n + 255) / 256, 256, 0, stream>>>(x, n, 2.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(back.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaFreeAsync(x, stream));
    CHECK(cudaStreamSynchronize(stream));
    float want = KERNELS_RUN ? 2.0f : 1.0f;
    for (int i = 0; i < n; i += 4099) {
      if (back[i] != host[i] * want) FAIL("iteration %d element %d: %f", iter, i, back[i]);
    }
  }
  uint64_t reserved = 0, used = 0, used_high = 0;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high));
  if (used != 0) FAIL("used %llu after every block was freed", (unsigned long long)used);
  if (reserved < n * sizeof(float)) FAIL("the pool kept %llu bytes", (unsigned long long)reserved);
  if (used_high < n * sizeof(float)) FAIL("used high %llu", (unsigned long long)used_high);
  // Reserved stays one block: each iteration reused the last one's memory.
  if (reserved > 2 * n * sizeof(float)) FAIL("reserved %llu", (unsigned long long)reserved);
  CHECK(cudaMemPoolTrimTo(pool, 0));
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  if (reserved != 0) FAIL("trim left %llu bytes", (unsigned long long)reserved);
  uint64_t zero = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high));
  if (used_high != 0) FAIL("used high after reset %llu", (unsigned long long)used_high);
  EXPECT_ERR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &zero),
             cudaErrorInvalidValue);

  // cudaFree of stream-ordered memory, and cudaFreeAsync of cudaMalloc memory, both work.
  void* a = nullptr;
  CHECK(cudaMallocAsync(&a, 4096, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaFree(a));
  CHECK(cudaMalloc(&a, 4096));
  CHECK(cudaFreeAsync(a, stream));
  EXPECT_ERR(cudaFreeAsync(a, stream), cudaErrorInvalidValue);  // twice
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaStreamDestroy(stream));
  PASS();
}
