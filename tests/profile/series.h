// Labelled utilisation series for the cycle test's accuracy harness (tests/profile/accuracy_test.cc)
// and its bench (bench/profile_accuracy.cc): each family is a kind of GPU load (idle, steady,
// random walk, sine and square loads, jittered spikes, ...) labelled periodic, with its true
// period, or not. A series is a pure function of its family and seed: the generator draws from
// std::mt19937_64 (whose output the standard fixes) through its own uniform and normal transforms,
// so the same seed gives the same series with any standard library. Values are utilisation
// percent, rounded to integers and clipped to 0..100 as NVML reports them; NaN is a missing
// sample. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace flyt::profile::testing {

// What the cycle test must say about a family.
enum class Expect {
  kCyclic,     // periodic with >= 3 cycles in the window: cyclic, period within 10 %
  kNotCyclic,  // no period (or fewer than 3 cycles of it in the window): never cyclic
};

struct Family {
  std::string name;
  double dt_s = 1.0;         // sample interval
  double window_s = 600.0;   // series length
  Expect expect = Expect::kNotCyclic;
  double period_s = 0;       // the true (mean) period; 0 when there is none
  // Moderate noise: the families the detection-rate bar applies to (heavy-noise families are
  // measured and reported, their period error still checked).
  bool moderate = true;
  std::string description;
  std::function<std::vector<double>(std::mt19937_64& rng, const Family& family)> make;
};

// Every family: the 1 Hz ones over 10 minutes (600 samples), then the 6 Hz ones (3600 samples).
const std::vector<Family>& Families();

// One series of `family` from `seed` (the same seed, the same series).
std::vector<double> Generate(const Family& family, uint64_t seed);

// The series' first `seconds` (the seed design's 2-minute window).
std::vector<double> Head(const std::vector<double>& values, double dt_s, double seconds);

}  // namespace flyt::profile::testing
