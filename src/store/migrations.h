// The store's schema history: an ordered list of migrations, each written once per dialect.
//
// A database records the versions applied to it in schema_migrations(version, applied_at). Open()
// takes the write lock, creates that table if needed, applies every migration newer than the
// recorded version in order (all in one transaction) and refuses a database whose version is newer
// than the last one listed here. A migration, once released, is never edited: a change to the
// schema (a new Table, a column) is a new entry appended to the list. Pure data; thread-safe.
#pragma once

#include <span>

namespace flyt::store::internal {

struct Migration {
  int version;  // 1, 2, 3, ... without gaps
  const char* description;
  const char* sqlite_sql;
  const char* postgres_sql;
};

// In version order.
std::span<const Migration> Migrations();

// Creates schema_migrations when it does not exist (both dialects accept it).
inline constexpr const char* kSqliteBootstrapSql =
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY,"
    " applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)";
inline constexpr const char* kPostgresBootstrapSql =
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY,"
    " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())";

}  // namespace flyt::store::internal
