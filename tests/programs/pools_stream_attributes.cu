// Stream and device attributes a tuned program sets: an L2 access-policy window on a stream
// (kept and read back; a hint), the stream's priority, cudaCtxResetPersistingL2Cache, device
// limits, a kernel's name and handle (cudaFuncGetName, cudaGetFuncBySymbol), and
// cudaGetDriverEntryPoint, which a remote runtime answers with cudaErrorNotSupported, a null
// pointer and cudaDriverEntryPointSymbolNotFound (and the program goes on).
#include "program.h"

#include <cstring>

__global__ void Touch(int* x) { x[threadIdx.x] += 1; }

int main() {
  int least = 0, greatest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest));
  int* x = nullptr;
  CHECK(cudaMalloc(&x, 1 << 20));

  cudaStreamAttrValue window{};
  window.accessPolicyWindow.base_ptr = x;
  window.accessPolicyWindow.num_bytes = 1 << 20;
  window.accessPolicyWindow.hitRatio = 0.6f;
  window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &window));
  cudaStreamAttrValue back{};
  CHECK(cudaStreamGetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &back));
  if (back.accessPolicyWindow.base_ptr != x || back.accessPolicyWindow.num_bytes != (1 << 20) ||
      back.accessPolicyWindow.hitProp != cudaAccessPropertyPersisting) {
    FAIL("the access-policy window did not read back");
  }
  cudaStreamAttrValue priority{};
  CHECK(cudaStreamGetAttribute(stream, cudaStreamAttributePriority, &priority));
  if (priority.priority != greatest) FAIL("priority %d, made with %d", priority.priority, greatest);
  cudaStreamAttrValue policy{};
  CHECK(cudaStreamGetAttribute(stream, cudaStreamAttributeSynchronizationPolicy, &policy));
  EXPECT_ERR(cudaStreamSetAttribute(stream, static_cast<cudaStreamAttrID>(1000), &window),
             cudaErrorInvalidValue);
  (void)cudaGetLastError();

  Touch<<<1, 32, 0, stream>>>(x);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(stream));
  window.accessPolicyWindow.num_bytes = 0;  // reset the window, then the persisting lines
  CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &window));
  CHECK(cudaCtxResetPersistingL2Cache());

  size_t stack = 0;
  CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
  CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  if (stack < 4096) FAIL("stack limit %zu", stack);

  const char* name = nullptr;
  CHECK(cudaFuncGetName(&name, reinterpret_cast<const void*>(Touch)));
  if (name == nullptr || std::strstr(name, "Touch") == nullptr) FAIL("kernel name %s", name);
  cudaFunction_t function = nullptr;
  CHECK(cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(Touch)));
  if (function == nullptr) FAIL("no function handle");
  int not_a_kernel = 0;
  EXPECT_ERR(cudaGetFuncBySymbol(&function, &not_a_kernel), cudaErrorInvalidDeviceFunction);
  (void)cudaGetLastError();

  void* entry = reinterpret_cast<void*>(1);
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
  cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemAlloc", &entry, 12000,
                                                     cudaEnableDefault, &status);
  if (err == cudaSuccess) {
    if (entry == nullptr) FAIL("success with a null entry point");  // a local runtime
  } else if (err != cudaErrorNotSupported || entry != nullptr ||
             status != cudaDriverEntryPointSymbolNotFound) {
    FAIL("cudaGetDriverEntryPointByVersion: %s", cudaGetErrorName(err));
  }
  (void)cudaGetLastError();
  CHECK(cudaFree(x));
  CHECK(cudaStreamDestroy(stream));
  PASS();
}
