// The cycle test (cycle.h). Two estimators, reconciled:
//
// Autocorrelation. The series (NaN = missing) is detrended by a least-squares line and its
// autocorrelation r(L) computed per lag over the valid pairs only, normalised by the series'
// variance (so a clean periodic load has r(P) ~ 1 at any lag, and r(P) is the share of the
// variance that repeats after P). Walking the lags from 1, the lag-0 lobe is skipped by
// construction: a local maximum is a candidate only when it rises at least kMinProminence above
// the deepest dip before it, and above the significance bound z / sqrt(pairs) of white noise,
// with z Bonferroni-corrected for the number of lags searched (family-wise false-alarm rate
// kAlpha). Among candidates the fundamental is the shortest lag whose peak is within
// kHarmonicTolerance of the highest (a pattern that repeats at P also repeats at 2P, 3P; a
// half-period sub-pattern peaks lower). The period is then refined below one sample by
// parabolic interpolation of the peaks at P, 2P, ... and a least-squares fit through them.
// A slowly wandering series (random walk, steps, AR noise) can still show a chance peak, so the
// confidence is the correlation at P (and 2P when it fits) of the series with its
// one-period moving average removed: the moving average over exactly one period of a periodic
// load is flat, so the load passes through untouched, while a random walk's residuals P apart
// depend on disjoint increments and are uncorrelated in expectation.
//
// Burst spacing. For spiky or jittered loads whose autocorrelation peaks smear out: a Schmitt
// trigger (thresholds at 35 % and 65 % of the 2nd..98th percentile range, which must be clearly
// above the sample-to-sample noise) marks each upward crossing, interpolated between samples;
// the period is the mean interval (an interval spanning a missed burst counts as several),
// accepted when the intervals agree (coefficient of variation <= kMaxBurstDispersion) over at
// least kMinBurstIntervals intervals, and when the autocorrelation shows a peak rising
// kMinProminence above its preceding dip within +-25 % of that period (smeared, but there).
// When both pass, the autocorrelation's period wins, divided down when it is a multiple of the
// bursts' (the fundamental).
//
// Long series (the driver's 6 Hz samples) are block-averaged to bound the autocorrelation's
// cost to about kMaxAcfWork multiply-adds; the period found is then refined on the full-rate
// series around the decimated peaks.
#include "profile/cycle.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <limits>
#include <numbers>
#include <vector>

namespace flyt::profile {
namespace {

constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kMinValidSamples = 20;
// Family-wise false-alarm rate of the significance bound over all lags searched.
constexpr double kAlpha = 0.05;
// A peak must rise this much above the deepest dip before it (the lag-0 lobe included).
constexpr double kMinProminence = 0.2;
// Peaks within this of the highest count as the same pattern (the shortest lag is taken).
constexpr double kHarmonicTolerance = 0.15;
// Pairs a lag needs before its correlation is trusted.
constexpr size_t kMinPairs = 16;
// Multiply-adds the autocorrelation may spend (about 0.5 ms); longer series are decimated.
constexpr double kMaxAcfWork = 1.5e6;
constexpr size_t kMinBurstIntervals = 4;
constexpr double kMaxBurstDispersion = 0.2;
// Bursts must rise this many noise standard deviations above the baseline.
constexpr double kMinBurstContrast = 6.0;

bool Valid(double v) { return std::isfinite(v); }

__attribute__((format(printf, 1, 2))) std::string Sprintf(const char* fmt, ...) {
  char buf[200];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

// z with P(Z > z) = p for a standard normal Z (bisection on erfc; p in (0, 0.5)).
double UpperNormalQuantile(double p) {
  double lo = 0, hi = 10;
  for (int i = 0; i < 60; ++i) {
    double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(mid / std::numbers::sqrt2) > p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return kNoValue;
  double pos = q * static_cast<double>(v.size() - 1);
  size_t i = static_cast<size_t>(pos);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  double a = v[i];
  if (i + 1 >= v.size()) return a;
  double b = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(i) + 1, v.end());
  return a + (pos - static_cast<double>(i)) * (b - a);
}

double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }

// Block means of `factor` samples (NaN when a block has no valid sample).
std::vector<double> Decimate(std::span<const double> x, size_t factor) {
  std::vector<double> out;
  out.reserve(x.size() / factor + 1);
  for (size_t i = 0; i < x.size(); i += factor) {
    double sum = 0;
    size_t n = 0;
    for (size_t j = i; j < std::min(x.size(), i + factor); ++j) {
      if (Valid(x[j])) {
        sum += x[j];
        ++n;
      }
    }
    out.push_back(n > 0 ? sum / static_cast<double>(n) : kNoValue);
  }
  return out;
}

// The series minus its least-squares line, missing samples as 0 with mask 0. Returns the
// variance of the residuals (0 for a constant series).
double Detrend(std::span<const double> x, std::vector<double>& y, std::vector<double>& mask) {
  y.assign(x.size(), 0);
  mask.assign(x.size(), 0);
  double n = 0, st = 0, sx = 0, stt = 0, stx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!Valid(x[i])) continue;
    double t = static_cast<double>(i);
    n += 1;
    st += t;
    sx += x[i];
    stt += t * t;
    stx += t * x[i];
  }
  double denom = n * stt - st * st;
  double slope = denom > 0 ? (n * stx - st * sx) / denom : 0;
  double intercept = (sx - slope * st) / n;
  double ss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!Valid(x[i])) continue;
    y[i] = x[i] - (intercept + slope * static_cast<double>(i));
    mask[i] = 1;
    ss += y[i] * y[i];
  }
  return ss / n;
}

