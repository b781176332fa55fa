// Cluster: the state of flyt-cluster-manager — node inventory, the reservation ledger, the job
// queue — kept in memory and written through to the Store before any caller hears an answer.
//
// Every change runs inside one store transaction that holds the cluster-wide write lock. The
// transaction first catches up on what other manager replicas wrote since this one last looked
// (the store's change feed), then changes the in-memory state, then writes the rows it changed;
// so two managers on one database decide one after the other on the same state and cannot grant
// one GPU twice (the database's unique index on exclusive claims backs this up). If a write
// fails, the in-memory state is reloaded from the store: memory never runs ahead of the disk. The
// reload is built aside and swapped in only when complete, so a store that cannot be read leaves
// the last good state in place.
//
// A store that cannot be written (store::IsStoreUnavailable: a full or read-only disk, a lost
// database) is an outage, not a refusal: changes are refused with 503 store_unavailable before
// they touch memory, reads answer from the last good state, nothing expires, and the scheduler
// probes the store about once a second. When it is back the state is reloaded, each node's
// silence and each lease's TTL are counted without the outage (heartbeats and renewals were
// refused meanwhile), and work resumes.
//
// Overload is not silence. The HTTP server reports each moment it could not receive in time
// (NoteIngestImpaired: it refused a connection over its per-peer or total cap, a complete request
// waited more than 1 s for a worker, or its connection loop ran seconds late). The rule: a lease
// is released for its node's silence only when now - max(the node's last heartbeat, the last
// impaired moment) > unreachable_after + lease_grace — the grace is counted only over time in
// which the manager was able to receive heartbeats, and restarts at every impaired moment. (Its
// GPUs still stop being offered after unreachable_after without a heartbeat; TTLs run as ever.) Finished jobs are kept to [jobs] keep_finished_for and
// keep_finished_max; an owner may have at most [jobs] max_queued_per_owner experiments queued.
//
// A scheduler thread runs the queue and expiry. It sleeps until something may have changed
// (a release, an expiry deadline, a submission, a heartbeat while jobs wait) or the next deadline,
// never on a polling timer; replicas sharing a database also catch up every sync_interval. A
// NodeWorker (node_worker.h) opens and closes monitoring sessions on node managers, so no lock is
// held across a network call.
//
// The implementation is split by concern: replication.cc (write-through, catch-up, reload, the
// live stream's marks), inventory.cc (node and client heartbeats, node removal), commands.cc
// (leases and jobs: the rest of what changes state on a caller's request), remote.cc (remote
// leases, and the reconciliation of the nodes' GPU servers), scheduler.cc (the scheduler thread, expiry, starting jobs), views.cc (the
// read-side JSON and /metrics), node_worker.cc (the node calls) and cluster.cc (lifecycle, ids).
//
// Thread-safety: every public method may be called from any thread. One mutex (mu_) guards the
// state; clang's -Wthread-safety checks that every member annotated FLYT_GUARDED_BY(mu_) is touched
// only with it held, and that every ...Locked function (FLYT_REQUIRES(mu_)) is called so.
#pragma once

#include <array>
#include <atomic>
#include <climits>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "cluster/config.h"
#include "cluster/node_worker.h"
#include "cluster/records.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "sched/ledger.h"
#include "sched/queue.h"
#include "store/store.h"

namespace flyt::cluster {

struct Caller {
  Caller() = default;
  Caller(std::string name_in, Role role_in, std::string address_in = "")
      : name(std::move(name_in)), role(role_in), address(std::move(address_in)) {}

