// Warp-level primitives (NVIDIA's shfl_scan and warpAggregatedAtomics): a per-warp sum with
// __shfl_down_sync, an inclusive scan with __shfl_up_sync, a broadcast with __shfl_sync, and
// __ballot_sync / __popc to count lanes matching a predicate.
#include <vector>

#include "program.h"

__global__ void WarpOps(const int* in, int* warp_sums, int* scans, int* broadcast, int* odd_counts) {
  const unsigned full = 0xffffffffu;
  const int lane = threadIdx.x % 32;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = in[gid];
  int sum = v;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(full, sum, offset);
  if (lane == 0) warp_sums[warp] = sum;
  int scan = v;
  for (int offset = 1; offset < 32; offset *= 2) {
    const int up = __shfl_up_sync(full, scan, offset);
    if (lane >= offset) scan += up;
  }
  scans[gid] = scan;
  broadcast[gid] = __shfl_sync(full, v, 5);  // every lane gets lane 5's value
  const unsigned odd = __ballot_sync(full, v & 1);
  if (lane == 0) odd_counts[warp] = __popc(odd);
}

int main() {
  const int blocks = 8, threads = 128, n = blocks * threads, warps = n / 32;
  std::vector<int> host(n);
  for (int i = 0; i < n; ++i) host[i] = (i * 37) % 101;
  int *in, *sums, *scans, *bcast, *odds;
  CHECK(cudaMalloc(&in, n * sizeof(int)));
  CHECK(cudaMalloc(&sums, warps * sizeof(int)));
  CHECK(cudaMalloc(&scans, n * sizeof(int)));
  CHECK(cudaMalloc(&bcast, n * sizeof(int)));
  CHECK(cudaMalloc(&odds, warps * sizeof(int)));
  CHECK(cudaMemcpy(in, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  WarpOps<<<blocks, threads>>>(in, sums, scans, bcast, odds);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> got_sums(warps), got_scans(n), got_bcast(n), got_odds(warps);
  CHECK(cudaMemcpy(got_sums.data(), sums, warps * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_scans.data(), scans, n * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_bcast.data(), bcast, n * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_odds.data(), odds, warps * sizeof(int), cudaMemcpyDeviceToHost));
  if (KERNELS_RUN) {
    for (int w = 0; w < warps; ++w) {
      int sum = 0, odd = 0;
      for (int l = 0; l < 32; ++l) {
        const int v = host[w * 32 + l];
        sum += v;
        odd += v & 1;
        if (got_scans[w * 32 + l] != sum) FAIL("scan[%d] = %d, expected %d", w * 32 + l, got_scans[w * 32 + l], sum);
        if (got_bcast[w * 32 + l] != host[w * 32 + 5]) FAIL("broadcast[%d]", w * 32 + l);
      }
      if (got_sums[w] != sum) FAIL("warp %d sum %d, expected %d", w, got_sums[w], sum);
      if (got_odds[w] != odd) FAIL("warp %d: %d odd lanes, expected %d", w, got_odds[w], odd);
    }
  }
  CHECK(cudaFree(in));
  CHECK(cudaFree(sums));
  CHECK(cudaFree(scans));
  CHECK(cudaFree(bcast));
  CHECK(cudaFree(odds));
  PASS();
}
