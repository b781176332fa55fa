// Managed memory: vector add on cudaMallocManaged buffers written and read by the host directly.
#include "program.h"

__global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  const int n = 1 << 20;
  float *a, *b, *c;
  CHECK(cudaMallocManaged(&a, n * sizeof(float)));
  CHECK(cudaMallocManaged(&b, n * sizeof(float)));
  CHECK(cudaMallocManaged(&c, n * sizeof(float)));
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 2.0f * i;
  }
  add<<<(n + 255) / 256, 256>>>(a, b, c, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  // The host reads its own inputs back (they travelled and come back as they were).
  for (int i = 0; i < n; i += 4097) {
    if (a[i] != static_cast<float>(i) || b[i] != 2.0f * i) FAIL("input %d changed", i);
  }
  if (KERNELS_RUN) {
    for (int i = 0; i < n; ++i) {
      if (c[i] != 3.0f * i) FAIL("c[%d] = %f", i, c[i]);
    }
  }
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  PASS();
}
