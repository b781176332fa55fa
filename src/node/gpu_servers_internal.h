// Helpers shared by the two files that implement GpuServers (gpu_servers.cc: the public API;
// gpu_server_process.cc: processes, state files, probing, the watcher); not part of the node's
// interface. Stateless functions; thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace flyt::node::internal {

// Creates `dir` (and its parents, 0755) with mode 0700 when missing; refuses one that is not a
// directory of ours, is group- or world-writable, or cannot be written.
Status OpenStateDir(const std::string& dir);

}  // namespace flyt::node::internal
