// Remote leases of Cluster: a share of one GPU (SMs and memory) for a client that runs CUDA
// programs elsewhere, served by a flyt-gpu-server that the GPU's node manager starts for the
// lease. The ledger places the share (sched::Ledger::AllocateRemote); the lease row keeps the
// remote part (RemoteLeaseInfo: state, server address, secret). Creating one waits for the node
// to start the server — on the caller's thread, with no lock held (NodeWorker::StartGpuServer) —
// and every node's heartbeat reconciles: the reply's gpu_servers.desired lists the live remote
// leases on that node (the node starts what it lacks and drains the rest), and a server the node
// reports failed fails its lease. See cluster.h.
#include <sys/random.h>

#include <spdlog/spdlog.h>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "common/json.h"
#include "common/json_fields.h"
#include "gpu/json.h"

namespace flyt::cluster {

using internal::CheckIdempotencyKey;
using internal::CheckOwner;
using internal::GpuKeys;
using internal::Idempotency;
using internal::LabelsField;
using internal::LookUpKey;
using internal::RequestHash;
using nlohmann::json;
using store::Durability;
using store::Table;

namespace {

constexpr uint32_t kMaxSmCount = 1 << 20;
constexpr int64_t kMaxMemoryMb = int64_t{1} << 24;  // 16 TiB
constexpr int64_t kMinTtlSeconds = 10;
// Marks an Idempotency-Key's record that names a lease whose server was still starting.
constexpr const char* kPendingKey = "pending_remote_lease";

// A GPU server's secret: 32 bytes from the kernel's random generator, as 64 hex characters.
Result<std::string> NewSecret() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("getrandom", errno);
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

bool PlainName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// What a node is asked to run for a lease: the body of PUT /api/v1/gpu-servers/{id}, and one
// entry of a heartbeat reply's gpu_servers.desired.
json GpuServerSpec(const sched::Lease& lease, const RemoteLeaseInfo& info) {
  const sched::LeasedGpu& g = lease.gpus.front();
  return {{"lease_id", ServerKey(lease.id, info.generation)},
          {"gpu_uuid", g.uuid},
          {"memory_mb", g.reserved_bytes >> 20},
          {"sm_count", g.sm_count},
          {"secret", info.secret},
          {"owner", lease.owner},
          {"expires_at", gpu::FormatTime(lease.expires_at)}};
}

}  // namespace

namespace internal {
bool Live(const RemoteLeaseInfo& info) { return info.state == "starting" || info.state == "ready"; }
json GpuServerSpecOf(const sched::Lease& lease, const RemoteLeaseInfo& info) {
  return GpuServerSpec(lease, info);
}
}  // namespace internal

using internal::Live;

RemoteLeaseInfo Cluster::RemoteInfoLocked(const std::string& id) const {
  auto it = remote_.find(id);
  return it == remote_.end() ? RemoteLeaseInfo{} : it->second;
}

void Cluster::DrainGpuServerLocked(const sched::Lease& lease, uint32_t generation) {
  if (!lease.remote || lease.gpus.empty()) return;
  auto n = nodes_.find(lease.gpus.front().node);
  if (n == nodes_.end() || n->second.api_url.empty()) return;
  worker_.DrainGpuServer(n->second.api_url, ServerKey(lease.id, generation));
}

Result<json> Cluster::CreateRemoteLease(const Caller& caller, const json& body,
                                        const std::string& idempotency_key) {
  FLYT_RETURN_IF_ERROR(CheckIdempotencyKey(idempotency_key));
  const Idempotency idem{"remote-leases:" + caller.name, idempotency_key,
                         idempotency_key.empty() ? "" : RequestHash(body)};
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"sm_count", "sm_percent", "memory_mb", "gpu_model", "node",
                               "ttl_seconds", "client", "labels", "avoid_states",
                               "prefer_idle"}));
  sched::RemoteRequest req;
  RemoteLeaseInfo info;
  if (b.Has("sm_count") && b.Has("sm_percent")) {
    return InvalidArgument("give sm_count or sm_percent, not both");
  }
  FLYT_RETURN_IF_ERROR(b.OptionalInt<uint32_t>("sm_count", 1, kMaxSmCount, req.sm_count));
  if (!b.Has("sm_count")) {
    double percent = 100;  // neither: the whole GPU's SMs
    FLYT_RETURN_IF_ERROR(b.OptionalNumber("sm_percent", 0, 100, percent));
    if (percent <= 0) return InvalidArgument("sm_percent must be more than 0 (and at most 100)");
    req.sm_percent = percent;
    info.sm_percent = percent;
  }
  FLYT_ASSIGN_OR_RETURN(int64_t memory_mb, b.RequiredInt<int64_t>("memory_mb", 1, kMaxMemoryMb));
  FLYT_RETURN_IF_ERROR(b.OptionalString("gpu_model", 64, req.gpu_model));
  FLYT_RETURN_IF_ERROR(b.OptionalString("node", 128, req.node));
  int64_t ttl = config_.remote_default_ttl.count();
  FLYT_RETURN_IF_ERROR(
      b.OptionalInt<int64_t>("ttl_seconds", kMinTtlSeconds, config_.remote_max_ttl.count(), ttl));
  info.client = caller.name;
  FLYT_RETURN_IF_ERROR(b.OptionalString("client", 128, info.client));
  if (!PlainName(info.client)) {
    return InvalidArgument("client must be 1-128 characters of [A-Za-z0-9._-]");
  }
  FLYT_RETURN_IF_ERROR(LabelsField(b, "labels", req.labels));
  FLYT_RETURN_IF_ERROR(
      internal::PlacementFields(b, config_.prefer_idle, req.avoid_states, req.prefer_idle));
  if (!config_.remote_enabled) {
    return Unavailable("remote leases are turned off on this cluster manager ([remote] enabled = "
                       "false)");
  }
  req.owner = caller.name;
  req.memory_bytes = static_cast<uint64_t>(memory_mb) << 20;
  req.ttl = std::chrono::seconds(ttl);
  info.sm_count_asked = req.sm_count;
  FLYT_ASSIGN_OR_RETURN(info.secret, NewSecret());

  // 1. Place the lease and store it (state starting): from here its share is held, and the
  // node's heartbeat replies list it as desired.
  sched::Lease lease;
  std::string url;
  json spec;
  {
    MutexLock lock(mu_);
    req.id = NewId("rlease");
    std::optional<json> replay;
    Status refusal;
    const auto now = clock_.WallNow();
    Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
      FLYT_RETURN_IF_ERROR(LookUpKey(txn, idem, ToMillis(now), replay));
      if (replay && replay->value(kPendingKey, false)) {
        // The key's lease was placed but not yet answered (its server was starting, or this
        // manager stopped meanwhile): the lease as it is now. One that is gone (its server never
        // started) leaves the key free for a new lease.
        const std::string id = replay->value("id", std::string());
        auto placed = ledger_->Find(id);
        const RemoteLeaseInfo placed_info = RemoteInfoLocked(id);
        replay.reset();
        if (placed && placed->remote && placed->expires_at > now && !placed_info.secret.empty()) {
          replay = RemoteLeaseView(*placed, placed_info, now, /*with_secret=*/true);
        }
      }
      if (replay) return Status::Ok();
      bool expired = false;
      FLYT_RETURN_IF_ERROR(ExpireLocked(txn, expired));
      Result<sched::Lease> granted = ledger_->AllocateRemote(req);
      if (!granted.ok()) {
        const Status& refused = granted.status();
        if (refused.code() != StatusCode::kResourceExhausted) return refused;
        const std::string never = ledger_->RemoteNeverFits(req);
        refusal = never.empty() ? refused.WithReason("insufficient_gpus")
                                : Status(refused.code(), refused.message() +
                                                             " (it can never be met in this "
                                                             "cluster: " +
                                                             never + ")")
                                      .WithReason("never_fits");
        return expired ? Status::Ok() : refusal;
      }
      lease = *granted;
      FLYT_RETURN_IF_ERROR(txn.ClaimGpus(lease.id, GpuKeys(lease), /*exclusive=*/false));
      remote_[lease.id] = info;
      // The key is stored with the lease, before the node is asked for a server: a retry after
      // a lost answer (a client's time-out while the server starts, this manager killed) finds
      // this lease and starts no second one. Step 3 replaces it with the answer.
      if (!idem.key.empty()) {
        FLYT_RETURN_IF_ERROR(txn.PutIdempotency(
            idem.scope, idem.key,
            {idem.hash, DumpJson(json{{"id", lease.id}, {kPendingKey, true}}),
             ToMillis(now + config_.idempotency_keep_for)}));
      }
      return txn.Put(Table::kLeases, lease.id, DumpJson(ToJson(lease, info)));
    });
    if (s.ok() && !refusal.ok()) s = refusal;
    if (!s.ok()) {
      if (s.code() == StatusCode::kResourceExhausted) ++counters_.remote_refusals;
      return s;
    }
    if (replay) {
      ++counters_.idempotent_replays;
      json again = std::move(*replay);
      again["replayed"] = true;
      // A lease still starting answers state "starting": the caller asks again with the key.
      if (!ledger_->Find(again.value("id", std::string()))) again["lease_ended"] = true;
      return again;
    }
    auto n = nodes_.find(lease.gpus.front().node);
    if (n != nodes_.end()) url = n->second.api_url;
    spec = GpuServerSpec(lease, info);
  }
  const std::string& node = lease.gpus.front().node;

  // 2. The node starts the server; no lock is held while it does.
  std::string failure, address;
  std::optional<int64_t> pid;
  if (url.empty()) {
    failure = "the manager has no address of node " + node +
              "'s API to call (its heartbeat advertises none, or not one the manager trusts)";
  } else {
    Result<json> started = worker_.StartGpuServer(url, lease.id, spec,
                                                  config_.remote_server_start_timeout);
    if (!started.ok()) {
      failure = started.status().message();
    } else if (!started->is_object() || !started->contains("address") ||
               !(*started)["address"].is_string() ||
               (*started)["address"].get<std::string>().empty()) {
      failure = "the node answered without the server's address";
    } else if (started->value("state", std::string("running")) == "failed") {
      failure = "the server failed: " + started->value("reason", std::string("no reason given"));
    } else {
      address = (*started)["address"].get<std::string>();
      if (address.size() > 256) address.resize(256);
      if (started->contains("pid") && (*started)["pid"].is_number_integer()) {
        pid = (*started)["pid"].get<int64_t>();
      }
    }
  }

  // 3. Ready, or released with the node's reason.
  MutexLock lock(mu_);
  const auto now = clock_.WallNow();
  auto existing = ledger_->Find(lease.id);
  if (!existing || existing->expires_at <= now) {
    if (!url.empty()) worker_.DrainGpuServer(url, lease.id);
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + lease.id + " ended while its GPU server was starting")
        .WithReason("already_ended");
  }
  if (!failure.empty()) {
    ++counters_.remote_start_failures;
    spdlog::warn("remote lease {}: node {} did not start its GPU server: {}", lease.id, node,
                 failure);
    Status s =
        WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
          FLYT_RETURN_IF_ERROR(ledger_->Release(lease.id));
          FLYT_RETURN_IF_ERROR(txn.Delete(Table::kLeases, lease.id));
          FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(lease.id));
          if (!idem.key.empty()) {
            // No lease came of the key: a retry with it asks anew.
            FLYT_RETURN_IF_ERROR(txn.PutIdempotency(idem.scope, idem.key, {idem.hash, "{}", 0}));
          }
          return Event(txn, "remote_lease.released",
                       {{"lease_id", lease.id},
                        {"owner", lease.owner},
                        {"client", info.client},
                        {"node", node},
                        {"reason", "server_not_started"},
                        {"message", "remote lease " + lease.id + " of " + lease.owner +
                                        " released: node " + node +
                                        " did not start its GPU server: " + failure}});
        });
    if (!url.empty()) worker_.DrainGpuServer(url, lease.id);  // whatever it half-started
    if (!s.ok()) return s;
    Wake(/*strong=*/true);
    return Unavailable("node " + node + " did not start the GPU server of remote lease " +
                       lease.id + ": " + failure + " (the lease was released)");
  }
  json out;
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    RemoteLeaseInfo r = RemoteInfoLocked(lease.id);
    if (r.secret.empty()) r = info;
    // A heartbeat may have reported the server failed meanwhile: that stands.
    if (r.state == "starting") r.state = "ready";
    r.server_address = address;
    if (r.server_state.empty() || r.server_state == "starting") r.server_state = "running";
    r.server_pid = pid;
    // The TTL runs from now: the wait for the server is not the client's time.
    FLYT_ASSIGN_OR_RETURN(sched::Lease renewed, ledger_->Renew(lease.id));
    remote_[lease.id] = r;
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, lease.id, DumpJson(ToJson(renewed, r))));
    out = RemoteLeaseView(renewed, r, now, /*with_secret=*/true);
    if (!idem.key.empty()) {
      FLYT_RETURN_IF_ERROR(txn.PutIdempotency(
          idem.scope, idem.key,
          {idem.hash, DumpJson(out), ToMillis(now + config_.idempotency_keep_for)}));
    }
    json event = RemoteLeaseView(renewed, r, now, /*with_secret=*/false);
    event["lease_id"] = lease.id;
    event["message"] = "remote lease " + lease.id + " granted to " + lease.owner + " (client " +
                       r.client + "): " + std::to_string(renewed.gpus[0].sm_count) + " SMs and " +
                       std::to_string(renewed.gpus[0].reserved_bytes >> 20) + " MiB of GPU " +
                       std::to_string(renewed.gpus[0].index) + " on " + node + ", served at " +
                       address;
    return Event(txn, "remote_lease.granted", event);
  });
  if (!s.ok()) return s;
  ++counters_.remote_grants;
  return out;
}

