// The profiler (profiler.h): options, ingest of each sample into the GPU's rings, the profile
// and the public methods. Its insides are in profiler_engine.h; the analysis and the state
// machine in profiler_state.cc.
//
// Every Add() moves the cheap parts: the rings, the activity runs (time since the last busy
// sample, time memory has been held with ~0 utilisation), the median and coefficient of
// variation of the last minute, and the candidate state with its hysteresis. At most every
// analysis_interval it also runs the costly parts: the window quantiles (each window recomputed
// at most every 1/60 of its length), the cycle test on the series since the last phase change,
// the phase fold and the memory headroom. See docs/profiles.md.
#include "profile/profiler.h"

#include "profile/profiler_engine.h"

namespace flyt::profile {

Status ProfilerOptions::Validate() const {
  using std::chrono::seconds;
  if (sample_interval.count() < 100 || sample_interval > std::chrono::minutes(1)) {
    return InvalidArgument(Format("sample_interval must be 100 ms .. 60 s, not %lld ms",
                                  static_cast<long long>(sample_interval.count())));
  }
  if (!std::isfinite(idle_util_percent) || idle_util_percent < 0 || idle_util_percent >= 100) {
    return InvalidArgument(
        Format("idle_util_percent must be 0 .. 100 (exclusive), not %g", idle_util_percent));
  }
  if (allocated_idle_after.count() < 0) {
    return InvalidArgument("allocated_idle_after must not be negative");
  }
  if (state_hold.count() < 0) return InvalidArgument("state_hold must not be negative");
  if (cycle_window < std::chrono::duration_cast<seconds>(sample_interval) * 10 ||
      cycle_window.count() < 10) {
    return InvalidArgument(Format("cycle_window (%lld s) must be at least 10 s and 10 samples",
                                  static_cast<long long>(cycle_window.count())));
  }
  if (cycle_window > std::chrono::hours(1)) {
    return InvalidArgument(Format("cycle_window (%lld s) must be at most 1 h",
                                  static_cast<long long>(cycle_window.count())));
  }
  if (state_hold > cycle_window) {
    return InvalidArgument(Format("state_hold (%lld s) must not exceed cycle_window (%lld s)",
                                  static_cast<long long>(state_hold.count()),
                                  static_cast<long long>(cycle_window.count())));
  }
  if (analysis_interval.count() <= 0) {
    return InvalidArgument("analysis_interval must be positive");
  }
  if (analysis_interval > cycle_window) {
    return InvalidArgument("analysis_interval must not exceed cycle_window");
  }
  const auto window_samples = static_cast<size_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(cycle_window).count() /
      sample_interval.count());
  if (min_samples < 2 || min_samples > window_samples) {
    return InvalidArgument(
        Format("min_samples must be 2 .. %zu (the samples in cycle_window), "
               "not %zu",
               window_samples, min_samples));
  }
  if (max_gap < std::chrono::duration_cast<seconds>(sample_interval * 2) || max_gap.count() < 1) {
    return InvalidArgument("max_gap must be at least two sample intervals");
  }
  if (max_phase_changes < 1 || max_phase_changes > kMaxPending) {
    return InvalidArgument(Format("max_phase_changes must be 1 .. %zu", kMaxPending));
  }
  if (!std::isfinite(steady_max_cv) || steady_max_cv <= 0) {
    return InvalidArgument("steady_max_cv must be positive");
  }
  if (!(cycle.min_period_s > 0) || !(cycle.max_period_s >= cycle.min_period_s) ||
      !std::isfinite(cycle.max_period_s)) {
    return InvalidArgument("cycle periods must satisfy 0 < min_period_s <= max_period_s");
  }
  if (!(cycle.min_cycles >= 1) || !std::isfinite(cycle.min_cycles)) {
    return InvalidArgument("min_cycles must be at least 1");
  }
  if (!(cycle.min_confidence > 0 && cycle.min_confidence <= 1)) {
    return InvalidArgument("cycle min_confidence must be in (0, 1]");
  }
  return Status::Ok();
}

Profiler::Profiler(ProfilerOptions options, CycleDetector detector)
    : options_(std::move(options)), detector_(std::move(detector)) {}
Profiler::~Profiler() = default;

// All of the per-GPU logic over Gpu (the Profiler's mutex is held by every caller).

