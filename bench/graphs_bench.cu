// CUDA graphs over flyt's remote runtime: the cost of launching a captured graph of 100 small
// kernels beside launching the same 100 kernels one by one (cudaLaunchKernel, async).
// Built and run by bench/graphs_bench.sh against flyt-gpu-server (sim backend, Unix socket by
// default). Prints one CSV line per measurement: what,launches,median_us_per_launch.
//   graph_launch      one cudaGraphLaunch of the 100-kernel graph (measured over `iters`
//                     launches, in batches of 100, median of the batches' per-launch cost)
//   kernel_launch     one async kernel launch (batches of 100 launches)
//   graph_vs_kernels  how many times cheaper one graph launch is than its 100 kernels launched
//                     one by one
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorName(err_));        \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

__global__ void tiny(float* p, float v) { p[threadIdx.x] += v; }

static double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 10000;
  constexpr int kKernels = 100;
  constexpr int kBatch = 100;
  float* p = nullptr;
  CHECK(cudaMalloc(&p, 1024));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < kKernels; ++k) tiny<<<1, 32, 0, s>>>(p, 1.0f);
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));

  using Clock = std::chrono::steady_clock;
  std::vector<double> graph_us, kernel_us;
  for (int done = 0; done < iters; done += kBatch) {
    auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    auto t1 = Clock::now();
    graph_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kBatch);
  }
  for (int done = 0; done < iters; done += kBatch) {
    auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) tiny<<<1, 32, 0, s>>>(p, 1.0f);
    CHECK(cudaStreamSynchronize(s));
    auto t1 = Clock::now();
    kernel_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kBatch);
  }
  CHECK(cudaGetLastError());
  const double g = Median(graph_us), k = Median(kernel_us);
  std::printf("what,launches,median_us_per_launch\n");
  std::printf("graph_launch,%d,%.3f\n", iters, g);
  std::printf("kernel_launch,%d,%.3f\n", iters, k);
  std::printf("graph_vs_one_kernel,%d,%.2f\n", iters, g / k);
  std::printf("graph_vs_kernels,%d,%.1f\n", iters, kKernels * k / g);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(p));
  return 0;
}