// r(L) for one lag over the valid pairs, normalised by `var`; NaN with too few pairs.
double Correlation(const std::vector<double>& y, const std::vector<double>& mask, size_t lag,
                   double var, bool complete, size_t* pairs_out = nullptr) {
  size_t n = y.size();
  if (lag >= n) return kNoValue;
  double sum = 0, pairs = 0;
  const double* a = y.data();
  const double* b = y.data() + lag;
  size_t count = n - lag;
  // Four partial sums: the loop is bound by the adds' latency otherwise (no -ffast-math).
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t t = 0;
  for (; t + 4 <= count; t += 4) {
    s0 += a[t] * b[t];
    s1 += a[t + 1] * b[t + 1];
    s2 += a[t + 2] * b[t + 2];
    s3 += a[t + 3] * b[t + 3];
  }
  for (; t < count; ++t) s0 += a[t] * b[t];
  sum = (s0 + s1) + (s2 + s3);
  if (complete) {
    pairs = static_cast<double>(count);
  } else {
    const double* ma = mask.data();
    const double* mb = mask.data() + lag;
    double p0 = 0, p1 = 0, p2 = 0, p3 = 0;
    size_t u = 0;
    for (; u + 4 <= count; u += 4) {
      p0 += ma[u] * mb[u];
      p1 += ma[u + 1] * mb[u + 1];
      p2 += ma[u + 2] * mb[u + 2];
      p3 += ma[u + 3] * mb[u + 3];
    }
    for (; u < count; ++u) p0 += ma[u] * mb[u];
    pairs = (p0 + p1) + (p2 + p3);
  }
  if (pairs_out != nullptr) *pairs_out = static_cast<size_t>(pairs);
  if (pairs < kMinPairs) return kNoValue;
  return sum / pairs / var;
}

// The vertex of the parabola through (L-1, L, L+1): offset in [-0.5, 0.5] and the peak value.
void Parabolic(double left, double mid, double right, double* offset, double* value) {
  double denom = left - 2 * mid + right;
  double d = 0;
  if (denom < 0 && Valid(left) && Valid(right)) d = std::clamp(0.5 * (left - right) / denom, -0.5, 0.5);
  *offset = d;
  *value = Valid(left) && Valid(right) ? mid - 0.25 * (left - right) * d : mid;
}

// The series with its centred moving average over `window` samples removed (NaN where the
// window holds fewer than half valid samples), for the confidence check.
std::vector<double> RemoveMovingAverage(std::span<const double> x, size_t window) {
  size_t n = x.size();
  std::vector<double> prefix(n + 1, 0), count(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    bool ok = Valid(x[i]);
    prefix[i + 1] = prefix[i] + (ok ? x[i] : 0);
    count[i + 1] = count[i] + (ok ? 1 : 0);
  }
  std::vector<double> out(n, kNoValue);
  size_t half = window / 2;
  for (size_t i = 0; i < n; ++i) {
    if (!Valid(x[i]) || i < half || i + (window - half) > n) continue;
    size_t lo = i - half, hi = i - half + window;
    double c = count[hi] - count[lo];
    if (c < 0.5 * static_cast<double>(window)) continue;
    out[i] = x[i] - (prefix[hi] - prefix[lo]) / c;
  }
  return out;
}

