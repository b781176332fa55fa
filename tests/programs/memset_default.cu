// Memsets and cudaMemcpyDefault (unified virtual addressing): the runtime infers each copy's
// direction from its pointers (pageable host, pinned host, device); byte values of memsets on
// odd offsets and lengths; cudaPointerGetAttributes classifies each pointer.
#include <vector>

#include "program.h"

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  if (!prop.unifiedAddressing) FAIL("the device does not report unified addressing");
  const size_t bytes = 1 << 20;
  unsigned char* dev = nullptr;
  unsigned char* dev2 = nullptr;
  unsigned char* pinned = nullptr;
  CHECK(cudaMalloc(&dev, bytes));
  CHECK(cudaMalloc(&dev2, bytes));
  CHECK(cudaMallocHost(&pinned, bytes));
  std::vector<unsigned char> pageable(bytes);
  for (size_t i = 0; i < bytes; ++i) pageable[i] = static_cast<unsigned char>(i * 31 + 7);
  // Memsets: whole, then odd ranges, synchronous and on a stream.
  CHECK(cudaMemset(dev, 0xab, bytes));
  CHECK(cudaMemset(dev + 3, 0x00, 1001));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMemsetAsync(dev + bytes - 77, 0x5c, 77, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::vector<unsigned char> back(bytes);
  CHECK(cudaMemcpy(back.data(), dev, bytes, cudaMemcpyDefault));
  for (size_t i = 0; i < bytes; ++i) {
    unsigned char want = 0xab;
    if (i >= 3 && i < 1004) want = 0x00;
    if (i >= bytes - 77) want = 0x5c;
    if (back[i] != want) FAIL("byte %zu = %#x, expected %#x", i, back[i], want);
  }
  // cudaMemcpyDefault in every direction: pageable -> device -> device -> pinned -> pageable.
  CHECK(cudaMemcpy(dev, pageable.data(), bytes, cudaMemcpyDefault));
  CHECK(cudaMemcpy(dev2, dev, bytes, cudaMemcpyDefault));
  std::memset(pinned, 0, bytes);
  CHECK(cudaMemcpyAsync(pinned, dev2, bytes, cudaMemcpyDefault, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (std::memcmp(pinned, pageable.data(), bytes) != 0) FAIL("pinned copy differs");
  std::vector<unsigned char> host_copy(bytes, 0);
  CHECK(cudaMemcpy(host_copy.data(), pinned, bytes, cudaMemcpyDefault));  // host to host
  if (host_copy != pageable) FAIL("host-to-host copy differs");
  // Interior pointers, as a program slicing its buffers would pass them.
  CHECK(cudaMemcpy(dev2 + 4096, dev + 8192, 4096, cudaMemcpyDefault));
  CHECK(cudaMemcpy(back.data(), dev2 + 4096, 4096, cudaMemcpyDefault));
  if (std::memcmp(back.data(), pageable.data() + 8192, 4096) != 0) FAIL("interior copy differs");
  cudaPointerAttributes attr{};
  CHECK(cudaPointerGetAttributes(&attr, dev + 100));
  if (attr.type != cudaMemoryTypeDevice || attr.devicePointer != dev + 100) {
    FAIL("device pointer classified as type %d", attr.type);
  }
  CHECK(cudaPointerGetAttributes(&attr, pinned));
  if (attr.type != cudaMemoryTypeHost || attr.hostPointer != pinned) FAIL("pinned classified as %d", attr.type);
  CHECK(cudaPointerGetAttributes(&attr, pageable.data()));
  if (attr.type != cudaMemoryTypeUnregistered) FAIL("pageable classified as %d", attr.type);
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(dev));
  CHECK(cudaFree(dev2));
  CHECK(cudaFreeHost(pinned));
  PASS();
}
