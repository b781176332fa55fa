// Managed memory over many launches on several streams: each iteration the host updates part of
// a buffer, kernels run, the host reads the whole buffer. On the sim device (kernels do nothing)
// the host must see exactly its own writes; on a GPU, its writes plus the kernels' increments.
#include <vector>

#include "program.h"

__global__ void add_one(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

int main() {
  const int n = 64 * 1024;  // 64 pages of ints
  int* x;
  CHECK(cudaMallocManaged(&x, n * sizeof(int)));
  std::vector<int> model(n, 0);
  cudaStream_t s[2];
  CHECK(cudaStreamCreate(&s[0]));
  CHECK(cudaStreamCreate(&s[1]));
  for (int it = 0; it < 8; ++it) {
    for (int i = it * 1000; i < it * 1000 + 3000 && i < n; ++i) {
      x[i] = it * 7 + i;
      model[i] = it * 7 + i;
    }
    add_one<<<(n / 2 + 255) / 256, 256, 0, s[it % 2]>>>(x, n / 2);
    add_one<<<(n / 2 + 255) / 256, 256, 0, s[(it + 1) % 2]>>>(x + n / 2, n / 2);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    if (KERNELS_RUN) {
      for (int& v : model) v += 1;
    }
    for (int i = 0; i < n; ++i) {
      if (x[i] != model[i]) FAIL("iteration %d: x[%d] = %d, want %d", it, i, x[i], model[i]);
    }
  }
  CHECK(cudaStreamDestroy(s[0]));
  CHECK(cudaStreamDestroy(s[1]));
  CHECK(cudaFree(x));
  PASS();
}
