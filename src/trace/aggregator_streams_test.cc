// Streams and spans: what each kind of sync closes (stream, legacy default stream with the
// blocking streams, per-thread default streams, device sync, events, blocking cudaMemcpy), and
// the rates over the window. Times are the records' own timestamps; the FakeClock only says "now".
#include <gtest/gtest.h>

#include "trace/aggregator.h"
#include "trace/aggregator_testing.h"

namespace flyt::trace {
namespace {

using namespace testing;  // NOLINT: the record builders

constexpr uint32_t kStreamsPid = 777;
constexpr uint64_t kS = 0x5000;  // a blocking stream
constexpr uint64_t kN = 0x6000;  // a non-blocking stream

double Busy(const ProcessCuda& p, uint64_t handle, bool per_thread = false, uint32_t thread = 0) {
  const StreamStats* s = FindStream(p, handle, per_thread, thread);
  EXPECT_NE(s, nullptr) << "stream " << handle << " thread " << thread;
  return s == nullptr ? -1 : s->busy_seconds;
}

class StreamsTest : public ::testing::Test {
 protected:
  StreamsTest() : agg_(Options(tree_), clock_) {
    Feed(agg_, StreamCreate(kStreamsPid, 0, kS, 0));
    Feed(agg_, StreamCreate(kStreamsPid, 0, kN, 1));
  }
  ProcessCuda Get() { return Find(agg_.Processes(), kStreamsPid); }
  TempTree tree_;
  FakeClock clock_;
  Aggregator agg_;
};

TEST_F(StreamsTest, StreamSyncClosesTheSpanFromTheFirstEnqueue) {
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, kS));
  Feed(agg_, Launch(kStreamsPid, 2 * kSecond, 0xA0, kS));
  Feed(agg_, Sync(kStreamsPid, 3 * kSecond, FLYT_FN_cudaStreamSynchronize, kS));
  Feed(agg_, Sync(kStreamsPid, 4 * kSecond, FLYT_FN_cudaStreamSynchronize, kS));  // nothing open
  ProcessCuda p = Get();
  EXPECT_DOUBLE_EQ(Busy(p, kS), 2.0);
  EXPECT_DOUBLE_EQ(p.busy_seconds, 2.0);
  EXPECT_EQ(p.syncs, 2u);
  EXPECT_EQ(FindStream(p, kS)->syncs, 2u);
  EXPECT_EQ(FindStream(p, kS)->launches, 2u);
  EXPECT_FALSE(FindStream(p, kS)->non_blocking);
  EXPECT_TRUE(FindStream(p, kN)->non_blocking);
}

TEST_F(StreamsTest, LegacySyncReachesBlockingStreamsOnly) {
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, kS));
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, kN));
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, 0));
  Feed(agg_, Sync(kStreamsPid, 2 * kSecond, FLYT_FN_cudaStreamSynchronize, 0));
  ProcessCuda p = Get();
  EXPECT_DOUBLE_EQ(Busy(p, 0), 1.0);
  EXPECT_DOUBLE_EQ(Busy(p, kS), 1.0);
  EXPECT_DOUBLE_EQ(Busy(p, kN), 0.0);  // still running as far as anyone knows
  Feed(agg_, Sync(kStreamsPid, 4 * kSecond, FLYT_FN_cudaDeviceSynchronize));
  p = Get();
  EXPECT_DOUBLE_EQ(Busy(p, kN), 3.0);
  EXPECT_DOUBLE_EQ(p.busy_seconds, 5.0);
  EXPECT_EQ(p.syncs, 2u);
}

TEST_F(StreamsTest, PerThreadDefaultStreamsArePerThread) {
  // tid 7 through a _ptsz entry point with stream 0, tid 8 through cudaStreamPerThread (0x2).
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, 0, {1, 1, 1}, {1, 1, 1}, 7,
                    FLYT_FN_cudaLaunchKernel_ptsz));
  flyt_trace_launch l = Launch(kStreamsPid, 1 * kSecond, 0xA0, 0, {1, 1, 1}, {1, 1, 1}, 7,
                               FLYT_FN_cudaLaunchKernel_ptsz);
  l.h.flags = FLYT_F_PER_THREAD;
  Feed(agg_, l);
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, 0x2, {1, 1, 1}, {1, 1, 1}, 8));
  flyt_trace_sync s = Sync(kStreamsPid, 2 * kSecond, FLYT_FN_cudaStreamSynchronize_ptsz, 0, 7);
  s.h.flags = FLYT_F_PER_THREAD;
  Feed(agg_, s);
  ProcessCuda p = Get();
  EXPECT_DOUBLE_EQ(Busy(p, 0, true, 7), 1.0);
  EXPECT_DOUBLE_EQ(Busy(p, 0, true, 8), 0.0);
  EXPECT_DOUBLE_EQ(Busy(p, 0), 0.0);  // the first launch had no flag: the legacy stream, open
  EXPECT_EQ(FindStream(p, 0, true, 7)->launches, 1u);
  // A legacy sync also reaches the per-thread streams (they are blocking streams).
  Feed(agg_, Sync(kStreamsPid, 3 * kSecond, FLYT_FN_cuStreamSynchronize, 0x1, 9));
  p = Get();
  EXPECT_DOUBLE_EQ(Busy(p, 0, true, 8), 2.0);
  EXPECT_DOUBLE_EQ(Busy(p, 0), 2.0);
}

