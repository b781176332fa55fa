// The tracer's memory test program: an exact sequence of allocations, frees, copies and memsets,
// an out-of-memory retry loop, and an exit with memory still allocated. Every call is on the
// legacy default stream. The figures (expectations.py, "trace_memory"), on flyt's runtime against
// flyt-gpu-server --backend sim (85,520,809,984 bytes of simulated memory):
//
//   cudaMalloc            a0 1,048,576  a1 3,145,728  a2 4,096  a3 12,345  a4 262,144   (live 4,472,889)
//   cudaMallocHost        h  1,048,576 (pinned)     cudaHostAlloc h2 65,536 (pinned, default flags)
//   cudaMemcpy            H2D 1,048,576 (h→a0)  D2H 4,096 (a2→h)  D2D 1,048,576 (a0→a1)  H2H 100
//   cudaMemcpyAsync       H2D 12,345 (h→a3)  D2H 262,144 (a4→h, pinned)
//   cudaMemset            3,145,728 (a1)     cudaMemsetAsync 4,096 (a2)
//   cudaDeviceSynchronize 1
//   cudaMallocAsync       8,192 then cudaFreeAsync, cudaStreamSynchronize(0) 1
//   cudaMallocPitch       1000 × 10 → pitch 1,024 (flyt: the device's 512-byte alignment) = 10,240,
//                         then cudaFree
//   cudaMallocManaged     4,096, freed at once (it failed on flyt before issue 17)
//   cudaMalloc            1 TiB, 512 GiB, 256 GiB → cudaErrorMemoryAllocation ×3 (the retry loop),
//                         then r 2,097,152 succeeds (live 6,570,041 = the peak)
//   cudaFree              a0 a1 a2 r;  cudaFreeHost h
//   exit 0 with a3 + a4 = 274,489 bytes in 2 device allocations and h2's 65,536 pinned bytes live.
//
// Totals: 10 allocations (5 + h + h2 + async + pitch + r), 7 frees (async, pitch, a0 a1 a2 r, h);
// syncs: 4 (cudaDeviceSynchronize, cudaStreamSynchronize(0), the H2D and D2H cudaMemcpy; the D2D
// and H2H ones do not synchronise the stream); copies H2D 1,060,921,
// D2H 266,240, D2D 1,048,576, H2H 100 in 6 calls; memset 3,149,824 bytes in 2 calls.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "trace_program.h"

int main(int argc, char** argv) {
  trace_test::ParseOptions(argc, argv);
  const bool strict = !trace_test::Opts().keep_going;
  const size_t sizes[5] = {1u << 20, 3u << 20, 4096, 12345, 256u << 10};
  void* a[5] = {};
  for (int i = 0; i < 5; ++i) CALL("cudaMalloc", cudaMalloc(&a[i], sizes[i]));
  void* h = nullptr;
  void* h2 = nullptr;
  CALL("cudaMallocHost", cudaMallocHost(&h, 1u << 20));
  CALL("cudaHostAlloc", cudaHostAlloc(&h2, 64u << 10, cudaHostAllocDefault));
  std::vector<char> pageable_src(100, 'x'), pageable_dst(100);
  trace_test::PrintHandle("legacy", nullptr);

  CALL("cudaMemcpy", cudaMemcpy(a[0], h, 1u << 20, cudaMemcpyHostToDevice));
  CALL("cudaMemcpy", cudaMemcpy(h, a[2], 4096, cudaMemcpyDeviceToHost));
  CALL("cudaMemcpy", cudaMemcpy(a[1], a[0], 1u << 20, cudaMemcpyDeviceToDevice));
  CALL("cudaMemcpy", cudaMemcpy(pageable_dst.data(), pageable_src.data(), 100,
                                cudaMemcpyHostToHost));
  CALL("cudaMemcpyAsync", cudaMemcpyAsync(a[3], h, 12345, cudaMemcpyHostToDevice, 0));
  CALL("cudaMemcpyAsync", cudaMemcpyAsync(h, a[4], 256u << 10, cudaMemcpyDeviceToHost, 0));
  CALL("cudaMemset", cudaMemset(a[1], 0, 3u << 20));
  CALL("cudaMemsetAsync", cudaMemsetAsync(a[2], 0xff, 4096, 0));
  CALL("cudaDeviceSynchronize", cudaDeviceSynchronize());

  void* m = nullptr;
  CALL("cudaMallocAsync", cudaMallocAsync(&m, 8192, 0));
  CALL("cudaFreeAsync", cudaFreeAsync(m, 0));
  CALL("cudaStreamSynchronize", cudaStreamSynchronize(0));

  void* p = nullptr;
  size_t pitch = 0;
  CALL("cudaMallocPitch", cudaMallocPitch(&p, &pitch, 1000, 10));
  std::printf("PITCH %zu\n", pitch);
  CALL("cudaFree", cudaFree(p));

  void* managed = nullptr;
  if (CALL_MAY_FAIL("cudaMallocManaged", cudaMallocManaged(&managed, 4096, cudaMemAttachGlobal)) ==
      cudaSuccess) {
    CALL("cudaFree", cudaFree(managed));
  }

  // The out-of-memory retry loop: halve until it fits, as frameworks do; then a modest size.
  void* r = nullptr;
  int oom = 0;
  for (size_t size = size_t{1} << 40; size >= size_t{256} << 30; size /= 2) {
    cudaError_t err = CALL_MAY_FAIL("cudaMalloc", cudaMalloc(&r, size));
    if (err == cudaSuccess) {
      if (strict) {
        std::fprintf(stderr, "FAIL: cudaMalloc of %zu bytes succeeded\n", size);
        return 1;
      }
      CALL("cudaFree", cudaFree(r));
    } else if (err == cudaErrorMemoryAllocation) {
      ++oom;
    } else if (strict) {
      std::fprintf(stderr, "FAIL: cudaMalloc of %zu bytes: %s, not cudaErrorMemoryAllocation\n",
                   size, cudaGetErrorName(err));
      return 1;
    }
  }
  CALL("cudaMalloc", cudaMalloc(&r, 2u << 20));

  for (int i = 0; i < 3; ++i) CALL("cudaFree", cudaFree(a[i]));
  CALL("cudaFree", cudaFree(r));
  CALL("cudaFreeHost", cudaFreeHost(h));
  if (strict && oom != 3) {
    std::fprintf(stderr, "FAIL: %d out-of-memory failures, want 3\n", oom);
    return 1;
  }
  // a[3], a[4] and h2 stay allocated: the leak the tracer reports at exit.
  return trace_test::Pass("trace_memory");
}
