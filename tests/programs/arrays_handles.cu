// Handles the program never got from the runtime, or already gave back, are refused (never
// dereferenced): arrays, mipmapped arrays, texture and surface objects. CUDA returns
// cudaErrorInvalidValue or cudaErrorInvalidResourceHandle for these; either is accepted.
#include "program.h"

static void ExpectRefused(cudaError_t e, const char* what) {
  if (e != cudaErrorInvalidValue && e != cudaErrorInvalidResourceHandle)
    FAIL("%s returned %s", what, cudaGetErrorName(e));
  cudaGetLastError();
}

int main() {
  long long bogus[64] = {};
  cudaArray_t fake = reinterpret_cast<cudaArray_t>(bogus);
  cudaChannelFormatDesc desc{};
  cudaExtent ext{};
  ExpectRefused(cudaArrayGetInfo(&desc, &ext, nullptr, fake), "cudaArrayGetInfo(fake)");
  ExpectRefused(cudaFreeArray(fake), "cudaFreeArray(fake)");
  int host[16] = {};
  ExpectRefused(cudaMemcpy2DToArray(fake, 0, 0, host, 16, 16, 1, cudaMemcpyHostToDevice),
                "cudaMemcpy2DToArray(fake)");
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = fake;
  cudaTextureDesc td = {};
  cudaTextureObject_t tex = 0;
  ExpectRefused(cudaCreateTextureObject(&tex, &res, &td, nullptr), "texture over a fake array");
  cudaMipmappedArray_t fake_mip = reinterpret_cast<cudaMipmappedArray_t>(bogus + 8);
  cudaArray_t level = nullptr;
  ExpectRefused(cudaGetMipmappedArrayLevel(&level, fake_mip, 0), "level of a fake mipmap");
  // Given back, then used again.
  desc = cudaCreateChannelDesc<float>();
  cudaArray_t a = nullptr;
  CHECK(cudaMallocArray(&a, &desc, 8, 8));
  res.res.array.array = a;
  CHECK(cudaCreateTextureObject(&tex, &res, &td, nullptr));
  CHECK(cudaDestroyTextureObject(tex));
  ExpectRefused(cudaGetTextureObjectTextureDesc(&td, tex), "descriptor of a destroyed texture");
  CHECK(cudaFreeArray(a));
  ExpectRefused(cudaArrayGetInfo(&desc, &ext, nullptr, a), "cudaArrayGetInfo(freed)");
  // The device still answers.
  CHECK(cudaDeviceSynchronize());
  PASS();
}
