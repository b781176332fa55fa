/* The tracer's driver-API test program: plain C linked with -lcuda (in the test, the TEST driver
 * built from test_libcuda.c as libcuda.so.1), no CUDA runtime. Figures (expectations.py,
 * "trace_driver"):
 *
 *   cuMemAlloc_v2   a 1,048,576  b 65,536  c 4,096 (peak 1,118,208); then 1 TiB and 512 GiB →
 *                   CUDA_ERROR_OUT_OF_MEMORY ×2 (the test driver holds 80 GiB)
 *   cuMemcpyHtoD_v2 65,536   cuMemcpyDtoH_v2 4,096
 *   cuLaunchKernel  driver_fill               8,1,1  128,1,1  shared 0    legacy (NULL)  ×3
 *   cuLaunchKernel  DriverScale(float*, int)  2,2,1  64,2,1   shared 256  s              ×4
 *   cuLaunchKernelEx driver_fill              16,1,1 32,1,1   shared 0    s              ×2
 *   cuStreamSynchronize(s) ×2, cuCtxSynchronize ×1 (3 syncs)
 *   stream capture on s (nothing captured), cuGraphInstantiateWithFlags, cuGraphLaunch(exec, s) ×2
 *   cuMemFree_v2    b, c; exit 0 with a (1,048,576 bytes, 1 allocation) still allocated and the
 *                   context not destroyed (destroying it would free a).
 *   s is created with CU_STREAM_NON_BLOCKING.
 *   Total: 9 kernel launches + 2 graph launches; 3 allocations, 2 frees.
 *
 * Options: --calls FILE (one "<entry point> <CUresult name>" line per call), --keep-going (a
 * failed call is logged, not fatal; for FLYT_TEST_LIBCUDA_MEMORY_BYTES=0). Prints "PID <pid>",
 * "HANDLE legacy=0", "HANDLE stream=<hex>" and "trace_driver: PASS". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mini_cuda.h"

static FILE* calls;
static int keep_going;

static CUresult Logged(const char* api, CUresult r, int may_fail, int line) {
  const char* name = NULL;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == NULL) name = "unknown";
  if (calls != NULL) fprintf(calls, "%s %s\n", api, name);
  if (r != CUDA_SUCCESS && !may_fail && !keep_going) {
    fprintf(stderr, "trace_driver.c:%d: %s failed: %s\n", line, api, name);
    exit(1);
  }
  return r;
}
#define CALL(api, expr) Logged(api, (expr), 0, __LINE__)
#define CALL_MAY_FAIL(api, expr) Logged(api, (expr), 1, __LINE__)

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--keep-going") == 0) {
      keep_going = 1;
    } else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
      calls = fopen(argv[++i], "a");
      if (calls == NULL) {
        perror(argv[i]);
        return 2;
      }
      setvbuf(calls, NULL, _IOLBF, 0);
    } else {
      fprintf(stderr, "usage: %s [--calls FILE] [--keep-going]\n", argv[0]);
      return 2;
    }
  }
  printf("PID %d\n", (int)getpid());
  fflush(stdout);

  static const char kImage[] = "not a real module: the test driver ignores it";
  CUdevice device = 0;
  CUcontext ctx = NULL;
  CUmodule module = NULL;
  CUfunction fill = NULL, scale = NULL;
  CUstream s = NULL;
  CALL("cuInit", cuInit(0));
  CALL("cuDeviceGet", cuDeviceGet(&device, 0));
  CALL("cuCtxCreate_v2", cuCtxCreate_v2(&ctx, 0, device));
  CALL("cuModuleLoadData", cuModuleLoadData(&module, kImage));
  CALL("cuModuleGetFunction", cuModuleGetFunction(&fill, module, "driver_fill"));
  CALL("cuModuleGetFunction", cuModuleGetFunction(&scale, module, "_Z11DriverScalePfi"));
  CALL("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  printf("HANDLE legacy=0\nHANDLE stream=%#llx\n", (unsigned long long)(uintptr_t)s);

  CUdeviceptr a = 0, b = 0, c = 0, huge = 0;
  CALL("cuMemAlloc_v2", cuMemAlloc_v2(&a, 1u << 20));
  CALL("cuMemAlloc_v2", cuMemAlloc_v2(&b, 64u << 10));
  CALL("cuMemAlloc_v2", cuMemAlloc_v2(&c, 4096));
  int oom = 0;
  for (unsigned long long size = 1ull << 40; size >= 512ull << 30; size /= 2) {
    CUresult r = CALL_MAY_FAIL("cuMemAlloc_v2", cuMemAlloc_v2(&huge, size));
    if (r == CUDA_ERROR_OUT_OF_MEMORY) ++oom;
    if (r == CUDA_SUCCESS) CALL("cuMemFree_v2", cuMemFree_v2(huge));
  }

  static unsigned char host[64u << 10];
  CALL("cuMemcpyHtoD_v2", cuMemcpyHtoD_v2(a, host, sizeof host));
  CALL("cuMemcpyDtoH_v2", cuMemcpyDtoH_v2(host, b, 4096));

  int n = 1024;
  float value = 1.0f;
  void* fill_params[] = {&a, &value, &n};
  void* scale_params[] = {&b, &n};
  for (int i = 0; i < 3; ++i) {
    CALL("cuLaunchKernel", cuLaunchKernel(fill, 8, 1, 1, 128, 1, 1, 0, NULL, fill_params, NULL));
  }
  for (int i = 0; i < 4; ++i) {
    CALL("cuLaunchKernel", cuLaunchKernel(scale, 2, 2, 1, 64, 2, 1, 256, s, scale_params, NULL));
  }
  CUlaunchConfig config;
  memset(&config, 0, sizeof config);
  config.gridDimX = 16;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 32;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = s;
  for (int i = 0; i < 2; ++i) CALL("cuLaunchKernelEx", cuLaunchKernelEx(&config, fill, fill_params, NULL));
  CALL("cuStreamSynchronize", cuStreamSynchronize(s));
  CALL("cuStreamSynchronize", cuStreamSynchronize(s));
  CALL("cuCtxSynchronize", cuCtxSynchronize());

  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  CALL("cuStreamBeginCapture_v2", cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CALL("cuStreamEndCapture", cuStreamEndCapture(s, &graph));
  CALL("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) CALL("cuGraphLaunch", cuGraphLaunch(exec, s));
  CALL("cuGraphExecDestroy", cuGraphExecDestroy(exec));
  CALL("cuGraphDestroy", cuGraphDestroy(graph));

  CALL("cuMemFree_v2", cuMemFree_v2(b));
  CALL("cuMemFree_v2", cuMemFree_v2(c));
  CALL("cuStreamDestroy_v2", cuStreamDestroy_v2(s));
  CALL("cuModuleUnload", cuModuleUnload(module));
  if (!keep_going && oom != 2) {
    fprintf(stderr, "FAIL: %d out-of-memory failures, want 2\n", oom);
    return 1;
  }
  /* a stays allocated, the context alive: the leak. */
  printf("trace_driver: PASS\n");
  return 0;
}
