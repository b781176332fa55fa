// A graph launched inside a capture becomes a child graph node; graphs launched on several
// streams and on the per-thread default stream; events recorded by a graph time its launches.
#include <vector>

#include "program.h"

__global__ void add(float* p, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}

int main() {
  const int n = 1 << 12;
  float* p;
  CHECK(cudaMalloc(&p, n * sizeof(float)));
  CHECK(cudaMemset(p, 0, n * sizeof(float)));
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));

  cudaGraph_t inner;
  CHECK(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal));
  add<<<n / 256, 256, 0, a>>>(p, n, 1.0f);
  CHECK(cudaStreamEndCapture(a, &inner));
  cudaGraphExec_t inner_exec;
  CHECK(cudaGraphInstantiate(&inner_exec, inner, 0));

  cudaGraph_t outer;
  CHECK(cudaStreamBeginCapture(b, cudaStreamCaptureModeGlobal));
  CHECK(cudaGraphLaunch(inner_exec, b));
  CHECK(cudaGraphLaunch(inner_exec, b));
  CHECK(cudaStreamEndCapture(b, &outer));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(outer, nullptr, &nodes));
  if (nodes != 2) FAIL("outer graph has %zu nodes, expected 2", nodes);
  cudaGraphNodeType type;
  std::vector<cudaGraphNode_t> list(nodes);
  CHECK(cudaGraphGetNodes(outer, list.data(), &nodes));
  CHECK(cudaGraphNodeGetType(list[0], &type));
  if (type != cudaGraphNodeTypeGraph) FAIL("a launch in capture is not a child graph node");
  cudaGraphExec_t outer_exec;
  CHECK(cudaGraphInstantiate(&outer_exec, outer, 0));

  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start, a));
  for (int i = 0; i < 10; ++i) CHECK(cudaGraphLaunch(inner_exec, a));   // +10
  CHECK(cudaEventRecord(stop, a));
  CHECK(cudaStreamWaitEvent(b, stop, 0));
  for (int i = 0; i < 5; ++i) CHECK(cudaGraphLaunch(outer_exec, b));    // +10
  CHECK(cudaGraphLaunch(inner_exec, cudaStreamPerThread));              // +1
  CHECK(cudaStreamSynchronize(b));
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  CHECK(cudaEventSynchronize(stop));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  if (ms < 0) FAIL("elapsed %f", ms);
  std::vector<float> h(n);
  CHECK(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  const float expect = KERNELS_RUN ? 21.0f : 0.0f;
  for (int i = 0; i < n; ++i) {
    if (h[i] != expect) FAIL("p[%d] = %f, expected %f", i, h[i], expect);
  }
  CHECK(cudaGraphExecDestroy(outer_exec));
  CHECK(cudaGraphExecDestroy(inner_exec));
  CHECK(cudaGraphDestroy(outer));
  CHECK(cudaGraphDestroy(inner));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
  CHECK(cudaFree(p));
  PASS();
}
