// The PostgreSQL backend of the Store (see database.h), for several manager replicas sharing one
// database: one libpq connection, statements prepared once per session, and a transaction-scoped
// advisory lock (one fixed key for flyt, per database) as the cluster-wide write lock, taken at
// the start of every write transaction and waited for at most 10 s. kRelaxed commits set
// synchronous_commit off for that transaction only; kDurable commits keep the server's setting (on
// unless an administrator chose otherwise).
//
// A lost connection fails the call in progress with kUnavailable; the next call reconnects
// (PQreset) and prepares its statements again.
//
// Not thread-safe (the Store serialises calls).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "store/database.h"

struct pg_conn;
struct pg_result;

namespace flyt::store::internal {

// The key of flyt's advisory lock ("flyt-mgr" in ASCII).
inline constexpr int64_t kAdvisoryLockKey = 0x666c79742d6d6772;

// "postgresql://host:port/db" for a libpq connection URI: never the user or password.
Result<std::string> DescribePostgresUrl(const std::string& url);

// `url` is a libpq connection URI (postgresql://... or postgres://...).
Result<std::unique_ptr<Database>> OpenPostgresDatabase(const std::string& url);

// The Status for a failed libpq call: "<context>: <the server's or libpq's message>". A lost
// connection, SQLSTATE class 08 (connection), 53 (disk full, out of memory, too many connections),
// 57P0x (shutdown), 25006 (a read-only server), a serialisation failure, a deadlock or a lock
// timeout is kUnavailable with reason "store_unavailable" (try again later), a unique violation
// kAlreadyExists, bad data kInvalidArgument, anything else kInternal. `result` may be null (the
// message is then the connection's).
Status PostgresError(std::string_view context, const pg_conn* conn, const pg_result* result);

}  // namespace flyt::store::internal
