// __device__ variables: a table and a counter in global memory declared in the module, written
// and read with cudaMemcpyToSymbol/FromSymbol (sync, async, at offsets), addressed with
// cudaGetSymbolAddress for plain copies and memsets, and updated by a kernel.
#include "program.h"

constexpr int kTable = 256;
__device__ int d_table[kTable];
__device__ unsigned d_counter;

__global__ void Bump(int add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kTable) {
    d_table[i] += add;
    atomicAdd(&d_counter, 1u);
  }
}

int main() {
  int table[kTable];
  for (int i = 0; i < kTable; ++i) table[i] = i * i;
  CHECK(cudaMemcpyToSymbol(d_table, table, sizeof(table)));
  const unsigned zero = 0;
  CHECK(cudaMemcpyToSymbol(d_counter, &zero, sizeof(zero)));
  // Part of the table through an offset, asynchronously.
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  int patch[4] = {-1, -2, -3, -4};
  CHECK(cudaMemcpyToSymbolAsync(d_table, patch, sizeof(patch), 10 * sizeof(int),
                                cudaMemcpyHostToDevice, stream));
  CHECK(cudaStreamSynchronize(stream));
  for (int k = 0; k < 4; ++k) table[10 + k] = patch[k];
  int back[kTable] = {};
  CHECK(cudaMemcpyFromSymbol(back, d_table, sizeof(back)));
  if (std::memcmp(back, table, sizeof(table)) != 0) FAIL("d_table did not round-trip");
  int slice[3] = {};
  CHECK(cudaMemcpyFromSymbolAsync(slice, d_table, sizeof(slice), 9 * sizeof(int),
                                  cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (slice[0] != table[9] || slice[1] != -1 || slice[2] != -2) FAIL("slice at offset 9 wrong");
  // The symbol's address is a device pointer like any other.
  void* address = nullptr;
  CHECK(cudaGetSymbolAddress(&address, d_table));
  size_t bytes = 0;
  CHECK(cudaGetSymbolSize(&bytes, d_table));
  if (address == nullptr || bytes != sizeof(table)) FAIL("address %p, %zu bytes", address, bytes);
  int first = 0;
  CHECK(cudaMemcpy(&first, address, sizeof(first), cudaMemcpyDeviceToHost));
  if (first != table[0]) FAIL("through the address: %d", first);
  CHECK(cudaMemset(static_cast<char*>(address) + 100 * sizeof(int), 0, 4 * sizeof(int)));
  for (int k = 0; k < 4; ++k) table[100 + k] = 0;
  Bump<<<2, 128>>>(5);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  unsigned counter = 1;
  CHECK(cudaMemcpyFromSymbol(&counter, d_counter, sizeof(counter)));
  CHECK(cudaMemcpyFromSymbol(back, d_table, sizeof(back)));
  const int add = KERNELS_RUN ? 5 : 0;
  if (counter != (KERNELS_RUN ? kTable : 0u)) FAIL("counter %u", counter);
  for (int i = 0; i < kTable; ++i) {
    if (back[i] != table[i] + add) FAIL("d_table[%d] = %d, expected %d", i, back[i], table[i] + add);
  }
  // Device-to-device into the symbol from an allocation.
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, sizeof(table)));
  CHECK(cudaMemset(dev, 0x01, sizeof(table)));
  CHECK(cudaMemcpyToSymbol(d_table, dev, sizeof(table), 0, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpyFromSymbol(back, d_table, sizeof(back)));
  for (int i = 0; i < kTable; ++i) {
    if (back[i] != 0x01010101) FAIL("after device-to-device copy: [%d] = %#x", i, back[i]);
  }
  CHECK(cudaFree(dev));
  CHECK(cudaStreamDestroy(stream));
  PASS();
}
