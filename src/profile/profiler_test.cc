// The profiler's own logic, driven with hand-made sample sequences and a fake cycle detector (so
// that these tests do not depend on the real cycle test; profiler_cycle_test.cc uses that one).
#include "profile/profiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <thread>

namespace flyt::profile {
namespace {

using std::chrono::seconds;
using TimePoint = std::chrono::system_clock::time_point;

const TimePoint kT0 = TimePoint(seconds(1'700'000'000));
constexpr uint64_t kGiB = 1ull << 30;

TimePoint At(double s) {
  return kT0 + std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(s));
}

// A cycle detector whose verdict the test sets; it records what it was given.
struct FakeDetector {
  struct Shared {
    CycleResult next;
    int calls = 0;
    size_t last_size = 0;
    size_t max_size = 0;
    double last_dt = 0;
  };
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();

  CycleDetector Fn() const {
    auto s = shared;
    return [s](std::span<const double> values, double dt, const CycleOptions&) {
      ++s->calls;
      s->last_size = values.size();
      s->max_size = std::max(s->max_size, values.size());
      s->last_dt = dt;
      return s->next;
    };
  }
  void SetCyclic(double period_s, double confidence = 0.9) {
    shared->next = {};
    shared->next.cyclic = true;
    shared->next.period_s = period_s;
    shared->next.confidence = confidence;
    shared->next.method = "autocorrelation";
    shared->next.cycles_in_window = 5;
  }
  void SetNotCyclic() {
    shared->next = {};
    shared->next.reason = "no peak";
  }
};

Sample Util(double t, std::optional<double> util) {
  Sample s;
  s.at = At(t);
  s.util_percent = util;
  s.memory_total_bytes = 80 * kGiB;
  s.memory_used_bytes = 1 * kGiB;
  s.power_w = 100;
  return s;
}

ProcessUse Proc(uint32_t pid, const char* name, const char* user, uint64_t bytes) {
  ProcessUse p;
  p.pid = pid;
  p.name = name;
  p.user = user;
  p.memory_bytes = bytes;
  return p;
}

class ProfilerTest : public ::testing::Test {
 protected:
  ProfilerTest() { detector_.SetNotCyclic(); }

  Profiler& Make(ProfilerOptions o = {}) {
    EXPECT_TRUE(o.Validate().ok()) << o.Validate().ToString();
    profiler_ = std::make_unique<Profiler>(o, detector_.Fn());
    return *profiler_;
  }
  // Adds one sample per second for t in [from, to) made by `gen`.
  void Feed(int from, int to, const std::function<Sample(int)>& gen, uint32_t index = 0,
            const std::string& uuid = "GPU-a") {
    for (int t = from; t < to; ++t) profiler_->Add(index, uuid, "H100", gen(t));
  }
  GpuProfile P(uint32_t index = 0) {
    auto p = profiler_->Profile(index);
    EXPECT_TRUE(p.has_value());
    return p.value_or(GpuProfile{});
  }

  FakeDetector detector_;
  std::unique_ptr<Profiler> profiler_;
};

TEST_F(ProfilerTest, UnknownUntilEnoughSamplesSayingHowMany) {
  Make();
  EXPECT_FALSE(profiler_->Profile(0).has_value());
  Feed(0, 12, [](int t) { return Util(t, 0); });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kUnknown);
  EXPECT_EQ(p.insufficient_data, "12 of 30 samples needed");
  EXPECT_EQ(p.uuid, "GPU-a");
  EXPECT_EQ(p.name, "H100");
  EXPECT_EQ(p.computed_at, At(11));
  ASSERT_EQ(p.windows.size(), 3u);
  EXPECT_EQ(p.windows[0].name, "1m");
  EXPECT_EQ(p.windows[2].length, seconds(3600));
}

TEST_F(ProfilerTest, IdleWithoutProcesses) {
  Make();
  Feed(0, 60, [](int t) { return Util(t, t % 3 == 0 ? 1.0 : 0.0); });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kIdle);
  EXPECT_TRUE(p.insufficient_data.empty());
  EXPECT_EQ(p.state_since, At(0));
  EXPECT_DOUBLE_EQ(p.state_seconds, 59);
  EXPECT_FALSE(p.allocated_idle.has_value());
  EXPECT_FALSE(p.cycle.has_value());
  // unknown -> idle is not a phase change.
  EXPECT_TRUE(p.phase_changes.empty());
}

TEST_F(ProfilerTest, AllocatedIdleNamesTheProcessesAfterTheConfiguredTime) {
  ProfilerOptions o;
  o.allocated_idle_after = seconds(120);
  Make(o);
  const auto gen = [](int t) {
    Sample s = Util(t, 0);
    s.memory_used_bytes = 30 * kGiB;
    s.processes = {Proc(4242, "python3", "alice", 30 * kGiB)};
    return s;
  };
  Feed(0, 100, gen);
  EXPECT_EQ(P().state, State::kIdle);  // held, but not yet for allocated_idle_after
  Feed(100, 200, gen);
  GpuProfile p = P();
  ASSERT_EQ(p.state, State::kAllocatedIdle);
  EXPECT_EQ(p.state_since, At(0));
  ASSERT_TRUE(p.allocated_idle.has_value());
  EXPECT_DOUBLE_EQ(p.allocated_idle->seconds, 199);
  EXPECT_EQ(p.allocated_idle->memory_bytes, 30 * kGiB);
  ASSERT_EQ(p.allocated_idle->processes.size(), 1u);
  EXPECT_EQ(p.allocated_idle->processes[0].pid, 4242u);
  EXPECT_EQ(p.allocated_idle->processes[0].user, "alice");
  ASSERT_EQ(p.phase_changes.size(), 1u);
  EXPECT_EQ(p.phase_changes[0].from, State::kIdle);
  EXPECT_EQ(p.phase_changes[0].to, State::kAllocatedIdle);
  EXPECT_NE(p.phase_changes[0].detail.find("pid 4242 (python3, alice)"), std::string::npos)
      << p.phase_changes[0].detail;
  // The process exits: idle again after the hold.
  Feed(200, 230, [](int t) { return Util(t, 0); });
  EXPECT_EQ(P().state, State::kIdle);
}

TEST_F(ProfilerTest, AllocatedIdleFromMemoryWhenProcessesCannotBeListed) {
  ProfilerOptions o;
  o.allocated_idle_after = seconds(60);
  Make(o);
  Feed(0, 100, [](int t) {
    Sample s = Util(t, 0);
    s.processes_known = false;
    s.memory_used_bytes = 20 * kGiB;
    return s;
  });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kAllocatedIdle);
  ASSERT_TRUE(p.allocated_idle);
  EXPECT_TRUE(p.allocated_idle->processes.empty());
  // Below held_memory_bytes with no process list: idle.
  Make(o);
  Feed(0, 100, [](int t) {
    Sample s = Util(t, 0);
    s.processes_known = false;
    s.memory_used_bytes = 100 << 20;
    return s;
  });
  EXPECT_EQ(P().state, State::kIdle);
}

