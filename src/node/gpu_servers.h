// GpuServers: the node manager's supervisor of flyt-gpu-server processes, one per remote lease
// of the cluster (docs/design.md "Remote GPUs"; the API is docs/api.md "GPU servers").
//
// Put starts a server for a lease on one of this node's GPUs — `binary --backend B --device N
// --listen HOST:PORT --memory-limit-mb M --sm-count S --secret-file F --ready-file R` with a free
// port of [gpu-servers] port_min..port_max — and waits (at most start_timeout_s) for its ready
// file. The servers are this process's children but outlive it (own session, no PDEATHSIG): each
// has a record `state_dir/<lease>.json` (0600: pid, /proc start time, port, secret) written as it
// starts, so that a restarted node manager re-adopts the live ones (same pid and start time)
// instead of starting them twice, and reports the ones that died meanwhile as failed. A watcher
// thread follows every server through a pidfd: a server that exits on its own becomes `failed`
// with the reason (exit code or signal, its last line of output); Drain sends SIGTERM, then
// SIGKILL to its process group after drain_grace_s. Reconcile applies the cluster manager's
// desired set (heartbeat reply): starts the missing ones without waiting, drains the others, and
// leaves a running one alone even when its desired share differs (never a restart).
//
// Migrate moves the connected clients of a lease's running server, one after the other, to
// another server (the cluster manager's target, usually another lease's server on another node)
// while they run: it lists them (FetchStats) and asks the server for each (RequestMigration), over
// the server's Unix socket `state_dir/<lease>.sock` with the lease's secret, without holding the
// lock while it waits. A client moves at its next call; one that makes none within the timeout
// stays ("pending"). Resize gives a running server a new SM share / memory limit the same way
// (RequestResize) and records it as the lease's spec.
//
// Stopping: the destructor leaves the servers running (a restart or upgrade: the next start
// re-adopts them); StopAll drains every one first (the node manager's clean stop). At Create, a
// server process whose command line names a secret and ready file of this state_dir but that no
// record adopts (its record missing or unreadable, the state_dir emptied) is an orphan nothing
// would ever stop: it is stopped (SIGTERM, SIGKILL after drain_grace_s), with a log line and a
// gpu_server_stopped event.
//
// The GPUs' capacity (SM count, granularity, memory) comes from `binary probe` run once per GPU
// at Create; MPS is checked for the GPUs in `shared`. A GPU not shared (or without MPS running)
// takes one server at a time. A housekeeping thread asks the MPS control daemon every
// mps_check_interval_s whether it still answers (mps_watch.h): while it does not, the shared
// GPUs are mps "down" (not shared: no new lease beside the running ones) with the reason and the
// leases whose servers run there, and a gpu_mps_down / gpu_mps_up event marks each change. The
// same thread rotates each live server's log past log_max_bytes (log_rotation.h), every second.
//
// The secret of a lease is in its state file and secret file only: never in a record, an event,
// the metrics or a log line. Thread-safe: every public method may be called from any thread
// (HTTP handlers, the heartbeat thread); Put blocks its caller while its server starts.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "node/config.h"
#include "node/mps_watch.h"

namespace flyt::node {

// A GPU of this node as the monitor sees it; `index` is the NVML index, which is also the CUDA
// ordinal the servers get (they run with CUDA_DEVICE_ORDER=PCI_BUS_ID).
struct GpuDevice {
  uint32_t index = 0;
  std::string uuid;
};

// What a lease asks for: the PUT body and an entry of the heartbeat reply's desired list.
struct GpuServerSpec {
  std::string lease_id;
  std::string gpu_uuid;
  uint64_t memory_mb = 0;
  uint32_t sm_count = 0;
  std::string secret;
  std::string owner;
  nlohmann::json expires_at;  // as the cluster gave it (RFC 3339 text or a number); null if none

