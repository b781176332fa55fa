#include "trace/streams.h"

#include <algorithm>

namespace flyt::trace {
namespace {

constexpr uint64_t kNsPerSecond = 1000000000ull;

}  // namespace

RateWindow::RateWindow(uint32_t seconds)
    : seconds_(std::max<uint32_t>(seconds, 1)), buckets_(seconds_ + 1) {}

RateWindow::Bucket& RateWindow::At(int64_t second) {
  Bucket& b = buckets_[static_cast<size_t>(second) % buckets_.size()];
  if (b.second != second) b = Bucket{second, 0, 0};
  return b;
}

bool RateWindow::InWindow(const Bucket& b, uint64_t now_ns) const {
  int64_t now_s = static_cast<int64_t>(now_ns / kNsPerSecond);
  return b.second >= 0 && b.second <= now_s && b.second > now_s - static_cast<int64_t>(seconds_);
}

void RateWindow::AddLaunch(uint64_t ts_ns) { ++At(static_cast<int64_t>(ts_ns / kNsPerSecond)).launches; }

void RateWindow::AddThreadSeconds(uint64_t start_ns, uint64_t end_ns, double threads) {
  if (end_ns <= start_ns || threads <= 0) return;
  // Only the last seconds_ + 1 seconds of the span can still be in a window.
  uint64_t earliest = end_ns / kNsPerSecond >= seconds_
                          ? (end_ns / kNsPerSecond - seconds_) * kNsPerSecond
                          : 0;
  uint64_t from = std::max(start_ns, earliest);
  while (from < end_ns) {
    uint64_t second = from / kNsPerSecond;
    uint64_t to = std::min(end_ns, (second + 1) * kNsPerSecond);
    At(static_cast<int64_t>(second)).thread_seconds +=
        threads * static_cast<double>(to - from) / kNsPerSecond;
    from = to;
  }
}

double RateWindow::LaunchesPerSecond(uint64_t now_ns) const {
  uint64_t sum = 0;
  for (const Bucket& b : buckets_) {
    if (InWindow(b, now_ns)) sum += b.launches;
  }
  return static_cast<double>(sum) / seconds_;
}

double RateWindow::CoreUsage(uint64_t now_ns) const {
  double sum = 0;
  for (const Bucket& b : buckets_) {
    if (InWindow(b, now_ns)) sum += b.thread_seconds;
  }
  return sum / seconds_;
}

StreamState::StreamState(uint64_t handle, bool non_blocking, bool per_thread, uint32_t thread) {
  stats_.handle = handle;
  stats_.non_blocking = non_blocking;
  stats_.per_thread = per_thread;
  stats_.thread = thread;
}

void StreamState::Enqueue(uint64_t ts_ns, uint64_t threads) {
  if (ts_ns == 0) ts_ns = 1;  // 0 means "no span open"
  if (open_since_ns_ == 0) {
    open_since_ns_ = ts_ns;
    widest_ = 0;
  }
  widest_ = std::max(widest_, threads);
  for (Mark& m : marks_) {
    if (ts_ns < m.record_ns) continue;
    if (m.first_after_ns == 0) m.first_after_ns = ts_ns;
    m.widest_after = std::max(m.widest_after, threads);
  }
}

void StreamState::Close(uint64_t start_ns, uint64_t end_ns, uint64_t widest,
                        std::optional<uint32_t> cores, RateWindow* rates) {
  if (end_ns <= start_ns) return;
  double seconds = static_cast<double>(end_ns - start_ns) / kNsPerSecond;
  stats_.busy_seconds += seconds;
  closed_seconds_ += seconds;
  if (cores.has_value() && rates != nullptr) {
    rates->AddThreadSeconds(start_ns, end_ns,
                            static_cast<double>(std::min<uint64_t>(widest, *cores)));
  }
}

void StreamState::SyncAll(uint64_t end_ns, std::optional<uint32_t> cores, RateWindow* rates) {
  if (open_since_ns_ != 0) Close(open_since_ns_, end_ns, widest_, cores, rates);
  open_since_ns_ = 0;
  widest_ = 0;
  marks_.clear();
}

void StreamState::SyncUpTo(uint64_t record_ns, uint64_t end_ns, std::optional<uint32_t> cores,
                           RateWindow* rates) {
  if (open_since_ns_ == 0 || open_since_ns_ > record_ns) {
    return;  // nothing enqueued before the event is still open
  }
  // What was enqueued after the record stays open; it is found in the event's mark (or, for an
  // event older than the marks kept, it is taken as still running: the span stays open).
  auto mark = std::find_if(marks_.begin(), marks_.end(),
                           [&](const Mark& m) { return m.record_ns == record_ns; });
  if (mark == marks_.end()) {
    bool later_mark = std::any_of(marks_.begin(), marks_.end(),
                                  [&](const Mark& m) { return m.record_ns > record_ns; });
    if (later_mark || marks_.size() >= kMaxMarks) return;
    SyncAll(end_ns, cores, rates);  // no mark: nothing was recorded after the event
    return;
  }
  Mark m = *mark;
  Close(open_since_ns_, end_ns, widest_, cores, rates);
  marks_.erase(marks_.begin(), mark + 1);
  if (m.first_after_ns == 0) {
    open_since_ns_ = 0;
    widest_ = 0;
  } else {
    open_since_ns_ = std::max(m.first_after_ns, end_ns);
    widest_ = m.widest_after;
  }
}

void StreamState::MarkEvent(uint64_t ts_ns) {
  if (marks_.size() >= kMaxMarks) marks_.pop_front();
  marks_.push_back(Mark{ts_ns, 0, 0});
}

double StreamState::TakeClosedSeconds() {
  double s = closed_seconds_;
  closed_seconds_ = 0;
  return s;
}

}  // namespace flyt::trace