TEST_F(ProfilerTest, SteadyLoad) {
  Make();
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(0, 3);
  Feed(0, 120, [&](int t) { return Util(t, std::clamp(80 + noise(rng), 0.0, 100.0)); });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kSteady);
  EXPECT_FALSE(p.cycle.has_value());
  ASSERT_TRUE(p.windows[0].util_percent);
  EXPECT_NEAR(p.windows[0].util_percent->p50, 80, 3);
}

TEST_F(ProfilerTest, BurstyLoad) {
  Make();
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> len(1, 6);
  std::vector<double> series;
  while (series.size() < 200) {
    const int busy = len(rng), quiet = len(rng);
    for (int i = 0; i < busy; ++i) series.push_back(95);
    for (int i = 0; i < quiet; ++i) series.push_back(5);
  }
  Feed(0, 200, [&](int t) { return Util(t, series[static_cast<size_t>(t)]); });
  EXPECT_EQ(P().state, State::kBursty);
}

TEST_F(ProfilerTest, MostlyIdleWithBurstsIsBursty) {
  Make();
  // 3 s bursts every 8 s: p50 ~0, never quiet for the hold.
  Feed(0, 200, [](int t) { return Util(t, t % 8 < 3 ? 90.0 : 0.0); });
  EXPECT_EQ(P().state, State::kBursty);
}

