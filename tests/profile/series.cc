#include "series.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>

namespace flyt::profile::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kTwoPi = 2 * std::numbers::pi;

// Uniform in [0, 1) from the top 53 bits (std::uniform_real_distribution is not fixed by the
// standard; mt19937_64's output is).
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
double Uniform(std::mt19937_64& rng, double lo, double hi) { return lo + (hi - lo) * Uniform(rng); }
// Standard normal (Box-Muller; one of the pair is dropped for simplicity).
double Normal(std::mt19937_64& rng) {
  double u1 = Uniform(rng);
  double u2 = Uniform(rng);
  return std::sqrt(-2 * std::log1p(-u1)) * std::cos(kTwoPi * u2);
}

size_t Samples(const Family& f) { return static_cast<size_t>(std::lround(f.window_s / f.dt_s)); }

// As NVML reports utilisation: an integer percent in 0..100. NaN stays missing.
std::vector<double> Quantize(std::vector<double> v) {
  for (double& x : v) {
    if (!std::isnan(x)) x = std::round(std::clamp(x, 0.0, 100.0));
  }
  return v;
}

// Baselines.
std::vector<double> IdleValues(std::mt19937_64& rng, size_t n) {
  std::vector<double> v(n);
  for (double& x : v) x = Uniform(rng) < 0.03 ? 1 : 0;
  return v;
}
std::vector<double> NoiseAround(std::mt19937_64& rng, size_t n, double level, double sigma) {
  std::vector<double> v(n);
  for (double& x : v) x = level + sigma * Normal(rng);
  return v;
}

// A periodic shape at time t (seconds) with a random phase: sine or square between lo and hi.
double Sine(double t, double period_s, double lo, double hi) {
  return lo + (hi - lo) * 0.5 * (1 + std::sin(kTwoPi * t / period_s));
}
double Square(double t, double period_s, double duty, double lo, double hi) {
  double phase = t / period_s - std::floor(t / period_s);
  return phase < duty ? hi : lo;
}

using Maker = std::function<std::vector<double>(std::mt19937_64&, const Family&)>;

Maker SineMaker(double noise) {
  return [noise](std::mt19937_64& rng, const Family& f) {
    size_t n = Samples(f);
    double t0 = Uniform(rng, 0, f.period_s);
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) {
      v[i] = Sine(t0 + i * f.dt_s, f.period_s, 10, 90) + noise * Normal(rng);
    }
    return v;
  };
}

// A training loop: compute at ~90 % for a duty fraction of each iteration, then ~15 % (data
// loading, communication).
Maker SquareMaker(double noise) {
  return [noise](std::mt19937_64& rng, const Family& f) {
    size_t n = Samples(f);
    double t0 = Uniform(rng, 0, f.period_s);
    double duty = Uniform(rng, 0.35, 0.65);
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) {
      v[i] = Square(t0 + i * f.dt_s, f.period_s, duty, 15, 90) + noise * Normal(rng);
    }
    return v;
  };
}

// Short bursts on an idle GPU whose spacing jitters by +-jitter (each interval drawn anew).
Maker SpikesMaker(double burst_s, double jitter) {
  return [burst_s, jitter](std::mt19937_64& rng, const Family& f) {
    size_t n = Samples(f);
    std::vector<double> v(n);
    for (double& x : v) x = 2 + Normal(rng);
    double start = -Uniform(rng, 0, f.period_s);
    while (start < f.window_s) {
      for (size_t i = 0; i < n; ++i) {
        double t = i * f.dt_s;
        if (t >= start && t < start + burst_s) v[i] = 95 + 3 * Normal(rng);
      }
      start += f.period_s * (1 + Uniform(rng, -jitter, jitter));
    }
    return v;
  };
}

// Drop `fraction` of the samples at random and one 30-second hole.
void Punch(std::mt19937_64& rng, const Family& f, std::vector<double>& v, double fraction) {
  for (double& x : v) {
    if (Uniform(rng) < fraction) x = kNaN;
  }
  size_t hole = static_cast<size_t>(30 / f.dt_s);
  size_t at = static_cast<size_t>(Uniform(rng, 0, static_cast<double>(v.size() - hole)));
  std::fill(v.begin() + at, v.begin() + at + hole, kNaN);
}

// The GPU falls off the bus between `from` and `to` of the window: no values after.
void Lose(std::mt19937_64& rng, std::vector<double>& v, double from, double to) {
  size_t at = static_cast<size_t>(Uniform(rng, from, to) * v.size());
  std::fill(v.begin() + at, v.end(), kNaN);
}