// Pearson correlation (about zero) of y[t] and y[t + lag] over the pairs where both are valid.
double LaggedCorrelation(const std::vector<double>& y, size_t lag) {
  double sab = 0, saa = 0, sbb = 0;
  size_t pairs = 0;
  for (size_t t = 0; t + lag < y.size(); ++t) {
    double a = y[t], b = y[t + lag];
    if (!Valid(a) || !Valid(b)) continue;
    sab += a * b;
    saa += a * a;
    sbb += b * b;
    ++pairs;
  }
  if (pairs < kMinPairs || saa <= 0 || sbb <= 0) return kNoValue;
  return sab / std::sqrt(saa * sbb);
}

struct Estimate {
  bool ok = false;
  double period_s = 0;
  double confidence = 0;
  std::string reason;  // why not, when !ok
};

struct AcfEstimate : Estimate {
  double lag_samples = 0;  // the period in (full-rate) samples
  // Every local maximum after the lag-0 lobe: its lag (s) and its rise above the dip before it.
  struct Bump {
    double lag_s;
    double prominence;
  };
  std::vector<Bump> bumps;
};

AcfEstimate ByAutocorrelation(std::span<const double> x, double dt_s, size_t first, size_t last,
                              const CycleOptions& options, double span_s) {
  AcfEstimate est;
  std::span<const double> full = x.subspan(first, last - first + 1);
  // The lags searched: periods up to half the span (longer ones are named and refused with their
  // cycle count), and for the fundamental's repeat at 2P.
  double max_search_s = std::min(options.max_period_s, span_s / 2);
  double n_full = static_cast<double>(full.size());
  double max_lag_full = std::min(n_full - kMinPairs, 2 * max_search_s / dt_s + 2);
  size_t factor = 1;
  double work = n_full * max_lag_full;
  if (work > kMaxAcfWork) factor = static_cast<size_t>(std::ceil(std::sqrt(work / kMaxAcfWork)));
  std::vector<double> dec = factor > 1 ? Decimate(full, factor) : std::vector<double>();
  std::span<const double> series = factor > 1 ? std::span<const double>(dec) : full;
  double step_s = dt_s * static_cast<double>(factor);

  std::vector<double> y, mask;
  double var = Detrend(series, y, mask);
  if (!(var > 1e-12)) {
    est.reason = "constant series";
    return est;
  }
  bool complete = std::all_of(mask.begin(), mask.end(), [](double m) { return m > 0; });
  size_t n = y.size();
  size_t max_lag = std::min(n - 1, static_cast<size_t>(max_lag_full / static_cast<double>(factor)) + 1);
  size_t search_lag = std::min(max_lag - 1, static_cast<size_t>(max_search_s / step_s) + 1);
  std::vector<double> r(max_lag + 1, kNoValue);
  std::vector<size_t> pairs(max_lag + 1, 0);
  r[0] = 1;
  for (size_t lag = 1; lag <= max_lag; ++lag) r[lag] = Correlation(y, mask, lag, var, complete, &pairs[lag]);

  // Bonferroni over the lags searched.
  double z = UpperNormalQuantile(kAlpha / static_cast<double>(std::max<size_t>(search_lag, 1)));
  auto bound = [&](size_t lag) { return z / std::sqrt(static_cast<double>(std::max<size_t>(pairs[lag], 1))); };

  struct Peak {
    size_t lag;
    double value;
  };
  std::vector<Peak> peaks;
  double dip = 1;
  double best_seen = -1;  // the highest peak that failed a test, for the reason
  std::string best_reason = "no autocorrelation peak after the lag-0 lobe";
  for (size_t lag = 1; lag < search_lag; ++lag) {
    if (!Valid(r[lag]) || !Valid(r[lag + 1])) break;
    bool local_max = r[lag] > r[lag - 1] && r[lag] >= r[lag + 1];
    if (local_max) {
      double prominence = r[lag] - dip;
      est.bumps.push_back({static_cast<double>(lag) * step_s, prominence});
      bool significant = r[lag] > bound(lag);
      if (prominence >= kMinProminence && significant) {
        peaks.push_back({lag, r[lag]});
      } else if (r[lag] > best_seen) {
        best_seen = r[lag];
        best_reason = !significant
                          ? Sprintf("no autocorrelation peak above the significance bound %.2f "
                                   "(best %.2f at %.1f s)",
                                   bound(lag), r[lag], static_cast<double>(lag) * step_s)
                          : Sprintf("autocorrelation peak %.2f at %.1f s rises only %.2f above the "
                                   "dip before it",
                                   r[lag], static_cast<double>(lag) * step_s, prominence);
      }
    }
    dip = std::min(dip, r[lag]);
  }
  if (peaks.empty()) {
    est.confidence = std::max(0.0, best_seen);
    est.reason = best_reason;
    return est;
  }
  double highest = 0;
  for (const Peak& p : peaks) highest = std::max(highest, p.value);
  const Peak* chosen = nullptr;
  for (const Peak& p : peaks) {
    if (p.value >= highest - kHarmonicTolerance) {
      chosen = &p;
      break;
    }
  }
  // Refine: the peaks at k * P (k = 1, 2, ...) interpolated, then P = sum(k L_k) / sum(k^2).
  auto refine_at = [&](double around, double* value) -> double {
    // The highest lag within +-max(1, 10 %) of `around`, interpolated.
    double tol = std::max(1.0, 0.1 * around);
    size_t lo = static_cast<size_t>(std::max(1.0, std::floor(around - tol)));
    size_t hi = std::min(max_lag - 1, static_cast<size_t>(std::ceil(around + tol)));
    if (lo > hi) return kNoValue;
    size_t arg = lo;
    for (size_t l = lo; l <= hi; ++l) {
      if (Valid(r[l]) && (!Valid(r[arg]) || r[l] > r[arg])) arg = l;
    }
    if (!Valid(r[arg])) return kNoValue;
    double off = 0, val = r[arg];
    if (arg >= 1 && arg + 1 <= max_lag) Parabolic(r[arg - 1], r[arg], r[arg + 1], &off, &val);
    *value = val;
    return static_cast<double>(arg) + off;
  };
  double peak_value = chosen->value;
  double l1 = refine_at(static_cast<double>(chosen->lag), &peak_value);
  double skk = 1, skl = l1;
  double period_lag = l1;
  for (int k = 2; k <= 8; ++k) {
    double around = period_lag * k;
    if (around + 1 >= static_cast<double>(max_lag)) break;
    double v = 0;
    double lk = refine_at(around, &v);
    if (!Valid(lk) || !(v > bound(static_cast<size_t>(std::lround(lk)))) ||
        std::abs(lk - around) > 0.5 * period_lag) {
      break;
    }
    skk += k * k;
    skl += k * lk;
    period_lag = skl / skk;
  }
  // Back to full rate: refine around each multiple on the full-rate series.
  double full_lag = period_lag * static_cast<double>(factor);
  if (factor > 1) {
    std::vector<double> yf, mf;
    double varf = Detrend(full, yf, mf);
    bool completef = std::all_of(mf.begin(), mf.end(), [](double m) { return m > 0; });
    double sk = 0, sl = 0;
    for (int k = 1; k <= 4; ++k) {
      double around = full_lag * k;
      size_t lo = static_cast<size_t>(std::max(2.0, std::floor(around - factor - 1)));
      size_t hi = static_cast<size_t>(std::ceil(around + factor + 1));
      if (hi + 1 >= yf.size() - kMinPairs) break;
      std::vector<double> rf(hi + 2 - lo + 1, kNoValue);
      for (size_t l = lo - 1; l <= hi + 1; ++l) rf[l - (lo - 1)] = Correlation(yf, mf, l, varf, completef);
      size_t arg = lo;
      for (size_t l = lo; l <= hi; ++l) {
        if (rf[l - (lo - 1)] > rf[arg - (lo - 1)]) arg = l;
      }
      double off = 0, val = 0;
      Parabolic(rf[arg - lo], rf[arg - (lo - 1)], rf[arg - (lo - 1) + 1], &off, &val);
      if (!Valid(val) || val < bound(std::min(max_lag, static_cast<size_t>(arg / factor)))) break;
      sk += k * k;
      sl += k * (static_cast<double>(arg) + off);
    }
    if (sk > 0) full_lag = sl / sk;
  }
  est.lag_samples = full_lag;
  est.period_s = full_lag * dt_s;

  // Confidence: the correlation at P (and 2P) once the one-period moving average is removed.
  size_t window = static_cast<size_t>(std::max(2L, std::lround(full_lag)));
  std::vector<double> residual = RemoveMovingAverage(full, window);
  double c1 = LaggedCorrelation(residual, window);
  double confidence = std::min(peak_value, Valid(c1) ? c1 : 0.0);
  double c2 = 2 * window + kMinPairs < full.size() ? LaggedCorrelation(residual, 2 * window) : kNoValue;
  if (Valid(c2)) confidence = std::min(confidence, c2);
  confidence = std::clamp(confidence, 0.0, 1.0);
  est.confidence = confidence;
  if (confidence < options.min_confidence) {
    est.reason = Sprintf("autocorrelation peak at %.1f s is not confident enough (%.2f < %.2f)",
                        est.period_s, confidence, options.min_confidence);
    return est;
  }
  est.ok = true;
  return est;
}