TEST_F(ProfilerTest, CyclicFromTheDetector) {
  Make();
  detector_.SetCyclic(12.0, 0.85);
  Feed(0, 120, [](int t) { return Util(t, t % 12 < 8 ? 95.0 : 0.0); });
  GpuProfile p = P();
  ASSERT_EQ(p.state, State::kCyclic);
  ASSERT_TRUE(p.cycle.has_value());
  EXPECT_DOUBLE_EQ(p.cycle->period_s, 12.0);
  EXPECT_DOUBLE_EQ(p.cycle->confidence, 0.85);
  EXPECT_EQ(p.cycle->method, "autocorrelation");
  EXPECT_GE(p.cycle->next_util_trough_at, p.computed_at);
  EXPECT_LT(p.cycle->next_util_trough_at, p.computed_at + seconds(12));
  EXPECT_DOUBLE_EQ(p.util_rate_hz, 1.0);
  EXPECT_EQ(detector_.shared->last_dt, 1.0);
  EXPECT_NE(std::find(p.inputs.begin(), p.inputs.end(), "util"), p.inputs.end());
  EXPECT_EQ(std::find(p.inputs.begin(), p.inputs.end(), "util_samples"), p.inputs.end());
  // A cyclic load's troughs (4 s of 0 %) are not idleness.
  for (int t = 120; t < 240; ++t) {
    profiler_->Add(0, "GPU-a", "H100", Util(t, t % 12 < 8 ? 95.0 : 0.0));
    ASSERT_EQ(P().state, State::kCyclic) << "t=" << t;
  }
}

TEST_F(ProfilerTest, DriverSamplesFeedTheCycleTestAtTheirRate) {
  Make();
  detector_.SetCyclic(3.0);
  Feed(0, 90, [](int t) {
    Sample s = Util(t, 50);
    for (int k = 0; k < 6; ++k) {
      const double at = t - 1 + (k + 1) / 6.0;
      s.util_samples.push_back({At(at), std::fmod(at, 3.0) < 1.5 ? 100.0 : 0.0});
    }
    return s;
  });
  GpuProfile p = P();
  EXPECT_NEAR(p.util_rate_hz, 6.0, 1e-6);
  EXPECT_NEAR(detector_.shared->last_dt, 1 / 6.0, 1e-9);
  EXPECT_GT(detector_.shared->max_size, 300u);
  EXPECT_NE(std::find(p.inputs.begin(), p.inputs.end(), "util_samples"), p.inputs.end());
  EXPECT_EQ(p.state, State::kCyclic);
  // The driver stops giving samples: back to the per-sample series.
  Feed(90, 120, [](int t) { return Util(t, 50); });
  EXPECT_DOUBLE_EQ(detector_.shared->last_dt, 1.0);
  EXPECT_DOUBLE_EQ(P().util_rate_hz, 1.0);
}

TEST_F(ProfilerTest, LostAtOnceAndBackAfterTheHold) {
  Make();
  Feed(0, 60, [](int t) { return Util(t, 80); });
  ASSERT_EQ(P().state, State::kSteady);
  Sample lost;
  lost.at = At(60);
  lost.lost = true;
  profiler_->Add(0, "GPU-a", "H100", lost);
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kLost);
  EXPECT_EQ(p.state_since, At(60));
  ASSERT_FALSE(p.phase_changes.empty());
  EXPECT_EQ(p.phase_changes.back().to, State::kLost);
  EXPECT_EQ(p.phase_changes.back().kind, "state");
  Feed(61, 65, [](int t) { return Util(t, 80); });
  EXPECT_EQ(P().state, State::kLost);  // not yet held
  Feed(65, 90, [](int t) { return Util(t, 80); });
  EXPECT_EQ(P().state, State::kSteady);
}