std::vector<Family> Build() {
  std::vector<Family> out;
  auto add = [&out](std::string name, double dt_s, Expect expect, double period_s, bool moderate,
                    std::string description, Maker make) {
    Family f;
    f.name = std::move(name);
    f.dt_s = dt_s;
    f.expect = expect;
    f.period_s = period_s;
    f.moderate = moderate;
    f.description = std::move(description);
    f.make = std::move(make);
    out.push_back(std::move(f));
  };
  const Expect no = Expect::kNotCyclic;
  const Expect yes = Expect::kCyclic;

  for (double dt : {1.0, 1.0 / 6}) {
    std::string p = dt == 1.0 ? "" : "6hz_";
    // Not periodic.
    add(p + "idle", dt, no, 0, true, "0 %, an occasional 1 %",
        [](std::mt19937_64& rng, const Family& f) { return IdleValues(rng, Samples(f)); });
    add(p + "white_noise", dt, no, 0, true, "50 % + N(0, 20)",
        [](std::mt19937_64& rng, const Family& f) { return NoiseAround(rng, Samples(f), 50, 20); });
    add(p + "steady", dt, no, 0, true, "85 % + N(0, 3)",
        [](std::mt19937_64& rng, const Family& f) { return NoiseAround(rng, Samples(f), 85, 3); });
    add(p + "single_burst", dt, no, 0, true, "idle with one 20 s burst at 90 %",
        [](std::mt19937_64& rng, const Family& f) {
          std::vector<double> v = IdleValues(rng, Samples(f));
          double start = Uniform(rng, 60, f.window_s - 80);
          for (size_t i = 0; i < v.size(); ++i) {
            double t = i * f.dt_s;
            if (t >= start && t < start + 20) v[i] = 90 + 3 * Normal(rng);
          }
          return v;
        });
    add(p + "random_walk", dt, no, 0, true, "steps N(0, 2.5 %/s), reflected at 0 and 100",
        [](std::mt19937_64& rng, const Family& f) {
          std::vector<double> v(Samples(f));
          double x = Uniform(rng, 20, 80);
          double step = 2.5 * std::sqrt(f.dt_s);
          for (double& y : v) {
            x += step * Normal(rng);
            if (x < 0) x = -x;
            if (x > 100) x = 200 - x;
            y = x;
          }
          return v;
        });
  }

  // 1 Hz, more kinds of non-periodic load.
  add("held_zero_compute", 1, no, 0, true, "memory held, utilisation exactly 0",
      [](std::mt19937_64&, const Family& f) { return std::vector<double>(Samples(f), 0.0); });
  add("steady_ar1", 1, no, 0, true, "60 % + AR(1) phi 0.9, innovations N(0, 4)",
      [](std::mt19937_64& rng, const Family& f) {
        std::vector<double> v(Samples(f));
        double e = 0;
        for (double& x : v) {
          e = 0.9 * e + 4 * Normal(rng);
          x = 60 + e;
        }
        return v;
      });
  add("steps", 1, no, 0, true, "levels U(10, 95) held Exp(90 s), + N(0, 3)",
      [](std::mt19937_64& rng, const Family& f) {
        std::vector<double> v(Samples(f));
        double level = Uniform(rng, 10, 95);
        double next = -90 * std::log1p(-Uniform(rng));
        for (size_t i = 0; i < v.size(); ++i) {
          if (static_cast<double>(i) >= next) {
            level = Uniform(rng, 10, 95);
            next += -90 * std::log1p(-Uniform(rng));
          }
          v[i] = level + 3 * Normal(rng);
        }
        return v;
      });
  add("gaps_noise", 1, no, 0, true, "white noise, 10 % dropped and a 30 s hole",
      [](std::mt19937_64& rng, const Family& f) {
        std::vector<double> v = NoiseAround(rng, Samples(f), 50, 20);
        Punch(rng, f, v, 0.10);
        return v;
      });
  add("lost_steady", 1, no, 0, true, "85 % + N(0, 3), lost at 40-70 % of the window",
      [](std::mt19937_64& rng, const Family& f) {
        std::vector<double> v = NoiseAround(rng, Samples(f), 85, 3);
        Lose(rng, v, 0.4, 0.7);
        return v;
      });
  // Periodic, but fewer than 3 cycles in the window: must not be reported.
  add("sine_250s_2.4cycles", 1, no, 250, true, "sine, 250 s period: 2.4 cycles", SineMaker(5));
  add("square_300s_2cycles", 1, no, 300, true, "square, 300 s period: 2 cycles", SquareMaker(5));
  add("lost_square_30s_early", 1, no, 30, true, "square 30 s, lost after 60-75 s: < 2.5 cycles",
      [](std::mt19937_64& rng, const Family& f) {
        std::vector<double> v = SquareMaker(5)(rng, f);
        Lose(rng, v, 0.10, 0.125);
        return v;
      });

  // 1 Hz periodic.
  for (double period : {5.0, 12.0, 30.0, 60.0, 120.0}) {
    for (double noise : {5.0, 15.0}) {
      std::string suffix = std::to_string(static_cast<int>(period)) + "s_n" +
                           std::to_string(static_cast<int>(noise));
      add("sine_" + suffix, 1, yes, period, true, "10..90 % sine + N(0, " +
          std::to_string(static_cast<int>(noise)) + ")", SineMaker(noise));
      add("square_" + suffix, 1, yes, period, true, "15/90 % square, duty 35-65 %, + N(0, " +
          std::to_string(static_cast<int>(noise)) + ")", SquareMaker(noise));
    }
  }
  add("sine_30s_n30", 1, yes, 30, false, "heavy noise: 10..90 % sine + N(0, 30)", SineMaker(30));
  add("spikes_jitter_12s", 1, yes, 12, true, "2 s bursts at 95 % every 12 s +-15 %",
      SpikesMaker(2, 0.15));
  add("spikes_jitter_30s", 1, yes, 30, true, "3 s bursts every 30 s +-20 %", SpikesMaker(3, 0.20));
  add("spikes_jitter_60s", 1, yes, 60, true, "3 s bursts every 60 s +-15 %", SpikesMaker(3, 0.15));
  add("checkpoint_dip_60s", 1, yes, 60, true, "92 % with a 6 s dip to 10 % every 60 s",
      [](std::mt19937_64& rng, const Family& f) {
        std::vector<double> v = NoiseAround(rng, Samples(f), 92, 3);
        double t0 = Uniform(rng, 0, 60);
        for (size_t i = 0; i < v.size(); ++i) {
          if (Square(t0 + i * f.dt_s, 60, 0.1, 0, 1) > 0.5) v[i] = 10 + 3 * Normal(rng);
        }
        return v;
      });
  add("drift_30s", 1, yes, 30, true, "sine whose period drifts 27 -> 33 s, + N(0, 5)",
      [](std::mt19937_64& rng, const Family& f) {
        std::vector<double> v(Samples(f));
        double phase = Uniform(rng, 0, 1);
        for (size_t i = 0; i < v.size(); ++i) {
          double period = 27 + 6 * static_cast<double>(i) / static_cast<double>(v.size());
          phase += f.dt_s / period;
          v[i] = 50 + 40 * std::sin(kTwoPi * phase) + 5 * Normal(rng);
        }
        return v;
      });
  add("gaps_sine_30s", 1, yes, 30, true, "sine 30 s + N(0, 5), 10 % dropped and a 30 s hole",
      [](std::mt19937_64& rng, const Family& f) {
        std::vector<double> v = SineMaker(5)(rng, f);
        Punch(rng, f, v, 0.10);
        return v;
      });
  add("lost_square_20s", 1, yes, 20, true, "square 20 s + N(0, 5), lost at 40-60 % of the window",
      [](std::mt19937_64& rng, const Family& f) {
        std::vector<double> v = SquareMaker(5)(rng, f);
        Lose(rng, v, 0.4, 0.6);
        return v;
      });

  // 6 Hz (the driver's buffered samples): short iterations.
  const double six = 1.0 / 6;
  add("6hz_sine_1s_too_fast", six, no, 1, true, "sine 1 s: under min_period_s (2 s)", SineMaker(5));
  auto seconds = [](double period) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%g", period);
    return std::string(buf) + "s";
  };
  for (double period : {2.5, 3.5, 5.0, 12.0}) {
    add("6hz_sine_" + seconds(period) + "_n10", six, yes, period, true, "10..90 % sine + N(0, 10)",
        SineMaker(10));
  }
  for (double period : {2.5, 5.0, 12.0}) {
    add("6hz_square_" + seconds(period) + "_n10", six, yes, period, true,
        "15/90 % square + N(0, 10)", SquareMaker(10));
  }
  add("6hz_spikes_jitter_4s", six, yes, 4, true, "0.5 s bursts every 4 s +-15 %",
      SpikesMaker(0.5, 0.15));
  return out;
}

}  // namespace

const std::vector<Family>& Families() {
  static const std::vector<Family> families = Build();
  return families;
}

std::vector<double> Generate(const Family& family, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return Quantize(family.make(rng, family));
}

std::vector<double> Head(const std::vector<double>& values, double dt_s, double seconds) {
  size_t n = std::min(values.size(), static_cast<size_t>(std::lround(seconds / dt_s)));
  return std::vector<double>(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace flyt::profile::testing
