// Streams and events: two streams each copy a half in (async, from pinned memory), scale it and
// copy it back; events time the work and order one stream after the other.
#include <cstdio>

#include "check.h"

__global__ void Scale(float* data, int n, float factor) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

__global__ void AddOffset(float* data, int n, float offset) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += offset;
}

int main() {
  const int n = 1 << 18;
  const int half = n / 2;
  float* host = nullptr;
  CHECK(cudaMallocHost(&host, n * sizeof(float)));
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);
  float* dev = nullptr;
  CHECK(cudaMalloc(&dev, n * sizeof(float)));
  cudaStream_t streams[2];
  cudaEvent_t start, done[2];
  for (auto& s : streams) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaEventCreate(&start));
  for (auto& e : done) CHECK(cudaEventCreate(&e));
  CHECK(cudaEventRecord(start, streams[0]));
  for (int s = 0; s < 2; ++s) {
    float* d = dev + s * half;
    float* h = host + s * half;
    CHECK(cudaMemcpyAsync(d, h, half * sizeof(float), cudaMemcpyHostToDevice, streams[s]));
    Scale<<<(half + 255) / 256, 256, 0, streams[s]>>>(d, half, 3.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(done[s], streams[s]));
  }
  // Stream 1 waits for stream 0's scaling, then adds an offset over the whole array.
  CHECK(cudaStreamWaitEvent(streams[1], done[0], 0));
  AddOffset<<<(n + 255) / 256, 256, 0, streams[1]>>>(dev, n, 0.5f);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, streams[1]));
  CHECK(cudaEventRecord(done[1], streams[1]));
  CHECK(cudaEventSynchronize(done[1]));
  if (cudaEventQuery(done[1]) != cudaSuccess) FAIL("streams_events: event not complete after sync");
  float ms = -1.0f;
  CHECK(cudaEventElapsedTime(&ms, start, done[1]));
  if (!(ms >= 0.0f)) FAIL("streams_events: elapsed time %g ms is negative", ms);
  for (int i = 0; i < n; ++i) {
    const float want = static_cast<float>(i % 1000) * 3.0f + 0.5f;
    if (host[i] != want) FAIL("streams_events: host[%d] = %g, expected %g", i, host[i], want);
  }
  for (auto& s : streams) CHECK(cudaStreamDestroy(s));
  CHECK(cudaEventDestroy(start));
  for (auto& e : done) CHECK(cudaEventDestroy(e));
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(host));
  std::printf("streams_events: 2 streams, async copies, event wait, %.3f ms: PASS\n", ms);
  return 0;
}
