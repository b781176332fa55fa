// The inventory commands of Cluster: node heartbeats (registration, the trusted node address,
// one GPU under one node, bounded node events), node removal, and client heartbeats. Like the
// other commands (commands.cc), each checks its request before it takes the state lock, then
// changes memory and store together in one WriteLocked transaction. See cluster.h.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>

#include <spdlog/spdlog.h>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "cluster/node_address.h"
#include "common/json.h"
#include "common/json_fields.h"
#include "common/strings.h"
#include "gpu/json.h"
#include "profile/json.h"

namespace flyt::cluster {

using internal::IsPlaceholderUuid;
using internal::kGpuClaimedReason;
using internal::LabelsField;
using nlohmann::json;
using store::Durability;
using store::Table;

namespace {

constexpr size_t kMaxGpusPerNode = 256;
// Events a heartbeat may carry at all (the body is refused beyond); [events] max_per_heartbeat
// of them are kept.
constexpr size_t kMaxEventsInBody = 10000;

// Traced CUDA processes a heartbeat may carry (node/heartbeat.h kMaxCudaPerHeartbeat).
constexpr size_t kMaxCudaPerHeartbeat = 256;

// Usage profiles a heartbeat may carry (one per GPU).
constexpr size_t kMaxProfilesPerHeartbeat = 64;

// gpu.state_changed is raised at most once per GPU in this span: changes within it are held
// back (counted), and the next heartbeat after it reports the state then current (the last one
// wins), so that a flapping GPU cannot flood the event log.
constexpr std::chrono::seconds kStateEventMinGap{30};

// The heartbeat's "profiles" array (profile/json.h ToJson). The array itself must be one (of at
// most 64 entries: else 400); an entry that ProfileFromJson refuses (bounded strings and lists),
// a second profile of one GPU, or a profile of a GPU the snapshot does not list is dropped and
// counted — never the heartbeat: a node's liveness and readings do not hang on its profiles.
// `first_error` says why the first refused entry was refused.
Status ProfilesField(const JsonFields& b, const gpu::GpuSnapshot& snapshot,
                     std::vector<profile::GpuProfile>& out, uint64_t& refused,
                     std::string& first_error) {
  const json* list = nullptr;
  FLYT_RETURN_IF_ERROR(b.OptionalArray("profiles", kMaxProfilesPerHeartbeat, list));
  if (list == nullptr) return Status::Ok();
  std::set<std::string> seen;
  auto refuse = [&](const std::string& why) {
    if (refused++ == 0) first_error = why;
  };
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string name = "profiles[" + std::to_string(i) + "]";
    auto p = profile::ProfileFromJson((*list)[i]);
    if (!p.ok()) {
      refuse(name + ": " + p.status().message());
      continue;
    }
    if (!seen.insert(p->uuid).second) {
      refuse(name + ": GPU UUID " + p->uuid + " is profiled twice");
      continue;
    }
    const gpu::GpuInfo* gpu = nullptr;
    for (const gpu::GpuInfo& g : snapshot.gpus) {
      if (g.uuid == p->uuid) gpu = &g;
    }
    if (gpu == nullptr) continue;  // a GPU that left between the profile and the snapshot
    p->index = gpu->index;         // the snapshot's index is the one the manager shows
    out.push_back(std::move(*p));
  }
  return Status::Ok();
}

// The heartbeat's "cuda" array (trace/json.h SummaryToJson). Fields this manager does not
// know are ignored (a newer node may send more); known ones must have their type.
Status CudaField(const JsonFields& b, std::vector<CudaSummary>& out) {
  const json* list = nullptr;
  FLYT_RETURN_IF_ERROR(b.OptionalArray("cuda", kMaxCudaPerHeartbeat, list));
  if (list == nullptr) return Status::Ok();
  constexpr double kMax = 1e18;
  constexpr uint64_t kU64 = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string name = "cuda[" + std::to_string(i) + "]";
    FLYT_RETURN_IF_ERROR(JsonFields::Of((*list)[i], name).status());
    JsonFields e((*list)[i], name + ".");
    CudaSummary c;
    FLYT_ASSIGN_OR_RETURN(c.pid, e.RequiredInt<uint32_t>("pid", 0, 0xffffffffu));
    FLYT_RETURN_IF_ERROR(e.OptionalString("comm", 64, c.comm));
    FLYT_RETURN_IF_ERROR(e.OptionalString("gpu_uuid", 128, c.gpu_uuid));
    FLYT_RETURN_IF_ERROR(e.OptionalBool("remote", c.remote));
    FLYT_RETURN_IF_ERROR(e.OptionalInt<uint64_t>("launches", 0, kU64, c.launches));
    FLYT_RETURN_IF_ERROR(e.OptionalNumber("launches_per_second", 0, kMax, c.launches_per_second));
    FLYT_RETURN_IF_ERROR(
        e.OptionalInt<uint64_t>("device_memory_bytes", 0, kU64, c.device_memory_bytes));
    FLYT_RETURN_IF_ERROR(e.OptionalInt<uint64_t>("device_memory_peak_bytes", 0, kU64,
                                                 c.device_memory_peak_bytes));
    FLYT_RETURN_IF_ERROR(e.OptionalInt<uint64_t>("leaked_bytes", 0, kU64, c.leaked_bytes));
    FLYT_RETURN_IF_ERROR(e.OptionalNumber("busy_seconds", 0, kMax, c.busy_seconds));
    FLYT_RETURN_IF_ERROR(e.OptionalNumber("core_usage", 0, kMax, c.core_usage));
    FLYT_RETURN_IF_ERROR(e.OptionalBool("exited", c.exited));
    out.push_back(std::move(c));
  }
  return Status::Ok();
}

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

