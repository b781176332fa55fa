// Store: flyt-cluster-manager's durable state — nodes, clients, leases, jobs and the event log —
// behind one interface with two backends: SQLite (the embedded default, one manager) and
// PostgreSQL (several manager replicas sharing one database).
//
// Rows are JSON documents keyed by (table, id); the store never interprets a body. Every write
// happens inside Update(), which holds the cluster-wide write lock for the whole transaction
// (SQLite: BEGIN IMMEDIATE; PostgreSQL: a transaction-scoped advisory lock), so managers sharing a
// database apply their changes one after the other. Each committed Update that wrote something
// bumps the store's revision by one; the rows it wrote carry that revision as their `seq`, and a
// deleted row stays as a tombstone with the same rule, so ListSince(table, seq) is a change feed
// that another replica uses to catch up. Exclusive GPU claims are also enforced by the database
// itself (a unique index), so even a logic error cannot grant one GPU to two exclusive leases.
//
// Durability: kDurable commits are on disk before Update returns (SQLite synchronous=FULL,
// PostgreSQL synchronous_commit on); kRelaxed (heartbeats) survive a crash of the manager but may be
// lost with the machine (SQLite synchronous=NORMAL in WAL mode; PostgreSQL synchronous_commit off).
//
// The schema is versioned: Open() applies the missing migrations in order, under the same lock,
// and refuses a database whose schema is newer than this build knows.
//
// Errors: a database that cannot be written now — SQLite's disk full, read-only file, I/O error or
// file that cannot be opened; PostgreSQL's lost connection, class 08, 53 or 57P0x, a read-only
// server — is kUnavailable with reason "store_unavailable" (IsStoreUnavailable): the transaction
// did not commit and nothing changed, but trying again later may work. A refusal of the caller's
// own (a claim collision, a callback's error) keeps its code and changed nothing either.
//
// Creation and damage: the store records when its schema was created (meta 'created_ms'), so that
// its owner can tell a store that existed from a new one. Open(url, OpenMode::kExisting) refuses a
// database that is missing (reason store_missing), empty or without flyt's schema
// (store_uninitialized), instead of creating a fresh, empty one in its place. Every Open runs the
// database's consistency check first (SQLite: PRAGMA quick_check) and refuses a damaged file
// (store_damaged), naming the file and the check's first complaints; Check() runs it again later.
//
// Retention: a job row carries, beside its body, when the job finished (PutJob), so that
// PruneFinishedJobs finds old finished jobs through an index without reading bodies.
//
// Thread-safety: a Store may be used from many threads; calls are serialised on one connection.
// A Txn is valid only inside the Update callback that received it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace flyt::store {

// kTasks (schema v3): the parts a submission's jobs share, once per submission.
enum class Table { kNodes, kClients, kLeases, kJobs, kTasks };
const char* TableName(Table table);  // "nodes", "clients", "leases", "jobs", "tasks"

enum class Durability { kDurable, kRelaxed };

struct Row {
  std::string id;
  int64_t seq = 0;       // the revision of the Update that last wrote it
  bool deleted = false;  // a tombstone: body is empty
  std::string body;      // JSON text, as Put stored it
};

// What PruneFinishedJobs removes: finished jobs that finished before `finished_before_ms`, and
// those beyond the newest `keep` finished ones; at most `max_jobs` per call, oldest first (a large
// backlog goes in several transactions, none holding the write lock for long). Tombstones of jobs
// that finished before `purge_tombstones_before_ms` are then dropped for good: by then every
// replica has long caught up on them.
struct JobRetention {
  int64_t finished_before_ms = 0;
  size_t keep = 0;
  size_t max_jobs = 1000;
  int64_t purge_tombstones_before_ms = 0;
};

// The reason of a Status from a store that cannot be written now (see the file comment).
inline constexpr const char* kStoreUnavailableReason = "store_unavailable";
bool IsStoreUnavailable(const Status& status);
// Reasons of Open's refusals (see the file comment) and of Check's finding.
inline constexpr const char* kStoreMissingReason = "store_missing";
inline constexpr const char* kStoreUninitializedReason = "store_uninitialized";
inline constexpr const char* kStoreDamagedReason = "store_damaged";

// The kind of a store error, for metrics and health: "disk_full", "unwritable" (read-only file,
// I/O error), "damaged" (a corrupt file), "busy" (the write lock held too long), "connection"
// (PostgreSQL unreachable or gone), "refused" (a refusal of the caller's own: a claim collision,
// a missing row) or "other".
const char* StoreErrorKind(const Status& status);

// Whether Open may create the schema in a database that has none.
enum class OpenMode {
  kCreate,    // yes: a new store (tests, --store-init, a first start)
  kExisting,  // no: the store must exist and hold flyt's schema
};

struct EventRow {
  int64_t id = 0;     // increasing, assigned by the store
  int64_t at_ms = 0;  // Unix milliseconds, as given
  std::string kind;   // "lease.granted", "node.unreachable", ...
  std::string body;   // JSON text
};

