// StartTracing: the aggregator (aggregator.h) fed by the tracer (tracer.h), behind TraceService.
// Where the tracer cannot start, or the config turns it off, the service reports itself off with
// the reason and lists nothing.
#include "trace/service.h"

#include <utility>

#include "trace/aggregator.h"
#include "trace/tracer.h"

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

// The aggregator is declared before the tracer: the tracer (whose drain thread calls the
// aggregator) is stopped and destroyed first.
class LiveService : public TraceService {
 public:
  explicit LiveService(const TraceOptions& options) : aggregator_(options) {}
  Status Start(const TraceOptions& options) {
    FLYT_ASSIGN_OR_RETURN(tracer_, Tracer::Start(options, &aggregator_));
    return Status::Ok();
  }
  ~LiveService() override { Stop(); }

  TracerHealth Health() const override {
    TracerHealth h = tracer_->Health();
    aggregator_.FillHealth(&h);
    return h;
  }
  std::vector<ProcessCuda> Processes() const override { return aggregator_.Processes(); }
  void SetGpus(std::vector<GpuIdentity> gpus) override { aggregator_.SetGpus(std::move(gpus)); }
  void SetNvmlProcesses(std::map<uint32_t, std::set<std::string>> processes) override {
    aggregator_.SetNvmlProcesses(std::move(processes));
  }
  void Stop() override {
    if (tracer_ != nullptr) tracer_->Stop();
  }

 private:
  Aggregator aggregator_;
  std::unique_ptr<Tracer> tracer_;
};

}  // namespace

std::unique_ptr<TraceService> StartTracing(const TraceOptions& options) {
  if (options.mode == TraceMode::kOff) {
    return std::make_unique<OffService>("turned off in the config ([trace] enabled = false)");
  }
  auto live = std::make_unique<LiveService>(options);
  if (Status started = live->Start(options); !started.ok()) {
    return std::make_unique<OffService>(started.message());
  }
  return live;
}

}  // namespace flyt::trace
