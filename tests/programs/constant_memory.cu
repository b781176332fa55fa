// Constant memory: polynomial coefficients in a __constant__ array, written with
// cudaMemcpyToSymbol (whole and at an offset), read back with cudaMemcpyFromSymbol, and used by
// every thread of a kernel that evaluates the polynomial.
#include <vector>

#include "program.h"

constexpr int kDegree = 8;
__constant__ float c_coeffs[kDegree + 1];
__constant__ int c_scale;

__global__ void Evaluate(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
  for (int d = kDegree; d >= 0; --d) acc = acc * x[i] + c_coeffs[d];  // Horner
  y[i] = acc * c_scale;
}

int main() {
  float coeffs[kDegree + 1];
  for (int d = 0; d <= kDegree; ++d) coeffs[d] = (d % 2 == 0) ? 1.0f : -1.0f;
  CHECK(cudaMemcpyToSymbol(c_coeffs, coeffs, sizeof(coeffs)));
  // Overwrite the top two coefficients through an offset.
  const float top[2] = {0.5f, 0.25f};
  CHECK(cudaMemcpyToSymbol(c_coeffs, top, sizeof(top), (kDegree - 1) * sizeof(float)));
  coeffs[kDegree - 1] = top[0];
  coeffs[kDegree] = top[1];
  const int scale = 4;
  CHECK(cudaMemcpyToSymbol(c_scale, &scale, sizeof(scale), 0, cudaMemcpyHostToDevice));
  float back[kDegree + 1] = {};
  CHECK(cudaMemcpyFromSymbol(back, c_coeffs, sizeof(back)));
  if (std::memcmp(back, coeffs, sizeof(back)) != 0) FAIL("constant memory did not round-trip");
  size_t symbol_bytes = 0;
  CHECK(cudaGetSymbolSize(&symbol_bytes, c_coeffs));
  if (symbol_bytes != sizeof(coeffs)) FAIL("c_coeffs is %zu bytes", symbol_bytes);
  // Past the end of the symbol is an error, as on a GPU.
  EXPECT_ERR(cudaMemcpyToSymbol(c_coeffs, coeffs, sizeof(coeffs), sizeof(float)),
             cudaErrorInvalidValue);
  // That error is also the last error until read (it is not sticky: the next read is clean).
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
  CHECK(cudaGetLastError());
  const int n = 1000;
  std::vector<float> x(n), y(n, 0.0f);
  for (int i = 0; i < n; ++i) x[i] = (i % 3) - 1.0f;  // -1, 0, 1: exact in float
  float *d_x, *d_y;
  CHECK(cudaMalloc(&d_x, n * sizeof(float)));
  CHECK(cudaMalloc(&d_y, n * sizeof(float)));
  CHECK(cudaMemcpy(d_x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  Evaluate<<<(n + 127) / 128, 128>>>(d_x, d_y, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(y.data(), d_y, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (KERNELS_RUN) {
    for (int i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int d = kDegree; d >= 0; --d) acc = acc * x[i] + coeffs[d];
      if (y[i] != acc * scale) FAIL("y[%d] = %f, expected %f", i, y[i], acc * scale);
    }
  }
  CHECK(cudaFree(d_x));
  CHECK(cudaFree(d_y));
  PASS();
}
