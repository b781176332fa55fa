#include "remote_client/debug_stats.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "remote_client/client.h"

namespace flyt::remote {

Result<ServerStats> FetchStats(const Endpoint& server, const std::string& secret) {
  ClientOptions options;
  options.secret = secret;
  options.label = "flyt-gpu-server stats";
  options.pid = static_cast<uint32_t>(::getpid());
  FLYT_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(server, options));
  if ((conn->server().capabilities & kCapDebugStats) == 0) {
    return NotSupported("the server does not offer debug statistics");
  }
  CudaResult<DebugStatsReply> reply = conn->DebugStats({});
  if (!reply.ok()) return Internal(reply.status().ToString());
  ServerStats out;
  out.clients = std::move(reply).value();
  if ((conn->server().capabilities & kCapServerCounters) != 0) {
    CudaResult<ServerCountersReply> counters = conn->ServerCounters({});
    if (!counters.ok()) return Internal(counters.status().ToString());
    out.counters = std::move(counters->counters);
  }
  if (conn->server().version >= MinProtocolVersionOf(CallId::kClientTransports)) {
    CudaResult<ClientTransportsReply> transports = conn->ClientTransports({});
    if (!transports.ok()) return Internal(transports.status().ToString());
    out.transports = std::move(transports->clients);
  }
  if (conn->server().version >= MinProtocolVersionOf(CallId::kClientShares)) {
    CudaResult<ClientSharesReply> shares = conn->ClientShares({});
    if (!shares.ok()) return Internal(shares.status().ToString());
    out.shares = std::move(shares->clients);
  }
  return out;
}

std::string StatsToJson(const ServerStats& server) {
  const DebugStatsReply& stats = server.clients;
  nlohmann::ordered_json out;
  out["allocated_bytes"] = stats.allocated_bytes;
  out["memory_limit_bytes"] = stats.memory_limit_bytes;
  out["clients"] = nlohmann::ordered_json::array();
  for (const ClientStats& c : stats.clients) {
    nlohmann::ordered_json j;
    j["client_id"] = c.client_id;
    j["label"] = c.label;
    j["connected"] = c.connected;
    j["allocations"] = c.allocations;
    j["allocated_bytes"] = c.allocated_bytes;
    j["streams"] = c.streams;
    j["events"] = c.events;
    j["modules"] = c.modules;
    j["launches"] = c.launches;
    j["bytes_to_device"] = c.bytes_to_device;
    j["bytes_from_device"] = c.bytes_from_device;
    for (const ClientTransport& t : server.transports) {
      if (t.client_id != c.client_id) continue;
      j["transport"] = t.transport;
      j["peer_pid"] = t.peer_pid;
      j["peer_uid"] = t.peer_uid;
      j["arena_bytes"] = t.arena_bytes;
      j["arena_copy_bytes"] = t.arena_copy_bytes;
    }
    for (const ClientShare& share : server.shares) {
      if (share.client_id == c.client_id && c.connected) {
        j["sm_count_granted"] = share.sm_count_granted;
      }
    }
    out["clients"].push_back(std::move(j));
  }
  if (!server.counters.empty()) {
    out["connections"] = nlohmann::ordered_json::object();
    for (const NamedValue& v : server.counters) out["connections"][v.name] = v.value;
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<MigrateClientReply> RequestMigration(const Endpoint& server, const std::string& secret,
                                            uint64_t client_id, const std::string& to,
                                            const std::string& to_secret, uint32_t timeout_ms) {
  ClientOptions options;
  options.secret = secret;
  options.label = "flyt-gpu-server migrate";
  options.pid = static_cast<uint32_t>(::getpid());
  options.shared_memory = false;
  FLYT_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(server, options));
  if (conn->server().version < MinProtocolVersionOf(CallId::kMigrateClient)) {
    return NotSupported("the server speaks protocol version " +
                        std::to_string(conn->server().version) + ", without live migration");
  }
  CudaResult<MigrateClientReply> reply = conn->MigrateClient({client_id, to, to_secret, timeout_ms});
  if (!reply.ok()) return InvalidArgument(reply.status().message());
  return std::move(reply).value();
}

std::string MigrationToJson(uint64_t client_id, const MigrateClientReply& reply) {
  nlohmann::ordered_json out;
  out["outcome"] = reply.outcome;
  out["message"] = reply.message;
  out["client_id"] = client_id;
  out["new_client_id"] = reply.new_client_id;
  out["bytes"] = reply.bytes;
  out["pause_ms"] = static_cast<double>(reply.pause_us) / 1000.0;
  return out.dump();
}

Result<ResizeOutcome> RequestResize(const Endpoint& server, const std::string& secret,
                                    std::optional<uint32_t> sm_count,
                                    std::optional<uint64_t> memory_limit_mb, uint32_t timeout_ms) {
  if (!sm_count && !memory_limit_mb) {
    return InvalidArgument("a resize needs an SM count or a memory limit");
  }
  if (sm_count && *sm_count == 0) {
    return InvalidArgument("an SM count of 0: a client needs at least 1 SM");
  }
  if (memory_limit_mb && *memory_limit_mb > (UINT64_MAX >> 20)) {
    return InvalidArgument("a memory limit of " + std::to_string(*memory_limit_mb) +
                           " MiB does not fit in 64 bits of bytes");
  }
  ClientOptions options;
  options.secret = secret;
  options.label = "flyt-gpu-server resize";
  options.pid = static_cast<uint32_t>(::getpid());
  options.shared_memory = false;
  FLYT_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(server, options));
  if (conn->server().version < MinProtocolVersionOf(CallId::kResizeServer)) {
    return NotSupported("the server speaks protocol version " +
                        std::to_string(conn->server().version) + ", without resizing");
  }
  ResizeServerRequest request;
  request.sm_count = sm_count.value_or(0);
  request.set_memory_limit = memory_limit_mb.has_value();
  request.memory_limit_bytes = memory_limit_mb.value_or(0) << 20;
  request.timeout_ms = timeout_ms;
  CudaResult<ResizeServerReply> reply = conn->ResizeServer(request);
  if (!reply.ok()) return InvalidArgument(reply.status().message());
  ResizeOutcome out;
  out.sm_count_total = reply->sm_count_total;
  out.sm_count_asked = reply->sm_count_asked;
  out.sm_count_granted = reply->sm_count_granted;
  out.memory_limit_bytes = reply->memory_limit_bytes;
  out.allocated_bytes = reply->allocated_bytes;
  out.clients = reply->clients;
  out.clients_applied = reply->clients_applied;
  out.clients_pending = reply->clients_pending;
  out.pause_ms_max = static_cast<double>(reply->pause_us_max) / 1000.0;
  out.message = reply->message;
  return out;
}

std::string ResizeToJson(const ResizeOutcome& outcome) {
  nlohmann::ordered_json out;
  out["sm_count_total"] = outcome.sm_count_total;
  out["sm_count_asked"] = outcome.sm_count_asked;
  out["sm_count_granted"] = outcome.sm_count_granted;
  out["memory_limit_mb"] = outcome.memory_limit_bytes >> 20;
  out["allocated_mb"] = outcome.allocated_bytes >> 20;
  out["clients"] = outcome.clients;
  out["clients_applied"] = outcome.clients_applied;
  out["clients_pending"] = outcome.clients_pending;
  out["pause_ms_max"] = outcome.pause_ms_max;
  out["message"] = outcome.message;
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace flyt::remote
