// Moving remote leases between GPUs and nodes (see cluster.h); resizing them is in
// remote_resize.cc, draining a node of them in drain.cc.
//
// A move never holds the cluster's lock while a node works. Its steps:
//   1. (locked) check the lease, reserve its share on the target (Ledger::AllocateRemote, a
//      ledger lease of its own that is never a row) and write the move ahead into the lease's
//      row (RemoteLeaseInfo::moving, durable) and moves_: from now on the target node's
//      heartbeat replies list the lease's next server as desired, here and after a restart;
//   2. ask the target node to start that server (PUT /api/v1/gpu-servers/<id>.m<N>, the
//      lease's secret);
//   3. ask the source node to move every client of the current server there (POST
//      /api/v1/gpu-servers/<key>/migrate: live migration, server to server);
//   4. (locked) one transaction: the lease takes the target share (Ledger::MoveRemote), its
//      generation and server address change, the store's GPU claims follow; then the old
//      server is drained.
// Before step 3 the row also records the target server's address and until when the source
// node may be moving clients. When step 2 or 3 fails with no client moved, the lease stays as
// it was: the record is cleared, the target share released and the target server drained. A
// move left undecided (the manager died between 3 and 4, the source node's answer was lost, the
// commit could not be stored) stays recorded with both servers desired until ResolveMoves asks
// the nodes where the clients are and commits or aborts it (see Decide below). A client that did not move while others did is
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

using internal::AnswerLost;
using internal::CheckOwner;
using internal::GpuKeys;
using internal::kDefaultMoveTimeoutSeconds;
using internal::kNodeAskTimeout;
using internal::kMaxMoveTimeoutSeconds;
using internal::Live;
using nlohmann::json;
using store::Durability;
using store::Table;

