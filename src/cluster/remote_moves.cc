// Moving and resizing remote leases, and draining a node of them (see cluster.h).
//
// A move never holds the cluster's lock while a node works. Its steps:
//   1. (locked) check the lease, reserve its share on the target (Ledger::AllocateRemote, a
//      ledger lease of its own that is never stored) and note the move in moves_: from now on
//      the target node's heartbeat replies list the lease's next server as desired;
//   2. ask the target node to start that server (PUT /api/v1/gpu-servers/<id>.m<N>, the
//      lease's secret);
//   3. ask the source node to move every client of the current server there (POST
//      /api/v1/gpu-servers/<key>/migrate: live migration, server to server);
//   4. (locked) one transaction: the lease takes the target share (Ledger::MoveRemote), its
//      generation and server address change, the store's GPU claims follow; then the old
//      server is drained.
// When step 2 or 3 fails with no client moved, the lease stays as it was: the target share is
// released and the target server drained. A client that did not move while others did is
// reported ("left_behind"); its old server is drained with the rest (weak point: such a
// client loses its GPU state — a lease is normally one program).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "common/json.h"
#include "common/json_fields.h"
#include "gpu/json.h"

namespace flyt::cluster {

using internal::CheckOwner;
using internal::GpuKeys;
using internal::Live;
using nlohmann::json;
using store::Durability;
using store::Table;

namespace {

constexpr int64_t kDefaultMoveTimeoutSeconds = 60;
constexpr int64_t kMaxMoveTimeoutSeconds = 600;

std::string Where(const sched::LeasedGpu& g) {
  return g.node + ":" + std::to_string(g.index);
}

json GpuJson(const sched::LeasedGpu& g) {
  return {{"node", g.node}, {"gpu", g.index}, {"uuid", g.uuid}, {"name", g.name}};
}

Status NotRemote(const std::string& id) {
  return NotFound("lease " + id + " is not a remote lease (see /api/v1/allocations)");
}

// What a move found out, to decide between commit and abort.
struct MoveTally {
  int moved = 0, pending = 0, failed = 0;
  json clients = json::array();
  uint64_t bytes = 0;
  double pause_ms_max = 0;
  std::string reasons;  // of the clients that did not move
};

MoveTally Tally(const json& answer) {
  MoveTally t;
  if (!answer.is_object()) return t;
  if (answer.contains("clients") && answer["clients"].is_array()) t.clients = answer["clients"];
  for (const json& c : t.clients) {
    if (!c.is_object()) continue;
    const std::string outcome = c.value("outcome", "");
    if (outcome == "moved") {
      ++t.moved;
      if (c.contains("bytes") && c["bytes"].is_number_unsigned()) t.bytes += c["bytes"].get<uint64_t>();
      if (c.contains("pause_ms") && c["pause_ms"].is_number()) {
        t.pause_ms_max = std::max(t.pause_ms_max, c["pause_ms"].get<double>());
      }
      continue;
    }
    outcome == "pending" ? ++t.pending : ++t.failed;
    t.reasons += (t.reasons.empty() ? "" : "; ") + std::string("client ") +
                 std::to_string(c.value("client_id", 0ull)) + " " + outcome + ": " +
                 c.value("message", std::string("no reason given"));
  }
  return t;
}

}  // namespace

bool Cluster::IsMoveTargetLocked(const std::string& id) const {
  for (const auto& [lease, move] : moves_) {
    if (move.target == id) return true;
  }
  return false;
}

Result<sched::Lease> Cluster::ReadyToChangeLocked(const Caller& caller, const std::string& id,
                                                  const std::string& what) const {
  auto l = ledger_->Find(id);
  if (!l || l->expires_at <= clock_.WallNow()) return LeaseGoneLocked(id);
  if (!l->remote || l->gpus.empty()) return NotRemote(id);
  FLYT_RETURN_IF_ERROR(CheckOwner(caller, l->owner, "remote lease " + id));
  const RemoteLeaseInfo info = RemoteInfoLocked(id);
  if (info.state != "ready") {
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id + " is " + info.state +
                      (info.reason.empty() ? "" : " (" + info.reason + ")") + "; only a ready lease " +
                      what)
        .WithReason("lease_not_ready");
  }
  if (moves_.count(id)) {
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id + " is already moving or being resized")
        .WithReason("conflict");
  }
  return *l;
}

