// Cooperative launches, as a grid-wide reduction launches them: the grid sized from the
// occupancy API so that every block is co-resident, cudaLaunchCooperativeKernel, then a grid one
// block too large refused with cudaErrorCooperativeLaunchTooLarge (and not sticky); the same
// through cudaLaunchKernelExC with the cooperative attribute.
// flyt-nvcc-flags: -rdc=false
#include <cooperative_groups.h>

#include "program.h"

namespace cg = cooperative_groups;

__global__ void GridSum(const int* in, int* partial, int* out, int n) {
  cg::grid_group grid = cg::this_grid();
  int sum = 0;
  for (int i = grid.thread_rank(); i < n; i += grid.size()) sum += in[i];
  atomicAdd(&partial[blockIdx.x], sum);
  grid.sync();
  if (grid.thread_rank() == 0) {
    int total = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) total += partial[b];
    *out = total;
  }
}

int main() {
  int cooperative = 0;
  CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, 0));
  if (!cooperative) FAIL("cooperative launch not supported");
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int threads = 256;
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, GridSum, threads, 0));
  if (per_sm < 1) FAIL("occupancy %d", per_sm);
  int blocks = sms * per_sm;

  const int n = 1 << 20;
  int* in = nullptr;
  int* partial = nullptr;
  int* out = nullptr;
  CHECK(cudaMalloc(&in, n * sizeof(int)));
  CHECK(cudaMalloc(&partial, (blocks + 1) * sizeof(int)));
  CHECK(cudaMalloc(&out, sizeof(int)));
  CHECK(cudaMemset(in, 0, n * sizeof(int)));
  CHECK(cudaMemset(in, 1, 1));  // in[0] = 1: the sum is 1
  CHECK(cudaMemset(partial, 0, (blocks + 1) * sizeof(int)));
  int nn = n;
  void* args[] = {&in, &partial, &out, &nn};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(GridSum), dim3(blocks), dim3(threads),
                                    args, 0, nullptr));
  CHECK(cudaDeviceSynchronize());
  int total = -1;
  CHECK(cudaMemcpy(&total, out, sizeof total, cudaMemcpyDeviceToHost));
  if (KERNELS_RUN && total != 1) FAIL("grid sum %d", total);

  EXPECT_ERR(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(GridSum), dim3(blocks + 1),
                                         dim3(threads), args, 0, nullptr),
             cudaErrorCooperativeLaunchTooLarge);
  CHECK(cudaGetLastError() == cudaErrorCooperativeLaunchTooLarge ? cudaSuccess : cudaErrorUnknown);
  CHECK(cudaGetLastError());  // cleared: not sticky

  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelExC(&config, reinterpret_cast<void*>(GridSum), args));
  CHECK(cudaDeviceSynchronize());
  config.gridDim = dim3(blocks * 2);
  EXPECT_ERR(cudaLaunchKernelExC(&config, reinterpret_cast<void*>(GridSum), args),
             cudaErrorCooperativeLaunchTooLarge);
  (void)cudaGetLastError();
  CHECK(cudaFree(in));
  CHECK(cudaFree(partial));
  CHECK(cudaFree(out));
  PASS();
}
