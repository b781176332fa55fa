// Pitched memory: cudaMallocPitch / cudaMalloc3D, 2D and 3D copies between host rows and pitched
// device memory (sync and async), cudaMemset2D/3D, a kernel that scales a pitched image.
#include <vector>

#include "program.h"

__global__ void Scale(float* img, size_t pitch, int w, int h, float k) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) {
    float* row = reinterpret_cast<float*>(reinterpret_cast<char*>(img) + y * pitch);
    row[x] *= k;
  }
}

int main() {
  const int w = 300, h = 70;
  std::vector<float> in(w * h), out(w * h, -1.0f);
  for (int i = 0; i < w * h; ++i) in[i] = static_cast<float>(i % 977) * 0.5f;
  float* d = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&d), &pitch, w * sizeof(float), h));
  if (pitch < w * sizeof(float)) FAIL("pitch %zu too small", pitch);
  CHECK(cudaMemcpy2D(d, pitch, in.data(), w * sizeof(float), w * sizeof(float), h,
                     cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2D(out.data(), w * sizeof(float), d, pitch, w * sizeof(float), h,
                     cudaMemcpyDeviceToHost));
  if (out != in) FAIL("2D round trip differs");
  // A window through a stream, host rows with their own pitch.
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  std::vector<float> padded(64 * 10, 7.0f);
  CHECK(cudaMemcpy2DAsync(d + 5, pitch, padded.data(), 64 * sizeof(float), 20 * sizeof(float), 10,
                          cudaMemcpyHostToDevice, s));
  std::vector<float> window(20 * 10, 0.0f);
  CHECK(cudaMemcpy2DAsync(window.data(), 20 * sizeof(float), d + 5, pitch, 20 * sizeof(float), 10,
                          cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (float v : window) {
    if (v != 7.0f) FAIL("async window holds %f", v);
  }
  // Memset of a pitched region: bytes 0x3f make floats of 0.746...
  CHECK(cudaMemset2D(d, pitch, 0x3f, 8 * sizeof(float), 4));
  CHECK(cudaMemcpy2D(out.data(), w * sizeof(float), d, pitch, w * sizeof(float), h,
                     cudaMemcpyDeviceToHost));
  unsigned bits;
  std::memcpy(&bits, &out[3 * w + 7], 4);
  if (bits != 0x3f3f3f3fu) FAIL("memset2D left %08x", bits);
  if (out[3 * w + 8] != 7.0f && out[3 * w + 8] != in[3 * w + 8]) FAIL("memset2D spilled");
  // Device-to-device 2D into a second pitched image, then a kernel on it.
  float* e = nullptr;
  size_t epitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&e), &epitch, w * sizeof(float), h));
  CHECK(cudaMemcpy2D(d, pitch, in.data(), w * sizeof(float), w * sizeof(float), h,
                     cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2D(e, epitch, d, pitch, w * sizeof(float), h, cudaMemcpyDeviceToDevice));
  Scale<<<dim3((w + 31) / 32, (h + 7) / 8), dim3(32, 8)>>>(e, epitch, w, h, 2.0f);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy2D(out.data(), w * sizeof(float), e, epitch, w * sizeof(float), h,
                     cudaMemcpyDeviceToHost));
  if (KERNELS_RUN) {
    for (int i = 0; i < w * h; ++i) {
      if (out[i] != in[i] * 2.0f) FAIL("scaled[%d] = %f", i, out[i]);
    }
  } else if (out != in) {
    FAIL("device-to-device 2D copy differs");
  }
  // A width over the pitch is refused.
  EXPECT_ERR(cudaMemcpy2D(d, 16, in.data(), 32, 32, 2, cudaMemcpyHostToDevice),
             cudaErrorInvalidPitchValue);
  // cudaMalloc3D + cudaMemset3D + cudaMemcpy3D between host and pitched memory.
  cudaExtent ext = make_cudaExtent(40, 6, 3);  // bytes, rows, slices
  cudaPitchedPtr p3;
  CHECK(cudaMalloc3D(&p3, ext));
  CHECK(cudaMemset3D(p3, 0x5a, ext));
  std::vector<unsigned char> host3(40 * 6 * 3, 0);
  cudaMemcpy3DParms cp = {};
  cp.srcPtr = p3;
  cp.dstPtr = make_cudaPitchedPtr(host3.data(), 40, 40, 6);
  cp.extent = ext;
  cp.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&cp));
  for (unsigned char c : host3) {
    if (c != 0x5a) FAIL("memset3D/memcpy3D byte %02x", c);
  }
  for (size_t i = 0; i < host3.size(); ++i) host3[i] = static_cast<unsigned char>(i * 7);
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(host3.data(), 40, 40, 6);
  up.dstPtr = p3;
  up.extent = ext;
  up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3DAsync(&up, s));
  std::vector<unsigned char> back(host3.size(), 0);
  cp.dstPtr = make_cudaPitchedPtr(back.data(), 40, 40, 6);
  CHECK(cudaMemcpy3DAsync(&cp, s));
  CHECK(cudaStreamSynchronize(s));
  if (back != host3) FAIL("3D pitched round trip differs");
  CHECK(cudaFree(p3.ptr));
  CHECK(cudaFree(e));
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
  PASS();
}
