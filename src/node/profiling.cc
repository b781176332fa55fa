#include "node/profiling.h"

#include <spdlog/spdlog.h>

#include "common/strings.h"

namespace flyt::node {

profile::ProfilerOptions ProfilerOptionsFrom(const ProfileConfig& config,
                                             std::chrono::milliseconds sample_interval) {
  using std::chrono::duration_cast;
  using std::chrono::seconds;
  profile::ProfilerOptions o;
  o.sample_interval = sample_interval;
  o.idle_util_percent = config.idle_util_percent;
  o.allocated_idle_after = duration_cast<seconds>(config.allocated_idle_after);
  o.state_hold = duration_cast<seconds>(config.state_hold);
  o.cycle_window = duration_cast<seconds>(config.cycle_window);
  o.analysis_interval = config.analysis_interval;
  o.cycle.min_cycles = config.min_cycles;
  o.cycle.idle_level = config.idle_util_percent;
  return o;
}

std::string ProfileKey(const gpu::GpuInfo& gpu) {
  return gpu.uuid.empty() ? "#" + std::to_string(gpu.index) : gpu.uuid;
}

profile::Sample ToProfileSample(const gpu::GpuInfo& g, std::chrono::system_clock::time_point at,
                                std::optional<double> launches_per_second,
                                uint64_t held_memory_bytes) {
  profile::Sample s;
  s.at = at;
  s.lost = g.lost;
  if (g.lost) return s;  // no reading of a lost GPU is valid
  if (g.gpu_util_percent) s.util_percent = *g.gpu_util_percent;
  if (g.memory_util_percent) s.memory_util_percent = *g.memory_util_percent;
  s.memory_used_bytes = g.memory_used_bytes;
  s.memory_total_bytes = g.memory_total_bytes;
  if (g.power_draw_mw) s.power_w = *g.power_draw_mw / 1000.0;
  s.launches_per_second = launches_per_second;
  for (const gpu::ProcessInfo& p : g.processes) {
    profile::ProcessUse use;
    use.pid = p.pid;
    use.name = p.name;
    use.user = p.user;
    use.memory_bytes = p.used_memory_bytes;
    s.processes.push_back(std::move(use));
  }
  s.processes_known = !g.processes.empty() || !g.memory_used_bytes ||
                      *g.memory_used_bytes <= held_memory_bytes;
  s.util_samples.reserve(g.util_samples.size());
  for (const gpu::UtilSample& u : g.util_samples) {
    s.util_samples.push_back(
        {std::chrono::system_clock::time_point(std::chrono::duration_cast<
             std::chrono::system_clock::duration>(std::chrono::microseconds(u.timestamp_us))),
         static_cast<double>(u.percent)});
  }
  return s;
}

std::map<std::string, double> LaunchRates(const trace::StatsSource* cuda,
                                          const std::vector<gpu::GpuInfo>& gpus) {
  std::map<std::string, double> rates;
  if (cuda == nullptr || !cuda->Health().enabled) return rates;
  for (const gpu::GpuInfo& g : gpus) {
    if (!g.uuid.empty()) rates[g.uuid] = 0;
  }
  for (const trace::ProcessCuda& p : cuda->Processes()) {
    if (p.exited || p.gpu_uuid.empty()) continue;
    auto it = rates.find(p.gpu_uuid);
    if (it != rates.end()) it->second += p.launches_per_second;
  }
  return rates;
}

Profiling::Profiling(profile::ProfilerOptions options, const trace::StatsSource* cuda)
    : profiler_(std::move(options)), cuda_(cuda) {}

Result<std::unique_ptr<Profiling>> Profiling::Create(const ProfileConfig& config,
                                                     std::chrono::milliseconds sample_interval,
                                                     const trace::StatsSource* cuda) {
  profile::ProfilerOptions options = ProfilerOptionsFrom(config, sample_interval);
  if (Status s = options.Validate(); !s.ok()) return s.WithContext("[profile]");
  return std::make_unique<Profiling>(std::move(options), cuda);
}

void Profiling::Observe(const gpu::GpuSnapshot& snap) {
  const std::map<std::string, double> rates = LaunchRates(cuda_, snap.gpus);
  std::vector<std::string> present;
  present.reserve(snap.gpus.size());
  for (const gpu::GpuInfo& g : snap.gpus) {
    std::optional<double> rate;
    if (auto it = rates.find(g.uuid); it != rates.end()) rate = it->second;
    const std::string key = ProfileKey(g);
    profiler_.Add(g.index, key, g.name,
                  ToProfileSample(g, snap.taken_at, rate, profiler_.options().held_memory_bytes));
    present.push_back(key);
  }
  profiler_.Retain(present);
  std::vector<profile::Profiler::GpuPhaseChange> changes = profiler_.TakePhaseChanges();
  if (changes.empty()) return;
  MutexLock lock(mu_);
  for (const profile::Profiler::GpuPhaseChange& c : changes) {
    ++phase_changes_[c.uuid];
    spdlog::info("GPU {} ({}): {} -> {} ({} change{}{})", c.index, c.uuid,
                 profile::StateName(c.change.from), profile::StateName(c.change.to),
                 c.change.kind, c.change.detail.empty() ? "" : ": ",
                 SanitizeUtf8(c.change.detail));
  }
}

std::vector<profile::GpuProfile> Profiling::Profiles() const { return profiler_.Profiles(); }

std::optional<profile::GpuProfile> Profiling::Profile(uint32_t index) const {
  return profiler_.Profile(index);
}

std::map<std::string, uint64_t> Profiling::PhaseChangeCounts() const {
  MutexLock lock(mu_);
  return phase_changes_;
}

size_t Profiling::BytesPerGpu() const { return profiler_.BytesPerGpu(); }

nlohmann::json Profiling::OptionsJson() const {
  const profile::ProfilerOptions& o = profiler_.options();
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  return {{"enabled", true},
          {"sample_interval_s", secs(o.sample_interval)},
          {"allocated_idle_after_s", secs(o.allocated_idle_after)},
          {"state_hold_s", secs(o.state_hold)},
          {"cycle_window_s", secs(o.cycle_window)},
          {"analysis_interval_s", secs(o.analysis_interval)},
          {"idle_util_percent", o.idle_util_percent},
          {"min_cycles", o.cycle.min_cycles},
          {"held_memory_bytes", o.held_memory_bytes},
          {"min_samples", o.min_samples},
          {"max_gap_s", secs(o.max_gap)},
          {"steady_max_cv", o.steady_max_cv},
          {"max_phase_changes", o.max_phase_changes}};
}

}  // namespace flyt::node