TEST_F(StreamsTest, EventSyncClosesOnlyWhatWasBeforeTheEvent) {
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, kS));
  Feed(agg_, EventRecord(kStreamsPid, 2 * kSecond, 0xE1, kS));
  Feed(agg_, Launch(kStreamsPid, 3 * kSecond, 0xA0, kS));
  Feed(agg_, Sync(kStreamsPid, 4 * kSecond, FLYT_FN_cudaEventSynchronize, 0xE1));
  ProcessCuda p = Get();
  EXPECT_DOUBLE_EQ(Busy(p, kS), 3.0);
  // The launch at 3 s is still open; it counts from the event's sync on (spans never overlap).
  Feed(agg_, Sync(kStreamsPid, 6 * kSecond, FLYT_FN_cudaStreamSynchronize, kS));
  p = Get();
  EXPECT_DOUBLE_EQ(Busy(p, kS), 5.0);
  EXPECT_EQ(p.syncs, 2u);
}

TEST_F(StreamsTest, EventQueryCountsOnlyWhenReady) {
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, kS));
  Feed(agg_, EventRecord(kStreamsPid, 1 * kSecond, 0xE1, kS));
  Feed(agg_, Sync(kStreamsPid, 2 * kSecond, FLYT_FN_cudaEventQuery, 0xE1, 0, 600));  // not ready
  ProcessCuda p = Get();
  EXPECT_TRUE(p.failures.empty());
  EXPECT_EQ(p.syncs, 0u);
  EXPECT_DOUBLE_EQ(Busy(p, kS), 0.0);
  Feed(agg_, Sync(kStreamsPid, 5 * kSecond, FLYT_FN_cudaEventQuery, 0xE1));
  p = Get();
  EXPECT_EQ(p.syncs, 1u);
  EXPECT_DOUBLE_EQ(Busy(p, kS), 4.0);
  // An event recorded on a stream that was synchronised since: nothing left to close.
  Feed(agg_, Sync(kStreamsPid, 6 * kSecond, FLYT_FN_cudaEventSynchronize, 0xE1));
  EXPECT_DOUBLE_EQ(Busy(Get(), kS), 4.0);
}

TEST_F(StreamsTest, BlockingMemcpyIsASyncOfItsStream) {
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, kS));
  flyt_trace_copy c = Copy(kStreamsPid, 3 * kSecond, 0x1, 0x2, 64, FLYT_COPY_HOST_TO_DEVICE, 0,
                           FLYT_FN_cudaMemcpy);
  c.h.entry_ns = 2 * kSecond;
  Feed(agg_, c);
  ProcessCuda p = Get();
  EXPECT_DOUBLE_EQ(Busy(p, 0), 1.0);   // the copy itself, entry to return
  EXPECT_DOUBLE_EQ(Busy(p, kS), 2.0);  // a blocking stream, reached by the legacy sync
  EXPECT_EQ(p.syncs, 1u);
  // The _ptds twin syncs only the thread's per-thread stream.
  Feed(agg_, Launch(kStreamsPid, 4 * kSecond, 0xA0, kS));
  flyt_trace_copy d = Copy(kStreamsPid, 6 * kSecond, 0x1, 0x2, 64, FLYT_COPY_HOST_TO_DEVICE, 0,
                           FLYT_FN_cudaMemcpy_ptds, 5);
  d.h.entry_ns = 5 * kSecond;
  d.h.flags = FLYT_F_PER_THREAD;
  Feed(agg_, d);
  p = Get();
  EXPECT_DOUBLE_EQ(Busy(p, 0, true, 5), 1.0);
  EXPECT_DOUBLE_EQ(Busy(p, kS), 2.0);  // still open
  // An async copy is enqueued, not a sync.
  Feed(agg_, Copy(kStreamsPid, 7 * kSecond, 0x1, 0x2, 64, FLYT_COPY_HOST_TO_DEVICE, kN));
  EXPECT_EQ(Get().syncs, 2u);
  EXPECT_EQ(FindStream(Get(), 0)->syncs, 1u);
}

