// The profiler's CPU cost and memory (issue 16: < 0.1 % of a core at 8 GPUs and 1 Hz).
//
//   build/bin/flyt-bench-profile [--hours H] [--reads-per-second R]
//
// Replays H hours (default 2) of 1 Hz samples for 8 GPUs as fast as it can — two cyclic
// training jobs (12 s and 30 s iterations, with the driver's 6 Hz samples), two steady
// inference loads, a bursty one, a notebook holding memory idle, two idle GPUs — calling Add()
// for every sample and Profiles() R times per simulated second (default 1: the API, /metrics and
// the heartbeat together read less often than that). The CPU time of the replay (this thread's)
// over the simulated time is the share of one core the profiler would take at 1 Hz. It runs
// three ways: with the real cycle test, with a no-op cycle test (the profiler's own cost), and
// without the driver's samples (the cycle test on the 1 Hz series). Prints a Markdown table.
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "profile/profiler.h"

namespace {

using flyt::profile::CycleDetector;
using flyt::profile::CycleOptions;
using flyt::profile::CycleResult;
using flyt::profile::Profiler;
using flyt::profile::Sample;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Sample Make(int gpu, int t, bool driver_samples, std::mt19937& rng) {
  std::normal_distribution<double> noise(0, 2);
  const auto at = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000 + t));
  const auto level = [&](double s) -> double {
    switch (gpu) {
      case 0:
        return std::fmod(s, 12.0) < 8 ? 95 : 3;
      case 1:
        return std::fmod(s, 30.0) < 20 ? 90 : 10;
      case 2:
      case 3:
        return 70;
      case 4:
        return (static_cast<int>(s) * 7919 % 13) < 5 ? 90 : 5;
      default:
        return 0;
    }
  };
  Sample x;
  x.at = at;
  x.util_percent = std::clamp(level(t) + noise(rng), 0.0, 100.0);
  x.memory_util_percent = *x.util_percent / 2;
  x.memory_total_bytes = 80ull << 30;
  x.memory_used_bytes = gpu < 6 ? (40ull << 30) + static_cast<uint64_t>(gpu) * (1ull << 30) : 0;
  x.power_w = 100 + 5 * *x.util_percent;
  if (gpu < 6) {
    flyt::profile::ProcessUse p;
    p.pid = 1000 + static_cast<uint32_t>(gpu);
    p.name = "python3";
    p.user = "alice";
    p.memory_bytes = x.memory_used_bytes;
    x.processes.push_back(p);
  }
  if (driver_samples) {
    for (int k = 1; k <= 6; ++k) {
      const double s = t - 1 + k / 6.0;
      x.util_samples.push_back({at - std::chrono::milliseconds(1000 - k * 1000 / 6),
                                std::clamp(level(s) + noise(rng), 0.0, 100.0)});
    }
  }
  return x;
}

struct Result {
  double cpu_s = 0;
  double percent_of_core = 0;
  size_t profiles_read = 0;
};

Result Run(const CycleDetector& detector, bool driver_samples, int seconds, int reads) {
  Profiler profiler({}, detector);
  std::mt19937 rng(7);
  size_t read = 0;
  const double start = ThreadCpuSeconds();
  for (int t = 0; t < seconds; ++t) {
    for (int g = 0; g < 8; ++g) {
      profiler.Add(static_cast<uint32_t>(g), "GPU-" + std::to_string(g), "NVIDIA H100",
                   Make(g, t, driver_samples, rng));
    }
    for (int r = 0; r < reads; ++r) read += profiler.Profiles().size();
    (void)profiler.TakePhaseChanges();
  }
  Result res;
  res.cpu_s = ThreadCpuSeconds() - start;
  res.percent_of_core = 100 * res.cpu_s / seconds;
  res.profiles_read = read;
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  double hours = 2;
  int reads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--hours")) {
      hours = std::atof(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--reads-per-second")) {
      reads = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--hours H] [--reads-per-second R]\n", argv[0]);
      return 2;
    }
  }
  const int seconds = static_cast<int>(hours * 3600);
  if (seconds <= 0 || reads < 0) {
    std::fprintf(stderr, "--hours must be positive and --reads-per-second not negative\n");
    return 2;
  }
  const CycleDetector none = [](std::span<const double>, double, const CycleOptions&) {
    CycleResult r;
    r.reason = "no-op";
    return r;
  };
  std::printf(
      "8 GPUs, 1 Hz, %.1f h simulated, Profiles() %d/s, default options; "
      "bytes per GPU: %zu\n\n",
      hours, reads, Profiler().BytesPerGpu());
  std::printf("| cycle test | input | CPU s | %% of one core |\n|---|---|---:|---:|\n");
  const struct {
    const char* name;
    CycleDetector detector;
    bool driver;
  } modes[] = {{"DetectCycle", flyt::profile::DetectCycle, true},
               {"DetectCycle", flyt::profile::DetectCycle, false},
               {"no-op", none, true}};
  for (const auto& m : modes) {
    Result r = Run(m.detector, m.driver, seconds, reads);
    std::printf("| %s | %s | %.3f | %.4f |\n", m.name,
                m.driver ? "1 Hz + 6 Hz driver samples" : "1 Hz only", r.cpu_s, r.percent_of_core);
    std::fflush(stdout);
  }
  return 0;
}
