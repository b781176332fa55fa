// Managed memory hints: cudaMemAdvise, cudaMemPrefetchAsync both ways, range attributes.
#include "program.h"

__global__ void scale(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}

int main() {
  const int n = 100000;
  float* x;
  CHECK(cudaMallocManaged(&x, n * sizeof(float)));
  for (int i = 0; i < n; ++i) x[i] = 1.0f;
  cudaMemLocation dev{cudaMemLocationTypeDevice, 0};
  cudaMemLocation host{cudaMemLocationTypeHost, 0};
  CHECK(cudaMemAdvise(x, n * sizeof(float), cudaMemAdviseSetPreferredLocation, dev));
  CHECK(cudaMemAdvise(x, n * sizeof(float), cudaMemAdviseSetReadMostly, dev));
  int v = -5;
  CHECK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributePreferredLocation, x,
                                 n * sizeof(float)));
  if (v != 0) FAIL("preferred location %d", v);
  CHECK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeReadMostly, x, 16));
  if (v != 1) FAIL("read mostly %d", v);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), dev, 0, s));
  scale<<<(n + 255) / 256, 256, 0, s>>>(x, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), host, 0, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemRangeGetAttribute(&v, sizeof v, cudaMemRangeAttributeLastPrefetchLocation, x, 4));
  if (v != -1) FAIL("last prefetch %d", v);
  float want = KERNELS_RUN ? 2.0f : 1.0f;
  for (int i = 0; i < n; i += 97) {
    if (x[i] != want) FAIL("x[%d] = %f", i, x[i]);
  }
  int h;
  EXPECT_ERR(cudaMemAdvise(&h, sizeof h, cudaMemAdviseSetReadMostly, dev), cudaErrorInvalidValue);
  cudaMemLocation other{cudaMemLocationTypeDevice, 3};
  EXPECT_ERR(cudaMemPrefetchAsync(x, 4, other, 0, s), cudaErrorInvalidDevice);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(x));
  PASS();
}
