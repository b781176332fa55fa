// Monitor: flyt's GPU monitor — cached queries, availability ranking, continuous sampling into a
// bounded history, device events, and monitoring sessions with per-GPU statistics.
//
// The Monitor owns its Backend. Time comes from an injected Clock: tests drive SampleOnce() by
// hand with a FakeClock; Start() runs one sampling thread (every `sample_interval`) and, when the
// backend has events, one event thread. Every public method is thread-safe; a query never waits
// for NVML while another thread samples unless it asks for a fresh reading (use_cache=false).
//
// A sample observer (SetSampleObserver) is called after every successful SampleOnce(), on the
// thread that sampled (the sampling thread once started), in sampling order, with no lock held
// that a query takes: it may call any const query and LastSnapshot(), but not SampleOnce(). Each
// observed snapshot's util_samples are the driver's samples since the previous observed one
// (samples a fresh client query read in between are carried over, not lost).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "gpu/backend.h"
#include "gpu/history.h"
#include "gpu/score.h"
#include "gpu/stats.h"
#include "gpu/types.h"

namespace flyt::gpu {

struct MonitorOptions {
  std::chrono::milliseconds cache_ttl{5000};
  std::chrono::milliseconds sample_interval{1000};
  std::chrono::seconds history_retention{3600};
  ScoreWeights score_weights;
  size_t max_sessions = 64;
  // A session nobody has read or stopped for this long is dropped.
  std::chrono::seconds session_idle_expiry{24 * 3600};
  size_t max_recent_events = 1000;
  // While a GPU is lost, re-initialise the backend this often to pick it up after a reset.
  std::chrono::seconds reinit_interval{60};
  Status Validate() const;
};

// One metric's statistics, in the shape of the LLM autotuner's monitoring output plus percentiles.
struct MetricStats {
  double min = 0, max = 0, mean = 0;
  double p50 = 0, p95 = 0, p99 = 0;
  uint64_t samples = 0;
};

struct GpuSessionStats {
  uint32_t index = 0;
  std::string name;
  std::optional<MetricStats> utilization;           // percent
  std::optional<MetricStats> memory_used_mb;        // MiB
  std::optional<MetricStats> memory_usage_percent;  // percent
  std::optional<MetricStats> temperature_c;
  std::optional<MetricStats> power_draw_w;
};

struct SessionStats {
  std::string id;
  double monitoring_duration_seconds = 0;
  uint64_t sample_count = 0;
  std::map<uint32_t, GpuSessionStats> gpu_stats;  // by GPU index
};

struct SessionOptions {
  std::optional<std::vector<uint32_t>> gpus;  // all GPUs when absent
  // Record every sample when absent; else at most one sample per interval (it must not be shorter
  // than the Monitor's sample interval).
  std::optional<std::chrono::milliseconds> interval;
};

struct EventCounts {
  uint64_t total = 0;
  std::map<uint64_t, uint64_t> by_xid;
  std::optional<uint64_t> last_xid;
  uint64_t single_bit_ecc = 0;
  uint64_t double_bit_ecc = 0;
};

struct MonitorStats {
  uint64_t samples = 0;
  uint64_t sample_failures = 0;
  uint64_t failed_readings = 0;
  std::chrono::microseconds last_sample_duration{0};
  std::chrono::microseconds total_sample_duration{0};
  size_t history_bytes = 0;
  size_t sessions = 0;
  uint64_t reinit_failures = 0;
  std::string last_reinit_error;
};

class Monitor {
 public:
  Monitor(std::unique_ptr<Backend> backend, Clock& clock, MonitorOptions options = {});
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Starts the sampling (and event) threads. Idempotent.
  void Start();
  // Stops and joins them. Idempotent; the destructor calls it.
  void Stop();

  // The latest snapshot: from the cache when `use_cache` and it is younger than cache_ttl, else a
  // fresh reading (which also refreshes the cache).
  Result<GpuSnapshot> QueryGpus(bool use_cache = true);
  Result<GpuInfo> GetGpuInfo(uint32_t index, bool use_cache = true);
  // The newest snapshot taken, however old; never reads the backend (for /metrics, which must not
  // wait on NVML). nullopt before the first sample.
  std::optional<GpuSnapshot> LastSnapshot() const;

  // GPUs with enough free memory and low enough utilisation, best availability score first.
  Result<std::vector<ScoredGpu>> GetAvailableGpus(uint64_t min_free_memory_bytes,
                                                  uint32_t max_utilization_percent);

