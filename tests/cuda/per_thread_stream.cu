// Built with --default-stream per-thread: each host thread's default stream is its own, so the
// runtime sees the per-thread variants of the calls (cudaMemcpy_ptds, cudaLaunchKernel_ptsz...).
#include <cstdio>
#include <thread>
#include <vector>

#include "check.h"

__global__ void Fill(int* data, int n, int value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = value;
}

int main() {
  const int kThreads = 4;
  const int n = 1 << 16;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([t, n, &failures] {
      int* dev = nullptr;
      CHECK(cudaMalloc(&dev, n * sizeof(int)));
      Fill<<<(n + 255) / 256, 256>>>(dev, n, 1000 + t);  // this thread's default stream
      CHECK(cudaGetLastError());
      CHECK(cudaStreamSynchronize(cudaStreamPerThread));
      std::vector<int> host(n);
      CHECK(cudaMemcpy(host.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) failures[t] += host[i] != 1000 + t;
      CHECK(cudaFree(dev));
    });
  }
  for (auto& w : workers) w.join();
  for (int t = 0; t < kThreads; ++t) {
    if (failures[t] != 0) FAIL("per_thread_stream: thread %d saw %d wrong values", t, failures[t]);
  }
  std::printf("per_thread_stream: %d host threads on their own default streams: PASS\n", kThreads);
  return 0;
}
