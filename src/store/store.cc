#include "store/store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>

#include "common/strings.h"
#include "store/database.h"
#include "store/migrations.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace flyt::store {
namespace {

using internal::Database;
using internal::Id;
using internal::Query;
using internal::RowCallback;
using internal::SqlRow;
using internal::TableQuery;

constexpr std::string_view kSqlitePrefix = "sqlite:";
constexpr const char* kAcceptedUrls =
    "expected sqlite:PATH, sqlite::memory:, postgresql://USER@HOST:PORT/DB or postgres://...";

Status CheckTable(Table table) {
  const int index = static_cast<int>(table);
  if (index < 0 || index >= internal::kTableCount) {
    return InvalidArgument("unknown table " + std::to_string(index));
  }
  return Status::Ok();
}

// Keys and documents are text: PostgreSQL cannot store a NUL byte in one, so neither backend does.
Status CheckText(std::string_view what, const std::string& text) {
  if (text.find('\0') != std::string::npos) {
    return InvalidArgument(std::string(what) + " contains a NUL byte");
  }
  return Status::Ok();
}

Status CheckKey(std::string_view what, const std::string& key) {
  if (key.empty()) return InvalidArgument(std::string(what) + " is empty");
  return CheckText(what, key);
}

std::string RowName(Table table, const std::string& id) {
  return std::string(TableName(table)) + "/" + id;
}

int64_t ClampToInt64(size_t n) {
  return n > static_cast<size_t>(std::numeric_limits<int64_t>::max())
             ? std::numeric_limits<int64_t>::max()
             : static_cast<int64_t>(n);
}

Result<int64_t> ReadRevision(Database& db) {
  std::optional<int64_t> revision;
  auto run = db.Run(Id(Query::kGetRevision), {}, [&](const SqlRow& row) { revision = row.Int(0); });
  if (!run.ok()) return run.status().WithContext("read revision");
  if (!revision) return Internal(db.Describe() + ": the revision row is missing from table meta");
  return *revision;
}

Result<std::vector<Row>> ListRows(Database& db, Table table, int64_t after_seq) {
  FLYT_RETURN_IF_ERROR(CheckTable(table));
  std::vector<Row> rows;
  auto run = db.Run(Id(TableQuery::kListSince, table), {after_seq}, [&](const SqlRow& r) {
    Row row;
    row.id = std::string(r.Text(0));
    row.seq = r.Int(1);
    row.deleted = r.Bool(2);
    if (!row.deleted) row.body = std::string(r.Text(3));
    rows.push_back(std::move(row));
  });
  if (!run.ok()) return run.status().WithContext(std::string("list ") + TableName(table));
  return rows;
}

// Rolls a write transaction back unless it committed, also when the callback throws.
class WriteScope {
 public:
  explicit WriteScope(Database& db) : db_(db) {}
  ~WriteScope() {
    if (!done_) db_.Rollback();
  }
  WriteScope(const WriteScope&) = delete;
  WriteScope& operator=(const WriteScope&) = delete;

  Status Commit(bool bump_revision) {
    done_ = true;
    Status status = db_.Commit(bump_revision);
    if (!status.ok()) db_.Rollback();
    return status;
  }

 private:
  Database& db_;
  bool done_ = false;
};

class SqlTxn final : public Txn {
 public:
  SqlTxn(Database& db, int64_t revision) : db_(db), revision_(revision) {}

  int64_t Revision() const override { return revision_; }

  Status Put(Table table, const std::string& id, const std::string& body) override {
    FLYT_RETURN_IF_ERROR(Usable());
    FLYT_RETURN_IF_ERROR(CheckTable(table));
    FLYT_RETURN_IF_ERROR(CheckKey("id", id));
    FLYT_RETURN_IF_ERROR(CheckText("body", body));
    auto run = db_.Change(Id(TableQuery::kPut, table), {id, revision_ + 1, body});
    if (!run.ok()) return Fail(run.status().WithContext("put " + RowName(table, id)));
    wrote_ = true;
    return Status::Ok();
  }

  Status Delete(Table table, const std::string& id) override {
    FLYT_RETURN_IF_ERROR(Usable());
    FLYT_RETURN_IF_ERROR(CheckTable(table));
    FLYT_RETURN_IF_ERROR(CheckKey("id", id));
    auto run = db_.Change(Id(TableQuery::kDelete, table), {id, revision_ + 1});
    if (!run.ok()) return Fail(run.status().WithContext("delete " + RowName(table, id)));
    if (*run == 0) return NotFound(RowName(table, id) + " does not exist");
    wrote_ = true;
    return Status::Ok();
  }