void Profiler::Gpu::Engine::Restart(Gpu& g, TimePoint at, std::string reason) {
  g.has_history = true;
  g.history_start = at;
  g.last_at = at;
  g.restart_reason = std::move(reason);
  g.util.Clear();
  g.memory_util.Clear();
  g.power_w.Clear();
  g.launches.Clear();
  g.fb_used.Clear();
  g.slot.Clear();
  g.hr.Clear();
  g.hr_dt_s = 0;
  g.hr_open_cell = -1;
  g.hr_sum = 0;
  g.hr_count = 0;
  g.last_active_at.reset();
  g.activity_start.reset();
  g.level_start.reset();
  g.held_quiet_since.reset();
  g.last_quiet = false;
  g.recent = {};
  g.recent_short_p50 = kNaN;
  // We know nothing of the new history: unknown at once, not a phase change.
  g.reported = State::kUnknown;
  g.reported_since = at;
  g.candidate = State::kUnknown;
  g.candidate_since = at;
  g.analysed = false;
  g.cycle_start = at;
  g.cycle_result = {};
  g.cycle.reset();
  g.reported_period_s = 0;
  g.period_shift_since.reset();
  g.level_ref_p50 = kNaN;
  g.level_shift_since.reset();
  g.window_at.fill(std::nullopt);
  g.windows.clear();
  g.memory = {};
  g.inputs.clear();
  g.util_rate_hz = 0;
}

bool Profiler::Gpu::Engine::Held(const Gpu& g, const Sample& s) const {
  if (s.processes_known) {
    for (const ProcessUse& p : s.processes) {
      if (!p.memory_bytes || *p.memory_bytes > 0) return true;
    }
    return false;
  }
  return g.memory_used_latest && *g.memory_used_latest > o_.held_memory_bytes;
}

void Profiler::Gpu::Engine::IngestHighRate(Gpu& g, const Sample& s) {
  if (s.util_samples.empty() || s.lost) return;
  if (g.hr_dt_s == 0) {
    // The grid: 1/6 s, or the driver's own spacing when it is slower (the median of this batch).
    std::vector<double> gaps;
    for (size_t i = 1; i < s.util_samples.size(); ++i) {
      const double d = Secs(s.util_samples[i].at - s.util_samples[i - 1].at);
      if (d > 0) gaps.push_back(d);
    }
    if (gaps.empty()) return;  // one point says nothing of the rate: wait for a batch
    std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
    g.hr_dt_s = std::clamp(gaps[gaps.size() / 2], 1.0 / kHighRateHz, sizes_.interval_s);
    g.hr_origin = s.util_samples.front().at - FromSecs(g.hr_dt_s / 2);
    g.hr_open_cell = 0;
  }
  const auto flush = [&g] {
    g.hr.Push(g.hr_count > 0 ? static_cast<float>(g.hr_sum / g.hr_count) : kNaNf);
    g.hr_sum = 0;
    g.hr_count = 0;
  };
  for (const Sample::UtilPoint& p : s.util_samples) {
    if (p.at < g.hr_origin) continue;  // older than the grid (before a restart)
    const auto cell = static_cast<int64_t>(std::floor(Secs(p.at - g.hr_origin) / g.hr_dt_s));
    if (cell < g.hr_open_cell) continue;  // out of order: the cell is closed
    if (cell > g.hr_open_cell) {
      flush();
      const int64_t skipped =
          std::min<int64_t>(cell - g.hr_open_cell - 1, static_cast<int64_t>(g.hr.capacity()));
      for (int64_t i = 0; i < skipped; ++i) g.hr.Push(kNaNf);
      g.hr_open_cell = cell;
    }
    if (std::isfinite(p.percent) && p.percent >= 0 && p.percent <= 100) {
      g.hr_sum += p.percent;
      ++g.hr_count;
      g.hr_last_point = std::max(g.hr_last_point, p.at);
      g.seen_util_samples = s.at;
    }
  }
}

