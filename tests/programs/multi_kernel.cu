// Several kernels in one module working as a pipeline on the same buffers, sharing a __device__
// helper: initialise, transform, combine; extern "C" kernels keep their names, which
// cudaFuncGetName reports.
#include <vector>

#include "program.h"

__device__ int Mix(int v) { return (v * 7 + 3) % 1000; }

extern "C" __global__ void InitKernel(int* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = i;
}

extern "C" __global__ void MixKernel(const int* a, int* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = Mix(a[i]);
}

extern "C" __global__ void SumKernel(const int* a, const int* b, int* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  const char* name = nullptr;
  CHECK(cudaFuncGetName(&name, reinterpret_cast<const void*>(MixKernel)));
  if (name == nullptr || std::strcmp(name, "MixKernel") != 0) FAIL("MixKernel is named %s", name ? name : "(null)");
  const int n = 5000, threads = 256, blocks = (n + threads - 1) / threads;
  int *a, *b, *c;
  CHECK(cudaMalloc(&a, n * sizeof(int)));
  CHECK(cudaMalloc(&b, n * sizeof(int)));
  CHECK(cudaMalloc(&c, n * sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  for (int round = 0; round < 3; ++round) {
    InitKernel<<<blocks, threads, 0, stream>>>(a, n);
    CHECK(cudaGetLastError());
    MixKernel<<<blocks, threads, 0, stream>>>(a, b, n);
    CHECK(cudaGetLastError());
    SumKernel<<<blocks, threads, 0, stream>>>(a, b, c, n);
    CHECK(cudaGetLastError());
  }
  std::vector<int> out(n, -1);
  CHECK(cudaMemcpyAsync(out.data(), c, n * sizeof(int), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (KERNELS_RUN) {
    for (int i = 0; i < n; ++i) {
      const int want = i + (i * 7 + 3) % 1000;
      if (out[i] != want) FAIL("c[%d] = %d, expected %d", i, out[i], want);
    }
  }
  for (const void* k : {reinterpret_cast<const void*>(InitKernel), reinterpret_cast<const void*>(MixKernel),
                        reinterpret_cast<const void*>(SumKernel)}) {
    cudaFuncAttributes attr{};
    CHECK(cudaFuncGetAttributes(&attr, k));
    if (attr.maxThreadsPerBlock < threads) FAIL("a kernel runs only %d threads", attr.maxThreadsPerBlock);
  }
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  PASS();
}
