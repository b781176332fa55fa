#include "store/postgres_store.h"

#include <libpq-fe.h>

#include <array>
#include <charconv>
#include <cstring>
#include <string>
#include <vector>

#include "common/strings.h"

namespace flyt::store::internal {
namespace {

struct ConnCloser {
  void operator()(PGconn* conn) const { PQfinish(conn); }
};
struct ResultClearer {
  void operator()(PGresult* result) const { PQclear(result); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnCloser>;
using ResultPtr = std::unique_ptr<PGresult, ResultClearer>;

#define FLYT_PG_LOCK_KEY_TEXT "7380407429238712178"
static_assert(kAdvisoryLockKey == 7380407429238712178);

// The lock waits at most as long as SQLite's busy timeout; its timeout is kUnavailable.
constexpr const char* kBeginDurableSql =
    "BEGIN; SET LOCAL lock_timeout = '10s'; "
    "SELECT pg_advisory_xact_lock(" FLYT_PG_LOCK_KEY_TEXT ")";
constexpr const char* kBeginRelaxedSql =
    "BEGIN; SET LOCAL lock_timeout = '10s'; SET LOCAL synchronous_commit = off; "
    "SELECT pg_advisory_xact_lock(" FLYT_PG_LOCK_KEY_TEXT ")";
#undef FLYT_PG_LOCK_KEY_TEXT

// libpq's messages end in a newline and continue on tab-indented lines: make them one line.
std::string OneLine(std::string_view text) {
  std::string out;
  for (char c : Trim(text)) {
    if (c == '\n') {
      out += "; ";
    } else if (c != '\t' && c != '\r') {
      out += c;
    }
  }
  return out;
}

StatusCode CodeForSqlState(std::string_view state) {
  if (state == "23505") return StatusCode::kAlreadyExists;  // unique_violation
  if (state == "40001" || state == "40P01" || state == "55P03") {
    return StatusCode::kUnavailable;  // serialization_failure, deadlock, lock_not_available
  }
  // Connection exception, operator intervention (shutdown), insufficient resources (disk full,
  // out of memory, too many connections), a read-only server (a standby): cannot write now.
  if (StartsWith(state, "08") || StartsWith(state, "57P") || StartsWith(state, "53") ||
      state == "25006") {
    return StatusCode::kUnavailable;
  }
  if (StartsWith(state, "22")) return StatusCode::kInvalidArgument;    // data exception
  return StatusCode::kInternal;
}

void IgnoreNotice(void*, const char*) {
  // "relation already exists, skipping" and the like: libpq would print them on stderr.
}

class PostgresRow final : public SqlRow {
 public:
  PostgresRow(const PGresult* result, int row) : result_(result), row_(row) {}
  int64_t Int(int column) const override {
    std::string_view text = Text(column);
    int64_t value = 0;
    std::from_chars(text.data(), text.data() + text.size(), value);
    return value;
  }
  bool Bool(int column) const override {
    std::string_view text = Text(column);
    return !text.empty() && (text[0] == 't' || text[0] == '1');
  }
  bool IsNull(int column) const override { return PQgetisnull(result_, row_, column) != 0; }
  std::string_view Text(int column) const override {
    return {PQgetvalue(result_, row_, column),
            static_cast<size_t>(PQgetlength(result_, row_, column))};
  }

 private:
  const PGresult* result_;
  int row_;
};

class PostgresDatabase final : public Database {
 public:
  PostgresDatabase(ConnPtr conn, std::string describe)
      : conn_(std::move(conn)), describe_(std::move(describe)) {
    PQsetNoticeProcessor(conn_.get(), IgnoreNotice, nullptr);
  }

  Dialect dialect() const override { return Dialect::kPostgres; }
  std::string Describe() const override { return describe_; }

  Status BeginWrite(Durability durability) override {
    FLYT_RETURN_IF_ERROR(EnsureConnected());
    ResultPtr result(PQexec(
        conn_.get(), durability == Durability::kDurable ? kBeginDurableSql : kBeginRelaxedSql));
    if (PQresultStatus(result.get()) != PGRES_TUPLES_OK) {
      Status error = PostgresError(describe_, conn_.get(), result.get());
      Rollback();
      return error;
    }
    in_write_ = true;
    return Status::Ok();
  }

  Result<int64_t> BeginUpdate(Durability durability) override {
    FLYT_RETURN_IF_ERROR(EnsureConnected());
    // One round trip: PQexec runs the statements in order and returns the last one's result.
    const std::string sql =
        std::string(durability == Durability::kDurable ? kBeginDurableSql : kBeginRelaxedSql) +
        "; " + QuerySql(Id(Query::kGetRevision));
    ResultPtr result(PQexec(conn_.get(), sql.c_str()));
    if (PQresultStatus(result.get()) != PGRES_TUPLES_OK || PQntuples(result.get()) != 1) {
      Status error = PQresultStatus(result.get()) == PGRES_TUPLES_OK
                         ? Internal(describe_ + ": the revision row is missing from table meta")
                         : PostgresError(describe_, conn_.get(), result.get());
      Rollback();
      return error;
    }
    in_write_ = true;
    return PostgresRow(result.get(), 0).Int(0);
  }

  Status Commit(bool bump_revision) override {
    in_write_ = false;
    const std::string sql =
        bump_revision ? QuerySql(Id(Query::kBumpRevision)) + "; COMMIT" : std::string("COMMIT");
    ResultPtr result(PQexec(conn_.get(), sql.c_str()));
    if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
      return PostgresError(describe_ + ": commit", conn_.get(), result.get());
    }
    // COMMIT of a transaction that had failed is a ROLLBACK, reported as success.
    if (std::strcmp(PQcmdStatus(result.get()), "COMMIT") != 0) {
      return Internal(describe_ + ": the server rolled the transaction back");
    }
    return Status::Ok();
  }

  void Rollback() override {
    in_write_ = false;
    if (PQstatus(conn_.get()) != CONNECTION_OK) return;  // the server has rolled it back
    if (PQtransactionStatus(conn_.get()) == PQTRANS_IDLE) return;
    ResultPtr result(PQexec(conn_.get(), "ROLLBACK"));
  }

  Status ExecScript(const std::string& sql) override {
    FLYT_RETURN_IF_ERROR(UsableConnection());
    ResultPtr result(PQexec(conn_.get(), sql.c_str()));
    ExecStatusType status = PQresultStatus(result.get());
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      return PostgresError(describe_, conn_.get(), result.get());
    }
    return Status::Ok();
  }

