// Peer access (NVIDIA's simpleP2P, its checks and its fallback): every ordered pair of devices
// is asked whether it can access the other; where it can, access is enabled and a kernel on one
// device reads the other's memory; where it cannot (or with one device), cudaMemcpyPeer is the
// path and moves bytes exactly. Out-of-range devices are cudaErrorInvalidDevice.
#include <vector>

#include "program.h"

__global__ void Twice(const int* src, int* dst, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = 2 * src[i];
}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  int can = -1;
  EXPECT_ERR(cudaDeviceCanAccessPeer(&can, 0, count), cudaErrorInvalidDevice);
  EXPECT_ERR(cudaDeviceCanAccessPeer(&can, count, 0), cudaErrorInvalidDevice);
  // The refusal is also the last error, as CUDA leaves it, and reading it clears it.
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
  CHECK(cudaGetLastError());
  const int n = 1 << 16;
  std::vector<int> host(n);
  for (int i = 0; i < n; ++i) host[i] = i ^ 0x5a5a;
  int pairs = 0;
  for (int a = 0; a < count; ++a) {
    for (int b = 0; b < count; ++b) {
      if (a == b) continue;
      CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (can != 0 && can != 1) FAIL("canAccessPeer(%d, %d) = %d", a, b, can);
      if (can) {
        int* on_b = nullptr;
        int* on_a = nullptr;
        CHECK(cudaSetDevice(b));
        CHECK(cudaMalloc(&on_b, n * sizeof(int)));
        CHECK(cudaMemcpy(on_b, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        CHECK(cudaSetDevice(a));
        cudaError_t enabled = cudaDeviceEnablePeerAccess(b, 0);
        if (enabled != cudaSuccess && enabled != cudaErrorPeerAccessAlreadyEnabled) CHECK(enabled);
        CHECK(cudaMalloc(&on_a, n * sizeof(int)));
        Twice<<<(n + 255) / 256, 256>>>(on_b, on_a, n);  // device a reads device b's memory
        CHECK(cudaGetLastError());
        std::vector<int> back(n);
        CHECK(cudaMemcpy(back.data(), on_a, n * sizeof(int), cudaMemcpyDeviceToHost));
        if (KERNELS_RUN) {
          for (int i = 0; i < n; ++i) {
            if (back[i] != 2 * host[i]) FAIL("peer read %d<-%d: [%d] = %d", a, b, i, back[i]);
          }
        }
        CHECK(cudaDeviceDisablePeerAccess(b));
        CHECK(cudaFree(on_a));
        CHECK(cudaSetDevice(b));
        CHECK(cudaFree(on_b));
        CHECK(cudaSetDevice(0));
        ++pairs;
      }
    }
  }
  // The fallback every program has: a peer copy (here from device 0 to the last device, which
  // may be device 0 itself), staged by CUDA where there is no direct path.
  const int last = count - 1;
  int* src = nullptr;
  int* dst = nullptr;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&src, n * sizeof(int)));
  CHECK(cudaMemcpy(src, host.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaSetDevice(last));
  CHECK(cudaMalloc(&dst, n * sizeof(int)));
  CHECK(cudaMemset(dst, 0, n * sizeof(int)));
  CHECK(cudaMemcpyPeer(dst, last, src, 0, n * sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMemcpyPeerAsync(dst, last, src, 0, n / 2 * sizeof(int), stream));
  CHECK(cudaStreamSynchronize(stream));
  std::vector<int> back(n);
  CHECK(cudaMemcpy(back.data(), dst, n * sizeof(int), cudaMemcpyDeviceToHost));
  if (back != host) FAIL("cudaMemcpyPeer did not move the bytes exactly");
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(dst));
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(src));
  std::printf("%d device(s), %d peer pair(s) with direct access\n", count, pairs);
  PASS();
}
