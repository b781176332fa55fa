#include "store/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>
#include <optional>
#include <system_error>

#include "common/unique_fd.h"

namespace flyt::store::internal {
namespace {

constexpr int kBusyTimeoutMs = 10000;
constexpr const char* kMemory = ":memory:";

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// Statements outside the catalog: transaction control and settings.
enum class Control : int { kBegin, kCommit, kRollback, kSyncFull, kSyncNormal, kCount };

const char* ControlSql(Control control) {
  switch (control) {
    case Control::kBegin:
      return "BEGIN IMMEDIATE";
    case Control::kCommit:
      return "COMMIT";
    case Control::kRollback:
      return "ROLLBACK";
    case Control::kSyncFull:
      return "PRAGMA synchronous = FULL";
    case Control::kSyncNormal:
      return "PRAGMA synchronous = NORMAL";
    case Control::kCount:
      break;
  }
  return "";
}

// The catalog writes parameters as `$N`; SQLite's numbered form is `?N` (its `$N` would be a
// named parameter, numbered by first appearance rather than by N).
std::string ToSqliteParameters(const std::string& sql) {
  std::string out = sql;
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '$' && std::isdigit(static_cast<unsigned char>(out[i + 1]))) out[i] = '?';
  }
  return out;
}

class SqliteRow final : public SqlRow {
 public:
  explicit SqliteRow(sqlite3_stmt* stmt) : stmt_(stmt) {}
  int64_t Int(int column) const override { return sqlite3_column_int64(stmt_, column); }
  bool Bool(int column) const override { return sqlite3_column_int64(stmt_, column) != 0; }
  bool IsNull(int column) const override {
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
  }
  std::string_view Text(int column) const override {
    const unsigned char* text = sqlite3_column_text(stmt_, column);
    if (text == nullptr) return {};
    return {reinterpret_cast<const char*>(text),
            static_cast<size_t>(sqlite3_column_bytes(stmt_, column))};
  }

 private:
  sqlite3_stmt* stmt_;
};

// Leaves a statement ready for its next use, and drops the bound pointers to the caller's strings.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~ResetOnExit() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  sqlite3_stmt* stmt_;
};

class SqliteDatabase final : public Database {
 public:
  // `file`: the database's path; empty for a private in-memory database.
  SqliteDatabase(DbPtr db, std::string describe, std::string file)
      : db_(std::move(db)), describe_(std::move(describe)), file_(std::move(file)) {}

  Dialect dialect() const override { return Dialect::kSqlite; }
  std::string Describe() const override { return describe_; }