  Result<std::optional<std::string>> Get(Table table, const std::string& id) override {
    FLYT_RETURN_IF_ERROR(Usable());
    FLYT_RETURN_IF_ERROR(CheckTable(table));
    FLYT_RETURN_IF_ERROR(CheckKey("id", id));
    std::optional<std::string> body;
    auto run = db_.Run(Id(TableQuery::kGet, table), {id},
                       [&](const SqlRow& row) { body = std::string(row.Text(0)); });
    if (!run.ok()) return Fail(run.status().WithContext("get " + RowName(table, id)));
    return body;
  }

  Result<std::vector<Row>> ListSince(Table table, int64_t after_seq) override {
    FLYT_RETURN_IF_ERROR(Usable());
    FLYT_RETURN_IF_ERROR(CheckTable(table));
    auto rows = ListRows(db_, table, after_seq);
    if (!rows.ok()) return Fail(rows.status());
    return rows;
  }

  Status ClaimGpus(const std::string& lease_id, const std::vector<std::string>& gpu_keys,
                   bool exclusive) override {
    FLYT_RETURN_IF_ERROR(Usable());
    FLYT_RETURN_IF_ERROR(CheckKey("lease id", lease_id));
    for (const std::string& gpu : gpu_keys) FLYT_RETURN_IF_ERROR(CheckKey("gpu key", gpu));
    // Every key is checked before any is claimed, so a refused claim leaves nothing behind and
    // the transaction stays usable (the callback may try other GPUs). The unique index still
    // stands behind this check.
    if (exclusive) {
      for (const std::string& gpu : gpu_keys) {
        std::optional<std::string> holder;
        auto run = db_.Run(Id(Query::kClaimConflict), {gpu, lease_id},
                           [&](const SqlRow& row) { holder = std::string(row.Text(0)); });
        if (!run.ok()) return Fail(run.status().WithContext("claim gpu " + gpu));
        if (holder) {
          return AlreadyExists("gpu " + gpu + " is already claimed exclusively by lease " +
                               *holder);
        }
      }
    }
    for (const std::string& gpu : gpu_keys) {
      auto run = db_.Change(Id(Query::kClaim), {gpu, lease_id, exclusive});
      if (!run.ok()) {
        if (run.status().code() == StatusCode::kAlreadyExists) {
          return Fail(AlreadyExists("gpu " + gpu + " is already claimed exclusively (" +
                                    run.status().message() + ")"));
        }
        return Fail(run.status().WithContext("claim gpu " + gpu));
      }
    }
    return Status::Ok();
  }

  Status ReleaseGpus(const std::string& lease_id) override {
    FLYT_RETURN_IF_ERROR(Usable());
    FLYT_RETURN_IF_ERROR(CheckKey("lease id", lease_id));
    auto run = db_.Change(Id(Query::kRelease), {lease_id});
    if (!run.ok()) return Fail(run.status().WithContext("release gpus of lease " + lease_id));
    return Status::Ok();
  }

  Status AppendEvent(int64_t at_ms, const std::string& kind, const std::string& body) override {
    FLYT_RETURN_IF_ERROR(Usable());
    FLYT_RETURN_IF_ERROR(CheckKey("event kind", kind));
    FLYT_RETURN_IF_ERROR(CheckText("event body", body));
    auto run = db_.Change(Id(Query::kAppendEvent),
                          {at_ms, kind, body, ClampToInt64(kind.size() + body.size())});
    if (!run.ok()) return Fail(run.status().WithContext("append event " + kind));
    return Status::Ok();
  }

  Status PutJob(const std::string& id, const std::string& body,
                std::optional<int64_t> finished_at_ms) override {
    if (!finished_at_ms) return Put(Table::kJobs, id, body);
    FLYT_RETURN_IF_ERROR(Usable());
    FLYT_RETURN_IF_ERROR(CheckKey("id", id));
    FLYT_RETURN_IF_ERROR(CheckText("body", body));
    auto run = db_.Change(Id(Query::kPutFinishedJob), {id, revision_ + 1, body, *finished_at_ms});
    if (!run.ok()) return Fail(run.status().WithContext("put " + RowName(Table::kJobs, id)));
    wrote_ = true;
    return Status::Ok();
  }