TEST_F(ProfilerTest, NoFlappingOnANoisyCvBoundary) {
  Make();
  // A load whose coefficient of variation wanders around steady_max_cv (0.25).
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0, 1);
  Feed(0, 900, [&](int t) { return Util(t, std::clamp(50 + 12.5 * noise(rng), 0.0, 100.0)); });
  GpuProfile p = P();
  EXPECT_TRUE(p.state == State::kSteady || p.state == State::kBursty) << StateName(p.state);
  EXPECT_LE(p.phase_changes.size(), 1u);
}

TEST_F(ProfilerTest, NoFlappingAroundTheIdleLevel) {
  Make();
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> noise(0, 3.5);  // straddles idle_util_percent = 2
  Feed(0, 900, [&](int t) { return Util(t, noise(rng)); });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kIdle);
  EXPECT_TRUE(p.phase_changes.empty());
}

TEST_F(ProfilerTest, ShortBlipsDoNotChangeTheState) {
  Make();
  // Idle with a 5 s burst every 2 minutes: shorter than state_hold.
  Feed(0, 600, [](int t) { return Util(t, t >= 60 && t % 120 < 5 ? 90.0 : 0.0); });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kIdle);
  EXPECT_TRUE(p.phase_changes.empty());
}

TEST_F(ProfilerTest, NaNAndInfReadingsAreMissingWithTheReason) {
  Make();
  Feed(0, 60, [](int t) { return Util(t, 80); });
  Feed(60, 100, [](int t) {
    return Util(t, t % 2 ? std::numeric_limits<double>::quiet_NaN()
                         : std::numeric_limits<double>::infinity());
  });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kUnknown);
  EXPECT_EQ(p.insufficient_data, "0 of the last 30 samples have a valid utilisation: 30 NaN/inf");
  // The windows skip them.
  ASSERT_TRUE(p.windows[2].util_percent);
  EXPECT_EQ(p.windows[2].util_percent->samples, 60u);
}

TEST_F(ProfilerTest, AbsentAndOutOfRangeReadingsNamed) {
  Make();
  Feed(0, 40, [](int t) {
    return Util(t, t < 10  ? std::optional<double>(50)
                   : t % 2 ? std::nullopt
                           : std::optional<double>(250));
  });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kUnknown);
  EXPECT_EQ(p.insufficient_data,
            "0 of the last 30 samples have a valid utilisation: 15 absent, 15 out of range");
  EXPECT_FALSE(p.windows[0].util_percent.has_value() && p.windows[0].util_percent->samples > 10);
}

TEST_F(ProfilerTest, ClockStepBackRestartsTheHistory) {
  Make();
  Feed(0, 100, [](int t) { return Util(t, 80); });
  ASSERT_EQ(P().state, State::kSteady);
  Feed(59, 62, [](int t) { return Util(t, 80); });  // 40 s back
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kUnknown);
  EXPECT_EQ(p.insufficient_data,
            "clock stepped back 40 s; history restarted 2 s ago; 3 of 30 samples needed");
  ASSERT_TRUE(p.windows[2].util_percent);
  EXPECT_EQ(p.windows[2].util_percent->samples, 1u);  // the old history is gone
  Feed(62, 120, [](int t) { return Util(t, 80); });
  EXPECT_EQ(P().state, State::kSteady);
  EXPECT_TRUE(P().insufficient_data.empty());
}

