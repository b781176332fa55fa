/* The program trace_bpf_test runs under the tracer, linked with the fake libcudart.so.13.
 *   fake_app run          the call sequence the test expects, then exit code 7
 *   fake_app wait FILE    waits (up to 20 s) until FILE exists, then as `run`
 *   fake_app loop N       N cudaStreamSynchronize calls, exit 0
 *   fake_app driver       driver-API streams: cuStreamCreate(&s, 1),
 *                         cuStreamCreateWithPriority(&t, 0, -2), cuStreamDestroy_v2(s), exit 0
 * Built three times: linked with the fake libraries (trace_fake_app); with both compiled in, like a
 * -cudart=static program (trace_fake_static; fake_fatbin.c gives it a .nv_fatbin section); and
 * with the runtime compiled in over the fake libcuda.so.1 (trace_fake_static_rt). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  unsigned x, y, z;
} dim3;

void fake_set_rc(int rc);
int cudaSetDevice(int device);
int cudaMalloc(void** ptr, size_t bytes);
int cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height);
int cudaFree(void* ptr);
int cudaStreamCreateWithFlags(void** stream, unsigned flags);
int cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                     void* stream);
int __cudaLaunchKernel_ptsz(const void* kernel, dim3 grid, dim3 block, void** args,
                            size_t shared, void* stream);
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned smem, void* stream, void** params, void** extra);
int __cudaLaunchKernel(const void* kernel, dim3 grid, dim3 block, void** args, size_t shared,
                       void* stream);
int cudaMemcpy(void* dst, const void* src, size_t bytes, int kind);
int cudaStreamSynchronize(void* stream);
int cuStreamCreate(void** stream, unsigned flags);
int cuStreamCreateWithPriority(void** stream, unsigned flags, int priority);
int cuStreamDestroy_v2(void* stream);

/* A launch from a frame below run()'s, whose locals are never written: the stack slots the
 * earlier launches left keep their old values under it. */
__attribute__((noinline)) static void launch_from_deeper(void* s) {
  volatile char untouched[512];
  (void)untouched;
  dim3 grid = {3, 1, 1}, block = {16, 1, 1};
  cudaLaunchKernel((const void*)0x1236, grid, block, NULL, 0, s);
}

static int run(void) {
  void* p = NULL;
  void* q = NULL;
  void* r = NULL;
  void* s = NULL;
  size_t pitch = 0;
  cudaSetDevice(0);
  if (cudaMalloc(&p, 1024) != 0) return 1;
  fake_set_rc(2); /* cudaErrorMemoryAllocation */
  if (cudaMalloc(&q, (size_t)1 << 40) != 2) return 1;
  fake_set_rc(0);
  cudaMallocPitch(&r, &pitch, 100, 10);
  cudaStreamCreateWithFlags(&s, 1);
  dim3 grid = {2, 3, 4}, block = {32, 1, 1};
  cudaLaunchKernel((const void*)0x1234, grid, block, NULL, 128, s);
  dim3 one = {1, 1, 1}, block2 = {64, 2, 1};
  __cudaLaunchKernel((const void*)0x999, one, block2, NULL, 0, NULL);
  __cudaLaunchKernel_ptsz((const void*)0x998, one, block2, NULL, 0, NULL);
  dim3 none = {0, 1, 1}; /* an empty block: the launch fails (the driver's rc 1) */
  if (cudaLaunchKernel((const void*)0x1235, grid, none, NULL, 0, s) != 1) return 1;
  /* From a deeper frame than the launches before, over stack they left untouched. */
  launch_from_deeper(s);
  /* The program's own driver launch, after runtime ones from the same frame. */
  cuLaunchKernel((void*)0x4242, 5, 1, 1, 128, 1, 1, 0, s, NULL, NULL);
  cudaMemcpy((void*)0x10, (const void*)0x20, 4096, 1);
  cudaStreamSynchronize(s);
  fake_set_rc(4);
  cudaFree((void*)0xdead);
  fake_set_rc(0);
  cudaFree(p);
  return 7;
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "run") == 0) return run();
  if (argc >= 3 && strcmp(argv[1], "wait") == 0) {
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 2000 && access(argv[2], F_OK) != 0; ++i) nanosleep(&tick, NULL);
    return run();
  }
  if (argc >= 2 && strcmp(argv[1], "driver") == 0) {
    void* s = NULL;
    void* t = NULL;
    if (cuStreamCreate(&s, 1) != 0 || cuStreamCreateWithPriority(&t, 0, -2) != 0) return 1;
    return cuStreamDestroy_v2(s);
  }
  if (argc >= 3 && strcmp(argv[1], "loop") == 0) {
    long n = atol(argv[2]);
    for (long i = 0; i < n; ++i) cudaStreamSynchronize((void*)0x77);
    return 0;
  }
  fprintf(stderr, "usage: fake_app run | wait FILE | loop N | driver\n");
  return 2;
}