  Result<bool> HasTable(const std::string& name) override {
    FLYT_RETURN_IF_ERROR(UsableConnection());
    const std::string sql = "SELECT to_regclass('" + name + "') IS NOT NULL";
    ResultPtr result(PQexec(conn_.get(), sql.c_str()));
    if (PQresultStatus(result.get()) != PGRES_TUPLES_OK || PQntuples(result.get()) != 1) {
      return PostgresError(describe_, conn_.get(), result.get());
    }
    return PostgresRow(result.get(), 0).Bool(0);
  }

  Result<std::vector<std::string>> QuickCheck(size_t) override {
    // The server checks its own pages (and a lost connection is an outage of its own).
    return std::vector<std::string>();
  }

  Result<int64_t> Run(QueryId id, std::initializer_list<SqlParam> params,
                      const RowCallback& on_row) override {
    FLYT_RETURN_IF_ERROR(UsableConnection());
    const std::string name = "flyt_" + std::to_string(id);
    if (!prepared_[static_cast<size_t>(id)]) {
      ResultPtr result(PQprepare(conn_.get(), name.c_str(), QuerySql(id).c_str(), 0, nullptr));
      if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
        return PostgresError(describe_, conn_.get(), result.get());
      }
      prepared_[static_cast<size_t>(id)] = true;
    }
    // Text format throughout: the server converts each value to the type the statement needs.
    std::vector<std::string> texts;
    texts.reserve(params.size());
    for (const SqlParam& param : params) {
      if (const auto* i = std::get_if<int64_t>(&param)) {
        texts.push_back(std::to_string(*i));
      } else if (const auto* b = std::get_if<bool>(&param)) {
        texts.emplace_back(*b ? "t" : "f");
      } else {
        texts.emplace_back(std::get<std::string_view>(param));
      }
    }
    std::vector<const char*> values;
    values.reserve(texts.size());
    for (const std::string& text : texts) values.push_back(text.c_str());
    ResultPtr result(PQexecPrepared(conn_.get(), name.c_str(), static_cast<int>(values.size()),
                                    values.data(), nullptr, nullptr, 0));
    switch (PQresultStatus(result.get())) {
      case PGRES_TUPLES_OK:
        if (on_row) {
          const int rows = PQntuples(result.get());
          for (int row = 0; row < rows; ++row) on_row(PostgresRow(result.get(), row));
        }
        return int64_t{0};
      case PGRES_COMMAND_OK: {
        const char* tuples = PQcmdTuples(result.get());
        int64_t changed = 0;
        std::from_chars(tuples, tuples + std::strlen(tuples), changed);
        return changed;
      }
      default:
        return PostgresError(describe_, conn_.get(), result.get());
    }
  }