void Profiler::Gpu::Engine::Ingest(Gpu& g, const Sample& s) {
  size_t steps = 1;  // 0: the sample replaces the newest slot
  if (!g.has_history) {
    Restart(g, s.at, "");
  } else {
    const double dt = Secs(s.at - g.last_at);
    if (dt < -sizes_.interval_s / 2) {
      Restart(g, s.at, Format("clock stepped back %.0f s", -dt));
    } else if (dt > static_cast<double>(o_.max_gap.count())) {
      Restart(g, s.at,
              Format("no sample for %s (more than max_gap %lld s)", Ago(dt).c_str(),
                     static_cast<long long>(o_.max_gap.count())));
    } else {
      steps = static_cast<size_t>(std::max(0.0, std::round(dt / sizes_.interval_s)));
    }
  }
  if (g.slot.empty()) steps = 1;
  for (size_t i = 1; i < steps; ++i) {
    g.util.Push(kNaNf);
    g.memory_util.Push(kNaNf);
    g.power_w.Push(kNaNf);
    g.launches.Push(kNaNf);
    g.fb_used.Push(kNaN);
    g.slot.Push(Slot::kGap);
  }
  if (s.at > g.last_at) g.last_at = s.at;

  IngestHighRate(g, s);

  float util_v = kNaNf, memory_util_v = kNaNf, power_v = kNaNf, launches_v = kNaNf;
  double fb = kNaN;
  Slot why = Slot::kValid;
  if (s.lost) {
    why = Slot::kLost;
  } else {
    if (!s.util_percent) {
      why = Slot::kAbsent;
    } else if (!std::isfinite(*s.util_percent)) {
      why = Slot::kNonFinite;
    } else if (*s.util_percent < 0 || *s.util_percent > 100) {
      why = Slot::kOutOfRange;
    } else {
      util_v = static_cast<float>(*s.util_percent);
      g.seen_util = s.at;
    }
    if (why != Slot::kValid && !s.util_samples.empty()) {
      // No 1 Hz reading, but the driver's samples of this interval: their mean.
      double sum = 0;
      int n = 0;
      for (const auto& p : s.util_samples) {
        if (std::isfinite(p.percent) && p.percent >= 0 && p.percent <= 100) {
          sum += p.percent;
          ++n;
        }
      }
      if (n > 0) {
        util_v = static_cast<float>(sum / n);
        why = Slot::kValid;
      }
    }
    if (auto v = Percent(s.memory_util_percent)) {
      memory_util_v = static_cast<float>(*v);
      g.seen_memory_util = s.at;
    }
    if (s.power_w && std::isfinite(*s.power_w) && *s.power_w >= 0) {
      power_v = static_cast<float>(*s.power_w);
      g.seen_power = s.at;
    }
    if (s.launches_per_second && std::isfinite(*s.launches_per_second) &&
        *s.launches_per_second >= 0) {
      launches_v = static_cast<float>(*s.launches_per_second);
      g.seen_launches = s.at;
    }
    if (s.memory_used_bytes) {
      fb = static_cast<double>(*s.memory_used_bytes);
      g.seen_memory_used = s.at;
    }
    if (s.memory_total_bytes) g.memory_total = s.memory_total_bytes;
    g.memory_used_latest = s.memory_used_bytes;
    g.launches_latest =
        std::isfinite(launches_v) ? std::optional<double>(launches_v) : std::nullopt;
    g.processes = s.processes;
    if (s.processes_known) g.seen_processes = s.at;
  }
  if (steps == 0) {
    g.util.Back() = util_v;
    g.memory_util.Back() = memory_util_v;
    g.power_w.Back() = power_v;
    g.launches.Back() = launches_v;
    g.fb_used.Back() = fb;
    g.slot.Back() = why;
  } else {
    g.util.Push(util_v);
    g.memory_util.Push(memory_util_v);
    g.power_w.Push(power_v);
    g.launches.Push(launches_v);
    g.fb_used.Push(fb);
    g.slot.Push(why);
  }
}

