// __constant__ memory: polynomial coefficients set with cudaMemcpyToSymbol, read back with
// cudaMemcpyFromSymbol, and used by a kernel.
#include <cstdio>
#include <vector>

#include "check.h"

__constant__ float kCoefficients[8];
__constant__ int kDegree;

__global__ void Polynomial(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
  for (int d = kDegree; d >= 0; --d) acc = acc * x[i] + kCoefficients[d];
  y[i] = acc;
}

int main() {
  const float coefficients[8] = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const int degree = 3;
  CHECK(cudaMemcpyToSymbol(kCoefficients, coefficients, sizeof(coefficients)));
  CHECK(cudaMemcpyToSymbol(kDegree, &degree, sizeof(degree)));
  float back[8] = {};
  CHECK(cudaMemcpyFromSymbol(back, kCoefficients, sizeof(back)));
  for (int i = 0; i < 8; ++i) {
    if (back[i] != coefficients[i])
      FAIL("constant_memory: coefficient %d read back as %g", i, back[i]);
  }
  const int n = 4096;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
  float *dx = nullptr, *dy = nullptr;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  Polynomial<<<(n + 127) / 128, 128>>>(dx, dy, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    float want = 0.0f;
    for (int d = degree; d >= 0; --d) want = want * x[i] + coefficients[d];
    if (y[i] != want) FAIL("constant_memory: y[%d] = %g, expected %g", i, y[i], want);
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  std::printf("constant_memory: cubic from __constant__ coefficients over %d points: PASS\n", n);
  return 0;
}
