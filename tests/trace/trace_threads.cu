// The tracer's per-thread-default-stream test program, built with --default-stream per-thread:
// four host threads, each on its own default stream (the runtime sees the _ptsz/_ptds entry points:
// __cudaLaunchKernel_ptsz, cudaStreamSynchronize_ptsz, cudaMemcpy_ptds). Barriers make the peak
// exact. Figures (expectations.py, "trace_threads"), per thread:
//   cudaMalloc 262,144 — barrier — Fill(int*, int, int) <<<256, 256>>> on its per-thread stream,
//   cudaStreamSynchronize(cudaStreamPerThread), cudaMemcpy device→host 262,144 (blocking) —
//   barrier — cudaFree.
// Totals: 4 launches of Fill [256,1,1]×[256,1,1]; 4 allocations, 4 frees, peak 1,048,576;
// device→host 1,048,576 in 4 copies; 8 syncs (4 stream syncs + 4 blocking copies); four per-thread
// streams (distinct threads), each 1 launch, 2 syncs, 262,144 bytes device→host.
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "trace_program.h"

__global__ void Fill(int* data, int n, int value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = value;
}

namespace {

class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const int generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation != generation_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int count_;
  int arrived_ = 0;
  int generation_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  trace_test::ParseOptions(argc, argv);
  constexpr int kThreads = 4;
  constexpr int n = 1 << 16;
  Barrier barrier(kThreads);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([t, &barrier] {
      int* dev = nullptr;
      CALL("cudaMalloc", cudaMalloc(&dev, n * sizeof(int)));
      barrier.Wait();  // all four buffers live: the peak
      Fill<<<(n + 255) / 256, 256>>>(dev, n, 1000 + t);
      LAUNCHED("cudaLaunchKernel");
      CALL("cudaStreamSynchronize", cudaStreamSynchronize(cudaStreamPerThread));
      std::vector<int> host(n);
      CALL("cudaMemcpy", cudaMemcpy(host.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost));
      barrier.Wait();
      CALL("cudaFree", cudaFree(dev));
    });
  }
  for (auto& w : workers) w.join();
  return trace_test::Pass("trace_threads");
}
