// Managed memory with explicit copies, memset and pointer attributes: cudaMemcpy between managed,
// device and host memory sees the host's latest writes, and the host sees what a copy wrote.
#include <cstring>
#include <vector>

#include "program.h"

int main() {
  const size_t n = 3 * 4096 + 100;
  unsigned char* m;
  unsigned char* d;
  CHECK(cudaMallocManaged(&m, n));
  CHECK(cudaMalloc(&d, n));
  for (size_t i = 0; i < n; ++i) m[i] = static_cast<unsigned char>(i * 7);
  // Managed -> device (pushes the host's writes first) -> host.
  CHECK(cudaMemcpy(d, m, n, cudaMemcpyDefault));
  std::vector<unsigned char> h(n);
  CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) {
    if (h[i] != static_cast<unsigned char>(i * 7)) FAIL("device copy byte %zu", i);
  }
  // Device memset of part of the managed range, then the host reads it.
  CHECK(cudaMemset(m + 4000, 0xAB, 300));
  CHECK(cudaDeviceSynchronize());
  for (size_t i = 0; i < n; ++i) {
    unsigned char want = (i >= 4000 && i < 4300) ? 0xAB : static_cast<unsigned char>(i * 7);
    if (m[i] != want) FAIL("after memset byte %zu is %d, want %d", i, m[i], want);
  }
  // Host -> managed with an explicit host-to-device copy, read back on the host.
  std::memset(h.data(), 0x5C, n);
  CHECK(cudaMemcpy(m, h.data(), n, cudaMemcpyHostToDevice));
  for (size_t i = 0; i < n; i += 511) {
    if (m[i] != 0x5C) FAIL("after copy byte %zu", i);
  }
  // A managed range as the host side of a device-to-host copy.
  CHECK(cudaMemset(d, 0x11, n));
  CHECK(cudaMemcpy(m, d, 100, cudaMemcpyDeviceToHost));
  if (m[0] != 0x11 || m[99] != 0x11 || m[100] != 0x5C) FAIL("device-to-host into managed");
  cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, m + 10));
  if (attr.type != cudaMemoryTypeManaged || attr.devicePointer != m + 10) FAIL("attributes");
  int concurrent = -1, managed = -1;
  CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
  CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
  if (concurrent != 0 || managed != 1) FAIL("concurrent %d managed %d", concurrent, managed);
  EXPECT_ERR(cudaMallocManaged(&m, 0), cudaErrorInvalidValue);
  unsigned char* bad;
  EXPECT_ERR(cudaMallocManaged(&bad, 64, 7), cudaErrorInvalidValue);
  CHECK(cudaFree(d));
  PASS();
}