Result<json> Cluster::RenewRemoteLease(const Caller& caller, const std::string& id,
                                       const json& body) {
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"ttl_seconds"}));
  std::optional<std::chrono::seconds> ttl;
  if (b.Has("ttl_seconds")) {
    FLYT_ASSIGN_OR_RETURN(int64_t v, b.RequiredInt<int64_t>("ttl_seconds", kMinTtlSeconds,
                                                            config_.remote_max_ttl.count()));
    ttl = std::chrono::seconds(v);
  }
  MutexLock lock(mu_);
  json out;
  FLYT_RETURN_IF_ERROR(
      WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
        auto existing = ledger_->Find(id);
        if (!existing) return LeaseGoneLocked(id);
        if (!existing->remote) {
          return NotFound("lease " + id + " is not a remote lease (see /api/v1/allocations)");
        }
        FLYT_RETURN_IF_ERROR(CheckOwner(caller, existing->owner, "remote lease " + id));
        const RemoteLeaseInfo info = RemoteInfoLocked(id);
        if (info.state == "failed") {
          return Status(StatusCode::kFailedPrecondition,
                        "remote lease " + id + " failed: " + info.reason +
                            "; release it and ask for a new one")
              .WithReason("lease_failed");
        }
        Result<sched::Lease> renewed = ledger_->Renew(id, ttl);
        if (!renewed.ok()) {
          const Status& s = renewed.status();
          return s.code() == StatusCode::kNotFound ? s.WithReason("already_ended") : s;
        }
        FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(*renewed, info))));
        // A move's target share lasts as long as the lease.
        if (info.moving) ledger_->Restore(ReservationOf(*renewed, *info.moving));
        out = RemoteLeaseView(*renewed, info, clock_.WallNow(), /*with_secret=*/false);
        return Event(txn, "remote_lease.renewed",
                     {{"lease_id", id},
                      {"owner", existing->owner},
                      {"client", info.client},
                      {"expires_at", out["expires_at"]},
                      {"message", "remote lease " + id + " renewed until " +
                                      out["expires_at"].get<std::string>()}});
      }));
  return out;
}