namespace {


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

// How an undecided move came to be settled (the events' "resolved" and reason).
constexpr const char* kResolvedAfterRestart =
    "resolved after a restart of the cluster manager (the move was recorded in the store)";
constexpr const char* kResolvedAfterLostAnswer =
    "resolved after the source node's answer to moving the clients was lost";
constexpr const char* kResolvedAfterStoreError =
    "resolved after its commit could not be stored";

// Beyond the start timeout: the PUT's connection and the node's answer.
constexpr auto kStartMargin = std::chrono::seconds(30);

// What a node said of one GPU server (GET /api/v1/gpu-servers/{key}).
struct ServerSeen {
  bool reached = false;  // the node answered
  bool exists = false;   // with a record of the server
  std::string state;
  std::optional<int64_t> clients;  // connected clients, when the node could count them
  std::string address;
  std::optional<int64_t> pid;
  std::string error;
};

ServerSeen Seen(const Result<json>& answer) {
  ServerSeen seen;
  if (!answer.ok()) {
    seen.reached = answer.status().code() == StatusCode::kNotFound;
    seen.error = answer.status().message();
    return seen;
  }
  seen.reached = true;
  if (!answer->is_object()) {
    seen.reached = false;
    seen.error = "the node answered without a server record";
    return seen;
  }
  seen.exists = true;
  seen.state = answer->value("state", std::string());
  if (answer->contains("clients") && (*answer)["clients"].is_number_integer()) {
    seen.clients = (*answer)["clients"].get<int64_t>();
  }
  if (answer->contains("address") && (*answer)["address"].is_string()) {
    seen.address = (*answer)["address"].get<std::string>().substr(0, 256);
  }
  if (answer->contains("pid") && (*answer)["pid"].is_number_integer()) {
    seen.pid = (*answer)["pid"].get<int64_t>();
  }
  return seen;
}

struct Verdict {
  enum Kind { kCommit, kAbort, kWait } kind = kWait;
  std::string why;
};

// Whether the target's record leaves the source's to be asked.
bool NeedsSource(const ServerSeen& target, bool source_asked, bool asking_over) {
  return target.reached && target.exists && target.state == "running" && target.clients &&
         *target.clients == 0 && source_asked && asking_over;
}

// Where the clients of a move are, from what the nodes said. The target's server holding a
// client settles it (commit); a target server that is gone settles it the other way (abort).
// An empty target settles nothing while the source may still be moving clients (until the
// recorded limit of its call); after that the source's server tells: a client still there
// aborts, none anywhere commits (as a move of a lease without clients does). A node that cannot
// be reached, or cannot count its clients, leaves it undecided.
Verdict Decide(const ServerSeen& target, const ServerSeen* source, const std::string& target_node,
               const std::string& source_node, bool start_over, bool source_asked,
               bool asking_over) {
  if (!target.reached) {
    return {Verdict::kWait, "node " + target_node + " cannot say what its server holds: " +
                                target.error};
  }
  if (!target.exists) {
    return {Verdict::kAbort, "node " + target_node + " has no server of the move"};
  }
  if (target.state == "starting") {
    return {Verdict::kWait, "the server on " + target_node + " is still starting"};
  }
  if (target.state != "running") {
    return {Verdict::kAbort, "the server on " + target_node + " is " + target.state};
  }
  if (!target.clients) {
    return {Verdict::kWait,
            "node " + target_node + " does not say how many clients its server holds"};
  }
  if (*target.clients > 0) {
    return {Verdict::kCommit, std::to_string(*target.clients) + " client" +
                                  (*target.clients == 1 ? "" : "s") + " on the server on " +
                                  target_node};
  }
  if (!source_asked) {
    if (!start_over) return {Verdict::kWait, "the target server may still be starting"};
    return {Verdict::kAbort, "the source node was never asked to move the clients"};
  }
  if (!asking_over || source == nullptr) {
    return {Verdict::kWait, "node " + source_node + " may still be moving the clients"};
  }
  if (!source->reached) {
    return {Verdict::kWait, "no client on " + target_node + ", and node " + source_node +
                                " cannot say what its server holds: " + source->error};
  }
  if (!source->exists || source->state != "running") {
    return {Verdict::kCommit, "no client on " + target_node + " and the server on " + source_node +
                                  " is " + (source->exists ? source->state : "gone")};
  }
  if (!source->clients) {
    return {Verdict::kWait,
            "node " + source_node + " does not say how many clients its server holds"};
  }
  if (*source->clients > 0) {
    return {Verdict::kAbort, std::to_string(*source->clients) + " client" +
                                 (*source->clients == 1 ? "" : "s") + " still on " + source_node};
  }
  return {Verdict::kCommit, "no client on either server"};
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
  if (auto mv = moves_.find(id); mv != moves_.end()) {
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id +
                      (mv->second.target.empty()
                           ? mv->second.running ? " is being resized"
                                                : " has a resize the manager has not settled yet "
                                                  "(the larger share is held until its node can "
                                                  "tell which one its server runs with)"
                           : mv->second.running ? " is moving"
                                                : " has a move the manager has not settled yet "
                                                  "(both servers are kept until it can tell "
                                                  "where the clients are)"))
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
  // 1. Reserve the target share, and record the move in the lease's row.
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
    // Placed with a TTL of its own, then held as long as the lease (ReservationOf).
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
    RemoteMove move;
    move.target = target.id;
    move.generation = next_generation;
    move.gpu = target.gpus.front();
    move.started_at = clock_.WallNow();
    move.by = caller.name;
    ledger_->Restore(ReservationOf(lease, move));
    moves_[id] = Move{target.id, next_generation, /*running=*/true, ""};
    RemoteLeaseInfo next = info;
    next.generation = next_generation;
    sched::Lease at = lease;
    at.gpus = target.gpus;
    target_spec = internal::GpuServerSpecOf(at, next);
    // Durable before the target's server starts: from here a manager that restarts (or another
    // replica) keeps the target share and lists the target server as desired.
    Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
      auto current = ledger_->Find(id);
      if (!current) return LeaseGoneLocked(id);
      RemoteLeaseInfo recorded = RemoteInfoLocked(id);
      recorded.moving = move;
      remote_[id] = recorded;
      FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(*current, recorded))));
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
    MutexLock lock(mu_);
    Status s = AbortMoveLocked(id, target.id, why, "");
    if (!s.ok()) return s;
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

  // Written ahead of step 3: the target's address, and until when the source node may be
  // moving clients (the limit of the call below). A manager that dies from here on finds this
  // when it starts again and asks the nodes where the clients are (ResolveMoves).
  const std::chrono::seconds ask_limit = timeout * 2 + std::chrono::seconds(30);
  Status recorded_ahead;
  {
    MutexLock lock(mu_);
    recorded_ahead = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
      auto current = ledger_->Find(id);
      if (!current) return LeaseGoneLocked(id);
      RemoteLeaseInfo recorded = RemoteInfoLocked(id);
      if (!recorded.moving || recorded.moving->target != target.id) {
        return Status(StatusCode::kFailedPrecondition,
                      "the move of remote lease " + id + " was ended meanwhile")
            .WithReason("conflict");
      }
      recorded.moving->address = address;
      recorded.moving->pid = pid;
      recorded.moving->clients_until = clock_.WallNow() + ask_limit;
      remote_[id] = recorded;
      return txn.Put(Table::kLeases, id, DumpJson(ToJson(*current, recorded)));
    });
  }
  if (!recorded_ahead.ok()) {
    return abort("the move could not be recorded before the clients move: " +
                 recorded_ahead.message());
  }

  // 3. The clients move, server to server.
  Result<json> migrated = worker_.GpuServerAction(
      source_url, source_key, "migrate", {{"to", address}, {"timeout_s", timeout.count()}},
      ask_limit);
  if (MoveHook("clients_moved")) {
    return Status(StatusCode::kInternal, "the move of remote lease " + id +
                                             " was stopped after its clients moved (test)");
  }
  if (!migrated.ok()) {
    if (!AnswerLost(migrated.status())) {
      // The node answered that it did not move them.
      return abort("node " + from.node + " did not move the clients: " +
                   migrated.status().message());
    }
    // No answer: a client may have moved. The nodes are asked where the clients are now; when
    // they cannot tell yet, the move stays recorded, both servers are kept, and later passes
    // (heartbeats of either node) resolve it.
    spdlog::warn("remote lease {}: no answer from node {} to moving the clients ({}); asking the "
                 "nodes where they are",
                 id, from.node, migrated.status().message());
    {
      MutexLock lock(mu_);
      auto mv = moves_.find(id);
      if (mv != moves_.end()) mv->second.waiting = "lost_answer";
    }
    auto [outcome, result] = ResolveMove(id, kResolvedAfterLostAnswer);
    if (outcome == "committed") return result;
    if (outcome == "aborted") {
      return Status(StatusCode::kFailedPrecondition,
                    "remote lease " + id + " stays on " + Where(from) +
                        ": node " + from.node + " did not answer (" +
                        migrated.status().message() + ") and the clients are still there")
          .WithReason("migration_failed");
    }
    return Status(StatusCode::kUnavailable,
                  "remote lease " + id + ": node " + from.node +
                      " did not answer whether the clients moved (" + migrated.status().message() +
                      "); both servers are kept and the manager settles the move once the nodes "
                      "can tell where the clients are (" +
                      (result.ok() ? std::string("retrying") : result.status().message()) + ")")
        .WithReason("migration_in_doubt");
  }
  const MoveTally tally = Tally(*migrated);
  if (tally.moved == 0 && (tally.pending > 0 || tally.failed > 0)) {
    return abort(tally.reasons);
  }

  // 4. The lease moves, in one transaction.
  json migration = {{"from", GpuJson(from)},
                    {"to", GpuJson(to)},
                    {"server", address},
                    {"clients", tally.clients},
                    {"moved", tally.moved},
                    {"left_behind", tally.pending + tally.failed},
                    {"bytes", tally.bytes},
                    {"pause_ms_max", tally.pause_ms_max}};
  if (tally.pending + tally.failed > 0) migration["left_behind_reasons"] = tally.reasons;
  MutexLock lock(mu_);
  return CommitMoveLocked(id, target.id, address, pid, std::move(migration), "");
}

