// The tracer's graph test program: one direct launch, then a stream capture of three launches,
// cudaGraphInstantiate and cudaGraphLaunch ×5 on a non-blocking stream. Figures
// (expectations.py, "trace_graph"):
//
//   always:   cudaMalloc 4,096 (freed at the end); Touch(int*, int) <<<4, 64, 0, s>>> ×1 direct;
//             cudaGraphLaunch(exec, s) ×5; cudaStreamSynchronize(s) ×1.
//   flyt's runtime (graphs remoted since issue 17) and a real GPU alike: the capture,
//             instantiation and 5 graph launches succeed; the tracer counts the 3 captured
//             cudaLaunchKernel calls (Touch <<<4, 64>>> ×2, Mark(int*) <<<2, 32>>> ×1) as launches
//             (it does not follow capture): launches 1 + 3 + 5 graph launches (kernel name
//             "graph"), failures {}, syncs 1.
#include <cstdio>

#include "trace_program.h"

__global__ void Touch(int* data, int value) { data[blockIdx.x * blockDim.x + threadIdx.x] = value; }
__global__ void Mark(int* data) { data[threadIdx.x] += 1; }

int main(int argc, char** argv) {
  trace_test::ParseOptions(argc, argv);
  int* data = nullptr;
  CALL("cudaMalloc", cudaMalloc(&data, 4096));
  cudaStream_t s = nullptr;
  CALL("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  trace_test::PrintHandle("stream", s);
  Touch<<<4, 64, 0, s>>>(data, 1);
  LAUNCHED("cudaLaunchKernel");

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool captured = false;
  if (CALL_MAY_FAIL("cudaStreamBeginCapture",
                    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal)) == cudaSuccess) {
    for (int i = 0; i < 2; ++i) Touch<<<4, 64, 0, s>>>(data, 2 + i);
    Mark<<<2, 32, 0, s>>>(data);
    captured = CALL_MAY_FAIL("cudaStreamEndCapture", cudaStreamEndCapture(s, &graph)) ==
               cudaSuccess;
  }
  if (captured) {
    CALL_MAY_FAIL("cudaGraphInstantiate", cudaGraphInstantiate(&exec, graph, 0));
  }
  std::printf("GRAPH %s\n", exec != nullptr ? "instantiated" : "unsupported");
  for (int i = 0; i < 5; ++i) CALL_MAY_FAIL("cudaGraphLaunch", cudaGraphLaunch(exec, s));
  CALL("cudaStreamSynchronize", cudaStreamSynchronize(s));

  if (exec != nullptr) CALL("cudaGraphExecDestroy", cudaGraphExecDestroy(exec));
  if (graph != nullptr) CALL("cudaGraphDestroy", cudaGraphDestroy(graph));
  CALL("cudaStreamDestroy", cudaStreamDestroy(s));
  CALL("cudaFree", cudaFree(data));
  return trace_test::Pass("trace_graph");
}
