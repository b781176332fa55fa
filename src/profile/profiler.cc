// The profiler (profiler.h). Per GPU: rings of the per-sample series (one slot per
// sample_interval, NaN where a reading was absent, invalid or never came), a ring of the
// driver's ~6 Hz utilisation samples resampled onto a uniform grid, and the state machine.
//
// Every Add() moves the cheap parts: the rings, the activity runs (time since the last busy
// sample, time memory has been held with ~0 utilisation), the median and coefficient of
// variation of the last minute, and the candidate state with its hysteresis. At most every
// analysis_interval it also runs the costly parts: the window quantiles (each window recomputed
// at most every 1/60 of its length), the cycle test on the series since the last phase change,
// the phase fold and the memory headroom. See docs/design.md ("Usage profiles").
#include "profile/profiler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <deque>
#include <limits>
#include <utility>

#include "profile/ring.h"

namespace flyt::profile {

namespace {

using internal::Ring;
using TimePoint = std::chrono::system_clock::time_point;
using Duration = std::chrono::system_clock::duration;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();
// The grid the driver's utilisation samples are resampled onto (a slower observed rate is kept).
constexpr double kHighRateHz = 6.0;
constexpr size_t kMaxPending = 1024;
// A steady load whose median moves by more than this many points is a level change.
constexpr double kLevelShiftPoints = 20.0;
// A cyclic load whose period moves by more than this fraction is a level change.
constexpr double kPeriodShiftFraction = 0.2;
// Hysteresis on the steady/bursty boundary: leaving steady needs cv > 1.2 x steady_max_cv,
// leaving bursty needs cv < 0.8 x steady_max_cv.
constexpr double kCvBand = 0.2;
// While cyclic, the cycle test keeps the verdict down to this fraction of min_confidence.
constexpr double kConfidenceKeep = 0.8;
constexpr std::array<std::pair<const char*, int>, 3> kWindows = {
    {{"1m", 60}, {"15m", 900}, {"1h", 3600}}};
constexpr int kLongestWindowS = 3600;

// Why a slot of the per-sample series holds no utilisation.
enum class Slot : uint8_t { kValid, kAbsent, kNonFinite, kOutOfRange, kGap, kLost };

double Secs(Duration d) { return std::chrono::duration<double>(d).count(); }
Duration FromSecs(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

// "3 s", "2.5 min", "1.2 h".
std::string Ago(double s) {
  if (s < 600) return Format("%.0f s", s);
  if (s < 7200) return Format("%.1f min", s / 60);
  return Format("%.1f h", s / 3600);
}

bool IsQuietState(State s) { return s == State::kIdle || s == State::kAllocatedIdle; }

std::optional<double> Percent(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v) || *v < 0 || *v > 100) return std::nullopt;
  return *v;
}

// The sorted valid values of `values` (NaN dropped) into `scratch`.
void SortedValid(const std::vector<double>& values, std::vector<double>& scratch) {
  scratch.clear();
  for (double v : values) {
    if (std::isfinite(v)) scratch.push_back(v);
  }
  std::sort(scratch.begin(), scratch.end());
}

std::optional<Quantiles> QuantilesOf(const std::vector<double>& values,
                                     std::vector<double>& scratch) {
  SortedValid(values, scratch);
  if (scratch.empty()) return std::nullopt;
  Quantiles q;
  q.p50 = internal::QuantileSorted(scratch, 0.50);
  q.p95 = internal::QuantileSorted(scratch, 0.95);
  q.p99 = internal::QuantileSorted(scratch, 0.99);
  q.samples = scratch.size();
  return q;
}

struct Stats {
  size_t n = 0;
  double p50 = kNaN;
  double cv = kNaN;  // stddev / mean; NaN when the mean is 0
};
Stats StatsOf(const std::vector<double>& values, std::vector<double>& scratch) {
  SortedValid(values, scratch);
  Stats s;
  s.n = scratch.size();
  if (s.n == 0) return s;
  s.p50 = internal::QuantileSorted(scratch, 0.5);
  double sum = 0;
  for (double v : scratch) sum += v;
  const double mean = sum / static_cast<double>(s.n);
  double var = 0;
  for (double v : scratch) var += (v - mean) * (v - mean);
  var /= static_cast<double>(s.n);
  if (mean > 0) s.cv = std::sqrt(var) / mean;
  return s;
}

std::string ProcessWords(const ProcessUse& p) {
  std::string s = "pid " + std::to_string(p.pid);
  if (p.name || p.user) {
    s += " (";
    if (p.name) s += *p.name;
    if (p.name && p.user) s += ", ";
    if (p.user) s += *p.user;
    s += ")";
  }
  return s;
}

// Sizes derived from the options (never zero, whatever the options say: Validate refuses
// nonsense, but a profiler built without it must not divide by zero).
struct Sizes {
  double interval_s = 1;
  size_t slots = 1;     // per-sample rings: the longest window or the cycle window
  size_t hr_slots = 1;  // the high-rate ring: the cycle window at 6 Hz
  size_t cycle_slots = 1;
  explicit Sizes(const ProfilerOptions& o) {
    interval_s = std::max(0.001, std::chrono::duration<double>(o.sample_interval).count());
    const double cycle_s = std::max(1.0, static_cast<double>(o.cycle_window.count()));
    const double longest = std::max<double>(kLongestWindowS, cycle_s);
    slots = static_cast<size_t>(std::ceil(longest / interval_s)) + 1;
    cycle_slots = static_cast<size_t>(std::ceil(cycle_s / interval_s)) + 1;
    hr_slots = static_cast<size_t>(std::ceil(cycle_s * kHighRateHz)) + 1;
  }
};

}  // namespace