  // Same server: everything but expires_at (a renewal moves it).
  bool SameServer(const GpuServerSpec& other) const;
};

// The body of POST /api/v1/gpu-servers/{lease}/migrate.
struct MigrateRequest {
  std::string to;                             // HOST:PORT of the target server
  std::optional<std::string> to_secret;       // absent: the lease's own secret
  std::chrono::milliseconds timeout{30'000};  // for each client
};
// {"to" (required), "to_secret", "timeout_s" (1-600)}; only those. Errors are InvalidArgument
// naming the field (never the secret's value).
Result<MigrateRequest> MigrateRequestFromJson(const nlohmann::json& body);

// The body of POST /api/v1/gpu-servers/{lease}/resize: a new share for a running server.
struct ResizeRequest {
  std::optional<uint32_t> sm_count;           // absent: unchanged
  std::optional<uint64_t> memory_mb;          // absent: unchanged
  std::chrono::milliseconds timeout{30'000};  // for the connected clients to apply it
};
// {"sm_count" (>= 1), "memory_mb" (>= 1), "timeout_s" (1-600)}, at least one of the first two;
// only those. Errors are InvalidArgument naming the field.
Result<ResizeRequest> ResizeRequestFromJson(const nlohmann::json& body);

// Parses and checks a spec: only the known fields, lease_id [A-Za-z0-9_.-]{1,128} (not starting
// with '.'), secret 32-128 printable ASCII without blanks, memory_mb >= 1, sm_count >= 1.
// Errors are InvalidArgument naming the field.
Result<GpuServerSpec> GpuServerSpecFromJson(const nlohmann::json& body);

class GpuServers {
 public:
  // Opens (creates 0700) state_dir, probes every GPU, checks MPS for the shared ones, re-adopts
  // the servers recorded in state_dir, stops the orphans (see the top; Create waits for them) and
  // starts the watcher. Fails when state_dir cannot be used
  // (not a directory, group/world-writable, not writable) or the binary is not found.
  // `self_exe`: the node manager's executable, to find the binary next to it (may be empty).
  static Result<std::unique_ptr<GpuServers>> Create(GpuServersConfig config,
                                                    std::vector<GpuDevice> gpus,
                                                    const std::string& self_exe = "");
  // Stops the watcher. The servers keep running: a restarted node manager re-adopts them.
  ~GpuServers();

  // The node manager's clean stop: from now on nothing starts (Put is Unavailable, Reconcile does
  // nothing); every starting, running or draining server is drained (SIGTERM, SIGKILL after
  // drain_grace_s) and waited for, at most drain_grace_s plus `kill_wait`. Returns how many
  // servers were still up when it gave up waiting (0: every one has exited; its state files are
  // gone). Call it before the destructor; calling it twice is harmless.
  int StopAll(std::chrono::milliseconds kill_wait = std::chrono::seconds(5)) FLYT_EXCLUDES(mu_);
  GpuServers(const GpuServers&) = delete;
  GpuServers& operator=(const GpuServers&) = delete;

  struct PutResult {
    bool created = false;  // false: the lease's server was already running (idempotent PUT)
    nlohmann::json record;
  };
  // Starts the lease's server and waits until it is ready or failed. Errors (with the HTTP
  // status they map to): InvalidArgument 400 (unknown GPU, share larger than the GPU);
  // FailedPrecondition 409 reason "conflict" (the lease runs with a different spec or is
  // draining; the GPU is not shared and in use; the GPU has no room); Unavailable 503 (no free
  // port, the GPU could not be probed, the server did not come up: its reason and stderr tail;
  // the node manager is stopping: StopAll was called).
  Result<PutResult> Put(const GpuServerSpec& spec) FLYT_EXCLUDES(mu_);
  // SIGTERM now, SIGKILL after drain_grace_s. NotFound for a lease without a live server (an
  // ended one: Ok, nothing to do).
  Status Drain(const std::string& lease_id) FLYT_EXCLUDES(mu_);
  // The desired set from the cluster manager: starts (without waiting) every lease in `desired`
  // that has no record, drains every live server whose lease is neither in `desired` nor in
  // `keep` (ids of entries the caller could not parse: left alone) and that was started before
  // `decided_before` (the set may predate a PUT that overtook it). A failed or stopped lease is
  // never restarted here. A lease that has a record is left as it is whatever its entry says: one
  // whose desired sm_count/memory_mb differ from its running server's (a resize this node missed)
  // is neither restarted nor drained, every time; its record keeps the share the server runs
  // with, so the heartbeat shows the cluster manager the difference (a PUT with the other share
  // is a 409 conflict).
  void Reconcile(const std::vector<GpuServerSpec>& desired, const std::vector<std::string>& keep,
                 std::chrono::system_clock::time_point decided_before =
                     std::chrono::system_clock::time_point::max()) FLYT_EXCLUDES(mu_);

  // Moves every connected client of the lease's server to `request.to` (see the top): {lease_id,
  // to, clients: [MigrationToJson per client, or {client_id, outcome: "failed", message} when the
  // server refused to try], moved, pending, failed}; no connected client is a success with zeros.
  // Records a gpu_server_migrated event with the counts. Errors: NotFound (no record of the
  // lease), FailedPrecondition reason "conflict" (its server is not running: starting, draining,
  // stopped, failed), Unavailable (the server cannot be reached over its Unix socket), NotSupported
  // (the server cannot move clients). Blocks up to the timeout for each client, without mu_.
  Result<nlohmann::json> Migrate(const std::string& lease_id, const MigrateRequest& request)
      FLYT_EXCLUDES(mu_);