  Status Configure(bool in_memory) {
    sqlite3_extended_result_codes(db_.get(), 1);
    sqlite3_busy_timeout(db_.get(), kBusyTimeoutMs);
    FLYT_RETURN_IF_ERROR(ExecScript("PRAGMA foreign_keys = ON"));
    // The first statement that reads the file: a damaged file is refused here. Switching a new
    // file to WAL needs it to itself, and SQLite answers "locked" at once (without its busy
    // handler) while another connection opens it at the same moment: retry for the busy timeout.
    std::string mode;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
    while (true) {
      Status s = StepText("PRAGMA journal_mode = WAL", &mode);
      if (s.ok()) break;
      if (s.code() != StatusCode::kUnavailable || std::chrono::steady_clock::now() > give_up) {
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!in_memory && mode != "wal") {
      return Status(StatusCode::kFailedPrecondition,
                    describe_ + ": cannot use write-ahead logging (journal_mode is " + mode + ")");
    }
    return Status::Ok();
  }

  Status BeginWrite(Durability durability) override {
    if (synchronous_ != durability) {
      FLYT_RETURN_IF_ERROR(StepControl(durability == Durability::kDurable ? Control::kSyncFull
                                                                          : Control::kSyncNormal));
      synchronous_ = durability;
    }
    return StepControl(Control::kBegin);
  }

  Result<int64_t> BeginUpdate(Durability durability) override {
    FLYT_RETURN_IF_ERROR(BeginWrite(durability));
    std::optional<int64_t> revision;
    auto run = Run(Id(Query::kGetRevision), {}, [&](const SqlRow& row) { revision = row.Int(0); });
    if (!run.ok() || !revision) {
      Rollback();
      if (!run.ok()) return run.status();
      return Internal(describe_ + ": the revision row is missing from table meta");
    }
    return *revision;
  }

  Status Commit(bool bump_revision) override {
    if (bump_revision) {
      auto run = Change(Id(Query::kBumpRevision), {});
      if (!run.ok()) return run.status();
    }
    return StepControl(Control::kCommit);
  }

  void Rollback() override {
    // A failed COMMIT may leave the transaction open; a statement error may already have ended it.
    if (sqlite3_get_autocommit(db_.get()) == 0) (void)StepControl(Control::kRollback);
  }

  Status ExecScript(const std::string& sql) override {
    int rc = sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return SqliteError(describe_, db_.get(), rc);
    return Status::Ok();
  }

  Result<bool> HasTable(const std::string& name) override {
    std::string count;
    FLYT_RETURN_IF_ERROR(StepText(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '" + name + "'",
        &count));
    return count != "0" && !count.empty();
  }

  Result<std::vector<std::string>> QuickCheck(size_t max_lines) override {
    // A private in-memory database has only the one connection, and no disk to damage.
    if (file_.empty()) return std::vector<std::string>();
    sqlite3* raw = nullptr;
    int rc = sqlite3_open_v2(file_.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                             nullptr);
    DbPtr db(raw);
    if (rc != SQLITE_OK) return SqliteError(describe_ + ": quick_check: open", db.get(), rc);
    sqlite3_extended_result_codes(db.get(), 1);
    sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);
    const std::string sql = "PRAGMA quick_check(" + std::to_string(max_lines) + ")";
    sqlite3_stmt* raw_stmt = nullptr;
    rc = sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &raw_stmt, nullptr);
    StmtPtr stmt(raw_stmt);
    if (rc != SQLITE_OK) return SqliteError(describe_ + ": quick_check", db.get(), rc);
    std::vector<std::string> problems;
    for (;;) {
      rc = sqlite3_step(stmt.get());
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return SqliteError(describe_ + ": quick_check", db.get(), rc);
      std::string line(SqliteRow(stmt.get()).Text(0));
      if (line != "ok") problems.push_back(std::move(line));
    }
    return problems;
  }

  Result<int64_t> Run(QueryId id, std::initializer_list<SqlParam> params,
                      const RowCallback& on_row) override {
    StmtPtr& slot = statements_[static_cast<size_t>(id)];
    if (slot == nullptr) {
      FLYT_ASSIGN_OR_RETURN(slot, Prepare(ToSqliteParameters(QuerySql(id))));
    }
    sqlite3_stmt* stmt = slot.get();
    ResetOnExit reset(stmt);
    int index = 1;
    for (const SqlParam& param : params) {
      int rc = std::visit(
          [&](const auto& value) {
            using T = std::decay_t<decltype(value)>;
            if constexpr (std::is_same_v<T, int64_t>) {
              return sqlite3_bind_int64(stmt, index, value);
            } else if constexpr (std::is_same_v<T, bool>) {
              return sqlite3_bind_int(stmt, index, value ? 1 : 0);
            } else {
              // SQLITE_STATIC: the caller's string outlives the statement's use (reset on exit).
              // A null pointer would bind NULL rather than an empty string.
              return sqlite3_bind_text64(stmt, index, value.data() != nullptr ? value.data() : "",
                                         value.size(), SQLITE_STATIC, SQLITE_UTF8);
            }
          },
          param);
      if (rc != SQLITE_OK) return SqliteError(describe_, db_.get(), rc);
      ++index;
    }
    for (;;) {
      int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return SqliteError(describe_, db_.get(), rc);
      if (on_row) on_row(SqliteRow(stmt));
    }
    return static_cast<int64_t>(sqlite3_changes64(db_.get()));
  }

 private:
  Result<StmtPtr> Prepare(const std::string& sql) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v3(db_.get(), sql.c_str(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    StmtPtr stmt(raw);
    if (rc != SQLITE_OK) return SqliteError(describe_, db_.get(), rc);
    return stmt;
  }

  Status StepControl(Control control) {
    StmtPtr& slot = control_[static_cast<size_t>(control)];
    if (slot == nullptr) {
      FLYT_ASSIGN_OR_RETURN(slot, Prepare(ControlSql(control)));
    }
    ResetOnExit reset(slot.get());
    int rc;
    while ((rc = sqlite3_step(slot.get())) == SQLITE_ROW) {
    }
    if (rc != SQLITE_DONE) return SqliteError(describe_, db_.get(), rc);
    return Status::Ok();
  }

  // Runs a one-off statement and returns the first column of its first row.
  Status StepText(const std::string& sql, std::string* out) {
    FLYT_ASSIGN_OR_RETURN(StmtPtr stmt, Prepare(sql));
    int rc = sqlite3_step(stmt.get());
    if (rc == SQLITE_ROW) {
      *out = std::string(SqliteRow(stmt.get()).Text(0));
      return Status::Ok();
    }
    if (rc == SQLITE_DONE) return Status::Ok();
    return SqliteError(describe_, db_.get(), rc);
  }

  // Declared first: destroyed after the statements that belong to it.
  DbPtr db_;
  const std::string describe_;
  const std::string file_;
  std::array<StmtPtr, kQueryCount> statements_;
  std::array<StmtPtr, static_cast<size_t>(Control::kCount)> control_;
  std::optional<Durability> synchronous_;  // the level set on the connection, once one is
};

StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return StatusCode::kUnavailable;
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return StatusCode::kAlreadyExists;
      }
      return StatusCode::kInternal;
    // The database cannot be written now; it may be again (space freed, the file made writable,
    // the disk back). Nothing was written.
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return StatusCode::kUnavailable;
    case SQLITE_AUTH:
      return StatusCode::kFailedPrecondition;
    default:
      return StatusCode::kInternal;
  }
}

// Creates the file with mode 0600 (SQLite would use 0644) and its parent directories.
Status CreateDatabaseFile(const std::filesystem::path& path, const std::string& describe) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    return ErrnoError(describe + ": create directory " + path.parent_path().string(), ec.value());
  }
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoError(describe + ": open", errno);
  return Status::Ok();
}

}  // namespace

Status SqliteError(std::string_view context, sqlite3* db, int rc) {
  std::string message(context);
  message += ": ";
  // The connection's message is more precise ("no such table: x") but describes its most recent
  // failure, which is rc's only when the codes agree.
  if (db != nullptr && sqlite3_extended_errcode(db) == rc) {
    message += sqlite3_errmsg(db);
  } else {
    message += sqlite3_errstr(rc);
  }
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      message += " (the file is damaged or is not an SQLite database)";
      break;
    case SQLITE_BUSY:
      message += " (another connection held the write lock for longer than the busy timeout)";
      break;
    case SQLITE_FULL:
      message += " (the disk is full)";
      break;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      message += " (the database file or its directory cannot be written)";
      break;
    default:
      break;
  }
  Status status(CodeFor(rc), std::move(message));
  if (status.code() == StatusCode::kUnavailable) return status.WithReason(kStoreUnavailableReason);
  return status;
}

Result<std::unique_ptr<Database>> OpenSqliteDatabase(const std::string& path, bool must_exist) {
  const bool in_memory = path == kMemory;
  std::string file = path;
  std::string describe = "sqlite::memory:";
  if (!in_memory) {
    std::error_code ec;
    std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    if (ec) return ErrnoError("sqlite:" + path, ec.value());
    file = absolute.lexically_normal().string();
    describe = "sqlite:" + file;
    if (must_exist) {
      // Looked at before SQLite opens it: SQLite takes an empty file for a new database.
      std::error_code size_ec;
      const auto size = std::filesystem::file_size(file, size_ec);
      if (size_ec == std::errc::no_such_file_or_directory) {
        return Status(StatusCode::kFailedPrecondition, describe + ": no such file")
            .WithReason(kStoreMissingReason);
      }
      if (size_ec) return ErrnoError(describe, size_ec.value());
      if (size == 0) {
        return Status(StatusCode::kFailedPrecondition, describe + " is an empty file (0 bytes)")
            .WithReason(kStoreUninitializedReason);
      }
    }
    FLYT_RETURN_IF_ERROR(CreateDatabaseFile(file, describe));
  }
  sqlite3* raw = nullptr;
  // The Store serialises calls on its own mutex: SQLite's per-connection mutex is not needed.
  int rc =
      sqlite3_open_v2(file.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr db(raw);  // set even when the open failed, and must be closed then too
  if (rc != SQLITE_OK) return SqliteError(describe + ": open", db.get(), rc);
  auto database =
      std::make_unique<SqliteDatabase>(std::move(db), describe, in_memory ? "" : file);
  FLYT_RETURN_IF_ERROR(database->Configure(in_memory));
  return std::unique_ptr<Database>(std::move(database));
}

}  // namespace flyt::store::internal