struct Profiler::Gpu {
  class Engine;  // the per-GPU logic (below), with the Profiler's mutex held

  explicit Gpu(const Sizes& sizes) {
    util.Reset(sizes.slots);
    memory_util.Reset(sizes.slots);
    power_w.Reset(sizes.slots);
    launches.Reset(sizes.slots);
    fb_used.Reset(sizes.slots);
    slot.Reset(sizes.slots);
    hr.Reset(sizes.hr_slots);
  }

  uint32_t index = 0;
  std::string name;

  // History: since the first sample or the last restart.
  bool has_history = false;
  TimePoint history_start{};
  TimePoint last_at{};
  std::string restart_reason;  // why the history last restarted ("" at the first sample)

  // The per-sample series, one slot per sample_interval (the newest slot is `last_at`).
  Ring<float> util, memory_util, power_w, launches;
  Ring<double> fb_used;
  Ring<Slot> slot;

  // The driver's utilisation samples on a uniform grid of hr_dt_s (0: not started).
  Ring<float> hr;
  double hr_dt_s = 0;
  TimePoint hr_origin{};
  int64_t hr_open_cell = -1;  // the cell being filled; the ring holds the cells before it
  double hr_sum = 0;
  int hr_count = 0;
  TimePoint hr_last_point{};

  // Newest readings.
  std::optional<uint64_t> memory_total;
  std::optional<double> launches_latest;
  std::vector<ProcessUse> processes;
  std::optional<uint64_t> memory_used_latest;
  // When each input was last seen valid (for GpuProfile::inputs).
  std::optional<TimePoint> seen_util, seen_util_samples, seen_memory_util, seen_memory_used,
      seen_power, seen_launches, seen_processes;

  // Activity: the last sample with utilisation above the quiet level; since when memory has
  // been held with ~0 utilisation; whether the newest valid utilisation was quiet.
  std::optional<TimePoint> last_active_at;
  std::optional<TimePoint> activity_start;  // the current busy run's first sample
  std::optional<TimePoint> level_start;     // the newest state or level change
  std::optional<TimePoint> held_quiet_since;
  bool last_quiet = false;
  Stats recent;                    // the last minute's utilisation
  double recent_short_p50 = kNaN;  // the last state_hold's utilisation median

