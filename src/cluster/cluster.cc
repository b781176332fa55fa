#include "cluster/cluster.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "common/http.h"
#include "common/json.h"
#include "common/strings.h"
#include "gpu/json.h"
#include "sched/estimate.h"

namespace flyt::cluster {

using nlohmann::json;
using store::Durability;
using store::Table;

namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr size_t kMaxGpusPerNode = 256;
constexpr size_t kMaxEventsPerHeartbeat = 100;
constexpr size_t kMaxExperimentsPerSubmission = 4096;

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Reads the fields of a request body, each checked, with the field named in every error.
class Body {
 public:
  explicit Body(const json& j) : j_(j) {}

  Status Only(std::initializer_list<const char*> allowed) const {
    for (const auto& [key, value] : j_.items()) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || key == a;
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        return InvalidArgument("unknown field '" + key + "' (expected " + list + ")");
      }
    }
    return Status::Ok();
  }
  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  Status Int(const char* key, int64_t min, int64_t max, int64_t& out) const {
    if (!Has(key)) return Status::Ok();
    const json& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max) {
      return InvalidArgument(std::string(key) + " must be an integer from " + std::to_string(min) +
                             " to " + std::to_string(max));
    }
    out = v.get<int64_t>();
    return Status::Ok();
  }
  Status Number(const char* key, double min, double max, double& out) const {
    if (!Has(key)) return Status::Ok();
    const json& v = j_[key];
    if (!v.is_number() || !(v.get<double>() >= min && v.get<double>() <= max)) {
      return InvalidArgument(std::string(key) + " must be a number from " + Fmt(min) + " to " +
                             Fmt(max));
    }
    out = v.get<double>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool& out) const {
    if (!Has(key)) return Status::Ok();
    if (!j_[key].is_boolean()) return InvalidArgument(std::string(key) + " must be true or false");
    out = j_[key].get<bool>();
    return Status::Ok();
  }
  Status String(const char* key, size_t max_len, std::string& out) const {
    if (!Has(key)) return Status::Ok();
    if (!j_[key].is_string() || j_[key].get<std::string>().size() > max_len) {
      return InvalidArgument(std::string(key) + " must be a string of at most " +
                             std::to_string(max_len) + " characters");
    }
    out = j_[key].get<std::string>();
    return Status::Ok();
  }
  Status Labels(const char* key, std::map<std::string, std::string>& out) const {
    if (!Has(key)) return Status::Ok();
    const json& v = j_[key];
    if (!v.is_object() || v.size() > 64) {
      return InvalidArgument(std::string(key) + " must be an object of at most 64 string labels");
    }
    for (const auto& [k, val] : v.items()) {
      if (k.empty() || k.size() > 128 || !val.is_string() || val.get<std::string>().size() > 1024) {
        return InvalidArgument(std::string(key) + "." + k +
                               " must be a string (names up to 128, values up to 1024 characters)");
      }
      out[k] = val.get<std::string>();
    }
    return Status::Ok();
  }
  Status Policy(const char* key, sched::Policy& out) const {
    std::string name;
    FLYT_RETURN_IF_ERROR(String(key, 32, name));
    if (name.empty()) return Status::Ok();
    auto p = ParsePolicy(name);
    if (!p) return InvalidArgument(std::string(key) + " must be score, binpack or spread");
    out = *p;
    return Status::Ok();
  }

 private:
  static std::string Fmt(double v) {
    std::string s = std::to_string(v);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  const json& j_;
};

std::string GpuKey(const sched::LeasedGpu& g) { return g.node + "/" + g.uuid; }

std::vector<std::string> GpuKeys(const sched::Lease& lease) {
  std::vector<std::string> keys;
  for (const auto& g : lease.gpus) keys.push_back(GpuKey(g));
  return keys;
}

// What a caller may touch: admins everything, others only what they own.
Status CheckOwner(const Caller& caller, const std::string& owner, const std::string& what) {
  if (caller.role == Role::kAdmin || caller.name == owner) return Status::Ok();
  return PermissionDenied(what + " belongs to " + (owner.empty() ? "nobody" : owner) + ", not to " +
                          caller.name);
}

double Seconds(std::chrono::system_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The live leases on each GPU, by (node, UUID): the identity the ledger and the store's claims
// use. Shared by the GPU list and /metrics, so that both count the same states.
struct Hold {
  const sched::Lease* lease;
  uint64_t reserved_bytes;
};
using Holds = std::map<std::pair<std::string, std::string>, std::vector<Hold>>;

Holds HoldsOf(const std::vector<sched::Lease>& leases, WallTime now) {
  Holds holds;
  for (const sched::Lease& l : leases) {
    if (l.expires_at <= now) continue;
    for (const auto& g : l.gpus) holds[{g.node, g.uuid}].push_back({&l, g.reserved_bytes});
  }
  return holds;
}

const char* AllocationState(bool reachable, bool lost, const std::vector<Hold>& holds) {
  if (!reachable) return "unreachable";
  if (lost) return "lost";
  for (const Hold& h : holds) {
    if (h.lease->exclusive) return "leased";
  }
  return holds.empty() ? "free" : "shared";
}

}  // namespace

namespace {

constexpr uint32_t TopicBit(Topic topic) { return 1u << static_cast<unsigned>(topic); }
constexpr uint32_t kAllTopics = (1u << kTopicCount) - 1;

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

const char* TopicName(Topic topic) {
  switch (topic) {
    case Topic::kNodes: return "nodes";
    case Topic::kClients: return "clients";
    case Topic::kLeases: return "allocations";
    case Topic::kJobs: return "jobs";
    case Topic::kEvents: return "events";
  }
  return "?";
}

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

 private:
  void Touch(const Status& s, Topic topic) {
    if (!s.ok()) return;
    wrote_ = true;
    topics_ |= TopicBit(topic);
  }

  store::Txn& inner_;
  bool wrote_ = false;
  uint32_t topics_ = 0;
};

Cluster::Cluster(std::unique_ptr<store::Store> store, ClusterConfig config, const Clock& clock)
    : store_(std::move(store)),
      config_(std::move(config)),
      clock_(clock),
      ledger_(std::make_unique<sched::Ledger>(clock, config_.ledger)),
      queue_(config_.queue),
      shared_store_(config_.sync_interval.count() > 0 &&
                    StartsWith(store_->Describe(), "postgres")) {
  std::random_device rd;
  random_state_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                  static_cast<uint64_t>(clock.SteadyNow().time_since_epoch().count());
}

Cluster::~Cluster() { Stop(); }

std::string Cluster::NewId(const std::string& prefix) {
  // splitmix64 over a random seed: ids unique across replicas without coordination.
  uint64_t z = (random_state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%012llx", static_cast<unsigned long long>(z >> 16));
  return prefix + "-" + buf;
}

std::chrono::steady_clock::time_point Cluster::HeardAt(WallTime last_heartbeat) const {
  const auto now_wall = clock_.WallNow();
  const auto now = clock_.SteadyNow();
  auto ago = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      now_wall - std::min(now_wall, last_heartbeat));
  return now - ago;
}