Result<json> Cluster::MigrateRemoteLease(const Caller& caller, const std::string& id,
                                         const json& body) {
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"node", "gpu", "timeout_s"}));
  std::string node;
  FLYT_RETURN_IF_ERROR(b.OptionalString("node", 128, node));
  std::optional<uint32_t> gpu;
  if (b.Has("gpu")) {
    FLYT_ASSIGN_OR_RETURN(uint32_t g, b.RequiredInt<uint32_t>("gpu", 0, 1023));
    gpu = g;
  }
  if (gpu && node.empty()) return InvalidArgument("gpu needs node: give NODE and GPU together");
  int64_t timeout = kDefaultMoveTimeoutSeconds;
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("timeout_s", 1, kMaxMoveTimeoutSeconds, timeout));
  return MoveRemoteLease(caller, id, node, gpu, {}, std::chrono::seconds(timeout));
}

Result<json> Cluster::MoveRemoteLease(const Caller& caller, const std::string& id,
                                      const std::string& node, std::optional<uint32_t> gpu,
                                      const std::vector<std::string>& exclude_nodes,
                                      std::chrono::seconds timeout) {
  // 1. Reserve the target share.
  sched::Lease lease, target;
  RemoteLeaseInfo info;
  std::string source_url, target_url;
  json target_spec;
  uint32_t next_generation = 0;
  {
    MutexLock lock(mu_);
    FLYT_ASSIGN_OR_RETURN(lease, ReadyToChangeLocked(caller, id, "moves"));
    info = RemoteInfoLocked(id);
    const sched::LeasedGpu& from = lease.gpus.front();
    if (node == from.node && (!gpu || *gpu == from.index)) {
      return InvalidArgument("remote lease " + id + " is on " + Where(from) +
                             (gpu ? " already" : "; name another node, or another GPU of it "
                                                 "(NODE:GPU)"));
    }
    if (!node.empty()) {
      auto n = nodes_.find(node);
      if (n == nodes_.end()) return NotFound("no node " + node);
    }
    auto src = nodes_.find(from.node);
    if (src == nodes_.end() || src->second.api_url.empty()) {
      return Unavailable("the manager has no address of node " + from.node +
                         "'s API to ask it to move the lease's clients");
    }
    source_url = src->second.api_url;
    sched::RemoteRequest req;
    req.id = NewId("rmove");
    req.owner = lease.owner;
    req.labels = lease.labels;
    req.node = node;
    req.gpu_index = gpu;
    req.exclude_nodes = exclude_nodes;
    req.avoid_states = lease.avoid_states;
    req.prefer_idle = lease.prefer_idle;
    req.memory_bytes = from.reserved_bytes;
    if (info.sm_percent) {
      req.sm_percent = *info.sm_percent;
    } else {
      req.sm_count = info.sm_count_asked > 0 ? info.sm_count_asked : from.sm_count;
    }
    // The reservation outlives any move: the move ends long before (timeouts), and drops it.
    req.ttl = std::chrono::hours(1);
    Result<sched::Lease> placed = ledger_->AllocateRemote(req);
    if (!placed.ok()) {
      const Status& refused = placed.status();
      if (refused.code() != StatusCode::kResourceExhausted) return refused;
      return Status(refused.code(), "remote lease " + id + " cannot move: " + refused.message())
          .WithReason("insufficient_gpus");
    }
    target = *placed;
    auto dst = nodes_.find(target.gpus.front().node);
    target_url = dst == nodes_.end() ? "" : dst->second.api_url;
    if (target_url.empty()) {
      (void)ledger_->Release(target.id);
      return Unavailable("the manager has no address of node " + target.gpus.front().node +
                         "'s API to start the lease's server there");
    }
    next_generation = info.generation + 1;
    moves_[id] = Move{target.id, next_generation};
    RemoteLeaseInfo next = info;
    next.generation = next_generation;
    sched::Lease at = lease;
    at.gpus = target.gpus;
    target_spec = internal::GpuServerSpecOf(at, next);
    Status s = WriteLocked(Durability::kRelaxed, [&](store::Txn& txn) FLYT_REQUIRES(mu_) {
      return Event(txn, "remote_lease.migrating",
                   {{"lease_id", id},
                    {"owner", lease.owner},
                    {"client", info.client},
                    {"from", GpuJson(from)},
                    {"to", GpuJson(target.gpus.front())},
                    {"by", caller.name},
                    {"message", "remote lease " + id + " of " + lease.owner + " is moving from " +
                                    Where(from) + " to " + Where(target.gpus.front())}});
    });
    if (!s.ok()) {
      moves_.erase(id);
      (void)ledger_->Release(target.id);
      return s;
    }
  }
  const sched::LeasedGpu from = lease.gpus.front();
  const sched::LeasedGpu to = target.gpus.front();
  const std::string source_key = ServerKey(id, info.generation);
  const std::string target_key = ServerKey(id, next_generation);

  // Ends the move with the lease where it was.
  auto abort = [&](const std::string& why) -> Status {
    {
      MutexLock lock(mu_);
      moves_.erase(id);
      (void)ledger_->Release(target.id);
      ++counters_.remote_migration_failures;
      (void)WriteLocked(Durability::kRelaxed, [&](store::Txn& txn) FLYT_REQUIRES(mu_) {
        return Event(txn, "remote_lease.migration_failed",
                     {{"lease_id", id},
                      {"owner", lease.owner},
                      {"client", info.client},
                      {"from", GpuJson(from)},
                      {"to", GpuJson(to)},
                      {"reason", why},
                      {"message", "remote lease " + id + " stays on " + Where(from) +
                                      ": moving it to " + Where(to) + " failed: " + why}});
      });
      Wake(/*strong=*/true);
    }
    worker_.DrainGpuServer(target_url, target_key);
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id + " stays on " + Where(from) + ": " + why)
        .WithReason("migration_failed");
  };

  // 2. The target's server.
  Result<json> started =
      worker_.StartGpuServer(target_url, target_key, target_spec, config_.remote_server_start_timeout);
  std::string address;
  std::optional<int64_t> pid;
  if (!started.ok()) {
    return abort("node " + to.node + " did not start the lease's server: " +
                 started.status().message());
  }
  if (!started->is_object() || !started->contains("address") || !(*started)["address"].is_string() ||
      (*started)["address"].get<std::string>().empty() ||
      started->value("state", std::string("running")) != "running") {
    return abort("node " + to.node + " did not start the lease's server: " +
                 started->value("reason", std::string("it answered without its address")));
  }
  address = (*started)["address"].get<std::string>().substr(0, 256);
  if (started->contains("pid") && (*started)["pid"].is_number_integer()) {
    pid = (*started)["pid"].get<int64_t>();
  }

  // 3. The clients move, server to server.
  Result<json> migrated = worker_.GpuServerAction(
      source_url, source_key, "migrate",
      {{"to", address}, {"timeout_s", timeout.count()}},
      timeout * 2 + std::chrono::seconds(30));
  if (!migrated.ok()) {
    // The node could not say: a client may have moved. The target server is kept only when
    // it holds clients — which the manager cannot see here — so this is reported as a failure
    // and the target drained; the source keeps its server (a client that moved gets a clear
    // error at its next call).
    return abort("node " + from.node + " did not move the clients: " +
                 migrated.status().message());
  }
  const MoveTally tally = Tally(*migrated);
  if (tally.moved == 0 && (tally.pending > 0 || tally.failed > 0)) {
    return abort(tally.reasons);
  }

  // 4. The lease moves, in one transaction.
  MutexLock lock(mu_);
  const auto now = clock_.WallNow();
  moves_.erase(id);
  auto still = ledger_->Find(id);
  if (!still || still->expires_at <= now) {
    (void)ledger_->Release(target.id);
    worker_.DrainGpuServer(target_url, target_key);
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id + " ended while it was moving")
        .WithReason("already_ended");
  }
  RemoteLeaseInfo moved_info = RemoteInfoLocked(id);
  moved_info.generation = next_generation;
  moved_info.server_address = address;
  moved_info.server_state = "running";
  moved_info.server_pid = pid;
  json out;
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    FLYT_ASSIGN_OR_RETURN(sched::Lease now_lease, ledger_->MoveRemote(id, target.id));
    FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(id));
    FLYT_RETURN_IF_ERROR(txn.ClaimGpus(id, GpuKeys(now_lease), /*exclusive=*/false));
    remote_[id] = moved_info;
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(now_lease, moved_info))));
    out = RemoteLeaseView(now_lease, moved_info, now, /*with_secret=*/false);
    json migration = {{"from", GpuJson(from)},
                      {"to", GpuJson(to)},
                      {"server", address},
                      {"clients", tally.clients},
                      {"moved", tally.moved},
                      {"left_behind", tally.pending + tally.failed},
                      {"bytes", tally.bytes},
                      {"pause_ms_max", tally.pause_ms_max}};
    out["migration"] = migration;
    json event = migration;
    event["lease_id"] = id;
    event["owner"] = now_lease.owner;
    event["client"] = moved_info.client;
    event["message"] = "remote lease " + id + " of " + now_lease.owner + " moved from " +
                       Where(from) + " to " + Where(to) + " (" + std::to_string(tally.moved) +
                       " client" + (tally.moved == 1 ? "" : "s") + ", " +
                       std::to_string(tally.bytes >> 20) + " MiB" +
                       (tally.pending + tally.failed > 0
                            ? "; left behind: " + tally.reasons
                            : "") +
                       ")";
    return Event(txn, "remote_lease.migrated", event);
  });
  if (!s.ok()) {
    // Not recorded: the clients run on the target now, but the lease says source. The target
    // share is dropped; the next heartbeats drain the target server (not desired). Said loudly.
    (void)ledger_->Release(target.id);
    spdlog::error("remote lease {}: its clients moved to {} but the move could not be stored: {}",
                  id, Where(to), s.message());
    return s;
  }
  ++counters_.remote_migrations;
  worker_.DrainGpuServer(source_url, source_key);
  Wake(/*strong=*/true);
  return out;
}

