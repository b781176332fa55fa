// PLACEHOLDER until the profiler lands: remembers each GPU's newest sample and reports it as
// "unknown" with the reason that the profiler is not built yet.
#include "profile/profiler.h"

#include <algorithm>

namespace flyt::profile {

struct Profiler::Gpu {
  uint32_t index = 0;
  std::string name;
  Sample last;
};

Status ProfilerOptions::Validate() const { return Status::Ok(); }

Profiler::Profiler(ProfilerOptions options, CycleDetector detector)
    : options_(std::move(options)), detector_(std::move(detector)) {}
Profiler::~Profiler() = default;

void Profiler::Add(uint32_t index, const std::string& uuid, const std::string& name,
                   const Sample& sample) {
  MutexLock lock(mu_);
  auto& g = gpus_[uuid];
  if (!g) g = std::make_unique<Gpu>();
  g->index = index;
  g->name = name;
  g->last = sample;
}

void Profiler::Retain(const std::vector<std::string>& present) {
  MutexLock lock(mu_);
  for (auto it = gpus_.begin(); it != gpus_.end();) {
    if (std::find(present.begin(), present.end(), it->first) == present.end()) {
      it = gpus_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<GpuProfile> Profiler::Profiles() const {
  MutexLock lock(mu_);
  std::vector<GpuProfile> out;
  for (const auto& [uuid, g] : gpus_) {
    GpuProfile p;
    p.index = g->index;
    p.uuid = uuid;
    p.name = g->name;
    p.computed_at = g->last.at;
    p.state_since = g->last.at;
    p.insufficient_data = "profiler not implemented";
    p.processes = g->last.processes;
    out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(),
            [](const GpuProfile& a, const GpuProfile& b) { return a.index < b.index; });
  return out;
}

std::optional<GpuProfile> Profiler::Profile(uint32_t index) const {
  for (GpuProfile& p : Profiles()) {
    if (p.index == index) return std::move(p);
  }
  return std::nullopt;
}

std::vector<Profiler::GpuPhaseChange> Profiler::TakePhaseChanges() {
  MutexLock lock(mu_);
  return std::exchange(pending_, {});
}

size_t Profiler::BytesPerGpu() const { return sizeof(Gpu); }

}  // namespace flyt::profile
