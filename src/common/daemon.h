// The start-up and shutdown every flyt daemon shares: logs to stderr in one format (systemd's
// journal and container runtimes both collect it), and SIGINT/SIGTERM taken by the main thread
// with sigwait while every other thread has them blocked. Call BlockTerminationSignals first in main
// and SetUpDaemon before starting any thread; WaitForTermination from the main thread only.
//
// A daemon that supervises processes meant to outlive a restart (flyt-node-manager: its GPU
// servers) also takes kRestartSignal (SIGUSR2): "exit, but leave them running for the next start",
// where SIGINT/SIGTERM stop them too. It passes `restart_signal = true` to all three functions.
#pragma once

#include <signal.h>

#include <string>

namespace flyt {

inline constexpr int kRestartSignal = SIGUSR2;

// Blocks SIGINT/SIGTERM (and kRestartSignal with `restart_signal`; threads started afterwards
// inherit the mask) and ignores SIGPIPE. Call it first thing in main: a SIGTERM that arrives while
// flags and config are read is then held for WaitForTermination instead of killing the process
// half-started.
void BlockTerminationSignals(bool restart_signal = false);

// Installs the "flyt" stderr logger at `log_level`, and blocks the signals if not done yet.
void SetUpDaemon(const std::string& log_level, bool restart_signal = false);

// Blocks until SIGINT or SIGTERM (or kRestartSignal with `restart_signal`) arrives; logs which one
// and returns it.
int WaitForTermination(bool restart_signal = false);

}  // namespace flyt
