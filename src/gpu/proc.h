// ProcReader: fills a ProcessInfo's name, command, user and container id from /proc.
//
// NVML and nvidia-smi report host PIDs; the rest of what a person wants to see about a process
// lives in /proc/<pid>. The root is configurable so that tests use a fixture tree. A process that
// is gone, or hidden from this PID namespace, leaves the fields absent.
//
// Reading four files per process costs ~28 µs; at 200 processes that is 5.6 ms per sample, so
// what was read is reused while the PID stays on a GPU: a backend calls BeginSample() before
// each sample, and an entry is reused only if its PID was also filled in the previous sample
// (and was read less than `ttl`, 30 s, ago, so a retitled process shows its new command). For
// another process to take over a PID between two consecutive samples, the first must exit, the
// kernel must cycle through every other free PID, and the newcomer must open a GPU context, all
// within one sampling interval. A PID missing from one sample is read afresh when it returns.
// Entries not filled in the previous sample are evicted, so the cache holds only current PIDs.
// Thread-safe: the caches are guarded by a mutex.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/mutex.h"
#include "gpu/types.h"

namespace flyt::gpu {

class ProcReader {
 public:
  explicit ProcReader(std::string root = "/proc",
                      std::chrono::seconds ttl = std::chrono::seconds(30),
                      const Clock& clock = SystemClock::Instance())
      : root_(std::move(root)), ttl_(ttl), clock_(clock) {}

  // Starts a new sample: entries not filled since the previous BeginSample() are dropped.
  void BeginSample() const;
  void Fill(ProcessInfo& process) const;

  // The container id (64 hex digits, docker / containerd / cri-o / podman cgroup paths) in the
  // text of a /proc/<pid>/cgroup file, or nullopt.
  static std::optional<std::string> ContainerIdFromCgroup(std::string_view cgroup_text);

 private:
  struct Entry {
    std::optional<std::string> name, command, user, container_id;
    std::chrono::steady_clock::time_point read_at;
    uint64_t sample = 0;  // the sample that last filled it
  };
  std::optional<std::string> UserName(uint32_t uid) const;
  // Reads /proc/<pid>; nullopt when the process is not visible.
  std::optional<Entry> Read(uint32_t pid) const;

  std::string root_;
  std::chrono::seconds ttl_;
  const Clock& clock_;
  mutable Mutex mu_;
  mutable std::unordered_map<uint32_t, std::string> users_ FLYT_GUARDED_BY(mu_);
  mutable std::unordered_map<uint32_t, Entry> processes_ FLYT_GUARDED_BY(mu_);
  mutable uint64_t sample_ FLYT_GUARDED_BY(mu_) = 0;
};

}  // namespace flyt::gpu