  std::string name;
  Role role = Role::kViewer;
  // The request's source IP address (the connection's peer), "" when unknown. A node's API is
  // called there (node_address.h).
  std::string address;
};

// What the live stream (GET /api/v1/stream) tells a dashboard: which parts of the state changed
// since it last looked. Each topic's counter goes up when a committed change touched it.
enum class Topic { kNodes, kClients, kLeases, kJobs, kEvents };
inline constexpr size_t kTopicCount = 5;
const char* TopicName(Topic topic);  // "nodes", "clients", "allocations", "jobs", "events"

struct ChangeMark {
  uint64_t seq = 0;  // goes up with every change of any topic
  std::array<uint64_t, kTopicCount> topics{};
};

struct ClusterCounters {
  uint64_t heartbeats = 0;
  uint64_t allocations_granted = 0;
  uint64_t allocations_refused = 0;
  uint64_t schedule_passes = 0;
  uint64_t store_errors = 0;
  uint64_t reloads = 0;
  uint64_t store_outages = 0;        // times the store became unwritable
  uint64_t writes_refused = 0;       // changes refused (503) while it was
  uint64_t jobs_pruned = 0;          // finished jobs dropped by retention
  uint64_t events_dropped = 0;       // node events past [events] max_per_heartbeat
  uint64_t profiles_refused = 0;     // heartbeat usage profiles that did not parse (dropped)
  uint64_t events_truncated = 0;     // node events over [events] max_event_bytes, cut short
  uint64_t idempotent_replays = 0;   // requests answered again from their Idempotency-Key
  uint64_t submissions_too_large = 0;  // submissions over [jobs] max_expanded_bytes
  uint64_t gpu_conflicts = 0;        // heartbeats refused: a GPU another node reported first
  uint64_t nodes_removed = 0;        // DELETE /api/v1/nodes/{name}
  uint64_t remote_grants = 0;        // remote leases answered 201 (server up)
  uint64_t remote_refusals = 0;      // remote lease requests refused: no GPU with room
  uint64_t remote_start_failures = 0;  // granted, but the node did not start the server (503)
  uint64_t remote_migrations = 0;        // remote leases moved to another GPU server
  uint64_t remote_migration_failures = 0;  // moves that ended with the lease where it was
  uint64_t remote_resizes = 0;           // remote leases given a new share
  uint64_t remote_resize_failures = 0;   // resizes the lease's server did not take
  uint64_t gpu_state_changes = 0;      // gpu.state_changed events raised
  uint64_t gpu_state_changes_held = 0;  // profile state changes held back by the rate limit
  double last_pass_seconds = 0;
};

class Cluster : private NodeWorkerHost {
 public:
  Cluster(std::unique_ptr<store::Store> store, ClusterConfig config, const Clock& clock);
  ~Cluster() override;
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Loads everything from the store; then Start() runs the scheduler and worker threads.
  Status Load() FLYT_EXCLUDES(mu_);
  void Start() FLYT_EXCLUDES(mu_);
  void Stop() FLYT_EXCLUDES(mu_);

  // Node managers: registration is the first heartbeat. Returns what the node should know.
  Result<nlohmann::json> Heartbeat(const Caller& caller, const nlohmann::json& body)
      FLYT_EXCLUDES(mu_);
  Result<nlohmann::json> ClientHeartbeat(const Caller& caller, const nlohmann::json& body)
      FLYT_EXCLUDES(mu_);

  // Removes a node (admins only): its record, from memory and store, and its GPUs' UUIDs, which
  // another node may then report. Refused (409 conflict) while it holds live leases, unless
  // `force`: then they are released (reason node_removed) and their jobs fail. A later
  // heartbeat of the node registers it again.
  Result<nlohmann::json> RemoveNode(const Caller& caller, const std::string& name, bool force)
      FLYT_EXCLUDES(mu_);

  nlohmann::json Nodes() const FLYT_EXCLUDES(mu_);
  Result<nlohmann::json> Node(const std::string& name) const FLYT_EXCLUDES(mu_);
  nlohmann::json Gpus() const FLYT_EXCLUDES(mu_);
  // GET /api/v1/gpus's body, rebuilt at most once per change and once a second.
  std::shared_ptr<const std::string> GpusBody() FLYT_EXCLUDES(mu_, gpus_mu_);
  nlohmann::json Clients() const FLYT_EXCLUDES(mu_);

  // The reservation ledger. A refusal is kResourceExhausted with the reasons per node.
  //
  // Allocate and Submit take an optional idempotency key (the Idempotency-Key header: 1-255
  // printable ASCII characters, else 400). It is scoped to the caller's token name and the
  // endpoint and stored in the same transaction as the lease or jobs, for
  // [manager] idempotency_keep_for. The same key with the same body answers the first answer
  // again, marked "replayed": true (and, for a lease since released or expired,
  // "lease_ended": true) without granting anything; with a different body it is a 409
  // (reason idempotency_key_reused). A request that failed stored no key.
  Result<nlohmann::json> Allocate(const Caller& caller, const nlohmann::json& body,
                                  const std::string& idempotency_key = "") FLYT_EXCLUDES(mu_);
  Result<nlohmann::json> Renew(const Caller& caller, const std::string& id,
                               const nlohmann::json& body) FLYT_EXCLUDES(mu_);
  Status Release(const Caller& caller, const std::string& id) FLYT_EXCLUDES(mu_);
  nlohmann::json Allocations() const FLYT_EXCLUDES(mu_);

