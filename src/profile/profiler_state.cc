// The profiler's analysis and state machine (profiler_engine.h): at most every analysis_interval
// the window quantiles, the cycle test on the series since the last phase change, the phase fold
// and the memory headroom; on every sample the candidate state with its hysteresis, reported
// states and phase changes. See docs/profiles.md.
#include "profile/profiler_engine.h"

namespace flyt::profile {

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

}  // namespace flyt::profile
