// Holds device memory, streams and events and keeps copies and launches in flight until it is
// killed: the e2e test sends it SIGKILL mid-stream and checks that the server freed everything.
// Prints "READY" once it holds everything.
#include <vector>

#include "check.h"

__global__ void Touch(float* data, int n, float step) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += step;
}

int main() {
  const int n = 4 << 20;  // 16 MiB of floats per buffer
  std::vector<float*> buffers(8);
  for (auto& b : buffers) CHECK(cudaMalloc(&b, n * sizeof(float)));
  cudaStream_t streams[3];
  for (auto& s : streams) CHECK(cudaStreamCreate(&s));
  cudaEvent_t events[4];
  for (auto& e : events) CHECK(cudaEventCreate(&e));
  std::vector<float> host(n, 1.0f);
  std::printf("READY\n");
  std::fflush(stdout);
  for (unsigned long long round = 0;; ++round) {
    cudaStream_t s = streams[round % 3];
    float* b = buffers[round % buffers.size()];
    CHECK(cudaMemcpyAsync(b, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    Touch<<<(n + 255) / 256, 256, 0, s>>>(b, n, 1.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(events[round % 4], s));
    CHECK(cudaMemcpyAsync(host.data(), b, 4096, cudaMemcpyDeviceToHost, s));
    if (round % 8 == 7) CHECK(cudaStreamSynchronize(s));
  }
}
