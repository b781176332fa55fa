// The CUDA tracer: loads the BPF program (bpf/cuda_trace.bpf.c, embedded as a bpftool skeleton),
// attaches the control tracepoints, probes the CUDA libraries it finds (discovery.h, attacher.h)
// and runs one drain thread that hands every ring-buffer record to a RecordSink, in ring order,
// then calls OnDrainEnd. The drain runs every TraceOptions.drain_interval_ms, and sooner when the
// BPF side passes the ring's high-water mark; data records never wake it one by one.
//
// Start fails, with a Status that says why, where tracing cannot run: no CAP_BPF+CAP_PERFMON (or
// CAP_SYS_ADMIN), no kernel BTF (/sys/kernel/btf/vmlinux), a kernel older than 5.15 (no attach
// cookies on uprobes), or a BPF load failure (libbpf's message). libbpf's own printing goes to
// spdlog at debug level, never straight to stderr.
//
// The Tracer owns the BPF object, the probes, the ring buffer and the drain thread; the sink is
// the caller's and must outlive the Tracer (every sink call comes from the drain thread, or from
// Start before it returns). Health() and Stop() are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "trace/service.h"
#include "trace/sink.h"
#include "trace/stats.h"

struct cuda_trace;
struct ring_buffer;

namespace flyt::trace {

class Attacher;
class Discovery;

class Tracer {
 public:
  // OK where this process and kernel can run the tracer; otherwise why not (the reason is one of
  // "permission_denied", "no_btf", "kernel_too_old").
  static Status CheckSupport();

  static Result<std::unique_ptr<Tracer>> Start(const TraceOptions& options, RecordSink* sink);

  // enabled, events_received, events_lost, attach_failures, libraries_probed, libraries,
  // unprobeable; the aggregator fills the process counts and the dropped figures. After Stop it
  // still reports what was probed and the final event counts (enabled = false).
  TracerHealth Health() const FLYT_EXCLUDES(mu_);

  // Detaches, drains what is left into the sink, stops the thread. Idempotent.
  void Stop() FLYT_EXCLUDES(mu_);
  ~Tracer();

  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

 private:
  Tracer(const TraceOptions& options, RecordSink* sink);
  Status Load();
  void DrainLoop();
  static int OnRingRecord(void* ctx, void* data, size_t bytes);
  uint64_t LostEvents() const;
  // The attacher's and discovery's part of the health (or, once stopped, what they last had).
  void FillProbeHealth(TracerHealth* h) const FLYT_REQUIRES(mu_);

  TraceOptions options_;
  RecordSink* sink_;
  cuda_trace* skel_ = nullptr;
  ring_buffer* ring_ = nullptr;
  int stop_fd_ = -1;  // an eventfd in the ring buffer's epoll set: wakes the drain to stop
  std::thread drain_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> events_received_{0};
  bool open_watch_failed_ = false;  // set in Load, read-only afterwards

  mutable Mutex mu_;
  std::unique_ptr<Attacher> attacher_ FLYT_PT_GUARDED_BY(mu_);
  std::unique_ptr<Discovery> discovery_ FLYT_PT_GUARDED_BY(mu_);
  bool stopped_ FLYT_GUARDED_BY(mu_) = false;
  // FillProbeHealth's figures, kept by Stop before the attacher and discovery go.
  TracerHealth final_probe_health_ FLYT_GUARDED_BY(mu_);
};

}  // namespace flyt::trace
