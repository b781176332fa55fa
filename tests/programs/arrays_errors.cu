// What the arrays family refuses, with the codes CUDA returns: copies outside an array, widths
// over a pitch, the wrong copy direction for an array, an array larger than the device, objects
// destroyed twice are not reused; and everything still works afterwards.
#include <vector>

#include "program.h"

int main() {
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<int>();
  cudaArray_t a = nullptr;
  CHECK(cudaMallocArray(&a, &desc, 16, 16));
  std::vector<int> buf(32 * 32, 1);
  // Outside the array: past its width, past its height.
  EXPECT_ERR(cudaMemcpy2DToArray(a, 8 * sizeof(int), 0, buf.data(), 16 * sizeof(int),
                                 16 * sizeof(int), 1, cudaMemcpyHostToDevice),
             cudaErrorInvalidValue);
  EXPECT_ERR(cudaMemcpy2DFromArray(buf.data(), 16 * sizeof(int), a, 0, 10, 16 * sizeof(int), 8,
                                   cudaMemcpyDeviceToHost),
             cudaErrorInvalidValue);
  // A width over the source pitch.
  EXPECT_ERR(cudaMemcpy2DToArray(a, 0, 0, buf.data(), 4, 16, 2, cudaMemcpyHostToDevice),
             cudaErrorInvalidPitchValue);
  // An array as the host side of a copy.
  EXPECT_ERR(cudaMemcpy2DToArray(a, 0, 0, buf.data(), 64, 64, 2, cudaMemcpyDeviceToHost),
             cudaErrorInvalidMemcpyDirection);
  // More than the device holds (16384^3 float4s is 64 TiB).
  cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float4>();
  cudaArray_t huge = nullptr;
  EXPECT_ERR(cudaMalloc3DArray(&huge, &f4, make_cudaExtent(16384, 16384, 16384)),
             cudaErrorMemoryAllocation);
  cudaGetLastError();
  // Memset3D beyond the allocation.
  cudaPitchedPtr p;
  CHECK(cudaMalloc3D(&p, make_cudaExtent(64, 4, 2)));
  EXPECT_ERR(cudaMemset3D(p, 0, make_cudaExtent(64, 4, 4)), cudaErrorInvalidValue);
  cudaGetLastError();
  // Still working.
  CHECK(cudaMemcpy2DToArray(a, 0, 0, buf.data(), 16 * sizeof(int), 16 * sizeof(int), 16,
                            cudaMemcpyHostToDevice));
  CHECK(cudaMemset3D(p, 0, make_cudaExtent(64, 4, 2)));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(p.ptr));
  CHECK(cudaFreeArray(a));
  PASS();
}
