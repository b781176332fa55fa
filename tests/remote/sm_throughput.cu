// Measures the share of a GPU a program gets, for the hardware check of remote leases with SM
// and memory shares (tests/e2e/remote_mps_gpu_test.sh): what the program sees of its device, the
// throughput of a compute-bound kernel, and whether an allocation over its memory limit is
// refused. Prints one "key=value" a line:
//   sms=<multiProcessorCount>  mem_total_mb=<cudaMemGetInfo total>  mem_free_mb=<its free>
//   blocks_per_launch=  launches=  elapsed_ms=  throughput=<blocks per second>
//   alloc_under_mb=<limit/2> alloc_under=ok|<error name>
//   oversize_mb=<asked> oversize_refused=yes|no oversize_error=<cudaError_t name>
// The kernel: every thread runs a long chain of dependent FMAs (four independent chains, so an
// SM's pipelines stay full); a launch has many times more blocks than an H100 has SMs (132) can
// hold at once, so its time is set by the number of SMs the program may use.
//
// Options (each also from the environment, the flag winning):
//   --launches N      (SM_THROUGHPUT_LAUNCHES, default 200) timed launches
//   --iterations N    (SM_THROUGHPUT_ITERATIONS, default 16384) FMA steps per thread
//   --blocks N        (SM_THROUGHPUT_BLOCKS, default 132*8*8) blocks per launch, 256 threads each
//   --oversize-mb N   (SM_THROUGHPUT_OVERSIZE_MB, default the total seen + 1024) the allocation
//                     that must be refused
//   --go-file PATH    (SM_THROUGHPUT_GO_FILE) after the warm-up launch print "READY" and wait
//                     (at most 300 s) until PATH exists, so that several programs time the same
//                     window
// With FLYT_SIM_DEVICE=1 (flyt's simulated device, where kernels do not run) no kernel is timed:
// it prints a note instead of throughput= and still checks the device and the allocations.
// Exit status 0 when every measurement ran (a refused or accepted oversize allocation alike: the
// caller judges it), 1 on an unexpected CUDA error or a bad option.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "check.h"

namespace {

constexpr int kThreadsPerBlock = 256;

__global__ void FmaChains(float seed, int iterations, float* out) {
  float a = seed + threadIdx.x, b = a + 1.0f, c = a + 2.0f, d = a + 3.0f;
  const float m = 0.999999f, k = 1.0e-7f;
  for (int i = 0; i < iterations; ++i) {
    a = fmaf(a, m, k);
    b = fmaf(b, m, k);
    c = fmaf(c, m, k);
    d = fmaf(d, m, k);
  }
  // Never true for the seeds used: keeps the loop from being optimised away.
  if (a + b + c + d == -1.0f) out[blockIdx.x] = a;
}

// The flag's value, else the environment variable's, else the default.
long long Option(int argc, char** argv, const char* flag, const char* env, long long def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return std::atoll(argv[i + 1]);
  }
  const char* v = std::getenv(env);
  return v != nullptr && *v != '\0' ? std::atoll(v) : def;
}

std::string StringOption(int argc, char** argv, const char* flag, const char* env) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  }
  const char* v = std::getenv(env);
  return v != nullptr ? v : "";
}

bool WaitForFile(const std::string& path, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      std::fclose(f);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s [--launches N] [--iterations N] [--blocks N] [--oversize-mb N] "
                  "[--go-file PATH]\n", argv[0]);
      return 0;
    }
  }
  const bool simulated = SimulatedDevice();
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  size_t free_bytes = 0, total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("device=%s\nsms=%d\nprop_sms=%d\nmem_total_mb=%zu\nmem_free_mb=%zu\n", prop.name,
              sms, prop.multiProcessorCount, total_bytes >> 20, free_bytes >> 20);

  const long long launches = Option(argc, argv, "--launches", "SM_THROUGHPUT_LAUNCHES", 200);
  const long long iterations =
      Option(argc, argv, "--iterations", "SM_THROUGHPUT_ITERATIONS", 16384);
  const long long blocks = Option(argc, argv, "--blocks", "SM_THROUGHPUT_BLOCKS", 132 * 8 * 8);
  const long long oversize_mb = Option(argc, argv, "--oversize-mb", "SM_THROUGHPUT_OVERSIZE_MB",
                                       static_cast<long long>(total_bytes >> 20) + 1024);
  const std::string go_file = StringOption(argc, argv, "--go-file", "SM_THROUGHPUT_GO_FILE");
  if (launches < 1 || iterations < 1 || blocks < 1 || blocks > (1LL << 31) - 1 ||
      iterations > (1LL << 31) - 1 || oversize_mb < 1) {
    std::fprintf(stderr, "bad option: launches, iterations, blocks and oversize-mb must be > 0\n");
    return 1;
  }

  float* out = nullptr;
  CHECK(cudaMalloc(&out, static_cast<size_t>(blocks) * sizeof(float)));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  if (simulated) {
    std::printf("note: simulated device (FLYT_SIM_DEVICE=1): kernels do not run, no throughput "
                "measured\n");
  } else {
    // Warm-up: loads the module and brings the clocks up.
    FmaChains<<<static_cast<unsigned>(blocks), kThreadsPerBlock>>>(
        1.0f, static_cast<int>(iterations), out);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
  }
  if (!go_file.empty()) {
    std::printf("READY\n");
    std::fflush(stdout);
    if (!WaitForFile(go_file, 300)) FAIL("%s did not appear within 300 s", go_file.c_str());
  }
  if (!simulated) {
    CHECK(cudaEventRecord(start));
    for (long long i = 0; i < launches; ++i) {
      FmaChains<<<static_cast<unsigned>(blocks), kThreadsPerBlock>>>(
          1.0f, static_cast<int>(iterations), out);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float elapsed_ms = 0;
    CHECK(cudaEventElapsedTime(&elapsed_ms, start, stop));
    const double blocks_run = static_cast<double>(blocks) * static_cast<double>(launches);
    std::printf("blocks_per_launch=%lld\nlaunches=%lld\niterations=%lld\nelapsed_ms=%.3f\n"
                "throughput=%.1f\n",
                blocks, launches, iterations, elapsed_ms, blocks_run / (elapsed_ms / 1000.0));
  }
  CHECK(cudaFree(out));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));

  // Half the limit fits; more than the limit must not.
  const size_t under_mb = (total_bytes >> 20) / 2;
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, under_mb << 20);
  std::printf("alloc_under_mb=%zu\nalloc_under=%s\n", under_mb,
              e == cudaSuccess ? "ok" : cudaGetErrorName(e));
  if (e == cudaSuccess) CHECK(cudaFree(p));
  (void)cudaGetLastError();  // a refused allocation leaves its error as the last one
  p = nullptr;
  e = cudaMalloc(&p, static_cast<size_t>(oversize_mb) << 20);
  std::printf("oversize_mb=%lld\noversize_refused=%s\noversize_error=%s\n", oversize_mb,
              e == cudaSuccess ? "no" : "yes", cudaGetErrorName(e));
  if (e == cudaSuccess) CHECK(cudaFree(p));
  (void)cudaGetLastError();
  return 0;
}