  // Remote leases (remote.cc; docs/api.md "Remote leases"): a share of one GPU, served by a GPU
  // server its node manager starts. CreateRemoteLease places the lease and stores it (state
  // starting), then — with no lock held — asks the node to start the server (PUT
  // /api/v1/gpu-servers/{id}, at most [remote] server_start_timeout_s) and answers only once it
  // is up (state ready, with the server's address and the secret). A node that does not start it
  // gets the lease released (event with the node's reason) and the caller a 503 unavailable.
  // The secret is in the create answer and in RemoteLease for the owner or an admin only.
  Result<nlohmann::json> CreateRemoteLease(const Caller& caller, const nlohmann::json& body,
                                           const std::string& idempotency_key = "")
      FLYT_EXCLUDES(mu_);
  // 409 lease_failed when its server failed; 409 already_ended when released or expired.
  Result<nlohmann::json> RenewRemoteLease(const Caller& caller, const std::string& id,
                                          const nlohmann::json& body) FLYT_EXCLUDES(mu_);
  // Releases the lease and tells its node to drain the server (queued on the node worker).
  Result<nlohmann::json> ReleaseRemoteLease(const Caller& caller, const std::string& id)
      FLYT_EXCLUDES(mu_);
  // The live remote leases (without secrets), optionally of one node and/or client.
  nlohmann::json RemoteLeases(const std::string& node, const std::string& client) const
      FLYT_EXCLUDES(mu_);
  // One remote lease: its owner or an admin only (403 otherwise), with the secret.
  Result<nlohmann::json> RemoteLease(const Caller& caller, const std::string& id) const
      FLYT_EXCLUDES(mu_);
  // Moving and resizing remote leases, draining nodes (remote_moves.cc; docs/api.md "Remote
  // leases"). MigrateRemoteLease ({"node", "gpu"?, "timeout_s"?}) reserves the share on the
  // target first (AllocateRemote there, refused 409 insufficient_gpus without room), asks the
  // target's node to start the lease's next server (same secret), then the source's node to move
  // every client of the current server to it (live migration, server to server); once they
  // moved, one transaction moves the lease onto the target share (Ledger::MoveRemote), and the
  // old server is drained. If no client moved the lease stays where it was, the target share is
  // released and its server drained, and the caller gets the reasons. No lock is held while a
  // node works. ResizeRemoteLease ({"sm_count"|"sm_percent", "memory_mb"}) reserves the larger
  // of the old and new share first, has the node apply the new one to the running server, then
  // keeps the new share (or the old one, when the node refused); the resize is written ahead
  // into the lease's row and settled after a restart like a move (remote_resize.cc). Owner or
  // admin.
  Result<nlohmann::json> MigrateRemoteLease(const Caller& caller, const std::string& id,
                                            const nlohmann::json& body) FLYT_EXCLUDES(mu_);
  Result<nlohmann::json> ResizeRemoteLease(const Caller& caller, const std::string& id,
                                           const nlohmann::json& body) FLYT_EXCLUDES(mu_);
  // Admin: cordons the node (no new lease of any kind lands there; kept across restarts) and
  // moves each of its remote leases to another node, one after the other; the answer lists
  // each move's outcome. UncordonNode lifts the cordon.
  Result<nlohmann::json> DrainNode(const Caller& caller, const std::string& node,
                                   const nlohmann::json& body) FLYT_EXCLUDES(mu_);
  Result<nlohmann::json> UncordonNode(const Caller& caller, const std::string& node)
      FLYT_EXCLUDES(mu_);
  // Resolves the moves and resizes recorded in the store that no thread of this manager is running
  // (found after a restart or in another replica's write, or left when a node's answer was lost or
  // the outcome could not be stored). A resize is settled to the share the node says its server
  // runs with (remote_resize.cc). For a move it asks the target node for the lease's next server
  // (its state and connected clients) and, when that does not settle it, the source node for the
  // current one; commits the move when the clients are on the target, aborts it when they are still
  // on the source (or the target server is gone), and keeps both servers when it cannot tell yet (a
  // node unreachable, the source still moving clients). A heartbeat of a node a recorded move or
  // resize involves queues a pass on the node worker; Start queues one after a restart. Calls nodes
  // with no lock held; one pass at a time. Returns the lease ids by outcome: {"committed": [...],
  // "aborted": [...], "undecided": [...]}.
  nlohmann::json ResolveMoves() FLYT_EXCLUDES(mu_, resolve_mu_);

  // The GPU servers the nodes reported in their latest heartbeats, each with its "node".
  nlohmann::json GpuServers(const std::string& node) const FLYT_EXCLUDES(mu_);

