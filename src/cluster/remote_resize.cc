// Resizing a remote lease: a new SM share and memory limit for its running server (see
// cluster.h). Like a move (remote_moves.cc), a resize never holds the cluster's lock while the
// node works, and it is written ahead so that a manager that dies halfway is settled after its
// restart. Its steps:
//   1. (locked, one transaction) check the lease, hold the larger of the old and the new share in
//      the ledger (Ledger::ResizeRemote: no other request can take capacity the lease may still
//      need) and write the resize ahead into the lease's row (RemoteLeaseInfo::resizing, durable;
//      the row's share is the one held): a manager that restarts, or another replica, holds the
//      same share, refuses other changes of the lease and shows it as "resizing_to";
//   2. ask the node to apply the new share to the running server (POST
//      /api/v1/gpu-servers/<key>/resize);
//   3. (locked, one transaction) settle: the lease takes the share its server runs with — the new
//      one when the node took it, the old one when the node refused — and the record is cleared.
// When the node's answer is lost (no connection, a timeout), the manager died between 1 and 3, or
// step 3 could not be stored, the resize stays recorded (the larger share held) until
// ResolveMoves asks the node for the server's record (GET /api/v1/gpu-servers/<key>: its
// sm_count and memory_mb are the share in force, taken only once the server applied it) and
// settles the lease to that share. A record still showing the old share settles nothing while
// the node may still be applying the new one (until the recorded limit of the manager's call);
// a node that cannot be reached leaves the resize recorded for the next pass (its heartbeat
// queues one).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "common/json.h"
#include "common/json_fields.h"

namespace flyt::cluster {

using internal::AnswerLost;
using internal::kDefaultMoveTimeoutSeconds;
using internal::kNodeAskTimeout;
using internal::kMaxMoveTimeoutSeconds;
using nlohmann::json;
using store::Durability;
using store::Table;

namespace {

// How an undecided resize came to be settled (the events' "resolved").
constexpr const char* kResizeResolvedAfterRestart =
    "resolved after a restart of the cluster manager (the resize was recorded in the store)";
constexpr const char* kResizeResolvedAfterLostAnswer =
    "resolved after the node's answer to the resize was lost";
constexpr const char* kResizeResolvedAfterStoreError = "resolved after its outcome could not be stored";

// Beyond the resize's own timeout: the call's connection and the node's answer.
constexpr auto kCallMargin = std::chrono::seconds(30);

std::string ShareText(uint32_t sm_count, uint64_t memory_bytes) {
  return std::to_string(sm_count) + " SMs and " + std::to_string(memory_bytes >> 20) + " MiB";
}

}  // namespace

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

