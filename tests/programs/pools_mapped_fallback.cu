// Zero-copy (mapped) host memory, as a well-written program asks for it: it reads
// canMapHostMemory first and takes its fallback (pinned memory and explicit copies) when the
// device says 0, which flyt's does (the host is another machine than the GPU). The mapped calls
// themselves are refused with cudaErrorNotSupported.
#include "program.h"

#include <vector>

__global__ void AddOne(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

int main() {
  int can_map = -1;
  CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, 0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  if (can_map != 0 || prop.canMapHostMemory != 0) {
    FAIL("canMapHostMemory reads %d / %d, expected 0", can_map, prop.canMapHostMemory);
  }
  int* mapped = nullptr;
  EXPECT_ERR(cudaHostAlloc(reinterpret_cast<void**>(&mapped), 4096, cudaHostAllocMapped),
             cudaErrorNotSupported);
  if (mapped != nullptr) FAIL("a refused cudaHostAlloc returned a pointer");
  std::vector<int> buffer(1024);
  EXPECT_ERR(cudaHostRegister(buffer.data(), buffer.size() * sizeof(int), cudaHostRegisterMapped),
             cudaErrorNotSupported);
  void* device_view = reinterpret_cast<void*>(1);
  EXPECT_ERR(cudaHostGetDevicePointer(&device_view, buffer.data(), 0), cudaErrorNotSupported);
  if (device_view != nullptr) FAIL("cudaHostGetDevicePointer left a pointer");
  // Not sticky: the program goes on with its fallback.
  (void)cudaGetLastError();

  constexpr int n = 1 << 16;
  int* host = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), n * sizeof(int), cudaHostAllocPortable));
  for (int i = 0; i < n; ++i) host[i] = i;
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, n * sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMemcpyAsync(dev, host, n * sizeof(int), cudaMemcpyHostToDevice, stream));
  AddOne<<<n / 256, 256, 0, stream>>>(dev, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(host, dev, n * sizeof(int), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  int add = KERNELS_RUN ? 1 : 0;
  for (int i = 0; i < n; i += 97) {
    if (host[i] != i + add) FAIL("element %d is %d", i, host[i]);
  }
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(host));
  PASS();
}
