// Several streams' cudaMemcpyAsync device-to-host into one pinned buffer at different offsets,
// then cudaEventSynchronize on an event recorded after them (the multi-stream async-copy bug of
// issue 17: the synchronize returned cudaErrorMemoryAllocation). Also the same into a
// cudaHostRegister'ed buffer, host-to-device from offsets of the pinned buffer, and the case that
// failed: 4 streams x 5 x 64 MiB in flight at once (more than a server holds for a client unless
// the runtime waits), then one copy larger than the runtime's window.
#include "program.h"

#include <vector>

namespace {

constexpr int kStreams = 4;
constexpr size_t kChunkBytes = 1 << 20;

void Run(unsigned char* pinned, unsigned char* dev) {
  cudaStream_t streams[kStreams];
  cudaEvent_t done[kStreams];
  for (int i = 0; i < kStreams; ++i) {
    CHECK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&done[i]));
  }
  for (int i = 0; i < kStreams; ++i) {
    CHECK(cudaMemsetAsync(dev + i * kChunkBytes, 0x10 + i, kChunkBytes, streams[i]));
  }
  std::memset(pinned, 0, kStreams * kChunkBytes);
  for (int i = 0; i < kStreams; ++i) {
    CHECK(cudaMemcpyAsync(pinned + i * kChunkBytes, dev + i * kChunkBytes, kChunkBytes,
                          cudaMemcpyDeviceToHost, streams[i]));
    CHECK(cudaEventRecord(done[i], streams[i]));
  }
  for (int i = kStreams - 1; i >= 0; --i) CHECK(cudaEventSynchronize(done[i]));
  for (int i = 0; i < kStreams; ++i) {
    for (size_t b = 0; b < kChunkBytes; b += 4093) {
      if (pinned[i * kChunkBytes + b] != 0x10 + i) {
        FAIL("chunk %d byte %zu is 0x%x", i, b, pinned[i * kChunkBytes + b]);
      }
    }
  }
  // Back again from the offsets, smaller pieces, many copies in flight per stream.
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kStreams; ++i) {
      for (size_t off = 0; off < kChunkBytes; off += kChunkBytes / 8) {
        CHECK(cudaMemcpyAsync(dev + i * kChunkBytes + off, pinned + i * kChunkBytes + off,
                              kChunkBytes / 8, cudaMemcpyHostToDevice, streams[i]));
        CHECK(cudaMemcpyAsync(pinned + i * kChunkBytes + off, dev + i * kChunkBytes + off,
                              kChunkBytes / 8, cudaMemcpyDeviceToHost, streams[i]));
      }
      CHECK(cudaEventRecord(done[i], streams[i]));
    }
    for (int i = 0; i < kStreams; ++i) CHECK(cudaEventSynchronize(done[i]));
  }
  for (int i = 0; i < kStreams; ++i) {
    if (pinned[i * kChunkBytes + 7] != 0x10 + i) FAIL("round trip of chunk %d", i);
    CHECK(cudaEventDestroy(done[i]));
    CHECK(cudaStreamDestroy(streams[i]));
  }
}

// The reproduction: more device-to-host data in flight between two synchronising calls than the
// server holds for one client (1 GiB): 4 streams x 5 copies of 64 MiB, into the same pinned chunk
// per stream (stream order makes that well defined).
void RunLarge() {
  constexpr size_t kLargeBytes = 64ull << 20;
  constexpr int kCopiesPerStream = 5;
  unsigned char* dev = nullptr;
  unsigned char* pinned = nullptr;
  CHECK(cudaMalloc(&dev, kStreams * kLargeBytes));
  CHECK(cudaMallocHost(&pinned, kStreams * kLargeBytes));
  cudaStream_t streams[kStreams];
  cudaEvent_t all;
  CHECK(cudaEventCreate(&all));
  for (int i = 0; i < kStreams; ++i) CHECK(cudaStreamCreate(&streams[i]));
  for (int i = 0; i < kStreams; ++i) {
    CHECK(cudaMemsetAsync(dev + i * kLargeBytes, 0x40 + i, kLargeBytes, streams[i]));
  }
  for (int copy = 0; copy < kCopiesPerStream; ++copy) {
    for (int i = 0; i < kStreams; ++i) {
      CHECK(cudaMemcpyAsync(pinned + i * kLargeBytes, dev + i * kLargeBytes, kLargeBytes,
                            cudaMemcpyDeviceToHost, streams[i]));
    }
  }
  CHECK(cudaEventRecord(all, 0));  // the legacy stream waits for the others
  CHECK(cudaEventSynchronize(all));
  for (int i = 0; i < kStreams; ++i) {
    if (pinned[i * kLargeBytes] != 0x40 + i || pinned[(i + 1) * kLargeBytes - 1] != 0x40 + i) {
      FAIL("large chunk %d not copied", i);
    }
  }
  // One copy larger than what the runtime lets be in flight (256 MiB): it goes synchronously.
  std::memset(pinned, 0, kStreams * kLargeBytes);
  CHECK(cudaMemcpyAsync(pinned, dev, kStreams * kLargeBytes, cudaMemcpyDeviceToHost, streams[0]));
  CHECK(cudaStreamSynchronize(streams[0]));
  if (pinned[0] != 0x40 || pinned[kStreams * kLargeBytes - 1] != 0x40 + kStreams - 1) {
    FAIL("one large copy");
  }
  for (int i = 0; i < kStreams; ++i) CHECK(cudaStreamDestroy(streams[i]));
  CHECK(cudaEventDestroy(all));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(dev));
}

}  // namespace

int main() {
  unsigned char* dev = nullptr;
  CHECK(cudaMalloc(&dev, kStreams * kChunkBytes));
  unsigned char* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, kStreams * kChunkBytes));
  Run(pinned, dev);
  CHECK(cudaFreeHost(pinned));

  std::vector<unsigned char> registered(kStreams * kChunkBytes);
  CHECK(cudaHostRegister(registered.data(), registered.size(), cudaHostRegisterDefault));
  Run(registered.data(), dev);
  CHECK(cudaHostUnregister(registered.data()));

  CHECK(cudaFree(dev));
  RunLarge();
  CHECK(cudaDeviceSynchronize());
  PASS();
}
