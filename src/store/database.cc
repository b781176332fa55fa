#include "store/database.h"

#include <array>
#include <cassert>

namespace flyt::store::internal {
namespace {

std::string TableSql(TableQuery query, const char* table) {
  std::string t(table);
  switch (query) {
    case TableQuery::kPut:
      return "INSERT INTO " + t +
             " (id, seq, deleted, body) VALUES ($1, $2, FALSE, $3)"
             " ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, deleted = FALSE,"
             " body = excluded.body";
    case TableQuery::kDelete:
      return "UPDATE " + t +
             " SET seq = $2, deleted = TRUE, body = NULL WHERE id = $1 AND NOT deleted";
    case TableQuery::kGet:
      return "SELECT body FROM " + t + " WHERE id = $1 AND NOT deleted";
    case TableQuery::kListSince:
      return "SELECT id, seq, deleted, body FROM " + t + " WHERE seq > $1 ORDER BY seq, id";
    case TableQuery::kCount:
      break;
  }
  return {};
}

// Finished jobs older than $1, or at or beyond the cut ($2, $3: the newest one past those kept).
#define FLYT_JOBS_TO_PRUNE                                                              \
  "finished_ms IS NOT NULL AND NOT deleted AND (finished_ms < $1 OR finished_ms < $2" \
  " OR (finished_ms = $2 AND id <= $3))"

const char* FixedSql(Query query) {
  switch (query) {
    case Query::kSchemaVersion:
      return "SELECT COALESCE(MAX(version), 0) FROM schema_migrations";
    case Query::kRecordMigration:
      return "INSERT INTO schema_migrations (version) VALUES ($1)";
    case Query::kGetRevision:
      return "SELECT value FROM meta WHERE key = 'revision'";
    case Query::kBumpRevision:
      return "UPDATE meta SET value = value + 1 WHERE key = 'revision'";
    case Query::kClaimConflict:
      return "SELECT lease_id FROM gpu_claims WHERE gpu = $1 AND exclusive AND lease_id <> $2 "
             "LIMIT 1";
    case Query::kClaim:
      return "INSERT INTO gpu_claims (gpu, lease_id, exclusive) VALUES ($1, $2, $3)"
             " ON CONFLICT (gpu, lease_id) DO UPDATE SET exclusive = excluded.exclusive";
    case Query::kRelease:
      return "DELETE FROM gpu_claims WHERE lease_id = $1";
    case Query::kAppendEvent:
      return "INSERT INTO events (at_ms, kind, body, bytes) VALUES ($1, $2, $3, $4)";
    case Query::kEvents:
      return "SELECT id, at_ms, kind, body FROM events WHERE id > $1 ORDER BY id LIMIT $2";
    case Query::kLatestEvents:
      return "SELECT id, at_ms, kind, body FROM (SELECT id, at_ms, kind, body FROM events "
             "ORDER BY id DESC LIMIT $1) AS recent ORDER BY id";
    case Query::kPruneEvents:
      // The (keep+1)-th newest event and everything older are outside the newest `keep`.
      return "DELETE FROM events WHERE at_ms < $1 AND id <= COALESCE("
             "(SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET $2), 0)";
    case Query::kPutFinishedJob:
      return "INSERT INTO jobs (id, seq, deleted, body, finished_ms) VALUES ($1, $2, FALSE, $3, $4)"
             " ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, deleted = FALSE,"
             " body = excluded.body, finished_ms = excluded.finished_ms";
    case Query::kFinishedJobsCut:
      return "SELECT finished_ms, id FROM jobs WHERE finished_ms IS NOT NULL AND NOT deleted"
             " ORDER BY finished_ms DESC, id DESC LIMIT 1 OFFSET $1";
    case Query::kJobsToPrune:
      return "SELECT id FROM jobs WHERE " FLYT_JOBS_TO_PRUNE " ORDER BY finished_ms, id LIMIT $4";
    case Query::kPruneJobs:
      return "UPDATE jobs SET seq = $5, deleted = TRUE, body = NULL WHERE id IN (SELECT id FROM"
             " jobs WHERE " FLYT_JOBS_TO_PRUNE " ORDER BY finished_ms, id LIMIT $4)";
    case Query::kPurgeJobTombstones:
      return "DELETE FROM jobs WHERE deleted AND finished_ms IS NOT NULL AND finished_ms < $1";
    case Query::kProbe:
      return "UPDATE meta SET value = value + 1 WHERE key = 'probe'";
    case Query::kPruneEventBytes:
      // The newest event at which the running total (newest first) passes $1, and all older.
      return "DELETE FROM events WHERE id <= COALESCE((SELECT id FROM (SELECT id, SUM(bytes)"
             " OVER (ORDER BY id DESC) AS total FROM events) AS running WHERE total > $1"
             " ORDER BY id DESC LIMIT 1), 0)";
    case Query::kGetIdempotency:
      return "SELECT request_hash, response, expires_ms FROM idempotency_keys"
             " WHERE scope = $1 AND key = $2";
    case Query::kPutIdempotency:
      return "INSERT INTO idempotency_keys (scope, key, request_hash, response, expires_ms)"
             " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope, key) DO UPDATE SET"
             " request_hash = excluded.request_hash, response = excluded.response,"
             " expires_ms = excluded.expires_ms";
    case Query::kPruneIdempotency:
      return "DELETE FROM idempotency_keys WHERE expires_ms < $1";
    case Query::kRecordCreation:
      return "INSERT INTO meta (key, value) VALUES ('created_ms', $1) ON CONFLICT (key) DO NOTHING";
    case Query::kCreatedMs:
      return "SELECT value FROM meta WHERE key = 'created_ms'";
    case Query::kCount:
      break;
  }
  return "";
}

#undef FLYT_JOBS_TO_PRUNE

std::array<std::string, kQueryCount> BuildCatalog() {
  std::array<std::string, kQueryCount> sql;
  for (int q = 0; q < static_cast<int>(Query::kCount); ++q) {
    sql[q] = FixedSql(static_cast<Query>(q));
  }
  for (int t = 0; t < kTableCount; ++t) {
    for (int q = 0; q < static_cast<int>(TableQuery::kCount); ++q) {
      const auto table = static_cast<Table>(t);
      sql[Id(static_cast<TableQuery>(q), table)] =
          TableSql(static_cast<TableQuery>(q), TableName(table));
    }
  }
  return sql;
}

}  // namespace

QueryId Id(Query query) { return static_cast<int>(query); }

QueryId Id(TableQuery query, Table table) {
  return static_cast<int>(Query::kCount) +
         static_cast<int>(table) * static_cast<int>(TableQuery::kCount) + static_cast<int>(query);
}

const std::string& QuerySql(QueryId id) {
  // Built once, then only read: every id is a constant of this file's lists.
  static const std::array<std::string, kQueryCount> kCatalog = BuildCatalog();
  assert(id >= 0 && id < kQueryCount);
  return kCatalog[static_cast<size_t>(id)];
}

}  // namespace flyt::store::internal
