// CudaTracing: the node manager's side of the CUDA tracer (src/trace). It starts the tracer with
// the [trace] options, says once why tracing is off (info in mode auto, a warning when the config
// asked for it), and keeps the tracer told what the GPU monitor sees: the node's GPUs (SetGpus,
// only when the list changes) and NVML's per-GPU process lists (SetNvmlProcesses, every sample).
//
// It owns the TraceService; NodeServer, HeartbeatSender and /metrics read it through stats().
// Feed() is thread-safe; StartFeeding/Stop are not thread-safe with each other.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "gpu/monitor.h"
#include "gpu/types.h"
#include "trace/service.h"

namespace flyt::node {

// What the tracer needs of the node's GPUs (NVML order).
std::vector<trace::GpuIdentity> GpuIdentities(const gpu::GpuSnapshot& snap);
// NVML's process lists: pid → the UUIDs of the GPUs it is on.
std::map<uint32_t, std::set<std::string>> NvmlProcesses(const gpu::GpuSnapshot& snap);
// The line logged once when tracing is off; `warn` when the config asked for tracing.
std::string TracingOffMessage(const trace::TracerHealth& health, trace::TraceMode mode,
                              bool& warn);

class CudaTracing {
 public:
  // Takes a started service (StartTracing's); logs once when it reports tracing off.
  CudaTracing(std::unique_ptr<trace::TraceService> service, trace::TraceMode mode);
  ~CudaTracing();
  CudaTracing(const CudaTracing&) = delete;
  CudaTracing& operator=(const CudaTracing&) = delete;

  // StartTracing(options) wrapped.
  static std::unique_ptr<CudaTracing> Start(const trace::TraceOptions& options);

  const trace::StatsSource& stats() const { return *service_; }
  bool enabled() const { return service_->Health().enabled; }

  // Tells the tracer about one snapshot (SetGpus when the GPU list changed, SetNvmlProcesses).
  void Feed(const gpu::GpuSnapshot& snap) FLYT_EXCLUDES(mu_);
  // A thread that feeds every new snapshot of `monitor` (checked every `interval`).
  void StartFeeding(gpu::Monitor& monitor, std::chrono::milliseconds interval);
  // Stops feeding and the tracer. Idempotent; the destructor calls it.
  void Stop();

 private:
  void FeedLoop(gpu::Monitor& monitor, std::chrono::milliseconds interval) FLYT_EXCLUDES(mu_);

  std::unique_ptr<trace::TraceService> service_;
  Mutex mu_;
  std::vector<std::string> fed_gpus_ FLYT_GUARDED_BY(mu_);  // uuids (+ MIG) last given to SetGpus
  bool gpus_fed_ FLYT_GUARDED_BY(mu_) = false;
  std::chrono::system_clock::time_point fed_at_ FLYT_GUARDED_BY(mu_);
  bool stopping_ FLYT_GUARDED_BY(mu_) = false;
  bool stopped_ = false;
  CondVar cv_;
  std::thread thread_;
};

}  // namespace flyt::node
