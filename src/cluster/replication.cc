// Store replication for Cluster: every change is written through to the store inside one
// transaction (WriteLocked), after catching up on what other replicas committed (CatchUpLocked);
// a failed write reloads the whole state from the store (ReloadLocked, built aside and swapped
// in), so that memory never runs ahead of the disk. A store that cannot be written is an outage
// (EnterOutageLocked, RecoverLocked). Also the live stream's change marks (PublishLocked) and
// job retention (PruneJobsLocked). See cluster.h.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <set>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "common/json.h"
#include "gpu/json.h"

namespace flyt::cluster {

using internal::kAllTopics;
using internal::TopicBit;
using nlohmann::json;
using store::Durability;
using store::Table;

namespace {

Topic TopicOf(Table table) {
  switch (table) {
    case Table::kNodes: return Topic::kNodes;
    case Table::kClients: return Topic::kClients;
    case Table::kLeases: return Topic::kLeases;
    case Table::kJobs:
    case Table::kTasks: return Topic::kJobs;
  }
  return Topic::kNodes;
}

}  // namespace

// Counts the writes of a transaction, so that the manager knows the revision it committed, and
// which topics the live stream should tell of.
class Cluster::CountingTxn final : public store::Txn {
 public:
  explicit CountingTxn(store::Txn& inner) : inner_(inner) {}
  int64_t Revision() const override { return inner_.Revision(); }
  Status Put(Table t, const std::string& id, const std::string& body) override {
    attempted_ = true;
    Status s = inner_.Put(t, id, body);
    Touch(s, TopicOf(t));
    return s;
  }
  Status Delete(Table t, const std::string& id) override {
    attempted_ = true;
    Status s = inner_.Delete(t, id);
    Touch(s, TopicOf(t));
    if (s.ok() && t == Table::kLeases) deleted_leases_.push_back(id);
    return s;
  }
  Result<std::optional<std::string>> Get(Table t, const std::string& id) override {
    return inner_.Get(t, id);
  }
  Result<std::vector<store::Row>> ListSince(Table t, int64_t after) override {
    return inner_.ListSince(t, after);
  }
  Status ClaimGpus(const std::string& lease, const std::vector<std::string>& keys,
                   bool exclusive) override {
    attempted_ = true;
    return inner_.ClaimGpus(lease, keys, exclusive);
  }
  Status ReleaseGpus(const std::string& lease) override {
    attempted_ = true;
    return inner_.ReleaseGpus(lease);
  }
  Status AppendEvent(int64_t at_ms, const std::string& kind, const std::string& body) override {
    attempted_ = true;
    Status s = inner_.AppendEvent(at_ms, kind, body);
    if (s.ok()) topics_ |= TopicBit(Topic::kEvents);
    return s;
  }
  Status PutJob(const std::string& id, const std::string& body,
                std::optional<int64_t> finished_at_ms) override {
    attempted_ = true;
    Status s = inner_.PutJob(id, body, finished_at_ms);
    Touch(s, Topic::kJobs);
    return s;
  }
  Result<std::vector<std::string>> PruneFinishedJobs(
      const store::JobRetention& retention) override {
    attempted_ = true;
    auto ids = inner_.PruneFinishedJobs(retention);
    if (ids.ok() && !ids->empty()) Touch(Status::Ok(), Topic::kJobs);
    return ids;
  }
  Result<std::optional<store::IdempotencyRecord>> GetIdempotency(
      const std::string& scope, const std::string& key) override {
    return inner_.GetIdempotency(scope, key);
  }
  Status PutIdempotency(const std::string& scope, const std::string& key,
                        const store::IdempotencyRecord& record) override {
    return inner_.PutIdempotency(scope, key, record);
  }
  Status PruneIdempotencyKeys(int64_t now_ms) override {
    return inner_.PruneIdempotencyKeys(now_ms);
  }
  bool wrote() const { return wrote_; }
  // Whether the callback tried to change the store at all (failed attempts included): the
  // callbacks change memory and store together, so after one the memory may be ahead.
  bool attempted() const { return attempted_; }
  uint32_t topics() const { return topics_; }
  const std::vector<std::string>& deleted_leases() const { return deleted_leases_; }

