// The files flyt-gpu-server reads and writes beside its sockets: the secret file (the lease's
// secret, written by the node manager, mode 0600) and the ready file (what the server is and
// where it listens, written once it listens, read by the node manager), and the JSON of the
// `probe` subcommand. Pure functions over paths; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "remote/types.h"

namespace flyt::gpu_server {

inline constexpr size_t kMinSecretChars = 32;
inline constexpr size_t kMaxSecretChars = 128;

// Reads the secret from `path`: a regular file (symbolic links are not followed) that neither
// group nor others may read or write (mode 0600 or 0400), holding 32–128 printable ASCII
// characters with no spaces; one trailing newline (LF or CRLF) is ignored. Fails with
// kInvalidArgument / kPermissionDenied naming the path and what is wrong, never echoing the file.
[[nodiscard]] Result<std::string> ReadSecretFile(const std::string& path);

// What the ready file says (see ReadyJson).
struct ReadyInfo {
  std::string address;  // "HOST:PORT" or "unix:PATH": the first listen endpoint, as bound
  int64_t pid = 0;
  remote::DeviceIdentity device;  // SM counts, memory, simulated, mps
  std::string backend;            // "sim" or "driver"
  std::optional<uint64_t> memory_limit_mb;
};

// {"address", "pid", "sm_count_total", "sm_count_granted", "memory_total_mb",
//  "memory_limit_mb": N|null, "backend", "simulated", "mps"}
std::string ReadyJson(const ReadyInfo& info);

// {"sm_count_total", "sm_granularity", "sm_granularity_measured", "memory_total_mb", "name",
//  "backend", "simulated", "mps"}
std::string ProbeJson(const remote::DeviceIdentity& device, const std::string& backend);

// Writes `content` to `path` atomically: a temporary file in the same directory, flushed to
// disk, then renamed over `path` (a reader sees the old file, none, or the whole new one).
[[nodiscard]] Status WriteFileAtomically(const std::string& path, const std::string& content,
                                         unsigned mode = 0644);

}  // namespace flyt::gpu_server
