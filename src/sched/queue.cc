#include "sched/queue.h"


namespace flyt::sched {
namespace {

// Within one pass capacity only shrinks (the pass grants leases, nothing frees GPUs), so once a
// request has been refused, every request at least as hard is refused too: as many or more GPUs,
// as much or more memory, no more utilisation allowed, the same model, placement and sharing. An
// autotuner sweep is mostly such a family (one model, growing memory per experiment), so a pass
// over a long queue makes a handful of placement attempts instead of one per job. The policy only
// orders candidates; it does not change whether a request can be met.
bool AtLeastAsHard(const AllocationRequest& r, const AllocationRequest& refused) {
  return r.gpus >= refused.gpus && r.min_free_memory_bytes >= refused.min_free_memory_bytes &&
         r.min_free_fraction >= refused.min_free_fraction &&
         r.max_utilization_percent <= refused.max_utilization_percent &&
         r.gpu_model == refused.gpu_model && r.same_node == refused.same_node &&
         r.exclusive == refused.exclusive && r.max_free_spread == refused.max_free_spread &&
         (r.max_free_spread == 0 || r.policy == refused.policy);
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
  std::vector<std::pair<const AllocationRequest*, std::string>> refused;  // with the reason
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
    const std::string* known = nullptr;
    for (const auto& [request, reason] : refused) {
      if (AtLeastAsHard(job.request, *request)) {
        known = &reason;
        break;
      }
    }
    if (known != nullptr) {
      job.last_reason = *known;
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
      if (lease.status().code() == StatusCode::kResourceExhausted) {
        refused.emplace_back(&job.request, job.last_reason);
      }
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
