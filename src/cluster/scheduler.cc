// The scheduler side of Cluster: the thread that runs the queue and expiry (SchedulerLoop), one
// pass of it (Tick), starting a job on the lease the queue found for it, and the next moment
// anything may become due (NextWakeLocked). See cluster.h.
#include <set>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "common/json.h"

namespace flyt::cluster {

using internal::GpuKeys;
using internal::kMiB;
using internal::Seconds;
using nlohmann::json;
using store::Durability;
using store::Table;

json Cluster::GpuInfoLocked(const sched::Lease& lease, const std::string& policy) const {
  json devices = json::array();
  json details = json::array();
  std::string node, model;
  for (const sched::LeasedGpu& g : lease.gpus) {
    node = g.node;
    if (model.empty()) model = g.name;
    devices.push_back(g.index);
    json d = {{"index", g.index},
              {"uuid", g.uuid},
              {"name", g.name},
              {"node", g.node},
              {"availability_score", g.score},
              {"allocation_method", "flyt-ledger/" + policy},
              {"memory_free_mb", nullptr},
              {"memory_total_mb", nullptr},
              {"utilization_percent", nullptr}};
    auto n = nodes_.find(g.node);
    if (n != nodes_.end()) {
      for (const gpu::GpuInfo& info : n->second.snapshot.gpus) {
        if (info.uuid != g.uuid) continue;
        if (info.memory_free_bytes) {
          d["memory_free_mb"] = static_cast<double>(*info.memory_free_bytes) / kMiB;
        }
        if (info.memory_total_bytes) {
          d["memory_total_mb"] = static_cast<double>(*info.memory_total_bytes) / kMiB;
        }
        if (info.gpu_util_percent) d["utilization_percent"] = *info.gpu_util_percent;
      }
    }
    details.push_back(std::move(d));
  }
  return {{"model", model},
          {"count", lease.gpus.size()},
          {"device_ids", devices},
          {"world_size", lease.gpus.size()},
          {"node", node},
          {"lease_id", lease.id},
          {"allocation_method", "flyt-ledger/" + policy},
          {"allocation_details", details}};
}

Status Cluster::StartJobLocked(store::Txn& txn, Job& job, const sched::Lease& lease) {
  json lease_json = ToJson(lease);
  FLYT_RETURN_IF_ERROR(txn.ClaimGpus(lease.id, GpuKeys(lease), lease.exclusive));
  FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, lease.id, DumpJson(lease_json)));
  job.state = JobState::kRunning;
  job.started_at = clock_.WallNow();
  job.lease_id = lease.id;
  job.gpu_info = GpuInfoLocked(lease, PolicyName(job.request.policy));
  job.message = "running on " + lease_json["node"].get<std::string>();
  job_of_lease_[lease.id] = job.id;
  FLYT_RETURN_IF_ERROR(PutJob(txn, job));
  const double waited = Seconds(*job.started_at - job.submitted_at);
  FLYT_RETURN_IF_ERROR(Event(
      txn, "job.started",
      {{"job_id", job.id},
       {"lease_id", lease.id},
       {"node", lease_json["node"]},
       {"gpus", job.gpu_info["device_ids"]},
       {"waited_seconds", waited},
       {"message", "job " + job.id + " (" + job.task_name + " #" + std::to_string(job.experiment) +
                       ") started on " + lease_json["node"].get<std::string>() + " after " +
                       std::to_string(static_cast<int64_t>(waited)) + " s"}}));
  worker_.OpenSession(job.id);
  return Status::Ok();
}

