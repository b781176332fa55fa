// Size-capped rotation of a log file that other processes keep writing to (the GPU servers'
// `state_dir/<lease>.log`, docs/design.md "Remote GPUs on the node").
//
// The writers hold their own descriptor and never reopen the file (a GPU server, its client
// processes, the CUDA driver writing to stderr), and they outlive the node manager, so the file
// is rotated in place ("copy and truncate"): the newest `max_bytes` of it are copied into
// `<path>.1` (the older ones move to `.2` ... `.files`, the oldest dropped), then the file is
// truncated to zero. Writers that opened it with O_APPEND (the node manager opens it so for
// them) write at the new end, so the file does not become sparse. Lines written between the copy
// and the truncation are lost; the window is one copy of at most `max_bytes`.
//
// Bounds: each kept file holds at most max_bytes; the live one holds what came since the last
// rotation (the caller checks every second). Pure functions over paths; thread-safe for
// different paths.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace flyt::node {

// Rotates `path` when it holds more than `max_bytes`; `files` old files are kept (0: the file is
// only truncated). Returns whether it rotated; Ok(false) when the file is missing or small.
// Never follows a symbolic link.
Result<bool> RotateLog(const std::string& path, uint64_t max_bytes, int files);

}  // namespace flyt::node
