// One ring-buffer record (bpf/events.h) as a JSON object, for `flyt-trace --raw` and for tests:
// {"kind": "alloc", "func": "cudaMalloc", "library": "nvidia_runtime", "pid": .., "tid": ..,
//  "rc": .., "ts_ns": .., "entry_ns": .., "cgroup_id": .., "flags": .., and the kind's payload
// fields under their events.h names; an ENVIRON record gives its size and only the variables the
// tracer reads, never the rest of a program's environment}. A record shorter than its kind's struct gives
// {"kind": ..., "malformed": true}. Also RawJsonSink, a RecordSink writing one such object per
// line (JSON Lines). Pure functions; a RawJsonSink is used from the tracer's drain thread only.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

#include "common/mutex.h"
#include "trace/sink.h"

namespace flyt::trace {

nlohmann::json RecordToJson(const void* data, size_t bytes);

// The environment bytes an ENVIRON record holds, inside `data`; nullopt when the record is
// malformed (shorter than its fixed part, or its count beyond what the record holds).
std::optional<std::string_view> EnvironText(const void* data, size_t bytes);

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

// Forwards everything to another sink and remembers which processes' EXIT records went through,
// so a caller can wait until a child's last record was handled. Thread-safe.
class ExitWatchingSink : public RecordSink {
 public:
  explicit ExitWatchingSink(RecordSink* next) : next_(next) {}
  void OnRecord(const void* data, size_t bytes) override;
  void OnAttachedLate(uint32_t pid, const std::string& library) override {
    next_->OnAttachedLate(pid, library);
  }
  void OnDrainEnd() override { next_->OnDrainEnd(); }
  // Waits up to `timeout_ms` for the EXIT record of `pid`; false when it did not come.
  bool WaitForExit(uint32_t pid, int timeout_ms) FLYT_EXCLUDES(mu_);

 private:
  RecordSink* next_;
  Mutex mu_;
  CondVar cv_;
  std::set<uint32_t> exited_ FLYT_GUARDED_BY(mu_);
};

}  // namespace flyt::trace
