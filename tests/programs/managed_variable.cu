// __managed__ variables: the host sets one, a kernel reads and updates it, the host reads it.
#include "program.h"

__managed__ int counter = 0;
__managed__ float table[2048];

__global__ void bump(int by) {
  atomicAdd(&counter, by);
  table[threadIdx.x] += 1.0f;
}

int main() {
  counter = 40;
  for (int i = 0; i < 2048; ++i) table[i] = static_cast<float>(i);
  bump<<<1, 2>>>(1);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  if (KERNELS_RUN) {
    if (counter != 42) FAIL("counter %d", counter);
    if (table[0] != 1.0f || table[1] != 2.0f) FAIL("table");
  } else if (counter != 40) {
    FAIL("counter %d (the device copy should hold the host's value)", counter);
  }
  if (table[2047] != 2047.0f) FAIL("table[2047] = %f", table[2047]);
  PASS();
}