// ---- inventory -------------------------------------------------------------------------------

Result<json> Cluster::Heartbeat(const Caller& caller, const json& body) {
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(
      b.Only({"name", "api_url", "labels", "version", "snapshot", "events", "cuda", "gpu_servers",
              "profiles"}));
  NodeRecord incoming;
  FLYT_RETURN_IF_ERROR(b.OptionalString("name", 128, incoming.name));
  if (!ValidName(incoming.name)) {
    return InvalidArgument("name must be 1-128 characters of [A-Za-z0-9._-]");
  }
  FLYT_RETURN_IF_ERROR(b.OptionalString("api_url", 256, incoming.api_url));
  FLYT_RETURN_IF_ERROR(LabelsField(b, "labels", incoming.labels));
  FLYT_RETURN_IF_ERROR(b.OptionalString("version", 64, incoming.version));
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
    if (g.uuid.empty() && g.lost) g.uuid = internal::kLostUuidPrefix + std::to_string(g.index);
    if (g.uuid.empty() || g.uuid.size() > 128 || g.uuid.find('\0') != std::string::npos) {
      return InvalidArgument("snapshot: GPU " + std::to_string(g.index) +
                             " needs a UUID (1-128 characters, no NUL)");
    }
    if (!uuids.insert(g.uuid).second) {
      return InvalidArgument("snapshot: GPU UUID " + g.uuid + " appears twice");
    }
  }
  incoming.snapshot = std::move(*snap);
  FLYT_RETURN_IF_ERROR(CudaField(b, incoming.cuda));
  uint64_t profiles_refused = 0;
  std::string profile_error;
  FLYT_RETURN_IF_ERROR(ProfilesField(b, incoming.snapshot, incoming.profiles, profiles_refused,
                                     profile_error));
  // The node's GPU servers (absent: the node runs none, or predates them).
  if (b.Has("gpu_servers")) {
    FLYT_ASSIGN_OR_RETURN(incoming.gpu_servers, GpuServersFromJson(body["gpu_servers"]));
  }
  std::vector<json> node_events;
  const json* events = nullptr;
  // Events past the first [events] max_per_heartbeat are dropped and counted, not refused; an
  // event larger than max_event_bytes is kept cut short and marked "truncated".
  FLYT_RETURN_IF_ERROR(b.OptionalArray("events", kMaxEventsInBody, events));
  uint64_t dropped = 0, truncated = 0;
  if (events) {
    for (const json& e : *events) {
      if (!e.is_object()) continue;
      if (node_events.size() >= config_.max_events_per_heartbeat) {
        ++dropped;
        continue;
      }
      const size_t bytes = e.dump().size();
      if (bytes <= config_.max_event_bytes) {
        node_events.push_back(e);
        continue;
      }
      ++truncated;
      json cut = json::object();
      // The small scalar fields stay; the message is cut to a quarter of the bound.
      for (const auto& [k, v] : e.items()) {
        if (k.size() <= 32 && (v.is_number() || v.is_boolean() ||
                               (v.is_string() && v.get_ref<const std::string&>().size() <= 128))) {
          cut[k] = v;
        }
      }
      std::string message = e.value("message", e.value("description", std::string()));
      const size_t keep = config_.max_event_bytes / 4;
      if (message.size() > keep) message = SanitizeUtf8(message.substr(0, keep)) + "...";
      cut["message"] = message;
      cut["truncated"] = true;
      cut["original_bytes"] = bytes;
      if (cut.dump().size() > config_.max_event_bytes) {
        cut = {{"type", cut.value("type", std::string("event"))},
               {"message", message},
               {"truncated", true},
               {"original_bytes", bytes}};
      }
      node_events.push_back(std::move(cut));
    }
  }
  // Where the manager will call this node: the connection's source address unless the
  // advertised host is trusted (node_address.h). A node token cannot aim the manager elsewhere.
  NodeApiAddress api;
  if (!incoming.api_url.empty()) {
    FLYT_ASSIGN_OR_RETURN(AdvertisedUrl advertised, ParseAdvertisedUrl(incoming.api_url));
    api = TrustedNodeApiAddress(advertised, caller.address, config_.node_api_networks);
  }

  MutexLock lock(mu_);
  counters_.events_dropped += dropped;
  if (profiles_refused > 0) {
    counters_.profiles_refused += profiles_refused;
    // Once per node per 10 minutes: a node that keeps sending a bad profile does not fill the log.
    auto& last = profile_error_logged_[incoming.name];
    if (clock_.SteadyNow() - last >= std::chrono::minutes(10) ||
        last == std::chrono::steady_clock::time_point{}) {
      last = clock_.SteadyNow();
      spdlog::warn("node {}: {} usage profile(s) dropped, the first because {}", incoming.name,
                   profiles_refused, profile_error);
    }
  }
  counters_.events_truncated += truncated;
  const auto now = clock_.WallNow();
  std::pair<std::string, std::string> conflict;  // (GPU UUID, the node that reported it first)
  // The node's GPU states after this heartbeat, kept only if it commits.
  std::map<std::string, StateTrack> tracks;
  uint64_t state_changes = 0, state_changes_held = 0;
  if (outage_) {
    // The heartbeat cannot be stored, but it says the node is alive: that much is kept (in
    // memory), so the outage does not make it unreachable. Its snapshot and events are dropped.
    auto it = nodes_.find(incoming.name);
    if (it != nodes_.end() && (caller.role == Role::kAdmin || it->second.registered_by.empty() ||
                               it->second.registered_by == caller.name)) {
      ledger_->UpdateNode(it->first, LedgerGpus(it->second), clock_.SteadyNow());
    }
  }
  Status s = WriteLocked(Durability::kRelaxed, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    auto it = nodes_.find(incoming.name);
    const bool is_new = it == nodes_.end();
    // A node is updated only by the token that registered it (or an admin): with a token per
    // node, one node cannot overwrite another's record or redirect its api_url.
    if (!is_new && caller.role != Role::kAdmin && !it->second.registered_by.empty() &&
        it->second.registered_by != caller.name) {
      return PermissionDenied("node " + incoming.name + " was registered by another token");
    }
    // One physical GPU is one node's: a GPU UUID another node reported first cannot be
    // registered under a second name (it would be leasable twice).
    for (const gpu::GpuInfo& g : incoming.snapshot.gpus) {
      if (IsPlaceholderUuid(g.uuid)) continue;
      auto owner = gpu_owner_.find(g.uuid);
      if (owner != gpu_owner_.end() && owner->second != incoming.name &&
          nodes_.count(owner->second) > 0) {
        conflict = {g.uuid, owner->second};
        return Status(StatusCode::kFailedPrecondition,
                      "GPU " + g.uuid + " is already reported by node " + owner->second +
                          "; node " + incoming.name +
                          " cannot register it too (one GPU, one node: remove " + owner->second +
                          " first if the GPU moved)")
            .WithReason(kGpuClaimedReason);
      }
    }
    NodeRecord rec = is_new ? NodeRecord{} : it->second;
    if (is_new || rec.registered_by.empty()) rec.registered_by = caller.name;
    const gpu::GpuSnapshot previous = rec.snapshot;
    rec.name = incoming.name;
    if ((is_new || rec.api_url != api.url || rec.api_url_source != api.source) &&
        api.source == "source_address") {
      spdlog::warn("node {}: {}", rec.name, api.note);
    }
    rec.api_url = api.url;
    rec.advertised_api_url = incoming.api_url;
    rec.api_url_source = api.source;
    rec.api_url_note = api.note;
    rec.labels = incoming.labels;
    rec.version = incoming.version;
    rec.snapshot = std::move(incoming.snapshot);
    rec.cuda = std::move(incoming.cuda);
    rec.profiles = std::move(incoming.profiles);
    const GpuServersReport servers_before = std::move(rec.gpu_servers);
    rec.gpu_servers = incoming.gpu_servers;
    FLYT_RETURN_IF_ERROR(
        ReconcileGpuServersLocked(txn, rec.name, servers_before, rec.gpu_servers));
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
    // gpu.state_changed: a GPU whose profile state differs from what the last event said (see
    // kStateEventMinGap). Not on the node's first heartbeat here, not from or to unknown (no
    // data is not a state the GPU entered).
    const auto steady_now = clock_.SteadyNow();
    tracks.clear();  // the store may run this transaction again
    state_changes = state_changes_held = 0;
    auto known = gpu_states_.find(rec.name);
    for (const profile::GpuProfile& p : rec.profiles) {
      const std::string state = profile::StateName(p.state);
      const StateTrack* before = nullptr;
      if (known != gpu_states_.end()) {
        auto t = known->second.find(p.uuid);
        if (t != known->second.end()) before = &t->second;
      }
      StateTrack& t = tracks[p.uuid];
      if (before == nullptr) {
        t.reported = t.last_seen = state;
        continue;
      }
      t = *before;
      const std::string seen_before = t.last_seen;
      t.last_seen = state;
      if (p.state == profile::State::kUnknown) continue;
      if (t.reported == profile::StateName(profile::State::kUnknown)) {
        t.reported = state;
        continue;
      }
      const bool within_gap = t.last_event && steady_now - *t.last_event < kStateEventMinGap;
      if (within_gap && state != seen_before) {  // a change not told (now, at least)
        ++t.held;
        ++state_changes_held;
      }
      if (within_gap) continue;
      if (state == t.reported) {  // flapped back before it was told: nothing to carry over
        t.held = 0;
        continue;
      }
      json event = {{"node", rec.name},
                    {"gpu", p.index},
                    {"uuid", p.uuid},
                    {"from", t.reported},
                    {"to", state},
                    {"period_s", p.cycle ? json(p.cycle->period_s) : json(nullptr)},
                    {"changes_held", t.held}};
      std::string message = "GPU " + std::to_string(p.index) + " on " + rec.name + ": " +
                            t.reported + " -> " + state;
      if (p.cycle) {
        char period[48];
        std::snprintf(period, sizeof period, " (period %.1f s)", p.cycle->period_s);
        message += period;
      }
      if (t.held > 0) {
        message += " (" + std::to_string(t.held) + " change(s) in between not reported: at most "
                   "one event per GPU per " + std::to_string(kStateEventMinGap.count()) + " s)";
      }
      event["message"] = std::move(message);
      FLYT_RETURN_IF_ERROR(Event(txn, "gpu.state_changed", std::move(event)));
      ++state_changes;
      t.reported = state;
      t.last_event = steady_now;
      t.held = 0;
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
  if (!s.ok()) {
    if (s.reason() == kGpuClaimedReason) ReportGpuConflictLocked(incoming.name, conflict);
    return s;
  }
  gpu_states_[incoming.name] = std::move(tracks);
  counters_.gpu_state_changes += state_changes;
  counters_.gpu_state_changes_held += state_changes_held;
  if (queue_.size() > 0) Wake(/*strong=*/false);
  json reply = {{"ok", true},
                {"heartbeat_interval_seconds",
                 std::max<int64_t>(1, config_.ledger.unreachable_after.count() / 3)}};
  // The GPU servers this node should run: it starts what it lacks and drains the rest. With
  // [remote] disabled the manager has no opinion: servers already running keep serving.
  if (incoming.gpu_servers.enabled && config_.remote_enabled) {
    reply["gpu_servers"] = {{"desired", DesiredGpuServersLocked(incoming.name)}};
  }
  // A move (or resize) waiting to be resolved that involves this node: it may be able to tell
  // now.
  for (const auto& [id, mv] : moves_) {
    if (mv.running) continue;
    auto lease = ledger_->Find(id);
    auto share = mv.target.empty() ? std::nullopt : ledger_->Find(mv.target);
    if ((lease && !lease->gpus.empty() && lease->gpus.front().node == incoming.name) ||
        (share && !share->gpus.empty() && share->gpus.front().node == incoming.name)) {
      QueueResolveLocked();
      break;
    }
  }
  return reply;
}

void Cluster::ReportGpuConflictLocked(const std::string& node,
                                      const std::pair<std::string, std::string>& conflict) {
  ++counters_.gpu_conflicts;
  const auto now = clock_.SteadyNow();
  auto last = gpu_conflict_logged_.find(node);
  if (last != gpu_conflict_logged_.end() && now - last->second < std::chrono::minutes(10)) return;
  // Node names come from node tokens: the memory of them is bounded.
  if (gpu_conflict_logged_.size() >= 1024) gpu_conflict_logged_.clear();
  gpu_conflict_logged_[node] = now;
  const std::string message = "heartbeat of node " + node + " refused: GPU " + conflict.first +
                              " is already reported by node " + conflict.second;
  spdlog::warn("{} (one GPU, one node; remove {} if the GPU moved)", message, conflict.second);
  // Recorded in its own write: the heartbeat's was refused. A store that cannot take it loses
  // only the event (the log line and the counter stay).
  (void)WriteLocked(Durability::kRelaxed, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    return Event(txn, "node.gpu_conflict",
                 {{"node", node},
                  {"uuid", conflict.first},
                  {"reported_by", conflict.second},
                  {"message", message}});
  });
}

