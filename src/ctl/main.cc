// flytctl: the command line for flyt. This file only parses flags and wires libraries together.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>

#include "common/clock.h"
#include "common/strings.h"
#include "ctl/remote.h"
#include "ctl/render.h"
#include "gpu/backend.h"
#include "gpu/json.h"
#include "gpu/monitor.h"
#include "gpu/nvml_backend.h"
#include "sched/estimate.h"
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

// Where `flytctl gpus` and `flytctl processes` read from: this machine, or a node manager.
class Source {
 public:
  static flyt::Result<Source> Open(const std::string& node, const std::string& token) {
    Source s;
    if (!node.empty()) {
      FLYT_ASSIGN_OR_RETURN(s.client_, flyt::ctl::NodeClient::Connect(node, token));
      return s;
    }
    FLYT_ASSIGN_OR_RETURN(auto backend, OpenLocalBackend());
    s.monitor_ = std::make_unique<flyt::gpu::Monitor>(std::move(backend),
                                                      flyt::SystemClock::Instance());
    return s;
  }
  // A fresh snapshot, and (for a node) the JSON exactly as the node sent it.
  flyt::Result<flyt::gpu::GpuSnapshot> Read(nlohmann::json* raw) {
    if (monitor_) {
      FLYT_ASSIGN_OR_RETURN(auto snap, monitor_->QueryGpus(/*use_cache=*/false));
      if (raw != nullptr) *raw = flyt::gpu::ToJson(snap);
      return snap;
    }
    FLYT_ASSIGN_OR_RETURN(nlohmann::json j, client_->Get("/api/v1/gpus"));
    if (raw != nullptr) *raw = j;
    auto snap = flyt::gpu::SnapshotFromJson(j);
    if (!snap.ok()) return snap.status().WithContext("unexpected answer from the node");
    return snap;
  }

 private:
  std::unique_ptr<flyt::gpu::Monitor> monitor_;
  std::unique_ptr<flyt::ctl::NodeClient> client_;
};

struct GpusArgs {
  bool json = false;
  std::optional<double> watch_s;
  bool available = false;
  double min_free_mib = 0;
  double max_util = 100;
  bool processes_only = false;
  std::string node;
  std::string token;
};

int RunGpus(const GpusArgs& a) {
  auto source = Source::Open(a.node, a.token);
  if (!source.ok()) {
    std::fprintf(stderr, "flytctl: %s\n", source.status().message().c_str());
    return 1;
  }
  flyt::ctl::RenderOptions render;
  render.hostname = a.node.empty() ? Hostname() : a.node;
  render.color = !a.json && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
  if (a.watch_s) {
    // Only while watching: otherwise Ctrl-C must end a stuck request at once.
    std::signal(SIGINT, [](int) { g_interrupted = true; });
    std::signal(SIGTERM, [](int) { g_interrupted = true; });
  }
  while (true) {
    nlohmann::json raw;
    auto snap = source->Read(&raw);
    if (!snap.ok()) {
      std::fprintf(stderr, "flytctl: %s\n", snap.status().message().c_str());
      return 1;
    }
    std::string out;
    if (a.available) {
      auto ranked = flyt::gpu::RankAvailableGpus(
          snap->gpus, static_cast<uint64_t>(a.min_free_mib * 1024 * 1024),
          static_cast<uint32_t>(a.max_util));
      if (a.json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& r : ranked) arr.push_back(flyt::gpu::ToJson(r));
        out = flyt::gpu::DumpJson(arr) + "\n";
      } else {
        out = flyt::ctl::SimulatedBanner(*snap) + flyt::ctl::RenderAvailable(ranked, render);
      }
    } else if (a.processes_only) {
      if (a.json) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& g : snap->gpus) {
          for (const auto& p : g.processes) {
            nlohmann::json j = flyt::gpu::ToJson(p);
            j["gpu"] = g.index;
            j["gpu_uuid"] = g.uuid;
            list.push_back(std::move(j));
          }
        }
        out = flyt::gpu::DumpJson({{"processes", list}}, a.watch_s ? -1 : 2) + "\n";
      } else {
        out = flyt::ctl::RenderProcesses(*snap, render);
      }
    } else {
      out = a.json ? flyt::gpu::DumpJson(raw, a.watch_s ? -1 : 2) + "\n"
                   : flyt::ctl::RenderSnapshot(*snap, render);
    }
    if (a.watch_s && !a.json && isatty(STDOUT_FILENO)) std::fputs("\033[H\033[2J", stdout);
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    if (!a.watch_s) return 0;
    auto until = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(static_cast<int64_t>(*a.watch_s * 1000));
    while (!g_interrupted && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (g_interrupted) return 0;
  }
}