TEST_F(ProfilerTest, LongGapRestartsTheHistoryShortGapFillsMissing) {
  Make();
  Feed(0, 60, [](int t) { return Util(t, 80); });
  Feed(70, 100, [](int t) { return Util(t, 80); });  // a 10 s gap: kept, filled
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kSteady);
  ASSERT_TRUE(p.windows[0].util_percent);
  // The 1 min window as of the newest analysis (t = 95): slots 36..95, 10 of them missing.
  EXPECT_EQ(p.windows[0].util_percent->samples, 50u);
  Feed(300, 305, [](int t) { return Util(t, 80); });  // 201 s: more than max_gap
  p = P();
  EXPECT_EQ(p.state, State::kUnknown);
  EXPECT_EQ(p.insufficient_data,
            "no sample for 201 s (more than max_gap 120 s); history restarted 4 s ago; "
            "5 of 30 samples needed");
}

TEST_F(ProfilerTest, MissingSlotsAfterAGapAreNamed) {
  ProfilerOptions o;
  o.max_gap = seconds(600);
  Make(o);
  Feed(0, 40, [](int t) { return Util(t, 80); });
  Feed(100, 105, [](int t) { return Util(t, 80); });
  EXPECT_EQ(P().insufficient_data,
            "5 of the last 30 samples have a valid utilisation: 25 not sampled (gap)");
}

// The q-quantile of `v` by the reference rule (sort, interpolate at q * (n - 1)).
double Reference(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

TEST_F(ProfilerTest, WindowQuantilesMatchASortedReference) {
  Make();
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 100);
  std::uniform_int_distribution<uint64_t> mem(0, 80 * kGiB);
  std::vector<double> util, fb, power;
  for (int t = 0; t <= 3600; ++t) {
    Sample s = Util(t, std::round(u(rng) * 4) / 4);  // exact in float
    s.memory_used_bytes = mem(rng);
    s.power_w = std::round(u(rng) * 7 * 4) / 4;
    util.push_back(*s.util_percent);
    fb.push_back(static_cast<double>(*s.memory_used_bytes));
    power.push_back(*s.power_w);
    profiler_->Add(0, "GPU-a", "H100", s);
  }
  GpuProfile p = P();
  ASSERT_EQ(p.windows.size(), 3u);
  for (const Window& w : p.windows) {
    const size_t n = static_cast<size_t>(w.length.count());
    SCOPED_TRACE(w.name);
    const auto tail = [n](const std::vector<double>& v) {
      return std::vector<double>(v.end() - static_cast<ptrdiff_t>(n), v.end());
    };
    ASSERT_TRUE(w.util_percent && w.memory_used_bytes && w.power_w);
    EXPECT_EQ(w.util_percent->samples, n);
    for (double q : {0.5, 0.95, 0.99}) {
      const auto pick = [q](const Quantiles& x) {
        return q == 0.5 ? x.p50 : q == 0.95 ? x.p95 : x.p99;
      };
      EXPECT_NEAR(pick(*w.util_percent), Reference(tail(util), q), 1e-4);
      EXPECT_NEAR(pick(*w.memory_used_bytes), Reference(tail(fb), q), 1.0);
      EXPECT_NEAR(pick(*w.power_w), Reference(tail(power), q), 1e-4);
    }
  }
}

TEST_F(ProfilerTest, QuantilesAbsentWithoutValidValues) {
  Make();
  Feed(0, 40, [](int t) {
    Sample s = Util(t, 10);
    s.power_w.reset();
    s.memory_used_bytes.reset();
    return s;
  });
  GpuProfile p = P();
  ASSERT_TRUE(p.windows[0].util_percent);
  EXPECT_FALSE(p.windows[0].power_w.has_value());
  EXPECT_FALSE(p.windows[0].memory_used_bytes.has_value());
  EXPECT_FALSE(p.memory.peak_used_bytes.has_value());
  EXPECT_FALSE(p.memory.headroom_bytes.has_value());
  EXPECT_EQ(std::find(p.inputs.begin(), p.inputs.end(), "power"), p.inputs.end());
}

