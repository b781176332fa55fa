// Reduction and atomics (NVIDIA's reduction + simpleAtomicIntrinsics): a shared-memory tree
// reduction per block finished with atomicAdd, a histogram built with atomicAdd, atomicMax /
// atomicMin over the input, and a counter built with atomicCAS.
#include <algorithm>
#include <vector>

#include "program.h"

constexpr int kBins = 16;

__global__ void Reduce(const int* in, int n, unsigned long long* sum) {
  __shared__ unsigned long long partial[256];
  unsigned long long v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += in[i];
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sum, partial[0]);
}

__device__ void CasIncrement(int* counter) {
  int old = *counter, assumed;
  do {
    assumed = old;
    old = atomicCAS(counter, assumed, assumed + 1);
  } while (old != assumed);
}

__global__ void Stats(const int* in, int n, unsigned* histogram, int* max_value, int* min_value,
                      int* cas_count) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    atomicAdd(&histogram[in[i] % kBins], 1u);
    atomicMax(max_value, in[i]);
    atomicMin(min_value, in[i]);
    if (in[i] % 7 == 0) CasIncrement(cas_count);
  }
}

int main() {
  const int n = 1 << 18;
  std::vector<int> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<int>((i * 2654435761u) % 100003u);
  int* in = nullptr;
  CHECK(cudaMalloc(&in, n * sizeof(int)));
  CHECK(cudaMemcpy(in, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  unsigned long long* sum = nullptr;
  unsigned* histogram = nullptr;
  int* scalars = nullptr;  // max, min, cas count
  CHECK(cudaMalloc(&sum, sizeof(*sum)));
  CHECK(cudaMalloc(&histogram, kBins * sizeof(unsigned)));
  CHECK(cudaMalloc(&scalars, 3 * sizeof(int)));
  CHECK(cudaMemset(sum, 0, sizeof(*sum)));
  CHECK(cudaMemset(histogram, 0, kBins * sizeof(unsigned)));
  const int init[3] = {-1, 0x7fffffff, 0};
  CHECK(cudaMemcpy(scalars, init, sizeof(init), cudaMemcpyHostToDevice));
  Reduce<<<64, 256>>>(in, n, sum);
  CHECK(cudaGetLastError());
  Stats<<<64, 256>>>(in, n, histogram, &scalars[0], &scalars[1], &scalars[2]);
  CHECK(cudaGetLastError());
  unsigned long long got_sum = 1;
  unsigned got_hist[kBins];
  int got[3];
  CHECK(cudaMemcpy(&got_sum, sum, sizeof(got_sum), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_hist, histogram, sizeof(got_hist), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got, scalars, sizeof(got), cudaMemcpyDeviceToHost));
  unsigned long long want_sum = 0;
  unsigned want_hist[kBins] = {};
  int want_cas = 0;
  for (int v : host) {
    want_sum += v;
    ++want_hist[v % kBins];
    if (v % 7 == 0) ++want_cas;
  }
  const int want_max = *std::max_element(host.begin(), host.end());
  const int want_min = *std::min_element(host.begin(), host.end());
  if (KERNELS_RUN) {
    if (got_sum != want_sum) FAIL("sum %llu, expected %llu", got_sum, want_sum);
    for (int b = 0; b < kBins; ++b) {
      if (got_hist[b] != want_hist[b]) FAIL("bin %d: %u, expected %u", b, got_hist[b], want_hist[b]);
    }
    if (got[0] != want_max || got[1] != want_min) FAIL("max/min %d/%d", got[0], got[1]);
    if (got[2] != want_cas) FAIL("CAS count %d, expected %d", got[2], want_cas);
  } else {
    // What the memsets and copies put there is all the sim device holds.
    if (got_sum != 0 || got[0] != init[0] || got[1] != init[1] || got[2] != init[2]) {
      FAIL("initial values did not round-trip");
    }
    for (int b = 0; b < kBins; ++b) {
      if (got_hist[b] != 0) FAIL("bin %d not zero", b);
    }
  }
  CHECK(cudaFree(in));
  CHECK(cudaFree(sum));
  CHECK(cudaFree(histogram));
  CHECK(cudaFree(scalars));
  PASS();
}