// ---- store synchronisation ----------------------------------------------------------------

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
  revision_ = 0;
  // A read-only transaction catches up from revision 0: everything, consistently.
  return store_->Update(Durability::kRelaxed, [&](store::Txn& txn) { return CatchUpLocked(txn); });
}

Status Cluster::WriteLocked(Durability durability, const std::function<Status(store::Txn&)>& fn) {
  int64_t committed = revision_;
  uint32_t txn_topics = 0;
  touched_ = 0;
  Status s = store_->Update(durability, [&](store::Txn& inner) -> Status {
    if (inner.Revision() != revision_) FLYT_RETURN_IF_ERROR(CatchUpLocked(inner));
    CountingTxn txn(inner);
    FLYT_RETURN_IF_ERROR(fn(txn));
    committed = inner.Revision() + (txn.wrote() ? 1 : 0);
    txn_topics = txn.topics();
    return Status::Ok();
  });
  if (s.ok()) {
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
  std::scoped_lock lock(mu_);
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

// ---- inventory -------------------------------------------------------------------------------

Result<json> Cluster::Heartbeat(const Caller& caller, const json& body) {
  Body b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"name", "api_url", "labels", "version", "snapshot", "events"}));
  NodeRecord incoming;
  FLYT_RETURN_IF_ERROR(b.String("name", 128, incoming.name));
  if (!ValidName(incoming.name)) {
    return InvalidArgument("name must be 1-128 characters of [A-Za-z0-9._-]");
  }
  FLYT_RETURN_IF_ERROR(b.String("api_url", 256, incoming.api_url));
  FLYT_RETURN_IF_ERROR(b.Labels("labels", incoming.labels));
  FLYT_RETURN_IF_ERROR(b.String("version", 64, incoming.version));
  if (!b.Has("snapshot")) return InvalidArgument("snapshot is missing");
  auto snap = gpu::SnapshotFromJson(body["snapshot"]);
  if (!snap.ok()) return snap.status().WithContext("snapshot");
  if (snap->gpus.size() > kMaxGpusPerNode) return InvalidArgument("more than 256 GPUs");
  // Leases and the store's claims know a GPU by its UUID: each must be there, and unique.
  std::set<uint32_t> seen;
  std::set<std::string> uuids;
  for (gpu::GpuInfo& g : snap->gpus) {
    if (!seen.insert(g.index).second) {
      return InvalidArgument("snapshot: GPU index " + std::to_string(g.index) + " appears twice");
    }
    // A GPU already lost when its node manager started cannot tell its UUID. It can never be
    // leased, but it must be seen: it stands under a name of its own on this node.
    if (g.uuid.empty() && g.lost) g.uuid = "GPU-lost-at-index-" + std::to_string(g.index);
    if (g.uuid.empty() || g.uuid.size() > 128 || g.uuid.find('\0') != std::string::npos) {
      return InvalidArgument("snapshot: GPU " + std::to_string(g.index) +
                             " needs a UUID (1-128 characters, no NUL)");
    }
    if (!uuids.insert(g.uuid).second) {
      return InvalidArgument("snapshot: GPU UUID " + g.uuid + " appears twice");
    }
  }
  incoming.snapshot = std::move(*snap);
  std::vector<json> node_events;
  if (b.Has("events")) {
    if (!body["events"].is_array()) return InvalidArgument("events must be an array");
    for (const json& e : body["events"]) {
      if (node_events.size() >= kMaxEventsPerHeartbeat) break;
      if (e.is_object()) node_events.push_back(e);
    }
  }
  if (!incoming.api_url.empty() && !StartsWith(incoming.api_url, "http://")) {
    return InvalidArgument("api_url must be an http:// URL");
  }

  std::scoped_lock lock(mu_);
  const auto now = clock_.WallNow();
  Status s = WriteLocked(Durability::kRelaxed, [&](store::Txn& txn) -> Status {
    auto it = nodes_.find(incoming.name);
    const bool is_new = it == nodes_.end();
    // A node is updated only by the token that registered it (or an admin): with a token per
    // node, one node cannot overwrite another's record or redirect its api_url.
    if (!is_new && caller.role != Role::kAdmin && !it->second.registered_by.empty() &&
        it->second.registered_by != caller.name) {
      return PermissionDenied("node " + incoming.name + " was registered by another token");
    }
    NodeRecord rec = is_new ? NodeRecord{} : it->second;
    if (is_new || rec.registered_by.empty()) rec.registered_by = caller.name;
    const gpu::GpuSnapshot previous = rec.snapshot;
    rec.name = incoming.name;
    rec.api_url = incoming.api_url;
    rec.labels = incoming.labels;
    rec.version = incoming.version;
    rec.snapshot = std::move(incoming.snapshot);
    if (is_new) rec.registered_at = now;
    rec.last_heartbeat = now;
    ++rec.heartbeats;
    if (is_new) {
      FLYT_RETURN_IF_ERROR(
          Event(txn, "node.registered",
                {{"node", rec.name},
                 {"gpus", rec.snapshot.gpus.size()},
                 {"message", "node " + rec.name + " registered with " +
                                 std::to_string(rec.snapshot.gpus.size()) + " GPU(s)"}}));
    } else if (!rec.reachable) {
      FLYT_RETURN_IF_ERROR(
          Event(txn, "node.reachable",
                {{"node", rec.name}, {"message", "node " + rec.name + " sends heartbeats again"}}));
    }
    rec.reachable = true;
    for (const gpu::GpuInfo& g : rec.snapshot.gpus) {
      bool was_lost = false;
      for (const gpu::GpuInfo& p : previous.gpus) {
        if (p.uuid == g.uuid) was_lost = p.lost;
      }
      if (g.lost && !was_lost) {
        FLYT_RETURN_IF_ERROR(Event(txn, "gpu.lost",
                                   {{"node", rec.name},
                                    {"gpu", g.index},
                                    {"uuid", g.uuid},
                                    {"message", "GPU " + std::to_string(g.index) + " on " +
                                                    rec.name + " is lost (fell off the bus)"}}));
      }
    }
    for (json& e : node_events) {
      std::string type = e.value("type", std::string("event"));
      if (type.size() > 32) type = "event";
      e["node"] = rec.name;
      if (!e.contains("message")) e["message"] = e.value("description", std::string());
      FLYT_RETURN_IF_ERROR(Event(txn, "gpu." + type, e));
    }
    FLYT_RETURN_IF_ERROR(PutNode(txn, rec));
    ApplyNodeLocked(std::move(rec));
    ++counters_.heartbeats;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (queue_.size() > 0) Wake(/*strong=*/false);
  return json{{"ok", true},
              {"heartbeat_interval_seconds",
               std::max<int64_t>(1, config_.ledger.unreachable_after.count() / 3)}};
}

Result<json> Cluster::ClientHeartbeat(const Caller& caller, const json& body) {
  Body b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"name", "address", "labels"}));
  ClientRecord incoming;
  incoming.name = caller.role == Role::kAdmin ? "" : caller.name;
  FLYT_RETURN_IF_ERROR(b.String("name", 128, incoming.name));
  if (caller.role != Role::kAdmin && incoming.name != caller.name) {
    return PermissionDenied("a client registers under its own name (" + caller.name + ")");
  }
  if (!ValidName(incoming.name)) {
    return InvalidArgument("name must be 1-128 characters of [A-Za-z0-9._-]");
  }
  FLYT_RETURN_IF_ERROR(b.String("address", 256, incoming.address));
  FLYT_RETURN_IF_ERROR(b.Labels("labels", incoming.labels));
  std::scoped_lock lock(mu_);
  const auto now = clock_.WallNow();
  json out;
  FLYT_RETURN_IF_ERROR(WriteLocked(Durability::kRelaxed, [&](store::Txn& txn) -> Status {
    auto it = clients_.find(incoming.name);
    ClientRecord rec = it == clients_.end() ? ClientRecord{} : it->second;
    if (it == clients_.end()) {
      rec.registered_at = now;
      FLYT_RETURN_IF_ERROR(Event(
          txn, "client.registered",
          {{"client", incoming.name}, {"message", "client " + incoming.name + " registered"}}));
    }
    rec.name = incoming.name;
    rec.address = incoming.address;
    rec.labels = incoming.labels;
    rec.last_seen = now;
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kClients, rec.name, DumpJson(ToJson(rec))));
    out = ToJson(rec);
    clients_[rec.name] = std::move(rec);
    return Status::Ok();
  }));
  return out;
}

