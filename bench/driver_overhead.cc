// The driver API's launch rate against its round trip, through flyt's libcuda.so.1 (issue 33): an
// asynchronous cuLaunchKernel is posted (no reply awaited), so N launches cost far less than N
// round trips. A plain C++ program against the driver API (cuda.h); linked against flyt's
// libcuda.so.1, it finds NVIDIA's driver instead when LD_LIBRARY_PATH names that.
//
//   flyt-bench-driver-overhead [--iterations N] [--repeats R]
//
// Cases, each timed with std::chrono::steady_clock around the whole loop, R repeats after one
// untimed warm-up, medians (with min and max) printed:
//   round_trip      N × cuMemGetInfo (a synchronous call nothing can answer from a cache); ns/call
//   launch_empty    N × cuLaunchKernel of an empty kernel, then one cuCtxSynchronize (inside the
//                   timed region); ns per launch
//   launch_params   the same with a kernel of 6 parameters (40 bytes of parameter buffer)
// and the ratios round_trip / launch (the issue's goal: >= 20). The kernels are PTX text (the GPU's
// driver compiles it; the simulated device reads its parameter list). Every call is checked.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char* kPtx = R"(
.version 8.0
.target sm_80
.address_size 64
.visible .entry empty() { ret; }
.visible .entry params(.param .u64 a, .param .u64 b, .param .u32 c, .param .f32 d, .param .u64 e,
                       .param .u64 f) { ret; }
)";

void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "%s failed: %s (%d)\n", what, name != nullptr ? name : "?",
               static_cast<int>(r));
  std::exit(1);
}

struct Stat {
  double median, min, max;
};

template <typename Body>
Stat Measure(int repeats, long iterations, Body&& body) {
  body(iterations < 1000 ? iterations : 1000);  // warm-up
  std::vector<double> per;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    body(iterations);
    auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start);
    per.push_back(ns.count() / static_cast<double>(iterations));
  }
  std::sort(per.begin(), per.end());
  return {per[per.size() / 2], per.front(), per.back()};
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 100000;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iterations") == 0) iterations = std::atol(argv[i + 1]);
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[i + 1]);
  }
  if (iterations < 1 || repeats < 1) {
    std::fprintf(stderr, "usage: %s [--iterations N] [--repeats R]\n", argv[0]);
    return 2;
  }
  Check(cuInit(0), "cuInit");
  CUdevice device;
  Check(cuDeviceGet(&device, 0), "cuDeviceGet");
  CUcontext context;
  Check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUmodule module;
  Check(cuModuleLoadData(&module, kPtx), "cuModuleLoadData");
  CUfunction empty, params;
  Check(cuModuleGetFunction(&empty, module, "empty"), "cuModuleGetFunction(empty)");
  Check(cuModuleGetFunction(&params, module, "params"), "cuModuleGetFunction(params)");
  CUdeviceptr buffer;
  Check(cuMemAlloc(&buffer, 1 << 20), "cuMemAlloc");

  Stat round_trip = Measure(repeats, iterations, [](long n) {
    size_t free_bytes, total_bytes;
    for (long i = 0; i < n; ++i) Check(cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
  });
  Stat launch_empty = Measure(repeats, iterations, [&](long n) {
    for (long i = 0; i < n; ++i) {
      Check(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), "cuLaunchKernel");
    }
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
  });
  unsigned c = 7;
  float d = 1.5f;
  unsigned long long e = 42;
  CUdeviceptr f = buffer + 4096;
  void* args[] = {&buffer, &buffer, &c, &d, &e, &f};
  Stat launch_params = Measure(repeats, iterations, [&](long n) {
    for (long i = 0; i < n; ++i) {
      Check(cuLaunchKernel(params, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), "cuLaunchKernel");
    }
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
  });

  int driver = 0;
  cuDriverGetVersion(&driver);
  std::printf("driver %d, %ld iterations, %d repeats (median [min, max] ns)\n", driver, iterations,
              repeats);
  auto row = [](const char* name, const Stat& s) {
    std::printf("%-14s %10.0f ns  [%.0f, %.0f]\n", name, s.median, s.min, s.max);
  };
  row("round_trip", round_trip);
  row("launch_empty", launch_empty);
  row("launch_params", launch_params);
  std::printf("ratio round_trip/launch_empty  %.1f (goal >= 20)\n",
              round_trip.median / launch_empty.median);
  std::printf("ratio round_trip/launch_params %.1f (goal >= 20)\n",
              round_trip.median / launch_params.median);
  Check(cuMemFree(buffer), "cuMemFree");
  Check(cuModuleUnload(module), "cuModuleUnload");
  return 0;
}