Result<json> Cluster::ReleaseRemoteLease(const Caller& caller, const std::string& id) {
  MutexLock lock(mu_);
  std::optional<sched::Lease> released;
  uint32_t generation = 0;
  FLYT_RETURN_IF_ERROR(
      WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
        auto existing = ledger_->Find(id);
        if (!existing) return LeaseGoneLocked(id);
        if (!existing->remote) {
          return NotFound("lease " + id + " is not a remote lease (see /api/v1/allocations)");
        }
        FLYT_RETURN_IF_ERROR(CheckOwner(caller, existing->owner, "remote lease " + id));
        const RemoteLeaseInfo info = RemoteInfoLocked(id);
        // A move this manager runs now ends first; one waiting to be resolved ends with the
        // lease (its target share is released and its server drained too).
        if (auto mv = moves_.find(id); mv != moves_.end() && mv->second.running) {
          return Status(StatusCode::kFailedPrecondition,
                        "remote lease " + id + " is moving to another GPU server; release it "
                        "once the move has ended")
              .WithReason("conflict");
        }
        generation = info.generation;
        FLYT_RETURN_IF_ERROR(ledger_->Release(id));
        FLYT_RETURN_IF_ERROR(txn.Delete(Table::kLeases, id));
        FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(id));
        released = existing;
        return Event(txn, "remote_lease.released",
                     {{"lease_id", id},
                      {"owner", existing->owner},
                      {"client", info.client},
                      {"node", existing->gpus.empty() ? "" : existing->gpus.front().node},
                      {"reason", "released"},
                      {"message", "remote lease " + id + " released by " + caller.name}});
      }));
  if (released) {
    DrainGpuServerLocked(*released, generation);
    EndMoveOfLeaseLocked(id, /*drain=*/true);
  }
  Wake(/*strong=*/true);
  return json{{"released", id}};
}