  // The state machine.
  State reported = State::kUnknown;
  TimePoint reported_since{};
  State candidate = State::kUnknown;
  TimePoint candidate_since{};
  std::string settle_note;  // while unknown with enough data: what it is waiting for

  // Analysis (recomputed at most every analysis_interval).
  bool analysed = false;
  TimePoint last_analysis{};
  TimePoint cycle_start{};  // the cycle test looks at the series since here
  CycleResult cycle_result;
  std::optional<Cycle> cycle;  // from the newest cyclic verdict
  double reported_period_s = 0;
  std::optional<TimePoint> period_shift_since;
  double level_ref_p50 = kNaN;
  std::optional<TimePoint> level_shift_since;
  std::array<std::optional<TimePoint>, kWindows.size()> window_at;
  std::vector<Window> windows;
  Memory memory;
  std::vector<std::string> inputs;
  double util_rate_hz = 0;

  std::deque<PhaseChange> phase_changes;
};

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
class Profiler::Gpu::Engine {
 public:
  Engine(const ProfilerOptions& o, const CycleDetector& detector)
      : o_(o), sizes_(o), detector_(detector) {}

  void Add(Gpu& g, const Sample& s, std::vector<PhaseChange>& changes);
  GpuProfile Build(const Gpu& g, const std::string& uuid) const;
  std::string InsufficientReason(const Gpu& g, TimePoint now) const;

 private:
  void Restart(Gpu& g, TimePoint at, std::string reason);
  void Ingest(Gpu& g, const Sample& s);
  void IngestHighRate(Gpu& g, const Sample& s);
  void Analyse(Gpu& g, TimePoint at, std::vector<PhaseChange>& changes);
  void UpdateState(Gpu& g, const Sample& s, std::vector<PhaseChange>& changes);
  void Report(Gpu& g, State to, TimePoint since, TimePoint at, std::vector<PhaseChange>& changes);
  void Record(Gpu& g, PhaseChange change, std::vector<PhaseChange>& changes);
  bool Held(const Gpu& g, const Sample& s) const;
  // The per-sample utilisation series since `start` (at most the cycle window), its first
  // slot's time in `first`.
  std::vector<double> UtilSince(const Gpu& g, TimePoint start, TimePoint* first) const;
  std::vector<double> HighRateSince(const Gpu& g, TimePoint start, TimePoint* first) const;
  bool UseHighRate(const Gpu& g, TimePoint at) const;
  size_t SlotsFor(double seconds) const {
    return static_cast<size_t>(std::max(1.0, std::round(seconds / sizes_.interval_s)));
  }

  const ProfilerOptions& o_;
  const Sizes sizes_;
  const CycleDetector& detector_;
};

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

void Profiler::Gpu::Engine::Record(Gpu& g, PhaseChange change, std::vector<PhaseChange>& changes) {
  g.phase_changes.push_back(change);
  while (g.phase_changes.size() > o_.max_phase_changes) g.phase_changes.pop_front();
  changes.push_back(std::move(change));
}

