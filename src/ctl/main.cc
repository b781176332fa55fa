// flytctl: the command line for flyt. This file only parses flags and wires libraries together.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <thread>

#include "common/clock.h"
#include "common/http.h"
#include "common/json.h"
#include "common/strings.h"
#include "ctl/cluster.h"
#include "ctl/cuda_inspect.h"
#include "ctl/render.h"
#include "gpu/backend.h"
#include "gpu/json.h"
#include "gpu/monitor.h"
#include "gpu/nvml_backend.h"
#include "sched/estimate.h"
#include "sim/scenario.h"

namespace {

std::atomic<bool> g_interrupted{false};  // set by SIGINT/SIGTERM during --watch

// Every error flytctl reports: one line on stderr, and exit status 1.
int Fail(const std::string& line) {
  std::fprintf(stderr, "flytctl: %s\n", flyt::ctl::Printable(line).c_str());
  return 1;
}

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
      FLYT_ASSIGN_OR_RETURN(s.client_,
                            flyt::http::JsonClient::Connect(node, token, "the node manager"));
      return s;
    }
    FLYT_ASSIGN_OR_RETURN(auto backend, OpenLocalBackend());
    s.monitor_ =
        std::make_unique<flyt::gpu::Monitor>(std::move(backend), flyt::SystemClock::Instance());
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
  std::unique_ptr<flyt::http::JsonClient> client_;
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

