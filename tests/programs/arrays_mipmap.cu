// Mipmapped arrays: cudaMallocMipmappedArray, each level's extent, copies into and out of a
// level, a texture object over the whole pyramid sampled at level 0.
#include <vector>

#include "program.h"

__global__ void SampleLevel0(cudaTextureObject_t tex, float* out, int w) {
  int x = threadIdx.x;
  if (x < w) out[x] = tex2DLod<float>(tex, (x + 0.5f) / w, 0.5f / 8, 0.0f);
}

int main() {
  const int w = 64, h = 8, levels = 4;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaMipmappedArray_t mip = nullptr;
  CHECK(cudaMallocMipmappedArray(&mip, &desc, make_cudaExtent(w, h, 0), levels));
  for (int l = 0; l < levels; ++l) {
    cudaArray_t level = nullptr;
    CHECK(cudaGetMipmappedArrayLevel(&level, mip, l));
    cudaExtent ext{};
    CHECK(cudaArrayGetInfo(nullptr, &ext, nullptr, level));
    size_t lw = w >> l, lh = h >> l > 0 ? h >> l : 1;
    if (ext.width != lw || ext.height != lh) FAIL("level %d extent %zu x %zu", l, ext.width, ext.height);
    std::vector<float> in(lw * lh), out(lw * lh);
    for (size_t i = 0; i < in.size(); ++i) in[i] = l * 1000.0f + i;
    CHECK(cudaMemcpy2DToArray(level, 0, 0, in.data(), lw * sizeof(float), lw * sizeof(float), lh,
                              cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DFromArray(out.data(), lw * sizeof(float), level, 0, 0, lw * sizeof(float),
                                lh, cudaMemcpyDeviceToHost));
    if (in != out) FAIL("level %d round trip", l);
  }
  cudaArray_t none = nullptr;
  EXPECT_ERR(cudaGetMipmappedArrayLevel(&none, mip, levels + 3), cudaErrorInvalidValue);
  cudaGetLastError();
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeMipmappedArray;
  res.res.mipmap.mipmap = mip;
  cudaTextureDesc td = {};
  td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
  td.filterMode = cudaFilterModePoint;
  td.mipmapFilterMode = cudaFilterModePoint;
  td.normalizedCoords = 1;
  td.maxMipmapLevelClamp = levels - 1;
  cudaTextureObject_t tex = 0;
  CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));
  float* out = nullptr;
  CHECK(cudaMalloc(&out, w * sizeof(float)));
  SampleLevel0<<<1, w>>>(tex, out, w);
  CHECK(cudaGetLastError());
  std::vector<float> got(w);
  CHECK(cudaMemcpy(got.data(), out, w * sizeof(float), cudaMemcpyDeviceToHost));
  if (KERNELS_RUN) {
    for (int x = 0; x < w; ++x)
      if (got[x] != static_cast<float>(x)) FAIL("level 0 sample %d = %f", x, got[x]);
  }
  CHECK(cudaDestroyTextureObject(tex));
  CHECK(cudaFree(out));
  CHECK(cudaFreeMipmappedArray(mip));
  PASS();
}