  // Jobs: one per experiment of the submitted task. The task's single-valued parameters are
  // stored once (a TaskRecord); each job holds its own values. A submission whose expansion
  // (shared bytes once + every experiment's own values) passes [jobs] max_expanded_bytes is
  // refused with 413 payload_too_large before anything is written; otherwise it commits whole
  // or not at all. The answer names each job with its own values, and the shared ones once.
  Result<nlohmann::json> Submit(const Caller& caller, const nlohmann::json& task,
                                const std::string& idempotency_key = "") FLYT_EXCLUDES(mu_);
  // One page of jobs, newest first (submission time, then submission order, then id): at most
  // `limit`, after the job the opaque `cursor` names ("" from the start). The answer has
  // "jobs", "total" (matching jobs), "more" and "continue" (the next page's cursor, or null).
  // Jobs submitted while a client pages are newer than its cursor: a walk sees every job that
  // existed when it began exactly once. A malformed cursor is InvalidArgument.
  Result<nlohmann::json> Jobs(const std::string& status_filter, size_t limit,
                              const std::string& cursor = "") const FLYT_EXCLUDES(mu_);
  Result<nlohmann::json> GetJob(const std::string& id) const FLYT_EXCLUDES(mu_);
  Result<nlohmann::json> Cancel(const Caller& caller, const std::string& id) FLYT_EXCLUDES(mu_);
  Result<nlohmann::json> Complete(const Caller& caller, const std::string& id,
                                  const nlohmann::json& body) FLYT_EXCLUDES(mu_);
  nlohmann::json Queue() const FLYT_EXCLUDES(mu_);

  // Events after `after_id`, oldest first; or, with `latest`, the newest `limit` ones. A page
  // also stops at about kMaxEventsReplyBytes of event bodies. The answer has "events", "more"
  // (more after these; with `latest`: older ones exist) and "next_after" (the last id given).
  Result<nlohmann::json> Events(int64_t after_id, size_t limit, bool latest = false) const;
  std::string Metrics() const FLYT_EXCLUDES(mu_);

  // The manager could not receive in time (see the top of this file). Any thread; lock-free and
  // never blocks: the HTTP server calls it from its connection loop.
  void NoteIngestImpaired();

  // The live stream. WaitForChange blocks until a change after `seen_seq` is committed (here or,
  // with a shared store, by another replica), `timeout` passes, or CloseStreams is called; it
  // returns the current mark either way. CloseStreams wakes every waiter for good (shutdown).
  ChangeMark Changes() const FLYT_EXCLUDES(mu_);
  ChangeMark WaitForChange(uint64_t seen_seq, std::chrono::milliseconds timeout) const
      FLYT_EXCLUDES(mu_);
  void CloseStreams() FLYT_EXCLUDES(mu_);
  bool StreamsClosed() const FLYT_EXCLUDES(mu_);

  // One GPU as GET /api/v1/gpus lists it, plus its processes (from the node's last heartbeat).
  Result<nlohmann::json> Gpu(const std::string& node, unsigned index) const FLYT_EXCLUDES(mu_);
  // The API URL a node manager advertised (for the GPU history proxy); NotFound when none.
  Result<std::string> NodeApiUrl(const std::string& node) const FLYT_EXCLUDES(mu_);
  std::string StoreDescription() const { return store_->Describe(); }

  // One scheduler round now (tests and the benchmark drive it by hand with a FakeClock). While
  // the store cannot be written, it only probes the store, and resumes once it can.
  Status Tick() FLYT_EXCLUDES(mu_);

  // The store's health, for /healthz: {"state": "ok"}; {"state": "unavailable", "since",
  // "seconds", "writes_refused", "message"} during an outage; {"state": "damaged", "since",
  // "message"} when the consistency check or a transaction found the file damaged (until a check
  // finds it sound again). The message is the database's, without where the store is.
  nlohmann::json StoreHealth() const FLYT_EXCLUDES(mu_);

  // Runs the store's consistency check if [manager] store_check_interval_seconds has passed since
  // the last one (Tick calls it), without holding the state lock while it runs.
  void CheckStoreIfDue() FLYT_EXCLUDES(mu_);

  // Test seam: runs in Complete after the node's session was closed and before the job ends,
  // without the lock (the window in which the node worker may still record a session).
  void SetCompleteHookForTest(std::function<void()> hook) FLYT_EXCLUDES(mu_);
  // Test seam: called at the named points of a move (without the lock): "clients_moved", after
  // the source node answered and before the lease moves. Returning true stops the move there
  // as a manager that died would: nothing more is done, written or drained (destroy the
  // Cluster next and open another on the same store).
  void SetMoveHookForTest(std::function<bool(const std::string& point)> hook) FLYT_EXCLUDES(mu_);

 private:
  class CountingTxn;

