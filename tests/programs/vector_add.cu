// Vector addition (NVIDIA's vectorAdd): allocate, copy in, one kernel over a grid-stride loop,
// copy back, check every element.
#include <vector>

#include "program.h"

__global__ void VectorAdd(const float* a, const float* b, float* c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    c[i] = a[i] + b[i];
  }
}

int main() {
  const int n = 50000;
  const size_t bytes = n * sizeof(float);
  std::vector<float> a(n), b(n), c(n, -1.0f);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i) * 0.5f;
    b[i] = static_cast<float>(n - i);
  }
  float *d_a = nullptr, *d_b = nullptr, *d_c = nullptr;
  CHECK(cudaMalloc(&d_a, bytes));
  CHECK(cudaMalloc(&d_b, bytes));
  CHECK(cudaMalloc(&d_c, bytes));
  CHECK(cudaMemcpy(d_a, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_b, b.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_c, 0, bytes));
  const int threads = 256;
  const int blocks = (n + threads - 1) / threads;
  VectorAdd<<<blocks, threads>>>(d_a, d_b, d_c, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(c.data(), d_c, bytes, cudaMemcpyDeviceToHost));
  // The inputs came back as they went: the copies are byte exact on any device.
  std::vector<float> back(n);
  CHECK(cudaMemcpy(back.data(), d_a, bytes, cudaMemcpyDeviceToHost));
  if (std::memcmp(back.data(), a.data(), bytes) != 0) FAIL("d_a did not round-trip");
  if (KERNELS_RUN) {
    for (int i = 0; i < n; ++i) {
      if (c[i] != a[i] + b[i]) FAIL("c[%d] = %f, expected %f", i, c[i], a[i] + b[i]);
    }
  } else {
    for (int i = 0; i < n; ++i) {
      if (c[i] != 0.0f) FAIL("c[%d] = %f after memset 0 and a recorded kernel", i, c[i]);
    }
  }
  CHECK(cudaFree(d_a));
  CHECK(cudaFree(d_b));
  CHECK(cudaFree(d_c));
  PASS();
}