// Prints `frame()` once, or every `watch_s` seconds until SIGINT/SIGTERM. A frame that fails
// ends it with the error.
int Repeat(std::optional<double> watch_s, bool json,
           const std::function<flyt::Result<std::string>()>& frame) {
  if (watch_s) {
    // Only while watching: otherwise Ctrl-C must end a stuck request at once.
    std::signal(SIGINT, [](int) { g_interrupted = true; });
    std::signal(SIGTERM, [](int) { g_interrupted = true; });
  }
  while (true) {
    auto out = frame();
    if (!out.ok()) return Fail(out.status().message());
    if (watch_s && !json && isatty(STDOUT_FILENO)) std::fputs("\033[H\033[2J", stdout);
    std::fputs(out->c_str(), stdout);
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

int RunGpus(const GpusArgs& a) {
  auto source = Source::Open(a.node, a.token);
  if (!source.ok()) return Fail(source.status().message());
  flyt::ctl::RenderOptions render;
  render.hostname = a.node.empty() ? Hostname() : a.node;
  render.color = !a.json && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
  return Repeat(a.watch_s, a.json, [&]() -> flyt::Result<std::string> {
    nlohmann::json raw;
    FLYT_ASSIGN_OR_RETURN(auto snap, source->Read(&raw));
    if (a.available) {
      auto ranked = flyt::gpu::RankAvailableGpus(
          snap.gpus, static_cast<uint64_t>(a.min_free_mib * 1024 * 1024),
          static_cast<uint32_t>(a.max_util));
      if (a.json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& r : ranked) arr.push_back(flyt::gpu::ToJson(r));
        return flyt::gpu::DumpJson(arr) + "\n";
      }
      return flyt::ctl::SimulatedBanner(snap) + flyt::ctl::RenderAvailable(ranked, render);
    }
    if (a.processes_only) {
      if (!a.json) return flyt::ctl::RenderProcesses(snap, render);
      nlohmann::json list = nlohmann::json::array();
      for (const auto& g : snap.gpus) {
        for (const auto& p : g.processes) {
          nlohmann::json j = flyt::gpu::ToJson(p);
          j["gpu"] = g.index;
          j["gpu_uuid"] = g.uuid;
          list.push_back(std::move(j));
        }
      }
      return flyt::gpu::DumpJson({{"processes", list}}, a.watch_s ? -1 : 2) + "\n";
    }
    return a.json ? flyt::gpu::DumpJson(raw, a.watch_s ? -1 : 2) + "\n"
                  : flyt::ctl::RenderSnapshot(snap, render);
  });
}

int RunMonitor(const std::string& action, const std::string& node, const std::string& token,
               const std::string& id, const std::vector<uint32_t>& gpus,
               std::optional<double> interval_s, bool json) {
  auto client = flyt::http::JsonClient::Connect(node, token, "the node manager");
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

// ---- the cluster manager --------------------------------------------------------------------

struct ClusterArgs {
  std::string server;  // resolved in main: --server, $FLYT_CLUSTER_MANAGER, the default
  std::string token;
  bool json = false;
};

// A connection to the cluster manager, and how its answers and errors reach the user.
class Manager {
 public:
  static flyt::Result<Manager> Open(const ClusterArgs& a) {
    Manager m;
    m.json_ = a.json;
    m.url_ = a.server;
    FLYT_ASSIGN_OR_RETURN(
        m.client_, flyt::http::JsonClient::Connect(a.server, a.token, "the cluster manager"));
    m.url_ = m.client_->url();
    return m;
  }

  flyt::http::JsonClient& client() { return *client_; }
  const std::string& url() const { return url_; }

  int Fail(const flyt::Status& s, std::string_view doing) const {
    return ::Fail(flyt::ctl::ExplainError(s, doing, url_));
  }
  // The answer as the API gave it (--json), or as `render` words it. `list` names the array a
  // well-formed answer holds, so that a stranger's answer is an error rather than an empty table.
  int Print(const flyt::Result<nlohmann::json>& answer, std::string_view doing, const char* list,
            const std::function<std::string(const nlohmann::json&)>& render) const {
    if (!answer.ok()) return Fail(answer.status(), doing);
    if (json_) {
      std::printf("%s\n", flyt::DumpJson(*answer, 2).c_str());
      return 0;
    }
    if (!answer->is_object() ||
        (list != nullptr && !(answer->contains(list) && (*answer)[list].is_array()))) {
      return ::Fail(std::string(doing) + ": unexpected answer from " + url_ +
                    (list != nullptr ? std::string(" (no \"") + list + "\" list)" : "") +
                    "; is it a flyt cluster manager?");
    }
    std::fputs(render(*answer).c_str(), stdout);
    return 0;
  }

 private:
  Manager() = default;
  std::unique_ptr<flyt::http::JsonClient> client_;
  std::string url_;
  bool json_ = false;
};

// Opens the manager or reports why not; `run` does the rest.
int WithManager(const ClusterArgs& a, const std::function<int(Manager&)>& run) {
  auto m = Manager::Open(a);
  if (!m.ok()) return Fail(flyt::ctl::ExplainError(m.status(), "", a.server));
  return run(*m);
}

// Ids go into URL paths: a malformed one is a usage error, caught before any request.
bool BadId(const std::string& id, std::string_view what) {
  flyt::Status s = flyt::ctl::CheckId(id, what);
  if (s.ok()) return false;
  Fail(s.message());
  return true;
}

int RunNodes(const ClusterArgs& a, const std::string& name) {
  if (!name.empty() && BadId(name, "node")) return 2;
  return WithManager(a, [&](Manager& m) {
    if (name.empty()) {
      return m.Print(m.client().Get("/api/v1/nodes"), "cannot list the nodes", "nodes",
                     flyt::ctl::RenderNodes);
    }
    return m.Print(m.client().Get("/api/v1/nodes/" + name), "cannot show node " + name, nullptr,
                   flyt::ctl::RenderNode);
  });
}

int RunClusterGpus(const ClusterArgs& a, std::optional<double> watch_s) {
  return WithManager(a, [&](Manager& m) {
    return Repeat(watch_s, a.json, [&]() -> flyt::Result<std::string> {
      auto fail = [&](const flyt::Status& s) {
        return flyt::Status(s.code(), flyt::ctl::ExplainError(s, "cannot list the GPUs", m.url()));
      };
      auto gpus = m.client().Get("/api/v1/gpus");
      if (!gpus.ok()) return fail(gpus.status());
      if (a.json) return flyt::DumpJson(*gpus, watch_s ? -1 : 2) + "\n";
      if (!gpus->is_object() || !gpus->contains("gpus") || !(*gpus)["gpus"].is_array()) {
        return flyt::Internal("unexpected answer from " + m.url() +
                              " (no \"gpus\" list); is it a flyt cluster manager?");
      }
      // Nodes say which GPUs are simulated; without them the table is still worth showing.
      auto nodes = m.client().Get("/api/v1/nodes");
      return flyt::ctl::RenderClusterGpus(*gpus, nodes.ok() ? *nodes : nlohmann::json());
    });
  });
}

int RunAlloc(const ClusterArgs& a, const flyt::ctl::AllocationFlags& flags, bool quiet) {
  auto body = flyt::ctl::AllocationBody(flags);
  if (!body.ok()) {
    Fail(body.status().message());
    return 2;
  }
  return WithManager(a, [&](Manager& m) {
    auto lease = m.client().Post("/api/v1/allocations", *body);
    const std::string doing = "cannot allocate " + std::to_string(flags.gpus) + " GPU(s)";
    if (quiet && lease.ok() && !a.json) {
      if (!lease->is_object() || !(*lease)["id"].is_string()) {
        return Fail(doing + ": unexpected answer from " + m.url() + " (no lease id)");
      }
      std::printf("%s\n", flyt::ctl::Printable((*lease)["id"].get<std::string>()).c_str());
      return 0;
    }
    return m.Print(lease, doing, "gpus", flyt::ctl::RenderLease);
  });
}

int RunRelease(const ClusterArgs& a, const std::string& id) {
  if (BadId(id, "lease")) return 2;
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Delete("/api/v1/allocations/" + id), "cannot release " + id, nullptr,
                   [&](const nlohmann::json&) { return "released " + id + "\n"; });
  });
}

