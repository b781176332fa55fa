// Host callbacks (NVIDIA's simpleCallback): cudaLaunchHostFunc and cudaStreamAddCallback run on a
// CUDA thread after the stream's earlier work, in stream order, with the stream's status; the
// host sees each one after a synchronise.
#include <atomic>
#include <vector>

#include "program.h"

__global__ void Increment(int* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

struct Work {
  int id = 0;
  int* host = nullptr;  // pinned: the copy before the callback has landed when it runs
  int n = 0;
  int first = -1;       // what the callback saw
  std::atomic<int>* order = nullptr;
  int position = -1;
};

void HostFunc(void* user) {
  Work* w = static_cast<Work*>(user);
  w->first = w->host[0];
  w->position = w->order->fetch_add(1);
}

void StreamCallback(cudaStream_t, cudaError_t status, void* user) {
  Work* w = static_cast<Work*>(user);
  if (status != cudaSuccess) return;
  w->first = w->host[w->n - 1];
  w->position = w->order->fetch_add(1);
}

int main() {
  const int kWorkers = 4;
  const int n = 4096;
  std::atomic<int> order{0};
  Work host_fn_work[kWorkers], callback_work[kWorkers];
  cudaStream_t streams[kWorkers];
  int* dev[kWorkers];
  int* pinned[kWorkers];
  for (int w = 0; w < kWorkers; ++w) {
    CHECK(cudaStreamCreate(&streams[w]));
    CHECK(cudaMalloc(&dev[w], n * sizeof(int)));
    CHECK(cudaMallocHost(&pinned[w], n * sizeof(int)));
    for (int i = 0; i < n; ++i) pinned[w][i] = w * 1000 + i;
    host_fn_work[w] = Work{w, pinned[w], n, -1, &order, -1};
    callback_work[w] = Work{w, pinned[w], n, -1, &order, -1};
  }
  for (int w = 0; w < kWorkers; ++w) {
    CHECK(cudaMemcpyAsync(dev[w], pinned[w], n * sizeof(int), cudaMemcpyHostToDevice, streams[w]));
    Increment<<<(n + 127) / 128, 128, 0, streams[w]>>>(dev[w], n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(pinned[w], dev[w], n * sizeof(int), cudaMemcpyDeviceToHost, streams[w]));
    CHECK(cudaLaunchHostFunc(streams[w], HostFunc, &host_fn_work[w]));
    CHECK(cudaStreamAddCallback(streams[w], StreamCallback, &callback_work[w], 0));
  }
  CHECK(cudaDeviceSynchronize());
  for (int w = 0; w < kWorkers; ++w) CHECK(cudaStreamSynchronize(streams[w]));
  if (order.load() != 2 * kWorkers) FAIL("%d callbacks ran, expected %d", order.load(), 2 * kWorkers);
  const int bump = KERNELS_RUN ? 1 : 0;
  for (int w = 0; w < kWorkers; ++w) {
    // Each callback ran after its stream's copy back had landed, and the host function before
    // the stream callback queued after it.
    if (host_fn_work[w].first != w * 1000 + bump) {
      FAIL("stream %d: host function saw %d, expected %d", w, host_fn_work[w].first, w * 1000 + bump);
    }
    if (callback_work[w].first != w * 1000 + n - 1 + bump) {
      FAIL("stream %d: callback saw %d", w, callback_work[w].first);
    }
    if (host_fn_work[w].position >= callback_work[w].position) {
      FAIL("stream %d: callbacks ran out of stream order", w);
    }
  }
  // A host function on the legacy default stream, after everything.
  Work last{99, pinned[0], n, -1, &order, -1};
  CHECK(cudaLaunchHostFunc(0, HostFunc, &last));
  CHECK(cudaStreamSynchronize(0));
  if (last.position != 2 * kWorkers) FAIL("default-stream host function at %d", last.position);
  for (int w = 0; w < kWorkers; ++w) {
    CHECK(cudaStreamDestroy(streams[w]));
    CHECK(cudaFree(dev[w]));
    CHECK(cudaFreeHost(pinned[w]));
  }
  PASS();
}
