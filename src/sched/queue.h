// JobQueue: jobs waiting for GPUs, in priority then FIFO order, placed through the Ledger.
//
// Schedule() is one pass: it tries the waiting jobs in order and grants each the lease it fits
// into now; a job that does not fit does not block smaller jobs behind it (backfill), unless it
// has waited longer than `backfill_hold` — then nothing behind it starts until it does, so a big
// job cannot be starved by a stream of small ones. A job whose deadline has passed leaves the
// queue as timed out, with the reasons of its last refusal. The caller runs a pass whenever
// something may have freed capacity (a release, an expiry, a heartbeat, a submission) and at
// NextDeadline(); nothing here sleeps or polls. Not thread-safe: the owner serialises calls.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sched/ledger.h"

namespace flyt::sched {

struct QueuedJob {
  std::string id;
  int priority = 0;     // higher first
  int64_t order = 0;    // submission order (unique, increasing): FIFO within a priority
  AllocationRequest request;
  std::chrono::system_clock::time_point submitted_at;
  std::chrono::system_clock::time_point deadline;  // fails with a timeout after this
  std::string last_reason;                          // why the last pass could not place it
};

struct QueueOptions {
  std::chrono::seconds backfill_hold{120};  // 0: backfill always
};

struct SchedulePass {
  struct Started {
    std::string job_id;
    Lease lease;
  };
  struct TimedOut {
    std::string job_id;
    std::string reason;
    std::chrono::seconds waited{0};
  };
  std::vector<Started> started;
  std::vector<TimedOut> timed_out;
  size_t tried = 0;  // Allocate calls made (requests at least as hard as a refused one are not)
};

class JobQueue {
 public:
  explicit JobQueue(QueueOptions options = {}) : options_(options) {}

  // Adds or replaces (same id) a waiting job.
  void Add(QueuedJob job);
  bool Remove(const std::string& id);
  bool Contains(const std::string& id) const { return jobs_.count(id) > 0; }
  size_t size() const { return jobs_.size(); }

  // One scheduling pass at `now`. Started jobs hold their lease in `ledger` and leave the queue.
  SchedulePass Schedule(Ledger& ledger, std::chrono::system_clock::time_point now);

  // The earliest deadline among waiting jobs (when the next pass must run at the latest).
  std::optional<std::chrono::system_clock::time_point> NextDeadline() const;

  // Waiting jobs in the order they are tried, with their last reason.
  std::vector<QueuedJob> Ordered() const;

 private:
  struct Key {
    int priority;
    int64_t order;
    bool operator<(const Key& o) const {
      return priority != o.priority ? priority > o.priority : order < o.order;
    }
  };
  QueueOptions options_;
  std::map<std::string, QueuedJob> jobs_;
  std::map<Key, std::string> order_;
};

}  // namespace flyt::sched
