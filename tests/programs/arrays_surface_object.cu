// Surface objects: a kernel writes a CUDA array through surf2Dwrite, the host reads the array
// back; an array made without cudaArraySurfaceLoadStore is refused.
#include <vector>

#include "program.h"

__global__ void Fill(cudaSurfaceObject_t surf, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) surf2Dwrite(make_uchar4(x, y, x ^ y, 255), surf, x * sizeof(uchar4), y);
}

int main() {
  const int w = 40, h = 24;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<uchar4>();
  cudaArray_t arr = nullptr, plain = nullptr;
  CHECK(cudaMallocArray(&arr, &desc, w, h, cudaArraySurfaceLoadStore));
  CHECK(cudaMallocArray(&plain, &desc, w, h));
  std::vector<uchar4> zero(w * h, make_uchar4(0, 0, 0, 0));
  CHECK(cudaMemcpy2DToArray(arr, 0, 0, zero.data(), w * sizeof(uchar4), w * sizeof(uchar4), h,
                            cudaMemcpyHostToDevice));
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = arr;
  cudaSurfaceObject_t surf = 0;
  CHECK(cudaCreateSurfaceObject(&surf, &res));
  if (surf == 0) FAIL("surface object 0");
  cudaResourceDesc got = {};
  CHECK(cudaGetSurfaceObjectResourceDesc(&got, surf));
  if (got.resType != cudaResourceTypeArray || got.res.array.array != arr) FAIL("resource desc");
  Fill<<<dim3((w + 7) / 8, (h + 7) / 8), dim3(8, 8)>>>(surf, w, h);
  CHECK(cudaGetLastError());
  std::vector<uchar4> out(w * h);
  CHECK(cudaMemcpy2DFromArray(out.data(), w * sizeof(uchar4), arr, 0, 0, w * sizeof(uchar4), h,
                              cudaMemcpyDeviceToHost));
  CHECK(cudaDeviceSynchronize());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uchar4 v = out[y * w + x];
      if (KERNELS_RUN && (v.x != x || v.y != y || v.z != (x ^ y) || v.w != 255))
        FAIL("texel (%d,%d)", x, y);
      if (!KERNELS_RUN && (v.x | v.y | v.z | v.w) != 0) FAIL("array changed without a kernel");
    }
  res.res.array.array = plain;
  cudaSurfaceObject_t bad = 0;
  EXPECT_ERR(cudaCreateSurfaceObject(&bad, &res), cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaDestroySurfaceObject(surf));
  CHECK(cudaFreeArray(arr));
  CHECK(cudaFreeArray(plain));
  PASS();
}
