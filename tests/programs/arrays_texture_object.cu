// Texture objects over a CUDA array and over pitched memory: a kernel samples them (point
// filtering, clamped, unnormalised coordinates); the getters give back every descriptor field.
#include <vector>

#include "program.h"

__global__ void Sample(cudaTextureObject_t tex, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(tex, x + 0.5f, y + 0.5f) + 1.0f;
}

int main() {
  const int w = 33, h = 17;
  std::vector<float> img(w * h);
  for (int i = 0; i < w * h; ++i) img[i] = static_cast<float>(i);
  cudaChannelFormatDesc desc = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t arr = nullptr;
  CHECK(cudaMallocArray(&arr, &desc, w, h));
  CHECK(cudaMemcpy2DToArray(arr, 0, 0, img.data(), w * sizeof(float), w * sizeof(float), h,
                            cudaMemcpyHostToDevice));
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = arr;
  cudaTextureDesc td = {};
  td.addressMode[0] = cudaAddressModeClamp;
  td.addressMode[1] = cudaAddressModeBorder;
  td.filterMode = cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;
  td.borderColor[0] = 0.25f;
  td.normalizedCoords = 0;
  td.maxAnisotropy = 1;
  td.maxMipmapLevelClamp = 3.5f;
  cudaTextureObject_t tex = 0;
  CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));
  if (tex == 0) FAIL("texture object 0");
  // Getters: field by field.
  cudaResourceDesc gres = {};
  CHECK(cudaGetTextureObjectResourceDesc(&gres, tex));
  if (gres.resType != cudaResourceTypeArray || gres.res.array.array != arr) FAIL("resource desc");
  cudaTextureDesc gtd = {};
  CHECK(cudaGetTextureObjectTextureDesc(&gtd, tex));
  if (gtd.addressMode[0] != cudaAddressModeClamp || gtd.addressMode[1] != cudaAddressModeBorder ||
      gtd.filterMode != cudaFilterModePoint || gtd.borderColor[0] != 0.25f ||
      gtd.normalizedCoords != 0 || gtd.maxMipmapLevelClamp != 3.5f)
    FAIL("texture desc");
  float* out = nullptr;
  CHECK(cudaMalloc(&out, w * h * sizeof(float)));
  CHECK(cudaMemset(out, 0, w * h * sizeof(float)));
  Sample<<<dim3((w + 15) / 16, (h + 15) / 16), dim3(16, 16)>>>(tex, out, w, h);
  CHECK(cudaGetLastError());
  std::vector<float> got(w * h);
  CHECK(cudaMemcpy(got.data(), out, w * h * sizeof(float), cudaMemcpyDeviceToHost));
  if (KERNELS_RUN) {
    for (int i = 0; i < w * h; ++i)
      if (got[i] != img[i] + 1.0f) FAIL("sample %d = %f", i, got[i]);
  }
  // A second texture over pitched memory with a resource view absent; a linear one.
  float* pitched = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&pitched), &pitch, w * sizeof(float), h));
  CHECK(cudaMemcpy2D(pitched, pitch, img.data(), w * sizeof(float), w * sizeof(float), h,
                     cudaMemcpyHostToDevice));
  cudaResourceDesc pres = {};
  pres.resType = cudaResourceTypePitch2D;
  pres.res.pitch2D.devPtr = pitched;
  pres.res.pitch2D.desc = desc;
  pres.res.pitch2D.width = w;
  pres.res.pitch2D.height = h;
  pres.res.pitch2D.pitchInBytes = pitch;
  cudaTextureObject_t tex2 = 0;
  CHECK(cudaCreateTextureObject(&tex2, &pres, &td, nullptr));
  if (tex2 == tex) FAIL("two texture objects share a value");
  Sample<<<dim3((w + 15) / 16, (h + 15) / 16), dim3(16, 16)>>>(tex2, out, w, h);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(got.data(), out, w * h * sizeof(float), cudaMemcpyDeviceToHost));
  if (KERNELS_RUN) {
    for (int i = 0; i < w * h; ++i)
      if (got[i] != img[i] + 1.0f) FAIL("pitched sample %d = %f", i, got[i]);
  }
  CHECK(cudaGetTextureObjectResourceDesc(&gres, tex2));
  if (gres.resType != cudaResourceTypePitch2D || gres.res.pitch2D.pitchInBytes != pitch)
    FAIL("pitch2D resource desc");
  CHECK(cudaDestroyTextureObject(tex2));
  CHECK(cudaDestroyTextureObject(tex));
  CHECK(cudaFree(pitched));
  CHECK(cudaFree(out));
  CHECK(cudaFreeArray(arr));
  PASS();
}