json Cluster::Nodes() const {
  std::scoped_lock lock(mu_);
  std::map<std::string, int> leased;
  for (const sched::Lease& l : ledger_->Leases()) {
    for (const auto& g : l.gpus) ++leased[g.node];
  }
  json list = json::array();
  for (const auto& [name, n] : nodes_) {
    int lost = 0;
    for (const auto& g : n.snapshot.gpus) lost += g.lost ? 1 : 0;
    list.push_back(
        {{"name", name},
         {"state", ledger_->Reachable(name) ? "reachable" : "unreachable"},
         {"labels", ToJson(n)["labels"]},
         {"api_url", n.api_url},
         {"version", n.version},
         {"gpu_count", n.snapshot.gpus.size()},
         {"gpus_lost", lost},
         {"gpus_leased", leased[name]},
         {"gpu_model", n.snapshot.gpus.empty() ? "" : n.snapshot.gpus[0].name},
         {"driver_version", n.snapshot.driver_version.value_or("")},
         {"source", gpu::SourceName(n.snapshot.source)},
         {"simulated_scenario",
          n.snapshot.simulated_scenario ? json(*n.snapshot.simulated_scenario) : json(nullptr)},
         {"registered_at", gpu::FormatTime(n.registered_at)},
         {"last_heartbeat", gpu::FormatTime(n.last_heartbeat)},
         {"seconds_since_heartbeat", Seconds(clock_.WallNow() - n.last_heartbeat)},
         {"heartbeats", n.heartbeats}});
  }
  return {{"nodes", list}};
}

Result<json> Cluster::Node(const std::string& name) const {
  std::scoped_lock lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return NotFound("no node " + name);
  json j = ToJson(it->second);
  j["state"] = ledger_->Reachable(name) ? "reachable" : "unreachable";
  j["registered_at"] = gpu::FormatTime(it->second.registered_at);
  j["last_heartbeat"] = gpu::FormatTime(it->second.last_heartbeat);
  return j;
}

namespace {

// One GPU as the API shows it: its readings, where it is and who holds it.
json GpuJson(const sched::Ledger& ledger, const std::string& node, const gpu::GpuInfo& g,
             bool reachable, const std::vector<Hold>& on_gpu) {
  json j = gpu::ToJson(g);
  j["process_count"] = g.processes.size();
  j["node"] = node;
  uint64_t reserved = 0;
  json holders = json::array();
  for (const Hold& h : on_gpu) {
    reserved += h.reserved_bytes;
    holders.push_back({{"lease_id", h.lease->id},
                       {"owner", h.lease->owner},
                       {"exclusive", h.lease->exclusive},
                       {"expires_at", gpu::FormatTime(h.lease->expires_at)}});
  }
  j["allocation_state"] = AllocationState(reachable, g.lost, on_gpu);
  j["leases"] = holders;
  j["reserved_memory_mb"] = static_cast<double>(reserved) / kMiB;
  j["score"] = ledger.Score(LedgerGpu(g), reserved);
  return j;
}

}  // namespace

json Cluster::Gpus() const {
  std::scoped_lock lock(mu_);
  const std::vector<sched::Lease> leases = ledger_->Leases();
  Holds holds = HoldsOf(leases, clock_.WallNow());
  json list = json::array();
  for (const auto& [name, n] : nodes_) {
    const bool reachable = ledger_->Reachable(name);
    for (const gpu::GpuInfo& g : n.snapshot.gpus) {
      json j = GpuJson(*ledger_, name, g, reachable, holds[{name, g.uuid}]);
      j.erase("processes");
      list.push_back(std::move(j));
    }
  }
  return {{"gpus", list}};
}

Result<json> Cluster::Gpu(const std::string& node, unsigned index) const {
  std::scoped_lock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound("no node " + node);
  for (const gpu::GpuInfo& g : it->second.snapshot.gpus) {
    if (g.index != index) continue;
    const std::vector<sched::Lease> leases = ledger_->Leases();  // the holds point into it
    Holds holds = HoldsOf(leases, clock_.WallNow());
    json j = GpuJson(*ledger_, node, g, ledger_->Reachable(node), holds[{node, g.uuid}]);
    j["node_api_url"] = it->second.api_url;
    return j;
  }
  return NotFound("node " + node + " has no GPU " + std::to_string(index));
}

Result<std::string> Cluster::NodeApiUrl(const std::string& node) const {
  std::scoped_lock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound("no node " + node);
  if (it->second.api_url.empty()) {
    return NotFound("node " + node + " did not advertise an API URL (--advertise-url)");
  }
  return it->second.api_url;
}

std::shared_ptr<const std::string> Cluster::GpusBody() {
  // Serialising every GPU of a large cluster costs milliseconds (8.8 MB for 8,000 GPUs): build
  // it at most once per state change, and at most once a second while heartbeats stream in.
  const auto now = std::chrono::steady_clock::now();
  uint64_t version;
  {
    std::scoped_lock lock(mu_);
    version = state_version_;
  }
  {
    std::scoped_lock lock(gpus_mu_);
    if (gpus_body_ && (gpus_version_ == version || now - gpus_built_ < std::chrono::seconds(1))) {
      return gpus_body_;
    }
  }
  auto body = std::make_shared<const std::string>(DumpJson(Gpus()) + "\n");
  std::scoped_lock lock(gpus_mu_);
  gpus_body_ = body;
  gpus_version_ = version;
  gpus_built_ = now;
  return body;
}

json Cluster::Clients() const {
  std::scoped_lock lock(mu_);
  std::map<std::string, int> leases;
  for (const sched::Lease& l : ledger_->Leases()) ++leases[l.owner];
  json list = json::array();
  for (const auto& [name, c] : clients_) {
    json j = ToJson(c);
    j["registered_at"] = gpu::FormatTime(c.registered_at);
    j["last_seen"] = gpu::FormatTime(c.last_seen);
    j["leases"] = leases[name];
    list.push_back(std::move(j));
  }
  return {{"clients", list}};
}

// ---- the ledger ------------------------------------------------------------------------------

