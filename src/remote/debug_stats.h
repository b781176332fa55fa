// Asking a running flyt-gpu-server what its clients hold (the protocol's DebugStats call), for
// operators and tests: `flyt-gpu-server stats --server ENDPOINT` prints it as JSON; and asking
// it to move a client elsewhere (MigrateClient): `flyt-gpu-server migrate`.
// Thread-safe (each call opens its own connection).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "remote/protocol.h"
#include "remote/socket.h"

namespace flyt::remote {

struct ServerStats {
  DebugStatsReply clients;
  // Connections accepted, turned away and closed, by reason (ServerCounterName); empty from a
  // server without the ServerCounters call.
  std::vector<NamedValue> counters;
  // How each client's bytes travel; empty from a server before protocol version 5.
  std::vector<ClientTransport> transports;
};

// Connects as a client of its own (so it counts against --max-clients), asks, disconnects.
// `secret`: the server's (--secret-file), when it was started with one.
[[nodiscard]] Result<ServerStats> FetchStats(const Endpoint& server,
                                             const std::string& secret = "");

// {"allocated_bytes":N,"memory_limit_bytes":N,"clients":[{"client_id":1,"label":"...",
//  "connected":true,"allocations":N,...,"transport":"shm","peer_pid":N,"peer_uid":N,
//  "arena_bytes":N,"arena_copy_bytes":N}, ...],"connections":{"accepted":N,...}}
// (the transport fields only from a server of protocol version 5 or later).
std::string StatsToJson(const ServerStats& stats);

// Asks the server to move client `client_id` to the server at `to` (its secret `to_secret`),
// waiting up to `timeout` for the outcome (MigrateClient; `flyt-gpu-server migrate`).
[[nodiscard]] Result<MigrateClientReply> RequestMigration(const Endpoint& server,
                                                          const std::string& secret,
                                                          uint64_t client_id,
                                                          const std::string& to,
                                                          const std::string& to_secret,
                                                          uint32_t timeout_ms);
// {"outcome":"moved","message":"...","client_id":N,"new_client_id":N,"bytes":N,"pause_ms":F}
std::string MigrationToJson(uint64_t client_id, const MigrateClientReply& reply);

}  // namespace flyt::remote
