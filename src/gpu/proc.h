// ProcReader: fills a ProcessInfo's name, command, user and container id from /proc.
//
// NVML and nvidia-smi report host PIDs; the rest of what a person wants to see about a process
// lives in /proc/<pid>. The root is configurable so that tests use a fixture tree. A process that
// is gone, or hidden from this PID namespace, leaves the fields absent. Stateless apart from a
// uid → user name cache guarded by a mutex: safe to share between threads.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "gpu/types.h"

namespace flyt::gpu {

class ProcReader {
 public:
  explicit ProcReader(std::string root = "/proc") : root_(std::move(root)) {}

  void Fill(ProcessInfo& process) const;

  // The container id (64 hex digits, docker / containerd / cri-o / podman cgroup paths) in the
  // text of a /proc/<pid>/cgroup file, or nullopt.
  static std::optional<std::string> ContainerIdFromCgroup(std::string_view cgroup_text);

 private:
  std::optional<std::string> UserName(uint32_t uid) const;

  std::string root_;
  mutable std::mutex mu_;
  mutable std::unordered_map<uint32_t, std::string> users_;  // guarded by mu_
};

}  // namespace flyt::gpu