  Result<std::optional<IdempotencyRecord>> GetIdempotency(const std::string& scope,
                                                          const std::string& key) override {
    FLYT_RETURN_IF_ERROR(Usable());
    std::optional<IdempotencyRecord> found;
    auto run = db_.Run(Id(Query::kGetIdempotency), {scope, key}, [&](const SqlRow& r) {
      found = IdempotencyRecord{std::string(r.Text(0)), std::string(r.Text(1)), r.Int(2)};
    });
    if (!run.ok()) return Fail(run.status().WithContext("read idempotency key"));
    return found;
  }

  Status PutIdempotency(const std::string& scope, const std::string& key,
                        const IdempotencyRecord& record) override {
    FLYT_RETURN_IF_ERROR(Usable());
    FLYT_RETURN_IF_ERROR(CheckKey("idempotency scope", scope));
    FLYT_RETURN_IF_ERROR(CheckKey("idempotency key", key));
    FLYT_RETURN_IF_ERROR(CheckText("idempotent response", record.response));
    auto run = db_.Change(Id(Query::kPutIdempotency),
                          {scope, key, record.request_hash, record.response, record.expires_ms});
    if (!run.ok()) return Fail(run.status().WithContext("store idempotency key"));
    return Status::Ok();
  }

  Status PruneIdempotencyKeys(int64_t now_ms) override {
    FLYT_RETURN_IF_ERROR(Usable());
    auto run = db_.Change(Id(Query::kPruneIdempotency), {now_ms});
    if (!run.ok()) return Fail(run.status().WithContext("prune idempotency keys"));
    return Status::Ok();
  }

  Result<std::vector<std::string>> PruneFinishedJobs(const JobRetention& retention) override {
    FLYT_RETURN_IF_ERROR(Usable());
    // The newest finished job past the `keep` newest: it and everything older go.
    int64_t cut_ms = std::numeric_limits<int64_t>::min();
    std::string cut_id;
    auto cut = db_.Run(Id(Query::kFinishedJobsCut), {ClampToInt64(retention.keep)},
                       [&](const SqlRow& row) {
                         cut_ms = row.Int(0);
                         cut_id = std::string(row.Text(1));
                       });
    if (!cut.ok()) return Fail(cut.status().WithContext("prune jobs"));
    const int64_t limit = ClampToInt64(retention.max_jobs);
    std::vector<std::string> ids;
    if (limit > 0) {
      auto run = db_.Run(Id(Query::kJobsToPrune),
                         {retention.finished_before_ms, cut_ms, cut_id, limit},
                         [&](const SqlRow& row) { ids.emplace_back(row.Text(0)); });
      if (!run.ok()) return Fail(run.status().WithContext("prune jobs"));
    }
    if (!ids.empty()) {
      // The same selection, in the same transaction under the write lock: the same rows.
      auto run = db_.Change(Id(Query::kPruneJobs),
                            {retention.finished_before_ms, cut_ms, cut_id, limit, revision_ + 1});
      if (!run.ok()) return Fail(run.status().WithContext("prune jobs"));
      wrote_ = true;
    }
    auto purge = db_.Change(Id(Query::kPurgeJobTombstones), {retention.purge_tombstones_before_ms});
    if (!purge.ok()) return Fail(purge.status().WithContext("purge job tombstones"));
    return ids;
  }

  bool wrote() const { return wrote_; }
  const Status& failure() const { return failure_; }

 private:
  // After a failed statement PostgreSQL refuses the rest of the transaction; SQLite would go on.
  // Both refuse here, so a transaction is either applied whole or not at all.
  Status Usable() const {
    if (failure_.ok()) return Status::Ok();
    return failure_.WithContext("an earlier statement of this transaction failed");
  }

  Status Fail(Status status) {
    if (failure_.ok()) failure_ = status;
    return status;
  }

  Database& db_;
  const int64_t revision_;
  bool wrote_ = false;
  Status failure_;
};

class SqlStore final : public Store {
 public:
  explicit SqlStore(std::unique_ptr<Database> db)
      : db_(std::move(db)), describe_(db_->Describe()) {}

