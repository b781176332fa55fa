// StartTracing until the tracer and its aggregator land (issue 14, in progress): tracing reports
// itself off with that reason. Replaced by the real wiring when src/trace/tracer.cc and
// aggregator.cc are in.
#include "trace/service.h"

namespace flyt::trace {
namespace {

class OffService : public TraceService {
 public:
  explicit OffService(std::string reason) : reason_(std::move(reason)) {}
  TracerHealth Health() const override {
    TracerHealth h;
    h.enabled = false;
    h.disabled_reason = reason_;
    return h;
  }
  std::vector<ProcessCuda> Processes() const override { return {}; }
  void SetGpus(std::vector<GpuIdentity>) override {}
  void SetNvmlProcesses(std::map<uint32_t, std::set<std::string>>) override {}
  void Stop() override {}

 private:
  std::string reason_;
};

}  // namespace

std::unique_ptr<TraceService> StartTracing(const TraceOptions& options) {
  if (options.mode == TraceMode::kOff) {
    return std::make_unique<OffService>("turned off in the config ([trace] enabled = false)");
  }
  return std::make_unique<OffService>("this build has no CUDA tracer yet");
}

}  // namespace flyt::trace