Result<json> Cluster::Allocate(const Caller& caller, const json& body) {
  Body b(body);
  FLYT_RETURN_IF_ERROR(
      b.Only({"gpus", "min_free_memory_mb", "max_utilization", "same_node", "gpu_model", "policy",
              "exclusive", "ttl_seconds", "owner", "labels"}));
  sched::AllocationRequest req;
  int64_t gpus = 1, ttl = config_.default_lease_ttl.count(), max_util = 100;
  double min_free_mb = 0;
  FLYT_RETURN_IF_ERROR(b.Int("gpus", 1, 64, gpus));
  FLYT_RETURN_IF_ERROR(b.Number("min_free_memory_mb", 0, 1e8, min_free_mb));
  FLYT_RETURN_IF_ERROR(b.Int("max_utilization", 0, 100, max_util));
  FLYT_RETURN_IF_ERROR(b.Bool("same_node", req.same_node));
  FLYT_RETURN_IF_ERROR(b.String("gpu_model", 64, req.gpu_model));
  FLYT_RETURN_IF_ERROR(b.Policy("policy", req.policy));
  FLYT_RETURN_IF_ERROR(b.Bool("exclusive", req.exclusive));
  FLYT_RETURN_IF_ERROR(b.Int("ttl_seconds", 1, 30 * 86400, ttl));
  FLYT_RETURN_IF_ERROR(b.Labels("labels", req.labels));
  req.owner = caller.name;
  FLYT_RETURN_IF_ERROR(b.String("owner", 128, req.owner));
  if (req.owner != caller.name && caller.role != Role::kAdmin) {
    return PermissionDenied("only an admin may allocate for another owner");
  }
  req.gpus = static_cast<int>(gpus);
  req.max_utilization_percent = static_cast<uint32_t>(max_util);
  req.min_free_memory_bytes = static_cast<uint64_t>(min_free_mb * kMiB);
  req.ttl = std::chrono::seconds(ttl);

  std::scoped_lock lock(mu_);
  req.id = NewId("lease");
  json out;
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) -> Status {
    // A lease past its expiry no longer holds its GPUs in the ledger, but its claim is still in
    // the store until expiry runs: run it first, so those GPUs can be granted now.
    bool expired = false;
    FLYT_RETURN_IF_ERROR(ExpireLocked(txn, expired));
    FLYT_ASSIGN_OR_RETURN(sched::Lease lease, ledger_->Allocate(req));
    FLYT_RETURN_IF_ERROR(txn.ClaimGpus(lease.id, GpuKeys(lease), lease.exclusive));
    out = ToJson(lease);
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, lease.id, DumpJson(out)));
    json event = out;
    event["message"] = "lease " + lease.id + " granted to " + lease.owner + ": " +
                       std::to_string(lease.gpus.size()) + " GPU(s) on " +
                       out["node"].get<std::string>();
    return Event(txn, "lease.granted", event);
  });
  if (!s.ok()) {
    if (s.code() == StatusCode::kResourceExhausted) ++counters_.allocations_refused;
    return s;
  }
  ++counters_.allocations_granted;
  return out;
}

Result<json> Cluster::Renew(const Caller& caller, const std::string& id, const json& body) {
  Body b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"ttl_seconds"}));
  std::optional<std::chrono::seconds> ttl;
  if (b.Has("ttl_seconds")) {
    int64_t v = 0;
    FLYT_RETURN_IF_ERROR(b.Int("ttl_seconds", 1, 30 * 86400, v));
    ttl = std::chrono::seconds(v);
  }
  std::scoped_lock lock(mu_);
  json out;
  FLYT_RETURN_IF_ERROR(WriteLocked(Durability::kDurable, [&](store::Txn& txn) -> Status {
    auto existing = ledger_->Find(id);
    if (!existing) return NotFound("no lease " + id + " (released, or expired)");
    FLYT_RETURN_IF_ERROR(CheckOwner(caller, existing->owner, "lease " + id));
    FLYT_ASSIGN_OR_RETURN(sched::Lease lease, ledger_->Renew(id, ttl));
    out = ToJson(lease);
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, lease.id, DumpJson(out)));
    return Event(
        txn, "lease.renewed",
        {{"lease_id", id},
         {"expires_at", out["expires_at"]},
         {"message", "lease " + id + " renewed until " + out["expires_at"].get<std::string>()}});
  }));
  return out;
}

Status Cluster::FinishJobOfLeaseLocked(store::Txn& txn, const std::string& lease_id, JobState state,
                                       const std::string& message) {
  auto jl = job_of_lease_.find(lease_id);
  if (jl == job_of_lease_.end()) return Status::Ok();
  auto it = jobs_.find(jl->second);
  if (it == jobs_.end() || it->second.state != JobState::kRunning) return Status::Ok();
  Job& job = it->second;
  job.state = state;
  job.message = message;
  job.finished_at = clock_.WallNow();
  FLYT_RETURN_IF_ERROR(PutJob(txn, job));
  FLYT_RETURN_IF_ERROR(
      Event(txn, std::string("job.") + JobStateName(state),
            {{"job_id", job.id},
             {"task_name", job.task_name},
             {"message", "job " + job.id + " " + JobStateName(state) + ": " + message}}));
  if (!job.monitoring_session.empty()) {
    std::string id = job.id;
    Post([this, id] { CloseSession(id); });
  }
  return Status::Ok();
}

Status Cluster::Release(const Caller& caller, const std::string& id) {
  std::scoped_lock lock(mu_);
  FLYT_RETURN_IF_ERROR(WriteLocked(Durability::kDurable, [&](store::Txn& txn) -> Status {
    auto existing = ledger_->Find(id);
    if (!existing) return NotFound("no lease " + id + " (released, or expired)");
    FLYT_RETURN_IF_ERROR(CheckOwner(caller, existing->owner, "lease " + id));
    FLYT_RETURN_IF_ERROR(ledger_->Release(id));
    FLYT_RETURN_IF_ERROR(txn.Delete(Table::kLeases, id));
    FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(id));
    FLYT_RETURN_IF_ERROR(Event(txn, "lease.released",
                               {{"lease_id", id},
                                {"owner", existing->owner},
                                {"message", "lease " + id + " released by " + caller.name}}));
    return FinishJobOfLeaseLocked(txn, id, JobState::kCompleted, "its lease was released");
  }));
  Wake(/*strong=*/true);
  return Status::Ok();
}

json Cluster::Allocations() const {
  std::scoped_lock lock(mu_);
  json list = json::array();
  const auto now = clock_.WallNow();
  for (const sched::Lease& l : ledger_->Leases()) {
    if (l.expires_at <= now) continue;
    json j = ToJson(l);
    j["expires_in_seconds"] = Seconds(l.expires_at - now);
    auto jl = job_of_lease_.find(l.id);
    j["job_id"] = jl == job_of_lease_.end() ? json(nullptr) : json(jl->second);
    list.push_back(std::move(j));
  }
  return {{"allocations", list}};
}

// ---- jobs ------------------------------------------------------------------------------------