TEST_F(StreamsTest, BlockingMemcpyDeviceToDeviceOrHostToHostIsNoSync) {
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, 0));
  Feed(agg_, Copy(kStreamsPid, 2 * kSecond, 0x1, 0x2, 64, FLYT_COPY_DEVICE_TO_DEVICE, 0,
                  FLYT_FN_cudaMemcpy));
  Feed(agg_, Copy(kStreamsPid, 2 * kSecond, 0x1, 0x2, 64, FLYT_COPY_HOST_TO_HOST, 0,
                  FLYT_FN_cudaMemcpy));
  // cudaMemcpyDefault between two host pointers (no allocation known): host to host.
  Feed(agg_, Copy(kStreamsPid, 2 * kSecond, 0x1, 0x2, 64, FLYT_COPY_DEFAULT, 0, FLYT_FN_cudaMemcpy));
  ProcessCuda p = Get();
  EXPECT_EQ(p.syncs, 0u);
  EXPECT_EQ(FindStream(p, 0)->syncs, 0u);
  EXPECT_DOUBLE_EQ(Busy(p, 0), 0.0);  // still open
  EXPECT_EQ(p.copies.device_to_device, 64u);
  EXPECT_EQ(p.copies.host_to_host, 128u);
  // cudaMemcpyDefault into a device allocation: host to device, a sync.
  Feed(agg_, Alloc(kStreamsPid, 3 * kSecond, 0xD000, 4096));
  Feed(agg_, Copy(kStreamsPid, 3 * kSecond, 0xD000, 0x2, 64, FLYT_COPY_DEFAULT, 0, FLYT_FN_cudaMemcpy));
  p = Get();
  EXPECT_EQ(p.syncs, 1u);
  EXPECT_EQ(p.copies.host_to_device, 64u);
  EXPECT_DOUBLE_EQ(Busy(p, 0), 2.0);
}

TEST_F(StreamsTest, DestroyedStreamStaysListedWithItsFigures) {
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, kS));
  Feed(agg_, Sync(kStreamsPid, 2 * kSecond, FLYT_FN_cudaStreamSynchronize, kS));
  Feed(agg_, StreamCreate(kStreamsPid, 3 * kSecond, kS, 0, /*create=*/false));
  ProcessCuda p = Get();
  const StreamStats* s = FindStream(p, kS);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->destroyed);
  EXPECT_EQ(s->launches, 1u);
  EXPECT_EQ(s->syncs, 1u);
  EXPECT_DOUBLE_EQ(s->busy_seconds, 1.0);
  EXPECT_DOUBLE_EQ(p.busy_seconds, 1.0);
  // The handle again, non-blocking now: a new entry beside the destroyed one.
  Feed(agg_, StreamCreate(kStreamsPid, 4 * kSecond, kS, 1));
  Feed(agg_, Launch(kStreamsPid, 5 * kSecond, 0xA0, kS));
  p = Get();
  int live = 0, destroyed = 0;
  for (const StreamStats& st : p.streams) {
    if (st.handle != kS) continue;
    if (st.destroyed) {
      ++destroyed;
      EXPECT_EQ(st.launches, 1u);
    } else {
      ++live;
      EXPECT_TRUE(st.non_blocking);
      EXPECT_EQ(st.launches, 1u);
    }
  }
  EXPECT_EQ(live, 1);
  EXPECT_EQ(destroyed, 1);
}

TEST_F(StreamsTest, DriverStreamsAndTheRuntimesNestedCreateAreOneStream) {
  // cudaStreamCreateWithFlags calling cuStreamCreate: the driver's record first, then the
  // runtime's, for the same handle.
  constexpr uint64_t kD = 0x7000;
  flyt_trace_stream inner = StreamCreate(kStreamsPid, 1, kD, 1);
  inner.h.func = FLYT_FN_cuStreamCreate;
  Feed(agg_, inner);
  Feed(agg_, StreamCreate(kStreamsPid, 2, kD, 1));
  Feed(agg_, Launch(kStreamsPid, 3, 0xA0, kD));
  ProcessCuda p = Get();
  int entries = 0;
  for (const StreamStats& s : p.streams) entries += s.handle == kD;
  EXPECT_EQ(entries, 1);
  EXPECT_TRUE(FindStream(p, kD)->non_blocking);
  EXPECT_EQ(FindStream(p, kD)->launches, 1u);
  // The driver's destroy, nested in the runtime's: one destroyed entry.
  flyt_trace_stream destroy = StreamCreate(kStreamsPid, 4, kD, 0, /*create=*/false);
  destroy.h.func = FLYT_FN_cuStreamDestroy_v2;
  Feed(agg_, destroy);
  Feed(agg_, StreamCreate(kStreamsPid, 5, kD, 0, /*create=*/false));
  p = Get();
  entries = 0;
  for (const StreamStats& s : p.streams) entries += s.handle == kD;
  EXPECT_EQ(entries, 1);
  EXPECT_TRUE(FindStream(p, kD)->destroyed);
  TracerHealth h;
  agg_.FillHealth(&h);
  EXPECT_EQ(h.malformed_records, 0u);
}

