#include "gpu/monitor.h"

#include <algorithm>

namespace flyt::gpu {
namespace {

std::optional<MetricStats> ToMetric(const RunningStats& s) {
  std::optional<Summary> sum = s.Get();
  if (!sum) return std::nullopt;
  return MetricStats{sum->min, sum->max, sum->mean, sum->p50, sum->p95, sum->p99, sum->samples};
}

HistoryPoint ToPoint(const GpuInfo& g, int64_t t_ms) {
  HistoryPoint p;
  p.t_ms = t_ms;
  if (g.gpu_util_percent) p.gpu_util_percent = static_cast<float>(*g.gpu_util_percent);
  if (g.memory_util_percent) p.memory_util_percent = static_cast<float>(*g.memory_util_percent);
  if (g.memory_used_bytes) {
    p.memory_used_mib =
        static_cast<float>(static_cast<double>(*g.memory_used_bytes) / kBytesPerMib);
  }
  if (g.temperature_c) p.temperature_c = static_cast<float>(*g.temperature_c);
  if (g.power_draw_mw) p.power_draw_w = static_cast<float>(*g.power_draw_mw / 1000.0);
  if (g.sm_clock_mhz) p.sm_clock_mhz = static_cast<float>(*g.sm_clock_mhz);
  return p;
}

}  // namespace

Status MonitorOptions::Validate() const {
  if (sample_interval.count() <= 0) return InvalidArgument("sample interval must be positive");
  if (cache_ttl.count() < 0) return InvalidArgument("cache TTL must not be negative");
  if (history_retention.count() <= 0) return InvalidArgument("history retention must be positive");
  if (max_sessions == 0) return InvalidArgument("max sessions must be at least 1");
  return score_weights.Validate();
}

Monitor::Monitor(std::unique_ptr<Backend> backend, Clock& clock, MonitorOptions options)
    : backend_(std::move(backend)),
      clock_(clock),
      options_(options),
      history_(static_cast<size_t>(std::max<int64_t>(
          1,
          std::chrono::duration_cast<std::chrono::milliseconds>(options.history_retention).count() /
              std::max<int64_t>(1, options.sample_interval.count())))) {
  last_reinit_ = clock_.SteadyNow();
}

Monitor::~Monitor() { Stop(); }

void Monitor::Start() {
  MutexLock lock(thread_mu_);
  if (sampler_.joinable()) return;
  stopping_ = false;
  sampler_ = std::thread([this] { SampleLoop(); });
  if (backend_->SupportsEvents()) event_thread_ = std::thread([this] { EventLoop(); });
}

void Monitor::Stop() {
  {
    MutexLock lock(thread_mu_);
    stopping_ = true;
  }
  wake_.NotifyAll();
  if (sampler_.joinable()) sampler_.join();
  if (event_thread_.joinable()) event_thread_.join();
}

void Monitor::SampleLoop() {
  MutexLock lock(thread_mu_);
  while (!stopping_) {
    lock.Unlock();
    (void)SampleOnce();  // failures are counted in stats_ and visible in the snapshot reason
    lock.Lock();
    const auto deadline = std::chrono::steady_clock::now() + options_.sample_interval;
    while (!stopping_ && wake_.WaitUntil(thread_mu_, deadline)) {
    }
  }
}

void Monitor::EventLoop() {
  constexpr auto kWait = std::chrono::milliseconds(500);
  MutexLock lock(thread_mu_);
  while (!stopping_) {
    lock.Unlock();
    auto started = std::chrono::steady_clock::now();
    size_t got = PollEvents(kWait);
    bool returned_early = std::chrono::steady_clock::now() - started < kWait / 5;
    lock.Lock();
    // A backend that answers at once with nothing (its event set is gone after a failed
    // re-initialisation, or its only GPU is lost) must not make this loop spin.
    if (got == 0 && returned_early) {
      const auto deadline = std::chrono::steady_clock::now() + kWait;
      while (!stopping_ && wake_.WaitUntil(thread_mu_, deadline)) {
      }
    }
  }
}

Result<GpuSnapshot> Monitor::ReadFresh(bool accumulate) {
  MutexLock backend_lock(backend_mu_);
  auto started = std::chrono::steady_clock::now();
  Result<GpuSnapshot> snap = backend_->Snapshot();
  auto took = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - started);
  MutexLock lock(mu_);
  stats_.last_sample_duration = took;
  stats_.total_sample_duration += took;
  if (!snap.ok()) {
    ++stats_.sample_failures;
    return snap;
  }
  snap->taken_at = clock_.WallNow();
  CarryUtilSamples(*snap, accumulate);
  UpdateCache(*snap);
  if (accumulate) Accumulate(*snap);
  return snap;
}

