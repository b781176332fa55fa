// The cluster manager's records — nodes, clients and jobs — and the JSON forms in which they are
// stored and served. Leases are sched::Lease; their JSON form is here too. Time is stored as Unix
// milliseconds and served as RFC 3339. Plain values and pure functions; thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "gpu/types.h"
#include "profile/profile.h"
#include "sched/ledger.h"

namespace flyt::cluster {

using WallTime = std::chrono::system_clock::time_point;

// One traced CUDA process × GPU as the node's heartbeat summarises it (trace/json.h SummaryToJson,
// CudaSummaryJson). Kept in memory only: never stored, not replicated.
struct CudaSummary {
  uint32_t pid = 0;
  std::string comm;
  std::string gpu_uuid;  // empty: no GPU of the node (e.g. flyt's remote runtime)
  bool remote = false;
  uint64_t launches = 0;
  double launches_per_second = 0;
  uint64_t device_memory_bytes = 0;
  uint64_t device_memory_peak_bytes = 0;
  uint64_t leaked_bytes = 0;
  double busy_seconds = 0;
  double core_usage = 0;
  bool exited = false;
};

// One GPU as the node's GPU servers know it (heartbeat gpu_servers.gpus: `flyt-gpu-server
// probe` at the node manager's start, and its MPS check).
struct GpuServerCapacity {
  std::string uuid;
  uint32_t index = 0;
  std::optional<uint32_t> sm_count;
  std::optional<uint32_t> sm_granularity;
  std::optional<uint64_t> memory_total_mb;
  bool shared = false;  // MPS usable: several remote leases at once
  std::string mps;      // running | not_running | down | unavailable | off | simulated
  std::string mps_reason;
};

// What a node's heartbeat says of its GPU servers ("gpu_servers"; absent: enabled = false).
// `servers` are the node's server records, rebuilt from their known fields (never a secret).
struct GpuServersReport {
  bool enabled = false;
  std::vector<nlohmann::json> servers;
  std::vector<GpuServerCapacity> gpus;
};

struct NodeRecord {
  std::string name;
  // The node manager's own API, where the manager calls it (monitoring sessions, GPU history):
  // the trusted address (node_address.h), not necessarily the advertised one; may be empty.
  std::string api_url;
  std::string advertised_api_url;  // what the node's heartbeat said
  std::string api_url_source;      // NodeApiAddress::source: why api_url is what it is
  std::string api_url_note;        // ... in words
  std::map<std::string, std::string> labels;
  std::string version;
  gpu::GpuSnapshot snapshot;
  WallTime registered_at;
  WallTime last_heartbeat;
  uint64_t heartbeats = 0;
  bool reachable = true;  // as last announced by an event
  std::string registered_by;  // the token name that registered it; only it (or an admin) may update
  // The latest heartbeat's traced CUDA processes (in memory only; ToJson leaves them out).
  std::vector<CudaSummary> cuda;
  // The latest heartbeat's usage profiles, one per GPU it profiles (matched to the snapshot's
  // GPUs by UUID). In memory only, like `cuda`: not stored, not replicated; a restart or another
  // replica's write of this node shows none until the node's next heartbeat here.
  std::vector<profile::GpuProfile> profiles;
  // The node's GPU servers as its latest heartbeat reported them (stored: the capacity places
  // remote leases after a restart before the node's next heartbeat).
  GpuServersReport gpu_servers;
  // Cordoned (`flytctl nodes drain`): no new lease is placed here until it is uncordoned. Kept
  // across heartbeats and restarts.
  bool cordoned = false;
  std::string cordon_reason;
};

// A move of a remote lease in flight (remote_moves.cc), written ahead into the lease's row
// before the source node is asked to move the clients, so that a manager that restarts (or
// another replica) knows that the lease has a second server and a second share: both stay
// desired, and nothing else may change the lease, until the move is resolved (committed or
// aborted).
struct RemoteMove {
  std::string target;       // the ledger id of the share reserved on the target ("rmove-...")
  uint32_t generation = 0;  // the target server's: ServerKey(lease id, generation)
  sched::LeasedGpu gpu;     // the target share: node, GPU, SMs and memory
  WallTime started_at;
  std::string by;  // who asked (a token name, or "drain")
  // Set once the target server runs (before the source node is asked): its address and pid,
  // and until when the source node may still be moving clients (the migrate call's limit).
  std::string address;
  std::optional<int64_t> pid;
  std::optional<WallTime> clients_until;
};

// A resize of a remote lease in flight (remote_resize.cc), written ahead into the lease's row
// before its node is asked to apply it, so that a manager that restarts (or another replica)
// knows that the lease's server may run either share: the ledger holds the larger of the two
// (the row's GPU share), nothing else may change the lease, and the resize is settled to the
// share the node reports its server runs with (ResolveMoves).
struct RemoteResize {
  uint32_t sm_count_before = 0;  // the share the lease had
  uint64_t memory_bytes_before = 0;
  uint32_t sm_count = 0;  // the share asked of the node (the SMs the ledger granted)
  uint64_t memory_bytes = 0;
  // The lease's sm_count_asked and sm_percent once the new share is kept.
  uint32_t sm_count_asked = 0;
  std::optional<double> sm_percent;
  WallTime started_at;
  std::string by;  // who asked (a token name)
  // Until when the node may still be applying it (the limit of the manager's call): a server
  // still on the old share before then may yet take the new one.
  WallTime node_until;
};

// What the cluster keeps of a remote lease beside the ledger's sched::Lease (which holds its
// GPU, SMs and memory): stored in the same lease row, under "remote".
struct RemoteLeaseInfo {
  std::string client;  // the client node's name
  uint32_t sm_count_asked = 0;  // 0: asked as sm_percent
  std::optional<double> sm_percent;
  std::string state = "starting";  // starting | ready | failed
  std::string reason;              // why failed
  std::string secret;              // the GPU server's; only for its owner (or an admin)
  std::string server_address;      // "HOST:PORT" once ready
  std::string server_state;        // as the node last said (running, failed, ...)
  std::optional<int64_t> server_pid;
  // How many times the lease moved to another GPU server (migration). The node knows the
  // lease's server by ServerKey: the lease id, then "<id>.m<N>" after the N-th move, so that
  // the old and the new server (even on one node) are two records there.
  uint32_t generation = 0;
  // The move in flight, if any (stored as "moving"; the API shows it as "moving_to").
  std::optional<RemoteMove> moving;
  // The resize in flight, if any (stored as "resizing"; the API shows it as "resizing_to").
  std::optional<RemoteResize> resizing;
};

// The share a moving lease holds on its move's target, as the ledger keeps it (a remote lease
// of its own, never a row): the lease's owner, labels and expiry on the target's GPU.
sched::Lease ReservationOf(const sched::Lease& lease, const RemoteMove& move);

// The name the lease's current server has on its node (RemoteLeaseInfo::generation).
std::string ServerKey(const std::string& lease_id, uint32_t generation);
// The lease id and generation of a server key; nullopt for a key ServerKey cannot make.
std::optional<std::pair<std::string, uint32_t>> ParseServerKey(const std::string& key);

struct ClientRecord {
  std::string name;
  std::string address;
  std::map<std::string, std::string> labels;
  WallTime registered_at;
  WallTime last_seen;
};

enum class JobState { kQueued, kRunning, kCompleted, kFailed, kCancelled };
const char* JobStateName(JobState state);
std::optional<JobState> ParseJobState(std::string_view name);
inline bool Finished(JobState s) { return s != JobState::kQueued && s != JobState::kRunning; }

// What the experiments of one submission share, stored once (the tasks table, keyed by the
// submission's id): the parameters with a single value. Each Job holds only its own values.
struct TaskRecord {
  std::string id;  // the submission's id
  std::string task_name;
  std::string owner;
  size_t experiments = 1;
  nlohmann::json shared_parameters = nlohmann::json::object();
  WallTime submitted_at;
  size_t shared_bytes = 0;  // of shared_parameters as JSON; not stored (computed on load)
};

struct Job {
  std::string id;
  std::string submission;  // one POST /api/v1/jobs: every experiment of one task
  // The TaskRecord holding the shared parameters (the submission's id); empty for a job stored
  // before schema v3, whose parameters are complete.
  std::string task_name;
  std::string model;
  std::string runtime;
  size_t experiment = 0;
  size_t experiments = 1;
  std::string task_id;
  nlohmann::json parameters;  // this experiment's own values (all of them when task_id is empty)
  nlohmann::json estimate;    // sched::ToJson of the experiment: GPUs, memory breakdown, rule
  std::string owner;
  int priority = 0;
  int64_t order = 0;
  sched::AllocationRequest request;
  std::chrono::seconds timeout{300};
  JobState state = JobState::kQueued;
  std::string message;  // why it waits, why it failed, how it ended
  WallTime submitted_at;
  std::optional<WallTime> started_at;
  std::optional<WallTime> finished_at;
  std::string lease_id;
  nlohmann::json gpu_info;  // the autotuner's structure, once placed
  std::string monitoring_session;  // on the lease's node, while running
  nlohmann::json metrics = nlohmann::json::object();  // gpu_monitoring once finished
};

int64_t ToMillis(WallTime t);
WallTime FromMillis(int64_t ms);

nlohmann::json ToJson(const NodeRecord& node);  // stored form (full snapshot)
Result<NodeRecord> NodeFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const ClientRecord& client);
Result<ClientRecord> ClientFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const sched::Lease& lease);
Result<sched::Lease> LeaseFromJson(const nlohmann::json& j);
// The stored form of a remote lease: ToJson(lease) with "remote" (secret included).
nlohmann::json ToJson(const sched::Lease& lease, const RemoteLeaseInfo& remote);
// The "remote" part of a stored lease row; nullopt for a lease that is not remote.
Result<std::optional<RemoteLeaseInfo>> RemoteInfoFromJson(const nlohmann::json& j);
// A remote lease as the API shows it (docs/api.md "Remote leases"); the secret only when
// `with_secret`.
nlohmann::json RemoteLeaseView(const sched::Lease& lease, const RemoteLeaseInfo& remote,
                               WallTime now, bool with_secret);
// The node's heartbeat field "gpu_servers", checked (errors name the field).
Result<GpuServersReport> GpuServersFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const GpuServersReport& report);
nlohmann::json ToJson(const TaskRecord& task);
Result<TaskRecord> TaskFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const Job& job);
Result<Job> JobFromJson(const nlohmann::json& j);

nlohmann::json ToJson(const sched::AllocationRequest& request);
const char* PolicyName(sched::Policy policy);
std::optional<sched::Policy> ParsePolicy(std::string_view name);

// The profile of the node's GPU `uuid` from its last heartbeat, or nullptr.
const profile::GpuProfile* ProfileOf(const NodeRecord& node, const std::string& uuid);

// The ledger's view of a GPU, and of a node's GPUs (with what its GPU servers report and the
// state of each GPU's usage profile).
sched::GpuState LedgerGpu(const gpu::GpuInfo& gpu);
std::vector<sched::GpuState> LedgerGpus(const gpu::GpuSnapshot& snapshot);
std::vector<sched::GpuState> LedgerGpus(const NodeRecord& node);

}  // namespace flyt::cluster
