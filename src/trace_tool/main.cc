// flyt-trace: runs the CUDA tracer (src/trace) on its own. With a COMMAND it traces that command
// (started once the probes are attached) and stops after its exit was drained; without, it runs
// for --duration seconds (0: attach, then stop at once — a check that tracing works here) or until
// SIGINT/SIGTERM. This file parses flags and wires the tracer to a sink: by default the aggregator,
// whose per-process statistics and the tracer's health are written at the end as one JSON object
// {"health": ..., "processes": [...]} (the node manager's shapes, trace/json.h); --raw writes every
// record as one JSON line as it is drained.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include "trace/aggregator.h"
#include "trace/json.h"
#include "trace/raw_record.h"
#include "trace/tracer.h"

int main(int argc, char** argv) {
  CLI::App app{"flyt-trace — traces the CUDA calls of programs on this machine (eBPF)"};
  app.set_version_flag("--version", std::string("flyt-trace ") + FLYT_VERSION);
  flyt::trace::TraceOptions options;
  std::vector<std::string> library_dirs;
  std::optional<double> duration_s;
  bool raw = false;
  std::string json_path, ready_file, log_level = "warn";
  std::vector<std::string> command;
  app.add_option("--ring-buffer-bytes", options.ring_buffer_bytes,
                 "ring buffer size in bytes (a power of two)");
  app.add_option("--drain-interval-ms", options.drain_interval_ms, "drain timer in ms");
  app.add_option("--library-dir", library_dirs,
                 "folder whose libcudart*/libcuda.so.1 are probed at start (repeatable; default: "
                 "the usual CUDA and system folders)");
  app.add_option("--duration", duration_s,
                 "seconds to trace without a COMMAND (0: attach and stop at once; default: until "
                 "SIGINT/SIGTERM)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--launch-results", options.launch_results,
               "give kernel launches a return probe too: a failed launch is counted as a failure "
               "by error code, not as a launch (costs a second trap per launch)");
  app.add_flag("--raw", raw, "one JSON object per record (JSON Lines)");
  app.add_option("--json", json_path, "write the output here (default: stdout)");
  app.add_option("--ready-file", ready_file, "created once the probes are attached");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.add_option("command", command, "the command to trace (after --)");
  CLI11_PARSE(app, argc, argv);
  // Logs go to stderr: stdout carries the JSON (or the --raw lines) when no --json file is given.
  spdlog::set_default_logger(spdlog::stderr_color_mt("flyt-trace"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (!library_dirs.empty()) options.library_dirs = library_dirs;
  std::FILE* out = stdout;
  if (!json_path.empty()) {
    out = std::fopen(json_path.c_str(), "w");
    if (out == nullptr) {
      std::perror(("flyt-trace: " + json_path).c_str());
      return 2;
    }
  }
  flyt::trace::RawJsonSink raw_sink(out);
  flyt::trace::Aggregator aggregator(options);
  flyt::trace::ExitWatchingSink sink(raw ? static_cast<flyt::trace::RecordSink*>(&raw_sink)
                                         : static_cast<flyt::trace::RecordSink*>(&aggregator));

  // Signals are waited for with sigwait, so the tracer's thread never runs a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  if (command.empty()) pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto tracer = flyt::trace::Tracer::Start(options, &sink);
  if (!tracer.ok()) {
    std::fprintf(stderr, "flyt-trace: %s\n", tracer.status().message().c_str());
    return 3;
  }
  if (!ready_file.empty()) std::ofstream(ready_file) << "ready\n";

  int rc = 0;
  if (!command.empty()) {
    pid_t child = ::fork();
    if (child == 0) {
      std::vector<char*> args;
      for (std::string& a : command) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::perror(("flyt-trace: " + command[0]).c_str());
      ::_exit(127);
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    // A command that made no CUDA call has no EXIT record: wait a few drains at most.
    int wait_ms = static_cast<int>(options.drain_interval_ms) * 3 + 2000;
    (void)sink.WaitForExit(static_cast<uint32_t>(child), wait_ms);
  } else if (duration_s.has_value()) {
    if (*duration_s > 0) {
      timespec timeout{static_cast<time_t>(*duration_s),
                       static_cast<long>((*duration_s - static_cast<time_t>(*duration_s)) * 1e9)};
      (void)sigtimedwait(&signals, nullptr, &timeout);
    }
  } else {
    int sig = 0;
    sigwait(&signals, &sig);
  }
  (*tracer)->Stop();
  flyt::trace::TracerHealth health = (*tracer)->Health();
  if (health.events_lost > 0) {
    std::fprintf(stderr, "flyt-trace: %llu events lost (ring buffer full)\n",
                 static_cast<unsigned long long>(health.events_lost));
  }
  if (!raw) {
    aggregator.FillHealth(&health);
    nlohmann::json processes = nlohmann::json::array();
    for (const flyt::trace::ProcessCuda& p : aggregator.Processes()) {
      processes.push_back(flyt::trace::ToJson(p));
    }
    const nlohmann::json report = {{"health", flyt::trace::ToJson(health)},
                                   {"processes", std::move(processes)}};
    std::fprintf(out, "%s\n", report.dump(2).c_str());
  }
  if (out != stdout) std::fclose(out);
  return rc;
}
