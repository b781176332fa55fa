// Stream capture: a sequence of memset, kernels and copies captured once into a graph, then
// replayed many times with cudaGraphLaunch (the decode-loop pattern of inference engines).
#include <vector>

#include "program.h"

__global__ void add(int* data, int n, int value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += value;
}

int main() {
  const int n = 1 << 16;
  int *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, n * sizeof(int)));
  CHECK(cudaMalloc(&b, n * sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  cudaStreamCaptureStatus status;
  CHECK(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusNone) FAIL("capturing before BeginCapture");
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusActive) FAIL("not capturing after BeginCapture");
  CHECK(cudaMemsetAsync(a, 0, n * sizeof(int), stream));
  for (int k = 0; k < 10; ++k) add<<<n / 256, 256, 0, stream>>>(a, n, 1);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice, stream));
  CHECK(cudaMemsetAsync(a, 0x7F, 16, stream));
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusNone) FAIL("still capturing after EndCapture");

  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  if (count != 13) FAIL("captured %zu nodes, expected 13", count);
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  int kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(node, &type));
    kernels += type == cudaGraphNodeTypeKernel;
  }
  if (kernels != 10) FAIL("%d kernel nodes, expected 10", kernels);
  size_t roots = 0;
  CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
  if (roots != 1) FAIL("%zu root nodes, expected 1 (a chain)", roots);

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  // Nothing ran while capturing: a is still what cudaMalloc gave; set b to a known value.
  CHECK(cudaMemset(b, 0xFF, n * sizeof(int)));
  for (int i = 0; i < 100; ++i) CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  // Launches outside the capture still reach the device whole (their arguments included).
  add<<<n / 256, 256, 0, stream>>>(b, n, 0);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(stream));

  std::vector<int> ha(n), hb(n);
  CHECK(cudaMemcpy(ha.data(), a, n * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hb.data(), b, n * sizeof(int), cudaMemcpyDeviceToHost));
  // The memsets and copies of the graph are exact everywhere.
  for (int i = 0; i < 4; ++i) {
    if (ha[i] != 0x7F7F7F7F) FAIL("a[%d] = %x after the graph's last memset", i, ha[i]);
  }
  if (KERNELS_RUN) {
    for (int i = 0; i < n; ++i) {
      if (hb[i] != 10) FAIL("b[%d] = %d, expected 10", i, hb[i]);
      if (i >= 4 && ha[i] != 10) FAIL("a[%d] = %d, expected 10", i, ha[i]);
    }
  } else {
    for (int i = 0; i < n; ++i) {
      if (hb[i] != 0) FAIL("b[%d] = %d, expected the copied memset 0", i, hb[i]);
    }
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  PASS();
}