std::string Cluster::NeverFitsLocked(const sched::AllocationRequest& r) const {
  if (nodes_.empty()) return "";  // nothing known yet: the job waits for nodes to register
  uint64_t largest_gpu = 0;
  size_t most_on_node = 0, total = 0;
  for (const auto& [name, node] : nodes_) {
    size_t fitting = 0;
    for (const gpu::GpuInfo& g : node.snapshot.gpus) {
      if (!r.gpu_model.empty() && g.name.find(r.gpu_model) == std::string::npos) continue;
      const uint64_t mem = g.memory_total_bytes.value_or(0);
      const uint64_t need =
          std::max<uint64_t>(r.min_free_memory_bytes,
                             static_cast<uint64_t>(r.min_free_fraction * static_cast<double>(mem)));
      largest_gpu = std::max(largest_gpu, mem);
      if (mem >= need && mem > 0) ++fitting;
    }
    most_on_node = std::max(most_on_node, fitting);
    total += fitting;
  }
  const size_t want = static_cast<size_t>(r.gpus);
  const std::string model = r.gpu_model.empty() ? "" : " " + r.gpu_model;
  if (total == 0) {
    return "needs " + std::to_string(r.min_free_memory_bytes / kMiB) + " MiB free per GPU; the" +
           " largest" + model + " GPU in the cluster has " + std::to_string(largest_gpu / kMiB) +
           " MiB";
  }
  if (r.same_node && most_on_node < want) {
    return "needs " + std::to_string(want) + model + " GPU(s) on one node that can hold it; the" +
           " most on any node is " + std::to_string(most_on_node);
  }
  if (total < want) {
    return "needs " + std::to_string(want) + model + " GPU(s) that can hold it; the cluster has " +
           std::to_string(total);
  }
  return "";
}

Result<json> Cluster::Submit(const Caller& caller, const json& task) {
  json spec = task;
  json scheduling = json::object();
  if (spec.contains("scheduling")) {
    scheduling = spec["scheduling"];
    if (!scheduling.is_object()) return InvalidArgument("scheduling must be an object");
    spec.erase("scheduling");
  }
  Body b(scheduling);
  FLYT_RETURN_IF_ERROR(b.Only({"priority", "timeout_seconds", "gpu_model", "policy",
                               "lease_ttl_seconds", "max_utilization", "owner"}));
  int64_t priority = 0, timeout = config_.job_timeout.count(),
          lease_ttl = config_.job_lease_ttl.count(), max_util = 100;
  std::string gpu_model, owner = caller.name;
  // Jobs pack by default: spreading them leaves no whole node free for the next 8-GPU experiment
  // (docs/benchmarks.md measures the difference).
  sched::Policy policy = sched::Policy::kBinpack;
  FLYT_RETURN_IF_ERROR(b.Int("priority", -1000, 1000, priority));
  FLYT_RETURN_IF_ERROR(b.Int("timeout_seconds", 1, 30 * 86400, timeout));
  FLYT_RETURN_IF_ERROR(b.Int("lease_ttl_seconds", 1, 30 * 86400, lease_ttl));
  FLYT_RETURN_IF_ERROR(b.Int("max_utilization", 0, 100, max_util));
  FLYT_RETURN_IF_ERROR(b.String("gpu_model", 64, gpu_model));
  FLYT_RETURN_IF_ERROR(b.Policy("policy", policy));
  FLYT_RETURN_IF_ERROR(b.String("owner", 128, owner));
  if (owner != caller.name && caller.role != Role::kAdmin) {
    return PermissionDenied("only an admin may submit for another owner");
  }
  sched::EstimateOptions options;
  options.allow_local_files = false;
  options.max_experiments = kMaxExperimentsPerSubmission;
  FLYT_ASSIGN_OR_RETURN(sched::TaskEstimate estimate, sched::EstimateTask(spec, options));
  const json estimate_json = sched::ToJson(estimate);

  std::scoped_lock lock(mu_);
  const std::string submission = NewId("sub");
  const auto now = clock_.WallNow();
  json jobs = json::array();
  std::vector<Job> created;
  for (const sched::Experiment& e : estimate.experiments) {
    Job job;
    job.id = NewId("job");
    job.submission = submission;
    job.task_name = estimate.task_name;
    job.model = estimate.model;
    job.runtime = estimate.runtime;
    job.experiment = e.index;
    job.experiments = estimate.experiments.size();
    job.parameters = e.parameters;
    job.estimate = estimate_json["experiments"][e.index];
    job.estimate["model_source"] = estimate.model_source;
    job.owner = owner;
    job.priority = static_cast<int>(priority);
    job.timeout = std::chrono::seconds(timeout);
    job.submitted_at = now;
    job.request.gpus = e.gpus;
    job.request.min_free_memory_bytes =
        static_cast<uint64_t>(std::ceil(e.min_free_memory_mib)) * kMiB;
    job.request.max_utilization_percent = static_cast<uint32_t>(max_util);
    job.request.gpu_model = gpu_model;
    job.request.policy = policy;
    job.request.exclusive = true;
    job.request.ttl = std::chrono::seconds(lease_ttl);
    job.request.owner = owner;
    job.request.id = NewId("lease");
    if (estimate.runtime == "vllm") job.request.min_free_fraction = e.free_fraction;
    if (estimate.runtime == "sglang") job.request.max_free_spread = 0.10;
    job.message = "waiting for the scheduler";
    created.push_back(std::move(job));
  }
  FLYT_RETURN_IF_ERROR(WriteLocked(Durability::kDurable, [&](store::Txn& txn) -> Status {
    // An experiment no node of the cluster could ever hold fails now, not after its timeout.
    for (Job& job : created) {
      const std::string why = NeverFitsLocked(job.request);
      if (why.empty()) continue;
      job.state = JobState::kFailed;
      job.finished_at = now;
      job.message = "cannot run in this cluster: " + why;
    }
    // FIFO across replicas: the revision this transaction commits orders the submission.
    const int64_t base = (txn.Revision() + 1) << 20;
    for (Job& job : created) {
      job.order = base + static_cast<int64_t>(job.experiment);
      FLYT_RETURN_IF_ERROR(PutJob(txn, job));
    }
    FLYT_RETURN_IF_ERROR(
        Event(txn, "job.submitted",
              {{"submission", submission},
               {"task_name", estimate.task_name},
               {"jobs", created.size()},
               {"message", "task " + estimate.task_name + " submitted by " + owner + ": " +
                               std::to_string(created.size()) + " experiment(s)"}}));
    for (Job& job : created) {
      json entry = {{"id", job.id},
                    {"experiment", job.experiment},
                    {"parameters", job.parameters},
                    {"gpus", job.request.gpus},
                    {"min_free_memory_mb", job.request.min_free_memory_bytes / kMiB},
                    {"status", JobStateName(job.state)}};
      if (job.state == JobState::kFailed) {
        entry["message"] = job.message;
        FLYT_RETURN_IF_ERROR(
            Event(txn, "job.failed",
                  {{"job_id", job.id}, {"message", "job " + job.id + " " + job.message}}));
      }
      jobs.push_back(std::move(entry));
      ApplyJobLocked(job);
    }
    return Status::Ok();
  }));
  Wake(/*strong=*/true);
  return json{{"submission", submission},
              {"task_name", estimate.task_name},
              {"model_source", estimate.model_source},
              {"jobs", jobs}};
}

