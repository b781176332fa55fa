// Resizing a remote lease: a new SM share and memory limit for its running server, held at the
// larger of the old and new share in the ledger while the node applies it (see cluster.h).
#include <algorithm>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "common/json.h"
#include "common/json_fields.h"

namespace flyt::cluster {

using internal::kDefaultMoveTimeoutSeconds;
using internal::kMaxMoveTimeoutSeconds;
using nlohmann::json;
using store::Durability;
using store::Table;

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
    moves_[id] = Move{"", info.generation, /*running=*/true, ""};
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

}  // namespace flyt::cluster