// An idempotency key's record (schema v3): what the first request with it looked like (a hash of
// its body) and the answer it got, kept until expires_ms.
struct IdempotencyRecord {
  std::string request_hash;
  std::string response;  // JSON text
  int64_t expires_ms = 0;
};

class Txn {
 public:
  virtual ~Txn() = default;
  // The revision before this transaction; the one it commits (if it writes) is Revision() + 1.
  virtual int64_t Revision() const = 0;
  // Upsert. A Put over a tombstone revives the row.
  virtual Status Put(Table table, const std::string& id, const std::string& body) = 0;
  // Leaves a tombstone; NotFound when there is no live row.
  virtual Status Delete(Table table, const std::string& id) = 0;
  virtual Result<std::optional<std::string>> Get(Table table, const std::string& id) = 0;
  // Rows (tombstones included) with seq > after_seq, in seq order.
  virtual Result<std::vector<Row>> ListSince(Table table, int64_t after_seq) = 0;
  // Claims each GPU key ("node/uuid") for the lease. An exclusive claim fails with
  // kAlreadyExists (naming the GPU) when any exclusive claim on that key exists.
  virtual Status ClaimGpus(const std::string& lease_id, const std::vector<std::string>& gpu_keys,
                           bool exclusive) = 0;
  // Drops every claim of the lease (none is fine).
  virtual Status ReleaseGpus(const std::string& lease_id) = 0;
  virtual Status AppendEvent(int64_t at_ms, const std::string& kind, const std::string& body) = 0;
  // Put of a job row, with when the job finished (Unix ms; nullopt while queued or running).
  virtual Status PutJob(const std::string& id, const std::string& body,
                        std::optional<int64_t> finished_at_ms);
  // Leaves a tombstone of each job that `retention` selects (other replicas drop them through the
  // change feed) and returns their ids, oldest first.
  virtual Result<std::vector<std::string>> PruneFinishedJobs(const JobRetention& retention);
  // Idempotency keys, by (scope, key): scope names the caller and the endpoint. A record past its
  // expiry still reads until PruneIdempotencyKeys drops it (the caller checks expires_ms).
  virtual Result<std::optional<IdempotencyRecord>> GetIdempotency(const std::string& scope,
                                                                  const std::string& key);
  virtual Status PutIdempotency(const std::string& scope, const std::string& key,
                                const IdempotencyRecord& record);
  // Drops the records that expired before now_ms.
  virtual Status PruneIdempotencyKeys(int64_t now_ms);
};

class Store {
 public:
  virtual ~Store() = default;

  // "sqlite:PATH" (parent directories created, file mode 0600, WAL), "sqlite::memory:" for tests,
  // or a PostgreSQL URL "postgresql://user@host:port/db?..." / "postgres://...". Applies migrations.
  static Result<std::unique_ptr<Store>> Open(const std::string& url,
                                             OpenMode mode = OpenMode::kCreate);
  // What Describe() of the store at `url` will say, without opening it.
  static Result<std::string> DescribeUrl(const std::string& url);

  // Runs `fn` in one transaction holding the cluster-wide write lock. Commits when fn returns Ok
  // (bumping the revision when it wrote anything), rolls back and returns fn's error otherwise.
  // Database errors come back as kUnavailable (connection lost: the next call reconnects) or
  // kInternal, with the database's message.
  virtual Status Update(Durability durability, const std::function<Status(Txn&)>& fn) = 0;

  // Reads outside a write transaction (a consistent snapshot of one table).
  virtual Result<std::vector<Row>> List(Table table, int64_t after_seq = 0) = 0;
  virtual Result<int64_t> Revision() = 0;
  // Events with id > after_id, oldest first, at most `limit`.
  virtual Result<std::vector<EventRow>> Events(int64_t after_id, size_t limit) = 0;
  // The newest `limit` events, oldest first.
  virtual Result<std::vector<EventRow>> LatestEvents(size_t limit) = 0;
  // Drops events older than `before_ms`, keeping at least the newest `keep`.
  virtual Status PruneEvents(int64_t before_ms, size_t keep) = 0;
  // Drops the oldest events until the rest (body and kind) total at most `max_bytes`.
  virtual Status PruneEventBytes(uint64_t max_bytes);
  // Commits a transaction that really writes (a counter beside the revision, which it leaves
  // alone): Ok when the store can be written again after an outage.
  virtual Status Probe() = 0;

  // When the store's schema was created (Unix ms, meta 'created_ms'; for a store made before
  // flyt recorded it, when this was first noticed); 0 when unknown.
  virtual int64_t CreatedMs() const { return 0; }
  // The database's consistency check (SQLite: PRAGMA quick_check on a read-only connection of
  // its own, so it blocks no transaction; it reads the whole file, so it takes about as long as
  // reading it; PostgreSQL: nothing to do): Ok, or kInternal with reason store_damaged and its
  // first complaints; a check that could not run returns that error.
  virtual Status Check() { return Status::Ok(); }

  virtual int SchemaVersion() const = 0;
  // For logs: "sqlite:/path/var/flyt.db" or "postgresql://host:port/db" (never a password).
  virtual std::string Describe() const = 0;
};

// The newest schema version this build knows.
int LatestSchemaVersion();

}  // namespace flyt::store