int RunMonitor(const std::string& action, const std::string& node, const std::string& token,
               const std::string& id, const std::vector<uint32_t>& gpus,
               std::optional<double> interval_s, bool json) {
  auto client = flyt::ctl::NodeClient::Connect(node, token);
  if (!client.ok()) {
    std::fprintf(stderr, "flytctl: %s\n", client.status().message().c_str());
    return 1;
  }
  flyt::Result<nlohmann::json> answer = flyt::Internal("no action");
  if (action == "start") {
    nlohmann::json body = nlohmann::json::object();
    if (!gpus.empty()) body["gpus"] = gpus;
    if (interval_s) body["interval_seconds"] = *interval_s;
    answer = (*client)->Post("/api/v1/monitoring/sessions", body);
    if (answer.ok() && !json) {
      if (!answer->is_object() || !(*answer)["id"].is_string()) {
        std::fprintf(stderr, "flytctl: unexpected answer from the node (no session id)\n");
        return 1;
      }
      std::printf("%s\n", flyt::ctl::Printable((*answer)["id"].get<std::string>()).c_str());
      return 0;
    }
  } else if (action == "list") {
    answer = (*client)->Get("/api/v1/monitoring/sessions");
    if (answer.ok() && !json) {
      if (!answer->is_object() || !(*answer)["sessions"].is_array()) {
        std::fprintf(stderr, "flytctl: unexpected answer from the node (no session list)\n");
        return 1;
      }
      for (const auto& s : (*answer)["sessions"]) {
        if (s.is_string()) std::printf("%s\n", flyt::ctl::Printable(s.get<std::string>()).c_str());
      }
      return 0;
    }
  } else {
    const std::string path = "/api/v1/monitoring/sessions/" + id;
    answer = action == "stop" ? (*client)->Delete(path) : (*client)->Get(path);
    if (answer.ok() && !json) {
      auto stats = flyt::gpu::SessionStatsFromJson(*answer);
      if (!stats.ok()) {
        std::fprintf(stderr, "flytctl: unexpected answer: %s\n", stats.status().message().c_str());
        return 1;
      }
      std::fputs(flyt::ctl::RenderSession(*stats).c_str(), stdout);
      return 0;
    }
  }
  if (!answer.ok()) {
    std::fprintf(stderr, "flytctl: %s\n", answer.status().message().c_str());
    return 1;
  }
  std::printf("%s\n", flyt::gpu::DumpJson(*answer, 2).c_str());
  return 0;
}

