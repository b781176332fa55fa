// The CUDA runtime's behaviour as a program sees it, end to end through flyt: device facts,
// every copy kind (with cudaMemcpyDefault and pointer classification), 2D copies, memsets,
// __constant__/__device__ variables, pointer attributes, streams and events, error reporting
// (last error, launch-configuration errors, bad pointers, bad handles, unsupported calls) and a
// sticky fault that only cudaDeviceReset clears. Passes on a real GPU and on flyt's simulated
// device (FLYT_SIM_DEVICE=1: kernel results are not checked; the fault is simulated).
#include <cstdint>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

__constant__ int kTable[64];
__device__ double gAccumulator[8];

__global__ void AddTable(int* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += kTable[i % 64];
}

// Faults on a real GPU (a store through a null pointer); flyt's simulated device recognises the
// name and reports the same sticky error.
__global__ void flyt_sim_fault_store(int* bad) { *bad = 1; }

static std::vector<unsigned char> Pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>((i * 131 + seed * 7) ^ (i >> 9));
  return out;
}

int main() {
  const bool sim = SimulatedDevice();

  // ---- device facts ----
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT_TRUE(count >= 1);
  CHECK(cudaSetDevice(0));
  EXPECT_ERROR(cudaErrorInvalidDevice, cudaSetDevice(count));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  EXPECT_TRUE(prop.name[0] != '\0');
  EXPECT_TRUE(prop.major >= 7 && prop.multiProcessorCount > 0 && prop.warpSize == 32);
  EXPECT_TRUE(prop.maxThreadsPerBlock >= 1024 && prop.maxGridSize[1] >= 65535);
  EXPECT_TRUE(prop.totalGlobalMem > (1ull << 30));
  int sms = 0, major = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  EXPECT_TRUE(sms == prop.multiProcessorCount && major == prop.major);
  int clock = 0;
  CHECK(cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, 0));  // not a cudaDeviceProp field
  EXPECT_TRUE(clock > 0);
  int driver = 0, runtime = 0;
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  EXPECT_TRUE(driver >= 12000 && runtime >= 13000);
  size_t free_bytes = 0, total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  EXPECT_TRUE(total_bytes > 0 && free_bytes <= total_bytes);

  // ---- copies of every kind, byte-exact ----
  const size_t n = (3 << 20) + 123;
  std::vector<unsigned char> in = Pattern(n, 1), out(n, 0);
  unsigned char *d1 = nullptr, *d2 = nullptr, *pinned = nullptr;
  CHECK(cudaMalloc(&d1, n));
  CHECK(cudaMalloc(&d2, n));
  CHECK(cudaMallocHost(&pinned, n));
  CHECK(cudaMemcpy(d1, in.data(), n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(out.data(), d2, n, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(out == in);
  // cudaMemcpyDefault: the runtime tells device from host pointers itself.
  std::vector<unsigned char> in2 = Pattern(n, 2);
  CHECK(cudaMemcpy(d1 + 1, in2.data(), n - 1, cudaMemcpyDefault));
  CHECK(cudaMemcpy(pinned, d1 + 1, n - 1, cudaMemcpyDefault));
  EXPECT_TRUE(std::memcmp(pinned, in2.data(), n - 1) == 0);
  // Async copies through a stream: the data is there after the stream is synchronised.
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<unsigned char> in3 = Pattern(n, 3);
  std::memcpy(pinned, in3.data(), n);
  CHECK(cudaMemcpyAsync(d2, pinned, n, cudaMemcpyHostToDevice, stream));
  CHECK(cudaMemsetAsync(d2 + 100, 0xAB, 50, stream));
  std::vector<unsigned char> back(n, 0);
  CHECK(cudaMemcpyAsync(back.data(), d2, n, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::memset(in3.data() + 100, 0xAB, 50);
  EXPECT_TRUE(back == in3);
  // Small async copies, many of them, pipelined.
  std::vector<int> small(256);
  for (int i = 0; i < 256; ++i) small[i] = i * 3;
  for (int i = 0; i < 256; ++i) {
    CHECK(cudaMemcpyAsync(reinterpret_cast<int*>(d1) + i, &small[i], sizeof(int),
                          cudaMemcpyHostToDevice, stream));
  }
  std::vector<int> small_back(256, -1);
  CHECK(cudaMemcpyAsync(small_back.data(), d1, 256 * sizeof(int), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(small_back == small);
  // 2D copies with pitches.
  size_t pitch = 0;
  int* d2d = nullptr;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&d2d), &pitch, 100 * sizeof(int), 40));
  EXPECT_TRUE(pitch >= 100 * sizeof(int));
  std::vector<int> grid(120 * 40), grid_back(120 * 40, 0);
  for (size_t i = 0; i < grid.size(); ++i) grid[i] = static_cast<int>(i);
  CHECK(cudaMemcpy2D(d2d, pitch, grid.data(), 120 * sizeof(int), 100 * sizeof(int), 40,
                     cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2D(grid_back.data(), 120 * sizeof(int), d2d, pitch, 100 * sizeof(int), 40,
                     cudaMemcpyDeviceToHost));
  for (int row = 0; row < 40; ++row) {
    for (int col = 0; col < 120; ++col) {
      EXPECT_TRUE(grid_back[row * 120 + col] == (col < 100 ? grid[row * 120 + col] : 0));
    }
  }
  CHECK(cudaMemset(d1, 0x5A, 4096));
  CHECK(cudaMemcpy(out.data(), d1, 4096, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 4096; ++i) EXPECT_TRUE(out[i] == 0x5A);

  // ---- variables ----
  int table[64];
  for (int i = 0; i < 64; ++i) table[i] = i * i;
  CHECK(cudaMemcpyToSymbol(kTable, table, sizeof table));
  int table_back[64] = {};
  CHECK(cudaMemcpyFromSymbol(table_back, kTable, sizeof table_back));
  EXPECT_TRUE(std::memcmp(table, table_back, sizeof table) == 0);
  double acc[8] = {1, 2, 3, 4, 5, 6, 7, 8}, acc_back[8] = {};
  CHECK(cudaMemcpyToSymbolAsync(gAccumulator, acc, sizeof acc, 0, cudaMemcpyHostToDevice, stream));
  CHECK(cudaMemcpyFromSymbolAsync(acc_back, gAccumulator, 4 * sizeof(double), 4 * sizeof(double),
                                  cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(acc_back[0] == 5 && acc_back[3] == 8);
  void* symbol_address = nullptr;
  size_t symbol_size = 0;
  CHECK(cudaGetSymbolAddress(&symbol_address, kTable));
  CHECK(cudaGetSymbolSize(&symbol_size, kTable));
  EXPECT_TRUE(symbol_address != nullptr && symbol_size == sizeof table);
  EXPECT_ERROR(cudaErrorInvalidValue,
               cudaMemcpyToSymbol(kTable, table, sizeof table, 4));  // past the end
  (void)cudaGetLastError();

  // ---- pointer attributes ----
  cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, d1 + 10));
  EXPECT_TRUE(attr.type == cudaMemoryTypeDevice && attr.devicePointer == d1 + 10);
  CHECK(cudaPointerGetAttributes(&attr, pinned));
  EXPECT_TRUE(attr.type == cudaMemoryTypeHost);
  CHECK(cudaPointerGetAttributes(&attr, in.data()));
  EXPECT_TRUE(attr.type == cudaMemoryTypeUnregistered);

  // ---- a kernel reading the table ----
  std::vector<int> data(1000, 1);
  int* ddata = nullptr;
  CHECK(cudaMalloc(&ddata, data.size() * sizeof(int)));
  CHECK(cudaMemcpy(ddata, data.data(), data.size() * sizeof(int), cudaMemcpyHostToDevice));
  AddTable<<<4, 256>>>(ddata, 1000);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(data.data(), ddata, data.size() * sizeof(int), cudaMemcpyDeviceToHost));
  if (!sim) {
    for (int i = 0; i < 1000; ++i) EXPECT_TRUE(data[i] == 1 + (i % 64) * (i % 64));
  }
  cudaFuncAttributes fattr;
  CHECK(cudaFuncGetAttributes(&fattr, AddTable));
  EXPECT_TRUE(fattr.maxThreadsPerBlock > 0 && fattr.binaryVersion > 0);
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, AddTable, 256, 0));
  EXPECT_TRUE(blocks > 0);

  // ---- events and streams ----
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreateWithFlags(&stop, cudaEventBlockingSync));
  CHECK(cudaEventRecord(start, stream));
  AddTable<<<4, 256, 0, stream>>>(ddata, 1000);
  CHECK(cudaEventRecord(stop, stream));
  CHECK(cudaStreamWaitEvent(nullptr, stop, 0));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaEventQuery(stop));
  CHECK(cudaStreamQuery(stream));
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  EXPECT_TRUE(ms >= 0);
  unsigned flags = 99;
  int priority = 99;
  CHECK(cudaStreamGetFlags(stream, &flags));
  CHECK(cudaStreamGetPriority(stream, &priority));
  EXPECT_TRUE(flags == cudaStreamNonBlocking && priority == 0);

  // ---- errors ----
  EXPECT_ERROR(cudaSuccess, cudaGetLastError());
  AddTable<<<1, 2048>>>(ddata, 1000);  // more threads than a block may have
  EXPECT_ERROR(cudaErrorInvalidConfiguration, cudaPeekAtLastError());
  EXPECT_ERROR(cudaErrorInvalidConfiguration, cudaGetLastError());
  EXPECT_ERROR(cudaSuccess, cudaGetLastError());  // reset by the read
  EXPECT_ERROR(cudaErrorInvalidValue, cudaFree(in.data()));
  (void)cudaGetLastError();
  EXPECT_ERROR(cudaErrorInvalidValue,
               cudaMemcpy(d1 + n - 10, in.data(), 20, cudaMemcpyHostToDevice));  // overruns
  (void)cudaGetLastError();
  EXPECT_ERROR(cudaErrorInvalidMemcpyDirection,
               cudaMemcpy(out.data(), d1, 16, static_cast<cudaMemcpyKind>(42)));
  (void)cudaGetLastError();
  cudaStream_t bogus = reinterpret_cast<cudaStream_t>(0x1234);
  EXPECT_ERROR(cudaErrorInvalidResourceHandle, cudaStreamSynchronize(bogus));
  (void)cudaGetLastError();
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));  // [issue 17: graphs] supported now; a stub that is not:
  cudaGraphConditionalHandle conditional;
  EXPECT_ERROR(cudaErrorNotSupported, cudaGraphConditionalHandleCreate(&conditional, graph, 0, 0));
  EXPECT_ERROR(cudaErrorNotSupported, cudaGetLastError());
  CHECK(cudaGraphDestroy(graph));
  EXPECT_TRUE(std::strcmp(cudaGetErrorName(cudaErrorMemoryAllocation),
                          "cudaErrorMemoryAllocation") == 0);
  EXPECT_TRUE(std::strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") == 0);

  // ---- a forked child cannot use its parent's CUDA; the parent goes on unharmed ----
  {
    int* before_fork = nullptr;
    CHECK(cudaMalloc(&before_fork, 64 * sizeof(int)));
    AddTable<<<1, 64>>>(before_fork, 64);  // posted: maybe still in the parent's send buffer
    const pid_t child = fork();
    if (child == 0) {
      int* p = nullptr;
      // exit(), not _exit(): the child's exit handlers must not send the parent's work again.
      std::exit(cudaMalloc(&p, 16) == cudaErrorInitializationError ? 0 : 1);
    }
    EXPECT_TRUE(child > 0);
    int status = 0;
    EXPECT_TRUE(waitpid(child, &status, 0) == child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(before_fork));
  }

  // ---- a sticky fault, then recovery ----
  flyt_sim_fault_store<<<1, 1>>>(nullptr);
  EXPECT_ERROR(cudaErrorIllegalAddress, cudaDeviceSynchronize());
  int* after = nullptr;
  EXPECT_ERROR(cudaErrorIllegalAddress, cudaMalloc(&after, 16));  // the context is gone
  EXPECT_ERROR(cudaErrorIllegalAddress, cudaGetLastError());
  EXPECT_ERROR(cudaErrorIllegalAddress, cudaGetLastError());  // and stays
  CHECK(cudaDeviceReset());
  EXPECT_ERROR(cudaSuccess, cudaGetLastError());
  CHECK(cudaMalloc(&after, 4096));
  CHECK(cudaMemcpyToSymbol(kTable, table, sizeof table));  // the module is loaded again
  AddTable<<<1, 64>>>(after, 64);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(after));

  std::printf("api_semantics: device facts, copies, symbols, streams, events, errors: PASS\n");
  return 0;
}