int RunRenew(const ClusterArgs& a, const std::string& id, std::optional<int64_t> ttl_s) {
  if (BadId(id, "lease")) return 2;
  nlohmann::json body = nlohmann::json::object();
  if (ttl_s) body["ttl_seconds"] = *ttl_s;
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Post("/api/v1/allocations/" + id + "/renew", body),
                   "cannot renew " + id, "gpus", flyt::ctl::RenderLease);
  });
}

int RunAllocations(const ClusterArgs& a) {
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Get("/api/v1/allocations"), "cannot list the leases", "allocations",
                   flyt::ctl::RenderAllocations);
  });
}

struct SubmitArgs {
  std::string file;
  flyt::ctl::SubmitFlags flags;
  bool wait = false;
  std::optional<double> wait_timeout_s;
};

int RunSubmit(const ClusterArgs& a, const SubmitArgs& s) {
  auto text = flyt::ReadFile(s.file, 16 << 20);
  if (!text.ok()) return Fail(text.status().message());
  auto task = flyt::ParseJson(*text, s.file);
  if (!task.ok()) return Fail(task.status().message());
  auto body = flyt::ctl::SubmissionBody(*task, s.flags);
  if (!body.ok()) return Fail(s.file + ": " + body.status().message());
  return WithManager(a, [&](Manager& m) {
    const std::string doing = "cannot submit " + s.file;
    auto submitted = m.client().Post("/api/v1/jobs", *body);
    if (!s.wait || !submitted.ok()) {
      return m.Print(submitted, doing, "jobs", flyt::ctl::RenderSubmission);
    }
    if (!submitted->is_object() || !(*submitted)["jobs"].is_array()) {
      return Fail(doing + ": unexpected answer from " + m.url() + " (no \"jobs\" list)");
    }
    std::vector<std::string> ids;
    for (const nlohmann::json& j : (*submitted)["jobs"]) {
      if (!j.is_object() || !j.contains("id") || !j["id"].is_string() ||
          !flyt::ctl::CheckId(j["id"].get<std::string>(), "job").ok()) {
        return Fail(doing + ": unexpected answer from " + m.url() + " (a job without a valid id)");
      }
      ids.push_back(j["id"].get<std::string>());
    }
    if (!a.json) {
      std::fputs(flyt::ctl::RenderSubmission(*submitted).c_str(), stdout);
      std::printf("waiting for %zu job(s) to leave the queue...\n", ids.size());
      std::fflush(stdout);
    }
    flyt::ctl::JobSource source;
    source.queued_ids = [&]() -> flyt::Result<std::vector<std::string>> {
      FLYT_ASSIGN_OR_RETURN(nlohmann::json q, m.client().Get("/api/v1/queue"));
      std::vector<std::string> out;
      if (!q.is_object() || !q.contains("queue") || !q["queue"].is_array()) {
        return flyt::Internal("unexpected answer from " + m.url() + " (no \"queue\" list)");
      }
      for (const nlohmann::json& e : q["queue"]) {
        if (e.is_object() && e.contains("job_id") && e["job_id"].is_string()) {
          out.push_back(e["job_id"].get<std::string>());
        }
      }
      return out;
    };
    source.job = [&](const std::string& id) { return m.client().Get("/api/v1/jobs/" + id); };
    flyt::ctl::WaitOptions options;
    if (s.wait_timeout_s) {
      options.timeout = std::chrono::milliseconds(static_cast<int64_t>(*s.wait_timeout_s * 1000));
    }
    auto waited = flyt::ctl::WaitUntilPlaced(
        ids, source, flyt::SystemClock::Instance(),
        [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }, options,
        [&](const nlohmann::json& job) {
          if (a.json) return;
          std::fputs(flyt::ctl::RenderJobOutcome(job).c_str(), stdout);
          std::fflush(stdout);
        });
    if (!waited.ok()) return m.Fail(waited.status(), "stopped waiting");
    size_t failed = 0, queued = 0;
    std::map<std::string, size_t> by_status;
    for (const nlohmann::json& j : waited->jobs) {
      const std::string status = flyt::ctl::JobStatus(j);
      ++by_status[status];
      if (status == "queued") {
        ++queued;
      } else if (!flyt::ctl::JobSucceeded(j)) {
        ++failed;
      }
    }
    if (a.json) {
      std::printf("%s\n", flyt::DumpJson({{"submission", (*submitted)["submission"]},
                                          {"timed_out", waited->timed_out},
                                          {"jobs", waited->jobs}},
                                         2)
                              .c_str());
    } else {
      std::string summary;
      for (const auto& [status, n] : by_status) {
        summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + status;
      }
      std::printf("%zu job(s): %s\n", waited->jobs.size(), summary.c_str());
    }
    if (waited->timed_out) {
      return Fail(
          fmt::format("gave up waiting after {}; {} job(s) still queued (they stay queued: "
                      "flytctl cancel ID withdraws one)",
                      flyt::ctl::HumanDuration(*s.wait_timeout_s), queued));
    }
    if (failed > 0) return Fail(fmt::format("{} of {} job(s) did not start", failed, ids.size()));
    return 0;
  });
}

