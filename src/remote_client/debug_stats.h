// Asking a running flyt-gpu-server what its clients hold (the protocol's DebugStats call), for
// operators and tests: `flyt-gpu-server stats --server ENDPOINT` prints it as JSON; and asking
// it to move a client elsewhere (MigrateClient): `flyt-gpu-server migrate`.
// Thread-safe (each call opens its own connection).
#pragma once

#include <cstdint>
#include <optional>
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
  // The SM share each connected client runs with; empty from a server before protocol version 7.
  std::vector<ClientShare> shares;
};

// Connects as a client of its own (so it counts against --max-clients), asks, disconnects.
// `secret`: the server's (--secret-file), when it was started with one.
[[nodiscard]] Result<ServerStats> FetchStats(const Endpoint& server,
                                             const std::string& secret = "");

// {"allocated_bytes":N,"memory_limit_bytes":N,"clients":[{"client_id":1,"label":"...",
//  "connected":true,"allocations":N,...,"transport":"shm","peer_pid":N,"peer_uid":N,
//  "arena_bytes":N,"arena_copy_bytes":N,"sm_count_granted":N}, ...],"connections":{...}}
// (the transport fields only from a server of protocol version 5 or later, sm_count_granted,
// for connected clients, from version 7; memory_limit_bytes is the limit now, after a resize).
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

// What a resize of a running server did (ResizeServer; `flyt-gpu-server resize`).
struct ResizeOutcome {
  uint32_t sm_count_total = 0;      // the device's SMs
  uint32_t sm_count_asked = 0;      // 0: the SM share was not changed
  uint32_t sm_count_granted = 0;    // what each client now runs with (or will at its next call)
  uint64_t memory_limit_bytes = 0;  // the server's memory limit after the resize (0: none)
  uint64_t allocated_bytes = 0;     // held by the clients now
  uint32_t clients = 0;             // connected clients when asked
  uint32_t clients_applied = 0;     // of those, the ones that applied it at a clean point in time
  uint32_t clients_pending = 0;     // the ones that made no call in time: they apply it at their next
  double pause_ms_max = 0;          // the longest pause a client saw while applying it
  std::string message;
};

// Asks the server (over its Unix socket, as its own user or root) to give its clients a new SM
// share (`sm_count`) and/or memory limit (`memory_limit_mb`; 0: no limit), applied by each
// client at its next clean point, waiting up to `timeout_ms` for the connected clients to apply
// it. Errors: InvalidArgument with the server's reason (a limit below what is allocated now, an
// SM count outside 1..the device's, TCP, another user), NotSupported from an older server.
[[nodiscard]] Result<ResizeOutcome> RequestResize(const Endpoint& server,
                                                  const std::string& secret,
                                                  std::optional<uint32_t> sm_count,
                                                  std::optional<uint64_t> memory_limit_mb,
                                                  uint32_t timeout_ms);
// {"sm_count_total":N,"sm_count_asked":N,"sm_count_granted":N,"memory_limit_mb":N,
//  "allocated_mb":N,"clients":N,"clients_applied":N,"clients_pending":N,"pause_ms_max":F,
//  "message":"..."}
std::string ResizeToJson(const ResizeOutcome& outcome);

}  // namespace flyt::remote