Result<json> Cluster::Jobs(const std::string& status_filter, size_t limit) const {
  std::optional<JobState> want;
  if (!status_filter.empty()) {
    want = ParseJobState(status_filter);
    if (!want) {
      return InvalidArgument("status must be queued, running, completed, failed or cancelled");
    }
  }
  std::scoped_lock lock(mu_);
  std::vector<const Job*> sorted;
  for (const auto& [id, job] : jobs_) {
    if (!want || job.state == *want) sorted.push_back(&job);
  }
  std::sort(sorted.begin(), sorted.end(), [](const Job* a, const Job* b) {
    return a->submitted_at != b->submitted_at ? a->submitted_at > b->submitted_at
                                              : a->order > b->order;
  });
  const size_t matching = sorted.size();
  if (sorted.size() > limit) sorted.resize(limit);
  const auto now = clock_.WallNow();
  json list = json::array();
  for (const Job* job : sorted) {
    const WallTime started = job->started_at.value_or(job->finished_at.value_or(now));
    json gpu_model = nullptr;
    if (job->gpu_info.is_object() && job->gpu_info.contains("model")) {
      gpu_model = job->gpu_info["model"];
    }
    list.push_back(
        {{"id", job->id},
         {"submission", job->submission},
         {"task_name", job->task_name},
         {"experiment", job->experiment},
         {"experiments", job->experiments},
         {"parameters", job->parameters},
         {"model", job->model},
         {"runtime", job->runtime},
         {"owner", job->owner},
         {"priority", job->priority},
         {"status", JobStateName(job->state)},
         {"message", job->message},
         {"gpus", job->request.gpus},
         {"gpu_model", gpu_model},
         {"node",
          job->gpu_info.is_object() ? job->gpu_info.value("node", json(nullptr)) : json(nullptr)},
         {"has_monitoring", job->metrics.contains("gpu_monitoring")},
         {"submitted_at", gpu::FormatTime(job->submitted_at)},
         {"wait_seconds", Seconds(started - job->submitted_at)},
         {"runtime_seconds", job->started_at
                                 ? json(Seconds(job->finished_at.value_or(now) - *job->started_at))
                                 : json(nullptr)}});
  }
  return json{{"jobs", list}, {"total", matching}};
}

Result<json> Cluster::GetJob(const std::string& id) const {
  std::scoped_lock lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job " + id);
  json j = ToJson(it->second);
  j.erase("lease_id_planned");
  if (it->second.state == JobState::kQueued) {
    size_t position = 0;
    for (const sched::QueuedJob& q : queue_.Ordered()) {
      ++position;
      if (q.id == id) {
        j["queue_position"] = position;
        j["message"] = q.last_reason.empty() ? it->second.message : q.last_reason;
      }
    }
  }
  return j;
}

Result<json> Cluster::Cancel(const Caller& caller, const std::string& id) {
  std::scoped_lock lock(mu_);
  json out;
  FLYT_RETURN_IF_ERROR(WriteLocked(Durability::kDurable, [&](store::Txn& txn) -> Status {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job " + id);
    Job& job = it->second;
    FLYT_RETURN_IF_ERROR(CheckOwner(caller, job.owner, "job " + id));
    if (Finished(job.state)) {
      return Status(StatusCode::kFailedPrecondition,
                    "job " + id + " has already ended (" + JobStateName(job.state) + ")");
    }
    if (job.state == JobState::kQueued) {
      queue_.Remove(id);
      job.state = JobState::kCancelled;
      job.message = "cancelled by " + caller.name + " while queued";
      job.finished_at = clock_.WallNow();
      FLYT_RETURN_IF_ERROR(PutJob(txn, job));
      FLYT_RETURN_IF_ERROR(Event(txn, "job.cancelled",
                                 {{"job_id", id}, {"message", "job " + id + " " + job.message}}));
    } else {
      const std::string lease = job.lease_id;
      if (ledger_->Release(lease).ok()) {
        FLYT_RETURN_IF_ERROR(txn.Delete(Table::kLeases, lease));
        FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(lease));
      }
      FLYT_RETURN_IF_ERROR(
          FinishJobOfLeaseLocked(txn, lease, JobState::kCancelled, "cancelled by " + caller.name));
    }
    out = ToJson(job);
    return Status::Ok();
  }));
  Wake(/*strong=*/true);
  return out;
}

Result<json> Cluster::Complete(const Caller& caller, const std::string& id, const json& body) {
  Body b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"status", "message", "metrics"}));
  std::string status = "completed", message;
  FLYT_RETURN_IF_ERROR(b.String("status", 16, status));
  FLYT_RETURN_IF_ERROR(b.String("message", 4096, message));
  if (status != "completed" && status != "failed") {
    return InvalidArgument("status must be completed or failed");
  }
  json extra = json::object();
  if (b.Has("metrics")) {
    if (!body["metrics"].is_object()) return InvalidArgument("metrics must be an object");
    extra = body["metrics"];
    extra.erase("gpu_monitoring");  // flyt's own measurement; not the caller's to set
  }
  // Close the node's monitoring session first, without holding the lock across the call.
  std::string url, session;
  {
    std::scoped_lock lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job " + id);
    FLYT_RETURN_IF_ERROR(CheckOwner(caller, it->second.owner, "job " + id));
    if (it->second.state != JobState::kRunning) {
      return Status(StatusCode::kFailedPrecondition,
                    "job " + id + " is " + JobStateName(it->second.state) + ", not running");
    }
    session = it->second.monitoring_session;
    const std::string node = it->second.gpu_info.value("node", std::string());
    if (nodes_.count(node)) url = nodes_.at(node).api_url;
  }
  json monitoring = nullptr;
  std::string monitoring_error;
  if (!session.empty() && !url.empty()) {
    auto client = http::JsonClient::Connect(url, config_.node_api_token, "the node manager");
    Result<json> stats = client.ok() ? (*client)->Delete("/api/v1/monitoring/sessions/" + session)
                                     : Result<json>(client.status());
    if (stats.ok()) {
      monitoring = std::move(*stats);
    } else {
      monitoring_error = stats.status().message();
    }
  }
  std::scoped_lock lock(mu_);
  json out;
  FLYT_RETURN_IF_ERROR(WriteLocked(Durability::kDurable, [&](store::Txn& txn) -> Status {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job " + id);
    Job& job = it->second;
    if (job.state != JobState::kRunning) {
      return Status(StatusCode::kFailedPrecondition,
                    "job " + id + " is " + JobStateName(job.state) + ", not running");
    }
    for (const auto& [k, v] : extra.items()) job.metrics[k] = v;
    if (monitoring.is_object()) {
      monitoring.erase("id");
      job.metrics["gpu_monitoring"] = monitoring;
    } else if (!monitoring.is_null()) {
      job.metrics["gpu_monitoring_error"] =
          "the node answered with something other than session stats";
    }
    if (!monitoring_error.empty()) job.metrics["gpu_monitoring_error"] = monitoring_error;
    job.monitoring_session.clear();
    const std::string lease = job.lease_id;
    if (ledger_->Release(lease).ok()) {
      FLYT_RETURN_IF_ERROR(txn.Delete(Table::kLeases, lease));
      FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(lease));
    }
    FLYT_RETURN_IF_ERROR(FinishJobOfLeaseLocked(
        txn, lease, status == "completed" ? JobState::kCompleted : JobState::kFailed,
        message.empty() ? "reported " + status + " by " + caller.name : message));
    out = ToJson(job);
    out.erase("lease_id_planned");
    return Status::Ok();
  }));
  Wake(/*strong=*/true);
  return out;
}