std::string Profiler::Gpu::Engine::InsufficientReason(const Gpu& g, TimePoint now) const {
  if (!g.has_history || g.slot.empty()) return "no samples yet";
  const size_t n = g.slot.size();
  std::string prefix;
  if (!g.restart_reason.empty()) {
    prefix =
        g.restart_reason + "; history restarted " + Ago(Secs(now - g.history_start)) + " ago; ";
  }
  if (n < o_.min_samples) {
    return prefix + Format("%zu of %zu samples needed", n, o_.min_samples);
  }
  // Of the last min_samples slots, at least half must carry a utilisation.
  std::array<size_t, 6> count{};
  for (size_t i = 0; i < o_.min_samples; ++i) ++count[static_cast<size_t>(g.slot.Back(i))];
  const size_t valid = count[static_cast<size_t>(Slot::kValid)];
  if (valid * 2 >= o_.min_samples) return "";
  std::string s = prefix + Format("%zu of the last %zu samples have a valid utilisation", valid,
                                  o_.min_samples);
  const std::array<std::pair<Slot, const char*>, 4> kinds = {{{Slot::kAbsent, "absent"},
                                                              {Slot::kNonFinite, "NaN/inf"},
                                                              {Slot::kOutOfRange, "out of range"},
                                                              {Slot::kGap, "not sampled (gap)"}}};
  std::string parts;
  for (const auto& [kind, words] : kinds) {
    const size_t c = count[static_cast<size_t>(kind)];
    if (c == 0) continue;
    if (!parts.empty()) parts += ", ";
    parts += Format("%zu %s", c, words);
  }
  if (!parts.empty()) s += ": " + parts;
  return s;
}

std::vector<double> Profiler::Gpu::Engine::UtilSince(const Gpu& g, TimePoint start,
                                                     TimePoint* first) const {
  size_t n = static_cast<size_t>(
                 std::max(0.0, std::floor(Secs(g.last_at - start) / sizes_.interval_s + 1e-9))) +
             1;
  n = std::min({n, g.util.size(), sizes_.cycle_slots});
  std::vector<double> out;
  out.reserve(n);
  g.util.Tail(n, out);
  *first = g.last_at - FromSecs(static_cast<double>(n == 0 ? 0 : n - 1) * sizes_.interval_s);
  return out;
}

std::vector<double> Profiler::Gpu::Engine::HighRateSince(const Gpu& g, TimePoint start,
                                                         TimePoint* first) const {
  // The ring's newest cell is hr_open_cell - 1; a cell's time is its centre.
  const TimePoint newest =
      g.hr_origin + FromSecs((static_cast<double>(g.hr_open_cell) - 0.5) * g.hr_dt_s);
  const double cycle_s = static_cast<double>(o_.cycle_window.count());
  size_t n = static_cast<size_t>(std::max(0.0, std::floor(Secs(newest - start) / g.hr_dt_s))) + 1;
  n = std::min({n, g.hr.size(), static_cast<size_t>(cycle_s / g.hr_dt_s) + 1});
  std::vector<double> out;
  out.reserve(n);
  g.hr.Tail(n, out);
  *first = newest - FromSecs(static_cast<double>(n == 0 ? 0 : n - 1) * g.hr_dt_s);
  return out;
}

bool Profiler::Gpu::Engine::UseHighRate(const Gpu& g, TimePoint at) const {
  if (g.hr_dt_s == 0 || g.hr.size() < o_.min_samples) return false;
  // The driver still delivers: its newest point is at most ~two sample intervals old.
  return Secs(at - g.hr_last_point) <= 2 * sizes_.interval_s + g.hr_dt_s;
}

void Profiler::Gpu::Engine::Add(Gpu& g, const Sample& s, std::vector<PhaseChange>& changes) {
  Ingest(g, s);
  if (!g.analysed || g.last_at - g.last_analysis >= o_.analysis_interval ||
      g.last_at < g.last_analysis) {
    Analyse(g, g.last_at, changes);
  }
  UpdateState(g, s, changes);
}

