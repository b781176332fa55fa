// GpuServers::Resize: a new SM share and/or memory limit for a lease's running server
// (remote::RequestResize over its Unix socket), checked against its GPU's room first and recorded
// as the lease's spec after. A file of its own beside gpu_server_moves.cc (Migrate), which it
// follows: what it needs is copied out of the record under mu_, the server is asked without the
// lock. See gpu_servers.h for the contract.
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

}  // namespace

Result<ResizeRequest> ResizeRequestFromJson(const json& body) {
  FLYT_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body, "the body"));
  FLYT_RETURN_IF_ERROR(f.Only({"sm_count", "memory_mb", "timeout_s"}));
  ResizeRequest r;
  if (f.Has("sm_count")) {
    FLYT_ASSIGN_OR_RETURN(r.sm_count, f.RequiredInt<uint32_t>("sm_count", 1, 1 << 20));
  }
  if (f.Has("memory_mb")) {
    FLYT_ASSIGN_OR_RETURN(r.memory_mb, f.RequiredInt<uint64_t>("memory_mb", 1, uint64_t{1} << 30));
  }
  if (!r.sm_count && !r.memory_mb) {
    return InvalidArgument("the body must give sm_count, memory_mb or both");
  }
  double timeout_s = 30;
  FLYT_RETURN_IF_ERROR(f.OptionalNumber("timeout_s", 1, 600, timeout_s));
  r.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  return r;
}

Result<json> GpuServers::Resize(const std::string& lease_id, const ResizeRequest& request) {
  Target t;
  GpuServerSpec next;
  bool shared = false;
  uint32_t device_sms = 0;
  std::optional<uint32_t> granted_before;
  {
    MutexLock lock(mu_);
    FLYT_ASSIGN_OR_RETURN(t, RunningTarget(lease_id));
    Server& s = servers_.find(lease_id)->second;
    if (s.resizing) {
      return Conflict("the GPU server of lease " + lease_id + " is being resized already");
    }
    const Capacity* cap = FindGpu(s.spec.gpu_uuid);
    if (cap == nullptr) return Internal("no GPU " + s.spec.gpu_uuid + " on this node");
    next = s.spec;
    if (request.sm_count) next.sm_count = *request.sm_count;
    if (request.memory_mb) next.memory_mb = *request.memory_mb;
    FLYT_RETURN_IF_ERROR(CheckRoom(next, *cap));
    s.resizing = next;  // held while the server is asked
    shared = cap->shared();
    device_sms = cap->sm_count;
    granted_before = s.sm_count_granted;
  }
  // A GPU that is not shared runs its one server with all of its SMs (Begin gives it no
  // --sm-count): the lease's sm_count is the node's bookkeeping only.
  const std::optional<uint32_t> sm_count = shared ? request.sm_count : std::nullopt;
  Result<remote::ResizeOutcome> outcome = remote::ResizeOutcome{};
  if (sm_count || request.memory_mb) {
    auto endpoint = remote::ParseEndpoint(t.socket);
    outcome = endpoint.ok()
                  ? remote::RequestResize(*endpoint, t.secret, sm_count, request.memory_mb,
                                          static_cast<uint32_t>(request.timeout.count()))
                  : Result<remote::ResizeOutcome>(endpoint.status());
  } else {
    outcome->sm_count_total = device_sms;
    outcome->sm_count_granted = granted_before.value_or(device_sms);
    outcome->message = "the GPU is not shared: its server keeps all of its SMs";
  }

  MutexLock lock(mu_);
  auto it = servers_.find(lease_id);
  if (it != servers_.end()) it->second.resizing.reset();
  if (!outcome.ok()) {
    const Status& e = outcome.status();
    if (e.code() == StatusCode::kInvalidArgument) {
      return Conflict("the GPU server of lease " + lease_id +
                      " refused the resize: " + e.message());
    }
    if (e.code() == StatusCode::kNotSupported) {
      return Status(StatusCode::kNotSupported,
                    "the GPU server of lease " + lease_id + " cannot resize: " + e.message());
    }
    return Unavailable("cannot reach the GPU server of lease " + lease_id +
                       " over its Unix socket: " + e.message())
        .WithReason("unavailable");
  }
  if (it == servers_.end() || it->second.pid != t.pid || it->second.state != State::kRunning) {
    return Unavailable("the GPU server of lease " + lease_id + " ended while it was resized")
        .WithReason("unavailable");
  }
  Server& s = it->second;
  s.spec.sm_count = next.sm_count;
  s.spec.memory_mb = next.memory_mb;
  if (sm_count) s.sm_count_granted = outcome->sm_count_granted;
  if (Status w = WriteState(s); !w.ok()) {
    spdlog::error("gpu-servers: cannot record the resize of lease {}: {}", lease_id, w.message());
  }
  const std::string what =
      std::to_string(s.spec.sm_count) + " SMs, " + std::to_string(s.spec.memory_mb) + " MiB (" +
      std::to_string(outcome->clients_applied) + " of " + std::to_string(outcome->clients) +
      " clients applied it, " + std::to_string(outcome->clients_pending) + " at their next call)";
  spdlog::info("gpu-servers: resized the server of lease {}: {}", lease_id, what);
  AddEvent(s, "gpu_server_resized", "the GPU server of lease " + lease_id + " now has " + what);
  json reply = json::parse(remote::ResizeToJson(*outcome));
  reply["record"] = RecordJson(s);
  return reply;
}

}  // namespace flyt::node