  // The consistency check: not under mu_ (QuickCheck has a connection of its own), so a long
  // check holds up no transaction.
  Status Check() override {
    constexpr size_t kMaxLines = 5;
    auto problems = db_->QuickCheck(kMaxLines);
    if (!problems.ok()) {
      if (StoreErrorKind(problems.status()) == std::string_view("damaged")) {
        return problems.status().WithReason(kStoreDamagedReason);
      }
      return problems.status();
    }
    if (problems->empty()) return Status::Ok();
    std::string message = describe_ + " is damaged (quick_check: ";
    for (size_t i = 0; i < problems->size(); ++i) {
      if (i > 0) message += "; ";
      std::string line = (*problems)[i];
      std::replace(line.begin(), line.end(), '\n', ' ');  // one line in a log
      message += line;
    }
    message += problems->size() >= kMaxLines ? "; ...)" : ")";
    return Status(StatusCode::kInternal, std::move(message)).WithReason(kStoreDamagedReason);
  }

  Status Migrate(OpenMode mode) {
    std::scoped_lock lock(mu_);
    Database& db = *db_;
    FLYT_RETURN_IF_ERROR(db.BeginWrite(Durability::kDurable).WithContext("migrate"));
    WriteScope scope(db);
    const Status uninitialized =
        Status(StatusCode::kFailedPrecondition,
               describe_ + " holds no flyt store (a new database, or another program's)")
            .WithReason(kStoreUninitializedReason);
    if (mode == OpenMode::kExisting) {
      FLYT_ASSIGN_OR_RETURN(bool has_schema, db.HasTable("schema_migrations"));
      if (!has_schema) return uninitialized;
    }
    FLYT_RETURN_IF_ERROR(db.ExecScript(db.dialect() == internal::Dialect::kSqlite
                                           ? internal::kSqliteBootstrapSql
                                           : internal::kPostgresBootstrapSql)
                             .WithContext("migrate"));
    int64_t current = 0;
    auto run =
        db.Run(Id(Query::kSchemaVersion), {}, [&](const SqlRow& row) { current = row.Int(0); });
    if (!run.ok()) return run.status().WithContext("migrate: read schema version");
    if (current == 0 && mode == OpenMode::kExisting) return uninitialized;
    const int latest = LatestSchemaVersion();
    if (current > latest) {
      return {StatusCode::kFailedPrecondition,
              describe_ + ": schema version " + std::to_string(current) +
                  " is newer than this flyt knows (" + std::to_string(latest) + "); upgrade flyt"};
    }
    for (const internal::Migration& migration : internal::Migrations()) {
      if (migration.version <= current) continue;
      const std::string context =
          "migration " + std::to_string(migration.version) + " (" + migration.description + ")";
      FLYT_RETURN_IF_ERROR(db.ExecScript(db.dialect() == internal::Dialect::kSqlite
                                             ? migration.sqlite_sql
                                             : migration.postgres_sql)
                               .WithContext(context));
      auto record = db.Change(Id(Query::kRecordMigration), {int64_t{migration.version}});
      if (!record.ok()) return record.status().WithContext(context);
    }
    // When the store was created: a new one now; one from before flyt recorded it, now too.
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    auto created = db.Change(Id(Query::kRecordCreation), {now_ms});
    if (!created.ok()) return created.status().WithContext("migrate: record creation");
    auto read = db.Run(Id(Query::kCreatedMs), {}, [&](const SqlRow& row) { created_ms_ = row.Int(0); });
    if (!read.ok()) return read.status().WithContext("migrate: read creation");
    FLYT_RETURN_IF_ERROR(scope.Commit(/*bump_revision=*/false).WithContext("migrate"));
    schema_version_ = latest;
    return Status::Ok();
  }

  Status Update(Durability durability, const std::function<Status(Txn&)>& fn) override {
    FLYT_RETURN_IF_ERROR(CheckNotInsideUpdate());
    std::scoped_lock lock(mu_);
    FLYT_ASSIGN_OR_RETURN(int64_t revision, db_->BeginUpdate(durability));
    WriteScope scope(*db_);
    SqlTxn txn(*db_, revision);
    Status status;
    {
      InsideUpdate inside(updating_thread_);
      status = fn(txn);
    }
    if (!status.ok()) return status;
    if (!txn.failure().ok()) return txn.failure().WithContext("not committed");
    return scope.Commit(/*bump_revision=*/txn.wrote());
  }

  Result<std::vector<Row>> List(Table table, int64_t after_seq) override {
    FLYT_RETURN_IF_ERROR(CheckNotInsideUpdate());
    std::scoped_lock lock(mu_);
    return ListRows(*db_, table, after_seq);
  }

