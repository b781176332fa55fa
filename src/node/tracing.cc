#include "node/tracing.h"

#include <spdlog/spdlog.h>

namespace flyt::node {

std::vector<trace::GpuIdentity> GpuIdentities(const gpu::GpuSnapshot& snap) {
  std::vector<trace::GpuIdentity> out;
  out.reserve(snap.gpus.size());
  for (const gpu::GpuInfo& g : snap.gpus) {
    trace::GpuIdentity id;
    id.index = g.index;
    id.uuid = g.uuid;
    id.pci_bus_id = g.pci_bus_id;
    id.name = g.name;
    id.cores = g.cores;  // NVML's core count: the tracer's core usage is unknown without it
    // GpuInfo carries no SM count, nor MIG instance UUIDs: MIG processes map to their parent GPU.
    out.push_back(std::move(id));
  }
  return out;
}

std::map<uint32_t, std::set<std::string>> NvmlProcesses(const gpu::GpuSnapshot& snap) {
  std::map<uint32_t, std::set<std::string>> out;
  for (const gpu::GpuInfo& g : snap.gpus) {
    for (const gpu::ProcessInfo& p : g.processes) out[p.pid].insert(g.uuid);
  }
  return out;
}

std::string TracingOffMessage(const trace::TracerHealth& health, trace::TraceMode mode,
                              bool& warn) {
  warn = mode == trace::TraceMode::kOn;
  const std::string why = health.disabled_reason.empty() ? "no reason given" : health.disabled_reason;
  if (mode == trace::TraceMode::kOff) return "CUDA tracing is off: " + why;
  return std::string("CUDA tracing is off") +
         (warn ? " although [trace] enabled = true" : "") + ": " + why +
         "; everything else works (GPU metrics, API, heartbeats)";
}

CudaTracing::CudaTracing(std::unique_ptr<trace::TraceService> service, trace::TraceMode mode)
    : service_(std::move(service)) {
  const trace::TracerHealth h = service_->Health();
  if (h.enabled) {
    spdlog::info("CUDA tracing on: {} librar{} probed", h.libraries_probed,
                 h.libraries_probed == 1 ? "y" : "ies");
    return;
  }
  bool warn = false;
  const std::string line = TracingOffMessage(h, mode, warn);
  if (warn) {
    spdlog::warn("{}", line);
  } else {
    spdlog::info("{}", line);
  }
}

CudaTracing::~CudaTracing() { Stop(); }

std::unique_ptr<CudaTracing> CudaTracing::Start(const trace::TraceOptions& options) {
  return std::make_unique<CudaTracing>(trace::StartTracing(options), options.mode);
}

void CudaTracing::Feed(const gpu::GpuSnapshot& snap) {
  std::vector<std::string> uuids;
  for (const gpu::GpuInfo& g : snap.gpus) uuids.push_back(g.uuid + "|" + g.pci_bus_id);
  bool gpus_changed = false;
  {
    MutexLock lock(mu_);
    gpus_changed = !gpus_fed_ || uuids != fed_gpus_;
    gpus_fed_ = true;
    fed_gpus_ = uuids;
    fed_at_ = snap.taken_at;
  }
  if (gpus_changed) service_->SetGpus(GpuIdentities(snap));
  service_->SetNvmlProcesses(NvmlProcesses(snap));
}

void CudaTracing::StartFeeding(gpu::Monitor& monitor, std::chrono::milliseconds interval) {
  thread_ = std::thread([this, &monitor, interval] { FeedLoop(monitor, interval); });
}

void CudaTracing::FeedLoop(gpu::Monitor& monitor, std::chrono::milliseconds interval) {
  MutexLock lock(mu_);
  while (!stopping_) {
    const auto fed = fed_at_;
    const bool any = gpus_fed_;
    lock.Unlock();
    auto snap = monitor.LastSnapshot();
    if (snap && (!any || snap->taken_at != fed)) Feed(*snap);
    lock.Lock();
    const auto deadline = std::chrono::steady_clock::now() + interval;
    while (!stopping_ && cv_.WaitUntil(mu_, deadline)) {
    }
  }
}

void CudaTracing::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
  if (!stopped_) {
    stopped_ = true;
    service_->Stop();
  }
}

}  // namespace flyt::node
