// Text rendering of GPU snapshots for `flytctl gpus`: a gpustat-like table, one line per GPU and
// one indented line per process. Absent readings print as "-", lost GPUs as "LOST". Pure
// functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "gpu/monitor.h"
#include "gpu/score.h"
#include "sched/estimate.h"
#include "gpu/types.h"

namespace flyt::ctl {

struct RenderOptions {
  bool color = false;    // ANSI colours by load, like nvitop's thresholds
  std::string hostname;  // shown in the header line
  bool show_processes = true;
};

std::string RenderSnapshot(const gpu::GpuSnapshot& snapshot, const RenderOptions& options);
std::string RenderAvailable(const std::vector<gpu::ScoredGpu>& ranked,
                            const RenderOptions& options);
// One line per process on any GPU: GPU, PID, user, memory, SM %, command.
std::string RenderProcesses(const gpu::GpuSnapshot& snapshot, const RenderOptions& options);
// `flytctl estimate`: one line per experiment with its GPU count and memory per GPU.
std::string RenderEstimate(const sched::TaskEstimate& estimate);
// A monitoring session's statistics: per GPU, mean (min-max) of each metric.
std::string RenderSession(const gpu::SessionStats& stats);

// Text from elsewhere (a process title, a remote node's message) with control characters shown
// as "?", so that no escape sequence reaches the reader's terminal.
std::string Printable(std::string_view s);

// The one-line notice printed above every table of simulated GPUs.
std::string SimulatedBanner(const gpu::GpuSnapshot& snapshot);

}  // namespace flyt::ctl