json Cluster::RemoteLeases(const std::string& node, const std::string& client) const {
  MutexLock lock(mu_);
  const auto now = clock_.WallNow();
  json list = json::array();
  for (const sched::Lease& l : ledger_->Leases()) {
    if (!l.remote || l.gpus.empty() || l.expires_at <= now || IsMoveTargetLocked(l.id)) continue;
    if (!node.empty() && l.gpus.front().node != node) continue;
    const RemoteLeaseInfo info = RemoteInfoLocked(l.id);
    if (!client.empty() && info.client != client) continue;
    list.push_back(RemoteLeaseView(l, info, now, /*with_secret=*/false));
  }
  return {{"remote_leases", list}};
}

Result<json> Cluster::RemoteLease(const Caller& caller, const std::string& id) const {
  MutexLock lock(mu_);
  const auto now = clock_.WallNow();
  auto l = ledger_->Find(id);
  if (!l || l->expires_at <= now) return LeaseGoneLocked(id);
  if (!l->remote) return NotFound("lease " + id + " is not a remote lease (see /api/v1/allocations)");
  FLYT_RETURN_IF_ERROR(CheckOwner(caller, l->owner, "remote lease " + id));
  return RemoteLeaseView(*l, RemoteInfoLocked(id), now, /*with_secret=*/true);
}