void Profiler::Gpu::Engine::Analyse(Gpu& g, TimePoint at, std::vector<PhaseChange>& changes) {
  g.analysed = true;
  g.last_analysis = at;
  std::vector<double> values, scratch;

  // Window quantiles; a window is recomputed at most every 1/60 of its length.
  if (g.windows.empty()) {
    for (const auto& [window_name, length_s] : kWindows) {
      Window w;
      w.name = window_name;
      w.length = std::chrono::seconds(length_s);
      g.windows.push_back(std::move(w));
    }
  }
  for (size_t i = 0; i < kWindows.size(); ++i) {
    const double length_s = kWindows[i].second;
    const double every_s =
        std::max(length_s / 60, std::chrono::duration<double>(o_.analysis_interval).count());
    if (g.window_at[i] && Secs(at - *g.window_at[i]) < every_s - 1e-6) continue;
    g.window_at[i] = at;
    const size_t n = SlotsFor(length_s);
    Window& w = g.windows[i];
    values.clear();
    g.util.Tail(n, values);
    w.util_percent = QuantilesOf(values, scratch);
    values.clear();
    g.fb_used.Tail(n, values);
    w.memory_used_bytes = QuantilesOf(values, scratch);
    values.clear();
    g.power_w.Tail(n, values);
    w.power_w = QuantilesOf(values, scratch);
  }

  // Inputs seen in the last minute.
  g.inputs.clear();
  const auto seen = [&](const std::optional<TimePoint>& t) {
    return t && Secs(at - *t) <= std::max(60.0, 2 * sizes_.interval_s);
  };
  const bool use_hr = UseHighRate(g, at);
  if (seen(g.seen_util)) g.inputs.push_back("util");
  if (use_hr && seen(g.seen_util_samples)) g.inputs.push_back("util_samples");
  if (seen(g.seen_memory_util)) g.inputs.push_back("memory_util");
  if (seen(g.seen_memory_used)) g.inputs.push_back("memory_used");
  if (seen(g.seen_power)) g.inputs.push_back("power");
  if (seen(g.seen_launches)) g.inputs.push_back("launches");
  if (seen(g.seen_processes)) g.inputs.push_back("processes");

  // The cycle test, on the series since the last phase change (at most cycle_window).
  if (g.reported != State::kLost && InsufficientReason(g, at).empty()) {
    TimePoint first{};
    double dt = sizes_.interval_s;
    std::vector<double> series;
    if (use_hr) {
      series = HighRateSince(g, g.cycle_start, &first);
      dt = g.hr_dt_s;
    } else {
      series = UtilSince(g, g.cycle_start, &first);
    }
    g.util_rate_hz = 1 / dt;
    CycleOptions copt = o_.cycle;
    copt.idle_level = o_.idle_util_percent;
    if (g.reported == State::kCyclic) copt.min_confidence *= kConfidenceKeep;
    CycleResult r = detector_(series, dt, copt);
    const auto shifted = [&](double p) {
      return g.reported_period_s > 0 &&
             std::abs(p - g.reported_period_s) > kPeriodShiftFraction * g.reported_period_s;
    };
    if (g.reported == State::kCyclic && (!r.cyclic || shifted(r.period_s)) && series.size() > 8) {
      // The whole span may mix the old cycle with a new one: the newer half decides.
      const size_t half = series.size() / 2;
      std::vector<double> newer(series.end() - static_cast<ptrdiff_t>(half), series.end());
      CycleResult rn = detector_(newer, dt, copt);
      if (rn.cyclic) {
        r = rn;
        first += FromSecs(static_cast<double>(series.size() - half) * dt);
        series = std::move(newer);
      }
    }
    if (r.cyclic && r.period_s > 0) {
      // The span since the last phase change may be long: the cycle must still be there in its
      // newest (min_cycles + 1) periods, or it has stopped.
      const auto n = static_cast<size_t>((copt.min_cycles + 1) * r.period_s / dt);
      if (n >= 8 && series.size() > n + n / 2) {
        CycleResult rn = detector_(std::span<const double>(series).last(n), dt, copt);
        if (!rn.cyclic && !rn.insufficient) {
          r.cyclic = false;
          r.reason = "the cycle stopped: " + rn.reason;
        }
      }
    }
    g.cycle_result = r;
    if (r.cyclic && r.period_s > 0) {
      Cycle c;
      c.period_s = r.period_s;
      c.confidence = r.confidence;
      c.method = r.method;
      c.cycles_in_window = r.cycles_in_window;
      c.phase_origin = first;
      if (auto ph = FoldPhase(series, dt, r.period_s)) {
        c.util_peak_offset_s = ph->peak_offset_s;
        c.util_trough_offset_s = ph->trough_offset_s;
      }
      // Memory, on the per-sample series over the same span, when it moves with the cycle.
      TimePoint fb_first{};
      size_t n =
          static_cast<size_t>(std::max(0.0, std::floor(Secs(at - first) / sizes_.interval_s))) + 1;
      n = std::min(n, g.fb_used.size());
      values.clear();
      g.fb_used.Tail(n, values);
      fb_first = g.last_at - FromSecs(static_cast<double>(n == 0 ? 0 : n - 1) * sizes_.interval_s);
      if (std::count_if(values.begin(), values.end(), [](double v) { return std::isfinite(v); }) >
          0) {
        if (auto ph = FoldPhase(values, sizes_.interval_s, r.period_s)) {
          const double shift = Secs(fb_first - first);
          const auto wrap = [&](double x) {
            double y = std::fmod(x + shift, r.period_s);
            return y < 0 ? y + r.period_s : y;
          };
          c.memory_peak_offset_s = wrap(ph->peak_offset_s);
          c.memory_trough_offset_s = wrap(ph->trough_offset_s);
        }
      }
      g.cycle = std::move(c);
      // A cyclic load whose period moved by more than 20 % for state_hold: a level change.
      if (g.reported == State::kCyclic && shifted(r.period_s)) {
        if (!g.period_shift_since) g.period_shift_since = at;
        if (at - *g.period_shift_since >= o_.state_hold) {
          PhaseChange pc;
          pc.at = *g.period_shift_since;
          pc.from = pc.to = State::kCyclic;
          pc.kind = "level";
          pc.detail = Format("period %.1f s -> %.1f s", g.reported_period_s, r.period_s);
          Record(g, std::move(pc), changes);
          g.reported_period_s = r.period_s;
          g.cycle_start =
              std::max(g.cycle_start, at - FromSecs((o_.cycle.min_cycles + 1) * r.period_s));
          g.period_shift_since.reset();
        }
      } else {
        g.period_shift_since.reset();
      }
    } else {
      g.period_shift_since.reset();
    }
  }

  // Memory headroom: the peak over the last 3 periods when cyclic, else the last minute.
  const double peak_s = g.reported == State::kCyclic && g.cycle ? 3 * g.cycle->period_s : 60.0;
  const size_t n = std::min(SlotsFor(peak_s), g.fb_used.size());
  g.memory = {};
  g.memory.total_bytes = g.memory_total;
  g.memory.peak_window_s = static_cast<double>(n) * sizes_.interval_s;
  double peak = kNaN;
  for (size_t i = 0; i < n; ++i) {
    const double v = g.fb_used.Back(i);
    if (std::isfinite(v) && !(v <= peak)) peak = v;
  }
  if (std::isfinite(peak)) {
    g.memory.peak_used_bytes = static_cast<uint64_t>(peak);
    if (g.memory_total) {
      g.memory.headroom_bytes = *g.memory_total > *g.memory.peak_used_bytes
                                    ? *g.memory_total - *g.memory.peak_used_bytes
                                    : 0;
    }
  }
}