TEST_F(ProfilerTest, HeadroomOverTheLastMinute) {
  Make();
  Feed(0, 200, [](int t) {
    Sample s = Util(t, 80);
    s.memory_used_bytes = (t == 100 ? 70 : t == 170 ? 50 : 10) * kGiB;
    return s;
  });
  GpuProfile p = P();
  EXPECT_EQ(p.memory.total_bytes, 80 * kGiB);
  EXPECT_EQ(p.memory.peak_used_bytes, 50 * kGiB);  // the 70 GiB peak is older than 1 min
  EXPECT_EQ(p.memory.headroom_bytes, 30 * kGiB);
  EXPECT_DOUBLE_EQ(p.memory.peak_window_s, 60);
}

TEST_F(ProfilerTest, HeadroomOverThreePeriodsWhenCyclic) {
  Make();
  detector_.SetCyclic(40);
  Feed(0, 300, [](int t) {
    Sample s = Util(t, t % 40 < 20 ? 90.0 : 0.0);
    s.memory_used_bytes = (t == 200 ? 70 : 10) * kGiB;  // 99 s before the newest sample
    return s;
  });
  GpuProfile p = P();
  ASSERT_EQ(p.state, State::kCyclic);
  EXPECT_EQ(p.memory.peak_used_bytes, 70 * kGiB);
  EXPECT_EQ(p.memory.headroom_bytes, 10 * kGiB);
  EXPECT_DOUBLE_EQ(p.memory.peak_window_s, 120);
}

TEST_F(ProfilerTest, StatePhaseChangesAreKeptAndQueued) {
  Make();
  Feed(0, 60, [](int t) { return Util(t, 0); });
  Feed(60, 120, [](int t) { return Util(t, 80); });
  Feed(120, 180, [](int t) { return Util(t, 0); });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kIdle);
  ASSERT_EQ(p.phase_changes.size(), 2u);
  EXPECT_EQ(p.phase_changes[0].from, State::kIdle);
  EXPECT_EQ(p.phase_changes[0].to, State::kSteady);
  EXPECT_EQ(p.phase_changes[0].at, At(60));  // when it changed, not when it was reported
  EXPECT_EQ(p.phase_changes[0].kind, "state");
  EXPECT_EQ(p.phase_changes[1].to, State::kIdle);
  EXPECT_EQ(p.phase_changes[1].at, At(119));  // the last busy sample
  auto queued = profiler_->TakePhaseChanges();
  ASSERT_EQ(queued.size(), 2u);
  EXPECT_EQ(queued[0].uuid, "GPU-a");
  EXPECT_EQ(queued[0].index, 0u);
  EXPECT_EQ(queued[1].change.to, State::kIdle);
  EXPECT_TRUE(profiler_->TakePhaseChanges().empty());
}

TEST_F(ProfilerTest, SteadyLevelShiftIsALevelChange) {
  Make();
  Feed(0, 100, [](int t) { return Util(t, 85); });
  Feed(100, 160, [](int t) { return Util(t, 55); });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kSteady);
  ASSERT_EQ(p.phase_changes.size(), 1u);
  EXPECT_EQ(p.phase_changes[0].kind, "level");
  EXPECT_EQ(p.phase_changes[0].from, State::kSteady);
  EXPECT_EQ(p.phase_changes[0].detail, "util p50 85% -> 55%");
  // A large step is a level change too, not a bursty spell.
  Feed(160, 260, [](int t) { return Util(t, t < 200 ? 55.0 : 15.0); });
  p = P();
  EXPECT_EQ(p.state, State::kSteady);
  ASSERT_EQ(p.phase_changes.size(), 2u);
  EXPECT_EQ(p.phase_changes[1].detail, "util p50 55% -> 15%");
  // Small moves are not.
  Feed(260, 400, [](int t) { return Util(t, t % 20 < 10 ? 20.0 : 12.0); });
  EXPECT_EQ(P().phase_changes.size(), 2u);
}