TEST(StreamsBoundTest, DestroyedStreamsKeptAreBounded) {
  TempTree tree;
  FakeClock clock;
  TraceOptions o = Options(tree);
  o.max_streams_per_process = 3;
  Aggregator agg(o, clock);
  for (uint64_t i = 1; i <= 10; ++i) {
    Feed(agg, StreamCreate(kStreamsPid, i * kSecond, 0x1000 * i, 0));
    Feed(agg, Launch(kStreamsPid, i * kSecond, 0xA0, 0x1000 * i));
    Feed(agg, StreamCreate(kStreamsPid, i * kSecond, 0x1000 * i, 0, /*create=*/false));
  }
  ProcessCuda p = Find(agg.Processes(), kStreamsPid);
  EXPECT_EQ(p.launches, 10u);
  ASSERT_EQ(p.streams.size(), 3u);  // the newest three
  EXPECT_EQ(p.streams[0].handle, 0x8000u);
  EXPECT_EQ(p.streams[2].handle, 0xA000u);
}

TEST_F(StreamsTest, StreamSyncsCountOnlyTheCallsThatNameTheStream) {
  // trace_kernels' pattern: a stream sync of each stream, an event sync and query on the
  // non-blocking one, a legacy sync and two device syncs.
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, kS));
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, kN));
  Feed(agg_, Launch(kStreamsPid, 1 * kSecond, 0xA0, 0));
  Feed(agg_, Sync(kStreamsPid, 2 * kSecond, FLYT_FN_cudaStreamSynchronize, kS));
  Feed(agg_, EventRecord(kStreamsPid, 2 * kSecond, 0xE1, kN));
  Feed(agg_, Sync(kStreamsPid, 3 * kSecond, FLYT_FN_cudaEventSynchronize, 0xE1));
  Feed(agg_, Sync(kStreamsPid, 3 * kSecond, FLYT_FN_cudaEventQuery, 0xE1));
  Feed(agg_, Sync(kStreamsPid, 4 * kSecond, FLYT_FN_cudaStreamSynchronize, kN));
  Feed(agg_, Sync(kStreamsPid, 4 * kSecond, FLYT_FN_cudaStreamSynchronize, 0));
  Feed(agg_, Sync(kStreamsPid, 5 * kSecond, FLYT_FN_cudaDeviceSynchronize));
  Feed(agg_, Sync(kStreamsPid, 5 * kSecond, FLYT_FN_cuCtxSynchronize));
  ProcessCuda p = Get();
  EXPECT_EQ(p.syncs, 7u);
  EXPECT_EQ(FindStream(p, 0)->syncs, 1u);
  EXPECT_EQ(FindStream(p, kS)->syncs, 1u);  // not the legacy sync, not the device syncs
  EXPECT_EQ(FindStream(p, kN)->syncs, 3u);
}

TEST(RatesTest, LaunchesPerSecondAndCoreUsageOverTheWindow) {
  TempTree tree;
  FakeClock clock;
  TraceOptions o = Options(tree);
  o.rate_window_seconds = 10;
  Aggregator agg(o, clock);
  GpuIdentity gpu;
  gpu.uuid = "GPU-x";
  gpu.cores = 1000;
  agg.SetGpus({gpu});
  // 1024 threads (clamped to the GPU's 1000 cores) busy for 2 s; a 64-thread launch in the same
  // span does not widen it.
  Feed(agg, Launch(kStreamsPid, 100 * kSecond, 0xA0, 0, {4, 1, 1}, {256, 1, 1}));
  Feed(agg, Launch(kStreamsPid, 101 * kSecond, 0xA0, 0, {1, 1, 1}, {64, 1, 1}));
  Feed(agg, Sync(kStreamsPid, 102 * kSecond, FLYT_FN_cudaDeviceSynchronize));
  clock.Advance(std::chrono::seconds(105));
  ProcessCuda p = Find(agg.Processes(), kStreamsPid);
  EXPECT_DOUBLE_EQ(p.launches_per_second, 0.2);
  EXPECT_DOUBLE_EQ(p.core_usage, 200.0);  // 2000 thread-seconds over 10 s
  EXPECT_DOUBLE_EQ(p.busy_seconds, 2.0);
  clock.Advance(std::chrono::seconds(10));  // the window has moved past the span
  p = Find(agg.Processes(), kStreamsPid);
  EXPECT_DOUBLE_EQ(p.launches_per_second, 0.0);
  EXPECT_DOUBLE_EQ(p.core_usage, 0.0);
  EXPECT_EQ(p.launches, 2u);
}

}  // namespace
}  // namespace flyt::trace
