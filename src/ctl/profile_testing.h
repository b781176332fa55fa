// Test data for flytctl's profile views: three GPU profiles as a node manager computes them
// (built as profile::GpuProfile and put in their JSON form by profile/json.h, as the node does):
// GPU 0 cyclic with a 12 s period, GPU 1 allocated-idle (30 GiB held by alice's python), GPU 2
// unknown (no samples yet). Test-only; pure functions.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "profile/json.h"
#include "profile/profile.h"

namespace flyt::ctl::test {

// The line of `text` that contains `what` ("" when none).
inline std::string LineWith(const std::string& text, const std::string& what) {
  size_t at = text.find(what);
  if (at == std::string::npos) return "";
  size_t begin = text.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, text.find('\n', at) - begin);
}

inline constexpr uint64_t kProfileGiB = 1ULL << 30;

inline std::chrono::system_clock::time_point ProfileTime(int seconds) {
  // 2026-11-22T06:00:00Z
  return std::chrono::system_clock::time_point(std::chrono::seconds(1795327200 + seconds));
}

inline std::vector<profile::GpuProfile> SampleProfiles() {
  using profile::State;
  std::vector<profile::GpuProfile> out;
  for (uint32_t i = 0; i < 3; ++i) {
    profile::GpuProfile p;
    p.index = i;
    p.uuid = "GPU-0000000" + std::to_string(i);
    p.name = "NVIDIA H100 80GB HBM3";
    p.computed_at = ProfileTime(600);
    p.inputs = {"util", "util_samples", "memory_used", "power"};
    p.util_rate_hz = 6;
    p.memory.total_bytes = 80 * kProfileGiB;
    for (const char* name : {"1m", "15m", "1h"}) {
      profile::Window w;
      w.name = name;
      w.length = std::chrono::seconds(std::string(name) == "1m" ? 60 : name[1] == '5' ? 900 : 3600);
      p.windows.push_back(w);
    }
    out.push_back(p);
  }
  // GPU 0: a training job's 12 s iteration.
  profile::GpuProfile& c = out[0];
  c.state = State::kCyclic;
  c.state_since = ProfileTime(290);
  c.state_seconds = 310;
  profile::Cycle cycle;
  cycle.period_s = 12;
  cycle.confidence = 0.87;
  cycle.method = "autocorrelation";
  cycle.cycles_in_window = 25;
  cycle.phase_origin = ProfileTime(588);
  cycle.util_peak_offset_s = 3.0;
  cycle.util_trough_offset_s = 9.5;
  cycle.memory_peak_offset_s = 3.2;
  cycle.memory_trough_offset_s = 9.6;
  cycle.next_util_trough_at = ProfileTime(609);
  c.cycle = cycle;
  for (profile::Window& w : c.windows) {
    w.util_percent = profile::Quantiles{80, 97, 99, 60};
    w.memory_used_bytes = profile::Quantiles{30.0 * kProfileGiB, 40.0 * kProfileGiB,
                                             41.0 * kProfileGiB, 60};
    w.power_w = profile::Quantiles{300, 650, 690, 60};
  }
  c.memory.peak_used_bytes = 41 * kProfileGiB;
  c.memory.headroom_bytes = 39 * kProfileGiB;
  c.memory.peak_window_s = 36;
  c.processes = {{4100, "python", "bob", 41 * kProfileGiB}};
  c.launches_per_second = 2500;
  c.phase_changes = {{ProfileTime(280), State::kIdle, State::kCyclic, "state", "period 12.0 s"}};
  // GPU 1: a notebook holding 30 GiB and computing nothing.
  profile::GpuProfile& a = out[1];
  a.state = State::kAllocatedIdle;
  a.state_since = ProfileTime(-125);
  a.state_seconds = 725;
  profile::AllocatedIdle idle;
  idle.seconds = 725;
  idle.memory_bytes = 30 * kProfileGiB;
  idle.processes = {{4242, "python", "alice", 30 * kProfileGiB}};
  a.allocated_idle = idle;
  a.processes = idle.processes;
  a.memory.peak_used_bytes = 30 * kProfileGiB;
  a.memory.headroom_bytes = 50 * kProfileGiB;
  // GPU 2: just started.
  profile::GpuProfile& u = out[2];
  u.state = State::kUnknown;
  u.state_since = ProfileTime(600);
  u.insufficient_data = "no samples yet";
  return out;
}

}  // namespace flyt::ctl::test