int RunJobs(const ClusterArgs& a, const std::string& status, std::optional<int64_t> limit) {
  std::string path = "/api/v1/jobs";
  std::string query;
  if (!status.empty()) query += "status=" + status;
  if (limit) query += (query.empty() ? "" : "&") + std::string("limit=") + std::to_string(*limit);
  if (!query.empty()) path += "?" + query;
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Get(path), "cannot list the jobs", "jobs",
                   [&](const nlohmann::json& j) { return flyt::ctl::RenderJobs(j, status); });
  });
}

int RunJob(const ClusterArgs& a, const std::string& id) {
  if (BadId(id, "job")) return 2;
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Get("/api/v1/jobs/" + id), "cannot show job " + id, nullptr,
                   [](const nlohmann::json& j) {
                     return flyt::ctl::RenderJob(j, std::chrono::system_clock::now());
                   });
  });
}

int RunCancel(const ClusterArgs& a, const std::string& id) {
  if (BadId(id, "job")) return 2;
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Delete("/api/v1/jobs/" + id), "cannot cancel " + id, nullptr,
                   flyt::ctl::RenderJobOutcome);
  });
}

int RunComplete(const ClusterArgs& a, const std::string& id, bool failed,
                const std::string& message) {
  if (BadId(id, "job")) return 2;
  nlohmann::json body = {{"status", failed ? "failed" : "completed"}};
  if (!message.empty()) body["message"] = message;
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Post("/api/v1/jobs/" + id + "/complete", body),
                   "cannot complete " + id, nullptr, [](const nlohmann::json& j) {
                     return flyt::ctl::RenderJob(j, std::chrono::system_clock::now());
                   });
  });
}

int RunQueue(const ClusterArgs& a) {
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Get("/api/v1/queue"), "cannot show the queue", "queue",
                   flyt::ctl::RenderQueue);
  });
}