GpuProfile Profiler::Gpu::Engine::Build(const Gpu& g, const std::string& uuid) const {
  GpuProfile p;
  p.index = g.index;
  p.uuid = uuid;
  p.name = g.name;
  p.computed_at = g.last_at;
  p.state = g.reported;
  p.state_since = g.reported_since;
  p.state_seconds = std::max(0.0, Secs(g.last_at - g.reported_since));
  if (g.reported == State::kUnknown) {
    p.insufficient_data = InsufficientReason(g, g.last_at);
    if (p.insufficient_data.empty()) p.insufficient_data = g.settle_note;
    if (p.insufficient_data.empty()) p.insufficient_data = "no state has held yet";
  }
  if (g.reported == State::kCyclic && g.cycle) {
    Cycle c = *g.cycle;
    if (c.period_s > 0) {
      const TimePoint first_trough = c.phase_origin + FromSecs(c.util_trough_offset_s);
      double k = std::ceil(Secs(g.last_at - first_trough) / c.period_s);
      if (k < 0) k = 0;
      c.next_util_trough_at = first_trough + FromSecs(k * c.period_s);
    }
    p.cycle = std::move(c);
  }
  if (g.reported == State::kAllocatedIdle) {
    AllocatedIdle a;
    a.seconds = p.state_seconds;
    a.memory_bytes = g.memory_used_latest;
    for (const ProcessUse& pu : g.processes) {
      if (!pu.memory_bytes || *pu.memory_bytes > 0) a.processes.push_back(pu);
    }
    p.allocated_idle = std::move(a);
  }
  if (g.windows.empty()) {
    for (const auto& [window_name, length_s] : kWindows) {
      Window w;
      w.name = window_name;
      w.length = std::chrono::seconds(length_s);
      p.windows.push_back(std::move(w));
    }
  } else {
    p.windows = g.windows;
  }
  p.memory = g.memory;
  if (!p.memory.total_bytes) p.memory.total_bytes = g.memory_total;
  p.processes = g.processes;
  p.launches_per_second = g.launches_latest;
  p.inputs = g.inputs;
  p.util_rate_hz = g.util_rate_hz;
  p.phase_changes.assign(g.phase_changes.begin(), g.phase_changes.end());
  return p;
}

void Profiler::Add(uint32_t index, const std::string& uuid, const std::string& name,
                   const Sample& sample) {
  Gpu::Engine engine(options_, detector_);
  std::vector<PhaseChange> changes;
  MutexLock lock(mu_);
  auto& g = gpus_[uuid];
  if (!g) g = std::make_unique<Gpu>(Sizes(options_));
  g->index = index;
  g->name = name;
  engine.Add(*g, sample, changes);
  for (PhaseChange& c : changes) {
    pending_.push_back(GpuPhaseChange{index, uuid, std::move(c)});
  }
  if (pending_.size() > kMaxPending) {
    pending_.erase(pending_.begin(),
                   pending_.begin() + static_cast<ptrdiff_t>(pending_.size() - kMaxPending));
  }
}

void Profiler::Retain(const std::vector<std::string>& present) {
  MutexLock lock(mu_);
  for (auto it = gpus_.begin(); it != gpus_.end();) {
    if (std::find(present.begin(), present.end(), it->first) == present.end()) {
      it = gpus_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<GpuProfile> Profiler::Profiles() const {
  Gpu::Engine engine(options_, detector_);
  std::vector<GpuProfile> out;
  {
    MutexLock lock(mu_);
    out.reserve(gpus_.size());
    for (const auto& [uuid, g] : gpus_) out.push_back(engine.Build(*g, uuid));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const GpuProfile& a, const GpuProfile& b) { return a.index < b.index; });
  return out;
}

std::optional<GpuProfile> Profiler::Profile(uint32_t index) const {
  Gpu::Engine engine(options_, detector_);
  MutexLock lock(mu_);
  // Two UUIDs may claim one index until Retain drops the one that left: the newest wins.
  const Gpu* best = nullptr;
  const std::string* best_uuid = nullptr;
  for (const auto& [uuid, g] : gpus_) {
    if (g->index == index && (!best || g->last_at > best->last_at)) {
      best = g.get();
      best_uuid = &uuid;
    }
  }
  if (!best) return std::nullopt;
  return engine.Build(*best, *best_uuid);
}

std::vector<Profiler::GpuPhaseChange> Profiler::TakePhaseChanges() {
  MutexLock lock(mu_);
  return std::exchange(pending_, {});
}

size_t Profiler::BytesPerGpu() const {
  const Sizes sizes(options_);
  size_t bytes = sizeof(Gpu);
  // Per-sample rings: util, memory-copy util, power, launches (float), FB used (double), why.
  bytes += sizes.slots * (4 * sizeof(float) + sizeof(double) + sizeof(Slot));
  bytes += sizes.hr_slots * sizeof(float);
  // Windows, phase changes (with a detail of up to ~64 characters each).
  bytes += kWindows.size() * (sizeof(Window) + 8);
  bytes += options_.max_phase_changes * (sizeof(PhaseChange) + 64);
  // The newest process list is not counted: ~100 bytes per process.
  return bytes;
}

}  // namespace flyt::profile