json Cluster::Queue() const {
  std::scoped_lock lock(mu_);
  json list = json::array();
  const auto now = clock_.WallNow();
  size_t position = 0;
  for (const sched::QueuedJob& q : queue_.Ordered()) {
    json j = {{"position", ++position},
              {"job_id", q.id},
              {"priority", q.priority},
              {"requirement", ToJson(q.request)},
              {"waiting_seconds", Seconds(now - q.submitted_at)},
              {"timeout_in_seconds", Seconds(q.deadline - now)},
              {"reason", q.last_reason}};
    auto it = jobs_.find(q.id);
    if (it != jobs_.end()) {
      j["task_name"] = it->second.task_name;
      j["experiment"] = it->second.experiment;
      j["owner"] = it->second.owner;
    }
    list.push_back(std::move(j));
  }
  return {{"queue", list}};
}

Result<json> Cluster::Events(int64_t after_id, size_t limit, bool latest) const {
  FLYT_ASSIGN_OR_RETURN(auto rows,
                        latest ? store_->LatestEvents(limit) : store_->Events(after_id, limit));
  json list = json::array();
  for (const store::EventRow& r : rows) {
    json body = json::parse(r.body, nullptr, false);
    if (!body.is_object()) body = json::object();
    body["id"] = r.id;
    body["kind"] = r.kind;
    body["at"] = gpu::FormatTime(FromMillis(r.at_ms));
    list.push_back(std::move(body));
  }
  return json{{"events", list}};
}

// ---- scheduling ------------------------------------------------------------------------------

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
  std::string id = job.id;
  Post([this, id] { OpenSession(id); });
  return Status::Ok();
}

// Leases past their TTL, or on nodes silent past the grace: gone from the ledger, the store and
// their jobs, each an event.
Status Cluster::ExpireLocked(store::Txn& txn, bool& expired_any) {
  const auto now = clock_.WallNow();
  for (const sched::Lease& gone : ledger_->Expire()) {
    const bool ttl = gone.expires_at <= now;
    const std::string why = ttl ? "its TTL ran out" : "its node stayed unreachable past the grace";
    Status del = txn.Delete(Table::kLeases, gone.id);
    if (!del.ok() && del.code() != StatusCode::kNotFound) return del;
    FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(gone.id));
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
  std::scoped_lock lock(mu_);
  const auto started = std::chrono::steady_clock::now();
  bool woke_others = false;
  Status s = WriteLocked(Durability::kDurable,
                         [&](store::Txn& txn) { return TickLocked(txn, woke_others); });
  counters_.last_pass_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  last_pass_ = clock_.SteadyNow();
  if (woke_others) dirty_ = true;  // an expiry freed GPUs: run the queue again
  if (s.ok() && last_pass_ - last_prune_ >= std::chrono::minutes(1)) {
    last_prune_ = last_pass_;
    Status pruned = store_->PruneEvents(ToMillis(clock_.WallNow()), config_.event_retention);
    if (!pruned.ok()) ++counters_.store_errors;
  }
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
      consider(heard + config_.ledger.unreachable_after + config_.ledger.lease_grace);
    }
  }
  if (auto deadline = queue_.NextDeadline()) consider(at_wall(*deadline));
  if (shared_store_) consider(next_sync_);
  consider(last_prune_ + std::chrono::minutes(1));  // events are kept to their retention
  return next;
}

void Cluster::Wake(bool strong) {
  // The caller holds mu_.
  if (strong) {
    dirty_ = true;
  } else {
    soft_dirty_ = true;
  }
  wake_cv_.notify_one();
}

void Cluster::SchedulerLoop() {
  // Heartbeats while jobs wait may free capacity (a process ended), but a pass per heartbeat
  // would be wasteful on a large cluster: those wake the queue at most this often.
  constexpr auto kSoftGap = std::chrono::seconds(1);
  std::unique_lock lock(mu_);
  while (!stopping_) {
    const auto now = clock_.SteadyNow();
    const bool due = dirty_ || (soft_dirty_ && now - last_pass_ >= kSoftGap) ||
                     (shared_store_ && now >= next_sync_);
    if (!due) {
      auto until = NextWakeLocked().value_or(now + std::chrono::hours(1));
      if (soft_dirty_) until = std::min(until, last_pass_ + kSoftGap);
      if (until > now) {
        // +1 ms: wake just after the deadline, not just before it.
        wake_cv_.wait_for(lock, until - now + std::chrono::milliseconds(1));
        continue;  // re-evaluate: woken early, by a change, or at the deadline
      }
    }
    dirty_ = false;
    soft_dirty_ = false;
    // A replica sharing its store catches up at least this often (a Tick catches up first).
    if (shared_store_) next_sync_ = now + config_.sync_interval;
    lock.unlock();
    Status s = Tick();
    lock.lock();
    if (!s.ok()) {
      // A store outage: try again shortly rather than spinning.
      wake_cv_.wait_for(lock, std::chrono::seconds(1));
    }
  }
}

// ---- monitoring sessions on node managers ----------------------------------------------------

void Cluster::Post(std::function<void()> task) {
  std::scoped_lock lock(work_mu_);
  if (work_stopping_) return;
  work_.push_back(std::move(task));
  work_cv_.notify_one();
}

void Cluster::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock lock(work_mu_);
      work_cv_.wait(lock, [&] { return work_stopping_ || !work_.empty(); });
      if (work_.empty()) return;  // stopping, and nothing left
      task = std::move(work_.front());
      work_.pop_front();
    }
    // A task talks to a node manager; nothing it meets may take the manager down.
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("node call failed: {}", e.what());
    } catch (...) {
      spdlog::error("node call failed");
    }
  }
}

void Cluster::OpenSession(const std::string& job_id) {
  std::string url, lease;
  json gpus = json::array();
  {
    std::scoped_lock lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second.state != JobState::kRunning) return;
    const std::string node = it->second.gpu_info.value("node", std::string());
    if (nodes_.count(node)) url = nodes_.at(node).api_url;
    gpus = it->second.gpu_info.value("device_ids", json::array());
    lease = it->second.lease_id;
  }
  if (url.empty()) return;
  auto client = http::JsonClient::Connect(url, config_.node_api_token, "the node manager");
  Result<json> answer = client.ok()
                            ? (*client)->Post("/api/v1/monitoring/sessions", {{"gpus", gpus}})
                            : Result<json>(client.status());
  std::string session;
  if (answer.ok() && answer->is_object() && answer->contains("id") && (*answer)["id"].is_string()) {
    session = (*answer)["id"].get<std::string>();
  }
  std::scoped_lock lock(mu_);
  auto it = jobs_.find(job_id);
  const bool still_running =
      it != jobs_.end() && it->second.state == JobState::kRunning && it->second.lease_id == lease;
  if (!still_running) {
    if (!session.empty()) {
      // The job ended while the session was being opened: close it again.
      Post([this, url, session] {
        auto c = http::JsonClient::Connect(url, config_.node_api_token, "the node manager");
        if (c.ok()) (void)(*c)->Delete("/api/v1/monitoring/sessions/" + session);
      });
    }
    return;
  }
  (void)WriteLocked(Durability::kDurable, [&](store::Txn& txn) -> Status {
    Job& job = jobs_.at(job_id);
    if (!session.empty()) {
      job.monitoring_session = session;
    } else {
      job.metrics["gpu_monitoring_error"] =
          answer.ok() ? "the node answered without a session id" : answer.status().message();
    }
    return PutJob(txn, job);
  });
}