Result<json> Cluster::CommitMoveLocked(const std::string& id, const std::string& target,
                                       const std::string& address, std::optional<int64_t> pid,
                                       json migration, const std::string& resolved) {
  const auto now = clock_.WallNow();
  auto still = ledger_->Find(id);
  if (!still || still->expires_at <= now) {
    EndMoveOfLeaseLocked(id, /*drain=*/true);
    moves_.erase(id);
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id + " ended while it was moving")
        .WithReason("already_ended");
  }
  const sched::LeasedGpu from = still->gpus.front();
  const uint32_t old_generation = RemoteInfoLocked(id).generation;
  json out;
  std::optional<RemoteMove> done;
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    RemoteLeaseInfo info = RemoteInfoLocked(id);
    auto current = ledger_->Find(id);
    if (!current) return LeaseGoneLocked(id);
    if (!info.moving || info.moving->target != target) {
      return Status(StatusCode::kFailedPrecondition,
                    "the move of remote lease " + id + " was settled meanwhile (by another "
                    "replica, or its target share ended)")
          .WithReason("conflict");
    }
    done = info.moving;
    if (!ledger_->Find(target)) ledger_->Restore(ReservationOf(*current, *done));
    FLYT_ASSIGN_OR_RETURN(sched::Lease now_lease, ledger_->MoveRemote(id, target));
    FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(id));
    FLYT_RETURN_IF_ERROR(txn.ClaimGpus(id, GpuKeys(now_lease), /*exclusive=*/false));
    info.generation = done->generation;
    info.server_address = address.empty() ? done->address : address;
    info.server_state = "running";
    info.server_pid = pid ? pid : done->pid;
    info.moving.reset();
    remote_[id] = info;
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(now_lease, info))));
    out = RemoteLeaseView(now_lease, info, now, /*with_secret=*/false);
    migration["server"] = info.server_address;
    if (!resolved.empty()) migration["resolved"] = resolved;
    out["migration"] = migration;
    json event = migration;
    event["lease_id"] = id;
    event["owner"] = now_lease.owner;
    event["client"] = info.client;
    if (!resolved.empty()) event["reason"] = resolved;
    const int moved = migration.value("moved", 0);
    const uint64_t bytes = migration.value("bytes", uint64_t{0});
    std::string counts;
    if (resolved.empty()) {
      counts = " (" + std::to_string(moved) + " client" + (moved == 1 ? "" : "s") + ", " +
               std::to_string(bytes >> 20) + " MiB" +
               (migration.value("left_behind", 0) > 0
                    ? "; left behind: " + migration.value("left_behind_reasons", std::string())
                    : "") +
               ")";
    } else {
      counts = " (" + resolved + ")";
    }
    event["message"] = "remote lease " + id + " of " + now_lease.owner + " moved from " +
                       Where(from) + " to " + Where(now_lease.gpus.front()) + counts;
    event.erase("left_behind_reasons");
    out["migration"].erase("left_behind_reasons");
    return Event(txn, "remote_lease.migrated", event);
  });
  if (!s.ok()) {
    if (s.reason() == "conflict" || s.reason() == "already_ended") {
      // Settled elsewhere: whatever this manager still holds of the move goes.
      EndMoveOfLeaseLocked(id, /*drain=*/false);
      moves_.erase(id);
      return s;
    }
    // Not stored: the store still records the move (a reload put its share back); both servers
    // stay desired and a later pass commits it.
    auto mv = moves_.find(id);
    if (mv != moves_.end()) {
      mv->second.running = false;
      if (mv->second.waiting.empty()) mv->second.waiting = "store";
    }
    spdlog::error("remote lease {}: its clients moved but the move could not be stored ({}); it "
                  "stays recorded and is settled again later",
                  id, s.message());
    return s;
  }
  moves_.erase(id);
  ++counters_.remote_migrations;
  if (auto n = nodes_.find(from.node); n != nodes_.end() && !n->second.api_url.empty()) {
    worker_.DrainGpuServer(n->second.api_url, ServerKey(id, old_generation));
  }
  Wake(/*strong=*/true);
  return out;
}

