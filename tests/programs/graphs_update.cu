// Changing an instantiated graph without instantiating again: cudaGraphExecKernelNodeSetParams
// on one node, cudaGraphExecUpdate from a graph of the same shape, and the refusal of a graph
// whose topology changed (cudaErrorGraphExecUpdateFailure).
#include <vector>

#include "program.h"

__global__ void set(int* p, int n, int v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

static cudaGraph_t Build(int* p, int n, int* v, int value_for_memset, cudaGraphNode_t* kernel,
                         bool extra_node) {
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaMemsetParams ms{};
  ms.dst = p;
  ms.value = value_for_memset;
  ms.elementSize = 4;
  ms.width = n;
  ms.height = 1;
  cudaGraphNode_t memset_node;
  CHECK(cudaGraphAddMemsetNode(&memset_node, graph, nullptr, 0, &ms));
  void* args[] = {&p, &n, v};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(set);
  kp.gridDim = dim3((n + 127) / 128);
  kp.blockDim = dim3(128);
  kp.kernelParams = args;
  CHECK(cudaGraphAddKernelNode(kernel, graph, &memset_node, 1, &kp));
  if (extra_node) {
    cudaGraphNode_t empty;
    CHECK(cudaGraphAddEmptyNode(&empty, graph, kernel, 1));
  }
  return graph;
}

int main() {
  const int n = 512;
  int* p;
  CHECK(cudaMalloc(&p, n * sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  std::vector<int> h(n);
  auto expect_all = [&](int kernel_value, int memset_value) {
    CHECK(cudaMemcpy(h.data(), p, n * sizeof(int), cudaMemcpyDeviceToHost));
    int expect = KERNELS_RUN ? kernel_value : memset_value;
    for (int i = 0; i < n; ++i) {
      if (h[i] != expect) FAIL("p[%d] = %d, expected %d", i, h[i], expect);
    }
  };

  int v = 5;
  cudaGraphNode_t kernel;
  cudaGraph_t graph = Build(p, n, &v, 1, &kernel, false);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect_all(5, 1);

  // The kernel node's arguments, changed in the exec only.
  cudaKernelNodeParams kp{};
  CHECK(cudaGraphKernelNodeGetParams(kernel, &kp));
  if (kp.func != reinterpret_cast<void*>(set) || kp.blockDim.x != 128) FAIL("kernel params");
  int nine = 9;
  int count = n;
  void* args[] = {&p, &count, &nine};
  kp.kernelParams = args;
  CHECK(cudaGraphExecKernelNodeSetParams(exec, kernel, &kp));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect_all(9, 1);

  // A whole new graph of the same shape.
  int seven = 7;
  cudaGraphNode_t kernel2;
  cudaGraph_t same_shape = Build(p, n, &seven, 3, &kernel2, false);
  cudaGraphExecUpdateResultInfo info{};
  CHECK(cudaGraphExecUpdate(exec, same_shape, &info));
  if (info.result != cudaGraphExecUpdateSuccess) FAIL("update result %d", info.result);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect_all(7, 3);

  // A graph with another node is refused; the exec keeps working as before.
  cudaGraphNode_t kernel3;
  cudaGraph_t other_shape = Build(p, n, &seven, 4, &kernel3, true);
  EXPECT_ERR(cudaGraphExecUpdate(exec, other_shape, &info), cudaErrorGraphExecUpdateFailure);
  if (info.result == cudaGraphExecUpdateSuccess) FAIL("a topology change was accepted");
  cudaGetLastError();
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  expect_all(7, 3);

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaGraphDestroy(same_shape));
  CHECK(cudaGraphDestroy(other_shape));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(p));
  PASS();
}
