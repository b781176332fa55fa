// What stream capture forbids, with the errors CUDA returns: capturing the legacy stream,
// synchronising a capturing stream (which invalidates the capture), cudaMalloc during a global
// capture (allowed in relaxed mode), and the thread's capture mode exchange.
#include "program.h"

__global__ void touch(int* p) { p[threadIdx.x] = threadIdx.x; }

int main() {
  int* d = nullptr;
  CHECK(cudaMalloc(&d, 1024));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;

  // The legacy default stream cannot be captured.
  EXPECT_ERR(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal),
             cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();

  // Synchronising the capturing stream is refused and invalidates the capture.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  touch<<<1, 32, 0, s>>>(d);
  EXPECT_ERR(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus status;
  CHECK(cudaStreamIsCapturing(s, &status));
  if (status != cudaStreamCaptureStatusInvalidated) FAIL("capture not invalidated (%d)", status);
  EXPECT_ERR(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  if (graph != nullptr) FAIL("an invalidated capture returned a graph");
  cudaGetLastError();

  // cudaMalloc is forbidden during a global capture...
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  int* extra = nullptr;
  EXPECT_ERR(cudaMalloc(&extra, 256), cudaErrorStreamCaptureUnsupported);
  EXPECT_ERR(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();

  // ...but a thread in relaxed mode may call it.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  if (mode != cudaStreamCaptureModeGlobal) FAIL("the thread's mode was %d", mode);
  CHECK(cudaMalloc(&extra, 256));
  CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  if (mode != cudaStreamCaptureModeRelaxed) FAIL("the exchange did not return relaxed");
  touch<<<1, 32, 0, s>>>(d);
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(extra));

  // A relaxed capture does not forbid cudaMalloc at all.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CHECK(cudaMalloc(&extra, 256));
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaFree(extra));

  // Capture info: the sequence's id and the nodes the next captured call will depend on.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  touch<<<1, 32, 0, s>>>(d);
  unsigned long long id = 0;
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  CHECK(cudaStreamGetCaptureInfo(s, &status, &id, nullptr, &deps, nullptr, &ndeps));
  if (status != cudaStreamCaptureStatusActive || id == 0 || ndeps != 1 || deps == nullptr) {
    FAIL("capture info: status %d id %llu deps %zu", status, id, ndeps);
  }
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(deps[0], &type));
  if (type != cudaGraphNodeTypeKernel) FAIL("the dependency is not the kernel");
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphDestroy(graph));

  // Invalid arguments.
  mode = static_cast<cudaStreamCaptureMode>(42);
  EXPECT_ERR(cudaThreadExchangeStreamCaptureMode(&mode), cudaErrorInvalidValue);

  // The device is fine afterwards.
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  PASS();
}