 private:
  void Touch(const Status& s, Topic topic) {
    if (!s.ok()) return;
    wrote_ = true;
    topics_ |= TopicBit(topic);
  }

  store::Txn& inner_;
  bool wrote_ = false;
  bool attempted_ = false;
  uint32_t topics_ = 0;
  std::vector<std::string> deleted_leases_;
};

void Cluster::ApplyNodeLocked(NodeRecord record) {
  ledger_->UpdateNode(record.name, LedgerGpus(record), HeardAt(record.last_heartbeat));
  std::string name = record.name;
  auto it = nodes_.find(name);
  if (it != nodes_.end()) UnindexGpusLocked(it->second);
  IndexGpusLocked(record);
  nodes_[name] = std::move(record);
}

void Cluster::EraseNodeLocked(const std::string& name) {
  gpu_states_.erase(name);
  profile_error_logged_.erase(name);
  auto it = nodes_.find(name);
  if (it != nodes_.end()) {
    UnindexGpusLocked(it->second);
    nodes_.erase(it);
  }
  ledger_->RemoveNode(name);
}

void Cluster::IndexGpusLocked(const NodeRecord& node) {
  for (const gpu::GpuInfo& g : node.snapshot.gpus) {
    if (!internal::IsPlaceholderUuid(g.uuid)) gpu_owner_.emplace(g.uuid, node.name);
  }
}

void Cluster::UnindexGpusLocked(const NodeRecord& node) {
  for (const gpu::GpuInfo& g : node.snapshot.gpus) {
    auto it = gpu_owner_.find(g.uuid);
    if (it != gpu_owner_.end() && it->second == node.name) gpu_owner_.erase(it);
  }
}

sched::QueuedJob Cluster::QueuedFrom(const Job& job) const {
  sched::QueuedJob q;
  q.id = job.id;
  q.priority = job.priority;
  q.order = job.order;
  q.request = job.request;
  q.submitted_at = job.submitted_at;
  q.deadline = job.submitted_at + job.timeout;
  q.last_reason = job.message;
  return q;
}

void Cluster::ApplyJobLocked(Job job) {
  if (job.state == JobState::kQueued) {
    queue_.Add(QueuedFrom(job));
  } else {
    queue_.Remove(job.id);
  }
  if (!job.lease_id.empty()) job_of_lease_[job.lease_id] = job.id;
  std::string id = job.id;
  jobs_[id] = std::move(job);
}

json Cluster::MergedParametersLocked(const Job& job) const {
  auto it = job.task_id.empty() ? tasks_.end() : tasks_.find(job.task_id);
  if (it == tasks_.end()) return job.parameters;
  json merged = it->second.shared_parameters;
  if (!merged.is_object()) merged = json::object();
  if (job.parameters.is_object()) {
    for (const auto& [k, v] : job.parameters.items()) merged[k] = v;
  }
  return merged;
}

void Cluster::RememberEndedLeaseLocked(const std::string& id) {
  // Enough to answer a repeated release or renew; older ids read as never having existed.
  constexpr size_t kMaxEndedLeases = 65536;
  remote_.erase(id);
  if (!ended_leases_.insert(id).second) return;
  ended_order_.push_back(id);
  if (ended_order_.size() > kMaxEndedLeases) {
    ended_leases_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

Status Cluster::CatchUpLocked(store::Txn& txn) {
  FLYT_ASSIGN_OR_RETURN(auto nodes, txn.ListSince(Table::kNodes, revision_));
  // Another replica's change (or a reload): its events come with it.
  if (!nodes.empty()) touched_ |= TopicBit(Topic::kNodes) | TopicBit(Topic::kEvents);
  for (const store::Row& row : nodes) {
    if (row.deleted) {
      EraseNodeLocked(row.id);
      continue;
    }
    auto rec = NodeFromJson(json::parse(row.body, nullptr, false));
    if (!rec.ok()) return rec.status().WithContext("stored node " + row.id);
    ApplyNodeLocked(std::move(*rec));
  }
  FLYT_ASSIGN_OR_RETURN(auto leases, txn.ListSince(Table::kLeases, revision_));
  if (!leases.empty()) touched_ |= TopicBit(Topic::kLeases) | TopicBit(Topic::kEvents);
  for (const store::Row& row : leases) {
    if (row.deleted) {
      (void)ledger_->Release(row.id);  // already gone here is fine
      EndMoveOfLeaseLocked(row.id, /*drain=*/false);  // the replica that ended it drains
      RememberEndedLeaseLocked(row.id);
      continue;
    }
    const json body = json::parse(row.body, nullptr, false);
    auto lease = LeaseFromJson(body);
    if (!lease.ok()) return lease.status().WithContext("stored lease " + row.id);
    auto remote = RemoteInfoFromJson(body);
    if (!remote.ok()) return remote.status().WithContext("stored lease " + row.id);
    if (*remote) {
      remote_[lease->id] = std::move(**remote);
    } else {
      remote_.erase(lease->id);
    }
    ledger_->Restore(*lease);
    // A move recorded in the row: its target share and its place in moves_.
    if (lease->remote) SyncMoveLocked(*lease);
  }
  FLYT_ASSIGN_OR_RETURN(auto clients, txn.ListSince(Table::kClients, revision_));
  if (!clients.empty()) touched_ |= TopicBit(Topic::kClients) | TopicBit(Topic::kEvents);
  for (const store::Row& row : clients) {
    if (row.deleted) {
      clients_.erase(row.id);
      continue;
    }
    auto c = ClientFromJson(json::parse(row.body, nullptr, false));
    if (!c.ok()) return c.status().WithContext("stored client " + row.id);
    clients_[c->name] = std::move(*c);
  }
  // Tasks before their jobs: a job's full parameters need its task.
  FLYT_ASSIGN_OR_RETURN(auto tasks, txn.ListSince(Table::kTasks, revision_));
  if (!tasks.empty()) touched_ |= TopicBit(Topic::kJobs);
  for (const store::Row& row : tasks) {
    if (row.deleted) {
      tasks_.erase(row.id);
      continue;
    }
    auto task = TaskFromJson(json::parse(row.body, nullptr, false));
    if (!task.ok()) return task.status().WithContext("stored task " + row.id);
    tasks_[task->id] = std::move(*task);
  }
  FLYT_ASSIGN_OR_RETURN(auto jobs, txn.ListSince(Table::kJobs, revision_));
  if (!jobs.empty()) touched_ |= TopicBit(Topic::kJobs) | TopicBit(Topic::kEvents);
  for (const store::Row& row : jobs) {
    if (row.deleted) {
      queue_.Remove(row.id);
      jobs_.erase(row.id);
      continue;
    }
    auto job = JobFromJson(json::parse(row.body, nullptr, false));
    if (!job.ok()) return job.status().WithContext("stored job " + row.id);
    ApplyJobLocked(std::move(*job));
  }
  revision_ = txn.Revision();
  return Status::Ok();
}

Status Cluster::ReloadLocked() {
  ++counters_.reloads;
  // The current state steps aside; the store's is read into fresh structures; the old one comes
  // back if that fails. Readers wait on mu_ meanwhile and never see a half-built state.
  auto ledger = std::make_unique<sched::Ledger>(clock_, config_.ledger);
  sched::JobQueue queue(config_.queue);
  std::map<std::string, NodeRecord> nodes;
  std::unordered_map<std::string, std::string> gpu_owner;
  std::map<std::string, ClientRecord> clients;
  std::map<std::string, Job> jobs;
  std::map<std::string, TaskRecord> tasks;
  std::map<std::string, std::string> job_of_lease;
  std::map<std::string, RemoteLeaseInfo> remote;
  std::set<std::string> ended_leases;
  std::deque<std::string> ended_order;
  auto swap_state = [&]() FLYT_REQUIRES(mu_) {
    std::swap(ledger_, ledger);
    std::swap(queue_, queue);
    std::swap(nodes_, nodes);
    std::swap(gpu_owner_, gpu_owner);
    std::swap(clients_, clients);
    std::swap(jobs_, jobs);
    std::swap(tasks_, tasks);
    std::swap(job_of_lease_, job_of_lease);
    std::swap(remote_, remote);
    std::swap(ended_leases_, ended_leases);
    std::swap(ended_order_, ended_order);
  };
  swap_state();
  const int64_t revision = std::exchange(revision_, 0);
  const uint32_t touched = touched_;
  // A read-only transaction catches up from revision 0: everything, consistently.
  Status s = store_->Update(Durability::kRelaxed,
                            [&](store::Txn& txn) FLYT_REQUIRES(mu_) { return CatchUpLocked(txn); });
  if (!s.ok()) {
    swap_state();
    revision_ = revision;
    touched_ = touched;
    return s;
  }
  // Moves the store no longer records (their lease ended or was settled meanwhile) that no
  // thread here runs are forgotten; a running one finds out when it writes next.
  std::erase_if(moves_, [&](const auto& entry) FLYT_REQUIRES(mu_) {
    const auto& [id, mv] = entry;
    if (mv.running || mv.target.empty()) return false;
    auto info = remote_.find(id);
    return info == remote_.end() || !info->second.moving || info->second.moving->target != mv.target;
  });
  return s;
}

Status Cluster::WriteLocked(Durability durability, const std::function<Status(store::Txn&)>& fn) {
  // While the store cannot be written, a change is refused before it touches memory.
  if (outage_) {
    ++outage_->writes_refused;
    ++counters_.writes_refused;
    return OutageStatusLocked();
  }
  int64_t committed = revision_;
  uint32_t txn_topics = 0;
  std::vector<std::string> deleted_leases;
  bool attempted = false;
  touched_ = 0;
  Status s = store_->Update(durability, [&](store::Txn& inner) FLYT_REQUIRES(mu_) -> Status {
    if (inner.Revision() != revision_) FLYT_RETURN_IF_ERROR(CatchUpLocked(inner));
    CountingTxn txn(inner);
    Status done = fn(txn);
    attempted = txn.attempted();
    FLYT_RETURN_IF_ERROR(done);
    committed = inner.Revision() + (txn.wrote() ? 1 : 0);
    txn_topics = txn.topics();
    deleted_leases = txn.deleted_leases();
    return Status::Ok();
  });
  if (s.ok()) {
    for (const std::string& id : deleted_leases) RememberEndedLeaseLocked(id);
    revision_ = committed;
    ++state_version_;
    if ((txn_topics & TopicBit(Topic::kLeases)) != 0) ++leases_version_;
    PublishLocked(txn_topics);
    return s;
  }
  // The memory may have changed ahead of a transaction that did not commit: start again from
  // what the store holds (if it cannot be read, the state stays as it was). A refusal that came
  // before the callback wrote anything changed nothing and needs no reload; one that came after
  // a write (an expiry run before the request was refused, say) may have changed memory.
  // (An invalid argument may come from the store after memory changed: it reloads too.)
  const StatusCode code = s.code();
  const bool outage = store::IsStoreUnavailable(s);
  const bool refusal = code == StatusCode::kNotFound || code == StatusCode::kResourceExhausted ||
                       code == StatusCode::kPermissionDenied ||
                       code == StatusCode::kFailedPrecondition;
  if (outage || !refusal || attempted) {
    ++counters_.store_errors;
    // Every store error is logged with the database's message (an outage by its own line).
    if (!refusal) NoteStoreErrorLocked(s, /*log=*/!outage);
    Status reload = ReloadLocked();
    if (!reload.ok()) NoteStoreErrorLocked(reload, /*log=*/!outage);
    PublishLocked(kAllTopics);
    if (outage) {
      EnterOutageLocked(s);
      ++outage_->writes_refused;
      ++counters_.writes_refused;
      return OutageStatusLocked();
    }
    if (!reload.ok()) s = s.WithContext("and reloading failed too (" + reload.message() + ")");
  }
  return s;
}

void Cluster::NoteStoreErrorLocked(const Status& error, bool log) {
  if (error.ok()) return;
  const std::string kind = store::StoreErrorKind(error);
  ++store_errors_by_kind_[kind];
  if (kind == "damaged" && !damage_) damage_ = Damage{clock_.WallNow(), error.message()};
  if (!log) return;
  constexpr auto kLogEvery = std::chrono::minutes(1);
  const auto now = clock_.SteadyNow();
  // Forget messages not seen for a while, so that a stream of distinct ones stays bounded.
  constexpr size_t kMaxRemembered = 256;
  if (store_error_logged_.size() >= kMaxRemembered) {
    std::erase_if(store_error_logged_,
                  [&](const auto& entry) { return now - entry.second >= kLogEvery; });
    if (store_error_logged_.size() >= kMaxRemembered) store_error_logged_.clear();
  }
  auto [it, inserted] = store_error_logged_.try_emplace(error.message(), now);
  if (!inserted && now - it->second < kLogEvery) return;
  it->second = now;
  spdlog::error("store error ({}): {}", kind, error.message());
}

void Cluster::CheckStoreIfDue() {
  {
    MutexLock lock(mu_);
    if (config_.store_check_interval.count() <= 0 || store_checking_) return;
    const auto now = clock_.SteadyNow();
    if (now < next_store_check_) return;
    next_store_check_ = now + config_.store_check_interval;
    store_checking_ = true;
  }
  // Without the state lock: the check reads the whole file on a connection of its own.
  Status checked = store_->Check();
  MutexLock lock(mu_);
  store_checking_ = false;
  if (checked.ok()) {
    if (damage_) {
      spdlog::warn("store check: {} is sound again", store_->Describe());
      damage_.reset();
    }
    return;
  }
  NoteStoreErrorLocked(checked);
}

void Cluster::EnterOutageLocked(const Status& cause) {
  if (outage_) {
    outage_->error = cause.message();
    return;
  }
  outage_ = Outage{clock_.SteadyNow(), clock_.WallNow(), cause.message(), 0};
  ++counters_.store_outages;
  NoteStoreErrorLocked(cause, /*log=*/false);  // logged below, once for the whole outage
  // The scheduler may be asleep until a deadline far off: it probes the store from now on.
  wake_cv_.NotifyOne();
  // Once per outage: the store's trouble repeats on every probe.
  spdlog::error(
      "store unavailable: {}; refusing changes (503 store_unavailable) and answering reads from "
      "the last good state until it can be written again",
      cause.message());
}

Status Cluster::OutageStatusLocked() const {
  return Unavailable("the store cannot be written (" + outage_->error + "); since " +
                     gpu::FormatTime(outage_->since_wall) +
                     " changes are refused and reads answer from the last state it held; try "
                     "again when it is back")
      .WithReason(store::kStoreUnavailableReason);
}

Status Cluster::RecoverLocked() {
  Status probe = store_->Probe();
  if (!probe.ok()) {
    NoteStoreErrorLocked(probe, /*log=*/false);
    outage_->error = probe.message();
    return OutageStatusLocked();
  }
  // How recently each node was heard, as the ledger counts it (heartbeats refused during the
  // outage still told that the node was alive): the reload below starts from the store's times.
  std::map<std::string, std::chrono::steady_clock::time_point> heard;
  for (const auto& [name, node] : nodes_) {
    if (auto h = ledger_->HeardAt(name)) heard[name] = *h;
  }
  Status reload = ReloadLocked();
  if (!reload.ok()) {
    outage_->error = reload.message();
    return OutageStatusLocked();
  }
  const auto now = clock_.SteadyNow();
  const auto lasted = now - outage_->since;
  const WallTime since_wall = outage_->since_wall;
  const uint64_t refused = outage_->writes_refused;
  // A node's silence is counted without the outage: it could not have been heard.
  for (const auto& [name, node] : nodes_) {
    auto base = ledger_->HeardAt(name).value_or(HeardAt(node.last_heartbeat));
    if (auto it = heard.find(name); it != heard.end()) base = std::max(base, it->second);
    ledger_->UpdateNode(name, LedgerGpus(node), std::min(now, base + lasted));
  }
  // A lease whose TTL ran out during the outage could not be renewed: it gets as long as a node
  // coming back gets, from now.
  const WallTime until =
      clock_.WallNow() + config_.ledger.unreachable_after + config_.ledger.lease_grace;
  std::vector<sched::Lease> extend;
  for (sched::Lease lease : ledger_->Leases()) {
    if (lease.expires_at <= since_wall || lease.expires_at >= until) continue;
    if (IsMoveTargetLocked(lease.id)) continue;  // not a row: it follows its lease below
    if (lease.grace_extended) continue;
    lease.expires_at = until;
    extend.push_back(std::move(lease));
  }
  outage_.reset();
  spdlog::warn("store is back after {:.1f} s; {} change(s) were refused meanwhile",
               std::chrono::duration<double>(lasted).count(), refused);
  PublishLocked(kAllTopics);
  dirty_ = true;
  if (extend.empty()) return Status::Ok();
  return WriteExtendedLeasesLocked(extend, "store_outage",
                                   "its TTL ran out while the store could not be written");
}

Status Cluster::WriteExtendedLeasesLocked(const std::vector<sched::Lease>& extend,
                                          const char* reason, const char* why) {
  return WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    for (sched::Lease lease : extend) {
      lease.grace_extended = true;  // once per renewal (sched::Lease::grace_extended)
      // A remote lease's row keeps its remote part (and a move it records).
      const RemoteLeaseInfo info = RemoteInfoLocked(lease.id);
      const json j = lease.remote ? ToJson(lease, info) : ToJson(lease);
      FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, lease.id, DumpJson(j)));
      if (lease.remote && info.moving) ledger_->Restore(ReservationOf(lease, *info.moving));
      FLYT_RETURN_IF_ERROR(Event(
          txn, "lease.renewed",
          {{"lease_id", lease.id},
           {"expires_at", j["expires_at"]},
           {"reason", reason},
           {"message", "lease " + lease.id + " of " + lease.owner + " extended until " +
                           j["expires_at"].get<std::string>() + ": " + why}}));
      ledger_->Restore(lease);
    }
    return Status::Ok();
  });
}