Estimate ByBurstSpacing(std::span<const double> x, double dt_s, const CycleOptions& options) {
  Estimate est;
  std::vector<double> valid;
  valid.reserve(x.size());
  for (double v : x) {
    if (Valid(v)) valid.push_back(v);
  }
  double lo = Quantile(valid, 0.02);
  double hi = Quantile(valid, 0.98);
  double range = hi - lo;
  // Sample-to-sample noise: the median absolute first difference (robust to the edges of the
  // bursts), as a standard deviation of one sample.
  std::vector<double> diffs;
  diffs.reserve(x.size());
  for (size_t i = 1; i < x.size(); ++i) {
    if (Valid(x[i]) && Valid(x[i - 1])) diffs.push_back(std::abs(x[i] - x[i - 1]));
  }
  double noise = diffs.empty() ? 0 : Median(diffs) * 1.4826 / std::numbers::sqrt2;
  if (!(range > options.idle_level) || range < kMinBurstContrast * noise) {
    est.reason = "no bursts clearly above the noise";
    return est;
  }
  double up = lo + 0.65 * range;
  double down = lo + 0.35 * range;
  std::vector<double> crossings;
  bool armed = false;
  double prev = kNoValue;
  size_t prev_i = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double v = x[i];
    if (!Valid(v)) continue;
    if (v < down) armed = true;
    if (armed && v > up) {
      double t = static_cast<double>(i);
      if (Valid(prev) && prev < up && prev_i + 1 == i) {
        t = static_cast<double>(prev_i) + (up - prev) / (v - prev);
      }
      crossings.push_back(t * dt_s);
      armed = false;
    }
    prev = v;
    prev_i = i;
  }
  if (crossings.size() < kMinBurstIntervals + 1) {
    est.reason = Sprintf("%.0f bursts, %.0f needed", static_cast<double>(crossings.size()),
                        static_cast<double>(kMinBurstIntervals + 1));
    return est;
  }
  // The intervals between bursts; one that spans a missed burst (a hole in the samples) counts
  // as the whole number of intervals it holds.
  std::vector<double> intervals;
  for (size_t i = 1; i < crossings.size(); ++i) intervals.push_back(crossings[i] - crossings[i - 1]);
  double median = Median(intervals);
  double count = 0;
  std::vector<double> normalised;
  for (double d : intervals) {
    double m = std::max(1.0, std::round(d / median));
    count += m;
    normalised.push_back(d / m);
  }
  // The mean interval (the span of the bursts over their count: jitter averages out), and the
  // intervals' coefficient of variation.
  double mean = (crossings.back() - crossings.front()) / count;
  double ss = 0;
  for (double d : normalised) ss += (d - mean) * (d - mean);
  double cv = std::sqrt(ss / static_cast<double>(normalised.size())) / mean;
  est.period_s = mean;
  est.confidence = std::clamp(1 - cv / (2 * kMaxBurstDispersion), 0.0, 1.0);
  if (cv > kMaxBurstDispersion) {
    est.reason = Sprintf("burst intervals disagree (coefficient of variation %.2f > %.2f)", cv,
                        kMaxBurstDispersion);
    return est;
  }
  est.ok = true;
  return est;
}

