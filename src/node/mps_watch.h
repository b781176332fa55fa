// MpsWatch: whether the node's MPS control daemon answers, followed over time (docs/design.md
// "Remote GPUs on the node"). The GPUs of [gpu-servers] shared take several leases only while the
// daemon runs, and it can die at any time after the node manager's start.
//
// Each Check asks an MpsProbe whether the daemon answers. The default probe, ProbeMpsControl,
// takes the daemon's pid file in the pipe directory naming a live nvidia-cuda-mps-control as a
// yes; otherwise it connects to the daemon's control socket (CUDA 13) or opens its control pipe
// for writing (older MPS) — what nvidia-cuda-mps-control itself does — and sends nothing: a
// daemon killed with SIGKILL leaves its socket file (and pid file) behind, so the files alone say
// nothing. Tests give a probe (or a pipe folder) of their own.
//
// The state: "running"; "not_running" (it has not answered since the start); "down" (it
// answered before and no longer does: the reason says since when and what the probe saw). With a
// start function ([gpu-servers] mps_start = true) a daemon that does not answer is started, then
// probed again; a start that does not bring it back is retried at most once per backoff, which
// doubles from `restart_backoff` up to `max_restart_backoff` and is reset when it answers.
//
// Time comes from the injected Clock. Not thread-safe: one owner calls Check (GpuServers'
// housekeeping thread, under its own lock).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace flyt::node {

// What one probe saw. `detail`: when it does not answer, why, naming the pipe or socket
// ("no pipe or socket /tmp/nvidia-mps/control", "/tmp/nvidia-mps/control refuses connections").
struct MpsReading {
  bool answers = false;
  std::string detail;
};
using MpsProbe = std::function<MpsReading()>;

// The default probe of the control daemon whose endpoint is `pipe_dir`/control (a Unix socket or
// a named pipe), with its pid file `pipe_dir`/nvidia-cuda-mps-control.pid. Never blocks: a
// non-blocking connect / open.
MpsReading ProbeMpsControl(const std::string& pipe_dir);

struct MpsStatus {
  std::string state = "not_running";  // running | not_running | down
  std::string reason;                 // empty while running
  // When the state last changed (the watch's clock); for "down", since when it does not answer.
  std::chrono::system_clock::time_point since;
  bool changed = false;  // this Check changed the state
};

class MpsWatch {
 public:
  struct Options {
    std::chrono::milliseconds restart_backoff{5000};
    std::chrono::milliseconds max_restart_backoff{300000};
  };
  // `start`: starts the daemon (nvidia-cuda-mps-control -d); empty: never start it.
  MpsWatch(MpsProbe probe, std::function<Status()> start, Clock& clock, Options options);
  MpsWatch(MpsProbe probe, std::function<Status()> start, Clock& clock)
      : MpsWatch(std::move(probe), std::move(start), clock, Options()) {}

  // Probes now (starting the daemon first when it does not answer and a start is due) and
  // returns the state; `changed` on the first Check too.
  MpsStatus Check();
  const MpsStatus& status() const { return status_; }
  uint64_t starts() const { return starts_; }  // start attempts so far

 private:
  MpsProbe probe_;
  std::function<Status()> start_;
  Clock& clock_;
  Options options_;
  MpsStatus status_;
  bool checked_ = false;
  std::chrono::steady_clock::time_point next_start_{};  // the earliest next start attempt
  std::chrono::milliseconds backoff_;
  std::string last_start_error_;  // of the last start that did not bring it back
  uint64_t starts_ = 0;
};

}  // namespace flyt::node
