// Helpers shared by the files that implement GpuServers (gpu_servers.cc: the public API;
// gpu_server_process.cc: processes, state files, probing, the watcher; gpu_server_moves.cc and
// gpu_server_resize.cc: the operator's actions); not part of the node's
// interface. Stateless functions; thread-safe.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "common/status.h"

namespace flyt::node::internal {

// Creates `dir` (and its parents, 0755) with mode 0700 when missing; refuses one that is not a
// directory of ours, is group- or world-writable, or cannot be written.
Status OpenStateDir(const std::string& dir);

// pidfd_open(2): a descriptor that stays this process even once its pid is reused; -1 on error.
inline int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// A request refused because of a server's state: HTTP 409 "conflict".
inline Status Conflict(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message)).WithReason("conflict");
}

}  // namespace flyt::node::internal