bool Near(double a, double b, double tol) { return std::abs(a - b) <= tol * std::max(a, b); }

}  // namespace

CycleResult DetectCycle(std::span<const double> values, double dt_s, const CycleOptions& options) {
  CycleResult result;
  if (!(dt_s > 0) || !std::isfinite(dt_s)) {
    result.insufficient = true;
    result.reason = "invalid sample interval";
    return result;
  }
  size_t valid = 0, first = values.size(), last = 0;
  double max_value = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < values.size(); ++i) {
    if (!Valid(values[i])) continue;
    ++valid;
    first = std::min(first, i);
    last = i;
    max_value = std::max(max_value, values[i]);
  }
  if (valid < kMinValidSamples) {
    result.insufficient = true;
    result.reason = Sprintf("too few valid samples: %.0f of %.0f (%.0f needed)",
                           static_cast<double>(valid), static_cast<double>(values.size()),
                           static_cast<double>(kMinValidSamples));
    return result;
  }
  if (max_value <= options.idle_level) {
    result.reason = Sprintf("idle: utilisation never above %.0f %%", options.idle_level);
    return result;
  }
  double span_s = static_cast<double>(last - first + 1) * dt_s;
  double longest_s = std::min(options.max_period_s, span_s / options.min_cycles);
  if (longest_s < options.min_period_s) {
    result.reason = Sprintf("%.0f s of samples cannot hold %.0f cycles of %.1f s", span_s,
                           options.min_cycles, options.min_period_s);
    return result;
  }
  std::span<const double> used = values.subspan(first, last - first + 1);
  AcfEstimate acf = ByAutocorrelation(values, dt_s, first, last, options, span_s);
  Estimate burst = ByBurstSpacing(used, dt_s, options);

  // A period must be at least min_period_s and leave min_cycles cycles in the window.
  auto check = [&](Estimate& e) {
    if (!e.ok) return;
    double cycles = span_s / e.period_s;
    if (e.period_s < options.min_period_s) {
      e.ok = false;
      e.reason = Sprintf("period %.2f s is under the shortest reported (%.1f s)", e.period_s,
                        options.min_period_s);
    } else if (cycles < options.min_cycles || e.period_s > options.max_period_s) {
      e.ok = false;
      e.reason = Sprintf("period %.1f s: %.1f cycles in the window, %.0f needed", e.period_s,
                        cycles, options.min_cycles);
    }
  };
  check(acf);
  check(burst);
  if (burst.ok) {
    double best = 0;  // the highest rise within +-25 % of the burst period
    for (const AcfEstimate::Bump& b : acf.bumps) {
      if (std::abs(b.lag_s - burst.period_s) <= 0.25 * burst.period_s) best = std::max(best, b.prominence);
    }
    // Bursts that recur with a period leave a peak in the autocorrelation near it, smeared by
    // the jitter but rising clearly above the dip before it; a wandering series whose
    // threshold crossings happen to be regular does not.
    if (best < kMinProminence) {
      burst.ok = false;
      burst.reason = Sprintf("bursts every %.1f s leave no autocorrelation peak near it (rise %.2f < "
                            "%.2f)",
                            burst.period_s, best, kMinProminence);
    }
  }

  const Estimate* pick = nullptr;
  std::string method;
  // The autocorrelation's period is the more precise and its test the stricter: it wins when it
  // passes (the burst spacing then only adds its confidence when it agrees); the burst spacing
  // speaks for loads whose autocorrelation peaks are smeared by jitter.
  if (acf.ok) {
    pick = &acf;
    method = "autocorrelation";
    // The autocorrelation may have passed only at a multiple of the bursts' period (jitter
    // smears the first peaks most): the fundamental is the bursts' period.
    double m = std::round(acf.period_s / (burst.ok ? burst.period_s : acf.period_s));
    if (burst.ok && m >= 2 && std::abs(acf.period_s / burst.period_s - m) <= 0.15 * m) {
      acf.period_s /= m;
    }
  } else if (burst.ok) {
    pick = &burst;
    method = "burst_spacing";
  }
  if (pick == nullptr) {
    // (r(L) is normalised per pair, so a chance peak on few pairs can exceed 1.)
    result.confidence = std::clamp(std::max(acf.confidence, burst.confidence), 0.0, 1.0);
    result.reason = acf.reason;
    if (!burst.reason.empty()) result.reason += "; burst spacing: " + burst.reason;
    return result;
  }
  result.cyclic = true;
  result.period_s = pick->period_s;
  result.confidence = pick->confidence;
  if (pick == &acf && burst.ok && Near(acf.period_s, burst.period_s, 0.15)) {
    result.confidence = std::max(acf.confidence, burst.confidence);
  }
  result.method = method;
  result.cycles_in_window = span_s / result.period_s;
  return result;
}

