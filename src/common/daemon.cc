#include "common/daemon.h"

#include <pthread.h>
#include <signal.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace flyt {
namespace {

sigset_t TerminationSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

}  // namespace

void BlockTerminationSignals() {
  const sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void SetUpDaemon(const std::string& log_level) {
  BlockTerminationSignals();  // idempotent
  auto logger = spdlog::stderr_color_mt("flyt");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
}

int WaitForTermination() {
  const sigset_t signals = TerminationSignals();
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("{} received; shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  return sig;
}

}  // namespace flyt
