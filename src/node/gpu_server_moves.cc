// GpuServers' calls into a running server on behalf of the cluster manager: Migrate (move its
// clients to another server while they run). Each copies what it needs out of the record under
// mu_, talks to the server over its Unix socket without the lock (the server answers only its own
// user or root there), then records the outcome. See gpu_servers.h for the contract.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/json_fields.h"
#include "node/gpu_servers.h"
#include "node/gpu_servers_internal.h"
#include "remote_client/debug_stats.h"
#include "remote/socket.h"

namespace flyt::node {
namespace {

using internal::Conflict;
using nlohmann::json;

// Connections the operator tools open to a server (FetchStats, RequestMigration): not clients
// to move.
bool ToolConnection(const std::string& label) { return label.rfind("flyt-gpu-server ", 0) == 0; }

// An error from reaching the server: Unavailable (503) unless it answered that it cannot do it.
Status Unreachable(const std::string& lease_id, const Status& s) {
  if (s.code() == StatusCode::kNotSupported) {
    return Status(StatusCode::kNotSupported,
                  "the GPU server of lease " + lease_id + " cannot do it: " + s.message());
  }
  return Unavailable("cannot reach the GPU server of lease " + lease_id +
                     " over its Unix socket: " + s.message())
      .WithReason("unavailable");
}

}  // namespace

Result<MigrateRequest> MigrateRequestFromJson(const json& body) {
  FLYT_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body, "the body"));
  FLYT_RETURN_IF_ERROR(f.Only({"to", "to_secret", "timeout_s"}));
  MigrateRequest r;
  FLYT_ASSIGN_OR_RETURN(r.to, f.RequiredString("to", 300));
  auto to = remote::ParseEndpoint(r.to);
  if (!to.ok() || to->kind != remote::Endpoint::Kind::kTcp || to->port == 0) {
    return InvalidArgument("to must be the target server's HOST:PORT");
  }
  if (f.Has("to_secret")) {
    // The secret's value never appears in an error.
    const json& v = body["to_secret"];
    const std::string secret = v.is_string() ? v.get<std::string>() : std::string();
    if (!v.is_string() || secret.size() < 32 || secret.size() > 128 ||
        !std::all_of(secret.begin(), secret.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
      return InvalidArgument("to_secret must be 32-128 printable ASCII characters without blanks");
    }
    r.to_secret = secret;
  }
  double timeout_s = 30;
  FLYT_RETURN_IF_ERROR(f.OptionalNumber("timeout_s", 1, 600, timeout_s));
  r.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  return r;
}

Result<GpuServers::Target> GpuServers::RunningTarget(const std::string& lease_id) const {
  auto it = servers_.find(lease_id);
  if (it == servers_.end()) {
    return NotFound("no GPU server for lease " + lease_id + " on this node");
  }
  const Server& s = it->second;
  if (s.state != State::kRunning) {
    return Conflict("the GPU server of lease " + lease_id + " is " + StateName(s.state) +
                    ", not running");
  }
  const std::string sock = Path(lease_id, ".sock");
  if (sock.size() >= 100) {  // Begin gave it no Unix socket: the path does not fit
    return Unavailable("the GPU server of lease " + lease_id +
                       " has no Unix socket ([gpu-servers] state_dir is too long a path)");
  }
  return Target{lease_id, s.spec.gpu_uuid, s.gpu_index, s.pid, "unix:" + sock, s.spec.secret};
}

Result<json> GpuServers::GetWithClients(const std::string& lease_id) const {
  json record;
  std::optional<Target> t;
  {
    MutexLock lock(mu_);
    auto it = servers_.find(lease_id);
    if (it == servers_.end()) {
      return NotFound("no GPU server for lease " + lease_id + " on this node");
    }
    record = RecordJson(it->second);
    if (it->second.state != State::kRunning) return record;
    auto running = RunningTarget(lease_id);
    if (!running.ok()) {
      record["clients"] = nullptr;
      record["clients_error"] = running.status().message();
      return record;
    }
    t = *running;
  }
  auto endpoint = remote::ParseEndpoint(t->socket);
  auto stats = endpoint.ok() ? remote::FetchStats(*endpoint, t->secret)
                             : Result<remote::ServerStats>(endpoint.status());
  if (!stats.ok()) {
    record["clients"] = nullptr;
    record["clients_error"] = Unreachable(lease_id, stats.status()).message();
    return record;
  }
  int64_t connected = 0;
  for (const remote::ClientStats& c : stats->clients.clients) {
    if (c.connected && !ToolConnection(c.label)) ++connected;
  }
  record["clients"] = connected;
  return record;
}

Result<json> GpuServers::Migrate(const std::string& lease_id, const MigrateRequest& request) {
  Target t;
  {
    MutexLock lock(mu_);
    FLYT_ASSIGN_OR_RETURN(t, RunningTarget(lease_id));
  }
  FLYT_ASSIGN_OR_RETURN(const remote::Endpoint endpoint, remote::ParseEndpoint(t.socket));
  auto stats = remote::FetchStats(endpoint, t.secret);
  if (!stats.ok()) return Unreachable(lease_id, stats.status());

  const std::string& to_secret = request.to_secret ? *request.to_secret : t.secret;
  const auto timeout_ms = static_cast<uint32_t>(request.timeout.count());
  json clients = json::array();
  int moved = 0, pending = 0, failed = 0;
  for (const remote::ClientStats& c : stats->clients.clients) {
    if (!c.connected || ToolConnection(c.label)) continue;
    auto reply = remote::RequestMigration(endpoint, t.secret, c.client_id, request.to, to_secret,
                                          timeout_ms);
    json one;
    if (reply.ok()) {
      one = json::parse(remote::MigrationToJson(c.client_id, *reply));
    } else {
      // Refused before it was tried (the client left meanwhile, the server went away): the
      // client stays where it was.
      one = {
          {"outcome", "failed"}, {"message", reply.status().message()}, {"client_id", c.client_id}};
    }
    const std::string outcome = one.value("outcome", "failed");
    if (outcome == "moved") {
      ++moved;
    } else if (outcome == "pending") {
      ++pending;
    } else {
      ++failed;
    }
    clients.push_back(std::move(one));
  }

  const std::string counts = std::to_string(moved) + " moved, " + std::to_string(pending) +
                             " pending, " + std::to_string(failed) + " failed";
  spdlog::info("gpu-servers: moving the clients of lease {} to {}: {}", lease_id, request.to,
               counts);
  {
    MutexLock lock(mu_);
    AddEvent(t.gpu_index, t.gpu_uuid, lease_id, "gpu_server_migrated",
             "the clients of the GPU server of lease " + lease_id + " were asked to move to " +
                 request.to + ": " + counts);
  }
  return json{{"lease_id", lease_id}, {"to", request.to},   {"clients", clients},
              {"moved", moved},       {"pending", pending}, {"failed", failed}};
}

}  // namespace flyt::node