Status Cluster::AbortMoveLocked(const std::string& id, const std::string& target,
                                const std::string& why, const std::string& resolved) {
  std::optional<RemoteMove> recorded = RemoteInfoLocked(id).moving;
  if (!recorded || recorded->target != target || !ledger_->Find(id)) {
    // The lease ended, or the move was settled elsewhere: what is left of it here goes.
    EndMoveOfLeaseLocked(id, /*drain=*/!ledger_->Find(id));
    moves_.erase(id);
    return Status::Ok();
  }
  const RemoteMove move = *recorded;
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    auto current = ledger_->Find(id);
    if (!current) return LeaseGoneLocked(id);
    RemoteLeaseInfo info = RemoteInfoLocked(id);
    if (!info.moving || info.moving->target != target) {
      return Status(StatusCode::kFailedPrecondition,
                    "the move of remote lease " + id + " was settled meanwhile")
          .WithReason("conflict");
    }
    info.moving.reset();
    remote_[id] = info;
    (void)ledger_->Release(target);
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(*current, info))));
    const sched::LeasedGpu& from = current->gpus.front();
    json event = {{"lease_id", id},
                  {"owner", current->owner},
                  {"client", info.client},
                  {"from", GpuJson(from)},
                  {"to", GpuJson(move.gpu)},
                  {"reason", resolved.empty() ? why : resolved + ": " + why},
                  {"message", "remote lease " + id + " stays on " + Where(from) + ": moving it to " +
                                  Where(move.gpu) + " failed: " + why +
                                  (resolved.empty() ? "" : " (" + resolved + ")")}};
    if (!resolved.empty()) event["resolved"] = resolved;
    return Event(txn, "remote_lease.migration_failed", event);
  });
  if (!s.ok()) {
    if (s.reason() == "conflict" || s.code() == StatusCode::kNotFound) {
      EndMoveOfLeaseLocked(id, /*drain=*/false);
      moves_.erase(id);
      return Status::Ok();
    }
    auto mv = moves_.find(id);
    if (mv != moves_.end()) {
      mv->second.running = false;
      if (mv->second.waiting.empty()) mv->second.waiting = "store";
    }
    return s;
  }
  moves_.erase(id);
  ++counters_.remote_migration_failures;
  if (auto n = nodes_.find(move.gpu.node); n != nodes_.end() && !n->second.api_url.empty()) {
    worker_.DrainGpuServer(n->second.api_url, ServerKey(id, move.generation));
  }
  Wake(/*strong=*/true);
  return Status::Ok();
}