  Result<int64_t> Revision() override {
    FLYT_RETURN_IF_ERROR(CheckNotInsideUpdate());
    std::scoped_lock lock(mu_);
    return ReadRevision(*db_);
  }

  Result<std::vector<EventRow>> Events(int64_t after_id, size_t limit) override {
    FLYT_RETURN_IF_ERROR(CheckNotInsideUpdate());
    std::vector<EventRow> events;
    if (limit == 0) return events;
    std::scoped_lock lock(mu_);
    auto run = db_->Run(Id(Query::kEvents), {after_id, ClampToInt64(limit)}, CollectEvents(events));
    if (!run.ok()) return run.status().WithContext("list events");
    return events;
  }

  Result<std::vector<EventRow>> LatestEvents(size_t limit) override {
    FLYT_RETURN_IF_ERROR(CheckNotInsideUpdate());
    std::vector<EventRow> events;
    if (limit == 0) return events;
    std::scoped_lock lock(mu_);
    auto run = db_->Run(Id(Query::kLatestEvents), {ClampToInt64(limit)}, CollectEvents(events));
    if (!run.ok()) return run.status().WithContext("list the latest events");
    return events;
  }

  Status PruneEvents(int64_t before_ms, size_t keep) override {
    FLYT_RETURN_IF_ERROR(CheckNotInsideUpdate());
    std::scoped_lock lock(mu_);
    // Under the write lock, like every write; losing a prune in a crash is harmless.
    FLYT_RETURN_IF_ERROR(db_->BeginWrite(Durability::kRelaxed));
    WriteScope scope(*db_);
    auto run = db_->Change(Id(Query::kPruneEvents), {before_ms, ClampToInt64(keep)});
    if (!run.ok()) return run.status().WithContext("prune events");
    return scope.Commit(/*bump_revision=*/false);
  }

  Status PruneEventBytes(uint64_t max_bytes) override {
    FLYT_RETURN_IF_ERROR(CheckNotInsideUpdate());
    std::scoped_lock lock(mu_);
    FLYT_RETURN_IF_ERROR(db_->BeginWrite(Durability::kRelaxed));
    WriteScope scope(*db_);
    auto run = db_->Change(Id(Query::kPruneEventBytes), {ClampToInt64(max_bytes)});
    if (!run.ok()) return run.status().WithContext("prune events by size");
    return scope.Commit(/*bump_revision=*/false);
  }

  Status Probe() override {
    FLYT_RETURN_IF_ERROR(CheckNotInsideUpdate());
    std::scoped_lock lock(mu_);
    FLYT_RETURN_IF_ERROR(db_->BeginWrite(Durability::kDurable).WithContext("probe"));
    WriteScope scope(*db_);
    auto run = db_->Change(Id(Query::kProbe), {});
    if (!run.ok()) return run.status().WithContext("probe");
    return scope.Commit(/*bump_revision=*/false).WithContext("probe");
  }

  int SchemaVersion() const override { return schema_version_; }
  int64_t CreatedMs() const override { return created_ms_; }
  std::string Describe() const override { return describe_; }

 private:
  static RowCallback CollectEvents(std::vector<EventRow>& out) {
    return [&out](const SqlRow& row) {
      EventRow event;
      event.id = row.Int(0);
      event.at_ms = row.Int(1);
      event.kind = std::string(row.Text(2));
      event.body = std::string(row.Text(3));
      out.push_back(std::move(event));
    };
  }

  // Marks the thread running an Update callback, so that a call back into the Store from it is
  // refused instead of deadlocking on mu_.
  class InsideUpdate {
   public:
    explicit InsideUpdate(std::atomic<std::thread::id>& slot) : slot_(slot) {
      slot_.store(std::this_thread::get_id());
    }
    ~InsideUpdate() { slot_.store(std::thread::id()); }
    InsideUpdate(const InsideUpdate&) = delete;
    InsideUpdate& operator=(const InsideUpdate&) = delete;

   private:
    std::atomic<std::thread::id>& slot_;
  };

  Status CheckNotInsideUpdate() const {
    if (updating_thread_.load() == std::this_thread::get_id()) {
      return {StatusCode::kFailedPrecondition,
              "the Store was called from inside an Update callback; use its Txn instead"};
    }
    return Status::Ok();
  }

