// Profiler: online usage profiles of a node's GPUs, from the samples its Monitor takes.
//
// The node manager calls Add() once per GPU per sample (on the Monitor's sampling thread) and
// reads Profile()/Profiles() from its API, /metrics, heartbeat and Kubernetes threads. Each GPU
// (keyed by UUID; the index is reported as last seen) keeps fixed-size rings of its readings, so
// memory per GPU is bounded and stated by BytesPerGpu(); the cheap parts (state, allocated-idle
// time) move with every sample, the costly parts (quantiles, the cycle test, phase) are
// recomputed at most every `analysis_interval`. The state has hysteresis: a new state must hold
// for `state_hold` before it is reported (a lost GPU is reported at once). Phase changes are
// kept per GPU (the newest max_phase_changes) and also queued for TakePhaseChanges().
//
// The clock is the samples' own timestamps: a sample older than the previous one (a clock step
// back) or more than `max_gap` after it restarts that GPU's history, and the profile says so.
// Thread-safe: one internal mutex; Add() is O(1) amortised.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "profile/cycle.h"
#include "profile/profile.h"

namespace flyt::profile {

struct ProfilerOptions {
  // The Monitor's sample interval (the rate of Add()); the 1 Hz series is kept at this step.
  std::chrono::milliseconds sample_interval{1000};
  // Utilisation at or below this counts as "no compute" (idle / allocated-idle).
  double idle_util_percent = 2.0;
  // Memory held with ~0 utilisation for this long: allocated-idle.
  std::chrono::seconds allocated_idle_after{300};
  // Memory used above this (bytes) counts as held even when processes cannot be listed.
  uint64_t held_memory_bytes = 256ull << 20;
  // A candidate state must hold this long before it is reported.
  std::chrono::seconds state_hold{10};
  // The series the cycle test looks at: the samples since the last phase change, at most this.
  std::chrono::seconds cycle_window{600};
  CycleOptions cycle;
  // Quantiles, the cycle test and the phase are recomputed at most this often.
  std::chrono::milliseconds analysis_interval{5000};
  // Fewer valid samples than this in the analysed span: "insufficient data".
  size_t min_samples = 30;
  // A gap between samples longer than this restarts the GPU's history.
  std::chrono::seconds max_gap{120};
  size_t max_phase_changes = 16;  // kept per GPU
  // A steady load whose utilisation coefficient of variation (stddev / mean) exceeds this is
  // bursty.
  double steady_max_cv = 0.25;
  Status Validate() const;
};

// The cycle test the profiler runs (injectable for tests of the profiler's own logic).
using CycleDetector =
    std::function<CycleResult(std::span<const double>, double, const CycleOptions&)>;

class Profiler {
 public:
  explicit Profiler(ProfilerOptions options = {}, CycleDetector detector = DetectCycle);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // One sample of one GPU. `uuid` keys the GPU; `index` and `name` are reported as given.
  void Add(uint32_t index, const std::string& uuid, const std::string& name, const Sample& sample);
  // GPUs whose UUID is not in `present` are dropped (they left the machine).
  void Retain(const std::vector<std::string>& present);

  // The profile of the GPU with this index (nullopt: no such GPU seen), computed at the time of
  // its newest sample (state_seconds and the next trough count from there).
  std::optional<GpuProfile> Profile(uint32_t index) const;
  // Every GPU's, by index.
  std::vector<GpuProfile> Profiles() const;
  // Phase changes (of every GPU, oldest first, with the GPU's index and UUID) since the last
  // call; at most 1024 are queued, the oldest dropped beyond that.
  struct GpuPhaseChange {
    uint32_t index = 0;
    std::string uuid;
    PhaseChange change;
  };
  std::vector<GpuPhaseChange> TakePhaseChanges();

  // The profiler's memory per GPU at the configured windows and rates (bytes), for docs and
  // /api/v1/profiles' "footprint".
  size_t BytesPerGpu() const;
  const ProfilerOptions& options() const { return options_; }

 private:
  struct Gpu;
  const ProfilerOptions options_;
  const CycleDetector detector_;
  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<Gpu>> gpus_ FLYT_GUARDED_BY(mu_);
  std::vector<GpuPhaseChange> pending_ FLYT_GUARDED_BY(mu_);
};

}  // namespace flyt::profile