  // ---- replication.cc: the state and the store, kept in step (all with mu_ held) ----
  // Runs `fn` in a store transaction after catching up; `fn` runs with mu_ held (annotate the
  // lambda FLYT_REQUIRES(mu_)). A failure that may have left memory ahead of the store reloads.
  Status WriteLocked(store::Durability durability, const std::function<Status(store::Txn&)>& fn)
      FLYT_REQUIRES(mu_);
  Status CatchUpLocked(store::Txn& txn) FLYT_REQUIRES(mu_);
  // Reads the whole state from the store into fresh structures and swaps them in only when that
  // succeeded: on failure the state stays as it was (the last good one).
  Status ReloadLocked() FLYT_REQUIRES(mu_);
  // Store outages. A store that cannot be written (reason store_unavailable) puts the cluster in
  // an outage: every change is refused with OutageStatusLocked, nothing expires, reads answer
  // from the last good state. RecoverLocked probes the store and, once it can be written,
  // reloads, forgives the nodes and leases the outage kept from being heard or renewed, and
  // resumes.
  void EnterOutageLocked(const Status& cause) FLYT_REQUIRES(mu_);
  // Counts a store error by kind (store::StoreErrorKind) and logs it with the database's message,
  // once per distinct message per minute (`log` false: count only); a damaged file is remembered
  // for StoreHealth.
  void NoteStoreErrorLocked(const Status& error, bool log = true) FLYT_REQUIRES(mu_);
  Status OutageStatusLocked() const FLYT_REQUIRES(mu_);
  Status RecoverLocked() FLYT_REQUIRES(mu_);
  // Retention: drops finished jobs past [jobs] keep_finished_for / keep_finished_max, from the
  // store and from memory (at most every kJobPruneInterval).
  Status PruneJobsLocked() FLYT_REQUIRES(mu_);
  // Tells stream waiters what a committed change (or catch-up) touched.
  void PublishLocked(uint32_t txn_topics) FLYT_REQUIRES(mu_);
  void ApplyNodeLocked(NodeRecord record) FLYT_REQUIRES(mu_);
  void EraseNodeLocked(const std::string& name) FLYT_REQUIRES(mu_);
  // gpu_owner_ for one node's GPUs: adds those no node holds yet / drops those it holds.
  void IndexGpusLocked(const NodeRecord& node) FLYT_REQUIRES(mu_);
  void UnindexGpusLocked(const NodeRecord& node) FLYT_REQUIRES(mu_);
  void ApplyJobLocked(Job job) FLYT_REQUIRES(mu_);
  // A job's parameters in full: its task's shared ones with its own over them.
  nlohmann::json MergedParametersLocked(const Job& job) const FLYT_REQUIRES(mu_);
  // Notes a lease whose row was deleted (released, expired, or its job ended).
  void RememberEndedLeaseLocked(const std::string& id) FLYT_REQUIRES(mu_);
  // Row writers: they touch only the transaction.
  Status PutNode(store::Txn& txn, const NodeRecord& node);
  Status PutJob(store::Txn& txn, const Job& job);
  Status Event(store::Txn& txn, const std::string& kind, nlohmann::json body);

  // ---- commands.cc ----
  // Ends the lease's job (if any) after its lease went away; queues closing its monitoring.
  Status FinishJobOfLeaseLocked(store::Txn& txn, const std::string& lease_id, JobState state,
                                const std::string& message) FLYT_REQUIRES(mu_);
  // Why no node of the cluster could ever meet the request (empty: some could, or none known).
  std::string NeverFitsLocked(const sched::AllocationRequest& request) const FLYT_REQUIRES(mu_);
  // The refusal for a lease the ledger does not hold: NotFound, with the reason already_ended
  // when the lease is known to have existed and ended.
  Status LeaseGoneLocked(const std::string& id) const FLYT_REQUIRES(mu_);

