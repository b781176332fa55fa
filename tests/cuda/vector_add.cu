// Vector addition: the smallest complete CUDA program (allocate, copy in, launch, copy out).
// On flyt's simulated device (FLYT_SIM_DEVICE=1) kernels do not run: the sums are not checked.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

__global__ void VectorAdd(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  const int n = 1 << 20;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 2.0f * static_cast<float>(i) + 1.0f;
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  const size_t bytes = n * sizeof(float);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  const int threads = 256;
  VectorAdd<<<(n + threads - 1) / threads, threads>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  const char* sim = std::getenv("FLYT_SIM_DEVICE");
  const bool simulated = sim != nullptr && sim[0] == '1';
  for (int i = 0; i < n && !simulated; ++i) {
    if (c[i] != a[i] + b[i]) FAIL("vector_add: c[%d] = %g, expected %g", i, c[i], a[i] + b[i]);
  }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  if (simulated) {
    std::printf("vector_add: %d floats through the simulated device (kernels do not run there: "
                "sums not checked): PASS\n", n);
  } else {
    std::printf("vector_add: added %d floats on the device: PASS\n", n);
  }
  return 0;
}
