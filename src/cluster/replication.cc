// Store replication for Cluster: every change is written through to the store inside one
// transaction (WriteLocked), after catching up on what other replicas committed (CatchUpLocked);
// a failed write reloads the whole state from the store (ReloadLocked), so that memory never runs
// ahead of the disk. Also the live stream's change marks (PublishLocked). See cluster.h.
#include <algorithm>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "common/json.h"

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
    case Table::kJobs: return Topic::kJobs;
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
    Status s = inner_.Put(t, id, body);
    Touch(s, TopicOf(t));
    return s;
  }
  Status Delete(Table t, const std::string& id) override {
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
    return inner_.ClaimGpus(lease, keys, exclusive);
  }
  Status ReleaseGpus(const std::string& lease) override { return inner_.ReleaseGpus(lease); }
  Status AppendEvent(int64_t at_ms, const std::string& kind, const std::string& body) override {
    Status s = inner_.AppendEvent(at_ms, kind, body);
    if (s.ok()) topics_ |= TopicBit(Topic::kEvents);
    return s;
  }
  bool wrote() const { return wrote_; }
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
  uint32_t topics_ = 0;
  std::vector<std::string> deleted_leases_;
};

void Cluster::ApplyNodeLocked(NodeRecord record) {
  ledger_->UpdateNode(record.name, LedgerGpus(record.snapshot), HeardAt(record.last_heartbeat));
  std::string name = record.name;
  nodes_[name] = std::move(record);
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

void Cluster::RememberEndedLeaseLocked(const std::string& id) {
  // Enough to answer a repeated release or renew; older ids read as never having existed.
  constexpr size_t kMaxEndedLeases = 65536;
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
      nodes_.erase(row.id);
      ledger_->RemoveNode(row.id);
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
      RememberEndedLeaseLocked(row.id);
      continue;
    }
    auto lease = LeaseFromJson(json::parse(row.body, nullptr, false));
    if (!lease.ok()) return lease.status().WithContext("stored lease " + row.id);
    ledger_->Restore(*lease);
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
  ledger_ = std::make_unique<sched::Ledger>(clock_, config_.ledger);
  queue_ = sched::JobQueue(config_.queue);
  nodes_.clear();
  clients_.clear();
  jobs_.clear();
  job_of_lease_.clear();
  ended_leases_.clear();
  ended_order_.clear();
  revision_ = 0;
  // A read-only transaction catches up from revision 0: everything, consistently.
  return store_->Update(Durability::kRelaxed,
                        [&](store::Txn& txn) FLYT_REQUIRES(mu_) { return CatchUpLocked(txn); });
}

Status Cluster::WriteLocked(Durability durability, const std::function<Status(store::Txn&)>& fn) {
  int64_t committed = revision_;
  uint32_t txn_topics = 0;
  std::vector<std::string> deleted_leases;
  touched_ = 0;
  Status s = store_->Update(durability, [&](store::Txn& inner) FLYT_REQUIRES(mu_) -> Status {
    if (inner.Revision() != revision_) FLYT_RETURN_IF_ERROR(CatchUpLocked(inner));
    CountingTxn txn(inner);
    FLYT_RETURN_IF_ERROR(fn(txn));
    committed = inner.Revision() + (txn.wrote() ? 1 : 0);
    txn_topics = txn.topics();
    deleted_leases = txn.deleted_leases();
    return Status::Ok();
  });
  if (s.ok()) {
    for (const std::string& id : deleted_leases) RememberEndedLeaseLocked(id);
    revision_ = committed;
    ++state_version_;
    PublishLocked(txn_topics);
    return s;
  }
  // The memory may have changed ahead of a transaction that did not commit: start again from
  // what the store holds. Refusals that change nothing need no reload.
  // (An invalid argument may come from the store after memory changed: it reloads too.)
  const StatusCode code = s.code();
  if (code != StatusCode::kNotFound && code != StatusCode::kResourceExhausted &&
      code != StatusCode::kPermissionDenied && code != StatusCode::kFailedPrecondition) {
    ++counters_.store_errors;
    Status reload = ReloadLocked();
    if (!reload.ok()) s = s.WithContext("and reloading failed too (" + reload.message() + ")");
    PublishLocked(kAllTopics);
  }
  return s;
}

Status Cluster::Load() {
  MutexLock lock(mu_);
  FLYT_RETURN_IF_ERROR(ReloadLocked());
  counters_.reloads = 0;
  // After a restart, a node heard from within unreachable_after is still reachable. One silent
  // for longer offers nothing until it sends a heartbeat, but its leases get the whole grace
  // from now: the manager being down is not the node being down.
  const auto floor =
      clock_.WallNow() - config_.ledger.unreachable_after - std::chrono::milliseconds(1);
  for (auto& [name, node] : nodes_) {
    ledger_->UpdateNode(name, LedgerGpus(node.snapshot),
                        HeardAt(std::max(node.last_heartbeat, floor)));
  }
  dirty_ = true;
  return Status::Ok();
}

Status Cluster::PutNode(store::Txn& txn, const NodeRecord& node) {
  return txn.Put(Table::kNodes, node.name, DumpJson(ToJson(node)));
}

Status Cluster::PutJob(store::Txn& txn, const Job& job) {
  return txn.Put(Table::kJobs, job.id, DumpJson(ToJson(job)));
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