int RunEstimate(const std::string& file, bool json, double reserve_mib) {
  auto text = flyt::ReadFile(file, 16 << 20);
  if (!text.ok()) {
    std::fprintf(stderr, "flytctl: %s\n", text.status().message().c_str());
    return 1;
  }
  nlohmann::json task = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (task.is_discarded()) {
    std::fprintf(stderr, "flytctl: %s is not valid JSON\n", file.c_str());
    return 1;
  }
  flyt::sched::EstimateOptions options;
  options.reserve_mib = reserve_mib;
  auto estimate = flyt::sched::EstimateTask(task, options);
  if (!estimate.ok()) {
    std::fprintf(stderr, "flytctl: %s: %s\n", file.c_str(), estimate.status().message().c_str());
    return 1;
  }
  if (json) {
    std::printf("%s\n", flyt::gpu::DumpJson(flyt::sched::ToJson(*estimate), 2).c_str());
  } else {
    std::fputs(flyt::ctl::RenderEstimate(*estimate).c_str(), stdout);
  }
  return 0;
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

  GpusArgs gpus_args;
  std::string token_env = std::getenv("FLYT_TOKEN") ? std::getenv("FLYT_TOKEN") : "";
  auto add_source = [&](CLI::App* cmd, GpusArgs& args) {
    cmd->add_option("--node", args.node,
                    "Read a node manager (http://HOST:PORT) instead of this machine");
    cmd->add_option("--token", args.token, "Bearer token for the node (default: $FLYT_TOKEN)");
    cmd->add_flag("--json", args.json, "Print JSON for scripts");
    cmd->add_option("--watch", args.watch_s, "Refresh every SECONDS (default 2) until interrupted")
        ->expected(0, 1)
        ->default_str("2")
        ->check(CLI::Range(0.1, 86400.0));
  };
  auto* gpus = app.add_subcommand("gpus", "Show the GPUs and the processes on them");
  add_source(gpus, gpus_args);
  gpus->add_flag("--available", gpus_args.available,
                 "List GPUs a job could use, best availability score first");
  gpus->add_option("--min-free-memory", gpus_args.min_free_mib,
                   "With --available: MiB that must be free")
      ->check(CLI::Range(0.0, 1e9));
  gpus->add_option("--max-util", gpus_args.max_util,
                   "With --available: highest utilisation %, 0-100")
      ->check(CLI::Range(0.0, 100.0));

  GpusArgs procs_args;
  procs_args.processes_only = true;
  auto* processes = app.add_subcommand("processes", "List the processes using GPUs");
  add_source(processes, procs_args);

  auto* monitor = app.add_subcommand("monitor", "Monitoring sessions on a node manager");
  monitor->require_subcommand(1);
  std::string mon_node, mon_token, mon_id;
  std::vector<uint32_t> mon_gpus;
  std::optional<double> mon_interval;
  bool mon_json = false;
  auto mon_common = [&](CLI::App* cmd) {
    cmd->add_option("--node", mon_node, "The node manager (http://HOST:PORT)")->required();
    cmd->add_option("--token", mon_token, "Bearer token (default: $FLYT_TOKEN)");
    cmd->add_flag("--json", mon_json, "Print JSON for scripts");
  };
  auto* mon_start = monitor->add_subcommand("start", "Start a session; prints its id");
  mon_common(mon_start);
  mon_start->add_option("--gpus", mon_gpus, "GPU indexes (default: all)")->delimiter(',');
  mon_start->add_option("--interval", mon_interval, "Seconds between samples (default: every sample)")
      ->check(CLI::Range(0.1, 86400.0));
  auto* mon_show = monitor->add_subcommand("show", "Statistics so far");
  mon_common(mon_show);
  mon_show->add_option("id", mon_id, "Session id")->required();
  auto* mon_stop = monitor->add_subcommand("stop", "End a session; prints its final statistics");
  mon_common(mon_stop);
  mon_stop->add_option("id", mon_id, "Session id")->required();
  auto* mon_list = monitor->add_subcommand("list", "Session ids open on the node");
  mon_common(mon_list);

  auto* estimate = app.add_subcommand(
      "estimate", "GPUs and memory per GPU for each experiment of a task (a dry run)");
  std::string task_file;
  bool estimate_json = false;
  double reserve_mib = 1536;
  estimate->add_option("task", task_file, "The autotuner's task JSON")->required()->check(CLI::ExistingFile);
  estimate->add_flag("--json", estimate_json, "Print JSON for scripts");
  estimate->add_option("--reserve-mib", reserve_mib,
                       "Per-GPU runtime reserve (CUDA context, activations), MiB")
      ->check(CLI::Range(0.0, 1e6));

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
    for (auto* args : {&gpus_args, &procs_args}) {
      if (args->token.empty()) args->token = token_env;
    }
    if (mon_token.empty()) mon_token = token_env;
    if (gpus->parsed() || processes->parsed()) {
      CLI::App* cmd = gpus->parsed() ? gpus : processes;
      GpusArgs& args = gpus->parsed() ? gpus_args : procs_args;
      // `--watch` with no value yields the default.
      if (cmd->count("--watch") > 0 && !args.watch_s) args.watch_s = 2.0;
      return RunGpus(args);
    }
    for (CLI::App* sub : {mon_start, mon_show, mon_stop, mon_list}) {
      if (sub->parsed()) {
        return RunMonitor(sub->get_name(), mon_node, mon_token, mon_id, mon_gpus, mon_interval,
                          mon_json);
      }
    }
    if (check->parsed()) return RunSimCheck(files);
    if (estimate->parsed()) return RunEstimate(task_file, estimate_json, reserve_mib);
  } catch (const std::exception& e) {
    // flyt reports errors as Status; this is the last line of defence, not a code path.
    std::fprintf(stderr, "flytctl: internal error: %s\n", e.what());
    return 70;
  }
  return 0;
}
