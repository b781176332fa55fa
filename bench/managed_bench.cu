// Managed-memory traffic (issue 17): a kernel "touches" 1 % of a 256 MiB cudaMallocManaged buffer
// per iteration: the host writes one int in each of 1 % of its pages (chosen at random), launches,
// synchronises and reads those ints back. Usage: flyt-bench-managed ITERATIONS. bench/
// managed_bench.sh runs it twice and reads the server's per-client byte counters, so that the
// difference over the extra iterations is the bytes moved per iteration.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

__global__ void touch(int* data, const int* pages, int count, int ints_per_page) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) data[static_cast<size_t>(pages[i]) * ints_per_page] += 1;
}

#define CHECK(call)                                                               \
  do {                                                                            \
    cudaError_t e = (call);                                                       \
    if (e != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e));             \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 10;
  const size_t bytes = 256u << 20;
  const int page_ints = 4096 / sizeof(int);
  const int pages_total = static_cast<int>(bytes / 4096);
  const int touched = pages_total / 100;
  int* data;
  int* pages_dev;
  CHECK(cudaMallocManaged(&data, bytes));
  CHECK(cudaMalloc(&pages_dev, touched * sizeof(int)));
  std::mt19937 rng(17);
  std::vector<int> pages(touched);
  long long sum = 0;
  for (int it = 0; it < iterations; ++it) {
    for (int& p : pages) p = static_cast<int>(rng() % pages_total);
    for (int p : pages) data[static_cast<size_t>(p) * page_ints] = it;  // host writes 1 %
    CHECK(cudaMemcpy(pages_dev, pages.data(), touched * sizeof(int), cudaMemcpyHostToDevice));
    touch<<<(touched + 255) / 256, 256>>>(data, pages_dev, touched, page_ints);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    for (int p : pages) sum += data[static_cast<size_t>(p) * page_ints];  // host reads 1 %
  }
  std::printf("iterations %d pages_touched_per_iteration %d checksum %lld\n", iterations, touched,
              sum);
  CHECK(cudaFree(data));
  CHECK(cudaFree(pages_dev));
  return 0;
}
