// The start-up and shutdown every flyt daemon shares: logs to stderr in one format (systemd's
// journal and container runtimes both collect it), and SIGINT/SIGTERM taken by the main thread
// with sigwait while every other thread has them blocked. Call BlockTerminationSignals first in main
// and SetUpDaemon before starting any thread; WaitForTermination from the main thread only.
#pragma once

#include <string>

namespace flyt {

// Blocks SIGINT/SIGTERM (threads started afterwards inherit the mask) and ignores SIGPIPE. Call it
// first thing in main: a SIGTERM that arrives while flags and config are read is then held for
// WaitForTermination instead of killing the process half-started.
void BlockTerminationSignals();

// Installs the "flyt" stderr logger at `log_level`, and blocks the signals if not done yet.
void SetUpDaemon(const std::string& log_level);

// Blocks until SIGINT or SIGTERM arrives; logs which one and returns it.
int WaitForTermination();

}  // namespace flyt
