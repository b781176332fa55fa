// flytctl: the command line for flyt. This file only parses flags and wires libraries together.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>

#include "common/clock.h"
#include "ctl/render.h"
#include "gpu/backend.h"
#include "gpu/json.h"
#include "gpu/monitor.h"
#include "gpu/nvml_backend.h"
#include "sim/scenario.h"

namespace {

std::atomic<bool> g_interrupted{false};  // set by SIGINT/SIGTERM during --watch

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// NVML (real or simulated), else nvidia-smi, else none. When FLYT_NVML_LIBRARY names a library
// explicitly, failing to load it is an error, not a reason to fall back silently.
flyt::Result<std::unique_ptr<flyt::gpu::Backend>> OpenLocalBackend() {
  const char* explicit_lib = std::getenv("FLYT_NVML_LIBRARY");
  if (explicit_lib != nullptr && *explicit_lib != '\0') {
    auto nvml = flyt::gpu::OpenNvmlBackend({explicit_lib, "/proc"});
    if (!nvml.ok()) {
      return nvml.status().WithContext(std::string("FLYT_NVML_LIBRARY=") + explicit_lib);
    }
    return std::move(nvml).value();
  }
  return flyt::gpu::OpenBackend({});
}

int RunGpus(bool json, std::optional<double> watch_s, bool available, double min_free_mib,
            double max_util) {
  auto backend = OpenLocalBackend();
  if (!backend.ok()) {
    std::fprintf(stderr, "flytctl: %s\n", backend.status().message().c_str());
    return 1;
  }
  flyt::gpu::Monitor monitor(std::move(backend).value(), flyt::SystemClock::Instance());
  flyt::ctl::RenderOptions render;
  render.hostname = Hostname();
  render.color = !json && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
  std::signal(SIGINT, [](int) { g_interrupted = true; });
  std::signal(SIGTERM, [](int) { g_interrupted = true; });
  while (true) {
    auto snap = monitor.QueryGpus(/*use_cache=*/false);
    if (!snap.ok()) {
      std::fprintf(stderr, "flytctl: %s\n", snap.status().message().c_str());
      return 1;
    }
    std::string out;
    if (available) {
      auto ranked = flyt::gpu::RankAvailableGpus(snap->gpus,
                                                 static_cast<uint64_t>(min_free_mib * 1024 * 1024),
                                                 static_cast<uint32_t>(max_util));
      if (json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& r : ranked) arr.push_back(flyt::gpu::ToJson(r));
        out = flyt::gpu::DumpJson(arr) + "\n";
      } else {
        out = flyt::ctl::SimulatedBanner(*snap) + flyt::ctl::RenderAvailable(ranked, render);
      }
    } else {
      out = json ? flyt::gpu::DumpJson(flyt::gpu::ToJson(*snap), watch_s ? -1 : 2) + "\n"
                 : flyt::ctl::RenderSnapshot(*snap, render);
    }
    if (watch_s && !json && isatty(STDOUT_FILENO)) std::fputs("\033[H\033[2J", stdout);
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    if (!watch_s) return 0;
    auto until = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(static_cast<int64_t>(*watch_s * 1000));
    while (!g_interrupted && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (g_interrupted) return 0;
  }
}

int RunSimCheck(const std::vector<std::string>& files) {
  int failures = 0;
  for (const std::string& file : files) {
    auto s = flyt::sim::LoadScenario(file);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().message().c_str());
      ++failures;
      continue;
    }
    std::printf("%s: ok — \"%s\": %zu GPU(s), %zu process(es), %zu fault(s)\n", file.c_str(),
                s->name.c_str(), s->gpus.size(), s->processes.size(), s->faults.size());
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flytctl — see and hand out the GPUs of a flyt cluster"};
  app.set_version_flag("--version", std::string("flytctl ") + FLYT_VERSION);
  app.require_subcommand(1);

  auto* gpus = app.add_subcommand("gpus", "Show this machine's GPUs and the processes on them");
  bool json = false;
  std::optional<double> watch;
  bool available = false;
  double min_free_mib = 0;
  double max_util = 100;
  gpus->add_flag("--json", json, "Print JSON for scripts");
  gpus->add_option("--watch", watch, "Refresh every SECONDS (default 2) until interrupted")
      ->expected(0, 1)
      ->default_str("2")
      ->check(CLI::Range(0.1, 86400.0));
  gpus->add_flag("--available", available,
                 "List GPUs a job could use, best availability score first");
  gpus->add_option("--min-free-memory", min_free_mib, "With --available: MiB that must be free")
      ->check(CLI::Range(0.0, 1e9));
  gpus->add_option("--max-util", max_util, "With --available: highest utilisation %, 0-100")
      ->check(CLI::Range(0.0, 100.0));

  auto* sim = app.add_subcommand("sim", "Work with simulated GPU scenarios");
  sim->require_subcommand(1);
  auto* check = sim->add_subcommand("check", "Validate scenario files");
  std::vector<std::string> files;
  check->add_option("files", files, "Scenario files")->required()->check(CLI::ExistingFile);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (gpus->parsed()) {
      // `--watch` with no value yields the default.
      if (gpus->count("--watch") > 0 && !watch) watch = 2.0;
      return RunGpus(json, watch, available, min_free_mib, max_util);
    }
    if (check->parsed()) return RunSimCheck(files);
  } catch (const std::exception& e) {
    // flyt reports errors as Status; this is the last line of defence, not a code path.
    std::fprintf(stderr, "flytctl: internal error: %s\n", e.what());
    return 70;
  }
  return 0;
}