  // 1. Hold the larger of the old and the new share, and write the resize ahead.
  RemoteResize resize;
  std::string url, key;
  {
    MutexLock lock(mu_);
    uint32_t generation = 0;
    Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
      FLYT_ASSIGN_OR_RETURN(const sched::Lease current,
                            ReadyToChangeLocked(caller, id, "is resized"));
      RemoteLeaseInfo info = RemoteInfoLocked(id);
      const sched::LeasedGpu g = current.gpus.front();
      auto n = nodes_.find(g.node);
      if (n == nodes_.end() || n->second.api_url.empty()) {
        return Unavailable("the manager has no address of node " + g.node + "'s API");
      }
      sched::RemoteRequest old_share, new_share;
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
      resize.sm_count_before = g.sm_count;
      resize.memory_bytes_before = g.reserved_bytes;
      resize.sm_count = fits->gpus.front().sm_count;
      resize.memory_bytes = fits->gpus.front().reserved_bytes;
      sched::RemoteRequest hold;
      hold.sm_count = std::max(resize.sm_count, g.sm_count);
      hold.memory_bytes = std::max(resize.memory_bytes, g.reserved_bytes);
      Result<sched::Lease> held = ledger_->ResizeRemote(id, hold);
      if (!held.ok()) {  // cannot happen: both fit alone, and the larger of each fits
        (void)ledger_->ResizeRemote(id, old_share);
        return held.status();
      }
      if (b.Has("sm_count")) {
        resize.sm_count_asked = sm_count;
      } else if (b.Has("sm_percent")) {
        resize.sm_count_asked = 0;
        resize.sm_percent = sm_percent;
      } else {
        resize.sm_count_asked = info.sm_count_asked;
        resize.sm_percent = info.sm_percent;
      }
      resize.started_at = clock_.WallNow();
      resize.by = caller.name;
      resize.node_until = resize.started_at + std::chrono::seconds(timeout) + kCallMargin;
      info.resizing = resize;
      remote_[id] = info;
      url = n->second.api_url;
      generation = info.generation;
      key = ServerKey(id, info.generation);
      FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(*held, info))));
      return Event(txn, "remote_lease.resizing",
                   {{"lease_id", id},
                    {"owner", current.owner},
                    {"client", info.client},
                    {"sm_count_before", resize.sm_count_before},
                    {"memory_mb_before", resize.memory_bytes_before >> 20},
                    {"sm_count", resize.sm_count},
                    {"memory_mb", resize.memory_bytes >> 20},
                    {"by", caller.name},
                    {"message", "remote lease " + id + " of " + current.owner +
                                    " is being resized from " +
                                    ShareText(resize.sm_count_before, resize.memory_bytes_before) +
                                    " to " + ShareText(resize.sm_count, resize.memory_bytes)}});
    });
    if (!s.ok()) return s;
    moves_[id] = Move{"", generation, /*running=*/true, ""};
  }
  if (MoveHook("resize_recorded")) {
    return Status(StatusCode::kInternal,
                  "the resize of remote lease " + id + " was stopped once it was recorded (test)");
  }

  // 2. The node applies it to the running server.
  json ask = {{"sm_count", resize.sm_count},
              {"memory_mb", resize.memory_bytes >> 20},
              {"timeout_s", timeout}};
  Result<json> applied = worker_.GpuServerAction(url, key, "resize", ask,
                                                 std::chrono::seconds(timeout) + kCallMargin);
  if (MoveHook("resize_applied")) {
    return Status(StatusCode::kInternal, "the resize of remote lease " + id +
                                             " was stopped after its node answered (test)");
  }

  // 3. The lease takes the share its server runs with.
  if (applied.ok()) {
    MutexLock lock(mu_);
    return SettleResizeLocked(id, resize.sm_count, resize.memory_bytes, *applied, "", "");
  }
  if (!AnswerLost(applied.status())) {
    // The node answered that its server did not take the new share.
    const std::string why =
        "its GPU server did not take the new one: " + applied.status().message();
    Status kept;
    {
      MutexLock lock(mu_);
      kept = SettleResizeLocked(id, resize.sm_count_before, resize.memory_bytes_before, json(),
                                why, "")
                 .status();
    }
    if (!kept.ok()) return kept;
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id + " keeps its share: " + why)
        .WithReason("resize_refused");
  }
  // No answer: the server may have taken the new share. The node is asked what it runs with;
  // when it cannot tell yet, the resize stays recorded with the larger share held.
  spdlog::warn("remote lease {}: no answer from its node to the resize ({}); asking the node "
               "what its server runs with",
               id, applied.status().message());
  {
    MutexLock lock(mu_);
    auto mv = moves_.find(id);
    if (mv != moves_.end()) mv->second.waiting = "lost_answer";
  }
  auto [outcome, result] = ResolveResize(id, "lost_answer");
  if (outcome == "committed") return result;
  if (outcome == "aborted") {
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id + " keeps its share: its node did not answer (" +
                      applied.status().message() + ") and its server still runs with the old one")
        .WithReason("resize_refused");
  }
  return Status(StatusCode::kUnavailable,
                "remote lease " + id + ": its node did not answer whether its server took the "
                "new share (" + applied.status().message() + "); the larger of both is held and "
                "the manager settles the resize once the node can tell (" +
                    (result.ok() ? std::string("retrying") : result.status().message()) + ")")
      .WithReason("resize_in_doubt");
}

