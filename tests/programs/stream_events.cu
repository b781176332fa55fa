// Streams and events (NVIDIA's simpleStreams / asyncAPI): work split over several streams, each
// chunk copied in, scaled, copied back asynchronously from pinned memory; events time the whole
// and each stream, cudaEventQuery/cudaStreamQuery poll, cudaStreamWaitEvent orders streams.
#include <vector>

#include "program.h"

__global__ void Scale(int* data, int n, int factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

int main() {
  const int kStreams = 4;
  const int n = 1 << 16;
  const int chunk = n / kStreams;
  const size_t bytes = n * sizeof(int);
  int* host = nullptr;
  CHECK(cudaMallocHost(&host, bytes));
  for (int i = 0; i < n; ++i) host[i] = i;
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, bytes));
  cudaStream_t streams[kStreams];
  cudaEvent_t done[kStreams];
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&done[s]));
  }
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start, 0));
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaStreamWaitEvent(streams[s], start, 0));
    const int offset = s * chunk;
    CHECK(cudaMemcpyAsync(dev + offset, host + offset, chunk * sizeof(int),
                          cudaMemcpyHostToDevice, streams[s]));
    Scale<<<(chunk + 255) / 256, 256, 0, streams[s]>>>(dev + offset, chunk, 3);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(host + offset, dev + offset, chunk * sizeof(int),
                          cudaMemcpyDeviceToHost, streams[s]));
    CHECK(cudaEventRecord(done[s], streams[s]));
  }
  // The legacy default stream waits for every blocking stream; these are non-blocking, so order
  // the stop event after each stream's last work explicitly.
  for (int s = 0; s < kStreams; ++s) CHECK(cudaStreamWaitEvent(0, done[s], 0));
  CHECK(cudaEventRecord(stop, 0));
  // Poll as asyncAPI does: cudaErrorNotReady until the work is done, never another error.
  for (;;) {
    cudaError_t q = cudaEventQuery(stop);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) FAIL("cudaEventQuery returned %s", cudaGetErrorName(q));
  }
  CHECK(cudaEventSynchronize(stop));
  float total_ms = -1.0f;
  CHECK(cudaEventElapsedTime(&total_ms, start, stop));
  if (total_ms < 0.0f) FAIL("elapsed time %f ms is negative", total_ms);
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaStreamSynchronize(streams[s]));
    CHECK(cudaStreamQuery(streams[s]));
    CHECK(cudaEventQuery(done[s]));
    float ms = -1.0f;
    CHECK(cudaEventElapsedTime(&ms, start, done[s]));
    if (ms < 0.0f) FAIL("stream %d: elapsed %f ms", s, ms);
  }
  // An event created without timing cannot be timed.
  cudaEvent_t untimed;
  CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  CHECK(cudaEventRecord(untimed, streams[0]));
  CHECK(cudaEventSynchronize(untimed));
  float ms = 0.0f;
  EXPECT_ERR(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  if (KERNELS_RUN) {
    for (int i = 0; i < n; ++i) {
      if (host[i] != 3 * i) FAIL("host[%d] = %d, expected %d", i, host[i], 3 * i);
    }
  } else {
    // The copies ran even where the kernel did not: every element made the round trip.
    for (int i = 0; i < n; ++i) {
      if (host[i] != i) FAIL("host[%d] = %d after a round trip", i, host[i]);
    }
  }
  std::printf("%d streams: %.3f ms\n", kStreams, total_ms);
  CHECK(cudaEventDestroy(untimed));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaEventDestroy(done[s]));
    CHECK(cudaStreamDestroy(streams[s]));
  }
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(host));
  PASS();
}
