#include "node/heartbeat.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "common/http.h"
#include "common/strings.h"
#include "gpu/json.h"
#include "profile/json.h"
#include "trace/json.h"

namespace flyt::node {

nlohmann::json CudaHeartbeatJson(std::vector<trace::ProcessCuda> processes) {
  std::stable_sort(processes.begin(), processes.end(),
                   [](const trace::ProcessCuda& a, const trace::ProcessCuda& b) {
                     return a.launches > b.launches;
                   });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < processes.size() && i < kMaxCudaPerHeartbeat; ++i) {
    out.push_back(trace::SummaryToJson(processes[i]));
  }
  return out;
}

nlohmann::json ProfilesHeartbeatJson(const std::vector<profile::GpuProfile>& profiles) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < profiles.size() && i < kMaxProfilesPerHeartbeat; ++i) {
    // Cut to what the manager accepts (a GPU shared by hundreds of processes).
    out.push_back(profile::ToJson(profile::BoundedForTransport(profiles[i])));
  }
  return out;
}

void ApplyHeartbeatReply(const nlohmann::json& reply, GpuServers& servers,
                         std::chrono::system_clock::time_point sent_at) {
  if (!reply.is_object() || !reply.contains("gpu_servers")) return;
  const nlohmann::json& block = reply["gpu_servers"];
  if (!block.is_object() || !block.contains("desired") || !block["desired"].is_array()) {
    spdlog::warn("heartbeat reply: gpu_servers is not {{\"desired\": [...]}}; ignored");
    return;
  }
  std::vector<GpuServerSpec> desired;
  std::vector<std::string> keep;
  for (const nlohmann::json& entry : block["desired"]) {
    auto spec = GpuServerSpecFromJson(entry);
    if (spec.ok()) {
      desired.push_back(std::move(spec).value());
      continue;
    }
    std::string id = entry.is_object() && entry.contains("lease_id") && entry["lease_id"].is_string()
                         ? entry["lease_id"].get<std::string>()
                         : std::string();
    spdlog::warn("heartbeat reply: a desired GPU server{} is invalid ({}); left as it is",
                 id.empty() ? "" : " (lease " + SanitizeUtf8(id.substr(0, 128)) + ")",
                 spec.status().message());
    if (id.empty()) return;  // cannot tell which server it meant: change nothing this time
    keep.push_back(std::move(id));
  }
  servers.Reconcile(desired, keep, sent_at);
}

HeartbeatSender::HeartbeatSender(gpu::Monitor& monitor, NodeConfig config, std::string api_url,
                                 std::string version, const trace::StatsSource* cuda,
                                 GpuServers* gpu_servers, const ProfileSource* profiles)
    : monitor_(monitor),
      cuda_(cuda),
      gpu_servers_(gpu_servers),
      profiles_(profiles),
      config_(std::move(config)),
      api_url_(std::move(api_url)),
      version_(std::move(version)) {}

HeartbeatSender::~HeartbeatSender() { Stop(); }

void HeartbeatSender::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void HeartbeatSender::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

Status HeartbeatSender::SendOnce() {
  auto snap = monitor_.LastSnapshot();
  if (!snap) return Unavailable("no sample taken yet");
  nlohmann::json labels = nlohmann::json::object();
  for (const auto& [k, v] : config_.labels) labels[k] = v;
  // Oldest first, at most as many as the manager takes per heartbeat (100); the rest go with
  // the next ones, so an XID storm delays events but loses none the monitor still holds.
  constexpr size_t kMaxEventsPerHeartbeat = 100;
  std::vector<gpu::GpuEvent> pending;
  for (const gpu::GpuEvent& e : monitor_.RecentEvents()) {
    if (e.at > events_sent_until_) pending.push_back(e);
  }
  std::stable_sort(pending.begin(), pending.end(),
                   [](const gpu::GpuEvent& a, const gpu::GpuEvent& b) { return a.at < b.at; });
  // Never split events that share a timestamp across heartbeats: the mark is a time.
  size_t take = std::min(pending.size(), kMaxEventsPerHeartbeat);
  while (take > 0 && take < pending.size() && pending[take].at == pending[take - 1].at) --take;
  if (take == 0) take = std::min(pending.size(), kMaxEventsPerHeartbeat);
  nlohmann::json events = nlohmann::json::array();
  auto newest = events_sent_until_;
  for (size_t i = 0; i < take; ++i) {
    events.push_back(gpu::ToJson(pending[i]));
    newest = std::max(newest, pending[i].at);
  }
  nlohmann::json body = {{"name", config_.name},     {"api_url", api_url_},
                         {"labels", labels},         {"version", version_},
                         {"snapshot", gpu::ToJson(*snap)}, {"events", events}};
  // Only when something is traced: a manager older than the tracer refuses unknown fields.
  if (cuda_ != nullptr) {
    nlohmann::json cuda = CudaHeartbeatJson(cuda_->Processes());
    if (!cuda.empty()) body["cuda"] = std::move(cuda);
  }
  if (gpu_servers_ != nullptr) body["gpu_servers"] = gpu_servers_->HeartbeatJson();
  if (profiles_ != nullptr && std::chrono::steady_clock::now() >= profiles_refused_until_) {
    body["profiles"] = ProfilesHeartbeatJson(profiles_->Profiles());
  }
  FLYT_ASSIGN_OR_RETURN(auto client, http::JsonClient::Connect(config_.cluster_manager,
                                                               config_.cluster_manager_token,
                                                               "the cluster manager"));
  client->SetTimeouts(std::chrono::seconds(3), std::chrono::seconds(10));
  const auto sent_at = std::chrono::system_clock::now();
  Result<nlohmann::json> posted = client->Post("/api/v1/nodes/heartbeat", body);
  if (!posted.ok() && body.contains("profiles") &&
      posted.status().code() == StatusCode::kInvalidArgument &&
      posted.status().message().find("unknown field 'profiles'") != std::string::npos) {
    // A manager older than profiles: the rest of the heartbeat still matters.
    if (!profiles_refusal_logged_) {
      spdlog::warn("the cluster manager at {} does not take GPU profiles (an older version); "
                   "heartbeats go without them, tried again every 10 minutes",
                   config_.cluster_manager);
      profiles_refusal_logged_ = true;
    }
    profiles_refused_until_ = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    body.erase("profiles");
    posted = client->Post("/api/v1/nodes/heartbeat", body);
  }
  FLYT_ASSIGN_OR_RETURN(auto answer, std::move(posted));
  if (gpu_servers_ != nullptr) ApplyHeartbeatReply(answer, *gpu_servers_, sent_at);
  events_sent_until_ = newest;
  return Status::Ok();
}

void HeartbeatSender::Loop() {
  bool failing = false;
  bool registered = false;
  MutexLock lock(mu_);
  while (!stopping_) {
    lock.Unlock();
    Status s = SendOnce();
    lock.Lock();
    if (s.ok() && (!registered || failing)) {
      spdlog::info("{} with the cluster manager at {}",
                   registered ? "heartbeats get through again" : "registered",
                   config_.cluster_manager);
      registered = true;
      failing = false;
    } else if (!s.ok() && !failing) {
      spdlog::warn("heartbeat to the cluster manager failed (retrying every {} s): {}",
                   config_.heartbeat_interval.count(), s.message());
      failing = true;
    }
    const auto deadline = std::chrono::steady_clock::now() + config_.heartbeat_interval;
    while (!stopping_ && cv_.WaitUntil(mu_, deadline)) {
    }
  }
}

}  // namespace flyt::node
