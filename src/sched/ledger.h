// Ledger: the cluster's reservation ledger — which GPUs are leased to whom until when — and the
// placement that decides which GPUs a request gets.
//
// A GPU held by an exclusive lease is never offered again until the lease is released or
// expires, whatever its observed usage; memory leased non-exclusively counts against the GPU's
// free memory at once (a model still loading does not show up in NVML yet). Nodes report through
// UpdateNode (heartbeats); a node silent for longer than `unreachable_after` offers nothing, and
// its leases are released after a further `lease_grace`. A request that cannot be met fails with
// the reasons counted per node, never with a silent fallback. Time comes from an injected Clock.
// Thread-safe: every method takes the ledger's lock.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"

namespace flyt::sched {

struct GpuState {
  uint32_t index = 0;
  std::string uuid;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  bool lost = false;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<uint64_t> memory_free_bytes;
  std::optional<uint32_t> utilization_percent;
  // From the node's GPU servers (its heartbeat's gpu_servers.gpus): the SM count, the step in
  // which SMs are granted, whether the node serves remote GPUs at all, and whether several
  // remote leases may share this GPU (MPS).
  std::optional<uint32_t> sm_count;
  std::optional<uint32_t> sm_granularity;
  bool remote_capable = false;
  bool shared = false;
  // The GPU's usage-profile state as its node last reported it (profile::StateName: "idle",
  // "cyclic", ...); "unknown" when the node sent no profile for it. Placement may avoid some
  // states and prefer "idle" (AllocationRequest::avoid_states, prefer_idle).
  std::string profile_state = "unknown";
  // Whether processes hold memory on it (its snapshot's process list): an "idle" GPU that
  // still holds a process (memory held for less than the node's allocated_idle_after) is not
  // preferred by prefer_idle.
  bool holds_processes = false;
  // The node is cordoned (being drained, `flytctl nodes drain`): no new lease of any kind is
  // placed on it; the leases it holds stay until they end or move.
  bool cordoned = false;
};

// The usage-profile state that placement prefers when asked to (prefer_idle).
inline constexpr const char* kIdleState = "idle";

enum class Policy { kScore, kBinpack, kSpread };

struct AllocationRequest {
  int gpus = 1;
  uint64_t min_free_memory_bytes = 0;
  uint32_t max_utilization_percent = 100;
  bool same_node = true;
  std::string gpu_model;  // substring of the GPU name ("H100"); empty: any
  Policy policy = Policy::kScore;
  bool exclusive = true;
  std::chrono::seconds ttl{3600};
  std::string owner;
  std::map<std::string, std::string> labels;
  // Engine rules on top of min_free_memory: vLLM wants `min_free_fraction` of each GPU's total
  // memory free; SGLang wants the chosen GPUs' free memory within `max_free_spread` (0.10) of
  // each other. 0 turns a rule off.
  double min_free_fraction = 0;
  double max_free_spread = 0;
  // GPUs whose profile_state is one of these are not offered (counted in the refusal as
  // "avoided: state <name>"). The caller checks the names.
  std::vector<std::string> avoid_states;
  // Among the GPUs that fit, those whose profile_state is "idle" are chosen first; the policy
  // orders the rest (and the idle ones among themselves).
  bool prefer_idle = true;
  // The lease's id; empty: the ledger numbers it. Replicas sharing a store pass random ids.
  std::string id;
};

// A share of one GPU for a remote client (POST /api/v1/remote-leases). Exactly one of sm_count
// (SMs) and sm_percent (of the GPU's SMs, 0-100] is set; the granted count is rounded up to the
// GPU's sm_granularity.
struct RemoteRequest {
  uint32_t sm_count = 0;
  double sm_percent = 0;
  uint64_t memory_bytes = 0;
  std::string gpu_model;  // substring of the GPU name; empty: any
  std::string node;       // empty: any node
  std::chrono::seconds ttl{60};
  std::string owner;
  std::map<std::string, std::string> labels;
  std::vector<std::string> avoid_states;  // as AllocationRequest's
  bool prefer_idle = true;  // an idle GPU before the binpack order
  std::string id;  // empty: the ledger numbers it ("rlease-N")
  // Placement limits for moving a lease: only this GPU (its index on `node`), never these nodes.
  std::optional<uint32_t> gpu_index;
  std::vector<std::string> exclude_nodes;
};

// The SMs a remote request gets on a GPU of `total` SMs granted in steps of `granularity`.
uint32_t GrantedSms(const RemoteRequest& request, uint32_t total, uint32_t granularity);

struct LeasedGpu {
  std::string node;
  uint32_t index = 0;
  std::string uuid;
  std::string name;
  double score = 0;
  uint64_t reserved_bytes = 0;  // counted against the GPU's free memory while leased
  uint32_t sm_count = 0;        // a remote lease's granted SMs
};

struct Lease {
  std::string id;
  std::string owner;
  std::vector<LeasedGpu> gpus;
  bool exclusive = true;
  bool remote = false;  // a remote lease (never exclusive): one GPU, sm_count SMs
  std::map<std::string, std::string> labels;
  std::chrono::system_clock::time_point granted_at;
  std::chrono::system_clock::time_point expires_at;
  std::chrono::seconds ttl{0};
  // Its expiry was pushed out once for an outage its holder could not renew through (a cluster
  // manager restart, a store outage), and the holder has not renewed since: it is not pushed out
  // again, so a manager that restarts over and over still ends an abandoned lease. Renew clears it.
  bool grace_extended = false;
  // How it was placed (kept with the lease: shown, and stored so a replica reads the same).
  std::vector<std::string> avoid_states;
  bool prefer_idle = true;
};

struct LedgerOptions {
  std::chrono::seconds unreachable_after{15};
  std::chrono::seconds lease_grace{60};  // after unreachable, before its leases are released
  double memory_weight = 0.6;            // availability score weights
  double utilization_weight = 0.4;
};

class Ledger {
 public:
  explicit Ledger(const Clock& clock, LedgerOptions options = {});