void Monitor::CarryUtilSamples(GpuSnapshot& snap, bool accumulate) {
  for (GpuInfo& g : snap.gpus) {
    if (g.uuid.empty()) continue;
    if (!accumulate) {
      if (g.util_samples.empty()) continue;
      std::vector<UtilSample>& carried = carried_util_samples_[g.uuid];
      carried.insert(carried.end(), g.util_samples.begin(), g.util_samples.end());
      if (carried.size() > kMaxUtilSamples) {
        carried.erase(carried.begin(),
                      carried.end() - static_cast<std::ptrdiff_t>(kMaxUtilSamples));
      }
      continue;
    }
    auto it = carried_util_samples_.find(g.uuid);
    if (it == carried_util_samples_.end()) continue;
    std::vector<UtilSample> merged = std::move(it->second);
    carried_util_samples_.erase(it);
    merged.insert(merged.end(), g.util_samples.begin(), g.util_samples.end());
    if (merged.size() > kMaxUtilSamples) {
      merged.erase(merged.begin(), merged.end() - static_cast<std::ptrdiff_t>(kMaxUtilSamples));
    }
    g.util_samples = std::move(merged);
  }
  if (accumulate) carried_util_samples_.clear();  // GPUs that left: nothing to carry
}

void Monitor::SetSampleObserver(SampleObserver observer) {
  MutexLock lock(sample_mu_);
  observer_ = std::move(observer);
}

Status Monitor::SampleOnce() {
  MutexLock sample_lock(sample_mu_);
  Result<GpuSnapshot> snap = ReadFresh(/*accumulate=*/true);
  if (!snap.ok()) return snap.status();
  if (observer_) observer_(*snap);
  bool any_lost =
      std::any_of(snap->gpus.begin(), snap->gpus.end(), [](const GpuInfo& g) { return g.lost; });
  if (!any_lost) return Status::Ok();
  MutexLock backend_lock(backend_mu_);
  if (clock_.SteadyNow() - last_reinit_ < options_.reinit_interval) return Status::Ok();
  last_reinit_ = clock_.SteadyNow();
  Status reinit = backend_->Reinitialize();
  if (!reinit.ok()) {
    MutexLock lock(mu_);
    ++stats_.reinit_failures;
    stats_.last_reinit_error = reinit.message();
  }
  return Status::Ok();
}

void Monitor::UpdateCache(const GpuSnapshot& snap) {
  cache_ = snap;
  cache_time_ = clock_.SteadyNow();
  for (const GpuInfo& g : snap.gpus) {
    const std::string key = g.uuid.empty() ? "#" + std::to_string(g.index) : g.uuid;
    if (!g.lost) {
      lost_uuids_.erase(key);
      continue;
    }
    if (lost_uuids_.insert(key).second) {
      GpuEvent e;
      e.at = snap.taken_at;
      e.gpu_index = g.index;
      e.gpu_uuid = g.uuid;
      e.type = EventType::kGpuLost;
      e.description = "GPU " + std::to_string(g.index) + " is lost (fell off the bus)";
      RecordEvent(std::move(e));
    }
  }
}

void Monitor::Accumulate(const GpuSnapshot& snap) {
  ++stats_.samples;
  if (!snap.reason.empty() && snap.source != Source::kNone) ++stats_.failed_readings;
  const int64_t t_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(snap.taken_at.time_since_epoch())
          .count();
  for (const GpuInfo& g : snap.gpus) {
    if (!g.lost) history_.Add(g.index, ToPoint(g, t_ms));
  }
  stats_.history_bytes = history_.MemoryBytes();

  ExpireSessions();
  const auto now = clock_.SteadyNow();
  for (auto& [id, s] : sessions_) {
    // With a session interval, take a sample once at least (interval − half a sample interval)
    // has passed, so that sampling jitter does not skip every other one.
    if (s.interval && s.last_sample &&
        now - *s.last_sample < *s.interval - options_.sample_interval / 2) {
      continue;
    }
    s.last_sample = now;
    ++s.sample_count;
    for (const GpuInfo& g : snap.gpus) {
      if (g.lost) continue;
      if (s.gpus && s.gpus->count(g.index) == 0) continue;
      Session::Gpu& sg = s.per_gpu[g.index];
      sg.name = g.name;
      if (g.gpu_util_percent) sg.util.Add(*g.gpu_util_percent);
      if (g.memory_used_bytes) {
        sg.mem_used_mb.Add(static_cast<double>(*g.memory_used_bytes) / kBytesPerMib);
      }
      if (auto pct = g.MemoryUsagePercent()) sg.mem_pct.Add(*pct);
      if (g.temperature_c) sg.temp.Add(*g.temperature_c);
      if (g.power_draw_mw) sg.power.Add(*g.power_draw_mw / 1000.0);
    }
  }
}

void Monitor::RecordEvent(GpuEvent event) {
  EventCounts& c = event_counts_[event.gpu_index];
  ++c.total;
  if (event.type == EventType::kXid && event.xid) {
    ++c.by_xid[*event.xid];
    c.last_xid = event.xid;
  }
  if (event.type == EventType::kSingleBitEcc) ++c.single_bit_ecc;
  if (event.type == EventType::kDoubleBitEcc) ++c.double_bit_ecc;
  events_.push_back(std::move(event));
  while (events_.size() > options_.max_recent_events) events_.pop_front();
}

