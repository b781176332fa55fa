// Host work inside a captured graph: cudaLaunchHostFunc and cudaStreamAddCallback captured with
// host-to-device and device-to-host copies of pinned memory; each launch runs them in order.
#include <vector>

#include "program.h"

__global__ void inc(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

struct Log {
  int calls = 0;
  int last_seen = -1;
  int* pinned_out = nullptr;
};

static void HostFn(void* arg) {
  auto* log = static_cast<Log*>(arg);
  ++log->calls;
  log->last_seen = log->pinned_out[0];
}
static void CUDART_CB Callback(cudaStream_t, cudaError_t status, void* arg) {
  if (status == cudaSuccess) ++static_cast<Log*>(arg)->calls;
}

int main() {
  const int n = 256;
  int *in, *out, *d;
  CHECK(cudaMallocHost(&in, n * sizeof(int)));
  CHECK(cudaMallocHost(&out, n * sizeof(int)));
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  Log log;
  log.pinned_out = out;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(d, in, n * sizeof(int), cudaMemcpyHostToDevice, s));
  inc<<<1, n, 0, s>>>(d, n);
  CHECK(cudaMemcpyAsync(out, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, HostFn, &log));
  CHECK(cudaStreamAddCallback(s, Callback, &log, 0));
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s, &graph));
  if (log.calls != 0) FAIL("a host function ran during capture");

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) in[i] = round * 100 + i;
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    if (log.calls != 2 * (round + 1)) FAIL("host nodes ran %d times", log.calls);
    const int expect0 = KERNELS_RUN ? round * 100 + 1 : round * 100;
    if (log.last_seen != expect0) FAIL("host node saw %d, expected %d", log.last_seen, expect0);
    for (int i = 0; i < n; ++i) {
      const int expect = KERNELS_RUN ? round * 100 + i + 1 : round * 100 + i;
      if (out[i] != expect) FAIL("out[%d] = %d, expected %d", i, out[i], expect);
    }
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFreeHost(in));
  CHECK(cudaFreeHost(out));
  PASS();
}