  // One sample: read the backend, update cache, history, sessions, lost-GPU events, then tell the
  // sample observer. Only samples feed history, sessions and the observer, so what they see does
  // not depend on how often clients query.
  Status SampleOnce() FLYT_EXCLUDES(sample_mu_);
  // Called with each sample's snapshot (see the file comment); empty: none. Replaces the previous.
  using SampleObserver = std::function<void(const GpuSnapshot&)>;
  void SetSampleObserver(SampleObserver observer) FLYT_EXCLUDES(sample_mu_);
  // Waits up to `timeout` for backend events and records them; returns how many arrived.
  size_t PollEvents(std::chrono::milliseconds timeout);

  Result<std::string> StartSession(const SessionOptions& options = {});
  // Statistics so far; the session keeps running.
  Result<SessionStats> GetSession(const std::string& id);
  // Final statistics; the session ends.
  Result<SessionStats> StopSession(const std::string& id);
  std::vector<std::string> SessionIds() const;

  std::vector<HistoryPoint> GetHistory(uint32_t index, std::chrono::system_clock::time_point since,
                                       std::chrono::milliseconds step) const;
  std::vector<GpuEvent> RecentEvents() const;
  std::map<uint32_t, EventCounts> EventCountsByGpu() const;
  MonitorStats Stats() const;
  Source source() const { return backend_->source(); }
  bool SupportsEvents() const { return backend_->SupportsEvents(); }
  const MonitorOptions& options() const { return options_; }

 private:
  struct Session {
    std::string id;
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point last_access;
    std::optional<std::set<uint32_t>> gpus;
    std::optional<std::chrono::milliseconds> interval;
    std::optional<std::chrono::steady_clock::time_point> last_sample;
    uint64_t sample_count = 0;
    struct Gpu {
      std::string name;
      RunningStats util, mem_used_mb, mem_pct, temp, power;
    };
    std::map<uint32_t, Gpu> per_gpu;
  };

  // Takes backend_mu_; updates the cache and lost-GPU events, and with `accumulate` also the
  // history and sessions.
  Result<GpuSnapshot> ReadFresh(bool accumulate) FLYT_EXCLUDES(backend_mu_, mu_);
  void UpdateCache(const GpuSnapshot& snap) FLYT_REQUIRES(mu_);
  // A fresh query's util samples are put aside; a sample's get those put aside prepended.
  void CarryUtilSamples(GpuSnapshot& snap, bool accumulate) FLYT_REQUIRES(mu_);
  void Accumulate(const GpuSnapshot& snap) FLYT_REQUIRES(mu_);
  void RecordEvent(GpuEvent event) FLYT_REQUIRES(mu_);
  SessionStats Summarise(const Session& s) const FLYT_REQUIRES(mu_);
  void ExpireSessions() FLYT_REQUIRES(mu_);
  void SampleLoop();
  void EventLoop();

  std::unique_ptr<Backend> backend_;
  Clock& clock_;
  const MonitorOptions options_;

  Mutex sample_mu_;  // serialises SampleOnce (so the observer sees samples in order); before backend_mu_
  SampleObserver observer_ FLYT_GUARDED_BY(sample_mu_);

  Mutex backend_mu_;  // serialises Snapshot/Reinitialize on the backend; taken before mu_
  std::chrono::steady_clock::time_point last_reinit_ FLYT_GUARDED_BY(backend_mu_);
  mutable Mutex mu_;
  std::optional<GpuSnapshot> cache_ FLYT_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point cache_time_ FLYT_GUARDED_BY(mu_);
  History history_ FLYT_GUARDED_BY(mu_);
  std::map<std::string, Session> sessions_ FLYT_GUARDED_BY(mu_);
  uint64_t next_session_ FLYT_GUARDED_BY(mu_) = 1;
  std::deque<GpuEvent> events_ FLYT_GUARDED_BY(mu_);
  std::map<uint32_t, EventCounts> event_counts_ FLYT_GUARDED_BY(mu_);
  std::set<std::string> lost_uuids_ FLYT_GUARDED_BY(mu_);
  // Driver utilisation samples read by fresh client queries since the last sample, by UUID: the
  // next sample carries them (bounded by kMaxUtilSamples per GPU).
  std::map<std::string, std::vector<UtilSample>> carried_util_samples_ FLYT_GUARDED_BY(mu_);
  MonitorStats stats_ FLYT_GUARDED_BY(mu_);

  Mutex thread_mu_;
  CondVar wake_;
  bool stopping_ FLYT_GUARDED_BY(thread_mu_) = false;
  std::thread sampler_;
  std::thread event_thread_;
};

// Mebibytes, the unit the autotuner's stats and dcgm-exporter's FB metrics use.
constexpr double kBytesPerMib = 1024.0 * 1024.0;

}  // namespace flyt::gpu