int RunEvents(const ClusterArgs& a, std::optional<int64_t> after, std::optional<int64_t> limit) {
  // Without --after: the newest events (50 unless --limit), the way `tail` shows a log.
  std::string query = after ? "after=" + std::to_string(*after) +
                                  (limit ? "&limit=" + std::to_string(*limit) : std::string())
                            : "latest=" + std::to_string(limit.value_or(50));
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Get("/api/v1/events?" + query),
                   "cannot list the events", "events", flyt::ctl::RenderEvents);
  });
}

int RunWhoami(const ClusterArgs& a) {
  return WithManager(a, [&](Manager& m) {
    return m.Print(m.client().Get("/api/v1/whoami"), "cannot ask who I am", nullptr,
                   [&](const nlohmann::json& j) { return flyt::ctl::RenderWhoami(j, m.url()); });
  });
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
    cmd->add_option("--token", args.token,
                    "Bearer token for the node or cluster manager (default: $FLYT_TOKEN)");
    cmd->add_flag("--json", args.json, "Print JSON for scripts");
    cmd->add_option("--watch", args.watch_s, "Refresh every SECONDS (default 2) until interrupted")
        ->expected(0, 1)
        ->default_str("2")
        ->check(CLI::Range(0.1, 86400.0));
  };
  auto* gpus = app.add_subcommand(
      "gpus",
      "Show the GPUs and the processes on them (--node: a node's, --server: the cluster's)");
  add_source(gpus, gpus_args);
  gpus->add_flag("--available", gpus_args.available,
                 "List GPUs a job could use, best availability score first");
  gpus->add_option("--min-free-memory", gpus_args.min_free_mib,
                   "With --available: MiB that must be free")
      ->check(CLI::Range(0.0, 1e9));
  auto* max_util = gpus->add_option("--max-util", gpus_args.max_util,
                                    "With --available: highest utilisation %, 0-100")
                       ->check(CLI::Range(0.0, 100.0));
  std::string gpus_server;
  gpus->add_option("--server", gpus_server,
                   "Every GPU of the cluster, from the cluster manager (http://HOST:PORT)")
      ->excludes("--node")
      ->excludes("--available")
      ->excludes(max_util)
      ->excludes("--min-free-memory");

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
  mon_start
      ->add_option("--interval", mon_interval, "Seconds between samples (default: every sample)")
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
  estimate->add_option("task", task_file, "The autotuner's task JSON")
      ->required()
      ->check(CLI::ExistingFile);
  estimate->add_flag("--json", estimate_json, "Print JSON for scripts");
  estimate
      ->add_option("--reserve-mib", reserve_mib,
                   "Per-GPU runtime reserve (CUDA context, activations), MiB")
      ->check(CLI::Range(0.0, 1e6));

  auto* sim = app.add_subcommand("sim", "Work with simulated GPU scenarios");
  sim->require_subcommand(1);
  auto* check = sim->add_subcommand("check", "Validate scenario files");
  std::vector<std::string> files;
  check->add_option("files", files, "Scenario files")->required()->check(CLI::ExistingFile);

  auto* cuda = app.add_subcommand("cuda", "Look into CUDA binaries");
  cuda->require_subcommand(1);
  auto* cuda_inspect = cuda->add_subcommand(
      "inspect", "Fatbin entries and kernels (parameter layout, registers, shared memory)");
  std::string cuda_path;
  bool cuda_json = false;
  cuda_inspect
      ->add_option("file", cuda_path, "A program or library built by nvcc, a .fatbin or a cubin")
      ->required()
      ->check(CLI::ExistingFile);
  cuda_inspect->add_flag("--json", cuda_json, "Print JSON for scripts");

  // The cluster manager's commands share --server, --token and --json.
  ClusterArgs cluster;
  auto add_cluster = [&](CLI::App* cmd) {
    cmd->add_option("--server", cluster.server,
                    "The cluster manager (default: $FLYT_CLUSTER_MANAGER, else " +
                        std::string(flyt::ctl::kDefaultClusterManager) + ")");
    cmd->add_option("--token", cluster.token, "Bearer token (default: $FLYT_TOKEN)");
    cmd->add_flag("--json", cluster.json, "Print the API's JSON for scripts");
    cmd->group("Cluster manager");
    return cmd;
  };
  const std::vector<std::string> policies = {"score", "binpack", "spread"};

  std::string node_name;
  auto* nodes = add_cluster(app.add_subcommand("nodes", "The nodes of the cluster"));
  nodes->add_option("name", node_name, "One node: its GPUs as of its last heartbeat");

  flyt::ctl::AllocationFlags alloc_flags;
  bool alloc_quiet = false;
  auto* alloc = add_cluster(app.add_subcommand("alloc", "Lease GPUs from the cluster"));
  alloc->add_option("--gpus", alloc_flags.gpus, "How many GPUs")
      ->required()
      ->check(CLI::Range(1, 4096));
  alloc->add_option("--min-mem", alloc_flags.min_free_memory_mb, "MiB that must be free on each")
      ->check(CLI::Range(0.0, 1e9));
  alloc
      ->add_option("--max-util", alloc_flags.max_utilization_percent,
                   "Highest utilisation % a GPU may have, 0-100")
      ->check(CLI::Range(0, 100));
  alloc->add_option("--model", alloc_flags.gpu_model, "GPU model, e.g. H100");
  alloc->add_option("--policy", alloc_flags.policy, "score (default), binpack or spread")
      ->check(CLI::IsMember(policies));
  alloc->add_option("--ttl", alloc_flags.ttl_seconds, "Lease lifetime in seconds (renewable)")
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 86400));
  alloc->add_flag("--shared", alloc_flags.shared, "Share the GPUs with other shared leases");
  alloc->add_flag("--any-node", alloc_flags.any_node, "The GPUs may be on different nodes");
  alloc->add_option("--owner", alloc_flags.owner, "Lease for someone else (admin tokens)");
  alloc->add_option("--label", alloc_flags.labels, "KEY=VALUE, repeatable");
  alloc->add_flag("-q,--quiet", alloc_quiet, "Print only the lease id");

  std::string lease_id;
  auto* release = add_cluster(app.add_subcommand("release", "Give leased GPUs back"));
  release->add_option("id", lease_id, "Lease id")->required();
  std::optional<int64_t> renew_ttl;
  auto* renew = add_cluster(app.add_subcommand("renew", "Extend a lease"));
  renew->add_option("id", lease_id, "Lease id")->required();
  renew->add_option("--ttl", renew_ttl, "New lifetime in seconds from now (default: its TTL)")
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 86400));
  auto* allocations = add_cluster(app.add_subcommand("allocations", "List the active leases"));

  SubmitArgs submit_args;
  auto* submit = add_cluster(
      app.add_subcommand("submit", "Queue a task: one job per experiment of its search space"));
  submit->add_option("task", submit_args.file, "The autotuner's task JSON")
      ->required()
      ->check(CLI::ExistingFile);
  submit->add_option("--priority", submit_args.flags.priority, "Higher runs first, -1000 to 1000")
      ->check(CLI::Range(-1000, 1000));
  submit
      ->add_option("--timeout", submit_args.flags.timeout_seconds,
                   "Seconds a job may wait for GPUs before it fails")
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 86400));
  submit->add_option("--model", submit_args.flags.gpu_model, "GPU model, e.g. H100");
  submit->add_option("--policy", submit_args.flags.policy, "score (default), binpack or spread")
      ->check(CLI::IsMember(policies));
  submit->add_option("--owner", submit_args.flags.owner, "Submit for someone else (admin tokens)");
  auto* wait_flag = submit->add_flag(
      "--wait", submit_args.wait,
      "Wait until every job has left the queue; exit 1 if any failed or was cancelled");
  submit
      ->add_option("--wait-timeout", submit_args.wait_timeout_s,
                   "With --wait: give up after SECONDS (the jobs stay queued)")
      ->needs(wait_flag)
      ->check(CLI::Range(0.1, 30.0 * 86400));

  std::string jobs_status;
  std::optional<int64_t> jobs_limit;
  auto* jobs = add_cluster(app.add_subcommand("jobs", "List jobs, newest first"));
  jobs->add_option("--status", jobs_status, "queued, running, completed, failed or cancelled")
      ->check(CLI::IsMember({"queued", "running", "completed", "failed", "cancelled"}));
  jobs->add_option("--limit", jobs_limit, "At most N jobs (default 1000)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));

  std::string job_id;
  auto* job = add_cluster(app.add_subcommand(
      "job", "One job: status, requirement, placement, GPU monitoring and metrics"));
  job->add_option("id", job_id, "Job id")->required();
  auto* cancel = add_cluster(app.add_subcommand("cancel", "Cancel a queued or running job"));
  cancel->add_option("id", job_id, "Job id")->required();
  bool complete_failed = false;
  std::string complete_message;
  auto* complete =
      add_cluster(app.add_subcommand("complete", "Report a running job finished; frees its GPUs"));
  complete->add_option("id", job_id, "Job id")->required();
  complete->add_flag("--failed", complete_failed, "It failed (default: completed)");
  complete->add_option("--message", complete_message, "What happened");

  auto* queue = add_cluster(app.add_subcommand("queue", "Jobs waiting for GPUs, and why"));
  std::optional<int64_t> events_after, events_limit;
  auto* events = add_cluster(
      app.add_subcommand("events", "The cluster's event log: the newest 50, or those after --after"));
  events->add_option("--after", events_after, "Only events after this id")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  events->add_option("--limit", events_limit,
                     "At most N events (default: 50 newest; 1000 with --after)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}));
  auto* whoami = add_cluster(app.add_subcommand("whoami", "The name and role of your token"));

  // Usage errors: one line, "flytctl: ...", and the usual exit status 2 (help and --version: 0).
  app.failure_message([](const CLI::App* root, const CLI::Error& e) {
    std::string command = "flytctl";
    for (const CLI::App* sub = root; sub != nullptr;) {
      auto parsed = sub->get_subcommands();
      sub = parsed.empty() ? nullptr : parsed.front();
      if (sub != nullptr) command += " " + sub->get_name();
    }
    return "flytctl: " + std::string(e.what()) + " (see " + command + " --help)\n";
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    for (auto* args : {&gpus_args, &procs_args}) {
      if (args->token.empty()) args->token = token_env;
    }
    if (mon_token.empty()) mon_token = token_env;
    if (cluster.token.empty()) cluster.token = token_env;
    cluster.server =
        flyt::ctl::ClusterManagerUrl(cluster.server, std::getenv("FLYT_CLUSTER_MANAGER"));
    if (gpus->parsed() && !gpus_server.empty()) {
      if (gpus->count("--watch") > 0 && !gpus_args.watch_s) gpus_args.watch_s = 2.0;
      return RunClusterGpus({gpus_server, gpus_args.token, gpus_args.json}, gpus_args.watch_s);
    }
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
    if (nodes->parsed()) return RunNodes(cluster, node_name);
    if (alloc->parsed()) return RunAlloc(cluster, alloc_flags, alloc_quiet);
    if (release->parsed()) return RunRelease(cluster, lease_id);
    if (renew->parsed()) return RunRenew(cluster, lease_id, renew_ttl);
    if (allocations->parsed()) return RunAllocations(cluster);
    if (submit->parsed()) return RunSubmit(cluster, submit_args);
    if (jobs->parsed()) return RunJobs(cluster, jobs_status, jobs_limit);
    if (job->parsed()) return RunJob(cluster, job_id);
    if (cancel->parsed()) return RunCancel(cluster, job_id);
    if (complete->parsed()) return RunComplete(cluster, job_id, complete_failed, complete_message);
    if (queue->parsed()) return RunQueue(cluster);
    if (events->parsed()) return RunEvents(cluster, events_after, events_limit);
    if (whoami->parsed()) return RunWhoami(cluster);
    if (check->parsed()) return RunSimCheck(files);
    if (cuda_inspect->parsed()) {
      auto inspection = flyt::ctl::InspectCudaFile(cuda_path);
      if (!inspection.ok()) return Fail(inspection.status().message());
      const std::string text = cuda_json
                                   ? flyt::ctl::CudaInspectionToJson(*inspection).dump(2) + "\n"
                                   : flyt::ctl::RenderCudaInspection(*inspection);
      std::fputs(text.c_str(), stdout);
      return 0;
    }
    if (estimate->parsed()) return RunEstimate(task_file, estimate_json, reserve_mib);
  } catch (const std::exception& e) {
    // flyt reports errors as Status; this is the last line of defence, not a code path.
    std::fprintf(stderr, "flytctl: internal error: %s\n", e.what());
    return 70;
  }
  return 0;
}
