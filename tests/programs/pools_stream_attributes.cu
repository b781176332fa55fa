// Stream and device attributes a tuned program sets: an L2 access-policy window on a stream
// (kept and read back; a hint), the stream's priority, cudaCtxResetPersistingL2Cache, device
// limits, a kernel's name and handle (cudaFuncGetName, cudaGetFuncBySymbol), and
// cudaGetDriverEntryPoint: driver functions (flyt's libcuda.so.1 under flyt's runtime) that work
// at once on the runtime's memory.
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

  // The driver's own functions, from flyt's libcuda.so.1 (NVIDIA's libraries find them so), usable
  // at once: the runtime initialised the driver and its primary context is current.
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &entry, 12000, cudaEnableDefault, &status));
  if (entry == nullptr || status != cudaDriverEntryPointSuccess) FAIL("no cuMemAlloc entry point");
  void* free_entry = nullptr;
  CHECK(cudaGetDriverEntryPoint("cuMemFree", &free_entry, cudaEnableDefault, &status));
  if (free_entry == nullptr) FAIL("no cuMemFree entry point");
  using MemAlloc = int (*)(unsigned long long*, size_t);
  using MemFree = int (*)(unsigned long long);
  unsigned long long driver_ptr = 0;
  if (int rc = reinterpret_cast<MemAlloc>(entry)(&driver_ptr, 4096); rc != 0) {
    FAIL("cuMemAlloc through its entry point: CUresult %d", rc);
  }
  // Driver memory is the runtime's memory too.
  CHECK(cudaMemset(reinterpret_cast<void*>(driver_ptr), 0x5a, 4096));
  unsigned char driver_back[16];
  CHECK(cudaMemcpy(driver_back, reinterpret_cast<void*>(driver_ptr), sizeof driver_back, cudaMemcpyDeviceToHost));
  if (driver_back[0] != 0x5a || driver_back[15] != 0x5a) FAIL("driver memory through the runtime: %02x", driver_back[0]);
  if (int rc = reinterpret_cast<MemFree>(free_entry)(driver_ptr); rc != 0) {
    FAIL("cuMemFree through its entry point: CUresult %d", rc);
  }
  void* none = reinterpret_cast<void*>(1);
  CHECK(cudaGetDriverEntryPoint("cuNoSuchFunction", &none, cudaEnableDefault, &status));
  if (none != nullptr || status != cudaDriverEntryPointSymbolNotFound) FAIL("an unknown symbol");
  (void)cudaGetLastError();
  CHECK(cudaFree(x));
  CHECK(cudaStreamDestroy(stream));
  PASS();
}
