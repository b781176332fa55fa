// Separate compilation (-rdc=true): Stencil calls Smooth, defined in rdc_lib.cu, so the two
// objects are device-linked (nvlink) and registered through a version-2 fatbin wrapper.
#include <cstdio>
#include <vector>

#include "check.h"

extern __device__ float Smooth(float left, float mid, float right);
extern __device__ int g_calls;
__global__ void ResetCalls();

__global__ void Stencil(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= 0 || i >= n - 1) return;
  out[i] = Smooth(in[i - 1], in[i], in[i + 1]);
}

int main() {
  const int n = 1000;
  std::vector<float> in(n), out(n, 0.0f);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 10);
  float *din = nullptr, *dout = nullptr;
  CHECK(cudaMalloc(&din, n * sizeof(float)));
  CHECK(cudaMalloc(&dout, n * sizeof(float)));
  CHECK(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dout, 0, n * sizeof(float)));
  ResetCalls<<<1, 1>>>();
  Stencil<<<(n + 127) / 128, 128>>>(din, dout, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  int calls = 0;
  CHECK(cudaMemcpyFromSymbol(&calls, g_calls, sizeof(calls)));
  for (int i = 1; i < n - 1; ++i) {
    const float want = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
    if (out[i] != want) FAIL("rdc: out[%d] = %g, expected %g", i, out[i], want);
  }
  if (calls != n - 2) FAIL("rdc: Smooth ran %d times, expected %d", calls, n - 2);
  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  std::printf("rdc: kernel called a device function from another file %d times: PASS\n", calls);
  return 0;
}
