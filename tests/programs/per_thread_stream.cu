// flyt-nvcc-flags: --default-stream per-thread -Xcompiler -pthread
// Per-thread default streams (nvcc --default-stream per-thread, as in NVIDIA's
// "GPU Pro Tip: CUDA 7 streams simplify concurrency"): several host threads each launch into
// "the default stream", which is now their own; copies, memsets, events and synchronises take the
// _ptds/_ptsz entry points. cudaStreamPerThread and cudaStreamLegacy are usable explicitly.
#include <thread>
#include <vector>

#include "program.h"

__global__ void AddIndex(int* data, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += i * k;
}

void Worker(int k, int n, int* failed) {
  int* dev = nullptr;
  cudaError_t err = cudaMalloc(&dev, n * sizeof(int));
  std::vector<int> host(n, k), back(n, -1);
  if (err == cudaSuccess) err = cudaMemcpy(dev, host.data(), n * sizeof(int), cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    AddIndex<<<(n + 255) / 256, 256>>>(dev, n, k);  // this thread's default stream
    err = cudaGetLastError();
  }
  cudaEvent_t done = nullptr;
  if (err == cudaSuccess) err = cudaEventCreate(&done);
  if (err == cudaSuccess) err = cudaEventRecord(done, 0);
  if (err == cudaSuccess) err = cudaEventSynchronize(done);
  if (err == cudaSuccess) err = cudaStreamSynchronize(0);
  if (err == cudaSuccess) err = cudaMemcpy(back.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "worker %d: %s\n", k, cudaGetErrorName(err));
    *failed = 1;
    return;
  }
  for (int i = 0; i < n; ++i) {
    const int want = KERNELS_RUN ? k + i * k : k;
    if (back[i] != want) {
      std::fprintf(stderr, "worker %d: [%d] = %d, expected %d\n", k, i, back[i], want);
      *failed = 1;
      return;
    }
  }
  if (cudaEventDestroy(done) != cudaSuccess || cudaFree(dev) != cudaSuccess) *failed = 1;
}

int main() {
  const int kThreads = 4, n = 1 << 14;
  CHECK(cudaFree(nullptr));  // initialise before the threads start
  int failed[kThreads] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(Worker, t + 1, n, &failed[t]);
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    if (failed[t]) FAIL("worker %d failed", t + 1);
  }
  // The per-thread stream by name, and the legacy stream, from the main thread.
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, n * sizeof(int)));
  CHECK(cudaMemsetAsync(dev, 0, n * sizeof(int), cudaStreamPerThread));
  AddIndex<<<(n + 255) / 256, 256, 0, cudaStreamPerThread>>>(dev, n, 2);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(cudaStreamQuery(cudaStreamPerThread));
  std::vector<int> back(n);
  CHECK(cudaMemcpyAsync(back.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost, cudaStreamLegacy));
  CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  for (int i = 0; i < n; ++i) {
    const int want = KERNELS_RUN ? 2 * i : 0;
    if (back[i] != want) FAIL("[%d] = %d, expected %d", i, back[i], want);
  }
  CHECK(cudaFree(dev));
  PASS();
}
