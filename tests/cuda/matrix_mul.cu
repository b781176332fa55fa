// Tiled matrix multiplication with static shared memory and launch bounds: the kernel the
// fatbin tests use for registers, static shared memory (two 16x16 float tiles = 2048 bytes) and
// max threads per block (256).
#include <cmath>
#include <cstdio>
#include <vector>

#include "check.h"

constexpr int kTile = 16;

__global__ void __launch_bounds__(256) MatMul(const float* a, const float* b, float* c, int n) {
  __shared__ float ta[kTile][kTile];
  __shared__ float tb[kTile][kTile];
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  float sum = 0.0f;
  for (int t = 0; t < (n + kTile - 1) / kTile; ++t) {
    const int ac = t * kTile + threadIdx.x;
    const int br = t * kTile + threadIdx.y;
    ta[threadIdx.y][threadIdx.x] = (row < n && ac < n) ? a[row * n + ac] : 0.0f;
    tb[threadIdx.y][threadIdx.x] = (br < n && col < n) ? b[br * n + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < kTile; ++k) sum += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = sum;
}

int main() {
  const int n = 200;  // not a multiple of the tile: exercises the edges
  std::vector<float> a(n * n), b(n * n), c(n * n), want(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 7) % 13) - 6.0f;
    b[i] = static_cast<float>((i * 5) % 11) - 5.0f;
  }
  for (int r = 0; r < n; ++r) {
    for (int col = 0; col < n; ++col) {
      float s = 0.0f;
      for (int k = 0; k < n; ++k) s += a[r * n + k] * b[k * n + col];
      want[r * n + col] = s;
    }
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  const size_t bytes = n * n * sizeof(float);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  const dim3 block(kTile, kTile);
  const dim3 grid((n + kTile - 1) / kTile, (n + kTile - 1) / kTile);
  MatMul<<<grid, block>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n * n; ++i) {
    // Small integers: every partial sum is exact in float, so the order of addition is moot.
    if (c[i] != want[i]) FAIL("matrix_mul: c[%d] = %g, expected %g", i, c[i], want[i]);
  }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  std::printf("matrix_mul: %dx%d product with 16x16 shared-memory tiles matches the host: PASS\n",
              n, n);
  return 0;
}
