/* A TEST CUDA driver, built as libcuda.so.1 in a folder of its own (build/tests/trace/driver), for
 * the tracer's driver-API test: the entry points trace_driver.c calls answer CUDA_SUCCESS with
 * made-up handles, and nothing runs. Unlike src/cuda_driver/fake_libcuda.cc (every entry point
 * answers CUDA_ERROR_NO_DEVICE, for the loader's tests) this one succeeds, so that the tracer sees
 * successful driver allocations, launches and syncs.
 *
 *   Device memory: made-up addresses (never dereferenced: copies do not touch device bytes), a
 *     capacity of FLYT_TEST_LIBCUDA_MEMORY_BYTES (default 80 GiB; 0 makes every cuMemAlloc_v2
 *     fail): cuMemAlloc_v2 past it answers CUDA_ERROR_OUT_OF_MEMORY.
 *   FLYT_TEST_LIBCUDA_LOG=FILE: one JSON line per launch, as the sim server's launch log:
 *     {"pid":..,"api":"cuLaunchKernel","kernel":"<name>","grid":[..],"block":[..],
 *      "shared_bytes":..,"stream":<handle>} and {"pid":..,"api":"cuGraphLaunch","stream":..}.
 *
 * Thread-safe (one mutex). Not a driver: no cuGetProcAddress, so NVIDIA's runtime cannot use it. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mini_cuda.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_ALLOCATIONS 4096

struct CUfunc_st {
  char name[256];
};
struct CUstream_st {
  unsigned int flags;
  int capturing;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static unsigned long long capacity_bytes = 80ull << 30;
static unsigned long long used_bytes;
static CUdeviceptr next_address = 0x7f0000000000ull;
static struct {
  CUdeviceptr ptr;
  size_t bytes;
} live[MAX_ALLOCATIONS];
static FILE* launch_log;
static int token;  /* the address of a made-up handle that is never dereferenced */

static void Init(void) {
  const char* capacity = getenv("FLYT_TEST_LIBCUDA_MEMORY_BYTES");
  if (capacity != NULL && *capacity != '\0') capacity_bytes = strtoull(capacity, NULL, 10);
  const char* log = getenv("FLYT_TEST_LIBCUDA_LOG");
  if (log != NULL && *log != '\0') {
    launch_log = fopen(log, "a");
    if (launch_log != NULL) setvbuf(launch_log, NULL, _IOLBF, 0);
  }
  initialized = 1;
}

EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  if (!initialized) Init();
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int* count) {
  if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
  *count = 1;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (device == NULL || ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
  *device = 0;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice device) {
  (void)flags;
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == NULL || device != 0) return CUDA_ERROR_INVALID_VALUE;
  *ctx = (CUcontext)&token;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { return ctx == NULL ? CUDA_ERROR_INVALID_VALUE : 0; }
EXPORT CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }

EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == NULL || image == NULL) return CUDA_ERROR_INVALID_VALUE;
  *module = (CUmodule)&token;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule module) { return module == NULL ? CUDA_ERROR_INVALID_VALUE : 0; }

/* A handle per call (freed never: a test program looks up a few names). */
EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (function == NULL || module == NULL || name == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (strlen(name) >= sizeof((*function)->name)) return CUDA_ERROR_NOT_FOUND;
  struct CUfunc_st* f = calloc(1, sizeof *f);
  if (f == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  strcpy(f->name, name);
  *function = f;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == NULL || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult result = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&mu);
  if (bytes <= capacity_bytes && used_bytes <= capacity_bytes - bytes) {
    for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
      if (live[i].ptr != 0) continue;
      live[i].ptr = next_address;
      live[i].bytes = bytes;
      *dptr = next_address;
      next_address += (bytes + 0xFFFFu) & ~(CUdeviceptr)0xFFFFu;
      used_bytes += bytes;
      result = CUDA_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
  return result;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  CUresult result = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i) {
    if (live[i].ptr == dptr && dptr != 0) {
      used_bytes -= live[i].bytes;
      live[i].ptr = 0;
      result = CUDA_SUCCESS;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
  return result;
}

/* Copies check that the device range is allocated; no bytes move. */
static int Allocated(CUdeviceptr p, size_t bytes) {
  int found = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_ALLOCATIONS && !found; ++i) {
    found = live[i].ptr != 0 && p >= live[i].ptr && p + bytes <= live[i].ptr + live[i].bytes;
  }
  pthread_mutex_unlock(&mu);
  return found;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return src != NULL && Allocated(dst, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  if (dst == NULL || !Allocated(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  memset(dst, 0, bytes);
  return CUDA_SUCCESS;
}

static void LogLaunch(const char* api, const CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                      unsigned bx, unsigned by, unsigned bz, unsigned shared, CUstream stream) {
  if (launch_log == NULL) return;
  fprintf(launch_log,
          "{\"pid\":%d,\"api\":\"%s\",\"kernel\":\"%s\",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],"
          "\"shared_bytes\":%u,\"stream\":%llu}\n",
          (int)getpid(), api, f->name, gx, gy, gz, bx, by, bz, shared,
          (unsigned long long)(uintptr_t)stream);
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                               unsigned int gridDimZ, unsigned int blockDimX,
                               unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream stream, void** kernelParams,
                               void** extra) {
  (void)kernelParams;
  (void)extra;
  if (f == NULL || gridDimX * gridDimY * gridDimZ == 0 || blockDimX * blockDimY * blockDimZ == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  LogLaunch("cuLaunchKernel", f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
            sharedMemBytes, stream);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** kernelParams,
                                 void** extra) {
  (void)kernelParams;
  (void)extra;
  if (c == NULL || f == NULL) return CUDA_ERROR_INVALID_VALUE;
  LogLaunch("cuLaunchKernelEx", f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX,
            c->blockDimY, c->blockDimZ, c->sharedMemBytes, c->hStream);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  if (stream == NULL || flags > CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  struct CUstream_st* s = calloc(1, sizeof *s);
  if (s == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  s->flags = flags;
  *stream = s;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  if (stream == NULL) return CUDA_ERROR_INVALID_VALUE;
  free(stream);
  return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  (void)stream;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, int mode) {
  if (stream == NULL || mode != CU_STREAM_CAPTURE_MODE_GLOBAL) return CUDA_ERROR_INVALID_VALUE;
  stream->capturing = 1;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  if (stream == NULL || graph == NULL || !stream->capturing) return CUDA_ERROR_INVALID_VALUE;
  stream->capturing = 0;
  *graph = (CUgraph)&token;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                            unsigned long long flags) {
  (void)flags;
  if (exec == NULL || graph == NULL) return CUDA_ERROR_INVALID_VALUE;
  *exec = (CUgraphExec)&token;
  return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  if (exec == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (launch_log != NULL) {
    fprintf(launch_log, "{\"pid\":%d,\"api\":\"cuGraphLaunch\",\"stream\":%llu}\n", (int)getpid(),
            (unsigned long long)(uintptr_t)stream);
  }
  return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) { return exec == NULL ? CUDA_ERROR_INVALID_VALUE : 0; }
EXPORT CUresult cuGraphDestroy(CUgraph graph) { return graph == NULL ? CUDA_ERROR_INVALID_VALUE : 0; }

EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  if (name == NULL) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; break;
    default: *name = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