void Cluster::EndMoveOfLeaseLocked(const std::string& id, bool drain) {
  auto mv = moves_.find(id);
  if (mv == moves_.end()) return;
  if (mv->second.target.empty()) {  // a resize: it ends with the lease
    if (!mv->second.running) moves_.erase(mv);
    return;
  }
  if (drain) {
    if (auto share = ledger_->Find(mv->second.target); share && !share->gpus.empty()) {
      auto n = nodes_.find(share->gpus.front().node);
      if (n != nodes_.end() && !n->second.api_url.empty()) {
        worker_.DrainGpuServer(n->second.api_url, ServerKey(id, mv->second.generation));
      }
    }
  }
  (void)ledger_->Release(mv->second.target);
  if (!mv->second.running) moves_.erase(mv);
}

void Cluster::SyncMoveLocked(const sched::Lease& lease) {
  auto info = remote_.find(lease.id);
  auto mv = moves_.find(lease.id);
  if (info != remote_.end() && info->second.moving) {
    const RemoteMove& m = *info->second.moving;
    ledger_->Restore(ReservationOf(lease, m));
    if (mv == moves_.end()) {
      moves_[lease.id] = Move{m.target, m.generation, /*running=*/false, "restart"};
    } else if (!mv->second.running && mv->second.target != m.target) {
      if (!mv->second.target.empty()) (void)ledger_->Release(mv->second.target);
      mv->second = Move{m.target, m.generation, /*running=*/false, "restart"};
    }
    return;
  }
  // A resize recorded in the row (remote_resize.cc): the row's share is the larger one held;
  // it waits to be settled.
  if (info != remote_.end() && info->second.resizing) {
    if (mv == moves_.end()) {
      moves_[lease.id] = Move{"", info->second.generation, /*running=*/false, "restart"};
    }
    return;
  }
  // No move or resize recorded: one this manager knew of was settled elsewhere (unless a thread
  // here runs it: it finds out when it writes next).
  if (mv != moves_.end() && !mv->second.running) {
    if (!mv->second.target.empty()) (void)ledger_->Release(mv->second.target);
    moves_.erase(mv);
  }
}

void Cluster::QueueResolveLocked() {
  if (resolve_queued_) return;
  resolve_queued_ = true;
  worker_.Queue([this] { (void)ResolveMoves(); });
}

bool Cluster::MoveHook(const std::string& point) {
  std::function<bool(const std::string&)> hook;
  {
    MutexLock lock(mu_);
    hook = move_hook_;
  }
  return hook && hook(point);
}

void Cluster::SetMoveHookForTest(std::function<bool(const std::string& point)> hook) {
  MutexLock lock(mu_);
  move_hook_ = std::move(hook);
}

json Cluster::ResolveMoves() {
  MutexLock one(resolve_mu_);
  struct Waiting {
    std::string id;
    std::string waiting;  // how it came to wait
    bool resize = false;
  };
  std::vector<Waiting> settle;
  {
    MutexLock lock(mu_);
    resolve_queued_ = false;
    for (auto& [id, mv] : moves_) {
      if (mv.running) continue;
      mv.running = true;  // this pass settles it; nobody else meanwhile
      settle.push_back({id, mv.waiting, mv.target.empty()});
    }
  }
  json out = {{"committed", json::array()}, {"aborted", json::array()}, {"undecided", json::array()}};
  for (const auto& [id, waiting, resize] : settle) {
    if (resize) {
      auto outcome = ResolveResize(id, waiting).first;
      if (out.contains(outcome)) out[outcome].push_back(id);
      continue;
    }
    const std::string resolved = waiting == "lost_answer" ? kResolvedAfterLostAnswer
                                 : waiting == "store"     ? kResolvedAfterStoreError
                                                          : kResolvedAfterRestart;
    auto [outcome, result] = ResolveMove(id, resolved);
    if (out.contains(outcome)) out[outcome].push_back(id);
  }
  return out;
}

