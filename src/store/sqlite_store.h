// The SQLite backend of the Store (see database.h): one connection to a file in WAL mode, or to a
// private in-memory database. BEGIN IMMEDIATE is the cluster-wide write lock, so several processes
// sharing a file apply their Updates one after the other, each waiting up to the busy timeout for
// the others; readers never wait for a writer. Prepared statements live as long as the connection.
// The synchronous level follows each Update's durability (FULL or NORMAL), set only when it
// changes.
//
// Not thread-safe (the Store serialises calls).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "store/database.h"

struct sqlite3;

namespace flyt::store::internal {

// `path` is a file path (parent directories are created; a new file gets mode 0600) or ":memory:".
// With `must_exist`, a missing file is refused (reason store_missing) and so is an empty one
// (store_uninitialized), before SQLite would take either for a new database.
Result<std::unique_ptr<Database>> OpenSqliteDatabase(const std::string& path,
                                                     bool must_exist = false);

// The Status for a failed SQLite call: "<context>: <SQLite's message>". A database that cannot be
// written now — busy past the timeout, a full disk, an I/O error, a read-only or unopenable file —
// is kUnavailable with reason "store_unavailable"; a unique-constraint violation kAlreadyExists,
// anything else kInternal. `db` may be null.
Status SqliteError(std::string_view context, sqlite3* db, int rc);

}  // namespace flyt::store::internal
