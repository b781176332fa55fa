// Asking a running flyt-gpu-server what its clients hold (the protocol's DebugStats call), for
// operators and tests: `flyt-gpu-server stats --server ENDPOINT` prints it as JSON.
// Thread-safe (each call opens its own connection).
#pragma once

#include <string>

#include "common/status.h"
#include "remote/protocol.h"
#include "remote/socket.h"

namespace flyt::remote {

// Connects as a client of its own, asks, disconnects.
[[nodiscard]] Result<DebugStatsReply> FetchStats(const Endpoint& server);

// {"allocated_bytes":N,"memory_limit_bytes":N,"clients":[{"client_id":1,"label":"...",
//  "connected":true,"allocations":N,...}, ...]}
std::string StatsToJson(const DebugStatsReply& stats);

}  // namespace flyt::remote