  std::mutex mu_;
  std::unique_ptr<Database> db_;  // guarded by mu_
  const std::string describe_;
  int schema_version_ = 0;  // set once by Migrate, before the Store is shared
  int64_t created_ms_ = 0;  // likewise
  std::atomic<std::thread::id> updating_thread_{};
};

// The part of a URL that is safe to repeat in an error: never a password.
std::string UrlForMessage(const std::string& url) {
  const size_t colon = url.find(':');
  if (colon == std::string::npos) return "\"" + url + "\"";
  return "with scheme \"" + url.substr(0, colon) + "\"";
}

}  // namespace

bool IsStoreUnavailable(const Status& status) {
  return !status.ok() && status.reason() == kStoreUnavailableReason;
}

const char* StoreErrorKind(const Status& status) {
  const std::string& m = status.message();
  auto has = [&m](std::string_view s) { return m.find(s) != std::string::npos; };
  // The backends' own wording (sqlite_store.cc SqliteError, postgres_store.cc PostgresError).
  if (status.reason() == kStoreDamagedReason || has("the file is damaged")) return "damaged";
  if (has("the disk is full") || has("could not extend file") || has("No space left")) {
    return "disk_full";
  }
  if (has("cannot be written") || has("read-only")) return "unwritable";
  if (has("busy timeout") || has("lock timeout")) return "busy";
  if (StartsWith(m, "postgres") && IsStoreUnavailable(status)) return "connection";
  switch (status.code()) {
    case StatusCode::kAlreadyExists:
    case StatusCode::kNotFound:
    case StatusCode::kInvalidArgument:
      return "refused";
    default:
      return "other";
  }
}

Status Txn::PutJob(const std::string& id, const std::string& body, std::optional<int64_t>) {
  return Put(Table::kJobs, id, body);
}

Result<std::vector<std::string>> Txn::PruneFinishedJobs(const JobRetention&) {
  return NotSupported("this transaction cannot prune jobs");
}

Result<std::optional<IdempotencyRecord>> Txn::GetIdempotency(const std::string&,
                                                             const std::string&) {
  return NotSupported("this transaction keeps no idempotency keys");
}

Status Txn::PutIdempotency(const std::string&, const std::string&, const IdempotencyRecord&) {
  return NotSupported("this transaction keeps no idempotency keys");
}

Status Txn::PruneIdempotencyKeys(int64_t) { return Status::Ok(); }

Status Store::PruneEventBytes(uint64_t) { return Status::Ok(); }

const char* TableName(Table table) {
  switch (table) {
    case Table::kNodes:
      return "nodes";
    case Table::kClients:
      return "clients";
    case Table::kLeases:
      return "leases";
    case Table::kJobs:
      return "jobs";
    case Table::kTasks:
      return "tasks";
  }
  return "unknown";
}

int LatestSchemaVersion() { return internal::Migrations().back().version; }

Result<std::string> Store::DescribeUrl(const std::string& url) {
  if (StartsWith(url, kSqlitePrefix)) {
    const std::string path = url.substr(kSqlitePrefix.size());
    if (path == ":memory:") return std::string("sqlite::memory:");
    std::error_code ec;
    std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    if (ec) return ErrnoError(url, ec.value());
    return "sqlite:" + absolute.lexically_normal().string();
  }
  if (StartsWith(url, "postgresql://") || StartsWith(url, "postgres://")) {
    return internal::DescribePostgresUrl(url);
  }
  return InvalidArgument("unsupported store URL " + UrlForMessage(url) + "; " + kAcceptedUrls);
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& url, OpenMode mode) {
  std::unique_ptr<Database> db;
  if (StartsWith(url, kSqlitePrefix)) {
    const std::string path = url.substr(kSqlitePrefix.size());
    if (path.empty())
      return InvalidArgument("store URL \"sqlite:\" has no path; " + std::string(kAcceptedUrls));
    FLYT_ASSIGN_OR_RETURN(db, internal::OpenSqliteDatabase(path, mode == OpenMode::kExisting));
  } else if (StartsWith(url, "postgresql://") || StartsWith(url, "postgres://")) {
    FLYT_ASSIGN_OR_RETURN(db, internal::OpenPostgresDatabase(url));
  } else if (url.empty()) {
    return InvalidArgument(std::string("empty store URL; ") + kAcceptedUrls);
  } else {
    return InvalidArgument("unsupported store URL " + UrlForMessage(url) + "; " + kAcceptedUrls);
  }
  auto store = std::make_unique<SqlStore>(std::move(db));
  FLYT_RETURN_IF_ERROR(store->Check());
  FLYT_RETURN_IF_ERROR(store->Migrate(mode));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace flyt::store
