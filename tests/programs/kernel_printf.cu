// printf from kernels (NVIDIA's simplePrintf): the FIFO size is a device limit the program may
// set before its first launch; the kernel's lines appear at the next synchronising call.
#include "program.h"

__global__ void Hello(int value) {
  if (threadIdx.x < 2) {
    printf("[%d, %d]: value is %d\n", blockIdx.x, threadIdx.x, value);
  }
}

int main() {
  size_t fifo = 0;
  CHECK(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize));
  if (fifo == 0) FAIL("printf FIFO size is 0");
  const size_t want = 4 << 20;
  CHECK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, want));
  CHECK(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize));
  if (fifo < want) FAIL("printf FIFO is %zu after asking for %zu", fifo, want);
  std::printf("printf from 2 blocks of 4 threads:\n");
  std::fflush(stdout);
  Hello<<<2, 4>>>(10);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::fflush(stdout);
  PASS();
}