Result<json> Cluster::SettleResizeLocked(const std::string& id, uint32_t sm_count,
                                         uint64_t memory_bytes, const json& server,
                                         const std::string& why, const std::string& resolved) {
  const auto now = clock_.WallNow();
  auto still = ledger_->Find(id);
  if (!still || still->expires_at <= now) {
    moves_.erase(id);
    return Status(StatusCode::kFailedPrecondition,
                  "remote lease " + id + " ended while it was resized")
        .WithReason("already_ended");
  }
  json out;
  bool kept_old = false;
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    auto current = ledger_->Find(id);
    if (!current) return LeaseGoneLocked(id);
    RemoteLeaseInfo info = RemoteInfoLocked(id);
    if (!info.resizing) {
      return Status(StatusCode::kFailedPrecondition,
                    "the resize of remote lease " + id + " was settled meanwhile (by another "
                    "replica)")
          .WithReason("conflict");
    }
    const RemoteResize z = *info.resizing;
    const bool is_new = sm_count == z.sm_count && memory_bytes == z.memory_bytes;
    kept_old = !is_new && sm_count == z.sm_count_before && memory_bytes == z.memory_bytes_before;
    sched::RemoteRequest share;
    share.sm_count = sm_count;
    share.memory_bytes = memory_bytes;
    FLYT_ASSIGN_OR_RETURN(sched::Lease settled, ledger_->ResizeRemote(id, share));
    if (is_new) {
      info.sm_count_asked = z.sm_count_asked;
      info.sm_percent = z.sm_percent;
    }
    info.resizing.reset();
    remote_[id] = info;
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, id, DumpJson(ToJson(settled, info))));
    out = RemoteLeaseView(settled, info, now, /*with_secret=*/false);
    const sched::LeasedGpu& g = settled.gpus.front();
    json resize = {{"sm_count_before", z.sm_count_before},
                   {"memory_mb_before", z.memory_bytes_before >> 20},
                   {"sm_count", g.sm_count},
                   {"memory_mb", g.reserved_bytes >> 20}};
    if (!server.is_null()) resize["server"] = server;
    if (!resolved.empty()) resize["resolved"] = resolved;
    if (!why.empty()) resize["why"] = why;
    out["resize"] = resize;
    json event = resize;
    event.erase("server");
    event["lease_id"] = id;
    event["owner"] = settled.owner;
    event["client"] = info.client;
    if (!resolved.empty()) event["reason"] = resolved + (why.empty() ? "" : ": " + why);
    const std::string how = resolved.empty() ? "" : " (" + resolved + ": " + why + ")";
    if (kept_old) {
      if (resolved.empty()) event["reason"] = why;
      event["message"] = "remote lease " + id + " of " + settled.owner + " keeps " +
                         ShareText(g.sm_count, g.reserved_bytes) + ": resizing it to " +
                         ShareText(z.sm_count, z.memory_bytes) + " failed" +
                         (resolved.empty() ? ": " + why : how);
      return Event(txn, "remote_lease.resize_failed", event);
    }
    event["message"] = "remote lease " + id + " of " + settled.owner + " resized from " +
                       ShareText(z.sm_count_before, z.memory_bytes_before) + " to " +
                       ShareText(g.sm_count, g.reserved_bytes) + how;
    return Event(txn, "remote_lease.resized", event);
  });
  if (!s.ok()) {
    if (s.reason() == "conflict" || s.code() == StatusCode::kNotFound) {
      moves_.erase(id);  // settled elsewhere, or the lease ended
      return s;
    }
    // Not stored: the store still records the resize (a reload put the held share back); a
    // later pass settles it.
    auto mv = moves_.find(id);
    if (mv != moves_.end()) {
      mv->second.running = false;
      if (mv->second.waiting.empty()) mv->second.waiting = "store";
    }
    spdlog::error("remote lease {}: the outcome of its resize could not be stored ({}); it stays "
                  "recorded and is settled again later",
                  id, s.message());
    return s;
  }
  moves_.erase(id);
  if (kept_old) {
    ++counters_.remote_resize_failures;
  } else {
    ++counters_.remote_resizes;
  }
  Wake(/*strong=*/true);  // the held share may have shrunk
  return out;
}