void Profiler::Gpu::Engine::Report(Gpu& g, State to, TimePoint since, TimePoint at,
                                   std::vector<PhaseChange>& changes) {
  const State from = g.reported;
  since = std::clamp(since, g.reported_since, at);
  g.reported = to;
  g.reported_since = since;
  g.level_shift_since.reset();
  g.period_shift_since.reset();
  g.level_start = since;  // the state's median and variation count from its start
  if (to == State::kSteady) g.level_ref_p50 = g.recent.p50;
  if (to == State::kCyclic && g.cycle) g.reported_period_s = g.cycle->period_s;
  // The cycle test looks only at what follows a change, except when the change is into cyclic:
  // the evidence of the cycle is what made it.
  if (to != State::kCyclic) g.cycle_start = std::max(g.cycle_start, since);
  if (from == State::kUnknown) return;  // not a phase change: nothing was known before
  PhaseChange pc;
  pc.at = since;
  pc.from = from;
  pc.to = to;
  pc.kind = "state";
  pc.detail = std::string(StateName(from)) + " -> " + StateName(to);
  if (to == State::kCyclic && g.cycle) {
    pc.detail += Format(" (period %.1f s)", g.cycle->period_s);
  } else if (to == State::kAllocatedIdle) {
    if (g.memory_used_latest) {
      pc.detail += Format(" (%.0f MiB held", static_cast<double>(*g.memory_used_latest) / 1048576);
    } else {
      pc.detail += " (memory held";
    }
    if (!g.processes.empty()) pc.detail += " by " + ProcessWords(g.processes.front());
    pc.detail += ")";
  } else if (std::isfinite(g.recent.p50) && to != State::kLost) {
    pc.detail += Format(" (util p50 %.0f%%)", g.recent.p50);
  }
  Record(g, std::move(pc), changes);
}