 private:
  // Outside a write transaction a lost connection is re-established; inside one, the
  // transaction is gone with it and the Update fails.
  Status UsableConnection() {
    if (PQstatus(conn_.get()) == CONNECTION_OK) return Status::Ok();
    if (in_write_) {
      return Unavailable(describe_ + ": connection lost during the transaction")
          .WithReason(kStoreUnavailableReason);
    }
    return EnsureConnected();
  }

  Status EnsureConnected() {
    if (PQstatus(conn_.get()) == CONNECTION_OK) return Status::Ok();
    PQreset(conn_.get());
    prepared_.fill(false);  // a new session has none of the old one's statements
    if (PQstatus(conn_.get()) != CONNECTION_OK) {
      return Unavailable(describe_ + ": reconnect: " + OneLine(PQerrorMessage(conn_.get())))
          .WithReason(kStoreUnavailableReason);
    }
    return Status::Ok();
  }

  ConnPtr conn_;
  std::string describe_;
  std::array<bool, kQueryCount> prepared_{};
  bool in_write_ = false;
};

// "postgresql://host:port/db" from the URL's parts: the user and password are left out.
Result<std::string> DescribeUrl(const std::string& url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    std::string message = error != nullptr ? OneLine(error) : "out of memory";
    PQfreemem(error);
    return InvalidArgument("bad PostgreSQL URL: " + message);
  }
  std::string host, port, dbname;
  for (PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
    if (option->val == nullptr) continue;
    std::string_view keyword = option->keyword;
    if (keyword == "host") host = option->val;
    if (keyword == "hostaddr" && host.empty()) host = option->val;
    if (keyword == "port") port = option->val;
    if (keyword == "dbname") dbname = option->val;
  }
  PQconninfoFree(options);
  std::string out = "postgresql://" + (host.empty() ? std::string("localhost") : host);
  if (!port.empty()) out += ":" + port;
  out += "/" + dbname;
  return out;
}

}  // namespace

Result<std::string> DescribePostgresUrl(const std::string& url) { return DescribeUrl(url); }

Status PostgresError(std::string_view context, const pg_conn* conn, const pg_result* result) {
  std::string message(context);
  message += ": ";
  const char* primary =
      result != nullptr ? PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  if (PQstatus(conn) != CONNECTION_OK) {
    message += "connection lost: ";
    message += OneLine(PQerrorMessage(conn));
    return Unavailable(std::move(message)).WithReason(kStoreUnavailableReason);
  }
  if (primary == nullptr) {
    // No server error: libpq's own (out of memory, a protocol problem).
    message += OneLine(PQerrorMessage(conn));
    return Internal(std::move(message));
  }
  message += primary;
  if (const char* detail = PQresultErrorField(result, PG_DIAG_MESSAGE_DETAIL)) {
    message += " (";
    message += OneLine(detail);
    message += ")";
  }
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  Status status(CodeForSqlState(state != nullptr ? state : ""), std::move(message));
  if (status.code() == StatusCode::kUnavailable) return status.WithReason(kStoreUnavailableReason);
  return status;
}

Result<std::unique_ptr<Database>> OpenPostgresDatabase(const std::string& url) {
  FLYT_ASSIGN_OR_RETURN(std::string describe, DescribeUrl(url));
  // The URL comes last, so its own settings (?connect_timeout=...) override these defaults.
  const char* const keywords[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* const values[] = {"10", "flyt", url.c_str(), nullptr};
  ConnPtr conn(PQconnectdbParams(keywords, values, /*expand_dbname=*/1));
  if (conn == nullptr) return Internal(describe + ": connect: out of memory");
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    return Unavailable(describe + ": connect: " + OneLine(PQerrorMessage(conn.get())))
        .WithReason(kStoreUnavailableReason);
  }
  // ON CONFLICT and partial unique indexes as used here need 9.5.
  if (PQserverVersion(conn.get()) < 90500) {
    return Status(StatusCode::kFailedPrecondition, describe + ": PostgreSQL " +
                                                       std::to_string(PQserverVersion(conn.get())) +
                                                       " is too old; flyt needs 9.5 or newer");
  }
  return std::unique_ptr<Database>(std::make_unique<PostgresDatabase>(std::move(conn), describe));
}

}  // namespace flyt::store::internal
