// One ring-buffer record (bpf/events.h) as a JSON object, for `flyt-trace --raw` and for tests:
// {"kind": "alloc", "func": "cudaMalloc", "library": "nvidia_runtime", "pid": .., "tid": ..,
//  "rc": .., "ts_ns": .., "entry_ns": .., "cgroup_id": .., "flags": .., and the kind's payload
// fields under their events.h names}. A record shorter than its kind's struct gives
// {"kind": ..., "malformed": true}. Also RawJsonSink, a RecordSink writing one such object per
// line (JSON Lines). Pure functions; a RawJsonSink is used from the tracer's drain thread only.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>

#include "trace/sink.h"

namespace flyt::trace {

nlohmann::json RecordToJson(const void* data, size_t bytes);

class RawJsonSink : public RecordSink {
 public:
  // Writes to `out` (not owned), flushed at the end of every drain.
  explicit RawJsonSink(std::FILE* out) : out_(out) {}
  void OnRecord(const void* data, size_t bytes) override;
  void OnAttachedLate(uint32_t pid, const std::string& library) override;
  void OnDrainEnd() override;

 private:
  std::FILE* out_;
};

}  // namespace flyt::trace
