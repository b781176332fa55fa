// An explicitly built graph: memset, kernel, device-to-device copy, host, empty, event and
// child-graph nodes joined by dependencies, instantiated and launched.
#include <vector>

#include "program.h"

__global__ void square(float* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * data[i];
}

static int host_calls = 0;
static void CountHost(void* arg) { ++*static_cast<int*>(arg); }

int main() {
  const int n = 4096;
  float *x = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&y, n * sizeof(float)));
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 100);
  CHECK(cudaMemcpy(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaEvent_t done;
  CHECK(cudaEventCreate(&done));

  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  // y = 0 (memset node)
  cudaMemsetParams ms{};
  ms.dst = y;
  ms.value = 0;
  ms.elementSize = 4;
  ms.width = n;
  ms.height = 1;
  cudaGraphNode_t memset_node, kernel_node, copy_node, host_node, empty_node, record_node;
  CHECK(cudaGraphAddMemsetNode(&memset_node, graph, nullptr, 0, &ms));
  // x = x * x (kernel node), independent of the memset
  int count = n;
  void* args[] = {&x, &count};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(square);
  kp.gridDim = dim3(n / 128);
  kp.blockDim = dim3(128);
  kp.kernelParams = args;
  CHECK(cudaGraphAddKernelNode(&kernel_node, graph, nullptr, 0, &kp));
  // join both, then y = x
  cudaGraphNode_t both[] = {memset_node, kernel_node};
  CHECK(cudaGraphAddEmptyNode(&empty_node, graph, both, 2));
  CHECK(cudaGraphAddMemcpyNode1D(&copy_node, graph, &empty_node, 1, y, x, n * sizeof(float),
                                 cudaMemcpyDeviceToDevice));
  cudaHostNodeParams hp{};
  hp.fn = CountHost;
  hp.userData = &host_calls;
  CHECK(cudaGraphAddHostNode(&host_node, graph, &copy_node, 1, &hp));
  CHECK(cudaGraphAddEventRecordNode(&record_node, graph, &host_node, 1, done));

  // A child graph: memset of the first 16 bytes of x to 0x40 (2.0f's high byte pattern).
  cudaGraph_t child;
  CHECK(cudaGraphCreate(&child, 0));
  cudaMemsetParams cms{};
  cms.dst = x;
  cms.value = 0x40;
  cms.elementSize = 1;
  cms.width = 16;
  cms.height = 1;
  cudaGraphNode_t child_memset, child_node;
  CHECK(cudaGraphAddMemsetNode(&child_memset, child, nullptr, 0, &cms));
  CHECK(cudaGraphAddChildGraphNode(&child_node, graph, &record_node, 1, child));

  size_t nodes = 0, roots = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
  if (nodes != 7 || roots != 2) FAIL("%zu nodes, %zu roots; expected 7 and 2", nodes, roots);
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(child_node, &type));
  if (type != cudaGraphNodeTypeGraph) FAIL("child node type %d", type);
  CHECK(cudaGraphNodeGetType(host_node, &type));
  if (type != cudaGraphNodeTypeHost) FAIL("host node type %d", type);
  size_t deps = 0;
  CHECK(cudaGraphNodeGetDependencies(empty_node, nullptr, nullptr, &deps));
  if (deps != 2) FAIL("empty node has %zu dependencies, expected 2", deps);
  // Bad input is refused as CUDA refuses it.
  ms.elementSize = 3;
  cudaGraphNode_t bad;
  EXPECT_ERR(cudaGraphAddMemsetNode(&bad, graph, nullptr, 0, &ms), cudaErrorInvalidValue);
  EXPECT_ERR(cudaGraphAddEmptyNode(&bad, graph, &child_memset, 1), cudaErrorInvalidValue);

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (host_calls != 1) FAIL("host node ran %d times", host_calls);
  CHECK(cudaEventSynchronize(done));

  std::vector<float> hy(n);
  std::vector<unsigned char> hx(16);
  CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hx.data(), x, 16, cudaMemcpyDeviceToHost));
  for (unsigned char c : hx) {
    if (c != 0x40) FAIL("child graph's memset missing");
  }
  for (int i = 0; i < n; ++i) {
    float expect = KERNELS_RUN ? host[i] * host[i] : host[i];
    if (hy[i] != expect) FAIL("y[%d] = %f, expected %f", i, hy[i], expect);
  }
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (host_calls != 2) FAIL("host node ran %d times after two launches", host_calls);

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(child));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  PASS();
}
