// Async copies into one pinned buffer at different offsets from several streams, then an event
// synchronize (the pattern of NVIDIA's simpleMultiCopy and of many inference servers). Each stream
// fills its own device chunk, copies it back into its slice of one pinned host buffer, and records
// an event; the host waits on the events alone, then checks every slice.
#include "program.h"

__global__ void Fill(int* data, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = base + i;
}

int main() {
  const int kStreams = 4;
  const int chunk = 64 * 1024;  // ints per stream
  const size_t chunk_bytes = chunk * sizeof(int);
  int* pinned = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned), kStreams * chunk_bytes,
                      cudaHostAllocDefault));
  std::memset(pinned, 0xff, kStreams * chunk_bytes);
  int* dev[kStreams];
  cudaStream_t streams[kStreams];
  cudaEvent_t copied[kStreams];
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaMalloc(&dev[s], chunk_bytes));
    CHECK(cudaStreamCreate(&streams[s]));
    CHECK(cudaEventCreateWithFlags(&copied[s], cudaEventDisableTiming));
  }
  for (int s = 0; s < kStreams; ++s) {
    // A known pattern through the copy path too, so the sim device can check bytes.
    CHECK(cudaMemsetAsync(dev[s], s + 1, chunk_bytes, streams[s]));
    // On a GPU the kernel overwrites the pattern; the sim device records it and writes nothing.
    Fill<<<(chunk + 255) / 256, 256, 0, streams[s]>>>(dev[s], chunk, s * chunk);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(pinned + s * chunk, dev[s], chunk_bytes, cudaMemcpyDeviceToHost,
                          streams[s]));
    CHECK(cudaEventRecord(copied[s], streams[s]));
  }
  for (int s = 0; s < kStreams; ++s) CHECK(cudaEventSynchronize(copied[s]));
  for (int s = 0; s < kStreams; ++s) {
    const int* slice = pinned + s * chunk;
    for (int i = 0; i < chunk; ++i) {
      int expected;
      if (KERNELS_RUN) {
        expected = s * chunk + i;
      } else {
        std::memset(&expected, s + 1, sizeof(expected));
      }
      if (slice[i] != expected) FAIL("stream %d slice[%d] = %#x, expected %#x", s, i, slice[i], expected);
    }
  }
  // A second round reusing the same pinned buffer and streams, waited on with the streams.
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaMemsetAsync(dev[s], 0x10 + s, chunk_bytes, streams[s]));
    CHECK(cudaMemcpyAsync(pinned + s * chunk, dev[s], chunk_bytes, cudaMemcpyDeviceToHost,
                          streams[s]));
  }
  for (int s = 0; s < kStreams; ++s) CHECK(cudaStreamSynchronize(streams[s]));
  for (int s = 0; s < kStreams; ++s) {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(pinned + s * chunk);
    for (size_t i = 0; i < chunk_bytes; ++i) {
      if (bytes[i] != 0x10 + s) FAIL("round 2 stream %d byte %zu = %#x", s, i, bytes[i]);
    }
  }
  // A third pattern: one device buffer and one pinned buffer, several streams each copying its
  // slice back at its offset, several rounds, the host waiting on the last round's events.
  const int kBig = 8;
  const size_t slice_bytes = 8 << 20;
  unsigned char* big_host = nullptr;
  unsigned char* big_dev = nullptr;
  CHECK(cudaMallocHost(&big_host, kBig * slice_bytes));
  CHECK(cudaMalloc(&big_dev, kBig * slice_bytes));
  cudaStream_t big_streams[kBig];
  cudaEvent_t big_done[kBig];
  for (int s = 0; s < kBig; ++s) {
    CHECK(cudaStreamCreateWithFlags(&big_streams[s], cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&big_done[s]));
  }
  for (int round = 0; round < 3; ++round) {
    for (int s = 0; s < kBig; ++s) {
      CHECK(cudaMemsetAsync(big_dev + s * slice_bytes, round * 16 + s, slice_bytes, big_streams[s]));
      CHECK(cudaMemcpyAsync(big_host + s * slice_bytes, big_dev + s * slice_bytes, slice_bytes,
                            cudaMemcpyDeviceToHost, big_streams[s]));
      CHECK(cudaEventRecord(big_done[s], big_streams[s]));
    }
    for (int s = 0; s < kBig; ++s) CHECK(cudaEventSynchronize(big_done[s]));
    for (int s = 0; s < kBig; ++s) {
      const unsigned char want = static_cast<unsigned char>(round * 16 + s);
      for (size_t i = 0; i < slice_bytes; i += 4093) {
        if (big_host[s * slice_bytes + i] != want) {
          FAIL("round %d stream %d byte %zu = %#x, expected %#x", round, s, i,
               big_host[s * slice_bytes + i], want);
        }
      }
    }
  }
  for (int s = 0; s < kBig; ++s) {
    CHECK(cudaEventDestroy(big_done[s]));
    CHECK(cudaStreamDestroy(big_streams[s]));
  }
  CHECK(cudaFree(big_dev));
  CHECK(cudaFreeHost(big_host));
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaEventDestroy(copied[s]));
    CHECK(cudaStreamDestroy(streams[s]));
    CHECK(cudaFree(dev[s]));
  }
  CHECK(cudaFreeHost(pinned));
  // The same with pageable memory pinned by cudaHostRegister (an interior offset of it each).
  const size_t reg_bytes = kStreams * chunk_bytes + 4096;
  void* raw = std::malloc(reg_bytes);
  if (raw == nullptr) FAIL("malloc");
  CHECK(cudaHostRegister(raw, reg_bytes, cudaHostRegisterDefault));
  unsigned char* reg = static_cast<unsigned char*>(raw) + 64;
  int* shared_dev = nullptr;
  CHECK(cudaMalloc(&shared_dev, kStreams * chunk_bytes));
  cudaStream_t reg_streams[kStreams];
  cudaEvent_t reg_done[kStreams];
  for (int s = 0; s < kStreams; ++s) {
    CHECK(cudaStreamCreate(&reg_streams[s]));
    CHECK(cudaEventCreate(&reg_done[s]));
    CHECK(cudaMemsetAsync(shared_dev + s * chunk, 0x40 + s, chunk_bytes, reg_streams[s]));
    CHECK(cudaMemcpyAsync(reg + s * chunk_bytes, shared_dev + s * chunk, chunk_bytes,
                          cudaMemcpyDeviceToHost, reg_streams[s]));
    CHECK(cudaEventRecord(reg_done[s], reg_streams[s]));
  }
  for (int s = kStreams - 1; s >= 0; --s) CHECK(cudaEventSynchronize(reg_done[s]));
  for (int s = 0; s < kStreams; ++s) {
    for (size_t i = 0; i < chunk_bytes; ++i) {
      if (reg[s * chunk_bytes + i] != 0x40 + s) FAIL("registered: stream %d byte %zu", s, i);
    }
    CHECK(cudaEventDestroy(reg_done[s]));
    CHECK(cudaStreamDestroy(reg_streams[s]));
  }
  CHECK(cudaFree(shared_dev));
  CHECK(cudaHostUnregister(raw));
  std::free(raw);
  PASS();
}