  // ---- remote.cc ----
  // A node's heartbeat reported its GPU servers (`now`; `before`: the previous report): events
  // for servers that started, failed or stopped; a live lease whose server failed or stopped
  // becomes failed (its share stays held until released or expired); one still starting whose
  // server runs becomes ready.
  Status ReconcileGpuServersLocked(store::Txn& txn, const std::string& node,
                                   const GpuServersReport& before, const GpuServersReport& now)
      FLYT_REQUIRES(mu_);
  // The heartbeat reply's gpu_servers.desired for a node: every live (starting or ready) remote
  // lease on it, with its secret.
  nlohmann::json DesiredGpuServersLocked(const std::string& node) const FLYT_REQUIRES(mu_);
  // Queues the drain of a remote lease's server (its `generation`'s) on its node (no-op without
  // an API address).
  void DrainGpuServerLocked(const sched::Lease& lease, uint32_t generation) FLYT_REQUIRES(mu_);
  // ---- remote_moves.cc ----
  // A move of a remote lease (MigrateRemoteLease, DrainNode): to `node` (empty: any but
  // `exclude_nodes`), on GPU `gpu` when given.
  Result<nlohmann::json> MoveRemoteLease(const Caller& caller, const std::string& id,
                                         const std::string& node, std::optional<uint32_t> gpu,
                                         const std::vector<std::string>& exclude_nodes,
                                         std::chrono::seconds timeout) FLYT_EXCLUDES(mu_);
  // The remote lease `id` as the caller may move or resize it: live, remote, the caller's (or an
  // admin's), ready, and not moving or being resized already (`what`: "moves", for the refusal).
  Result<sched::Lease> ReadyToChangeLocked(const Caller& caller, const std::string& id,
                                           const std::string& what) const FLYT_REQUIRES(mu_);
  // `id` is the share a moving lease reserved on its target (not a lease of anyone's).
  bool IsMoveTargetLocked(const std::string& id) const FLYT_REQUIRES(mu_);
  // After a lease row was read from the store (catch-up, reload): the recorded move, if any, is
  // in moves_ and its target share in the ledger; a move the row no longer records (resolved by
  // another replica) that no thread here runs is dropped with its share.
  void SyncMoveLocked(const sched::Lease& lease) FLYT_REQUIRES(mu_);
  // The lease `id` ended (released, expired, deleted by another replica): its move's share is
  // released, the target server drained when `drain`, and the move forgotten unless running.
  void EndMoveOfLeaseLocked(const std::string& id, bool drain) FLYT_REQUIRES(mu_);
  // Step 4 of a move: one transaction puts the lease on the target share (the recorded move
  // `target`), with the server's `address`/`pid`; `migration` goes into the answer and the
  // event, `resolved` (empty for a move that ran through) says how an undecided move was
  // settled. The old server is drained. A commit that cannot be stored leaves the move recorded
  // (not running): a later resolve pass commits it.
  Result<nlohmann::json> CommitMoveLocked(const std::string& id, const std::string& target,
                                          const std::string& address, std::optional<int64_t> pid,
                                          nlohmann::json migration, const std::string& resolved)
      FLYT_REQUIRES(mu_);
  // Ends the recorded move `target` of lease `id` with the lease where it was: the target share
  // is released and its server drained, event remote_lease.migration_failed with `why` (and
  // `resolved`). Not stored: the move stays recorded (not running) for a later pass.
  Status AbortMoveLocked(const std::string& id, const std::string& target, const std::string& why,
                         const std::string& resolved) FLYT_REQUIRES(mu_);
  // Asks the nodes where the clients of the recorded move of `id` are and settles it (see
  // ResolveMoves). The caller has marked the move running; it is running no more after this.
  // Returns "committed", "aborted" or "undecided" and, when committed, the lease.
  std::pair<std::string, Result<nlohmann::json>> ResolveMove(const std::string& id,
                                                             const std::string& resolved)
      FLYT_EXCLUDES(mu_);
  // Step 3 of a resize (remote_resize.cc): one transaction gives the lease `sm_count` and
  // `memory_bytes` — the share its server runs with — and clears the recorded resize; event
  // remote_lease.resized, or remote_lease.resize_failed when that is the old share (`why`, and
  // `resolved` for a resize settled after the fact). Not stored: the resize stays recorded (not
  // running) for a later pass.
  Result<nlohmann::json> SettleResizeLocked(const std::string& id, uint32_t sm_count,
                                            uint64_t memory_bytes, const nlohmann::json& server,
                                            const std::string& why, const std::string& resolved)
      FLYT_REQUIRES(mu_);
  // Asks the node what share the server of the recorded resize of `id` runs with and settles
  // the lease to it (see ResolveMoves). `waiting`: how it came to wait ("restart",
  // "lost_answer", "store"). Returns "committed" (a share other than the old one), "aborted"
  // (the old share), "undecided" or "gone", and, when settled, the lease.
  std::pair<std::string, Result<nlohmann::json>> ResolveResize(const std::string& id,
                                                               const std::string& waiting)
      FLYT_EXCLUDES(mu_);
  // Queues a ResolveMoves pass on the node worker, unless one is queued already.
  void QueueResolveLocked() FLYT_REQUIRES(mu_);
  // The test seam's answer at `point` (false without one): "clients_moved" (a move, after the
  // source node answered), "resize_recorded" (a resize, once written ahead), "resize_applied" (a
  // resize, after the node answered); true stops the request there, as a manager that died.
  bool MoveHook(const std::string& point) FLYT_EXCLUDES(mu_);
  // Sets or lifts a node's cordon, stored, with an event.
  Status SetCordonLocked(const std::string& node, bool cordoned, const std::string& reason,
                         const std::string& by) FLYT_REQUIRES(mu_);
  // The remote part of a lease (a default one when none is known).
  RemoteLeaseInfo RemoteInfoLocked(const std::string& id) const FLYT_REQUIRES(mu_);
  // Writes leases whose expiry was pushed out (after a store outage, after a restart), each with
  // a lease.renewed event of `reason` ("...: <why>"), and puts them back in the ledger.
  Status WriteExtendedLeasesLocked(const std::vector<sched::Lease>& extend, const char* reason,
                                   const char* why) FLYT_REQUIRES(mu_);