Result<json> Cluster::ResizeRemoteLease(const Caller& caller, const std::string& id,
                                        const json& body) {
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"sm_count", "sm_percent", "memory_mb", "timeout_s"}));
  if (b.Has("sm_count") && b.Has("sm_percent")) {
    return InvalidArgument("give sm_count or sm_percent, not both");
  }
  if (!b.Has("sm_count") && !b.Has("sm_percent") && !b.Has("memory_mb")) {
    return InvalidArgument("give sm_count (or sm_percent) and/or memory_mb");
  }
  uint32_t sm_count = 0;
  FLYT_RETURN_IF_ERROR(b.OptionalInt<uint32_t>("sm_count", 1, 1 << 20, sm_count));
  double sm_percent = 0;
  FLYT_RETURN_IF_ERROR(b.OptionalNumber("sm_percent", 0, 100, sm_percent));
  if (b.Has("sm_percent") && sm_percent <= 0) {
    return InvalidArgument("sm_percent must be more than 0 (and at most 100)");
  }
  int64_t memory_mb = 0;
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("memory_mb", 1, int64_t{1} << 24, memory_mb));
  int64_t timeout = kDefaultMoveTimeoutSeconds;
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("timeout_s", 1, kMaxMoveTimeoutSeconds, timeout));

  // 1. Hold the larger of the old and the new share.
  sched::RemoteRequest old_share, new_share;
  std::string url, key;
  uint32_t granted = 0;
  uint64_t new_bytes = 0;
  {
    MutexLock lock(mu_);
    FLYT_ASSIGN_OR_RETURN(const sched::Lease current, ReadyToChangeLocked(caller, id, "is resized"));
    const sched::Lease* l = &current;
    const RemoteLeaseInfo info = RemoteInfoLocked(id);
    const sched::LeasedGpu g = l->gpus.front();
    old_share.sm_count = g.sm_count;
    old_share.memory_bytes = g.reserved_bytes;
    new_share.sm_count = b.Has("sm_count") ? sm_count : b.Has("sm_percent") ? 0 : g.sm_count;
    new_share.sm_percent = b.Has("sm_percent") ? sm_percent : 0;
    new_share.memory_bytes =
        b.Has("memory_mb") ? static_cast<uint64_t>(memory_mb) << 20 : g.reserved_bytes;
    Result<sched::Lease> fits = ledger_->ResizeRemote(id, new_share);
    if (!fits.ok()) {
      Status refused = fits.status();
      if (refused.code() == StatusCode::kResourceExhausted) {
        refused = Status(refused.code(), "remote lease " + id + " cannot be resized: " +
                                             refused.message())
                      .WithReason("insufficient_gpus");
      }
      return refused;
    }
    granted = fits->gpus.front().sm_count;
    new_bytes = fits->gpus.front().reserved_bytes;
    sched::RemoteRequest hold;
    hold.sm_count = std::max(granted, g.sm_count);
    hold.memory_bytes = std::max(new_bytes, g.reserved_bytes);
    Result<sched::Lease> held = ledger_->ResizeRemote(id, hold);
    if (!held.ok()) {  // cannot happen: both fit alone, and the larger of each fits
      (void)ledger_->ResizeRemote(id, old_share);
      return held.status();
    }
    auto n = nodes_.find(g.node);
    if (n == nodes_.end() || n->second.api_url.empty()) {
      (void)ledger_->ResizeRemote(id, old_share);
      return Unavailable("the manager has no address of node " + g.node + "'s API");
    }
    url = n->second.api_url;
    key = ServerKey(id, info.generation);
    moves_[id] = Move{"", info.generation};
  }

  // 2. The node applies it to the running server.
  json ask = {{"sm_count", granted}, {"memory_mb", new_bytes >> 20}, {"timeout_s", timeout}};
  Result<json> applied =
      worker_.GpuServerAction(url, key, "resize", ask, std::chrono::seconds(timeout + 30));

  // 3. Keep the new share, or go back to the old one.
  MutexLock lock(mu_);
  moves_.erase(id);
  const auto now = clock_.WallNow();
  auto l = ledger_->Find(id);
  if (!l || l->expires_at <= now) {
    return Status(StatusCode::kFailedPrecondition, "remote lease " + id + " ended meanwhile")
        .WithReason("already_ended");
  }
  if (!applied.ok()) {
    (void)ledger_->ResizeRemote(id, old_share);
    ++counters_.remote_resize_failures;
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id + " keeps its share: its GPU server did not take the new "
                  "one: " + applied.status().message())
        .WithReason("resize_refused");
  }
  RemoteLeaseInfo info = RemoteInfoLocked(id);
  json out;
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    FLYT_ASSIGN_OR_RETURN(sched::Lease resized, ledger_->ResizeRemote(id, new_share));
    if (b.Has("sm_count")) {
      info.sm_count_asked = sm_count;
      info.sm_percent.reset();
    } else if (b.Has("sm_percent")) {
      info.sm_count_asked = 0;
      info.sm_percent = sm_percent;
    }
    remote_[id] = info;
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(resized, info))));
    out = RemoteLeaseView(resized, info, now, /*with_secret=*/false);
    json resize = {{"sm_count_before", old_share.sm_count},
                   {"memory_mb_before", old_share.memory_bytes >> 20},
                   {"sm_count", resized.gpus.front().sm_count},
                   {"memory_mb", resized.gpus.front().reserved_bytes >> 20},
                   {"server", *applied}};
    out["resize"] = resize;
    json event = resize;
    event["lease_id"] = id;
    event["owner"] = resized.owner;
    event["message"] = "remote lease " + id + " of " + resized.owner + " resized from " +
                       std::to_string(old_share.sm_count) + " SMs and " +
                       std::to_string(old_share.memory_bytes >> 20) + " MiB to " +
                       std::to_string(resized.gpus.front().sm_count) + " SMs and " +
                       std::to_string(resized.gpus.front().reserved_bytes >> 20) + " MiB";
    return Event(txn, "remote_lease.resized", event);
  });
  if (!s.ok()) {
    (void)ledger_->ResizeRemote(id, old_share);
    return s;
  }
  ++counters_.remote_resizes;
  return out;
}

