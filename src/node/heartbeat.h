// HeartbeatSender: registers the node with flyt-cluster-manager and keeps it informed — every
// `interval` it posts the node's latest GPU snapshot, the GPU events (XIDs, lost GPUs) seen since
// the last heartbeat that got through, where the node's own API is (for monitoring sessions), and
// when the CUDA tracer runs, a short summary of each traced process (CudaHeartbeatJson: at most
// kMaxCudaPerHeartbeat, busiest first), and with [gpu-servers] on, the GPU servers' records and
// capacity ("gpu_servers"), and with [profile] on, every GPU's usage profile ("profiles": the
// full JSON form of profile/json.h, at most kMaxProfilesPerHeartbeat; a manager older than
// profiles refuses the key: the heartbeat is sent again without it, and profiles are left out for
// the next 10 minutes, said once in the log); the reply's gpu_servers.desired is handed to GpuServers::Reconcile
// (an absent "gpu_servers" in the reply: no opinion, nothing done).
//
// It never blocks sampling or the node's API: it runs on its own thread and reads only what the
// Monitor already holds. When the manager cannot be reached it logs once per outage and keeps
// trying at the same interval; the manager marks the node unreachable meanwhile and takes it back
// when heartbeats resume. Start/Stop are not thread-safe with each other.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "gpu/monitor.h"
#include "node/config.h"
#include "node/gpu_servers.h"
#include "node/profiling.h"
#include "trace/stats.h"

namespace flyt::node {

// Traced processes a heartbeat carries at most (the cluster manager refuses more).
inline constexpr size_t kMaxCudaPerHeartbeat = 256;
// GPU profiles a heartbeat carries at most (the cluster manager refuses more).
inline constexpr size_t kMaxProfilesPerHeartbeat = 64;

// The heartbeat's "profiles" array: ToJson of each GPU's profile, by index, at most
// kMaxProfilesPerHeartbeat.
nlohmann::json ProfilesHeartbeatJson(const std::vector<profile::GpuProfile>& profiles);

// The heartbeat's "cuda" array: CudaSummaryJson of each process, the most launches first, at most
// kMaxCudaPerHeartbeat.
nlohmann::json CudaHeartbeatJson(std::vector<trace::ProcessCuda> processes);

// Acts on a heartbeat reply: its "gpu_servers": {"desired": [spec...]} goes to
// servers.Reconcile. Absent (an older manager): nothing. An entry that does not parse is logged
// and its server (when its lease_id can be read) left as it is; a malformed block changes
// nothing.
// `sent_at`: when the heartbeat left. The reply's desired set was decided no later than the
// manager received it, so a server started since (by the manager's PUT, which may overtake the
// reply) is not the reply's to drain.
void ApplyHeartbeatReply(const nlohmann::json& reply, GpuServers& servers,
                         std::chrono::system_clock::time_point sent_at =
                             std::chrono::system_clock::time_point::max());

class HeartbeatSender {
 public:
  // `cuda`: the CUDA tracer's statistics, or null; `gpu_servers`: the GPU server supervisor, or
  // null; `profiles`: the usage profiles, or null ([profile] off: no "profiles" key). All must
  // outlive the sender.
  HeartbeatSender(gpu::Monitor& monitor, NodeConfig config, std::string api_url,
                  std::string version, const trace::StatsSource* cuda = nullptr,
                  GpuServers* gpu_servers = nullptr, const ProfileSource* profiles = nullptr);
  ~HeartbeatSender();
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  void Start();
  void Stop();

 private:
  void Loop();
  Status SendOnce();

  gpu::Monitor& monitor_;
  const trace::StatsSource* const cuda_;
  GpuServers* const gpu_servers_;
  const ProfileSource* const profiles_;
  const NodeConfig config_;
  const std::string api_url_;
  const std::string version_;
  std::chrono::system_clock::time_point events_sent_until_{};
  // While the manager refuses "profiles" (an older version): left out until then.
  std::chrono::steady_clock::time_point profiles_refused_until_{};
  bool profiles_refusal_logged_ = false;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ FLYT_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace flyt::node
