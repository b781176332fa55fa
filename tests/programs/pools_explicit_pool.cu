// An explicit memory pool: cudaMemPoolCreate with a maximum size, cudaMallocFromPoolAsync,
// cudaDeviceSetMemPool making it the one cudaMallocAsync uses, out of memory at its maximum,
// destroy with an allocation outstanding (it stays valid until freed), and the refusals CUDA
// gives for a pool it never made and for an attribute it does not know.
#include "program.h"

#include <cstdint>
#include <vector>

int main() {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.maxSize = 8 << 20;
  cudaMemPool_t pool;
  CHECK(cudaMemPoolCreate(&pool, &props));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  void* a = nullptr;
  void* b = nullptr;
  CHECK(cudaMallocFromPoolAsync(&a, 6 << 20, pool, stream));
  EXPECT_ERR(cudaMallocFromPoolAsync(&b, 6 << 20, pool, stream), cudaErrorMemoryAllocation);
  if (b != nullptr) FAIL("a failed allocation returned a pointer");
  (void)cudaGetLastError();
  std::vector<unsigned char> in(6 << 20), out(6 << 20);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 7);
  CHECK(cudaMemcpyAsync(a, in.data(), in.size(), cudaMemcpyHostToDevice, stream));
  CHECK(cudaMemcpyAsync(out.data(), a, out.size(), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (in != out) FAIL("pool memory did not round-trip");
  CHECK(cudaFreeAsync(a, stream));
  // Freed in stream order: the same stream may take the memory again at once.
  CHECK(cudaMallocFromPoolAsync(&b, 6 << 20, pool, stream));

  cudaMemPool_t previous;
  CHECK(cudaDeviceGetMemPool(&previous, 0));
  CHECK(cudaDeviceSetMemPool(0, pool));
  cudaMemPool_t now;
  CHECK(cudaDeviceGetMemPool(&now, 0));
  if (now != pool) FAIL("cudaDeviceSetMemPool did not take");
  void* c = nullptr;
  CHECK(cudaMallocAsync(&c, 1 << 20, stream));
  uint64_t used = 0;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  if (used < (7u << 20)) FAIL("pool used %llu", (unsigned long long)used);
  CHECK(cudaDeviceSetMemPool(0, previous));

  int reuse = -1;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
  if (reuse != 1) FAIL("opportunistic reuse %d", reuse);
  EXPECT_ERR(cudaMemPoolGetAttribute(pool, static_cast<cudaMemPoolAttr>(99), &used),
             cudaErrorInvalidValue);
  int fake = 0;
  EXPECT_ERR(cudaMallocFromPoolAsync(&a, 64, reinterpret_cast<cudaMemPool_t>(&fake), stream),
             cudaErrorInvalidValue);
  cudaMemPool_t default_pool;
  CHECK(cudaDeviceGetDefaultMemPool(&default_pool, 0));
  EXPECT_ERR(cudaMemPoolDestroy(default_pool), cudaErrorInvalidValue);
  EXPECT_ERR(cudaDeviceGetDefaultMemPool(&default_pool, 1), cudaErrorInvalidDevice);
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  cudaMemPool_t exportable;
  EXPECT_ERR(cudaMemPoolCreate(&exportable, &props), cudaErrorNotSupported);

  // Destroyed with b and c outstanding: they stay usable until freed.
  CHECK(cudaMemPoolDestroy(pool));
  CHECK(cudaMemsetAsync(b, 0, 1 << 20, stream));
  CHECK(cudaFreeAsync(b, stream));
  CHECK(cudaFreeAsync(c, stream));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT_ERR(cudaMallocFromPoolAsync(&a, 64, pool, stream), cudaErrorInvalidValue);
  CHECK(cudaStreamDestroy(stream));
  PASS();
}