  // Gives the lease's running server a new SM share and/or memory limit (RequestResize over its
  // Unix socket), after checking that the new share fits its GPU beside the other servers there
  // (CheckRoom's rules; the share is held for it while the server is asked). On success the
  // record's sm_count, memory_mb and sm_count_granted and its state file take the new values (so
  // GET, the heartbeat and a later desired spec with them agree), and a gpu_server_resized event
  // is recorded. On a GPU that is not shared the server already has all SMs: a new sm_count is
  // only recorded. Returns ResizeToJson's fields plus "record". Errors: NotFound; InvalidArgument
  // (a share larger than the GPU); FailedPrecondition "conflict" (not running, another resize
  // under way, no room on the GPU, or the server refused: a memory limit below what its clients
  // hold; nothing changes then); Unavailable; NotSupported (a server without resize).
  Result<nlohmann::json> Resize(const std::string& lease_id, const ResizeRequest& request)
      FLYT_EXCLUDES(mu_);

  Result<nlohmann::json> Get(const std::string& lease_id) const FLYT_EXCLUDES(mu_);
  // Get, plus "clients": how many clients are connected to the running server now (asked over
  // its Unix socket, without mu_; the operator tools' own connections not counted), null with
  // "clients_error" when the server cannot be asked; absent for a server that does not run.
  // The cluster manager reads it to tell where a moving lease's clients are.
  Result<nlohmann::json> GetWithClients(const std::string& lease_id) const FLYT_EXCLUDES(mu_);
  // {"servers": [record...], "gpus": [capacity...]}
  nlohmann::json List() const FLYT_EXCLUDES(mu_);
  // {"enabled": true, "servers", "gpus"}: the heartbeat's "gpu_servers".
  nlohmann::json HeartbeatJson() const FLYT_EXCLUDES(mu_);
  // The node's events about servers (started, failed, stopped, adopted, migrated, resized), oldest
  // first,
  // in the shape of the node's GPU events ({at, gpu, uuid, type, xid: null, description}) plus
  // lease_id.
  nlohmann::json Events() const FLYT_EXCLUDES(mu_);
  // Prometheus text: flyt_node_gpu_servers{state}, counters, flyt_node_gpu_mps{gpu,uuid,state}.
  std::string MetricsText() const FLYT_EXCLUDES(mu_);

  // What the housekeeping thread does, now (tests; the thread does them on its own): ask the MPS
  // control daemon and apply the answer to the shared GPUs; rotate the live servers' logs.
  void CheckMpsNow() FLYT_EXCLUDES(mu_, mps_mu_);
  void RotateLogsNow() FLYT_EXCLUDES(mu_);

  const GpuServersConfig& config() const { return config_; }
  const std::string& binary() const { return binary_; }

 private:
  enum class State { kStarting, kRunning, kDraining, kStopped, kFailed };
  struct Capacity {
    GpuDevice device;
    bool probed = false;
    std::string probe_error;
    uint32_t sm_count = 0;
    uint32_t sm_granularity = 0;
    uint64_t memory_total_mb = 0;
    std::string name;
    bool shared_configured = false;
    // running | not_running | down | unavailable | off | simulated (sim backend). With mps_reason,
    // the one part that changes after Create: under mu_ (the MPS watch, ApplyMps).
    std::string mps = "off";
    std::string mps_reason;
    bool shared() const { return shared_configured && (mps == "running" || mps == "simulated"); }
  };
  struct Server {
    GpuServerSpec spec;
    uint32_t gpu_index = 0;
    State state = State::kStarting;
    int port = 0;
    std::string address;
    pid_t pid = 0;
    uint64_t start_ticks = 0;  // /proc/PID/stat field 22
    UniqueFd pidfd;
    std::optional<uint32_t> sm_count_granted;
    std::chrono::system_clock::time_point started_at;
    std::optional<std::chrono::system_clock::time_point> ended_at;
    std::chrono::steady_clock::time_point ready_deadline;
    std::chrono::steady_clock::time_point kill_at;
    std::chrono::steady_clock::time_point ended_steady;
    bool killed = false;  // SIGKILL sent after the drain grace
    std::string reason;
    // While Resize asks the server: the share it asks for, counted by CheckRoom (the larger of
    // this and spec) so that no other server takes it meanwhile.
    std::optional<GpuServerSpec> resizing;
  };

