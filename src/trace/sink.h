// The seam between the tracer (which owns the BPF objects, the probes and the ring buffer) and
// what makes sense of its records (the aggregator): the tracer's drain thread hands every record
// to one RecordSink, in ring order. A sink is called from that one thread only; it must not block
// (it runs while the ring buffer fills).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "trace/bpf/events.h"

namespace flyt::trace {

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // One ring-buffer record: `bytes` >= sizeof(flyt_trace_header); header.kind says which struct of
  // bpf/events.h it is. A record shorter than its kind's struct is a bug on the BPF side: the sink
  // counts it as malformed and drops it.
  virtual void OnRecord(const void* data, size_t bytes) = 0;
  // The tracer probed `library` (a path) after process `pid` had mapped it (found by the /proc
  // scan at start-up or by an open event): calls made before the probe are missing for that
  // process, so its memory and leak figures are lower bounds.
  virtual void OnAttachedLate(uint32_t pid, const std::string& library) = 0;
  // End of one drain pass (every drain interval, and when the ring passed its high-water mark).
  virtual void OnDrainEnd() = 0;
};

}  // namespace flyt::trace