// Leases past their TTL, or on nodes silent past the grace: gone from the ledger, the store and
// their jobs, each an event.
Status Cluster::ExpireLocked(store::Txn& txn, bool& expired_any) {
  const auto now = clock_.WallNow();
  // A node's silence counts only from the last moment the manager could not receive (cluster.h).
  for (const sched::Lease& gone : ledger_->Expire(ImpairedAt())) {
    const bool ttl = gone.expires_at <= now;
    const std::string why = ttl ? "its TTL ran out" : "its node stayed unreachable past the grace";
    if (gone.remote && IsMoveTargetLocked(gone.id)) {
      // The share a moving lease was to take (never a row): its node stayed unreachable (or it
      // ran out with the lease, which ends below). A recorded move ends with the lease where it
      // was; a thread still running it finds the record gone when it writes next.
      for (auto it = moves_.begin(); it != moves_.end(); ++it) {
        if (it->second.target != gone.id) continue;
        const std::string lease_id = it->first;
        auto lease = ledger_->Find(lease_id);
        if (!lease) break;  // it ended too: its own expiry below ends the move
        RemoteLeaseInfo info = RemoteInfoLocked(lease_id);
        if (info.moving && info.moving->target == gone.id) {
          const sched::LeasedGpu to = info.moving->gpu;
          info.moving.reset();
          remote_[lease_id] = info;
          FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, lease_id, DumpJson(ToJson(*lease, info))));
          const std::string reason = "the target's share ended: " + why;
          FLYT_RETURN_IF_ERROR(Event(
              txn, "remote_lease.migration_failed",
              {{"lease_id", lease_id},
               {"owner", lease->owner},
               {"client", info.client},
               {"from", {{"node", lease->gpus.front().node}, {"gpu", lease->gpus.front().index}}},
               {"to", {{"node", to.node}, {"gpu", to.index}}},
               {"reason", reason},
               {"message", "remote lease " + lease_id + " stays on " + lease->gpus.front().node +
                               ": moving it to " + to.node + " failed: " + reason}}));
          ++counters_.remote_migration_failures;
        }
        if (!it->second.running) moves_.erase(it);
        break;
      }
      continue;
    }
    Status del = txn.Delete(Table::kLeases, gone.id);
    if (!del.ok() && del.code() != StatusCode::kNotFound) return del;
    FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(gone.id));
    // A lease that ends while it has a move recorded: the target share and server go too.
    if (gone.remote) EndMoveOfLeaseLocked(gone.id, /*drain=*/ttl);
    if (gone.remote) {
      // Its share is free; the node drains the server (now when reachable, and in any case
      // when its next heartbeat's desired no longer lists it).
      const RemoteLeaseInfo info = RemoteInfoLocked(gone.id);
      FLYT_RETURN_IF_ERROR(Event(
          txn, "remote_lease.expired",
          {{"lease_id", gone.id},
           {"owner", gone.owner},
           {"client", info.client},
           {"node", gone.gpus.empty() ? "" : gone.gpus.front().node},
           {"reason", ttl ? "ttl" : "node_unreachable"},
           {"message", "remote lease " + gone.id + " of " + gone.owner + " expired: " + why}}));
      // A node that cannot be reached is not called (each call would hold the node worker for
      // its timeouts): it drains the server when it comes back, by its heartbeat's desired list.
      if (ttl) DrainGpuServerLocked(gone, info.generation);
      expired_any = true;
      continue;
    }
    FLYT_RETURN_IF_ERROR(
        Event(txn, "lease.expired",
              {{"lease_id", gone.id},
               {"owner", gone.owner},
               {"reason", ttl ? "ttl" : "node_unreachable"},
               {"message", "lease " + gone.id + " of " + gone.owner + " expired: " + why}}));
    FLYT_RETURN_IF_ERROR(
        FinishJobOfLeaseLocked(txn, gone.id, JobState::kFailed, "lease expired: " + why));
    expired_any = true;
  }
  return Status::Ok();
}

Status Cluster::TickLocked(store::Txn& txn, bool& woke_others) {
  const auto now = clock_.WallNow();
  // Nodes that went silent, or came back.
  for (auto& [name, node] : nodes_) {
    const bool reachable = ledger_->Reachable(name);
    if (reachable == node.reachable) continue;
    node.reachable = reachable;
    FLYT_RETURN_IF_ERROR(PutNode(txn, node));
    if (!reachable) {
      FLYT_RETURN_IF_ERROR(Event(txn, "node.unreachable",
                                 {{"node", name},
                                  {"message", "node " + name + " has sent no heartbeat for " +
                                                  std::to_string(static_cast<int64_t>(
                                                      Seconds(now - node.last_heartbeat))) +
                                                  " s; its GPUs are not offered"}}));
    }
  }
  FLYT_RETURN_IF_ERROR(ExpireLocked(txn, woke_others));
  // The queue.
  sched::SchedulePass pass = queue_.Schedule(*ledger_, now);
  ++counters_.schedule_passes;
  for (const auto& started : pass.started) {
    auto it = jobs_.find(started.job_id);
    if (it == jobs_.end()) continue;
    FLYT_RETURN_IF_ERROR(StartJobLocked(txn, it->second, started.lease));
  }
  for (const auto& t : pass.timed_out) {
    auto it = jobs_.find(t.job_id);
    if (it == jobs_.end()) continue;
    Job& job = it->second;
    job.state = JobState::kFailed;
    job.finished_at = now;
    job.message = "Insufficient GPUs after waiting " + std::to_string(t.waited.count()) + " s" +
                  (t.reason.empty() ? "" : ": " + t.reason);
    FLYT_RETURN_IF_ERROR(PutJob(txn, job));
    FLYT_RETURN_IF_ERROR(
        Event(txn, "job.timeout",
              {{"job_id", job.id}, {"message", "job " + job.id + ": " + job.message}}));
  }
  for (const sched::QueuedJob& q : queue_.Ordered()) {
    auto it = jobs_.find(q.id);
    if (it != jobs_.end() && !q.last_reason.empty()) it->second.message = q.last_reason;
  }
  return Status::Ok();
}

