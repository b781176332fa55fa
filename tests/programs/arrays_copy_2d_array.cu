// CUDA arrays in 2D: cudaMallocArray, cudaArrayGetInfo, cudaGetChannelDesc, copies to, from and
// between arrays (2D and the deprecated linear ones), byte-exact.
// flyt-nvcc-flags: -Wno-deprecated-declarations
#include <vector>

#include "program.h"

int main() {
  const int w = 50, h = 20;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float2>();
  cudaArray_t a = nullptr, b = nullptr;
  CHECK(cudaMallocArray(&a, &desc, w, h));
  CHECK(cudaMallocArray(&b, &desc, w, h, cudaArraySurfaceLoadStore));
  cudaChannelFormatDesc got{};
  cudaExtent ext{};
  unsigned flags = 99;
  CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
  if (got.x != 32 || got.y != 32 || got.z != 0 || got.f != cudaChannelFormatKindFloat)
    FAIL("channel desc %d %d %d %d", got.x, got.y, got.z, (int)got.f);
  if (ext.width != w || ext.height != h || ext.depth != 0 || flags != 0)
    FAIL("extent %zu %zu %zu flags %u", ext.width, ext.height, ext.depth, flags);
  CHECK(cudaArrayGetInfo(nullptr, nullptr, &flags, b));
  if (flags != cudaArraySurfaceLoadStore) FAIL("flags %u", flags);
  CHECK(cudaGetChannelDesc(&got, b));
  if (got.x != 32 || got.y != 32) FAIL("cudaGetChannelDesc");

  std::vector<float2> in(w * h), out(w * h);
  for (int i = 0; i < w * h; ++i) in[i] = make_float2(i, -i);
  const size_t row = w * sizeof(float2);
  CHECK(cudaMemcpy2DToArray(a, 0, 0, in.data(), row, row, h, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2DFromArray(out.data(), row, a, 0, 0, row, h, cudaMemcpyDeviceToHost));
  if (std::memcmp(in.data(), out.data(), row * h) != 0) FAIL("array round trip differs");
  // Array to array, a window at an offset.
  CHECK(cudaMemcpy2DArrayToArray(b, 0, 0, a, 0, 0, row, h, cudaMemcpyDeviceToDevice));
  std::vector<float2> win(5 * 3);
  CHECK(cudaMemcpy2DFromArray(win.data(), 5 * sizeof(float2), b, 10 * sizeof(float2), 4,
                              5 * sizeof(float2), 3, cudaMemcpyDeviceToHost));
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 5; ++x)
      if (win[y * 5 + x].x != in[(4 + y) * w + 10 + x].x) FAIL("window (%d,%d)", x, y);
  // Async through a stream, from device memory.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  float2* dev = nullptr;
  CHECK(cudaMalloc(&dev, row * h));
  CHECK(cudaMemset(dev, 0, row * h));
  CHECK(cudaMemcpy2DToArrayAsync(b, 0, 0, dev, row, row, h, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaMemcpy2DFromArrayAsync(out.data(), row, b, 0, 0, row, h, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (const float2& v : out)
    if (v.x != 0.0f || v.y != 0.0f) FAIL("zeroed array holds %f", v.x);
  // The deprecated linear copies: 3 rows and a half from (7, 2).
  size_t count = 3 * row + 13 * sizeof(float2);
  CHECK(cudaMemcpyToArray(b, 7 * sizeof(float2), 2, in.data(), count, cudaMemcpyHostToDevice));
  std::vector<float2> lin(count / sizeof(float2));
  CHECK(cudaMemcpyFromArray(lin.data(), b, 7 * sizeof(float2), 2, count, cudaMemcpyDeviceToHost));
  if (std::memcmp(lin.data(), in.data(), count) != 0) FAIL("linear array copy differs");
  // Outside the array.
  EXPECT_ERR(cudaMemcpy2DToArray(a, 0, h - 1, in.data(), row, row, 2, cudaMemcpyHostToDevice),
             cudaErrorInvalidValue);
  CHECK(cudaFree(dev));
  CHECK(cudaFreeArray(a));
  CHECK(cudaFreeArray(b));
  CHECK(cudaStreamDestroy(s));
  PASS();
}
