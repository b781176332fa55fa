// Database: the part of a Store that differs between SQLite and PostgreSQL — one connection, its
// prepared statements, its cluster-wide write lock and the wording of its errors. store.cc builds
// the Store itself (revisions, tombstones, GPU claims, migrations) once, on top of this interface,
// so both backends behave the same way by construction.
//
// Every statement flyt runs is listed once here (QueryId) with its SQL, written in the one dialect
// both databases accept: `$1`-style parameters (the SQLite backend reads them as `?1`), TRUE/FALSE,
// INSERT ... ON CONFLICT. A backend prepares a statement the first time it runs it and keeps it.
//
// Not thread-safe: the Store owns one Database and serialises every call on its mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace flyt::store::internal {

enum class Dialect { kSqlite, kPostgres };

inline constexpr int kTableCount = 5;  // Table::kNodes .. Table::kTasks

// Statements that do not depend on the table.
enum class Query : int {
  kSchemaVersion,    // () -> version
  kRecordMigration,  // (version)
  kGetRevision,      // () -> revision
  kBumpRevision,     // ()
  kClaimConflict,    // (gpu, lease_id) -> another lease's exclusive claim on gpu
  kClaim,            // (gpu, lease_id, exclusive)
  kRelease,          // (lease_id)
  kAppendEvent,      // (at_ms, kind, body, bytes)
  kEvents,           // (after_id, limit) -> id, at_ms, kind, body
  kLatestEvents,     // (limit) -> id, at_ms, kind, body: the newest, oldest first
  kPruneEvents,      // (before_ms, keep)
  kPutFinishedJob,   // (id, seq, body, finished_ms)
  kFinishedJobsCut,  // (keep) -> finished_ms, id of the newest finished job beyond the newest keep
  kJobsToPrune,      // (before_ms, cut_ms, cut_id, limit) -> id, oldest first
  kPruneJobs,        // (before_ms, cut_ms, cut_id, limit, seq): tombstones of kJobsToPrune's rows
  kPurgeJobTombstones,  // (before_ms)
  kProbe,            // (): a real write that changes nothing else
  kPruneEventBytes,  // (max_bytes): drops the oldest events beyond the newest max_bytes
  kGetIdempotency,   // (scope, key) -> request_hash, response, expires_ms
  kPutIdempotency,   // (scope, key, request_hash, response, expires_ms)
  kPruneIdempotency, // (now_ms): drops expired keys
  kRecordCreation,   // (created_ms): meta's 'created_ms' row, unless it has one
  kCreatedMs,        // () -> created_ms
  kCount,
};

// Statements run once per table.
enum class TableQuery : int {
  kPut,        // (id, seq, body)
  kDelete,     // (id, seq); changes 0 rows when there is no live row
  kGet,        // (id) -> body of the live row
  kListSince,  // (after_seq) -> id, seq, deleted, body
  kCount,
};

// A statement's index in the catalog; backends keep their prepared statements by it.
using QueryId = int;
QueryId Id(Query query);
QueryId Id(TableQuery query, Table table);
inline constexpr int kQueryCount =
    static_cast<int>(Query::kCount) + kTableCount * static_cast<int>(TableQuery::kCount);

// The SQL of a statement, `$N` placeholders.
const std::string& QuerySql(QueryId id);

// A parameter; a string_view must stay valid for the call.
using SqlParam = std::variant<int64_t, bool, std::string_view>;

// One result row, valid only inside the row callback.
class SqlRow {
 public:
  virtual int64_t Int(int column) const = 0;
  virtual bool Bool(int column) const = 0;
  virtual bool IsNull(int column) const = 0;
  virtual std::string_view Text(int column) const = 0;

 protected:
  ~SqlRow() = default;
};
using RowCallback = std::function<void(const SqlRow&)>;

class Database {
 public:
  virtual ~Database() = default;

  virtual Dialect dialect() const = 0;
  // "sqlite:/abs/path" or "postgresql://host:port/db": for messages and logs, never a password.
  virtual std::string Describe() const = 0;

  // Opens a transaction holding the cluster-wide write lock, committing with `durability`.
  virtual Status BeginWrite(Durability durability) = 0;
  // BeginWrite, then reads the store's revision (in the same round trip where that is possible:
  // a heartbeat's Update is three round trips to PostgreSQL, not five).
  virtual Result<int64_t> BeginUpdate(Durability durability) = 0;
  // Commits, first adding one to the revision when `bump_revision`. On failure the transaction
  // may still be open: the caller rolls it back.
  virtual Status Commit(bool bump_revision) = 0;
  // Best effort: a lost connection has rolled the transaction back already.
  virtual void Rollback() = 0;

  // Runs a script of several statements without parameters or results (migrations).
  virtual Status ExecScript(const std::string& sql) = 0;
  // Whether the database has a table of that name (a constant of flyt's: not quoted).
  virtual Result<bool> HasTable(const std::string& name) = 0;
  // The database's own consistency check, cheap enough to run at start and now and then:
  // SQLite's PRAGMA quick_check (its first `max_lines` complaints; none when the file is sound),
  // on a read-only connection of its own with a cold cache, so that it reads what is on disk and
  // holds up no writer; PostgreSQL checks its pages itself: nothing to do. Unlike the rest of
  // this interface it may be called from any thread, at the same time as the other calls.
  virtual Result<std::vector<std::string>> QuickCheck(size_t max_lines) = 0;
  // Runs one catalogued statement, calling `on_row` for each result row; returns the number of
  // rows an INSERT, UPDATE or DELETE changed. Outside a transaction it is a statement of its own.
  virtual Result<int64_t> Run(QueryId id, std::initializer_list<SqlParam> params,
                              const RowCallback& on_row) = 0;
  // Run for a statement that returns no rows.
  Result<int64_t> Change(QueryId id, std::initializer_list<SqlParam> params) {
    return Run(id, params, nullptr);
  }
};

}  // namespace flyt::store::internal
