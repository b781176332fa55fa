// Cordoning a node (nothing new is placed there) and draining it: every remote lease on it moved
// elsewhere (MoveRemoteLease), and uncordoning it again (see cluster.h).
#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "common/json.h"
#include "common/json_fields.h"

namespace flyt::cluster {

using internal::kDefaultMoveTimeoutSeconds;
using internal::kMaxMoveTimeoutSeconds;
using internal::Live;
using nlohmann::json;
using store::Durability;
using store::Table;

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
