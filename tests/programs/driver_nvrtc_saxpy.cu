// flyt-nvcc-flags: -lcuda -lnvrtc
// The driver API with NVRTC, in the style of NVIDIA's NVRTC samples (saxpy): CUDA C++ source
// compiled at run time to PTX on this machine, the PTX loaded as a module (the GPU's driver
// compiles it), the kernel launched with kernelParams and again with an `extra` buffer, on the
// default and on a created stream; contexts (primary, created, push/pop), events, memsets of
// 8/16/32-bit patterns and every copy direction checked to the byte. Runs through flyt's
// libcuda.so.1 (LD_LIBRARY_PATH=build/lib/flyt); results of the kernel are checked where kernels
// run (not on the simulated device).
#include <cuda.h>
#include <nvrtc.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "program.h"

#define CU_CHECK(call)                                                                  \
  do {                                                                                  \
    CUresult r_ = (call);                                                               \
    if (r_ != CUDA_SUCCESS) {                                                           \
      const char* name_ = nullptr;                                                      \
      cuGetErrorName(r_, &name_);                                                       \
      std::fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,    \
                   name_ ? name_ : "?", static_cast<int>(r_));                          \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)
#define CU_EXPECT(call, code)                                                           \
  do {                                                                                  \
    CUresult r_ = (call);                                                               \
    if (r_ != (code)) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s returned %d, expected %d\n", __FILE__, __LINE__,  \
                   #call, static_cast<int>(r_), static_cast<int>(code));                \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)
#define NVRTC_CHECK(call)                                                               \
  do {                                                                                  \
    nvrtcResult r_ = (call);                                                            \
    if (r_ != NVRTC_SUCCESS) {                                                          \
      std::fprintf(stderr, "%s failed: %s\n", #call, nvrtcGetErrorString(r_));          \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

static const char* kSource = R"(
extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
)";

int main() {
  // Before cuInit (NVRTC's compile calls it itself).
  int count = 0;
  CU_EXPECT(cuDeviceGetCount(nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_EXPECT(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);

  // NVRTC: source to PTX, on this machine.
  nvrtcProgram program;
  NVRTC_CHECK(nvrtcCreateProgram(&program, kSource, "saxpy.cu", 0, nullptr, nullptr));
  const char* options[] = {"--gpu-architecture=compute_80"};
  nvrtcResult compiled = nvrtcCompileProgram(program, 1, options);
  if (compiled != NVRTC_SUCCESS) {
    size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    std::string log(log_size, '\0');
    nvrtcGetProgramLog(program, log.data());
    FAIL("nvrtcCompileProgram: %s\n%s", nvrtcGetErrorString(compiled), log.c_str());
  }
  size_t ptx_size = 0;
  NVRTC_CHECK(nvrtcGetPTXSize(program, &ptx_size));
  std::string ptx(ptx_size, '\0');
  NVRTC_CHECK(nvrtcGetPTX(program, ptx.data()));
  NVRTC_CHECK(nvrtcDestroyProgram(&program));

  CU_CHECK(cuInit(0));
  CU_CHECK(cuDeviceGetCount(&count));
  if (count < 1) FAIL("no device");
  CUdevice device;
  CU_CHECK(cuDeviceGet(&device, 0));
  char name[256];
  CU_CHECK(cuDeviceGetName(name, sizeof name, device));
  int major = 0, minor = 0, driver = 0;
  CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  CU_CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  CU_CHECK(cuDriverGetVersion(&driver));
  std::printf("device 0: %s (sm_%d%d), driver %d\n", name, major, minor, driver);

  CUcontext primary;
  CU_CHECK(cuDevicePrimaryCtxRetain(&primary, device));
  CU_CHECK(cuCtxSetCurrent(primary));

  CUmodule module;
  CU_CHECK(cuModuleLoadDataEx(&module, ptx.c_str(), 0, nullptr, nullptr));
  CUfunction saxpy;
  CU_CHECK(cuModuleGetFunction(&saxpy, module, "saxpy"));
  CUfunction missing;
  CU_EXPECT(cuModuleGetFunction(&missing, module, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);

  const size_t n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  std::vector<float> x(n), y(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.5f;
    y[i] = static_cast<float>(i % 7);
  }
  CUdeviceptr dx, dy, dout;
  CU_CHECK(cuMemAlloc(&dx, bytes));
  CU_CHECK(cuMemAlloc(&dy, bytes));
  CU_CHECK(cuMemAlloc(&dout, bytes));
  CU_CHECK(cuMemcpyHtoD(dx, x.data(), bytes));
  CU_CHECK(cuMemcpyHtoD(dy, y.data(), bytes));

  // Launch 1: kernelParams on the legacy default stream.
  float a = 2.0f;
  size_t count_arg = n;
  void* args[] = {&a, &dx, &dy, &dout, &count_arg};
  const unsigned threads = 256, blocks = static_cast<unsigned>((n + threads - 1) / threads);
  CU_CHECK(cuLaunchKernel(saxpy, blocks, 1, 1, threads, 1, 1, 0, nullptr, args, nullptr));
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(out.data(), dout, bytes));
  if (KERNELS_RUN) {
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != a * x[i] + y[i]) FAIL("saxpy[%zu] = %f, expected %f", i, out[i], a * x[i] + y[i]);
    }
  }

  // Launch 2: an `extra` buffer, on a created stream, timed with events.
  struct {
    float a;
    int pad;
    CUdeviceptr x, y, out;
    size_t n;
  } packed = {3.0f, 0, dx, dy, dout, n};
  size_t packed_size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &packed_size, CU_LAUNCH_PARAM_END};
  CUstream stream;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUevent start, stop;
  CU_CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU_CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  CU_CHECK(cuEventRecord(start, stream));
  CU_CHECK(cuLaunchKernel(saxpy, blocks, 1, 1, threads, 1, 1, 0, stream, nullptr, extra));
  CU_CHECK(cuEventRecord(stop, stream));
  CU_CHECK(cuMemcpyDtoHAsync(out.data(), dout, bytes, stream));
  CU_CHECK(cuStreamSynchronize(stream));
  float ms = -1;
  CU_CHECK(cuEventElapsedTime(&ms, start, stop));
  if (ms < 0) FAIL("elapsed time %f", ms);
  if (KERNELS_RUN) {
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != 3.0f * x[i] + y[i]) FAIL("extra-launched saxpy[%zu] = %f", i, out[i]);
    }
  }

  // Memsets of each width, device-to-device copies, and the unified cuMemcpy.
  CU_CHECK(cuMemsetD32(dout, 0x3f800000u, n));  // 1.0f
  CU_CHECK(cuMemsetD16(dout, 0xbeef, 4));
  CU_CHECK(cuMemsetD8(dout + 8, 0x7f, 4));
  CU_CHECK(cuMemcpyDtoD(dx, dout, bytes));
  std::vector<uint32_t> words(n);
  CU_CHECK(cuMemcpy(reinterpret_cast<CUdeviceptr>(words.data()), dx, bytes));
  if (words[0] != 0xbeefbeefu || words[1] != 0xbeefbeefu || words[2] != 0x7f7f7f7fu ||
      words[3] != 0x3f800000u || words[n - 1] != 0x3f800000u) {
    FAIL("memsets: %08x %08x %08x %08x %08x", words[0], words[1], words[2], words[3], words[n - 1]);
  }
  CUdeviceptr base;
  size_t size;
  CU_CHECK(cuMemGetAddressRange(&base, &size, dx + 4096));
  if (base != dx || size != bytes) FAIL("cuMemGetAddressRange");
  size_t free_bytes = 0, total_bytes = 0;
  CU_CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes > total_bytes || total_bytes == 0) FAIL("cuMemGetInfo %zu/%zu", free_bytes, total_bytes);

  // A created context is pushed current; popping it returns to the primary one.
  CUcontext created, current, popped;
  CU_CHECK(cuCtxCreate(&created, nullptr, 0, device));
  CU_CHECK(cuCtxGetCurrent(&current));
  if (current != created) FAIL("cuCtxCreate did not make its context current");
  CU_CHECK(cuCtxPopCurrent(&popped));
  CU_CHECK(cuCtxGetCurrent(&current));
  if (popped != created || current != primary) FAIL("cuCtxPopCurrent");
  CU_CHECK(cuCtxDestroy(created));

  CU_CHECK(cuEventDestroy(start));
  CU_CHECK(cuEventDestroy(stop));
  CU_CHECK(cuStreamDestroy(stream));
  CU_CHECK(cuMemFree(dx));
  CU_CHECK(cuMemFree(dy));
  CU_CHECK(cuMemFree(dout));
  CU_EXPECT(cuMemFree(dout), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK(cuModuleUnload(module));
  CU_CHECK(cuDevicePrimaryCtxRelease(device));
  PASS();
}