json Cluster::GpuServers(const std::string& node) const {
  MutexLock lock(mu_);
  json list = json::array();
  for (const auto& [name, n] : nodes_) {
    if (!node.empty() && name != node) continue;
    for (const json& server : n.gpu_servers.servers) {
      json j = server;
      j.erase("secret");  // never kept; stated
      j["node"] = name;
      list.push_back(std::move(j));
    }
  }
  return {{"servers", list}};
}

json Cluster::DesiredGpuServersLocked(const std::string& node) const {
  json desired = json::array();
  const auto now = clock_.WallNow();
  for (const sched::Lease& l : ledger_->Leases()) {
    if (!l.remote || l.gpus.empty() || l.gpus.front().node != node || l.expires_at <= now) {
      continue;
    }
    auto info = remote_.find(l.id);
    if (info == remote_.end() || !Live(info->second)) continue;
    desired.push_back(GpuServerSpec(l, info->second));
  }
  // The server a lease is moving to (remote_moves.cc): desired on its node while the move runs.
  for (const auto& [id, move] : moves_) {
    auto target = ledger_->Find(move.target);
    auto lease = ledger_->Find(id);
    auto info = remote_.find(id);
    if (!target || !lease || target->gpus.empty() || target->gpus.front().node != node ||
        info == remote_.end()) {
      continue;
    }
    RemoteLeaseInfo next = info->second;
    next.generation = move.generation;
    sched::Lease at = *lease;
    at.gpus = target->gpus;
    desired.push_back(GpuServerSpec(at, next));
  }
  return desired;
}

