// The aggregator's rules, one test each, on records built by hand: memory (success only, leaks,
// unknown frees), failures by name, kernel names and their bounds, device selection, containers,
// bounds and drops, malformed records, process lifetime, and the JSON form.
#include "trace/aggregator.h"

#include <gtest/gtest.h>

#include "trace/aggregator_testing.h"
#include "trace/json.h"
#include "trace/raw_record.h"
#include "common/status.h"
#include "common/strings.h"

// Host "stubs" for the late-attachment tests: functions of this test binary (its .symtab names
// them; nothing registers them), standing for nvcc's host stubs, whose symbols are the kernels'
// mangled names.
namespace late_stub {
__attribute__((noinline)) void Axpy(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
template <typename T, int kUnroll>
__attribute__((noinline)) void Scale(T* data, T factor, int n) {
  for (int i = 0; i < n * kUnroll; ++i) data[i] *= factor;
}
template void Scale<float, 4>(float*, float, int);
}  // namespace late_stub

namespace flyt::trace {
namespace {

using namespace testing;  // NOLINT: the record builders

constexpr uint32_t kPid = 4242;

class AggregatorTest : public ::testing::Test {
 protected:
  AggregatorTest() { tree_.AddProcess(kPid, "train"); }
  TempTree tree_;
  FakeClock clock_;
};

TEST_F(AggregatorTest, OomRetryLoopCountsFailuresNotMemory) {
  Aggregator agg(Options(tree_), clock_);
  for (int i = 0; i < 100; ++i) Feed(agg, Alloc(kPid, kSecond + i, 0, 1 << 30, FLYT_MEM_DEVICE, 2));
  Feed(agg, Alloc(kPid, 2 * kSecond, 0x7000000, 1 << 20));
  Feed(agg, Alloc(kPid, 2 * kSecond, 0, 1 << 30, FLYT_MEM_DEVICE, 2, FLYT_FN_cuMemAlloc_v2));
  Feed(agg, Alloc(kPid, 2 * kSecond, 0, 1, FLYT_MEM_DEVICE, 12345));
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_EQ(p.comm, "train");
  EXPECT_EQ(p.device_memory_bytes, 1u << 20);
  EXPECT_EQ(p.device_memory_peak_bytes, 1u << 20);
  EXPECT_EQ(p.allocations, 1u);
  EXPECT_EQ(p.failures, (std::map<std::string, uint64_t>{{"cudaErrorMemoryAllocation", 100},
                                                         {"CUDA_ERROR_OUT_OF_MEMORY", 1},
                                                         {"error 12345", 1}}));
}

TEST_F(AggregatorTest, LeakAtExitAndKeptForAWhile) {
  TraceOptions o = Options(tree_);
  o.exited_keep_seconds = 60;
  Aggregator agg(o, clock_);
  Feed(agg, Alloc(kPid, 1, 0x1000, 100));
  Feed(agg, Alloc(kPid, 2, 0x2000, 200));
  Feed(agg, Alloc(kPid, 3, 0x3000, 50, FLYT_MEM_MANAGED, 0, FLYT_FN_cudaMallocManaged));
  Feed(agg, Alloc(kPid, 4, 0x4000, 30, FLYT_MEM_HOST_PINNED, 0, FLYT_FN_cudaMallocHost));
  Feed(agg, Free(kPid, 5, 0x2000));
  Feed(agg, Free(kPid, 6, 0x1000, 1));  // failed: still allocated
  ProcessCuda live = Find(agg.Processes(), kPid);
  EXPECT_EQ(live.device_memory_bytes, 100u);
  EXPECT_EQ(live.device_memory_peak_bytes, 300u);
  EXPECT_EQ(live.managed_memory_bytes, 50u);
  EXPECT_EQ(live.pinned_host_bytes, 30u);
  EXPECT_EQ(live.frees, 1u);
  EXPECT_EQ(live.failures.at("cudaErrorInvalidValue"), 1u);
  EXPECT_FALSE(live.exited);

  Feed(agg, Exit(kPid, 7, 3));
  ProcessCuda gone = Find(agg.Processes(), kPid);
  EXPECT_TRUE(gone.exited);
  EXPECT_EQ(gone.exit_code, std::optional<int32_t>(3));
  EXPECT_EQ(gone.leaked_bytes, 150u);
  EXPECT_EQ(gone.leaked_allocations, 2u);
  EXPECT_EQ(gone.leaked_pinned_host_bytes, 30u);

  clock_.Advance(std::chrono::seconds(59));
  agg.OnDrainEnd();
  EXPECT_EQ(agg.Processes().size(), 1u);
  clock_.Advance(std::chrono::seconds(2));
  agg.OnDrainEnd();
  EXPECT_TRUE(agg.Processes().empty());
}

TEST_F(AggregatorTest, FreeOfUnknownPointerIsCountedNotSubtracted) {
  Aggregator agg(Options(tree_), clock_);
  Feed(agg, Alloc(kPid, 1, 0x1000, 100));
  Feed(agg, Free(kPid, 2, 0x9999));
  Feed(agg, Free(kPid, 3, 0));  // cudaFree(0): context creation
  Feed(agg, Free(kPid, 4, 0x1000));
  Feed(agg, Free(kPid, 5, 0x1000));  // twice: the second one is unknown
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_EQ(p.device_memory_bytes, 0u);
  EXPECT_EQ(p.frees, 1u);
  EXPECT_EQ(p.unknown_frees, 2u);
}

TEST_F(AggregatorTest, CopiesByDirectionInferredFromPointers) {
  Aggregator agg(Options(tree_), clock_);
  Feed(agg, Alloc(kPid, 1, 0x10000, 4096));
  Feed(agg, StreamCreate(kPid, 1, 0x5000, 0));
  Feed(agg, Copy(kPid, 2, 0x10000, 0xdead0000, 1000, FLYT_COPY_HOST_TO_DEVICE, 0x5000));
  Feed(agg, Copy(kPid, 3, 0xdead0000, 0x10010, 200, FLYT_COPY_DEFAULT, 0x5000));  // D2H
  Feed(agg, Copy(kPid, 4, 0x10100, 0x10000, 30, FLYT_COPY_DEFAULT));              // D2D
  Feed(agg, Copy(kPid, 5, 0xbeef0000, 0xdead0000, 4, FLYT_COPY_DEFAULT));         // H2H
  Feed(agg, Copy(kPid, 6, 0x10000 + 4096, 0x10000, 7, FLYT_COPY_DEFAULT));        // just past: D2H
  Feed(agg, Copy(kPid, 7, 0x10000, 0, 512, FLYT_COPY_DEFAULT, 0x5000, FLYT_FN_cudaMemsetAsync));
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_EQ(p.copies.host_to_device, 1000u);
  EXPECT_EQ(p.copies.device_to_host, 207u);
  EXPECT_EQ(p.copies.device_to_device, 30u);
  EXPECT_EQ(p.copies.host_to_host, 4u);
  EXPECT_EQ(p.copies.copies, 5u);
  EXPECT_EQ(p.copies.memset, 512u);
  EXPECT_EQ(p.copies.memsets, 1u);
  const StreamStats* s = FindStream(p, 0x5000);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->copies.host_to_device, 1000u);
  EXPECT_EQ(s->copies.device_to_host, 200u);
  EXPECT_EQ(s->copies.memset, 512u);
  EXPECT_EQ(s->copies.copies, 2u);
}

TEST_F(AggregatorTest, KernelNamesResolvedDemangledAndBounded) {
  TraceOptions o = Options(tree_);
  o.top_kernels = 3;
  Aggregator agg(o, clock_);
  Feed(agg, Name(kPid, 1, 0xA0, "_Z5scalePfi"));
  Feed(agg, Name(kPid, 1, 0xB0, "_Z3addPKfS0_Pf"));
  Feed(agg, Name(kPid, 1, 0xC0, "_Zbogus"));
  Feed(agg, GetKernel(kPid, 2, 0xF00, 0xA0));
  Feed(agg, Name(kPid, 2, 0xD0, "vector_sum", /*module=*/true));
  // Through the CUDA 13 kernel handle, through the stub, through the CUfunction.
  for (int i = 0; i < 5; ++i) {
    Feed(agg, Launch(kPid, 3, 0xF00, 0, {1, 1, 1}, {1, 1, 1}, 0, FLYT_FN___cudaLaunchKernel));
  }
  for (int i = 0; i < 4; ++i) Feed(agg, Launch(kPid, 3, 0xB0));
  for (int i = 0; i < 3; ++i) {
    Feed(agg, Launch(kPid, 3, 0xD0, 0, {2, 1, 1}, {32, 1, 1}, 0, FLYT_FN_cuLaunchKernel));
  }
  Feed(agg, Launch(kPid, 3, 0xC0));
  Feed(agg, Launch(kPid, 3, 0x1234));                   // unresolved
  Feed(agg, Launch(kPid, 3, 0x77, 0, {0, 0, 0}, {0, 0, 0}, 0, FLYT_FN_cudaGraphLaunch));
  Feed(agg, Launch(kPid, 3, 0xA0, 0, {1, 1, 1}, {1, 1, 1}, 0, FLYT_FN_cudaLaunchKernel, 9));
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_EQ(p.launches, 15u);
  EXPECT_EQ(p.failures.at("cudaErrorInvalidConfiguration"), 1u);
  ASSERT_EQ(p.top_kernels.size(), 4u);
  EXPECT_EQ(p.top_kernels[0].name, "scale(float*, int)");
  EXPECT_EQ(p.top_kernels[0].launches, 5u);
  EXPECT_EQ(p.top_kernels[1].name, "add(float const*, float const*, float*)");
  EXPECT_EQ(p.top_kernels[2].name, "vector_sum");
  ASSERT_EQ(p.top_kernels[2].shapes.size(), 1u);
  EXPECT_EQ(p.top_kernels[2].shapes[0].grid[0], 2u);
  EXPECT_EQ(p.top_kernels[2].shapes[0].block[0], 32u);
  EXPECT_EQ(p.top_kernels[2].shapes[0].launches, 3u);
  EXPECT_EQ(p.top_kernels[3].name, "other");  // _Zbogus, unknown, graph
  EXPECT_EQ(p.top_kernels[3].launches, 3u);

  o.top_kernels = 10;
  Aggregator all(o, clock_);
  Feed(all, Name(kPid, 1, 0xC0, "_Zbogus"));
  Feed(all, Launch(kPid, 3, 0xC0));
  Feed(all, Launch(kPid, 3, 0x1234));
  Feed(all, Launch(kPid, 3, 0x77, 0, {0, 0, 0}, {0, 0, 0}, 0, FLYT_FN_cuGraphLaunch));
  std::set<std::string> names;
  for (const KernelStats& k : Find(all.Processes(), kPid).top_kernels) names.insert(k.name);
  EXPECT_EQ(names, (std::set<std::string>{"_Zbogus", "unknown", "graph"}));
}

TEST_F(AggregatorTest, LaunchShapesBeyondEightGoToOtherShapes) {
  Aggregator agg(Options(tree_), clock_);
  Feed(agg, Name(kPid, 1, 0xA0, "k"));
  for (uint32_t g = 1; g <= 10; ++g) Feed(agg, Launch(kPid, 2, 0xA0, 0, {g, 1, 1}));
  Feed(agg, Launch(kPid, 2, 0xA0, 0, {1, 1, 1}));
  ProcessCuda p = Find(agg.Processes(), kPid);
  ASSERT_EQ(p.top_kernels.size(), 1u);
  EXPECT_EQ(p.top_kernels[0].launches, 11u);
  EXPECT_EQ(p.top_kernels[0].shapes.size(), 8u);
  EXPECT_EQ(p.top_kernels[0].shapes[0].launches, 2u);
  EXPECT_EQ(p.top_kernels[0].other_shapes, 2u);
}

TEST_F(AggregatorTest, BoundsDropAndCount) {
  TraceOptions o = Options(tree_);
  o.max_kernel_names_per_process = 2;
  o.max_allocations_per_process = 2;
  o.max_streams_per_process = 2;  // the legacy stream is never refused
  Aggregator agg(o, clock_);
  Feed(agg, Name(kPid, 1, 0xA0, "a"));
  Feed(agg, Name(kPid, 1, 0xB0, "b"));
  Feed(agg, Name(kPid, 1, 0xC0, "c"));
  Feed(agg, Name(kPid, 1, 0xA0, "a2"));  // a known key is updated, not refused
  Feed(agg, Alloc(kPid, 2, 0x1000, 10));
  Feed(agg, Alloc(kPid, 2, 0x2000, 10));
  Feed(agg, Alloc(kPid, 2, 0x3000, 10));
  Feed(agg, StreamCreate(kPid, 3, 0x100, 0));
  Feed(agg, StreamCreate(kPid, 3, 0x200, 0));
  Feed(agg, StreamCreate(kPid, 3, 0x300, 0));
  Feed(agg, Launch(kPid, 4, 0xC0, 0x300));
  Feed(agg, Launch(kPid, 4, 0xC0, 0x300));
  Feed(agg, Launch(kPid, 4, 0xA0, 0));
  TracerHealth h;
  agg.FillHealth(&h);
  EXPECT_EQ(h.dropped_kernel_names, 1u);
  EXPECT_EQ(h.dropped_allocations, 1u);
  EXPECT_EQ(h.dropped_streams, 1u);
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_EQ(p.device_memory_bytes, 20u);
  EXPECT_EQ(p.allocations, 3u);
  EXPECT_EQ(p.launches, 3u);
  EXPECT_EQ(p.streams.size(), 3u);  // 0x100, 0x200 and the legacy stream
  EXPECT_EQ(p.top_kernels[0].name, "unknown");
  EXPECT_EQ(p.top_kernels[1].name, "a2");
}

TEST_F(AggregatorTest, MaxProcessesEvictsExitedFirstThenDrops) {
  TraceOptions o = Options(tree_);
  o.max_processes = 2;
  Aggregator agg(o, clock_);
  Feed(agg, Alloc(1, 1, 0x1, 1));
  Feed(agg, Alloc(2, 1, 0x1, 1));
  Feed(agg, Exit(1, 2, 0));
  Feed(agg, Alloc(3, 3 * kSecond, 0x1, 1));  // room made by evicting exited pid 1
  Feed(agg, Alloc(4, 3 * kSecond, 0x1, 1));  // no room: dropped
  Feed(agg, Alloc(4, 3 * kSecond, 0x2, 1));  // counted once
  TracerHealth h;
  agg.FillHealth(&h);
  EXPECT_EQ(h.processes_traced, 3u);
  EXPECT_EQ(h.processes_tracked, 2u);
  EXPECT_EQ(h.dropped_processes, 1u);
  std::set<uint32_t> pids;
  for (const ProcessCuda& p : agg.Processes()) pids.insert(p.pid);
  EXPECT_EQ(pids, (std::set<uint32_t>{2, 3}));
}

TEST_F(AggregatorTest, MalformedRecordsAreCountedAndDropped) {
  Aggregator agg(Options(tree_), clock_);
  flyt_trace_launch launch = Launch(kPid, 1, 0xA0);
  agg.OnRecord(&launch, sizeof(launch) - 1);  // short
  agg.OnRecord(&launch, 4);                   // shorter than a header
  agg.OnRecord(nullptr, 0);
  flyt_trace_launch bad_kind = launch;
  bad_kind.h.kind = 99;
  Feed(agg, bad_kind);
  flyt_trace_launch bad_func = launch;
  bad_func.h.func = FLYT_FN_cudaMalloc;  // a launch record from an allocation function
  Feed(agg, bad_func);
  flyt_trace_launch no_func = launch;
  no_func.h.func = 150;
  Feed(agg, no_func);
  flyt_trace_alloc bad_memory = Alloc(kPid, 1, 0x1, 1, 7);
  Feed(agg, bad_memory);
  flyt_trace_launch no_pid = launch;
  no_pid.h.pid = 0;
  Feed(agg, no_pid);
  // A name without its NUL and a misaligned buffer are fine.
  flyt_trace_name name = Name(kPid, 1, 0xA0, "");
  std::memset(name.name, 'k', sizeof(name.name));
  std::vector<unsigned char> unaligned(sizeof(name) + 1);
  std::memcpy(unaligned.data() + 1, &name, sizeof(name));
  agg.OnRecord(unaligned.data() + 1, sizeof(name));
  Feed(agg, launch);
  TracerHealth h;
  agg.FillHealth(&h);
  EXPECT_EQ(h.malformed_records, 8u);
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_EQ(p.launches, 1u);
  ASSERT_EQ(p.top_kernels.size(), 1u);
  EXPECT_EQ(p.top_kernels[0].name, std::string(FLYT_TRACE_NAME_BYTES, 'k'));
}

std::vector<GpuIdentity> TwoGpus() {
  GpuIdentity a;
  a.index = 0;
  a.uuid = "GPU-aaaa-0000";
  a.cores = 2048;
  GpuIdentity b;
  b.index = 1;
  b.uuid = "GPU-bbbb-1111";
  b.cores = 8192;  // the faster one: CUDA's device 0 by default
  b.mig_uuids = {"MIG-bbbb-m0"};
  return {a, b};
}

TEST_F(AggregatorTest, DeviceIsPerThreadAndMappedThroughTheEnvironment) {
  tree_.AddProcess(100, "fastest");
  tree_.AddProcess(101, "pci", {"CUDA_DEVICE_ORDER=PCI_BUS_ID"});
  tree_.AddProcess(102, "visible", {"CUDA_VISIBLE_DEVICES=1", "CUDA_DEVICE_ORDER=PCI_BUS_ID"});
  tree_.AddProcess(103, "setenv", {"CUDA_VISIBLE_DEVICES=0"});
  Aggregator agg(Options(tree_), clock_);
  agg.SetGpus(TwoGpus());
  Feed(agg, SetDevice(100, 1, 1, /*tid=*/7));
  Feed(agg, SetDevice(100, 1, 5, /*tid=*/8, /*rc=*/101));  // failed: tid 8 stays on device 0
  Feed(agg, Launch(100, 2, 0xA0, 0, {1, 1, 1}, {1, 1, 1}, /*tid=*/7));
  Feed(agg, Launch(100, 2, 0xA0, 0, {1, 1, 1}, {1, 1, 1}, /*tid=*/8));
  Feed(agg, Launch(101, 2, 0xA0));
  Feed(agg, Launch(102, 2, 0xA0));
  // Before the first CUDA call a setenv counts; after it, the runtime has read the environment.
  Feed(agg, Name(103, 1, 0xA0, "k"));  // registration runs before main: not a CUDA call
  Feed(agg, Setenv(103, 1, "CUDA_VISIBLE_DEVICES=MIG-bbbb"));
  Feed(agg, Launch(103, 2, 0xA0));
  Feed(agg, Setenv(103, 3, "CUDA_VISIBLE_DEVICES=0"));
  std::vector<ProcessCuda> all = agg.Processes();
  EXPECT_EQ(Find(all, 100, 0).gpu_uuid, "GPU-bbbb-1111");  // FASTEST_FIRST
  EXPECT_EQ(Find(all, 100, 0).launches, 1u);
  EXPECT_EQ(Find(all, 100, 0).failures.at("cudaErrorInvalidDevice"), 1u);
  EXPECT_EQ(Find(all, 100, 1).gpu_uuid, "GPU-aaaa-0000");
  EXPECT_EQ(Find(all, 100, 1).launches, 1u);
  EXPECT_EQ(Find(all, 101, 0).gpu_uuid, "GPU-aaaa-0000");  // PCI_BUS_ID
  EXPECT_EQ(Find(all, 102, 0).gpu_uuid, "GPU-bbbb-1111");
  ProcessCuda mig = Find(all, 103, 0);
  EXPECT_EQ(mig.gpu_uuid, "GPU-bbbb-1111");
  EXPECT_EQ(mig.mig_uuid, "MIG-bbbb-m0");
}

TEST_F(AggregatorTest, RemoteRuntimeHasNoLocalGpu) {
  tree_.AddProcess(200, "remote", {"FLYT_SERVER=10.0.0.5:12500"});
  Aggregator agg(Options(tree_), clock_);
  agg.SetGpus(TwoGpus());
  flyt_trace_launch l = Launch(200, 1, 0xA0);
  l.h.library = FLYT_LIB_FLYT_RUNTIME;
  Feed(agg, l);
  ProcessCuda p = Find(agg.Processes(), 200);
  EXPECT_TRUE(p.remote);
  EXPECT_EQ(p.remote_server, "10.0.0.5:12500");
  EXPECT_EQ(p.gpu_uuid, "");
}

// A program shorter than a drain interval is gone when its first CUDA record is drained; its
// environment was read when it opened the library (that record wakes the drain thread at once).
TEST_F(AggregatorTest, EnvironmentReadWhenTheLibraryIsOpened) {
  tree_.AddProcess(201, "short", {"FLYT_SERVER=10.0.0.6:12500"});
  tree_.AddProcess(202, "reexec", {"FLYT_SERVER=10.0.0.7:12500"});
  Aggregator agg(Options(tree_), clock_);
  flyt_trace_path open{};
  open.h = Header(FLYT_EV_LIBRARY_OPEN, 0, 201, 1);
  std::strcpy(open.path, "/opt/flyt/lib/libcudart.so.13");
  Feed(agg, open);
  EXPECT_TRUE(agg.Processes().empty());  // no CUDA call yet: not a traced process
  open.h.pid = 202;
  Feed(agg, open);
  flyt_trace_path exec{};
  exec.h = Header(FLYT_EV_EXEC, 0, 202, 2);  // a new image: what was read is stale
  Feed(agg, exec);
  tree_.RemoveProcess(201);
  tree_.RemoveProcess(202);
  flyt_trace_launch l = Launch(201, 3, 0xA0);
  l.h.library = FLYT_LIB_FLYT_RUNTIME;
  Feed(agg, l);
  l.h.pid = l.h.tid = 202;
  Feed(agg, l);
  ProcessCuda p = Find(agg.Processes(), 201);
  EXPECT_EQ(p.comm, "short");
  EXPECT_EQ(p.remote_server, "10.0.0.6:12500");
  EXPECT_EQ(p.library, "/opt/flyt/lib/libcudart.so.13");
  EXPECT_EQ(Find(agg.Processes(), 202).remote_server, "");
}

// The drain can reach a LIBRARY_OPEN after its program is gone (a loaded machine): /proc has no
// environment then (gone, or a zombie whose environ reads empty). The ENVIRON record the BPF side
// copied while the program opened the library has it.
TEST_F(AggregatorTest, EnvironmentOfAProgramGoneBeforeItsOpenIsDrained) {
  tree_.AddProcess(210, "zombie");  // comm still there, environ empty
  tree_.AddProcess(212, "cutlive", {"CUDA_VISIBLE_DEVICES=1", "FLYT_SERVER=10.0.0.12:12500"});
  Aggregator agg(Options(tree_), clock_);
  const std::string lib = "/opt/flyt/lib/libcudart.so.13";
  // 209: gone from /proc (named by its exec); 210: a zombie.
  flyt_trace_path exec{};
  exec.h = Header(FLYT_EV_EXEC, FLYT_FN_NONE, 209, 1);
  std::strcpy(exec.path, "/work/build/tests/trace/trace_kernels");
  Feed(agg, exec);
  for (uint32_t pid : {209u, 210u}) {
    Feed(agg, Environ(pid, 2, {"PATH=/bin", "FLYT_SERVER=10.0.0." + std::to_string(pid) + ":12500",
                               "CUDA_VISIBLE_DEVICES=0"}));
    Feed(agg, LibraryOpen(pid, 2, lib));
    flyt_trace_launch l = Launch(pid, 3, 0xA0);
    l.h.library = FLYT_LIB_FLYT_RUNTIME;
    Feed(agg, l);
    Feed(agg, Exit(pid, 4, 0));
  }
  // Cut in FLYT_SERVER's value: /proc, still there, has it whole (212); gone, only what was
  // copied whole counts (211).
  const std::vector<std::string> env = {"CUDA_VISIBLE_DEVICES=1", "FLYT_SERVER=10.0.0.12:12500"};
  for (uint32_t pid : {211u, 212u}) {
    Feed(agg, Environ(pid, 5, env, /*cut_at=*/30));
    Feed(agg, LibraryOpen(pid, 5, lib));
    flyt_trace_launch l = Launch(pid, 6, 0xA0);
    l.h.library = FLYT_LIB_FLYT_RUNTIME;
    Feed(agg, l);
  }
  std::vector<ProcessCuda> all = agg.Processes();
  ProcessCuda gone = Find(all, 209);
  EXPECT_EQ(gone.comm, "trace_kernels");
  EXPECT_EQ(gone.remote_server, "10.0.0.209:12500");
  EXPECT_TRUE(gone.exited);
  ProcessCuda zombie = Find(all, 210);
  EXPECT_EQ(zombie.comm, "zombie");
  EXPECT_EQ(zombie.remote_server, "10.0.0.210:12500");
  EXPECT_EQ(Find(all, 211).remote_server, "");
  EXPECT_EQ(Find(all, 212).remote_server, "10.0.0.12:12500");
  TracerHealth h;
  agg.FillHealth(&h);
  EXPECT_EQ(h.malformed_records, 0u);
}

// An ENVIRON record's count says where its environment ends: one beyond the record is malformed.
// An ENVIRON taken by no LIBRARY_OPEN (its open lost) is dropped at the next exec.
TEST_F(AggregatorTest, EnvironRecordsAreBoundedAndForgotten) {
  Aggregator agg(Options(tree_), clock_);
  std::vector<unsigned char> r = Environ(220, 1, {"FLYT_SERVER=10.0.0.9:1"});
  agg.OnRecord(r.data(), offsetof(flyt_trace_environ, text) + 5);  // count beyond the record
  agg.OnRecord(r.data(), offsetof(flyt_trace_environ, text) - 1);  // shorter than its fixed part
  flyt_trace_environ fixed{};
  std::memcpy(&fixed, r.data(), offsetof(flyt_trace_environ, text));
  fixed.bytes = FLYT_TRACE_ENVIRON_BYTES + 1;
  std::memcpy(r.data(), &fixed, offsetof(flyt_trace_environ, text));
  Feed(agg, r);  // a count larger than any environment
  TracerHealth h;
  agg.FillHealth(&h);
  EXPECT_EQ(h.malformed_records, 3u);

  tree_.AddProcess(221, "reexec");
  Feed(agg, Environ(221, 2, {"FLYT_SERVER=10.0.0.9:1"}));
  flyt_trace_path exec{};
  exec.h = Header(FLYT_EV_EXEC, FLYT_FN_NONE, 221, 3);  // before its open: that environment is stale
  Feed(agg, exec);
  Feed(agg, LibraryOpen(221, 4, "/opt/flyt/lib/libcudart.so.13"));
  Feed(agg, Launch(221, 5, 0xA0));
  EXPECT_EQ(Find(agg.Processes(), 221).remote_server, "");
}

// flyt-trace --raw shows an ENVIRON record's size and the variables the tracer reads, never the
// rest of a program's environment.
TEST(RawRecordTest, EnvironShowsOnlyTheVariablesTheTracerReads) {
  std::vector<unsigned char> r =
      Environ(230, 1, {"API_TOKEN=hunter2", "FLYT_SERVER=10.0.0.1:2", "CUDA_VISIBLE_DEVICES=3"});
  nlohmann::json j = RecordToJson(r.data(), r.size());
  EXPECT_EQ(j["kind"], "environ");
  EXPECT_EQ(j["environment"],
            nlohmann::json({{"FLYT_SERVER", "10.0.0.1:2"}, {"CUDA_VISIBLE_DEVICES", "3"}}));
  EXPECT_EQ(j.dump().find("hunter2"), std::string::npos);
  EXPECT_TRUE(RecordToJson(r.data(), 20).value("malformed", false));
}

TEST_F(AggregatorTest, NvmlCrossCheck) {
  Aggregator agg(Options(tree_), clock_);
  agg.SetGpus(TwoGpus());
  Feed(agg, Launch(kPid, 1, 0xA0));  // traced: device 0 = GPU-bbbb (fastest first)
  tree_.AddProcess(300, "agrees");
  Feed(agg, Launch(300, 1, 0xA0));
  agg.SetNvmlProcesses({{kPid, {"GPU-aaaa-0000"}}, {300, {"GPU-bbbb-1111"}}});
  std::vector<ProcessCuda> all = agg.Processes();
  ProcessCuda p = Find(all, kPid);
  EXPECT_EQ(p.gpu_uuid, "GPU-aaaa-0000");
  EXPECT_TRUE(p.gpu_from_nvml);
  EXPECT_TRUE(p.nvml_mismatch);
  EXPECT_FALSE(Find(all, 300).nvml_mismatch);
  TracerHealth h;
  agg.FillHealth(&h);
  EXPECT_EQ(h.nvml_mismatches, 1u);
}

TEST_F(AggregatorTest, ContainerFromCgroupId) {
  std::string id(64, 'a');
  uint64_t in_docker = tree_.AddCgroup("system.slice/docker-" + id + ".scope");
  uint64_t outside = tree_.AddCgroup("user.slice/user-1000.slice/session-2.scope");
  Aggregator agg(Options(tree_), clock_);
  flyt_trace_launch a = Launch(kPid, 1, 0xA0);
  a.h.cgroup_id = in_docker;
  Feed(agg, a);
  tree_.AddProcess(501, "same");
  flyt_trace_launch b = Launch(501, 1, 0xA0);
  b.h.cgroup_id = in_docker;
  Feed(agg, b);
  tree_.AddProcess(502, "host");
  flyt_trace_launch c = Launch(502, 1, 0xA0);
  c.h.cgroup_id = outside;
  Feed(agg, c);
  std::vector<ProcessCuda> all = agg.Processes();
  EXPECT_EQ(Find(all, kPid).container_id, id);
  EXPECT_EQ(Find(all, kPid).cgroup_id, in_docker);
  EXPECT_EQ(Find(all, 501).container_id, id);
  EXPECT_EQ(Find(all, 502).container_id, "");
}

TEST_F(AggregatorTest, ProcessGoneFromProcEndsWithoutExitCode) {
  Aggregator agg(Options(tree_), clock_);
  Feed(agg, Alloc(kPid, 1, 0x1000, 64));
  agg.OnDrainEnd();
  tree_.RemoveProcess(kPid);
  clock_.Advance(std::chrono::seconds(1));
  agg.OnDrainEnd();  // not yet time to check
  clock_.Advance(std::chrono::seconds(2));
  agg.OnDrainEnd();  // missing once: its EXIT may still be in the ring
  EXPECT_FALSE(Find(agg.Processes(), kPid).exited);
  clock_.Advance(std::chrono::seconds(2));
  agg.OnDrainEnd();
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_TRUE(p.exited);
  EXPECT_FALSE(p.exit_code.has_value());
  EXPECT_EQ(p.leaked_bytes, 64u);
}

// A program gone from /proc before anything of it was read is named by its exec, as comm would.
TEST_F(AggregatorTest, AProcessGoneFromProcIsNamedByItsExec) {
  Aggregator agg(Options(tree_), clock_);
  flyt_trace_path exec{};
  exec.h = Header(FLYT_EV_EXEC, FLYT_FN_NONE, 301, 1);
  std::strcpy(exec.path, "/work/build/tests/trace/trace_kernels_static");
  Feed(agg, exec);
  Feed(agg, Launch(301, 2, 0xA0));  // /proc/301 never existed in this tree
  EXPECT_EQ(Find(agg.Processes(), 301).comm, "trace_kernels_s");
}

TEST_F(AggregatorTest, AttachedLateAndExec) {
  Aggregator agg(Options(tree_), clock_);
  agg.OnAttachedLate(kPid, "/usr/local/cuda/lib64/libcudart.so.13");
  Feed(agg, Free(kPid, 1, 0x1000));  // allocated before the probe
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_TRUE(p.attached_late);
  EXPECT_EQ(p.library, "/usr/local/cuda/lib64/libcudart.so.13");
  EXPECT_EQ(p.unknown_frees, 1u);
  flyt_trace_path exec{};
  exec.h = Header(FLYT_EV_EXEC, FLYT_FN_NONE, kPid, 2);
  Feed(agg, exec);
  Feed(agg, Launch(kPid, 3 * kSecond, 0xA0));  // a new program in the same pid
  std::vector<ProcessCuda> all = agg.Processes();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_FALSE(all[0].exited);
  EXPECT_FALSE(all[0].attached_late);
  EXPECT_EQ(all[0].launches, 1u);
  EXPECT_TRUE(all[1].exited);
}

TEST_F(AggregatorTest, FailedGetKernelOfAStubIsNotAFailureOfItsOwn) {
  Aggregator agg(Options(tree_), clock_);
  flyt_trace_get_kernel g = GetKernel(kPid, 1, 0, 0xA0);
  g.h.rc = 35;  // cudaErrorInsufficientDriver
  Feed(agg, g);
  Feed(agg, Launch(kPid, 2, 0, 0, {1, 1, 1}, {1, 1, 1}, 0, FLYT_FN___cudaLaunchKernel, 35));
  g.h.func = FLYT_FN_cudaGetKernel;  // the program's own call
  Feed(agg, g);
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_EQ(p.failures, (std::map<std::string, uint64_t>{{"cudaErrorInsufficientDriver", 2}}));
}

TEST(StubSymbolsTest, ParseMapsKeepsExecutableFileMappings) {
  std::vector<FileMapping> m = ParseMaps(
      "55d0c0000000-55d0c0001000 r--p 00000000 08:01 123   /opt/app/train\n"
      "55d0c0001000-55d0c0005000 r-xp 00001000 08:01 123   /opt/app/train\n"
      "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n"
      "7f0000100000-7f0000200000 r-xp 00000000 00:00 0   [vdso]\n"
      "7f0000200000-7f0000300000 r-xp 00010000 08:01 9   /old/lib.so (deleted)\n"
      "7f0000300000-7f0000400000 r-xp 00002000 08:01 77  /usr/lib/a b.so\n"
      "garbage\n");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].start, 0x55d0c0001000u);
  EXPECT_EQ(m[0].end, 0x55d0c0005000u);
  EXPECT_EQ(m[0].offset, 0x1000u);
  EXPECT_EQ(m[0].path, "/opt/app/train");
  EXPECT_EQ(m[1].path, "/usr/lib/a b.so");
}

