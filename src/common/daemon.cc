#include "common/daemon.h"

#include <pthread.h>
#include <signal.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace flyt {
namespace {

sigset_t TerminationSignals(bool restart_signal) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  if (restart_signal) sigaddset(&signals, kRestartSignal);
  return signals;
}

}  // namespace

void BlockTerminationSignals(bool restart_signal) {
  const sigset_t signals = TerminationSignals(restart_signal);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void SetUpDaemon(const std::string& log_level, bool restart_signal) {
  BlockTerminationSignals(restart_signal);  // idempotent
  auto logger = spdlog::stderr_color_mt("flyt");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
}

int WaitForTermination(bool restart_signal) {
  const sigset_t signals = TerminationSignals(restart_signal);
  int sig = 0;
  sigwait(&signals, &sig);
  const char* name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGUSR2";
  spdlog::info("{} received; shutting down", name);
  return sig;
}

}  // namespace flyt
