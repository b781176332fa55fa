/* A fake libcuda.so.1 for trace_bpf_test: the few driver entry points the fake runtime calls, so
 * that a runtime call reaching a probed driver function proves the tracer's de-duplication. */
#include <stddef.h>

typedef unsigned long long CUdeviceptr;

int cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  *ptr = 0x7000000ull + bytes;
  return 0;
}

int cuMemFree_v2(CUdeviceptr ptr) { return ptr == 0 ? 1 : 0; }

int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned smem, void* stream, void** params, void** extra) {
  (void)params;
  (void)extra;
  return (f != 0 && gx && gy && gz && bx && by && bz && smem < 1u << 20 && stream != (void*)1)
             ? 0
             : 1;
}

/* Streams: the handle is 0x5000 + flags (+ 0x100 for one with a priority). */
int cuStreamCreate(void** stream, unsigned flags) {
  *stream = (void*)(0x5000ull + flags);
  return 0;
}

int cuStreamCreateWithPriority(void** stream, unsigned flags, int priority) {
  *stream = (void*)(0x5100ull + flags);
  return priority < -5 ? 1 : 0;
}

int cuStreamDestroy_v2(void* stream) { return stream == 0 ? 400 : 0; }