TEST(StubSymbolsTest, StubAddressToItsSymbolThroughTheMappedFile) {
  Result<std::string> maps = ReadFile("/proc/self/maps", 4u << 20);
  ASSERT_TRUE(maps.ok());
  std::vector<FileMapping> mappings = ParseMaps(*maps);
  StubSymbolizer symbols;
  auto axpy = reinterpret_cast<uint64_t>(&late_stub::Axpy);
  std::optional<std::string> name = symbols.Lookup(mappings, axpy);
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(*name, "_ZN9late_stub4AxpyEfPKfPfi");
  EXPECT_EQ(Demangle(*name), "late_stub::Axpy(float, float const*, float*, int)");
  EXPECT_EQ(symbols.Lookup(mappings, axpy), name);  // cached
  EXPECT_FALSE(symbols.Lookup(mappings, axpy + 1).has_value());  // not a function's start
  EXPECT_FALSE(symbols.Lookup(mappings, 0x10).has_value());       // not mapped
}

// A process attached late: its stubs were registered before the probes; the launches' stubs (a
// kernel handle from __cudaGetKernel, or the stub itself) are named through its mappings.
TEST_F(AggregatorTest, AttachedLateKernelNamesFromTheMappedFilesSymbols) {
  Result<std::string> maps = ReadFile("/proc/self/maps", 4u << 20);
  ASSERT_TRUE(maps.ok());
  std::ofstream(tree_.proc() + "/" + std::to_string(kPid) + "/maps") << *maps;
  Aggregator agg(Options(tree_), clock_);
  agg.OnAttachedLate(kPid, "/usr/local/cuda/lib64/libcudart.so.13");
  auto axpy = reinterpret_cast<uint64_t>(&late_stub::Axpy);
  auto scale = reinterpret_cast<uint64_t>(&late_stub::Scale<float, 4>);
  Feed(agg, GetKernel(kPid, 1, 0xC0FFEE, axpy));
  for (int i = 0; i < 3; ++i) {
    Feed(agg, Launch(kPid, 2, 0xC0FFEE, 0, {1, 1, 1}, {1, 1, 1}, 0, FLYT_FN___cudaLaunchKernel));
  }
  Feed(agg, Launch(kPid, 3, scale, 0, {2, 1, 1}, {1, 1, 1}, 0, FLYT_FN_cudaLaunchKernelExC));
  Feed(agg, Launch(kPid, 4, 0xBAD0, 0, {1, 1, 1}, {1, 1, 1}, 0, FLYT_FN___cudaLaunchKernel));
  ProcessCuda p = Find(agg.Processes(), kPid);
  ASSERT_EQ(p.top_kernels.size(), 3u);
  EXPECT_EQ(p.top_kernels[0].name, "late_stub::Axpy(float, float const*, float*, int)");
  EXPECT_EQ(p.top_kernels[0].launches, 3u);
  // Then, one launch each (ties by name): a handle whose stub was never seen, and the ExC one.
  EXPECT_EQ(p.top_kernels[1].name, "unknown");
  EXPECT_EQ(p.top_kernels[2].name, "void late_stub::Scale<float, 4>(float*, float, int)");
}