void Profiler::Gpu::Engine::UpdateState(Gpu& g, const Sample& s,
                                        std::vector<PhaseChange>& changes) {
  const TimePoint at = g.last_at;
  g.settle_note.clear();
  if (s.lost) {
    g.candidate = State::kLost;
    g.candidate_since = at;
    if (g.reported != State::kLost) Report(g, State::kLost, at, at, changes);
    return;
  }
  // The newest utilisation, and the activity runs (kept while the data is insufficient too).
  const float newest = g.util.Back();
  const double idle = o_.idle_util_percent;
  // A dead band above the idle level: while quiet (or not yet known), a sample must clear it to
  // count as busy, so that noise around the idle level does not make a load.
  const double band = std::max(2.0, idle);
  if (std::isfinite(newest)) {
    const bool quiet_state = IsQuietState(g.reported) || g.reported == State::kUnknown;
    const bool quiet = newest <= idle || (quiet_state && newest <= idle + band);
    g.last_quiet = quiet;
    if (!quiet) {
      // Activity after a quiet spell of at least the hold starts a new busy run.
      if (!g.last_active_at || at - *g.last_active_at >= o_.state_hold) g.activity_start = at;
      g.last_active_at = at;
    }
    if (quiet && Held(g, s)) {
      if (!g.held_quiet_since) g.held_quiet_since = at;
    } else {
      g.held_quiet_since.reset();
    }
  }
  if (!InsufficientReason(g, at).empty()) {
    // Insufficient data is reported at once: the previous state would be a guess.
    g.candidate = State::kUnknown;
    g.candidate_since = at;
    if (g.reported != State::kUnknown) {
      g.reported = State::kUnknown;
      g.reported_since = at;
    }
    return;
  }
  // The busy run's median and variation: its last minute, not what came before it.
  std::vector<double> values, scratch;
  double span_s = 60;
  std::optional<TimePoint> run_start = g.activity_start;
  if (g.level_start && (!run_start || *g.level_start > *run_start)) run_start = g.level_start;
  if (run_start) span_s = std::min(span_s, Secs(at - *run_start) + sizes_.interval_s);
  if (g.reported == State::kCyclic && !g.cycle_result.cyclic) {
    // The cycle stopped: what follows it is in the newest samples, not in the last minute.
    span_s = std::min(
        span_s, std::max(2.0 * static_cast<double>(o_.state_hold.count()), 10 * sizes_.interval_s));
  }
  g.util.Tail(SlotsFor(std::max(span_s, sizes_.interval_s)), values);
  g.recent = StatsOf(values, scratch);
  values.clear();
  g.util.Tail(std::max<size_t>(5, SlotsFor(static_cast<double>(o_.state_hold.count()))), values);
  g.recent_short_p50 = StatsOf(values, scratch).p50;

  // The candidate.
  const bool cyclic = g.cycle_result.cyclic && g.cycle_result.period_s > 0;
  const TimePoint quiet_start = g.last_active_at.value_or(g.history_start);
  double quiet_needed = static_cast<double>(o_.state_hold.count());
  // A cyclic load's trough is not idleness: the quiet must outlast a whole period.
  if (cyclic) quiet_needed = std::max(quiet_needed, g.cycle_result.period_s);
  std::optional<State> c;
  TimePoint c_since = at;
  if (g.last_quiet && Secs(at - quiet_start) >= quiet_needed) {
    if (g.held_quiet_since && at - *g.held_quiet_since >= o_.allocated_idle_after) {
      c = State::kAllocatedIdle;
      c_since = *g.held_quiet_since;
    } else if (g.reported == State::kAllocatedIdle && g.held_quiet_since) {
      c = State::kAllocatedIdle;  // held still; the state keeps its time
      c_since = g.reported_since;
    } else {
      // From unknown or a busy state, memory held for less than allocated_idle_after: idle.
      c = State::kIdle;
      c_since = g.reported == State::kAllocatedIdle ? at : quiet_start;
    }
  } else if (g.last_quiet) {
    // A quiet spell shorter than the hold: the candidate stays what it was.
  } else if (cyclic) {
    c = State::kCyclic;
  } else if (g.reported == State::kSteady && g.level_shift_since) {
    c = State::kSteady;  // a level shift is pending: not a change of kind
  } else if (!(g.recent.p50 > idle)) {
    c = State::kBursty;  // mostly idle, with bursts
  } else {
    const double cv = std::isfinite(g.recent.cv) ? g.recent.cv : 0;
    double lo = o_.steady_max_cv, hi = o_.steady_max_cv;
    if (g.reported == State::kSteady) hi *= 1 + kCvBand;
    if (g.reported == State::kBursty) lo *= 1 - kCvBand;
    if (cv <= lo) {
      c = State::kSteady;
    } else if (cv > hi) {
      c = State::kBursty;
    } else {
      c = g.reported;  // inside the band: steady or bursty stays as reported
    }
  }
  if (c && *c != g.candidate) {
    g.candidate = *c;
    g.candidate_since = c_since;
  }
  if (g.candidate != g.reported && g.candidate != State::kUnknown) {
    // A busy state is reported on a busy sample (a blip followed by quiet never is).
    const bool busy = g.candidate == State::kSteady || g.candidate == State::kBursty ||
                      g.candidate == State::kCyclic;
    // From unknown, bursty waits for a minute of history: a cycle could still show in it.
    const bool early_bursty = g.reported == State::kUnknown && g.candidate == State::kBursty &&
                              at - g.history_start < std::chrono::seconds(60);
    if (at - g.candidate_since >= o_.state_hold && !(busy && g.last_quiet) && !early_bursty) {
      Report(g, g.candidate, g.candidate_since, at, changes);
    } else if (g.reported == State::kUnknown) {
      g.settle_note =
          Format("settling: %s for %.0f s of the %lld s hold", StateName(g.candidate),
                 Secs(at - g.candidate_since), static_cast<long long>(o_.state_hold.count()));
    }
  } else if (g.reported == State::kUnknown) {
    g.settle_note = "settling: no state has held yet";
  }

  // A steady load whose median moved by more than 20 points for state_hold: a level change.
  if (g.reported == State::kSteady && g.candidate == State::kSteady &&
      std::isfinite(g.recent_short_p50) && std::isfinite(g.level_ref_p50)) {
    if (std::abs(g.recent_short_p50 - g.level_ref_p50) > kLevelShiftPoints) {
      if (!g.level_shift_since) g.level_shift_since = at;
      if (at - *g.level_shift_since >= o_.state_hold) {
        PhaseChange pc;
        pc.at = *g.level_shift_since;
        pc.from = pc.to = State::kSteady;
        pc.kind = "level";
        pc.detail = Format("util p50 %.0f%% -> %.0f%%", g.level_ref_p50, g.recent_short_p50);
        g.cycle_start = std::max(g.cycle_start, *g.level_shift_since);
        g.level_start = *g.level_shift_since;
        Record(g, std::move(pc), changes);
        g.level_ref_p50 = g.recent_short_p50;
        g.level_shift_since.reset();
      }
    } else {
      g.level_shift_since.reset();
    }
  }
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