Status Cluster::PruneJobsLocked() {
  constexpr auto kJobPruneInterval = std::chrono::seconds(10);
  const bool by_age = config_.keep_finished_for.count() > 0;
  const bool by_count = config_.keep_finished_max > 0;
  const auto steady = clock_.SteadyNow();
  if (last_job_prune_ && steady - *last_job_prune_ < kJobPruneInterval) return Status::Ok();
  last_job_prune_ = steady;
  const WallTime now = clock_.WallNow();
  // Idempotency keys past their time go with the same rhythm.
  FLYT_RETURN_IF_ERROR(WriteLocked(Durability::kRelaxed, [&](store::Txn& txn) {
    return txn.PruneIdempotencyKeys(ToMillis(now));
  }));
  if (!by_age && !by_count) return Status::Ok();
  // What the rules select here, newest first; the store applies the same rules to its rows.
  const WallTime cutoff = now - config_.keep_finished_for;
  std::vector<std::pair<WallTime, std::string>> finished;
  for (const auto& [id, job] : jobs_) {
    if (Finished(job.state)) finished.emplace_back(job.finished_at.value_or(WallTime{}), id);
  }
  std::sort(finished.begin(), finished.end(), std::greater<>());
  std::vector<std::string> victims;
  for (size_t i = 0; i < finished.size(); ++i) {
    if ((by_count && i >= config_.keep_finished_max) || (by_age && finished[i].first < cutoff)) {
      victims.push_back(finished[i].second);
    }
  }
  if (victims.empty()) return Status::Ok();
  store::JobRetention retention;
  retention.finished_before_ms =
      by_age ? ToMillis(cutoff) : std::numeric_limits<int64_t>::min();
  retention.keep = by_count ? config_.keep_finished_max : std::numeric_limits<size_t>::max();
  retention.max_jobs = 1000;
  // Tombstones are kept a day longer than the jobs, for replicas catching up.
  retention.purge_tombstones_before_ms =
      ToMillis(now - std::max(config_.keep_finished_for, std::chrono::seconds(0)) -
               std::chrono::hours(24));
  auto drop = [&](const std::string& id) FLYT_REQUIRES(mu_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    auto jl = job_of_lease_.find(it->second.lease_id);
    if (jl != job_of_lease_.end() && jl->second == id) job_of_lease_.erase(jl);
    queue_.Remove(id);
    jobs_.erase(it);
    ++counters_.jobs_pruned;
  };
  return WriteLocked(Durability::kRelaxed, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    FLYT_ASSIGN_OR_RETURN(std::vector<std::string> pruned, txn.PruneFinishedJobs(retention));
    for (const std::string& id : pruned) drop(id);
    // The store has none left to prune (another replica did, or this is the last batch): what
    // the rules select here is gone from the store too.
    if (pruned.size() < retention.max_jobs) {
      for (const std::string& id : victims) drop(id);
    }
    // A task goes with its last job.
    std::set<std::string> in_use;
    for (const auto& [id, job] : jobs_) {
      if (!job.task_id.empty()) in_use.insert(job.task_id);
    }
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (in_use.count(it->first)) {
        ++it;
        continue;
      }
      Status deleted = txn.Delete(Table::kTasks, it->first);
      if (!deleted.ok() && deleted.code() != StatusCode::kNotFound) return deleted;
      it = tasks_.erase(it);
    }
    return Status::Ok();
  });
}