size_t Monitor::PollEvents(std::chrono::milliseconds timeout) {
  std::vector<GpuEvent> events = backend_->WaitEvents(timeout);
  MutexLock lock(mu_);
  for (GpuEvent& e : events) {
    e.at = clock_.WallNow();
    RecordEvent(std::move(e));
  }
  return events.size();
}

Result<GpuSnapshot> Monitor::QueryGpus(bool use_cache) {
  if (use_cache) {
    MutexLock lock(mu_);
    if (cache_ && clock_.SteadyNow() - cache_time_ < options_.cache_ttl) return *cache_;
  }
  return ReadFresh(/*accumulate=*/false);
}

Result<GpuInfo> Monitor::GetGpuInfo(uint32_t index, bool use_cache) {
  FLYT_ASSIGN_OR_RETURN(GpuSnapshot snap, QueryGpus(use_cache));
  for (GpuInfo& g : snap.gpus) {
    if (g.index == index) return std::move(g);
  }
  return NotFound("no GPU with index " + std::to_string(index) + " (this machine has " +
                  std::to_string(snap.gpus.size()) + ")");
}

std::optional<GpuSnapshot> Monitor::LastSnapshot() const {
  MutexLock lock(mu_);
  return cache_;
}

Result<std::vector<ScoredGpu>> Monitor::GetAvailableGpus(uint64_t min_free_memory_bytes,
                                                         uint32_t max_utilization_percent) {
  FLYT_ASSIGN_OR_RETURN(GpuSnapshot snap, QueryGpus(true));
  return RankAvailableGpus(snap.gpus, min_free_memory_bytes, max_utilization_percent,
                           options_.score_weights);
}

Result<std::string> Monitor::StartSession(const SessionOptions& options) {
  MutexLock lock(mu_);
  ExpireSessions();
  if (sessions_.size() >= options_.max_sessions) {
    return Status(StatusCode::kResourceExhausted, "too many monitoring sessions (" +
                                                      std::to_string(options_.max_sessions) +
                                                      " running); stop one first");
  }
  if (options.interval && *options.interval < options_.sample_interval) {
    return InvalidArgument("session interval " + std::to_string(options.interval->count()) +
                           " ms is shorter than the sampling interval (" +
                           std::to_string(options_.sample_interval.count()) + " ms)");
  }
  Session s;
  s.interval = options.interval;
  s.id = "mon-" + std::to_string(next_session_++);
  s.started = s.last_access = clock_.SteadyNow();
  if (options.gpus) s.gpus = std::set<uint32_t>(options.gpus->begin(), options.gpus->end());
  std::string id = s.id;
  sessions_.emplace(id, std::move(s));
  return id;
}

SessionStats Monitor::Summarise(const Session& s) const {
  SessionStats out;
  out.id = s.id;
  out.monitoring_duration_seconds =
      std::chrono::duration<double>(clock_.SteadyNow() - s.started).count();
  out.sample_count = s.sample_count;
  for (const auto& [index, g] : s.per_gpu) {
    GpuSessionStats gs;
    gs.index = index;
    gs.name = g.name;
    gs.utilization = ToMetric(g.util);
    gs.memory_used_mb = ToMetric(g.mem_used_mb);
    gs.memory_usage_percent = ToMetric(g.mem_pct);
    gs.temperature_c = ToMetric(g.temp);
    gs.power_draw_w = ToMetric(g.power);
    out.gpu_stats.emplace(index, std::move(gs));
  }
  return out;
}

void Monitor::ExpireSessions() {
  const auto now = clock_.SteadyNow();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (now - it->second.last_access > options_.session_idle_expiry) {
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<SessionStats> Monitor::GetSession(const std::string& id) {
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return NotFound("no monitoring session " + id);
  it->second.last_access = clock_.SteadyNow();
  return Summarise(it->second);
}

Result<SessionStats> Monitor::StopSession(const std::string& id) {
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return NotFound("no monitoring session " + id);
  SessionStats out = Summarise(it->second);
  sessions_.erase(it);
  return out;
}

std::vector<std::string> Monitor::SessionIds() const {
  MutexLock lock(mu_);
  std::vector<std::string> ids;
  for (const auto& [id, s] : sessions_) ids.push_back(id);
  return ids;
}

std::vector<HistoryPoint> Monitor::GetHistory(uint32_t index,
                                              std::chrono::system_clock::time_point since,
                                              std::chrono::milliseconds step) const {
  MutexLock lock(mu_);
  return history_.Query(
      index,
      std::chrono::duration_cast<std::chrono::milliseconds>(since.time_since_epoch()).count(),
      step.count());
}

std::vector<GpuEvent> Monitor::RecentEvents() const {
  MutexLock lock(mu_);
  return {events_.begin(), events_.end()};
}

std::map<uint32_t, EventCounts> Monitor::EventCountsByGpu() const {
  MutexLock lock(mu_);
  return event_counts_;
}

MonitorStats Monitor::Stats() const {
  MutexLock lock(mu_);
  MonitorStats stats = stats_;
  stats.sessions = sessions_.size();
  return stats;
}

}  // namespace flyt::gpu
