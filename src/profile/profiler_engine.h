// The profiler's insides (profiler.h), shared by profiler.cc (ingest, the profile, the API) and
// profiler_state.cc (the analysis and the state machine): per GPU, rings of the per-sample series
// (one slot per sample_interval, NaN where a reading was absent, invalid or never came), a ring of
// the driver's ~6 Hz utilisation samples resampled onto a uniform grid, and the state machine.
// Not part of the library's interface: only those two files include it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <deque>
#include <limits>
#include <utility>

#include "profile/profiler.h"
#include "profile/ring.h"

namespace flyt::profile {
namespace internal {

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

inline double Secs(Duration d) { return std::chrono::duration<double>(d).count(); }
inline Duration FromSecs(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

inline std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string Format(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

// "3 s", "2.5 min", "1.2 h".
inline std::string Ago(double s) {
  if (s < 600) return Format("%.0f s", s);
  if (s < 7200) return Format("%.1f min", s / 60);
  return Format("%.1f h", s / 3600);
}

inline bool IsQuietState(State s) { return s == State::kIdle || s == State::kAllocatedIdle; }

inline std::optional<double> Percent(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v) || *v < 0 || *v > 100) return std::nullopt;
  return *v;
}

// The sorted valid values of `values` (NaN dropped) into `scratch`.
inline void SortedValid(const std::vector<double>& values, std::vector<double>& scratch) {
  scratch.clear();
  for (double v : values) {
    if (std::isfinite(v)) scratch.push_back(v);
  }
  std::sort(scratch.begin(), scratch.end());
}

inline std::optional<Quantiles> QuantilesOf(const std::vector<double>& values,
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
inline Stats StatsOf(const std::vector<double>& values, std::vector<double>& scratch) {
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

inline std::string ProcessWords(const ProcessUse& p) {
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


}  // namespace internal

struct Profiler::Gpu {
  class Engine;  // the per-GPU logic (below), with the Profiler's mutex held

  explicit Gpu(const internal::Sizes& sizes) {
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
  internal::TimePoint history_start{};
  internal::TimePoint last_at{};
  std::string restart_reason;  // why the history last restarted ("" at the first sample)

  // The per-sample series, one slot per sample_interval (the newest slot is `last_at`).
  internal::Ring<float> util, memory_util, power_w, launches;
  internal::Ring<double> fb_used;
  internal::Ring<internal::Slot> slot;

  // The driver's utilisation samples on a uniform grid of hr_dt_s (0: not started).
  internal::Ring<float> hr;
  double hr_dt_s = 0;
  internal::TimePoint hr_origin{};
  int64_t hr_open_cell = -1;  // the cell being filled; the ring holds the cells before it
  double hr_sum = 0;
  int hr_count = 0;
  internal::TimePoint hr_last_point{};

  // Newest readings.
  std::optional<uint64_t> memory_total;
  std::optional<double> launches_latest;
  std::vector<ProcessUse> processes;
  std::optional<uint64_t> memory_used_latest;
  // When each input was last seen valid (for GpuProfile::inputs).
  std::optional<internal::TimePoint> seen_util, seen_util_samples, seen_memory_util, seen_memory_used,
      seen_power, seen_launches, seen_processes;

  // Activity: the last sample with utilisation above the quiet level; since when memory has
  // been held with ~0 utilisation; whether the newest valid utilisation was quiet.
  std::optional<internal::TimePoint> last_active_at;
  std::optional<internal::TimePoint> activity_start;  // the current busy run's first sample
  std::optional<internal::TimePoint> level_start;     // the newest state or level change
  std::optional<internal::TimePoint> held_quiet_since;
  bool last_quiet = false;
  internal::Stats recent;                    // the last minute's utilisation
  double recent_short_p50 = internal::kNaN;  // the last state_hold's utilisation median

  // The state machine.
  State reported = State::kUnknown;
  internal::TimePoint reported_since{};
  State candidate = State::kUnknown;
  internal::TimePoint candidate_since{};
  std::string settle_note;  // while unknown with enough data: what it is waiting for

  // Analysis (recomputed at most every analysis_interval).
  bool analysed = false;
  internal::TimePoint last_analysis{};
  internal::TimePoint cycle_start{};  // the cycle test looks at the series since here
  CycleResult cycle_result;
  std::optional<Cycle> cycle;  // from the newest cyclic verdict
  double reported_period_s = 0;
  std::optional<internal::TimePoint> period_shift_since;
  double level_ref_p50 = internal::kNaN;
  std::optional<internal::TimePoint> level_shift_since;
  std::array<std::optional<internal::TimePoint>, internal::kWindows.size()> window_at;
  std::vector<Window> windows;
  Memory memory;
  std::vector<std::string> inputs;
  double util_rate_hz = 0;

  std::deque<PhaseChange> phase_changes;
};

class Profiler::Gpu::Engine {
 public:
  Engine(const ProfilerOptions& o, const CycleDetector& detector)
      : o_(o), sizes_(o), detector_(detector) {}

  void Add(Gpu& g, const Sample& s, std::vector<PhaseChange>& changes);
  GpuProfile Build(const Gpu& g, const std::string& uuid) const;
  std::string InsufficientReason(const Gpu& g, internal::TimePoint now) const;

 private:
  void Restart(Gpu& g, internal::TimePoint at, std::string reason);
  void Ingest(Gpu& g, const Sample& s);
  void IngestHighRate(Gpu& g, const Sample& s);
  void Analyse(Gpu& g, internal::TimePoint at, std::vector<PhaseChange>& changes);
  void UpdateState(Gpu& g, const Sample& s, std::vector<PhaseChange>& changes);
  void Report(Gpu& g, State to, internal::TimePoint since, internal::TimePoint at, std::vector<PhaseChange>& changes);
  void Record(Gpu& g, PhaseChange change, std::vector<PhaseChange>& changes);
  bool Held(const Gpu& g, const Sample& s) const;
  // The per-sample utilisation series since `start` (at most the cycle window), its first
  // slot's time in `first`.
  std::vector<double> UtilSince(const Gpu& g, internal::TimePoint start, internal::TimePoint* first) const;
  std::vector<double> HighRateSince(const Gpu& g, internal::TimePoint start, internal::TimePoint* first) const;
  bool UseHighRate(const Gpu& g, internal::TimePoint at) const;
  size_t SlotsFor(double seconds) const {
    return static_cast<size_t>(std::max(1.0, std::round(seconds / sizes_.interval_s)));
  }

  const ProfilerOptions& o_;
  const internal::Sizes sizes_;
  const CycleDetector& detector_;
};

// The two files that include this header use these names unqualified.
using internal::Ago;
using internal::Duration;
using internal::Format;
using internal::FromSecs;
using internal::IsQuietState;
using internal::Percent;
using internal::ProcessWords;
using internal::QuantilesOf;
using internal::Ring;
using internal::Secs;
using internal::Sizes;
using internal::Slot;
using internal::SortedValid;
using internal::Stats;
using internal::StatsOf;
using internal::TimePoint;
using internal::kWindows;
using internal::kConfidenceKeep;
using internal::kCvBand;
using internal::kHighRateHz;
using internal::kLevelShiftPoints;
using internal::kLongestWindowS;
using internal::kMaxPending;
using internal::kNaN;
using internal::kNaNf;
using internal::kPeriodShiftFraction;

}  // namespace flyt::profile
