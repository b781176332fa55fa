#include "sched/queue.h"

#include <set>
#include <tuple>

namespace flyt::sched {
namespace {

// Two requests that ask for the same thing get the same answer within one pass: capacity only
// shrinks as the pass grants leases, so a request refused once is refused again.
using Shape = std::tuple<int, uint64_t, uint32_t, bool, std::string, int, bool, double, double>;

Shape ShapeOf(const AllocationRequest& r) {
  return {r.gpus,      r.min_free_memory_bytes,   r.max_utilization_percent,
          r.same_node, r.gpu_model,               static_cast<int>(r.policy),
          r.exclusive, r.min_free_fraction,       r.max_free_spread};
}

}  // namespace

void JobQueue::Add(QueuedJob job) {
  Remove(job.id);
  order_[{job.priority, job.order}] = job.id;
  std::string id = job.id;
  jobs_[id] = std::move(job);
}

bool JobQueue::Remove(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  order_.erase({it->second.priority, it->second.order});
  jobs_.erase(it);
  return true;
}

SchedulePass JobQueue::Schedule(Ledger& ledger, std::chrono::system_clock::time_point now) {
  SchedulePass pass;
  std::map<Shape, std::string> refused;  // shape → reason
  bool held = false;                     // a starving job blocks everything behind it
  for (auto it = order_.begin(); it != order_.end();) {
    QueuedJob& job = jobs_.at(it->second);
    if (now >= job.deadline) {
      pass.timed_out.push_back(
          {job.id, job.last_reason,
           std::chrono::duration_cast<std::chrono::seconds>(now - job.submitted_at)});
      jobs_.erase(job.id);
      it = order_.erase(it);
      continue;
    }
    if (held) {
      job.last_reason = "waiting behind an older job that has waited longer than the backfill hold";
      ++it;
      continue;
    }
    const Shape shape = ShapeOf(job.request);
    auto known = refused.find(shape);
    if (known != refused.end()) {
      job.last_reason = known->second;
    } else {
      ++pass.tried;
      auto lease = ledger.Allocate(job.request);
      if (lease.ok()) {
        pass.started.push_back({job.id, std::move(*lease)});
        jobs_.erase(job.id);
        it = order_.erase(it);
        continue;
      }
      job.last_reason = lease.status().message();
      // Only a lack of capacity may be shared: an invalid request is this job's own problem.
      if (lease.status().code() == StatusCode::kResourceExhausted) refused[shape] = job.last_reason;
    }
    if (options_.backfill_hold.count() > 0 && now - job.submitted_at >= options_.backfill_hold) {
      held = true;
    }
    ++it;
  }
  return pass;
}

std::optional<std::chrono::system_clock::time_point> JobQueue::NextDeadline() const {
  std::optional<std::chrono::system_clock::time_point> next;
  for (const auto& [id, job] : jobs_) {
    if (!next || job.deadline < *next) next = job.deadline;
  }
  return next;
}

std::vector<QueuedJob> JobQueue::Ordered() const {
  std::vector<QueuedJob> out;
  for (const auto& [key, id] : order_) out.push_back(jobs_.at(id));
  return out;
}

}  // namespace flyt::sched