// A process traced from its start whose registered names the BPF side could not read (the
// strings' page not yet in memory: the record's name is empty): each stub is named from its
// symbol, through the mappings read then; a name that was read is taken as it is.
TEST_F(AggregatorTest, RegisteredNamesThatCouldNotBeReadComeFromTheStubsSymbols) {
  Result<std::string> maps = ReadFile("/proc/self/maps", 4u << 20);
  ASSERT_TRUE(maps.ok());
  std::ofstream(tree_.proc() + "/" + std::to_string(kPid) + "/maps") << *maps;
  Aggregator agg(Options(tree_), clock_);
  auto axpy = reinterpret_cast<uint64_t>(&late_stub::Axpy);
  auto scale = reinterpret_cast<uint64_t>(&late_stub::Scale<float, 4>);
  Feed(agg, Name(kPid, 1, axpy, ""));
  Feed(agg, Name(kPid, 2, scale, "_Z7Renamedv"));
  Feed(agg, GetKernel(kPid, 3, 0xC0FFEE, axpy));
  Feed(agg, Launch(kPid, 4, 0xC0FFEE, 0, {1, 1, 1}, {1, 1, 1}, 0, FLYT_FN___cudaLaunchKernel));
  Feed(agg, Launch(kPid, 5, 0xC0FFEE, 0, {1, 1, 1}, {1, 1, 1}, 0, FLYT_FN___cudaLaunchKernel));
  Feed(agg, Launch(kPid, 6, scale, 0, {1, 1, 1}, {1, 1, 1}, 0, FLYT_FN_cudaLaunchKernel));
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_FALSE(p.attached_late);
  ASSERT_EQ(p.top_kernels.size(), 2u);
  EXPECT_EQ(p.top_kernels[0].name, "late_stub::Axpy(float, float const*, float*, int)");
  EXPECT_EQ(p.top_kernels[0].launches, 2u);
  EXPECT_EQ(p.top_kernels[1].name, "Renamed()");
}