TEST_F(ProfilerTest, CyclicPeriodChangeIsALevelChangeAndTheTestRestarts) {
  Make();
  detector_.SetCyclic(12);
  Feed(0, 200, [](int t) { return Util(t, t % 12 < 6 ? 95.0 : 0.0); });
  ASSERT_EQ(P().state, State::kCyclic);
  detector_.SetCyclic(30);
  Feed(200, 260, [](int t) { return Util(t, t % 30 < 15 ? 95.0 : 0.0); });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kCyclic);
  ASSERT_EQ(p.phase_changes.size(), 1u);
  EXPECT_EQ(p.phase_changes[0].kind, "level");
  EXPECT_EQ(p.phase_changes[0].detail, "period 12.0 s -> 30.0 s");
  EXPECT_DOUBLE_EQ(p.cycle->period_s, 30);
  // After the change (reported at t = 210) the cycle test starts (min_cycles + 1) periods of
  // the new load back, not at the start of the 10 min window.
  Feed(260, 266, [](int t) { return Util(t, t % 30 < 15 ? 95.0 : 0.0); });
  EXPECT_EQ(detector_.shared->last_size, 4u * 30 + (265 - 210) + 1);
}

TEST_F(ProfilerTest, TheCycleTestLooksOnlySinceTheLastPhaseChange) {
  Make();
  Feed(0, 300, [](int t) { return Util(t, 80); });
  Feed(300, 400, [](int t) { return Util(t, 0); });  // steady -> idle at 299
  ASSERT_EQ(P().state, State::kIdle);
  EXPECT_LE(detector_.shared->last_size, 102u);
  EXPECT_GE(detector_.shared->last_size, 95u);
}

TEST_F(ProfilerTest, KeepsTheNewestPhaseChanges) {
  ProfilerOptions o;
  o.max_phase_changes = 3;
  Make(o);
  Feed(0, 600, [](int t) { return Util(t, (t / 60) % 2 ? 80.0 : 0.0); });
  GpuProfile p = P();
  ASSERT_EQ(p.phase_changes.size(), 3u);
  EXPECT_GT(p.phase_changes[0].at, At(300));
  EXPECT_LT(p.phase_changes[0].at, p.phase_changes[2].at);
  EXPECT_EQ(profiler_->TakePhaseChanges().size(), 9u);
}

TEST_F(ProfilerTest, RetainDropsGpusThatLeft) {
  Make();
  Feed(
      0, 5, [](int t) { return Util(t, 0); }, 0, "GPU-a");
  Feed(
      0, 5, [](int t) { return Util(t, 0); }, 1, "GPU-b");
  ASSERT_EQ(profiler_->Profiles().size(), 2u);
  profiler_->Retain({"GPU-b"});
  auto all = profiler_->Profiles();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].uuid, "GPU-b");
  EXPECT_FALSE(profiler_->Profile(0).has_value());
  EXPECT_TRUE(profiler_->Profile(1).has_value());
}

TEST_F(ProfilerTest, ProfilesByIndex) {
  Make();
  Feed(
      0, 3, [](int t) { return Util(t, 0); }, 2, "GPU-c");
  Feed(
      0, 3, [](int t) { return Util(t, 0); }, 0, "GPU-z");
  auto all = profiler_->Profiles();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].index, 0u);
  EXPECT_EQ(all[0].uuid, "GPU-z");
  EXPECT_EQ(all[1].index, 2u);
}

TEST_F(ProfilerTest, SettlingIsSaidWhileTheFirstStateHolds) {
  Make();
  Feed(0, 32, [](int t) { return Util(t, 80); });
  GpuProfile p = P();
  EXPECT_EQ(p.state, State::kUnknown);
  EXPECT_EQ(p.insufficient_data.rfind("settling: steady for", 0), 0u) << p.insufficient_data;
}