Result<json> Cluster::RemoveNode(const Caller& caller, const std::string& name, bool force) {
  if (caller.role != Role::kAdmin) return PermissionDenied("only an admin may remove a node");
  MutexLock lock(mu_);
  json out;
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) return NotFound("no node " + name);
    std::vector<sched::Lease> held;
    for (const sched::Lease& l : ledger_->Leases()) {
      for (const sched::LeasedGpu& g : l.gpus) {
        if (g.node == name) {
          held.push_back(l);
          break;
        }
      }
    }
    json released = json::array();
    std::string ids;
    for (const sched::Lease& l : held) {
      released.push_back(l.id);
      ids += (ids.empty() ? "" : ", ") + l.id;
    }
    if (!held.empty() && !force) {
      return Status(StatusCode::kFailedPrecondition,
                    "node " + name + " holds " + std::to_string(held.size()) + " live lease(s) (" +
                        ids +
                        "): release them first, or remove it with force=true (their leases are "
                        "released and their jobs fail)")
          .WithReason("conflict");
    }
    for (const sched::Lease& l : held) {
      FLYT_RETURN_IF_ERROR(ledger_->Release(l.id));
      Status del = txn.Delete(Table::kLeases, l.id);
      if (!del.ok() && del.code() != StatusCode::kNotFound) return del;
      FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(l.id));
      FLYT_RETURN_IF_ERROR(Event(txn, "lease.released",
                                 {{"lease_id", l.id},
                                  {"owner", l.owner},
                                  {"reason", "node_removed"},
                                  {"message", "lease " + l.id + " of " + l.owner +
                                                  " released: its node " + name +
                                                  " was removed by " + caller.name}}));
      FLYT_RETURN_IF_ERROR(FinishJobOfLeaseLocked(txn, l.id, JobState::kFailed,
                                                  "its node " + name + " was removed"));
    }
    FLYT_RETURN_IF_ERROR(txn.Delete(Table::kNodes, name));
    FLYT_RETURN_IF_ERROR(Event(
        txn, "node.removed",
        {{"node", name},
         {"by", caller.name},
         {"leases_released", released},
         {"message", "node " + name + " removed by " + caller.name +
                         (held.empty() ? std::string()
                                       : " (" + std::to_string(held.size()) +
                                             " lease(s) released, their jobs failed)")}}));
    EraseNodeLocked(name);
    out = {{"removed", name}, {"leases_released", released}};
    return Status::Ok();
  });
  if (!s.ok()) return s;
  ++counters_.nodes_removed;
  spdlog::info("node {} removed by {} ({} lease(s) released)", name, caller.name,
               out["leases_released"].size());
  Wake(/*strong=*/true);
  return out;
}

Result<json> Cluster::ClientHeartbeat(const Caller& caller, const json& body) {
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"name", "address", "labels"}));
  ClientRecord incoming;
  incoming.name = caller.role == Role::kAdmin ? "" : caller.name;
  FLYT_RETURN_IF_ERROR(b.OptionalString("name", 128, incoming.name));
  if (caller.role != Role::kAdmin && incoming.name != caller.name) {
    return PermissionDenied("a client registers under its own name (" + caller.name + ")");
  }
  if (!ValidName(incoming.name)) {
    return InvalidArgument("name must be 1-128 characters of [A-Za-z0-9._-]");
  }
  FLYT_RETURN_IF_ERROR(b.OptionalString("address", 256, incoming.address));
  FLYT_RETURN_IF_ERROR(LabelsField(b, "labels", incoming.labels));
  MutexLock lock(mu_);
  const auto now = clock_.WallNow();
  json out;
  FLYT_RETURN_IF_ERROR(
      WriteLocked(Durability::kRelaxed, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
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

}  // namespace flyt::cluster
