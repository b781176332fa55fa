/* A fake libcudart.so.13 for trace_bpf_test (NOT flyt's runtime): CUDA runtime entry points with
 * the real signatures whose return code the test program sets (fake_set_rc), some of which call
 * the fake libcuda.so.1 like NVIDIA's runtime calls the driver. */
#include <stddef.h>

typedef struct {
  unsigned x, y, z;
} dim3;

typedef unsigned long long CUdeviceptr;
int cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes);
int cuMemFree_v2(CUdeviceptr ptr);
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned smem, void* stream, void** params, void** extra);
int cuStreamCreate(void** stream, unsigned flags);

static volatile int next_rc = 0;

void fake_set_rc(int rc) { next_rc = rc; }

int cudaSetDevice(int device) { return device < 0 ? 101 : next_rc; }

int cudaMalloc(void** ptr, size_t bytes) {
  if (next_rc != 0) return next_rc;
  CUdeviceptr p = 0;
  int rc = cuMemAlloc_v2(&p, bytes);
  *ptr = (void*)p;
  return rc;
}

int cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  if (next_rc != 0) return next_rc;
  *pitch = (width + 127) / 128 * 128;
  CUdeviceptr p = 0;
  int rc = cuMemAlloc_v2(&p, *pitch * height);
  *ptr = (void*)p;
  return rc;
}

int cudaFree(void* ptr) {
  if (next_rc != 0) return next_rc;
  return cuMemFree_v2((CUdeviceptr)ptr);
}

int cudaStreamCreateWithFlags(void** stream, unsigned flags) {
  if (next_rc != 0) return next_rc;
  return cuStreamCreate(stream, flags); /* the runtime reaching the driver: one record */
}

int cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                     void* stream) {
  if (next_rc != 0) return next_rc;
  return cuLaunchKernel((void*)func, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                        (unsigned)shared, stream, args, NULL);
}

int cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                          void* stream) {
  return cudaLaunchKernel(func, grid, block, args, shared, stream);
}

/* One runtime entry point reaching another by a tail jump, as NVIDIA's __cudaLaunchKernel reaches
 * cudaLaunchKernel (same frame, same return address: written in assembly so that no compiler
 * setting turns it into a call). */
int __cudaLaunchKernel(const void* kernel, dim3 grid, dim3 block, void** args, size_t shared,
                       void* stream);
__asm__(".text\n"
        ".globl __cudaLaunchKernel\n"
        ".type __cudaLaunchKernel, @function\n"
        "__cudaLaunchKernel:\n"
        "  jmp cudaLaunchKernel@PLT\n"
        ".size __cudaLaunchKernel, . - __cudaLaunchKernel\n");

/* And by a call: the inner entry returns into the runtime's own code. */
int __cudaLaunchKernel_ptsz(const void* kernel, dim3 grid, dim3 block, void** args, size_t shared,
                            void* stream) {
  volatile int rc = cudaLaunchKernel_ptsz(kernel, grid, block, args, shared, stream);
  return rc;
}

int cudaMemcpy(void* dst, const void* src, size_t bytes, int kind) {
  (void)dst;
  (void)src;
  (void)bytes;
  (void)kind;
  return next_rc;
}

int cudaStreamSynchronize(void* stream) {
  (void)stream;
  return next_rc;
}
