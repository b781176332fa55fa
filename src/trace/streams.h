// The span accounting of one CUDA stream, and the sliding window the rates are computed over.
//
// A stream's enqueue→sync span opens with the first kernel or copy enqueued after its last sync
// and closes when a call that synchronises it returns (stream, device or context sync, an event
// sync or successful event query, a blocking host↔device cudaMemcpy). Busy time is the sum of the spans;
// core usage is, per span, min(grid × block threads of the widest launch in it, the GPU's cores)
// × the span's length, added to the window second by second. An event sync closes the span only
// up to the work enqueued before the event was recorded: what was enqueued after stays open (it
// reopens at the sync's return, so a stream's spans never overlap). All times are the records'
// CLOCK_MONOTONIC nanoseconds.
//
// Plain values, not thread-safe: the aggregator holds its lock around them.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "trace/stats.h"

namespace flyt::trace {

// Launches and thread-seconds per second of monotonic time, over the last `seconds` seconds.
class RateWindow {
 public:
  explicit RateWindow(uint32_t seconds);
  void AddLaunch(uint64_t ts_ns);
  // `threads` busy from start_ns to end_ns (spread over the seconds the span covers).
  void AddThreadSeconds(uint64_t start_ns, uint64_t end_ns, double threads);
  // Per second, averaged over the window ending at now_ns.
  double LaunchesPerSecond(uint64_t now_ns) const;
  double CoreUsage(uint64_t now_ns) const;

 private:
  struct Bucket {
    int64_t second = -1;
    uint64_t launches = 0;
    double thread_seconds = 0;
  };
  Bucket& At(int64_t second);
  bool InWindow(const Bucket& b, uint64_t now_ns) const;

  uint32_t seconds_;
  std::vector<Bucket> buckets_;  // seconds_ + 1, indexed by second modulo the size
};

class StreamState {
 public:
  StreamState() = default;
  StreamState(uint64_t handle, bool non_blocking, bool per_thread, uint32_t thread);

  // A kernel (threads = its grid × block, clamped by the caller) or a copy/memset (threads 0)
  // enqueued at ts_ns.
  void Enqueue(uint64_t ts_ns, uint64_t threads);
  // The stream is synchronised up to now (end_ns): closes the open span. Returns its length.
  // `cores` clamps the widest launch for core usage (absent: no thread-seconds are added).
  void SyncAll(uint64_t end_ns, std::optional<uint32_t> cores, RateWindow* rates);
  // Synchronised up to an event recorded at record_ns (cudaEventSynchronize/Query).
  void SyncUpTo(uint64_t record_ns, uint64_t end_ns, std::optional<uint32_t> cores,
                RateWindow* rates);
  // A call that names this stream synchronised it (stats().syncs). The syncs that reach it through
  // another stream or the device (a legacy-stream sync reaching a blocking stream, a device or
  // context sync) close its span without counting here: they count for the process.
  void CountSync() { ++stats_.syncs; }
  // An event was recorded on this stream at ts_ns.
  void MarkEvent(uint64_t ts_ns);

  bool non_blocking() const { return stats_.non_blocking; }
  bool per_thread() const { return stats_.per_thread; }
  StreamStats& stats() { return stats_; }
  const StreamStats& stats() const { return stats_; }
  // Span seconds closed by the last sync (the caller adds them to its totals).
  double TakeClosedSeconds();

 private:
  struct Mark {
    uint64_t record_ns = 0;
    uint64_t first_after_ns = 0;  // first enqueue after the record (0: none yet)
    uint64_t widest_after = 0;    // widest launch after it
  };
  static constexpr size_t kMaxMarks = 16;

  void Close(uint64_t start_ns, uint64_t end_ns, uint64_t widest, std::optional<uint32_t> cores,
             RateWindow* rates);

  StreamStats stats_;
  uint64_t open_since_ns_ = 0;  // 0: no span open
  uint64_t widest_ = 0;         // threads of the widest launch of the open span
  std::deque<Mark> marks_;
  double closed_seconds_ = 0;
};

}  // namespace flyt::trace
