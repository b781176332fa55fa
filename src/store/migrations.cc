#include "store/migrations.h"

#include <array>

namespace flyt::store::internal {
namespace {

// Version 1: the revision counter, one document table per Table, GPU claims, the event log.
// SQLite has no BOOLEAN type but accepts the name (stored as 0/1) and the TRUE/FALSE literals.
constexpr const char* kV1Sqlite = R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);
INSERT INTO meta (key, value) VALUES ('revision', 0);

CREATE TABLE nodes (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX nodes_seq ON nodes (seq);
CREATE TABLE clients (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX clients_seq ON clients (seq);
CREATE TABLE leases (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX leases_seq ON leases (seq);
CREATE TABLE jobs (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX jobs_seq ON jobs (seq);

CREATE TABLE gpu_claims (
  gpu TEXT NOT NULL,
  lease_id TEXT NOT NULL,
  exclusive BOOLEAN NOT NULL,
  PRIMARY KEY (gpu, lease_id));
CREATE UNIQUE INDEX gpu_claims_one_exclusive ON gpu_claims (gpu) WHERE exclusive;
CREATE INDEX gpu_claims_lease ON gpu_claims (lease_id);

CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms BIGINT NOT NULL,
  kind TEXT NOT NULL,
  body TEXT NOT NULL);
CREATE INDEX events_at ON events (at_ms);
)sql";

constexpr const char* kV1Postgres = R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);
INSERT INTO meta (key, value) VALUES ('revision', 0);

CREATE TABLE nodes (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX nodes_seq ON nodes (seq);
CREATE TABLE clients (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX clients_seq ON clients (seq);
CREATE TABLE leases (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX leases_seq ON leases (seq);
CREATE TABLE jobs (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX jobs_seq ON jobs (seq);

CREATE TABLE gpu_claims (
  gpu TEXT NOT NULL,
  lease_id TEXT NOT NULL,
  exclusive BOOLEAN NOT NULL,
  PRIMARY KEY (gpu, lease_id));
CREATE UNIQUE INDEX gpu_claims_one_exclusive ON gpu_claims (gpu) WHERE exclusive;
CREATE INDEX gpu_claims_lease ON gpu_claims (lease_id);

CREATE TABLE events (
  id BIGSERIAL PRIMARY KEY,
  at_ms BIGINT NOT NULL,
  kind TEXT NOT NULL,
  body TEXT NOT NULL);
CREATE INDEX events_at ON events (at_ms);
)sql";

// Version 2: when each job finished, beside its body, indexed for retention (PruneFinishedJobs);
// and the row Probe writes. Jobs already finished get their time from the body the cluster
// manager wrote (finished_at_ms): the one place the store reads a body, once.
constexpr const char* kV2Sqlite = R"sql(
ALTER TABLE jobs ADD COLUMN finished_ms BIGINT;
UPDATE jobs SET finished_ms = CAST(json_extract(body, '$.finished_at_ms') AS INTEGER)
  WHERE NOT deleted AND json_valid(body) AND json_type(body, '$.finished_at_ms') = 'integer';
CREATE INDEX jobs_finished ON jobs (finished_ms) WHERE finished_ms IS NOT NULL;
INSERT INTO meta (key, value) VALUES ('probe', 0);
)sql";

constexpr const char* kV2Postgres = R"sql(
ALTER TABLE jobs ADD COLUMN finished_ms BIGINT;
UPDATE jobs SET finished_ms = (body::jsonb ->> 'finished_at_ms')::bigint
  WHERE NOT deleted AND jsonb_typeof(body::jsonb -> 'finished_at_ms') = 'number';
CREATE INDEX jobs_finished ON jobs (finished_ms) WHERE finished_ms IS NOT NULL;
INSERT INTO meta (key, value) VALUES ('probe', 0);
)sql";

// Version 3 (issue 13): a task's shared parts once (tasks: one document per submission, its jobs
// hold only their own values); idempotency keys of POST /allocations and POST /jobs, with the
// answer they got and when they expire; and each event's size, for retention by bytes.
constexpr const char* kV3Sqlite = R"sql(
CREATE TABLE tasks (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX tasks_seq ON tasks (seq);
CREATE TABLE idempotency_keys (
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  request_hash TEXT NOT NULL,
  response TEXT NOT NULL,
  expires_ms BIGINT NOT NULL,
  PRIMARY KEY (scope, key));
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_ms);
ALTER TABLE events ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
UPDATE events SET bytes = LENGTH(CAST(body AS BLOB)) + LENGTH(CAST(kind AS BLOB));
)sql";

constexpr const char* kV3Postgres = R"sql(
CREATE TABLE tasks (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, deleted BOOLEAN NOT NULL, body TEXT);
CREATE INDEX tasks_seq ON tasks (seq);
CREATE TABLE idempotency_keys (
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  request_hash TEXT NOT NULL,
  response TEXT NOT NULL,
  expires_ms BIGINT NOT NULL,
  PRIMARY KEY (scope, key));
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_ms);
ALTER TABLE events ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
UPDATE events SET bytes = octet_length(body) + octet_length(kind);
)sql";

constexpr std::array<Migration, 3> kMigrations = {{
    {1, "documents, revision, GPU claims, events", kV1Sqlite, kV1Postgres},
    {2, "finished time of jobs, for retention; the probe row", kV2Sqlite, kV2Postgres},
    {3, "tasks' shared parts, idempotency keys, event sizes", kV3Sqlite, kV3Postgres},
}};

}  // namespace

std::span<const Migration> Migrations() { return kMigrations; }

}  // namespace flyt::store::internal
