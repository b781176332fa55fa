// Profiling: the node manager's side of the usage profiles (src/profile). It owns a
// profile::Profiler, feeds it every sample the GPU Monitor takes (Observe, called by the
// Monitor's sample observer on its sampling thread), converting each gpu::GpuInfo into a
// profile::Sample (the CUDA tracer's launch rate per GPU added when a tracer runs), drops GPUs
// that left the machine, logs each phase change at info and counts them per GPU.
//
// NodeServer, /metrics and HeartbeatSender read it through ProfileSource (null when [profile]
// enabled = false), so that their tests can hand them profiles built by hand. Every method is
// thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "gpu/types.h"
#include "node/config.h"
#include "profile/profiler.h"
#include "trace/stats.h"

namespace flyt::node {

// What the API, /metrics and heartbeats read of the profiles.
class ProfileSource {
 public:
  virtual ~ProfileSource() = default;
  // Every GPU's profile, by index.
  virtual std::vector<profile::GpuProfile> Profiles() const = 0;
  virtual std::optional<profile::GpuProfile> Profile(uint32_t index) const = 0;
  // Phase changes seen since start, by GPU UUID (flyt_profile_phase_changes_total).
  virtual std::map<std::string, uint64_t> PhaseChangeCounts() const = 0;
  // GET /api/v1/profiles' "footprint_bytes_per_gpu" and "options".
  virtual size_t BytesPerGpu() const = 0;
  virtual nlohmann::json OptionsJson() const = 0;
};

// The profiler's options from [profile] and the monitor's sample interval.
profile::ProfilerOptions ProfilerOptionsFrom(const ProfileConfig& config,
                                             std::chrono::milliseconds sample_interval);

// One GPU's reading as the profiler takes it, at `at` (the snapshot's time). `held_memory_bytes`:
// an empty process list while more than this is in use means the list could not be read
// (another PID namespace, no permission), so processes are unknown rather than none.
profile::Sample ToProfileSample(const gpu::GpuInfo& gpu, std::chrono::system_clock::time_point at,
                                std::optional<double> launches_per_second,
                                uint64_t held_memory_bytes);

// Launches per second per GPU UUID: the sum over the tracer's live processes on that GPU. Empty
// (every GPU's rate absent) when there is no tracer or it does not run; GPUs the tracer runs on
// without a process get 0 (`gpus` lists the node's GPUs).
std::map<std::string, double> LaunchRates(const trace::StatsSource* cuda,
                                          const std::vector<gpu::GpuInfo>& gpus);

class Profiling final : public ProfileSource {
 public:
  // `cuda`: the CUDA tracer's statistics, or null; must outlive this object.
  Profiling(profile::ProfilerOptions options, const trace::StatsSource* cuda = nullptr);
  // Validates the options first.
  static Result<std::unique_ptr<Profiling>> Create(const ProfileConfig& config,
                                                   std::chrono::milliseconds sample_interval,
                                                   const trace::StatsSource* cuda = nullptr);

  // Feeds every GPU of one Monitor sample, drops GPUs no longer present, logs phase changes.
  void Observe(const gpu::GpuSnapshot& snap) FLYT_EXCLUDES(mu_);

  std::vector<profile::GpuProfile> Profiles() const override;
  std::optional<profile::GpuProfile> Profile(uint32_t index) const override;
  std::map<std::string, uint64_t> PhaseChangeCounts() const override FLYT_EXCLUDES(mu_);
  size_t BytesPerGpu() const override;
  nlohmann::json OptionsJson() const override;

 private:
  profile::Profiler profiler_;
  const trace::StatsSource* const cuda_;
  mutable Mutex mu_;
  std::map<std::string, uint64_t> phase_changes_ FLYT_GUARDED_BY(mu_);
};

// The key the profiler knows a GPU by: its UUID, or "#<index>" when the UUID is unknown.
std::string ProfileKey(const gpu::GpuInfo& gpu);

}  // namespace flyt::node
