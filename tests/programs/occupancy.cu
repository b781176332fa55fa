// Occupancy (NVIDIA's simpleOccupancy): the block size the occupancy calculator suggests, the
// blocks per SM it reports, a launch with that configuration, and the theoretical occupancy.
#include "program.h"

__global__ void Square(int* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= data[i];
}

__global__ void SharedHeavy(int* data, int n) {
  extern __shared__ int scratch[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  scratch[threadIdx.x] = i < n ? data[i] : 0;
  __syncthreads();
  if (i < n) data[i] = scratch[blockDim.x - 1 - threadIdx.x];
}

size_t SharedForBlock(int block_size) { return block_size * sizeof(int); }

int main() {
  int device = 0;
  CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  int min_grid = 0, block_size = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block_size, Square, 0, 0));
  if (block_size <= 0 || block_size > prop.maxThreadsPerBlock || block_size % prop.warpSize != 0) {
    FAIL("suggested block size %d", block_size);
  }
  if (min_grid < prop.multiProcessorCount) FAIL("min grid %d < %d SMs", min_grid, prop.multiProcessorCount);
  int active = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, Square, block_size, 0));
  if (active <= 0) FAIL("%d active blocks of %d threads", active, block_size);
  const double occupancy = static_cast<double>(active * block_size) / prop.maxThreadsPerMultiProcessor;
  if (occupancy <= 0.0 || occupancy > 1.0) FAIL("occupancy %f", occupancy);
  // Dynamic shared memory that grows with the block.
  int var_grid = 0, var_block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSizeVariableSMem(&var_grid, &var_block, SharedHeavy,
                                                       SharedForBlock, 0));
  if (var_block <= 0 || var_block > prop.maxThreadsPerBlock) FAIL("variable block %d", var_block);
  size_t available = 0;
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&available, SharedHeavy, 1, var_block));
  if (available < SharedForBlock(var_block)) FAIL("%zu bytes available < %zu", available, SharedForBlock(var_block));
  int with_flags = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      &with_flags, SharedHeavy, var_block, SharedForBlock(var_block), cudaOccupancyDefault));
  if (with_flags <= 0) FAIL("SharedHeavy: %d blocks", with_flags);
  const int n = 1 << 20;
  int* data = nullptr;
  CHECK(cudaMalloc(&data, n * sizeof(int)));
  CHECK(cudaMemset(data, 0, n * sizeof(int)));
  Square<<<(n + block_size - 1) / block_size, block_size>>>(data, n);
  CHECK(cudaGetLastError());
  SharedHeavy<<<(n + var_block - 1) / var_block, var_block, SharedForBlock(var_block)>>>(data, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::printf("block %d (%d per SM, occupancy %.0f%%), variable-smem block %d\n", block_size,
              active, occupancy * 100, var_block);
  CHECK(cudaFree(data));
  PASS();
}
