// Capture across streams: the origin stream forks work to a second stream with an event and
// joins it back with another; a fork that never joins ends with cudaErrorStreamCaptureUnjoined.
// The legacy stream used during a capture is cudaErrorStreamCaptureImplicit.
#include <vector>

#include "program.h"

__global__ void fill(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

int main() {
  const int n = 1024;
  int *a, *b;
  CHECK(cudaMalloc(&a, n * sizeof(int)));
  CHECK(cudaMalloc(&b, n * sizeof(int)));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  CHECK(cudaEventRecord(fork, s1));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));
  cudaStreamCaptureStatus status;
  CHECK(cudaStreamIsCapturing(s2, &status));
  if (status != cudaStreamCaptureStatusActive) FAIL("s2 did not join the capture");
  CHECK(cudaMemsetAsync(a, 1, n * sizeof(int), s1));
  CHECK(cudaMemsetAsync(b, 2, n * sizeof(int), s2));
  fill<<<n / 256, 256, 0, s2>>>(b, n, 7);
  CHECK(cudaEventRecord(join, s2));
  CHECK(cudaStreamWaitEvent(s1, join, 0));
  CHECK(cudaMemcpyAsync(a, b, 64, cudaMemcpyDeviceToDevice, s1));
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s1, &graph));
  CHECK(cudaStreamIsCapturing(s2, &status));
  if (status != cudaStreamCaptureStatusNone) FAIL("s2 still capturing");
  size_t roots = 0, nodes = 0;
  CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  if (roots != 2 || nodes != 4) FAIL("%zu roots, %zu nodes; expected 2 and 4", roots, nodes);

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s1));
  CHECK(cudaStreamSynchronize(s1));
  std::vector<int> ha(n);
  CHECK(cudaMemcpy(ha.data(), a, n * sizeof(int), cudaMemcpyDeviceToHost));
  const int b_value = KERNELS_RUN ? 7 : 0x02020202;
  for (int i = 0; i < n; ++i) {
    int expect = i < 16 ? b_value : 0x01010101;
    if (ha[i] != expect) FAIL("a[%d] = %x, expected %x", i, ha[i], expect);
  }

  // A fork that is not joined back.
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  CHECK(cudaEventRecord(fork, s1));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));
  fill<<<1, 32, 0, s2>>>(b, 32, 1);
  cudaGraph_t unjoined = nullptr;
  EXPECT_ERR(cudaStreamEndCapture(s1, &unjoined), cudaErrorStreamCaptureUnjoined);
  if (unjoined != nullptr) FAIL("an unjoined capture returned a graph");
  cudaGetLastError();

  // The legacy stream during a capture of a blocking stream.
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  fill<<<1, 32>>>(b, 32, 1);
  EXPECT_ERR(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
  EXPECT_ERR(cudaStreamEndCapture(s1, &unjoined), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(fork));
  CHECK(cudaEventDestroy(join));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  PASS();
}
