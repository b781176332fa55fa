// Interprocess memory and events: a child process exports a device allocation and an event; the
// parent opens both, reads the child's bytes, writes its own (a memset, and a kernel where kernels
// run), and the child reads them back through its own pointer. The process forks before any CUDA
// call, as CUDA programs that share memory do, and each process has its own connection to the
// GPU server. Also: the refusals CUDA documents (flags, cudaFree of opened memory, an event made
// without cudaEventInterprocess, managed memory, a forged handle), and a second open of the same
// handle giving the same pointer, closed twice.
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "program.h"

constexpr size_t kBytes = 1 << 20;

__global__ void AddOne(unsigned char* p, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] += 1;
}

static void WriteAll(int fd, const void* p, size_t n) {
  if (write(fd, p, n) != static_cast<ssize_t>(n)) FAIL("pipe write");
}
static void ReadAll(int fd, void* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, static_cast<char*>(p) + got, n - got);
    if (r <= 0) FAIL("pipe read");
    got += static_cast<size_t>(r);
  }
}

static int Child(int to_parent, int from_parent) {
  unsigned char* d = nullptr;
  CHECK(cudaMalloc(&d, kBytes));
  std::vector<unsigned char> h(kBytes);
  for (size_t i = 0; i < kBytes; ++i) h[i] = static_cast<unsigned char>(i * 7 + 3);
  CHECK(cudaMemcpy(d, h.data(), kBytes, cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t mem{};
  CHECK(cudaIpcGetMemHandle(&mem, d + 4096));  // any pointer inside names the whole allocation
  cudaEvent_t plain = nullptr, shared = nullptr;
  CHECK(cudaEventCreate(&plain));
  cudaIpcEventHandle_t bad_event{};
  EXPECT_ERR(cudaIpcGetEventHandle(&bad_event, plain), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  CHECK(cudaEventCreateWithFlags(&shared, cudaEventInterprocess | cudaEventDisableTiming));
  CHECK(cudaEventRecord(shared, 0));
  cudaIpcEventHandle_t ev{};
  CHECK(cudaIpcGetEventHandle(&ev, shared));
  void* managed = nullptr;
  CHECK(cudaMallocManaged(&managed, 4096));
  cudaIpcMemHandle_t bad_mem{};
  EXPECT_ERR(cudaIpcGetMemHandle(&bad_mem, managed), cudaErrorInvalidValue);
  cudaGetLastError();
  WriteAll(to_parent, &mem, sizeof mem);
  WriteAll(to_parent, &ev, sizeof ev);
  char done = 0;
  ReadAll(from_parent, &done, 1);  // the parent has written
  CHECK(cudaMemcpy(h.data(), d, kBytes, cudaMemcpyDeviceToHost));
  const int add = KERNELS_RUN ? 1 : 0;
  for (size_t i = 0; i < kBytes; ++i) {
    unsigned char want = i < 65536 ? static_cast<unsigned char>(0x5A + add)
                                   : static_cast<unsigned char>(i * 7 + 3 + add);
    if (h[i] != want) FAIL("child: byte %zu is %d, expected %d", i, h[i], want);
  }
  CHECK(cudaFree(managed));
  CHECK(cudaEventDestroy(shared));
  CHECK(cudaEventDestroy(plain));
  CHECK(cudaFree(d));
  return 0;
}

int main() {
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) FAIL("pipe");
  pid_t pid = fork();
  if (pid < 0) FAIL("fork");
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    std::exit(Child(up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  cudaIpcMemHandle_t mem{};
  cudaIpcEventHandle_t ev{};
  ReadAll(up[0], &mem, sizeof mem);
  ReadAll(up[0], &ev, sizeof ev);

  unsigned char* p = nullptr;
  EXPECT_ERR(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&p), mem, 0x2), cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&p), mem, cudaIpcMemLazyEnablePeerAccess));
  if (p == nullptr) FAIL("opened a null pointer");
  unsigned char* again = nullptr;
  CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&again), mem,
                             cudaIpcMemLazyEnablePeerAccess));
  if (again != p) {
    FAIL("a second open gave %p, not %p", static_cast<void*>(again), static_cast<void*>(p));
  }
  cudaPointerAttributes attrs{};
  CHECK(cudaPointerGetAttributes(&attrs, p));
  if (attrs.type != cudaMemoryTypeDevice) FAIL("opened memory is not device memory");
  cudaEvent_t e = nullptr;
  CHECK(cudaIpcOpenEventHandle(&e, ev));
  CHECK(cudaEventSynchronize(e));
  CHECK(cudaStreamWaitEvent(0, e, 0));

  std::vector<unsigned char> h(kBytes);
  CHECK(cudaMemcpy(h.data(), p, kBytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < kBytes; ++i) {
    if (h[i] != static_cast<unsigned char>(i * 7 + 3)) FAIL("parent: byte %zu differs", i);
  }
  CHECK(cudaMemset(p, 0x5A, 65536));
  AddOne<<<(kBytes + 255) / 256, 256>>>(p, kBytes);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  EXPECT_ERR(cudaFree(p), cudaErrorInvalidValue);
  cudaGetLastError();

  cudaIpcMemHandle_t forged{};
  std::memset(forged.reserved, 0x41, sizeof forged.reserved);
  void* nothing = nullptr;
  // The driver names its own refusal; the simulated device says cudaErrorInvalidValue.
  cudaError_t forged_err = cudaIpcOpenMemHandle(&nothing, forged, cudaIpcMemLazyEnablePeerAccess);
  if (forged_err == cudaSuccess) FAIL("a forged handle opened");
  if (!KERNELS_RUN && forged_err != cudaErrorInvalidValue) {
    FAIL("a forged handle: %s", cudaGetErrorName(forged_err));
  }
  std::printf("forged handle: %s\n", cudaGetErrorName(forged_err));
  cudaGetLastError();

  char done = 1;
  WriteAll(down[1], &done, 1);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) FAIL("waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAIL("the exporting child failed");
  // The exporter is gone; what is open here stays usable until closed.
  CHECK(cudaMemcpy(h.data(), p, 16, cudaMemcpyDeviceToHost));
  CHECK(cudaIpcCloseMemHandle(again));
  CHECK(cudaMemcpy(h.data(), p, 16, cudaMemcpyDeviceToHost));  // still open once
  CHECK(cudaIpcCloseMemHandle(p));
  EXPECT_ERR(cudaIpcCloseMemHandle(p), cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaEventDestroy(e));
  PASS();
}