  GpuServers(GpuServersConfig config, std::string binary);
  void Probe(std::vector<GpuDevice> gpus);
  void CheckMps(Capacity& cap);
  void Adopt() FLYT_EXCLUDES(mu_);
  // After Adopt: stops the orphans (see the top) and waits for them, at most drain_grace_s plus
  // a second after SIGKILL.
  void StopOrphans() FLYT_EXCLUDES(mu_);
  // A state file into `s`: the recorded state ("starting", "running", "draining").
  Result<std::string> ReadState(const std::string& id, Server& s) const;
  void Watch() FLYT_EXCLUDES(mu_);
  void Tick() FLYT_REQUIRES(mu_);
  // The housekeeping thread (MPS watch, log rotation); gpu_server_process.cc.
  void Housekeep() FLYT_EXCLUDES(mu_, mps_mu_);
  void ApplyMps(const MpsStatus& status) FLYT_REQUIRES(mu_);

  // Spawns the lease's server and records it as starting; does not wait.
  Status Begin(const GpuServerSpec& spec) FLYT_REQUIRES(mu_);
  // Whether `spec` fits `cap` beside the live servers of other leases.
  Status CheckRoom(const GpuServerSpec& spec, const Capacity& cap) const FLYT_REQUIRES(mu_);
  // A server of this GPU is draining.
  bool DrainingOn(const std::string& gpu_uuid) const FLYT_REQUIRES(mu_);
  Result<int> FreePort() const FLYT_REQUIRES(mu_);
  Status DrainLocked(Server& s) FLYT_REQUIRES(mu_);
  // The server has exited (`reaped`: how, from waitid, when it was our child): ends its record.
  void Ended(Server& s, const std::optional<std::string>& reaped) FLYT_REQUIRES(mu_);
  void CheckReady(Server& s) FLYT_REQUIRES(mu_);
  Status WriteState(const Server& s) const FLYT_REQUIRES(mu_);
  void RemoveFiles(const std::string& lease_id) const;
  std::string Path(const std::string& lease_id, const char* suffix) const;
  std::string LogTail(const std::string& lease_id, size_t max_bytes) const;
  void AddEvent(const Server& s, const std::string& type, const std::string& description)
      FLYT_REQUIRES(mu_);
  void AddEvent(uint32_t gpu_index, const std::string& gpu_uuid, const std::string& lease_id,
                const std::string& type, const std::string& description) FLYT_REQUIRES(mu_);
  // What a call to a lease's running server needs, copied out under mu_ for use without it.
  struct Target {
    std::string lease_id;
    std::string gpu_uuid;
    uint32_t gpu_index = 0;
    pid_t pid = 0;
    std::string socket;  // "unix:<state_dir>/<lease>.sock"
    std::string secret;
  };
  // NotFound, or FailedPrecondition "conflict" for a server that is not running.
  Result<Target> RunningTarget(const std::string& lease_id) const FLYT_REQUIRES(mu_);
  nlohmann::json RecordJson(const Server& s) const FLYT_REQUIRES(mu_);
  nlohmann::json GpusJson() const FLYT_REQUIRES(mu_);
  const Capacity* FindGpu(const std::string& uuid) const;
  static const char* StateName(State state);

  const GpuServersConfig config_;
  const std::string binary_;
  std::vector<Capacity> gpus_;  // set before the watcher starts; read-only afterwards

  mutable Mutex mu_;
  CondVar changed_;  // a server left kStarting, or stopping_
  std::map<std::string, Server> servers_ FLYT_GUARDED_BY(mu_);
  std::vector<nlohmann::json> events_ FLYT_GUARDED_BY(mu_);
  bool stopping_ FLYT_GUARDED_BY(mu_) = false;
  bool closing_ FLYT_GUARDED_BY(mu_) = false;  // StopAll: nothing starts any more
  uint64_t starts_ FLYT_GUARDED_BY(mu_) = 0;
  uint64_t start_failures_ FLYT_GUARDED_BY(mu_) = 0;
  uint64_t failures_ FLYT_GUARDED_BY(mu_) = 0;
  uint64_t kills_ FLYT_GUARDED_BY(mu_) = 0;
  uint64_t adopted_ FLYT_GUARDED_BY(mu_) = 0;
  std::thread watcher_;
  // The MPS watch (null: no shared GPU has MPS to watch); mps_mu_ is taken before mu_.
  Mutex mps_mu_;
  std::unique_ptr<MpsWatch> mps_watch_ FLYT_GUARDED_BY(mps_mu_);
  std::thread housekeeper_;
};

}  // namespace flyt::node