  // ---- inventory.cc ----
  // A heartbeat refused for a GPU (uuid, first node) another node reported: counted always; logged
  // and recorded as an event at most every 10 minutes per node name.
  void ReportGpuConflictLocked(const std::string& node,
                               const std::pair<std::string, std::string>& conflict)
      FLYT_REQUIRES(mu_);

  // ---- scheduler.cc ----
  Status StartJobLocked(store::Txn& txn, Job& job, const sched::Lease& lease) FLYT_REQUIRES(mu_);
  Status TickLocked(store::Txn& txn, bool& woke_others) FLYT_REQUIRES(mu_);
  Status ExpireLocked(store::Txn& txn, bool& expired_any) FLYT_REQUIRES(mu_);
  nlohmann::json GpuInfoLocked(const sched::Lease& lease, const std::string& policy) const
      FLYT_REQUIRES(mu_);
  std::optional<std::chrono::steady_clock::time_point> NextWakeLocked() const FLYT_REQUIRES(mu_);
  void SchedulerLoop() FLYT_EXCLUDES(mu_);
  // Tells the scheduler a pass may place something (strong) or a heartbeat came while jobs wait.
  void Wake(bool strong) FLYT_REQUIRES(mu_);

  // ---- cluster.cc ----
  sched::QueuedJob QueuedFrom(const Job& job) const;
  std::string NewId(const std::string& prefix) FLYT_REQUIRES(mu_);
  std::chrono::steady_clock::time_point HeardAt(WallTime last_heartbeat) const;
  // NodeWorkerHost: what the node worker asks and tells (each takes mu_).
  std::optional<SessionTarget> SessionToOpen(const std::string& job_id) override FLYT_EXCLUDES(mu_);
  bool SessionOpened(const std::string& job_id, const std::string& lease_id,
                     const std::string& session, const std::string& error) override
      FLYT_EXCLUDES(mu_);
  std::optional<SessionTarget> SessionToClose(const std::string& job_id) override
      FLYT_EXCLUDES(mu_);
  void SessionClosed(const std::string& job_id, const std::string& session,
                     Result<nlohmann::json> stats) override FLYT_EXCLUDES(mu_);

  // Set at construction, then only read: no lock.
  std::unique_ptr<store::Store> store_;  // the Store is thread-safe itself
  const ClusterConfig config_;
  const Clock& clock_;
  // The store is shared with other replicas: catch up at least every sync_interval.
  const bool shared_store_;

  // The state lock. Order: mu_ before gpus_mu_ and before the worker's own lock; never held
  // across a network call.
  mutable Mutex mu_;
  std::unique_ptr<sched::Ledger> ledger_ FLYT_GUARDED_BY(mu_) FLYT_PT_GUARDED_BY(mu_);
  sched::JobQueue queue_ FLYT_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point next_sync_ FLYT_GUARDED_BY(mu_);
  std::map<std::string, NodeRecord> nodes_ FLYT_GUARDED_BY(mu_);
  // Which node reported each GPU UUID first (placeholders of lost GPUs aside).
  std::unordered_map<std::string, std::string> gpu_owner_ FLYT_GUARDED_BY(mu_);
  // The usage-profile state of each GPU (node, then UUID) as the gpu.state_changed events know
  // it (inventory.cc), rebuilt from every heartbeat's profiles: bounded by the nodes' GPUs.
  struct StateTrack {
    std::string reported;  // the state the last event said (or the first one seen)
    std::string last_seen;  // the previous heartbeat's
    std::optional<std::chrono::steady_clock::time_point> last_event;
    uint64_t held = 0;  // changes held back since the last event
  };
  std::map<std::string, std::map<std::string, StateTrack>> gpu_states_ FLYT_GUARDED_BY(mu_);
  // When dropped usage profiles of each node were last logged.
  std::map<std::string, std::chrono::steady_clock::time_point> profile_error_logged_
      FLYT_GUARDED_BY(mu_);
  // When a GPU conflict of each refused node name was last logged.
  std::map<std::string, std::chrono::steady_clock::time_point> gpu_conflict_logged_
      FLYT_GUARDED_BY(mu_);
  std::map<std::string, ClientRecord> clients_ FLYT_GUARDED_BY(mu_);
  std::map<std::string, Job> jobs_ FLYT_GUARDED_BY(mu_);
  std::map<std::string, TaskRecord> tasks_ FLYT_GUARDED_BY(mu_);  // by id (the submission's)
  std::map<std::string, std::string> job_of_lease_ FLYT_GUARDED_BY(mu_);
  // The remote part of each remote lease the ledger holds (from the lease rows).
  std::map<std::string, RemoteLeaseInfo> remote_ FLYT_GUARDED_BY(mu_);
  // Remote leases moving or being resized now (remote_moves.cc), by lease id: the share reserved
  // on a move's target (a ledger lease of its own, never a row: the lease row records the move,
  // RemoteLeaseInfo::moving, and the ledger gets it back from there), empty for a resize (its
  // record is RemoteLeaseInfo::resizing); the generation its server will have; whether a thread
  // of this manager runs it now (false: a recorded move or resize waiting to be resolved,
  // ResolveMoves) and, if not, how it came to wait.
  struct Move {
    std::string target;
    uint32_t generation = 0;
    bool running = true;
    std::string waiting;  // "restart", "lost_answer", "store"
  };
  std::map<std::string, Move> moves_ FLYT_GUARDED_BY(mu_);
  bool resolve_queued_ FLYT_GUARDED_BY(mu_) = false;
  std::function<bool(const std::string&)> move_hook_ FLYT_GUARDED_BY(mu_);
  // One ResolveMoves pass at a time (held across node calls; taken before mu_, never under it).
  Mutex resolve_mu_;
  // Leases known to have ended (from this manager's deletions and the store's tombstones), the
  // newest kMaxEndedLeases of them: a second release is "already ended", not "never existed".
  std::set<std::string> ended_leases_ FLYT_GUARDED_BY(mu_);
  std::deque<std::string> ended_order_ FLYT_GUARDED_BY(mu_);  // oldest first
  int64_t revision_ FLYT_GUARDED_BY(mu_) = 0;  // the store revision we reflect
  ClusterCounters counters_ FLYT_GUARDED_BY(mu_);
  uint64_t random_state_ FLYT_GUARDED_BY(mu_) = 0;
  uint64_t state_version_ FLYT_GUARDED_BY(mu_) = 0;  // bumped by every committed change
  uint64_t leases_version_ FLYT_GUARDED_BY(mu_) = 0;  // bumped by those that touched leases
  uint32_t touched_ FLYT_GUARDED_BY(mu_) = 0;        // topics caught up in this write
  ChangeMark changes_ FLYT_GUARDED_BY(mu_);
  bool streams_closed_ FLYT_GUARDED_BY(mu_) = false;
  mutable CondVar change_cv_;  // waits on mu_ for changes_ / streams_closed_

