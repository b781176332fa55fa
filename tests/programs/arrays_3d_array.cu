// 3D and layered CUDA arrays: cudaMalloc3DArray, cudaMemcpy3D(Async) host <-> array <-> pitched
// memory, sub-volumes at offsets, byte-exact.
#include <vector>

#include "program.h"

int main() {
  const int w = 12, h = 9, d = 5;
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<unsigned short>();
  cudaArray_t vol = nullptr;
  CHECK(cudaMalloc3DArray(&vol, &desc, make_cudaExtent(w, h, d)));
  cudaExtent ext{};
  CHECK(cudaArrayGetInfo(nullptr, &ext, nullptr, vol));
  if (ext.width != w || ext.height != h || ext.depth != d) FAIL("extent");
  std::vector<unsigned short> in(w * h * d), out(w * h * d, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned short>(i * 31 + 1);
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(in.data(), w * sizeof(unsigned short), w, h);
  up.dstArray = vol;
  up.extent = make_cudaExtent(w, h, d);  // elements wide: an array is involved
  up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&up));
  cudaMemcpy3DParms down = {};
  down.srcArray = vol;
  down.dstPtr = make_cudaPitchedPtr(out.data(), w * sizeof(unsigned short), w, h);
  down.extent = make_cudaExtent(w, h, d);
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&down));
  if (out != in) FAIL("3D array round trip differs");
  // A sub-volume 4 x 3 x 2 at (5, 2, 1) through pitched device memory, asynchronously.
  cudaPitchedPtr dev;
  CHECK(cudaMalloc3D(&dev, make_cudaExtent(4 * sizeof(unsigned short), 3, 2)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaMemcpy3DParms sub = {};
  sub.srcArray = vol;
  sub.srcPos = make_cudaPos(5, 2, 1);
  sub.dstPtr = dev;
  sub.extent = make_cudaExtent(4, 3, 2);
  sub.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3DAsync(&sub, s));
  std::vector<unsigned short> part(4 * 3 * 2, 0);
  cudaMemcpy3DParms fetch = {};
  fetch.srcPtr = dev;
  fetch.dstPtr = make_cudaPitchedPtr(part.data(), 4 * sizeof(unsigned short), 4, 3);
  fetch.extent = make_cudaExtent(4 * sizeof(unsigned short), 3, 2);  // bytes: no array
  fetch.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3DAsync(&fetch, s));
  CHECK(cudaStreamSynchronize(s));
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x)
        if (part[(z * 3 + y) * 4 + x] != in[((1 + z) * h + 2 + y) * w + 5 + x])
          FAIL("sub-volume (%d,%d,%d)", x, y, z);
  // A layered 2D array: 3 layers of 16 x 4 float.
  cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>();
  cudaArray_t layers = nullptr;
  CHECK(cudaMalloc3DArray(&layers, &fdesc, make_cudaExtent(16, 4, 3), cudaArrayLayered));
  unsigned flags = 0;
  CHECK(cudaArrayGetInfo(nullptr, nullptr, &flags, layers));
  if (flags != cudaArrayLayered) FAIL("layered flag %u", flags);
  std::vector<float> lin(16 * 4 * 3), lout(lin.size());
  for (size_t i = 0; i < lin.size(); ++i) lin[i] = i * 0.25f;
  cudaMemcpy3DParms lp = {};
  lp.srcPtr = make_cudaPitchedPtr(lin.data(), 16 * sizeof(float), 16, 4);
  lp.dstArray = layers;
  lp.extent = make_cudaExtent(16, 4, 3);
  lp.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&lp));
  lp = {};
  lp.srcArray = layers;
  lp.dstPtr = make_cudaPitchedPtr(lout.data(), 16 * sizeof(float), 16, 4);
  lp.extent = make_cudaExtent(16, 4, 3);
  lp.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&lp));
  if (lout != lin) FAIL("layered round trip differs");
  // Both an array and a pointer at one end is refused.
  cudaMemcpy3DParms bad = down;
  bad.srcPtr = dev;
  EXPECT_ERR(cudaMemcpy3D(&bad), cudaErrorInvalidValue);
  CHECK(cudaFree(dev.ptr));
  CHECK(cudaFreeArray(vol));
  CHECK(cudaFreeArray(layers));
  CHECK(cudaStreamDestroy(s));
  PASS();
}