void Cluster::CloseSession(const std::string& job_id) {
  std::string url, session;
  {
    std::scoped_lock lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second.monitoring_session.empty()) return;
    session = it->second.monitoring_session;
    const std::string node = it->second.gpu_info.value("node", std::string());
    if (nodes_.count(node)) url = nodes_.at(node).api_url;
  }
  Result<json> stats = Unavailable("the node has no API address");
  if (!url.empty()) {
    auto client = http::JsonClient::Connect(url, config_.node_api_token, "the node manager");
    stats = client.ok() ? (*client)->Delete("/api/v1/monitoring/sessions/" + session)
                        : Result<json>(client.status());
  }
  std::scoped_lock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.monitoring_session != session) return;
  (void)WriteLocked(Durability::kDurable, [&](store::Txn& txn) -> Status {
    Job& job = jobs_.at(job_id);
    if (stats.ok() && stats->is_object()) {
      stats->erase("id");
      job.metrics["gpu_monitoring"] = *stats;
    } else if (stats.ok()) {
      job.metrics["gpu_monitoring_error"] =
          "the node answered with something other than session stats";
    } else {
      job.metrics["gpu_monitoring_error"] = stats.status().message();
    }
    job.monitoring_session.clear();
    return PutJob(txn, job);
  });
}

// ---- lifecycle -------------------------------------------------------------------------------

void Cluster::Start() {
  last_pass_ = clock_.SteadyNow() - std::chrono::hours(1);
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  worker_ = std::thread([this] { WorkerLoop(); });
}

void Cluster::Stop() {
  {
    std::scoped_lock lock(mu_);
    stopping_ = true;
    streams_closed_ = true;
    wake_cv_.notify_all();
    change_cv_.notify_all();
  }
  if (scheduler_.joinable()) scheduler_.join();
  {
    std::scoped_lock lock(work_mu_);
    work_stopping_ = true;
    work_.clear();  // node calls not yet made are dropped; a restart re-derives nothing from them
    work_cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

// ---- the live stream ---------------------------------------------------------------------

void Cluster::PublishLocked(uint32_t txn_topics) {
  const uint32_t topics = txn_topics | std::exchange(touched_, 0);
  if (topics == 0) return;
  ++changes_.seq;
  for (size_t t = 0; t < kTopicCount; ++t) {
    if (topics & (1u << t)) ++changes_.topics[t];
  }
  change_cv_.notify_all();
}

ChangeMark Cluster::Changes() const {
  std::scoped_lock lock(mu_);
  return changes_;
}

ChangeMark Cluster::WaitForChange(uint64_t seen_seq, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  change_cv_.wait_for(lock, timeout,
                      [&] { return streams_closed_ || changes_.seq != seen_seq; });
  return changes_;
}

void Cluster::CloseStreams() {
  std::scoped_lock lock(mu_);
  streams_closed_ = true;
  change_cv_.notify_all();
}

bool Cluster::StreamsClosed() const {
  std::scoped_lock lock(mu_);
  return streams_closed_;
}

// ---- metrics ---------------------------------------------------------------------------------

std::string Cluster::Metrics() const {
  std::scoped_lock lock(mu_);
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto sample = [&](const std::string& series, double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    out += series + " " + buf + "\n";
  };
  int reachable = 0;
  for (const auto& [name, n] : nodes_) reachable += ledger_->Reachable(name) ? 1 : 0;
  family("flyt_cluster_nodes", "gauge", "Nodes known to the manager, by state.");
  sample("flyt_cluster_nodes{state=\"reachable\"}", reachable);
  sample("flyt_cluster_nodes{state=\"unreachable\"}",
         static_cast<double>(nodes_.size()) - reachable);

  std::map<std::string, int> gpu_states = {
      {"free", 0}, {"leased", 0}, {"shared", 0}, {"lost", 0}, {"unreachable", 0}};
  const std::vector<sched::Lease> leases = ledger_->Leases();
  Holds holds = HoldsOf(leases, clock_.WallNow());
  for (const auto& [name, n] : nodes_) {
    const bool ok = ledger_->Reachable(name);
    for (const auto& g : n.snapshot.gpus)
      ++gpu_states[AllocationState(ok, g.lost, holds[{name, g.uuid}])];
  }
  family("flyt_cluster_gpus", "gauge", "GPUs in the cluster, by allocation state.");
  for (const auto& [state, count] : gpu_states) {
    sample("flyt_cluster_gpus{state=\"" + state + "\"}", count);
  }
  family("flyt_cluster_leases", "gauge", "Active leases.");
  sample("flyt_cluster_leases", static_cast<double>(leases.size()));
  std::map<std::string, int> job_states = {
      {"queued", 0}, {"running", 0}, {"completed", 0}, {"failed", 0}, {"cancelled", 0}};
  for (const auto& [id, job] : jobs_) ++job_states[JobStateName(job.state)];
  family("flyt_cluster_jobs", "gauge", "Jobs (experiments) known to the manager, by status.");
  for (const auto& [state, count] : job_states) {
    sample("flyt_cluster_jobs{status=\"" + state + "\"}", count);
  }
  family("flyt_cluster_queue_length", "gauge", "Jobs waiting for GPUs.");
  sample("flyt_cluster_queue_length", static_cast<double>(queue_.size()));
  family("flyt_cluster_heartbeats_total", "counter", "Node heartbeats accepted.");
  sample("flyt_cluster_heartbeats_total", static_cast<double>(counters_.heartbeats));
  family("flyt_cluster_allocations_total", "counter", "Allocation requests, by result.");
  sample("flyt_cluster_allocations_total{result=\"granted\"}",
         static_cast<double>(counters_.allocations_granted));
  sample("flyt_cluster_allocations_total{result=\"refused\"}",
         static_cast<double>(counters_.allocations_refused));
  family("flyt_cluster_schedule_passes_total", "counter", "Scheduler passes over the queue.");
  sample("flyt_cluster_schedule_passes_total", static_cast<double>(counters_.schedule_passes));
  family("flyt_cluster_last_schedule_pass_seconds", "gauge",
         "Wall time of the last scheduler pass, store transaction included.");
  sample("flyt_cluster_last_schedule_pass_seconds", counters_.last_pass_seconds);
  family("flyt_cluster_store_errors_total", "counter",
         "Store transactions that failed and made the manager reload its state.");
  sample("flyt_cluster_store_errors_total", static_cast<double>(counters_.store_errors));
  family("flyt_cluster_store_revision", "gauge", "The store revision this manager reflects.");
  sample("flyt_cluster_store_revision", static_cast<double>(revision_));
  return out;
}

}  // namespace flyt::cluster
