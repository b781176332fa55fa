// Matrix multiplication with shared-memory tiles (NVIDIA's matrixMul): C = A * B for sizes that
// are not multiples of the tile, checked against a host product.
#include <cmath>
#include <vector>

#include "program.h"

constexpr int kTile = 16;

__global__ void MatMul(const float* a, const float* b, float* c, int m, int k, int n) {
  __shared__ float tile_a[kTile][kTile];
  __shared__ float tile_b[kTile][kTile];
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  float sum = 0.0f;
  for (int t = 0; t < (k + kTile - 1) / kTile; ++t) {
    const int a_col = t * kTile + threadIdx.x;
    const int b_row = t * kTile + threadIdx.y;
    tile_a[threadIdx.y][threadIdx.x] = (row < m && a_col < k) ? a[row * k + a_col] : 0.0f;
    tile_b[threadIdx.y][threadIdx.x] = (b_row < k && col < n) ? b[b_row * n + col] : 0.0f;
    __syncthreads();
    for (int i = 0; i < kTile; ++i) sum += tile_a[threadIdx.y][i] * tile_b[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = sum;
}

int main() {
  const int m = 100, k = 75, n = 130;
  std::vector<float> a(m * k), b(k * n), c(m * n, 0.0f), expected(m * n, 0.0f);
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>((i % 7) - 3);
  for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>((i % 5) - 2) * 0.5f;
  for (int r = 0; r < m; ++r) {
    for (int col = 0; col < n; ++col) {
      float s = 0.0f;
      for (int i = 0; i < k; ++i) s += a[r * k + i] * b[i * n + col];
      expected[r * n + col] = s;
    }
  }
  float *d_a, *d_b, *d_c;
  CHECK(cudaMalloc(&d_a, a.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_b, b.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_c, c.size() * sizeof(float)));
  CHECK(cudaMemcpy(d_a, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_b, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  cudaFuncAttributes attr{};
  CHECK(cudaFuncGetAttributes(&attr, MatMul));
  if (attr.maxThreadsPerBlock < kTile * kTile) FAIL("MatMul runs %d threads", attr.maxThreadsPerBlock);
  const dim3 block(kTile, kTile);
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  MatMul<<<grid, block>>>(d_a, d_b, d_c, m, k, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(c.data(), d_c, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  if (KERNELS_RUN) {
    // Products of small integers and halves are exact in float whatever the summation order.
    for (int i = 0; i < m * n; ++i) {
      if (c[i] != expected[i]) FAIL("C[%d] = %f, expected %f", i, c[i], expected[i]);
    }
  }
  CHECK(cudaFree(d_a));
  CHECK(cudaFree(d_b));
  CHECK(cudaFree(d_c));
  PASS();
}