  // A heartbeat: the node's GPUs as it reads them now. `heard_at` (default: now) lets a manager
  // that restarts restore when each node was last heard from.
  void UpdateNode(const std::string& node, std::vector<GpuState> gpus,
                  std::optional<std::chrono::steady_clock::time_point> heard_at = {});
  void RemoveNode(const std::string& node);
  // Puts back a lease as it was granted (after a restart, or another replica's grant).
  void Restore(const Lease& lease);
  // The availability score of one GPU given what leases hold on it (0 when unreadable).
  double Score(const GpuState& gpu, uint64_t leased_bytes) const;

  // Grants a lease or fails with kResourceExhausted and the reasons per node.
  Result<Lease> Allocate(const AllocationRequest& request);
  // Grants a remote lease (see the top of this file) or fails with kResourceExhausted and the
  // reasons per node ("node-b: 2 without room for 64 SMs, 1 not shared and in use").
  Result<Lease> AllocateRemote(const RemoteRequest& request);
  // Why no GPU the ledger knows could ever hold the request, whatever is leased ("" when one
  // could, or no node has reported).
  std::string RemoteNeverFits(const RemoteRequest& request) const;
  // Moving a remote lease: `id` takes over the GPU share of `target` (a remote lease placed
  // for the move with AllocateRemote), which ends; `id` keeps its owner, labels and expiry.
  // One step under the ledger's lock, so no one sees the lease on both GPUs or on neither.
  Result<Lease> MoveRemote(const std::string& id, const std::string& target);
  // A new share for a remote lease on the GPU it holds: `share`'s sm_count or sm_percent
  // (granted in the GPU's steps; all of them on a GPU that is not shared) and memory_bytes; its
  // other fields are not read. ResourceExhausted when the GPU has no room beside the other
  // leases on it (the lease's own share counts as free).
  Result<Lease> ResizeRemote(const std::string& id, const RemoteRequest& share);
  Result<Lease> Renew(const std::string& id, std::optional<std::chrono::seconds> ttl = {});
  Status Release(const std::string& id);
  // Removes leases past their expiry, and leases on nodes unreachable for longer than the grace.
  // Returns what it removed (each is an event for the caller). `silence_from`: a node's silence
  // is counted from the later of its last heartbeat and this moment (the last time the caller
  // could not have received a heartbeat), never from before it.
  std::vector<Lease> Expire(
      std::optional<std::chrono::steady_clock::time_point> silence_from = std::nullopt);

  std::vector<Lease> Leases() const;
  std::optional<Lease> Find(const std::string& id) const;
  bool Reachable(const std::string& node) const;
  // When the node was last heard from, as the ledger counts it.
  std::optional<std::chrono::steady_clock::time_point> HeardAt(const std::string& node) const;

 private:
  struct Node {
    std::vector<GpuState> gpus;
    std::chrono::steady_clock::time_point last_heartbeat;
  };
  bool ReachableLocked(const Node& n) const;

  const Clock& clock_;
  const LedgerOptions options_;
  mutable Mutex mu_;
  std::map<std::string, Node> nodes_ FLYT_GUARDED_BY(mu_);
  std::map<std::string, Lease> leases_ FLYT_GUARDED_BY(mu_);
  uint64_t next_id_ FLYT_GUARDED_BY(mu_) = 1;
};

}  // namespace flyt::sched