std::optional<Phase> FoldPhase(std::span<const double> values, double dt_s, double period_s) {
  if (!(dt_s > 0) || !(period_s > 0) || !std::isfinite(period_s)) return std::nullopt;
  size_t valid = 0;
  for (double v : values) valid += Valid(v) ? 1 : 0;
  if (static_cast<double>(valid) * dt_s < 2 * period_s) return std::nullopt;
  size_t bins = static_cast<size_t>(std::clamp(std::floor(period_s / dt_s), 2.0, 60.0));
  std::vector<double> sum(bins, 0), sum2(bins, 0), count(bins, 0);
  for (size_t i = 0; i < values.size(); ++i) {
    if (!Valid(values[i])) continue;
    double t = static_cast<double>(i) * dt_s;
    double phase = t / period_s - std::floor(t / period_s);
    size_t b = std::min(bins - 1, static_cast<size_t>(phase * static_cast<double>(bins)));
    sum[b] += values[i];
    sum2[b] += values[i] * values[i];
    count[b] += 1;
  }
  std::vector<double> mean(bins, kNoValue);
  double within = 0, total_n = 0, grand = 0;
  size_t filled = 0;
  for (size_t b = 0; b < bins; ++b) {
    if (count[b] == 0) continue;
    mean[b] = sum[b] / count[b];
    within += sum2[b] - count[b] * mean[b] * mean[b];
    total_n += count[b];
    grand += sum[b];
    ++filled;
  }
  if (filled < 2) return std::nullopt;
  grand /= total_n;
  double between = 0;
  for (size_t b = 0; b < bins; ++b) {
    if (count[b] > 0) between += count[b] * (mean[b] - grand) * (mean[b] - grand);
  }
  // One-way analysis of variance: the phase bins' means must differ by more than the noise
  // within the bins would make them (F > 3), and by more than rounding.
  double df_between = static_cast<double>(filled - 1);
  double df_within = total_n - static_cast<double>(filled);
  double ms_within = df_within > 0 ? std::max(within, 0.0) / df_within : 0;
  double ms_between = between / df_between;
  double hi = -std::numeric_limits<double>::infinity(), lo = -hi;
  for (double m : mean) {
    if (!Valid(m)) continue;
    hi = std::max(hi, m);
    lo = std::min(lo, m);
  }
  if (hi - lo < 1e-9 * std::max(1.0, std::abs(hi)) || (ms_within > 0 && ms_between < 3 * ms_within)) {
    return std::nullopt;
  }
  // The peak (trough) is the circular centre of the bins above (below) the middle level, so a
  // square wave's plateau gives its middle and a sine its crest.
  double mid = 0.5 * (hi + lo);
  auto centre = [&](bool above) {
    double sx = 0, sy = 0;
    for (size_t b = 0; b < bins; ++b) {
      if (!Valid(mean[b])) continue;
      double w = above ? mean[b] - mid : mid - mean[b];
      if (w <= 0) continue;
      double angle = 2 * std::numbers::pi * (static_cast<double>(b) + 0.5) / static_cast<double>(bins);
      sx += w * std::cos(angle);
      sy += w * std::sin(angle);
    }
    double a = std::atan2(sy, sx);
    if (a < 0) a += 2 * std::numbers::pi;
    double offset = a / (2 * std::numbers::pi) * period_s;
    return offset >= period_s ? 0.0 : offset;
  };
  Phase phase;
  phase.peak_offset_s = centre(true);
  phase.trough_offset_s = centre(false);
  return phase;
}

}  // namespace flyt::profile