Status Cluster::Tick() {
  CheckStoreIfDue();
  MutexLock lock(mu_);
  const auto started = std::chrono::steady_clock::now();
  if (outage_) {
    // Nothing expires and nothing is placed while the store cannot be written: only a probe.
    Status back = RecoverLocked();
    if (!back.ok()) {
      last_pass_ = clock_.SteadyNow();
      return back;
    }
  }
  bool woke_others = false;
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) {
    return TickLocked(txn, woke_others);
  });
  counters_.last_pass_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  last_pass_ = clock_.SteadyNow();
  if (woke_others) dirty_ = true;  // an expiry freed GPUs: run the queue again
  if (s.ok() && last_pass_ - last_prune_ >= std::chrono::minutes(1)) {
    last_prune_ = last_pass_;
    Status pruned = store_->PruneEvents(ToMillis(clock_.WallNow()), config_.event_retention);
    if (pruned.ok()) pruned = store_->PruneEventBytes(config_.event_max_bytes);
    if (!pruned.ok()) {
      ++counters_.store_errors;
      NoteStoreErrorLocked(pruned, /*log=*/!store::IsStoreUnavailable(pruned));
      if (store::IsStoreUnavailable(pruned)) EnterOutageLocked(pruned);
    }
  }
  if (s.ok()) s = PruneJobsLocked();
  return s;
}

std::optional<std::chrono::steady_clock::time_point> Cluster::NextWakeLocked() const {
  const auto now = clock_.SteadyNow();
  const auto wall = clock_.WallNow();
  std::optional<std::chrono::steady_clock::time_point> next;
  auto consider = [&](std::chrono::steady_clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  auto at_wall = [&](WallTime t) {
    return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(t - wall);
  };
  std::set<std::string> holding;
  for (const sched::Lease& l : ledger_->Leases()) {
    consider(at_wall(l.expires_at));
    for (const auto& g : l.gpus) holding.insert(g.node);
  }
  for (const auto& [name, node] : nodes_) {
    // The ledger's time, which Load may have moved forward; the record keeps the real one.
    const auto heard = ledger_->HeardAt(name).value_or(HeardAt(node.last_heartbeat));
    if (node.reachable) consider(heard + config_.ledger.unreachable_after);
    if (holding.count(name)) {
      const auto silent_since = std::max(heard, ImpairedAt().value_or(heard));
      consider(silent_since + config_.ledger.unreachable_after + config_.ledger.lease_grace);
    }
  }
  if (auto deadline = queue_.NextDeadline()) consider(at_wall(*deadline));
  if (shared_store_) consider(next_sync_);
  // In an outage, the store is probed about once a second (a second after the last pass: "now
  // plus a second" would never come due).
  if (outage_) consider(last_pass_ + std::chrono::seconds(1));
  consider(last_prune_ + std::chrono::minutes(1));  // events are kept to their retention
  if (config_.store_check_interval.count() > 0) consider(next_store_check_);
  return next;
}

void Cluster::Wake(bool strong) {
  if (strong) {
    dirty_ = true;
  } else {
    soft_dirty_ = true;
  }
  wake_cv_.NotifyOne();
}

void Cluster::SchedulerLoop() {
  // Heartbeats while jobs wait may free capacity (a process ended), but a pass per heartbeat
  // would be wasteful on a large cluster: those wake the queue at most this often.
  constexpr auto kSoftGap = std::chrono::seconds(1);
  MutexLock lock(mu_);
  while (!stopping_) {
    const auto now = clock_.SteadyNow();
    const bool due = dirty_ || (soft_dirty_ && now - last_pass_ >= kSoftGap) ||
                     (shared_store_ && now >= next_sync_);
    if (!due) {
      auto until = NextWakeLocked().value_or(now + std::chrono::hours(1));
      if (soft_dirty_) until = std::min(until, last_pass_ + kSoftGap);
      if (until > now) {
        // +1 ms: wake just after the deadline, not just before it.
        wake_cv_.WaitFor(mu_, until - now + std::chrono::milliseconds(1));
        continue;  // re-evaluate: woken early, by a change, or at the deadline
      }
    }
    dirty_ = false;
    soft_dirty_ = false;
    // A replica sharing its store catches up at least this often (a Tick catches up first).
    if (shared_store_) next_sync_ = now + config_.sync_interval;
    lock.Unlock();
    Status s = Tick();
    lock.Lock();
    if (!s.ok()) {
      // A store outage: try again shortly rather than spinning.
      wake_cv_.WaitFor(mu_, std::chrono::seconds(1));
    }
  }
}

}  // namespace flyt::cluster
