// The traced program of bench/trace_bench.sh: a tight loop of one probed CUDA call, timed.
//
//   flyt-bench-trace-loop [--calls N] [--threads T] [--rate R] [--call launch|malloc]
//
// --calls: calls per thread (default 100000). --threads: threads issuing them (default 1).
// --rate: total calls per second, paced per thread (0 = as fast as possible). --call: launch an
// empty kernel (<<<1, 1>>>, through __cudaLaunchKernel as nvcc emits it) or cudaMalloc(1 byte)
// followed by cudaFree when it succeeded (the calls made are counted). Every call's return code is counted, not checked:
// under NVIDIA's runtime with no driver they fail, which is one of the measured cases.
// Prints one JSON line: {"pid", "calls": ..., "seconds": ..., "ns_per_call": ..., "failed": ...}.
#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

__global__ void empty_kernel() {}

namespace {

std::atomic<long> failed{0};
std::atomic<long> made{0};

void Run(long calls, double per_thread_rate, bool launch) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  long local_failed = 0;
  long local_made = 0;
  for (long i = 0; i < calls; ++i) {
    if (per_thread_rate > 0) {
      const auto due = start + std::chrono::duration<double>(static_cast<double>(i) / per_thread_rate);
      while (Clock::now() < due) {
      }
    }
    if (launch) {
      empty_kernel<<<1, 1>>>();
      ++local_made;
      if (cudaGetLastError() != cudaSuccess) ++local_failed;
    } else {
      void* p = nullptr;
      ++local_made;
      if (cudaMalloc(&p, 1) != cudaSuccess) {
        ++local_failed;
      } else {
        ++local_made;
        if (cudaFree(p) != cudaSuccess) ++local_failed;
      }
    }
  }
  failed += local_failed;
  made += local_made;
}

}  // namespace

int main(int argc, char** argv) {
  long calls = 100000;
  int threads = 1;
  double rate = 0;
  std::string call = "launch";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s [--calls N] [--threads T] [--rate R] [--call launch|malloc]\n", argv[0]);
      return 2;
    }
    if (a == "--calls") calls = std::atol(argv[++i]);
    else if (a == "--threads") threads = std::atoi(argv[++i]);
    else if (a == "--rate") rate = std::atof(argv[++i]);
    else if (a == "--call") call = argv[++i];
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (calls <= 0 || threads <= 0 || (call != "launch" && call != "malloc")) {
    std::fprintf(stderr, "bad arguments\n");
    return 2;
  }
  const bool launch = call == "launch";
  // One call outside the timing: the runtime's start-up (connection, module load) is not measured.
  if (launch) {
    empty_kernel<<<1, 1>>>();
    (void)cudaGetLastError();
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(Run, calls, rate / threads, launch);
  for (std::thread& t : pool) t.join();
  if (launch) (void)cudaDeviceSynchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long total = made.load();
  std::printf("{\"pid\": %d, \"calls\": %ld, \"seconds\": %.6f, \"ns_per_call\": %.1f, \"calls_per_second\": %.0f, \"failed\": %ld}\n",
              static_cast<int>(getpid()), total, seconds, seconds * 1e9 / static_cast<double>(total),
              static_cast<double>(total) / seconds, failed.load());
  return 0;
}