Status Cluster::Load() {
  MutexLock lock(mu_);
  FLYT_RETURN_IF_ERROR(ReloadLocked());
  counters_.reloads = 0;
  next_store_check_ = clock_.SteadyNow() + config_.store_check_interval;  // Open checked it
  // After a restart, a node heard from within unreachable_after is still reachable. One silent
  // for longer offers nothing until it sends a heartbeat, but its leases get the whole grace
  // from now: the manager being down is not the node being down.
  const auto floor =
      clock_.WallNow() - config_.ledger.unreachable_after - std::chrono::milliseconds(1);
  for (auto& [name, node] : nodes_) {
    ledger_->UpdateNode(name, LedgerGpus(node),
                        HeardAt(std::max(node.last_heartbeat, floor)));
  }
  dirty_ = true;
  // Nor is it the holders being gone: no renewal could get in while no manager ran, so a lease
  // whose TTL ran out meanwhile, or runs out sooner than a node would even count as silent (its
  // holder may not reach this manager in time), gets as long as a node coming back gets, from
  // now, as after a store outage. The first pass of the scheduler would otherwise expire it
  // before the API even listens: a restart slower than a lease's TTL margin (a loaded machine)
  // cost its holder the lease and its GPU server. Other leases keep their expiry, and so does one
  // extended before without a renewal since: a manager restarting over and over must not keep an
  // abandoned lease (and its GPU server) alive for ever.
  const WallTime now = clock_.WallNow();
  const WallTime until = now + config_.ledger.unreachable_after + config_.ledger.lease_grace;
  std::vector<sched::Lease> extend;
  for (sched::Lease lease : ledger_->Leases()) {
    if (lease.expires_at >= now + config_.ledger.unreachable_after ||
        IsMoveTargetLocked(lease.id) || lease.grace_extended) {
      continue;
    }
    lease.expires_at = until;
    extend.push_back(std::move(lease));
  }
  if (extend.empty()) return Status::Ok();
  Status written = WriteExtendedLeasesLocked(
      extend, "manager_restart", "its holder could not renew it while the cluster manager was down");
  // A store that cannot be written now is an outage like any other: the manager still starts,
  // and these leases keep the expiry they had.
  if (!written.ok()) {
    spdlog::warn("extending {} lease(s) after the restart: {}", extend.size(), written.message());
  }
  return Status::Ok();
}

Status Cluster::PutNode(store::Txn& txn, const NodeRecord& node) {
  return txn.Put(Table::kNodes, node.name, DumpJson(ToJson(node)));
}

Status Cluster::PutJob(store::Txn& txn, const Job& job) {
  std::optional<int64_t> finished_at_ms;
  if (Finished(job.state)) finished_at_ms = ToMillis(job.finished_at.value_or(clock_.WallNow()));
  return txn.PutJob(job.id, DumpJson(ToJson(job)), finished_at_ms);
}

Status Cluster::Event(store::Txn& txn, const std::string& kind, json body) {
  return txn.AppendEvent(ToMillis(clock_.WallNow()), kind, DumpJson(body));
}

void Cluster::PublishLocked(uint32_t txn_topics) {
  const uint32_t topics = txn_topics | std::exchange(touched_, 0);
  if (topics == 0) return;
  ++changes_.seq;
  for (size_t t = 0; t < kTopicCount; ++t) {
    if (topics & (1u << t)) ++changes_.topics[t];
  }
  change_cv_.NotifyAll();
}

}  // namespace flyt::cluster