TEST_F(AggregatorTest, LateAttachReadsTheCgroupAndStragglersAfterExitAreNotANewProcess) {
  std::string id(64, 'd');
  std::string path = "/system.slice/docker-" + id + ".scope";
  uint64_t cgroup_id = tree_.AddCgroup(path);
  std::ofstream(tree_.proc() + "/" + std::to_string(kPid) + "/cgroup") << "0::" << path << "\n";
  Aggregator agg(Options(tree_), clock_);
  agg.OnAttachedLate(kPid, "/opt/app/libcudart-1a2b3c4d.so.12");
  ProcessCuda p = Find(agg.Processes(), kPid);
  EXPECT_EQ(p.container_id, id);
  EXPECT_EQ(p.cgroup_id, cgroup_id);
  Feed(agg, Exit(kPid, 10 * kSecond, 0));
  Feed(agg, Launch(kPid, 10 * kSecond + 5, 0xA0));  // another thread's last call
  std::vector<ProcessCuda> all = agg.Processes();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_TRUE(all[0].exited);
}

TEST_F(AggregatorTest, JsonShape) {
  Aggregator agg(Options(tree_), clock_);
  agg.SetGpus(TwoGpus());
  Feed(agg, Name(kPid, 1, 0xA0, "_Z5scalePfi"));
  Feed(agg, Launch(kPid, kSecond, 0xA0, 0, {4, 2, 1}, {128, 1, 1}));
  Feed(agg, Alloc(kPid, kSecond, 0x1000, 10, FLYT_MEM_DEVICE, 2));
  nlohmann::json j = ToJson(Find(agg.Processes(), kPid));
  EXPECT_EQ(j["pid"], kPid);
  EXPECT_EQ(j["gpu_uuid"], "GPU-bbbb-1111");
  EXPECT_EQ(j["first_seen"], "2026-01-01T00:00:00.000Z");
  EXPECT_EQ(j["last_seen"], "2026-01-01T00:00:01.000Z");
  EXPECT_TRUE(j["exit_code"].is_null());
  EXPECT_EQ(j["failures"]["cudaErrorMemoryAllocation"], 1);
  EXPECT_EQ(j["copies"]["host_to_device"], 0);
  EXPECT_EQ(j["top_kernels"][0]["name"], "scale(float*, int)");
  EXPECT_EQ(j["top_kernels"][0]["shapes"][0]["grid"], nlohmann::json::array({4, 2, 1}));
  EXPECT_EQ(j["top_kernels"][0]["shapes"][0]["block"], nlohmann::json::array({128, 1, 1}));
  EXPECT_EQ(j["top_kernels"][0]["shapes"][0]["shared_bytes"], 0);
  EXPECT_EQ(j["top_kernels"][0]["shapes"][0]["launches"], 1);
  EXPECT_EQ(j["streams"][0]["handle"], 0);
  for (const char* key : {"launches_per_second", "busy_seconds", "core_usage",
                          "device_memory_peak_bytes", "leaked_bytes", "container_id"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  Feed(agg, Exit(kPid, 2 * kSecond, 0));
  EXPECT_EQ(ToJson(Find(agg.Processes(), kPid))["exit_code"], 0);

  TracerHealth h;
  h.unprobeable.push_back({7, "/opt/app", "stripped static binary"});
  agg.FillHealth(&h);
  nlohmann::json hj = ToJson(h);
  EXPECT_EQ(hj["unprobeable"][0]["pid"], 7);
  EXPECT_EQ(hj["unprobeable"][0]["executable"], "/opt/app");
  EXPECT_EQ(hj["unprobeable"][0]["reason"], "stripped static binary");
  EXPECT_EQ(hj["processes_traced"], 1);
  EXPECT_EQ(hj["malformed_records"], 0);
  EXPECT_TRUE(hj["attach_failures"].is_object());
}

}  // namespace
}  // namespace flyt::trace
