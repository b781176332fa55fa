// Templated kernels: one instantiation per type and unroll factor, each with its own mangled
// name; and a kernel with a per-thread scratch array indexed at run time (local memory).
#include <cstdio>
#include <vector>

#include "check.h"

template <typename T, int kUnroll>
__global__ void Saxpy(T a, const T* x, T* y, int n) {
  const int base = (blockIdx.x * blockDim.x + threadIdx.x) * kUnroll;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (base + u < n) y[base + u] = a * x[base + u] + y[base + u];
  }
}

// The scratch array is indexed by data, so it lives in local memory (a stack frame).
__global__ void Histogram8(const int* values, int* out, int n) {
  int counts[64];
  for (int b = 0; b < 64; ++b) counts[b] = 0;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int k = i; k < n; k += gridDim.x * blockDim.x) ++counts[values[k] & 63];
  for (int b = 0; b < 64; ++b) {
    if (counts[b] != 0) atomicAdd(&out[b], counts[b]);
  }
}

template <typename T, int kUnroll>
void RunSaxpy(const char* name) {
  const int n = 10000;
  std::vector<T> x(n), y(n), want(n);
  const T a = static_cast<T>(3);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<T>(i % 100);
    y[i] = static_cast<T>(7);
    want[i] = a * x[i] + y[i];
  }
  T *dx = nullptr, *dy = nullptr;
  CHECK(cudaMalloc(&dx, n * sizeof(T)));
  CHECK(cudaMalloc(&dy, n * sizeof(T)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  const int per_block = 128 * kUnroll;
  Saxpy<T, kUnroll><<<(n + per_block - 1) / per_block, 128>>>(a, dx, dy, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(y.data(), dy, n * sizeof(T), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    if (y[i] != want[i]) FAIL("templated: Saxpy<%s, %d> y[%d] wrong", name, kUnroll, i);
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  std::printf("templated: Saxpy<%s, %d> over %d elements: PASS\n", name, kUnroll, n);
}

int main() {
  RunSaxpy<float, 1>("float");
  RunSaxpy<double, 4>("double");
  RunSaxpy<int, 2>("int");
  const int n = 50000;
  std::vector<int> values(n);
  std::vector<int> want(64, 0);
  for (int i = 0; i < n; ++i) {
    values[i] = (i * 37) % 1000;
    ++want[values[i] & 63];
  }
  int *dv = nullptr, *dout = nullptr;
  CHECK(cudaMalloc(&dv, n * sizeof(int)));
  CHECK(cudaMalloc(&dout, 64 * sizeof(int)));
  CHECK(cudaMemcpy(dv, values.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dout, 0, 64 * sizeof(int)));
  Histogram8<<<16, 128>>>(dv, dout, n);
  CHECK(cudaGetLastError());
  std::vector<int> got(64);
  CHECK(cudaMemcpy(got.data(), dout, 64 * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < 64; ++b) {
    if (got[b] != want[b]) FAIL("templated: bin %d = %d, expected %d", b, got[b], want[b]);
  }
  CHECK(cudaFree(dv));
  CHECK(cudaFree(dout));
  std::printf("templated: histogram with a local-memory scratch array: PASS\n");
  return 0;
}