  Mutex gpus_mu_;
  std::shared_ptr<const std::string> gpus_body_ FLYT_GUARDED_BY(gpus_mu_);
  uint64_t gpus_version_ FLYT_GUARDED_BY(gpus_mu_) = 0;
  uint64_t gpus_leases_version_ FLYT_GUARDED_BY(gpus_mu_) = 0;
  std::chrono::steady_clock::time_point gpus_built_ FLYT_GUARDED_BY(gpus_mu_);

  CondVar wake_cv_;                               // waits on mu_ for the flags below
  bool dirty_ FLYT_GUARDED_BY(mu_) = false;       // a pass may place something
  bool soft_dirty_ FLYT_GUARDED_BY(mu_) = false;  // a heartbeat while jobs wait
  bool stopping_ FLYT_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_pass_ FLYT_GUARDED_BY(mu_);
  // When events were last pruned to their retention.
  std::chrono::steady_clock::time_point last_prune_ FLYT_GUARDED_BY(mu_);
  // When finished jobs were last pruned (none yet: the first Tick does).
  std::optional<std::chrono::steady_clock::time_point> last_job_prune_ FLYT_GUARDED_BY(mu_);
  // The store outage in progress, if any.
  struct Outage {
    std::chrono::steady_clock::time_point since;
    WallTime since_wall;
    std::string error;  // the store's last word
    uint64_t writes_refused = 0;
  };
  std::optional<Outage> outage_ FLYT_GUARDED_BY(mu_);
  // Store errors by kind; when each distinct message was last logged; the damage found, if any.
  std::map<std::string, uint64_t> store_errors_by_kind_ FLYT_GUARDED_BY(mu_);
  std::map<std::string, std::chrono::steady_clock::time_point> store_error_logged_
      FLYT_GUARDED_BY(mu_);
  struct Damage {
    WallTime since;
    std::string error;
  };
  std::optional<Damage> damage_ FLYT_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point next_store_check_ FLYT_GUARDED_BY(mu_);
  bool store_checking_ FLYT_GUARDED_BY(mu_) = false;
  // The last moment the manager could not receive (clock_.SteadyNow() ticks since its epoch;
  // INT64_MIN: never), and how many times that was noted.
  std::atomic<int64_t> impaired_at_{INT64_MIN};
  std::atomic<uint64_t> ingest_impaired_{0};
  std::optional<std::chrono::steady_clock::time_point> ImpairedAt() const;
  std::function<void()> complete_hook_ FLYT_GUARDED_BY(mu_);
  std::thread scheduler_;

  // Last: it calls back into the members above, so it is destroyed (and joined) first.
  NodeWorker worker_;
};

}  // namespace flyt::cluster
