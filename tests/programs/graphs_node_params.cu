// Graph nodes after they are made: the getters and setters of memset, memcpy, host and event nodes,
// their cudaGraphExec*NodeSetParams forms (a launch after each shows the new parameters took),
// the edges (all edges, dependent nodes, removal), node destruction, cudaGraphNodeFindInClone,
// cudaGraphExecGetFlags, cudaGraphUpload and cudaGraphDebugDotPrint.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "program.h"

static int host_a = 0, host_b = 0;
static void CALLBACK_A(void* p) { ++*static_cast<int*>(p); }
static void CALLBACK_B(void* p) { *static_cast<int*>(p) += 10; }

static void Expect(const unsigned char* d, size_t n, unsigned char value, const char* what) {
  std::vector<unsigned char> h(n);
  CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    if (h[i] != value) FAIL("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, h[i], value);
  }
}

int main() {
  constexpr size_t kN = 4096;
  unsigned char *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK(cudaMalloc(&a, kN));
  CHECK(cudaMalloc(&b, kN));
  CHECK(cudaMalloc(&c, kN));
  std::vector<unsigned char> host(kN);
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreate(&s));
  cudaEvent_t e1 = nullptr, e2 = nullptr;
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventCreate(&e2));

  cudaGraph_t g = nullptr;
  CHECK(cudaGraphCreate(&g, 0));
  cudaMemsetParams ms{};
  ms.dst = a;
  ms.value = 0x11;
  ms.elementSize = 1;
  ms.width = kN;
  ms.height = 1;
  cudaGraphNode_t set = nullptr, copy = nullptr, hostn = nullptr, rec = nullptr, extra = nullptr;
  CHECK(cudaGraphAddMemsetNode(&set, g, nullptr, 0, &ms));
  CHECK(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, b, a, kN, cudaMemcpyDeviceToDevice));
  cudaHostNodeParams hp{CALLBACK_A, &host_a};
  CHECK(cudaGraphAddHostNode(&hostn, g, &copy, 1, &hp));
  CHECK(cudaGraphAddEventRecordNode(&rec, g, &copy, 1, e1));
  CHECK(cudaGraphAddEmptyNode(&extra, g, &rec, 1));

  // Getters give back what was set.
  cudaMemsetParams ms_got{};
  CHECK(cudaGraphMemsetNodeGetParams(set, &ms_got));
  if (ms_got.dst != a || ms_got.value != 0x11 || ms_got.width != kN) FAIL("memset params");
  cudaHostNodeParams hp_got{};
  CHECK(cudaGraphHostNodeGetParams(hostn, &hp_got));
  if (hp_got.fn != CALLBACK_A || hp_got.userData != &host_a) FAIL("host params");
  cudaMemcpy3DParms cp{};
  CHECK(cudaGraphMemcpyNodeGetParams(copy, &cp));
  if (cp.dstPtr.ptr != b || cp.srcPtr.ptr != a || cp.extent.width != kN) FAIL("memcpy params");
  cudaEvent_t got = nullptr;
  CHECK(cudaGraphEventRecordNodeGetEvent(rec, &got));
  if (got != e1) FAIL("event of the record node");
  EXPECT_ERR(cudaGraphMemsetNodeGetParams(copy, &ms_got), cudaErrorInvalidValue);  // wrong type
  cudaGetLastError();

  // Edges: set->copy, copy->host, copy->rec, rec->extra.
  size_t edges = 0;
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
  if (edges != 4) FAIL("%zu edges, expected 4", edges);
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  CHECK(cudaGraphGetEdges(g, from.data(), to.data(), nullptr, &edges));
  size_t dependents = 0;
  CHECK(cudaGraphNodeGetDependentNodes(copy, nullptr, nullptr, &dependents));
  if (dependents != 2) FAIL("%zu dependents of the copy, expected 2", dependents);
  CHECK(cudaGraphRemoveDependencies(g, &rec, &extra, nullptr, 1));
  EXPECT_ERR(cudaGraphRemoveDependencies(g, &rec, &extra, nullptr, 1), cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaGraphDestroyNode(extra));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
  if (nodes != 4) FAIL("%zu nodes after destroying one, expected 4", nodes);

  // Setters on the graph, then an exec of it.
  ms.value = 0x22;
  CHECK(cudaGraphMemsetNodeSetParams(set, &ms));
  CHECK(cudaGraphEventRecordNodeSetEvent(rec, e2));
  CHECK(cudaGraphEventRecordNodeGetEvent(rec, &got));
  if (got != e2) FAIL("event after SetEvent");
  cudaGraph_t clone = nullptr;
  CHECK(cudaGraphClone(&clone, g));
  cudaGraphNode_t in_clone = nullptr;
  CHECK(cudaGraphNodeFindInClone(&in_clone, set, clone));
  CHECK(cudaGraphMemsetNodeGetParams(in_clone, &ms_got));
  if (ms_got.value != 0x22) FAIL("the clone's memset node");
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiateWithFlags(&exec, g, cudaGraphInstantiateFlagUpload));
  unsigned long long flags = 0;
  CHECK(cudaGraphExecGetFlags(exec, &flags));
  if (flags != cudaGraphInstantiateFlagUpload) FAIL("exec flags %llu", flags);
  CHECK(cudaGraphUpload(exec, s));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  Expect(b, kN, 0x22, "first launch");
  if (host_a != 1) FAIL("host node ran %d times", host_a);

  // The exec's own nodes change; the graph's stay.
  ms.value = 0x33;
  CHECK(cudaGraphExecMemsetNodeSetParams(exec, set, &ms));
  CHECK(cudaGraphExecMemcpyNodeSetParams1D(exec, copy, c, a, kN, cudaMemcpyDeviceToDevice));
  cudaHostNodeParams hp_b{CALLBACK_B, &host_b};
  CHECK(cudaGraphExecHostNodeSetParams(exec, hostn, &hp_b));
  CHECK(cudaGraphExecEventRecordNodeSetEvent(exec, rec, e1));
  EXPECT_ERR(cudaGraphExecMemcpyNodeSetParams1D(exec, copy, host.data(), a, kN,
                                                cudaMemcpyDeviceToHost),
             cudaErrorInvalidValue);  // a copy cannot move to the host side in an exec
  cudaGetLastError();
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  Expect(c, kN, 0x33, "after the exec's copy moved to c");
  Expect(b, kN, 0x22, "b untouched by the second launch");
  if (host_a != 1 || host_b != 10) FAIL("host nodes: a %d, b %d", host_a, host_b);
  CHECK(cudaEventSynchronize(e1));
  CHECK(cudaGraphMemsetNodeGetParams(set, &ms_got));
  if (ms_got.value != 0x22) FAIL("the graph's memset node changed with the exec's");

  // DOT output.
  char path[] = "/tmp/flyt-graph-dot-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) FAIL("mkstemp");
  close(fd);
  CHECK(cudaGraphDebugDotPrint(g, path, 0));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  if (text.str().find("digraph") == std::string::npos ||
      text.str().find("memset") == std::string::npos || text.str().find("->") == std::string::npos) {
    FAIL("DOT output: %s", text.str().c_str());
  }
  EXPECT_ERR(cudaGraphDebugDotPrint(g, "/nonexistent-dir/x.dot", 0), cudaErrorOperatingSystem);
  cudaGetLastError();

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(clone));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaEventDestroy(e2));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  PASS();
}
