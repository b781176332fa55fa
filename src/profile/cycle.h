// Periodicity detection on one uniformly sampled series: is the load cyclic, with which period
// (in seconds), how sure, and where in the cycle its peak and trough fall.
//
// The test is built to be right by construction, not tuned on examples:
//   - autocorrelation of the detrended series, ignoring the lag-0 lobe: a candidate peak counts
//     only when it rises clearly above the deepest dip before it;
//   - a significance bound from the number of valid samples (~ z / sqrt(N)): a peak below it is
//     noise;
//   - at least `min_cycles` whole cycles of the candidate period in the window;
//   - for spiky or jittered loads, an estimator from the spacing of bursts (the median interval
//     between threshold crossings, accepted when the intervals agree);
// and the two are reconciled (harmonics of one period are the same period).
//
// Missing samples are NaN in the input and are skipped (pairs with a NaN do not count towards a
// lag's correlation or its N). Pure functions; thread-safe.
#pragma once

#include <optional>
#include <span>
#include <string>

namespace flyt::profile {

struct CycleOptions {
  double min_period_s = 2.0;    // shorter cycles are not reported (they are "steady" at 1 Hz)
  double max_period_s = 600.0;  // and at most window / min_cycles
  double min_cycles = 3.0;
  double min_confidence = 0.5;  // below it: not cyclic
  // Utilisation (percent) below which the series counts as idle: an idle series is never cyclic.
  double idle_level = 2.0;
};

struct CycleResult {
  bool cyclic = false;
  double period_s = 0;      // when cyclic
  double confidence = 0;    // 0..1; also set (as the best candidate's) when not cyclic
  std::string method;       // "autocorrelation" or "burst_spacing" when cyclic
  double cycles_in_window = 0;
  // Why not cyclic, in words ("no autocorrelation peak above the significance bound 0.12",
  // "2.4 cycles in the window, 3 needed", "too few valid samples: 12 of 600", ...).
  std::string reason;
  bool insufficient = false;  // too few valid samples to say anything
};

// `values`: the series, oldest first, one value every `dt_s` seconds; NaN for a missing sample.
CycleResult DetectCycle(std::span<const double> values, double dt_s,
                        const CycleOptions& options = {});

// The series folded on `period_s`: the offsets (seconds after the first sample, in [0, period))
// of its mean peak and mean trough. nullopt when the series has under two periods of valid
// samples or does not move with the cycle (its folded profile is flat within noise).
struct Phase {
  double peak_offset_s = 0;
  double trough_offset_s = 0;
};
std::optional<Phase> FoldPhase(std::span<const double> values, double dt_s, double period_s);

}  // namespace flyt::profile