TEST(ProfilerOptionsTest, ValidateRefusesNonsense) {
  EXPECT_TRUE(ProfilerOptions{}.Validate().ok());
  const auto refused = [](const std::function<void(ProfilerOptions&)>& edit,
                          const std::string& words) {
    ProfilerOptions o;
    edit(o);
    Status s = o.Validate();
    EXPECT_FALSE(s.ok()) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  refused([](auto& o) { o.sample_interval = std::chrono::milliseconds(0); }, "sample_interval");
  refused([](auto& o) { o.analysis_interval = std::chrono::milliseconds(0); }, "analysis_interval");
  refused([](auto& o) { o.state_hold = seconds(700); }, "state_hold (700 s) must not exceed");
  refused([](auto& o) { o.state_hold = seconds(-1); }, "state_hold");
  refused([](auto& o) { o.cycle_window = seconds(0); }, "cycle_window");
  refused([](auto& o) { o.cycle_window = seconds(7200); }, "at most 1 h");
  refused([](auto& o) { o.min_samples = 0; }, "min_samples");
  refused([](auto& o) { o.min_samples = 100000; }, "min_samples");
  refused([](auto& o) { o.idle_util_percent = std::nan(""); }, "idle_util_percent");
  refused([](auto& o) { o.idle_util_percent = 100; }, "idle_util_percent");
  refused([](auto& o) { o.max_gap = seconds(1); }, "max_gap");
  refused([](auto& o) { o.max_phase_changes = 0; }, "max_phase_changes");
  refused([](auto& o) { o.steady_max_cv = 0; }, "steady_max_cv");
  refused([](auto& o) { o.cycle.min_period_s = 0; }, "min_period_s");
  refused([](auto& o) { o.cycle.min_cycles = 0; }, "min_cycles");
  refused([](auto& o) { o.cycle.min_confidence = 1.5; }, "min_confidence");
  refused([](auto& o) { o.allocated_idle_after = seconds(-5); }, "allocated_idle_after");
}

TEST(ProfilerFootprintTest, BytesPerGpuCountsTheRings) {
  Profiler p;
  // 3601 slots x (4 floats + a double + a byte) + 3601 driver cells x 4 bytes + the rest.
  EXPECT_GT(p.BytesPerGpu(), 3601u * 25 + 3601u * 4);
  EXPECT_LT(p.BytesPerGpu(), 128u * 1024);
  ProfilerOptions o;
  o.sample_interval = std::chrono::milliseconds(500);
  EXPECT_GE(Profiler(o).BytesPerGpu(), p.BytesPerGpu() + 3600u * 25);
}

TEST(ProfilerThreadTest, AddWhileOthersRead) {
  FakeDetector fake;
  fake.SetCyclic(12);
  ProfilerOptions o;
  o.analysis_interval = std::chrono::milliseconds(1000);
  Profiler profiler(o, fake.Fn());
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int t = 0; t < 1500; ++t) {
      for (uint32_t i = 0; i < 4; ++i) {
        Sample s = Util(t, (t / 100 + i) % 2 ? 80.0 : 0.0);
        s.util_samples.push_back({At(t), 50});
        profiler.Add(i, "GPU-" + std::to_string(i), "H100", s);
      }
      if (t == 700) profiler.Retain({"GPU-0", "GPU-1", "GPU-2"});
    }
    done = true;
  });
  size_t reads = 0, changes = 0;
  while (!done) {
    for (const GpuProfile& p : profiler.Profiles()) reads += p.windows.size();
    if (auto p = profiler.Profile(1)) reads += p->phase_changes.size();
    changes += profiler.TakePhaseChanges().size();
    (void)profiler.BytesPerGpu();
  }
  writer.join();
  changes += profiler.TakePhaseChanges().size();
  EXPECT_GT(reads, 0u);
  EXPECT_GT(changes, 0u);
  EXPECT_EQ(profiler.Profiles().size(), 4u);  // GPU-3 came back after the Retain
}

}  // namespace
}  // namespace flyt::profile
