// Prints what a program sees of its device through the CUDA runtime, one "key=value" a line, for
// tests of the shares a flyt-gpu-server grants (--sm-count/--sm-percent, --memory-limit-mb):
//   sms=<multiProcessorCount> total_global_mb=<totalGlobalMem> mem_total_mb=<cudaMemGetInfo total>
//   mem_free_mb=<its free>
// On a CUDA error: "error=<cudaError_t number> <its name>: <description>" and exit status 1.
#include <cuda_runtime.h>

#include <cstdio>

static int Fail(cudaError_t e) {
  std::printf("error=%d %s: %s\n", static_cast<int>(e), cudaGetErrorName(e),
              cudaGetErrorString(e));
  return 1;
}

int main() {
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, 0); e != cudaSuccess) return Fail(e);
  int sms = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
      e != cudaSuccess) {
    return Fail(e);
  }
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes); e != cudaSuccess) return Fail(e);
  std::printf("sms=%d\nattr_sms=%d\ntotal_global_mb=%zu\nmem_total_mb=%zu\nmem_free_mb=%zu\n",
              prop.multiProcessorCount, sms, prop.totalGlobalMem >> 20, total_bytes >> 20,
              free_bytes >> 20);
  return 0;
}
