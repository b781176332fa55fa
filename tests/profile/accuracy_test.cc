// The cycle test's accuracy harness: many seeded trials of every labelled family
// (tests/profile/series.h) through DetectCycle on a 10-minute window, with the rates asserted per
// family. The bars:
//   - periodic families (>= 3 cycles in the window) at moderate noise: cyclic in >= 90 % of trials
//     (kMinDetectionRate);
//   - every periodic family, any noise: each cyclic verdict's period within 10 % of the truth;
//   - every non-periodic family (including periodic loads with < 3 cycles in the window): not
//     cyclic in >= 95 % of trials (kMinRejectionRate);
//   - no cyclic verdict ever reports fewer than min_cycles cycles in the window.
// Heavy-noise families are measured (their detected periods still checked) but not held to the
// detection bar. The table of measured rates is printed (bench/profile_accuracy.cc prints it
// beside the seed design's test); CYCLE_DEBUG=1 prints every wrong verdict. Deterministic: the
// seeds are fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "profile/cycle.h"
#include "series.h"

namespace flyt::profile::testing {
namespace {

constexpr double kMinDetectionRate = 0.90;
constexpr double kMinRejectionRate = 0.95;
constexpr double kMaxPeriodError = 0.10;

struct Stats {
  int trials = 0;
  int cyclic = 0;
  int insufficient = 0;
  std::vector<double> errors;  // relative period error of each cyclic verdict (periodic families)
  double min_cycles_seen = 1e9;
  std::string example_reason;  // one reason for a not-cyclic verdict
};

int Trials(const Family& f) { return f.dt_s < 1 ? 40 : 100; }

const std::map<std::string, Stats>& AllStats() {
  static const std::map<std::string, Stats> stats = [] {
    std::map<std::string, Stats> out;
    for (const Family& f : Families()) {
      Stats& s = out[f.name];
      if (getenv("CYCLE_DEBUG")) std::fprintf(stderr, "family %s\n", f.name.c_str());
      for (int trial = 0; trial < Trials(f); ++trial) {
        std::vector<double> v = Generate(f, 1000 + static_cast<uint64_t>(trial));
        CycleResult r = DetectCycle(v, f.dt_s);
        ++s.trials;
        if (r.insufficient) ++s.insufficient;
        if (r.cyclic) {
          ++s.cyclic;
          s.min_cycles_seen = std::min(s.min_cycles_seen, r.cycles_in_window);
          double err = f.period_s > 0 ? std::abs(r.period_s - f.period_s) / f.period_s : 1;
          if (f.period_s > 0) s.errors.push_back(err);
          if (getenv("CYCLE_DEBUG") && (f.expect == Expect::kNotCyclic || err > 0.1)) {
            std::fprintf(stderr, "  %s seed %d: %s %.2f s conf %.2f cycles %.1f\n", f.name.c_str(), trial,
                        r.method.c_str(), r.period_s, r.confidence, r.cycles_in_window);
          }
        } else if (s.example_reason.empty()) {
          s.example_reason = r.reason;
        }
      }
    }
    // The table, for the log.
    std::printf("| family | expect | trials | cyclic | median err | max err | a reason when not |\n");
    for (const Family& f : Families()) {
      const Stats& s = out[f.name];
      std::vector<double> e = s.errors;
      std::sort(e.begin(), e.end());
      std::printf("| %s | %s | %d | %.0f %% | %s | %s | %s |\n", f.name.c_str(),
                  f.expect == Expect::kCyclic ? "cyclic" : "not", s.trials,
                  100.0 * s.cyclic / s.trials,
                  e.empty() ? "-" : std::to_string(100 * e[e.size() / 2]).substr(0, 4).c_str(),
                  e.empty() ? "-" : std::to_string(100 * e.back()).substr(0, 4).c_str(),
                  s.example_reason.c_str());
    }
    return out;
  }();
  return stats;
}

TEST(ProfileAccuracyTest, PeriodicFamiliesAreDetected) {
  for (const Family& f : Families()) {
    if (f.expect != Expect::kCyclic || !f.moderate) continue;
    const Stats& s = AllStats().at(f.name);
    EXPECT_GE(static_cast<double>(s.cyclic) / s.trials, kMinDetectionRate)
        << f.name << " (" << f.description << "): cyclic in " << s.cyclic << " of " << s.trials
        << "; e.g. " << s.example_reason;
  }
}

TEST(ProfileAccuracyTest, EveryDetectedPeriodIsWithinTenPercent) {
  for (const Family& f : Families()) {
    if (f.expect != Expect::kCyclic) continue;
    const Stats& s = AllStats().at(f.name);
    for (double e : s.errors) {
      EXPECT_LE(e, kMaxPeriodError) << f.name << ": a period off by " << 100 * e << " %";
    }
  }
}

TEST(ProfileAccuracyTest, NonPeriodicFamiliesAreNotCyclic) {
  for (const Family& f : Families()) {
    if (f.expect != Expect::kNotCyclic) continue;
    const Stats& s = AllStats().at(f.name);
    EXPECT_GE(1.0 - static_cast<double>(s.cyclic) / s.trials, kMinRejectionRate)
        << f.name << " (" << f.description << "): cyclic in " << s.cyclic << " of " << s.trials;
  }
}

TEST(ProfileAccuracyTest, NoVerdictHasFewerThanThreeCycles) {
  for (const Family& f : Families()) {
    const Stats& s = AllStats().at(f.name);
    if (s.cyclic > 0) {
      EXPECT_GE(s.min_cycles_seen, 3.0) << f.name;
    }
  }
}

}  // namespace
}  // namespace flyt::profile::testing
