// Live migration's workload (tests/e2e/remote_migrate_test.sh): a program mid-run when an operator
// moves it to another GPU server. Phase 1 builds state — many allocations, a linked list whose
// nodes (in separate allocations, at interior offsets) store device pointers, a __device__ global,
// streams with posted work, events, a captured graph, pinned host memory. Then, when
// FLYT_TEST_MIGRATE_DIR is set, it says "ready" there and keeps making calls until the file "go"
// appears (the move happens at one of them). Phase 2 follows the list by the device addresses
// stored in it, checks every byte, and goes on launching kernels and the graph. Without the
// variable it runs straight through (the programs suite runs it as any other program).
#include <unistd.h>

#include <string>
#include <vector>

#include "program.h"

struct Node {
  Node* next;
  unsigned long long value;
};

__device__ unsigned int counter[64];

__global__ void walk(const Node* head, unsigned long long* sum) {
  unsigned long long s = 0;
  for (const Node* n = head; n != nullptr; n = n->next) s += n->value;
  *sum = s;
}

__global__ void bump(unsigned char* data, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) data[i] += 1;
}

static bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

int main() {
  constexpr int kNodes = 16;
  constexpr size_t kBig = 16u << 20;
  // The list: node i sits 128 bytes into allocation i, and points at node i+1's interior address.
  std::vector<char*> blocks(kNodes);
  for (int i = 0; i < kNodes; ++i) CHECK(cudaMalloc(&blocks[i], 4096 * (i + 1)));
  for (int i = 0; i < kNodes; ++i) {
    Node node{i + 1 < kNodes ? reinterpret_cast<Node*>(blocks[i + 1] + 128) : nullptr,
              1000ull + i};
    CHECK(cudaMemcpy(blocks[i] + 128, &node, sizeof node, cudaMemcpyHostToDevice));
  }
  // Many allocations with patterns, from pinned memory and pageable memory.
  std::vector<unsigned char*> data(8);
  unsigned char* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, kBig));
  std::vector<unsigned char> pageable(kBig);
  for (size_t k = 0; k < data.size(); ++k) {
    CHECK(cudaMalloc(&data[k], kBig));
    for (size_t i = 0; i < kBig; ++i) pageable[i] = static_cast<unsigned char>(i * 13 + k);
    if (k % 2 == 0) {
      std::memcpy(pinned, pageable.data(), kBig);
      CHECK(cudaMemcpy(data[k], pinned, kBig, cudaMemcpyHostToDevice));
    } else {
      CHECK(cudaMemcpy(data[k], pageable.data(), kBig, cudaMemcpyHostToDevice));
    }
  }
  unsigned int init[64];
  for (int i = 0; i < 64; ++i) init[i] = 0xC0DE0000u + i;
  CHECK(cudaMemcpyToSymbol(counter, init, sizeof init));
  unsigned long long* sum = nullptr;
  CHECK(cudaMalloc(&sum, sizeof *sum));

  // Streams with posted work, events, and a graph captured from one of them.
  cudaStream_t streams[3];
  for (cudaStream_t& s : streams) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t done;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  unsigned char* scratch = nullptr;
  CHECK(cudaMalloc(&scratch, 1 << 20));
  CHECK(cudaStreamBeginCapture(streams[0], cudaStreamCaptureModeGlobal));
  CHECK(cudaMemsetAsync(scratch, 0x11, 1 << 20, streams[0]));
  bump<<<(1 << 20) / 256, 256, 0, streams[0]>>>(scratch, 1 << 20);
  CHECK(cudaMemcpyAsync(scratch + 4096, data[0], 4096, cudaMemcpyDeviceToDevice, streams[0]));
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(streams[0], &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int s = 0; s < 3; ++s) {
    walk<<<1, 1, 0, streams[s]>>>(reinterpret_cast<Node*>(blocks[0] + 128), sum);
    bump<<<64, 256, 0, streams[s]>>>(data[7] + s * 64 * 256, 64 * 256);  // a range per stream
  }
  CHECK(cudaEventRecord(done, streams[2]));
  CHECK(cudaGraphLaunch(exec, streams[1]));
  std::printf("phase 1 done\n");
  std::fflush(stdout);

  if (const char* dir = std::getenv("FLYT_TEST_MIGRATE_DIR")) {
    std::string ready = std::string(dir) + "/ready", go = std::string(dir) + "/go";
    FILE* f = std::fopen(ready.c_str(), "w");
    if (f) std::fclose(f);
    for (int i = 0; i < 60000 && !Exists(go); ++i) {
      // Calls, with work still posted on the streams: the move happens at one of them.
      cudaError_t q = cudaStreamQuery(streams[i % 3]);
      if (q != cudaSuccess && q != cudaErrorNotReady) CHECK(q);
      ::usleep(1000);
    }
    if (!Exists(go)) FAIL("no go after 60 s");
  }

  CHECK(cudaStreamSynchronize(streams[1]));
  CHECK(cudaEventSynchronize(done));
  // The list, followed by the device addresses stored in device memory.
  const Node* at = reinterpret_cast<const Node*>(blocks[0] + 128);
  for (int i = 0; i < kNodes; ++i) {
    if (at == nullptr) FAIL("the list ends at node %d", i);
    Node node;
    CHECK(cudaMemcpy(&node, at, sizeof node, cudaMemcpyDeviceToHost));
    if (node.value != 1000ull + i) FAIL("node %d holds %llu", i, node.value);
    if (i + 1 < kNodes && node.next != reinterpret_cast<Node*>(blocks[i + 1] + 128)) {
      FAIL("node %d points at %p, not %p", i, static_cast<void*>(node.next), blocks[i + 1] + 128);
    }
    at = node.next;
  }
  if (at != nullptr) FAIL("the list does not end");
  for (size_t k = 0; k < data.size(); ++k) {
    unsigned char* out = k % 2 == 0 ? pinned : pageable.data();
    CHECK(cudaMemcpy(out, data[k], kBig, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < kBig; ++i) {
      unsigned char want = static_cast<unsigned char>(i * 13 + k);
      if (k == 7 && i < 3 * 64 * 256 && KERNELS_RUN) want = static_cast<unsigned char>(want + 1);
      if (out[i] != want) FAIL("allocation %zu byte %zu is %u, not %u", k, i, out[i], want);
    }
  }
  unsigned int back[64];
  CHECK(cudaMemcpyFromSymbol(back, counter, sizeof back));
  for (int i = 0; i < 64; ++i) {
    if (back[i] != 0xC0DE0000u + i) FAIL("counter[%d] is %x", i, back[i]);
  }
  if (KERNELS_RUN) {
    unsigned long long s = 0;
    CHECK(cudaMemcpy(&s, sum, sizeof s, cudaMemcpyDeviceToHost));
    if (s != kNodes * 1000ull + kNodes * (kNodes - 1) / 2) FAIL("the walk summed %llu", s);
  }
  unsigned char head[16];
  CHECK(cudaMemcpy(head, scratch, sizeof head, cudaMemcpyDeviceToHost));
  if (head[0] != (KERNELS_RUN ? 0x12 : 0x11)) FAIL("the graph's memset left %x", head[0]);

  // Phase 2: more work, where the program now runs.
  for (int r = 0; r < 4; ++r) {
    CHECK(cudaGraphLaunch(exec, streams[r % 3]));
    walk<<<1, 1, 0, streams[r % 3]>>>(reinterpret_cast<Node*>(blocks[0] + 128), sum);
  }
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(head, scratch + 4096, sizeof head, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 16; ++i) {
    if (head[i] != static_cast<unsigned char>(i * 13)) FAIL("the graph's copy left %u", head[i]);
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  for (cudaStream_t s : streams) CHECK(cudaStreamDestroy(s));
  CHECK(cudaEventDestroy(done));
  for (char* b : blocks) CHECK(cudaFree(b));
  for (unsigned char* d : data) CHECK(cudaFree(d));
  CHECK(cudaFree(sum));
  CHECK(cudaFree(scratch));
  CHECK(cudaFreeHost(pinned));
  std::printf("phase 2 done\n");
  PASS();
}
