// Small helpers shared by the files that implement Cluster (replication.cc, commands.cc,
// inventory.cc, scheduler.cc, views.cc); not part of the cluster's interface. Pure functions and constants;
// thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <map>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cluster/cluster.h"
#include "common/json_fields.h"
#include "sched/ledger.h"

namespace flyt::cluster::internal {

// The timeout of a move or resize asked of a node, unless the request gives one (timeout_s).
inline constexpr int64_t kDefaultMoveTimeoutSeconds = 60;
inline constexpr int64_t kMaxMoveTimeoutSeconds = 600;

inline constexpr uint64_t kMiB = 1ULL << 20;

// The reason of a heartbeat refused because another node reported one of its GPUs first (409).
inline constexpr const char* kGpuClaimedReason = "gpu_claimed_by_other_node";
// A GPU lost before its UUID could be read stands under a name of its own on its node:
// "<prefix><index>". Such names repeat across nodes and are no physical GPU's identity.
inline constexpr const char* kLostUuidPrefix = "GPU-lost-at-index-";
inline bool IsPlaceholderUuid(const std::string& uuid) {
  return uuid.rfind(kLostUuidPrefix, 0) == 0;
}

// Which topics of the live stream a change touched, as bits.
constexpr uint32_t TopicBit(Topic topic) { return 1u << static_cast<unsigned>(topic); }
inline constexpr uint32_t kAllTopics = (1u << kTopicCount) - 1;

// A leased GPU as the store's claims know it: "<node>/<uuid>".
inline std::vector<std::string> GpuKeys(const sched::Lease& lease) {
  std::vector<std::string> keys;
  for (const auto& g : lease.gpus) keys.push_back(g.node + "/" + g.uuid);
  return keys;
}

inline double Seconds(std::chrono::system_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A request's placement on usage profiles (commands.cc): "avoid_states", state names of
// profile::StateName (an unknown one is a 400 naming "<field>[i]"; repeats are dropped), and
// "prefer_idle" (default `default_prefer_idle`, [ledger] prefer_idle).
Status PlacementFields(const JsonFields& f, bool default_prefer_idle,
                       std::vector<std::string>& avoid_states, bool& prefer_idle);

// The labels of a node, client or lease (commands.cc).
Status LabelsField(const JsonFields& f, std::string_view key,
                   std::map<std::string, std::string>& out);

// ---- shared by the lease commands (commands.cc defines them; remote.cc uses them too) ----
// What a caller may touch: admins everything, others only what they own (else 403).
Status CheckOwner(const Caller& caller, const std::string& owner, const std::string& what);
// The Idempotency-Key of a request: "" for none; else 1-255 printable ASCII characters.
Status CheckIdempotencyKey(const std::string& key);
// What tells two requests with one key apart: a hash of the body's canonical JSON.
std::string RequestHash(const nlohmann::json& body);
// An idempotent request: the key's scope (the caller's token name and the endpoint), the key
// and the body's hash. Empty key: not idempotent.
struct Idempotency {
  std::string scope;
  std::string key;
  std::string hash;
};
// Inside the request's transaction: a key seen before (and not expired) with the same body fills
// `replay` with the first answer; with another body it is a 409.
Status LookUpKey(store::Txn& txn, const Idempotency& idem, int64_t now_ms,
                 std::optional<nlohmann::json>& replay);

// remote.cc: a remote lease that is starting or ready; what its node is asked to run for it
// (the PUT body of /api/v1/gpu-servers/{key}, an entry of gpu_servers.desired).
bool Live(const RemoteLeaseInfo& info);
nlohmann::json GpuServerSpecOf(const sched::Lease& lease, const RemoteLeaseInfo& info);

// remote_moves.cc, remote_resize.cc: how long a resolve pass waits for a node's answer about one
// server, and whether an error is not the node's answer (no connection, a timeout, a reply cut
// short): a node answers each refusal with {"error", "code"}, which the HTTP client keeps as the
// reason.
inline constexpr auto kNodeAskTimeout = std::chrono::seconds(10);
inline bool AnswerLost(const Status& s) {
  return s.code() == StatusCode::kUnavailable && s.reason().empty();
}

}  // namespace flyt::cluster::internal