Status Cluster::ReconcileGpuServersLocked(store::Txn& txn, const std::string& node,
                                          const GpuServersReport& before,
                                          const GpuServersReport& now) {
  std::map<std::string, std::string> was;
  for (const json& s : before.servers) was[s.value("lease_id", "")] = s.value("state", "");
  for (const json& s : now.servers) {
    const std::string key = s.value("lease_id", "");
    const std::string state = s.value("state", "");
    const std::string reason = s.value("reason", "");
    const std::string address = s.value("address", "");
    auto prev = was.find(key);
    const bool changed = prev == was.end() || prev->second != state;
    if (changed && (state == "running" || state == "failed" || state == "stopped")) {
      const std::string kind = state == "running" ? "started" : state;
      json event = s;
      event["node"] = node;
      event["message"] = "GPU server " + key + " on " + node + " " + kind +
                         (state == "running" && !address.empty() ? " at " + address : "") +
                         (reason.empty() ? "" : ": " + reason);
      FLYT_RETURN_IF_ERROR(Event(txn, "gpu_server." + kind, event));
    }
    // The lease of this server, if it is a live remote lease on this node and this is its
    // current server (not the one it moved from, nor the one it is moving to).
    const auto parsed = ParseServerKey(key);
    if (!parsed) continue;
    const std::string& id = parsed->first;
    auto lease = ledger_->Find(id);
    auto info_it = remote_.find(id);
    if (!lease || !lease->remote || lease->gpus.empty() || lease->gpus.front().node != node ||
        info_it == remote_.end() || !Live(info_it->second) ||
        info_it->second.generation != parsed->second) {
      continue;  // unknown, ended or not its current server: the node drains it when undesired
    }
    RemoteLeaseInfo info = info_it->second;
    if (state == "failed" || (state == "stopped" && info.state == "ready")) {
      info.state = "failed";
      info.reason = reason.empty() ? "its GPU server on " + node + " " + state
                                   : "its GPU server on " + node + " " + state + ": " + reason;
      info.server_state = state;
      remote_[id] = info;
      FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(*lease, info))));
      FLYT_RETURN_IF_ERROR(
          Event(txn, "remote_lease.failed",
                {{"lease_id", id},
                 {"owner", lease->owner},
                 {"client", info.client},
                 {"node", node},
                 {"reason", info.reason},
                 {"message", "remote lease " + id + " of " + lease->owner + " failed: " +
                                 info.reason}}));
    } else if (state == "running" && info.state == "starting" && !address.empty()) {
      // Started while this manager waited elsewhere (or before it restarted).
      info.state = "ready";
      info.server_address = address.substr(0, 256);
      info.server_state = state;
      if (s.contains("pid") && s["pid"].is_number_integer()) info.server_pid = s["pid"].get<int64_t>();
      remote_[id] = info;
      FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(*lease, info))));
    }
  }
  return Status::Ok();
}

}  // namespace flyt::cluster