std::pair<std::string, Result<json>> Cluster::ResolveMove(const std::string& id,
                                                          const std::string& resolved) {
  RemoteMove move;
  sched::LeasedGpu from;
  std::string source_url, target_url, source_key;
  {
    MutexLock lock(mu_);
    auto mv = moves_.find(id);
    if (mv == moves_.end()) return {"gone", NotFound("no move of " + id)};
    const RemoteLeaseInfo info = RemoteInfoLocked(id);
    auto lease = ledger_->Find(id);
    if (!lease || lease->expires_at <= clock_.WallNow() || !info.moving ||
        info.moving->target != mv->second.target) {
      EndMoveOfLeaseLocked(id, /*drain=*/!lease);
      moves_.erase(id);
      return {"gone", Status(StatusCode::kFailedPrecondition,
                             "the move of remote lease " + id + " ended meanwhile")
                          .WithReason("conflict")};
    }
    move = *info.moving;
    from = lease->gpus.front();
    source_key = ServerKey(id, info.generation);
    if (auto n = nodes_.find(from.node); n != nodes_.end()) source_url = n->second.api_url;
    if (auto n = nodes_.find(move.gpu.node); n != nodes_.end()) target_url = n->second.api_url;
  }
  const std::string target_key = ServerKey(id, move.generation);
  auto ask = [&](const std::string& url, const std::string& node,
                 const std::string& key) -> ServerSeen {
    if (url.empty()) {
      ServerSeen unknown;
      unknown.error = "the manager has no address of node " + node + "'s API";
      return unknown;
    }
    return Seen(worker_.GetGpuServer(url, key, kNodeAskTimeout));
  };
  const auto now = clock_.WallNow();
  const bool start_over =
      now > move.started_at + config_.remote_server_start_timeout + kStartMargin;
  const bool source_asked = move.clients_until.has_value();
  const bool asking_over = source_asked && now > *move.clients_until;
  const ServerSeen on_target = ask(target_url, move.gpu.node, target_key);
  std::optional<ServerSeen> on_source;
  if (NeedsSource(on_target, source_asked, asking_over)) {
    on_source = ask(source_url, from.node, source_key);
  }
  const Verdict verdict = Decide(on_target, on_source ? &*on_source : nullptr, move.gpu.node,
                                 from.node, start_over, source_asked, asking_over);

  MutexLock lock(mu_);
  auto mv = moves_.find(id);
  if (mv == moves_.end()) return {"gone", NotFound("no move of " + id)};
  if (verdict.kind == Verdict::kWait) {
    mv->second.running = false;
    if (mv->second.waiting.empty()) mv->second.waiting = "restart";
    spdlog::info("remote lease {}: its move to {} stays undecided, both servers kept: {}", id,
                 Where(move.gpu), verdict.why);
    return {"undecided", Status(StatusCode::kUnavailable, verdict.why)
                             .WithReason("migration_in_doubt")};
  }
  if (verdict.kind == Verdict::kAbort) {
    Status s = AbortMoveLocked(id, move.target, verdict.why, resolved);
    if (!s.ok()) return {"undecided", s};
    return {"aborted", Status(StatusCode::kFailedPrecondition, verdict.why)
                           .WithReason("migration_failed")};
  }
  json migration = {{"from", GpuJson(from)},
                    {"to", GpuJson(move.gpu)},
                    {"server", on_target.address},
                    {"clients", json::array()},
                    {"moved", on_target.clients.value_or(0)},
                    {"left_behind", on_source ? on_source->clients.value_or(0) : 0},
                    {"why", verdict.why}};
  Result<json> committed = CommitMoveLocked(id, move.target, on_target.address, on_target.pid,
                                            std::move(migration), resolved + ": " + verdict.why);
  if (!committed.ok()) {
    return {moves_.count(id) ? "undecided" : "gone", committed.status()};
  }
  return {"committed", std::move(committed)};
}

}  // namespace flyt::cluster