Status Cluster::SetCordonLocked(const std::string& node, bool cordoned, const std::string& reason,
                                const std::string& by) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound("no node " + node);
  if (it->second.cordoned == cordoned) return Status::Ok();
  NodeRecord rec = it->second;
  rec.cordoned = cordoned;
  rec.cordon_reason = cordoned ? reason : "";
  FLYT_RETURN_IF_ERROR(
      WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
        FLYT_RETURN_IF_ERROR(txn.Put(Table::kNodes, node, DumpJson(ToJson(rec))));
        return Event(txn, cordoned ? "node.cordoned" : "node.uncordoned",
                     {{"node", node},
                      {"by", by},
                      {"reason", reason},
                      {"message", "node " + node + (cordoned ? " cordoned by " : " uncordoned by ") +
                                      by + (reason.empty() ? "" : ": " + reason)}});
      }));
  ApplyNodeLocked(std::move(rec));
  return Status::Ok();
}

Result<json> Cluster::DrainNode(const Caller& caller, const std::string& node, const json& body) {
  if (caller.role != Role::kAdmin) return PermissionDenied("draining a node is for admins");
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"timeout_s", "reason"}));
  int64_t timeout = kDefaultMoveTimeoutSeconds;
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("timeout_s", 1, kMaxMoveTimeoutSeconds, timeout));
  std::string reason = "drain";
  FLYT_RETURN_IF_ERROR(b.OptionalString("reason", 256, reason));
  std::vector<std::string> remote;
  int other_leases = 0;
  {
    MutexLock lock(mu_);
    FLYT_RETURN_IF_ERROR(SetCordonLocked(node, true, reason, caller.name));
    const auto now = clock_.WallNow();
    for (const sched::Lease& l : ledger_->Leases()) {
      if (l.expires_at <= now || IsMoveTargetLocked(l.id)) continue;
      bool here = false;
      for (const sched::LeasedGpu& g : l.gpus) here |= g.node == node;
      if (!here) continue;
      if (l.remote && Live(RemoteInfoLocked(l.id))) {
        remote.push_back(l.id);
      } else {
        ++other_leases;
      }
    }
  }
  json moves = json::array();
  int moved = 0, failed = 0;
  for (const std::string& id : remote) {
    Result<json> m =
        MoveRemoteLease(caller, id, "", std::nullopt, {node}, std::chrono::seconds(timeout));
    json entry = {{"lease_id", id}};
    if (m.ok()) {
      ++moved;
      entry["outcome"] = "moved";
      entry["to"] = (*m)["migration"]["to"];
      entry["migration"] = (*m)["migration"];
    } else {
      ++failed;
      entry["outcome"] = "failed";
      entry["message"] = m.status().message();
      if (!m.status().reason().empty()) entry["reason"] = m.status().reason();
    }
    moves.push_back(std::move(entry));
  }
  return json{{"node", node},
              {"cordoned", true},
              {"remote_leases", moves},
              {"moved", moved},
              {"failed", failed},
              // Exclusive and shared job leases are not moved: they end with their jobs.
              {"other_leases", other_leases}};
}

Result<json> Cluster::UncordonNode(const Caller& caller, const std::string& node) {
  if (caller.role != Role::kAdmin) return PermissionDenied("uncordoning a node is for admins");
  MutexLock lock(mu_);
  FLYT_RETURN_IF_ERROR(SetCordonLocked(node, false, "", caller.name));
  Wake(/*strong=*/true);
  return json{{"node", node}, {"cordoned", false}};
}

}  // namespace flyt::cluster
