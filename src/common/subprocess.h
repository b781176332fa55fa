// RunCommand: runs a program (no shell) and captures its output, with a deadline.
//
// Used where flyt must talk to a tool rather than a library (nvidia-smi). The child gets
// /dev/null as stdin; stdout and stderr are captured up to a size limit; on timeout the child is
// killed (SIGKILL) and reaped, so no zombie or stray process outlives the call. Thread-safe: each
// call owns its pipes and child.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace flyt {

struct CommandOutput {
  int exit_code = 0;  // the exit status, or 128 + signal when killed by a signal
  std::string stdout_text;
  std::string stderr_text;
};

struct CommandOptions {
  std::chrono::milliseconds timeout{10000};
  size_t max_output_bytes = 16 << 20;  // per stream; more is an error, not a silent cut
};

// argv[0] is looked up on PATH. Fails when the program cannot be started (NOT_FOUND when it is
// not on PATH), runs past the timeout, or prints more than the limit; a non-zero exit is not a
// failure here (the caller decides), it is in exit_code.
Result<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                 const CommandOptions& options = {});

// Looks `program` up on PATH the way execvp would; empty when absent.
std::string FindOnPath(const std::string& program);

}  // namespace flyt