std::pair<std::string, Result<json>> Cluster::ResolveResize(const std::string& id,
                                                            const std::string& waiting) {
  const std::string resolved = waiting == "lost_answer" ? kResizeResolvedAfterLostAnswer
                               : waiting == "store"     ? kResizeResolvedAfterStoreError
                                                        : kResizeResolvedAfterRestart;
  RemoteResize z;
  std::string url, key, node;
  {
    MutexLock lock(mu_);
    auto mv = moves_.find(id);
    if (mv == moves_.end()) return {"gone", NotFound("no resize of " + id)};
    const RemoteLeaseInfo info = RemoteInfoLocked(id);
    auto lease = ledger_->Find(id);
    if (!lease || lease->expires_at <= clock_.WallNow() || lease->gpus.empty() ||
        !info.resizing || !mv->second.target.empty()) {
      if (mv->second.target.empty()) moves_.erase(mv);
      return {"gone", Status(StatusCode::kFailedPrecondition,
                             "the resize of remote lease " + id + " ended meanwhile")
                          .WithReason("conflict")};
    }
    z = *info.resizing;
    node = lease->gpus.front().node;
    key = ServerKey(id, info.generation);
    if (auto n = nodes_.find(node); n != nodes_.end()) url = n->second.api_url;
  }
  Result<json> seen = url.empty() ? Result<json>(Unavailable("the manager has no address of node " +
                                                             node + "'s API"))
                                  : worker_.GetGpuServer(url, key, kNodeAskTimeout);

  // What the node's record says decides; nothing it cannot tell does.
  bool settle = false;
  uint32_t sm_count = z.sm_count_before;
  uint64_t memory_bytes = z.memory_bytes_before;
  std::string why;
  if (!seen.ok()) {
    if (seen.status().code() == StatusCode::kNotFound) {
      settle = true;
      why = "node " + node + " has no server of the lease: nothing took the new share";
    } else {
      why = "node " + node + " cannot say what its server runs with: " + seen.status().message();
    }
  } else if (!seen->is_object() || !seen->contains("sm_count") ||
             !(*seen)["sm_count"].is_number_unsigned() || !seen->contains("memory_mb") ||
             !(*seen)["memory_mb"].is_number_unsigned()) {
    why = "node " + node + " does not say what share its server runs with";
  } else {
    sm_count = (*seen)["sm_count"].get<uint32_t>();
    memory_bytes = (*seen)["memory_mb"].get<uint64_t>() << 20;
    const std::string state = seen->contains("state") && (*seen)["state"].is_string()
                                  ? (*seen)["state"].get<std::string>()
                                  : std::string();
    const bool is_new = sm_count == z.sm_count && memory_bytes == z.memory_bytes;
    const bool is_old = sm_count == z.sm_count_before && memory_bytes == z.memory_bytes_before;
    const bool may_apply =
        (state == "running" || state == "starting") && clock_.WallNow() <= z.node_until;
    if (is_new) {
      settle = true;
      why = "the server on " + node + " runs with the new share";
    } else if (is_old && may_apply) {
      why = "the server on " + node +
            " still runs with the old share and the node may still be applying the new one";
    } else if (is_old) {
      settle = true;
      why = "the server on " + node + " still runs with the old share";
    } else {
      // Neither share: the ledger never takes a node's numbers as they come (a wrong or hostile
      // report would shrink the lease or over-commit the GPU). The larger share stays held, and
      // the lease says why, until the node reports one of the two.
      why = "the server on " + node + " reports " + ShareText(sm_count, memory_bytes) +
            ", neither the old share nor the new one";
    }
  }

  MutexLock lock(mu_);
  auto mv = moves_.find(id);
  if (mv == moves_.end()) return {"gone", NotFound("no resize of " + id)};
  if (!settle) {
    mv->second.running = false;
    if (mv->second.waiting.empty()) mv->second.waiting = "restart";
    spdlog::info("remote lease {}: its resize to {} stays undecided, the larger share held: {}",
                 id, ShareText(z.sm_count, z.memory_bytes), why);
    return {"undecided", Status(StatusCode::kUnavailable, why).WithReason("resize_in_doubt")};
  }
  const bool kept_old = !(sm_count == z.sm_count && memory_bytes == z.memory_bytes) &&
                        sm_count == z.sm_count_before && memory_bytes == z.memory_bytes_before;
  Result<json> settled = SettleResizeLocked(id, sm_count, memory_bytes,
                                            seen.ok() ? *seen : json(), why, resolved);
  if (!settled.ok()) return {moves_.count(id) ? "undecided" : "gone", settled.status()};
  return {kept_old ? "aborted" : "committed", std::move(settled)};
}

}  // namespace flyt::cluster
