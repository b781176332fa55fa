// flyt-node-manager: the per-node daemon. This file parses flags, loads the config and wires the
// monitor and the HTTP server together; the work is in src/gpu and src/node.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/daemon.h"
#include "common/strings.h"
#include "gpu/backend.h"
#include "gpu/monitor.h"
#include "gpu/nvml_backend.h"
#include "node/config.h"
#include "node/gpu_servers.h"
#include "node/heartbeat.h"
#include "node/kube_annotations.h"
#include "node/profiling.h"
#include "node/server.h"
#include "node/tracing.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "flyt-node-manager: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  flyt::BlockTerminationSignals(/*restart_signal=*/true);
  CLI::App app{"flyt-node-manager — the per-node GPU daemon: Prometheus /metrics and a JSON API"};
  app.footer(
      "Stopping: SIGTERM or SIGINT stops the node cleanly: the GPU servers it started are drained\n"
      "(SIGTERM, SIGKILL after [gpu-servers] drain_grace_s) and waited for before it exits.\n"
      "SIGUSR2 exits and leaves them running, for a restart or upgrade that re-adopts them.");
  app.set_version_flag("--version", std::string("flyt-node-manager ") + FLYT_VERSION);
  std::string config_path, listen, name, cluster_manager, log_level;
  app.add_option("--config", config_path, "TOML config file (configs/node-manager.toml)")
      ->check(CLI::ExistingFile);
  app.add_option("--listen", listen, "HOST:PORT to serve on (default 127.0.0.1:12401)");
  app.add_option("--name", name, "Node name (default: the host name)");
  app.add_option("--cluster-manager", cluster_manager, "Cluster manager URL (empty: standalone)");
  std::string advertise, cm_token;
  app.add_option("--token", cm_token,
                 "Token (role node) for the cluster manager (default: [cluster-manager] token, "
                 "else $FLYT_TOKEN)");
  app.add_option("--advertise-url", advertise,
                 "URL the cluster manager uses to reach this node's API (default: from --listen)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  flyt::Result<flyt::node::NodeConfig> loaded =
      config_path.empty() ? flyt::node::ParseNodeConfig("", "(defaults)")
                          : flyt::node::LoadNodeConfig(config_path);
  if (!loaded.ok()) return Fail(loaded.status().message());
  flyt::node::NodeConfig config = std::move(loaded).value();
  if (!listen.empty()) {
    flyt::Status s = flyt::node::SetListen(config, listen);
    if (!s.ok()) return Fail("--listen: " + s.message());
  }
  if (!name.empty()) config.name = name;
  if (!cluster_manager.empty()) config.cluster_manager = cluster_manager;
  if (!advertise.empty()) config.advertise_url = advertise;
  if (!cm_token.empty()) config.cluster_manager_token = cm_token;
  if (!log_level.empty()) config.log_level = log_level;
  if (flyt::Status s = flyt::node::CheckGpuServersAccess(config); !s.ok()) {
    return Fail(s.message());
  }

  flyt::SetUpDaemon(config.log_level, /*restart_signal=*/true);

  // Simulated GPUs (flyt's sim NVML) get UUIDs of this node's own, so that simulated nodes on one
  // scenario do not report the same GPUs (the cluster manager refuses a GPU two nodes report).
  setenv("FLYT_SIM_NODE", config.name.c_str(), /*overwrite=*/0);
  std::unique_ptr<flyt::gpu::Backend> backend;
  std::string library = config.nvml_library;
  if (library.empty() && std::getenv("FLYT_NVML_LIBRARY") != nullptr) {
    library = std::getenv("FLYT_NVML_LIBRARY");
  }
  if (!library.empty()) {
    // An NVML library named explicitly must load: no silent fallback to something else.
    auto nvml = flyt::gpu::OpenNvmlBackend({library, "/proc"});
    if (!nvml.ok()) return Fail("NVML library " + library + ": " + nvml.status().message());
    backend = std::move(nvml).value();
  } else {
    backend = flyt::gpu::OpenBackend({});
  }

  flyt::gpu::MonitorOptions options;
  options.sample_interval = config.interval;
  options.cache_ttl = config.cache_ttl;
  options.history_retention = config.history_retention;
  options.max_sessions = config.max_sessions;
  options.session_idle_expiry = config.session_expiry;
  if (flyt::Status s = options.Validate(); !s.ok()) return Fail(s.message());
  flyt::gpu::Monitor monitor(std::move(backend), flyt::SystemClock::Instance(), options);

  // CUDA tracing: when it cannot run, one log line says why and everything else goes on.
  std::unique_ptr<flyt::node::CudaTracing> tracing = flyt::node::CudaTracing::Start(config.trace);

  // Kubernetes node annotations with each GPU's profile (the node manager as a DaemonSet):
  // resolved before any thread starts, so that a bad [kubernetes] stops start-up cleanly.
  auto kube_resolved = flyt::node::ResolveKubernetes(config.kubernetes);
  if (!kube_resolved.ok()) return Fail(kube_resolved.status().message());
  if (kube_resolved->options && !config.profile.enabled) {
    const std::string why = "annotations need the usage profiles: [profile] enabled = false";
    if (config.kubernetes.mode == flyt::node::KubernetesMode::kOn) return Fail("[kubernetes] " + why);
    kube_resolved->options.reset();  // "auto": off, and says why
    kube_resolved->off_reason = why;
    kube_resolved->misconfigured = true;
  }

  // Usage profiles, fed by every sample the monitor takes (on its sampling thread).
  std::unique_ptr<flyt::node::Profiling> profiling;
  if (config.profile.enabled) {
    auto created =
        flyt::node::Profiling::Create(config.profile, config.interval, &tracing->stats());
    if (!created.ok()) return Fail(created.status().message());
    profiling = std::move(created).value();
    monitor.SetSampleObserver(
        [p = profiling.get()](const flyt::gpu::GpuSnapshot& snap) { p->Observe(snap); });
    spdlog::info("profiles: on ({} bytes per GPU; state_hold {} ms, allocated_idle_after {} ms)",
                 profiling->BytesPerGpu(), config.profile.state_hold.count(),
                 config.profile.allocated_idle_after.count());
  } else {
    spdlog::info("profiles: off ([profile] enabled = false)");
  }

  // Whatever way main() leaves from here, the sampling thread stops and lets go of the observer
  // before the profiler it feeds (declared after the monitor) is destroyed.
  struct StopSampling {
    flyt::gpu::Monitor& monitor;
    ~StopSampling() {
      monitor.Stop();
      monitor.SetSampleObserver(nullptr);
    }
  } stop_sampling{monitor};

  if (flyt::Status s = monitor.SampleOnce(); !s.ok()) {
    spdlog::warn("first sample failed: {}", s.message());
  }
  auto first = monitor.LastSnapshot();
  if (first && first->simulated_scenario) {
    spdlog::warn("SIMULATED GPUs: flyt's simulated NVML is playing {}", *first->simulated_scenario);
  }
  spdlog::info("node {}: {} GPU(s) via {}{}", config.name, first ? first->gpus.size() : 0,
               flyt::gpu::SourceName(monitor.source()),
               first && !first->reason.empty() ? " (" + first->reason + ")" : "");
  monitor.Start();

  if (first) tracing->Feed(*first);
  tracing->StartFeeding(monitor, config.interval);

  // GPU servers for the cluster's remote leases: re-adopts the ones a previous run started.
  std::unique_ptr<flyt::node::GpuServers> gpu_servers;
  if (config.gpu_servers.enabled) {
    std::vector<flyt::node::GpuDevice> devices;
    if (first) {
      for (const flyt::gpu::GpuInfo& g : first->gpus) devices.push_back({g.index, g.uuid});
    }
    char exe[4096] = {};
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    auto created = flyt::node::GpuServers::Create(config.gpu_servers, std::move(devices),
                                                  n > 0 ? std::string(exe, n) : std::string());
    if (!created.ok()) return Fail(created.status().message());
    gpu_servers = std::move(created).value();
    spdlog::info("gpu-servers: on ({} backend, ports {}-{} on {}, state in {})",
                 config.gpu_servers.backend, config.gpu_servers.port_min,
                 config.gpu_servers.port_max, config.gpu_servers.listen_host,
                 config.gpu_servers.state_dir);
  }

  std::unique_ptr<flyt::node::KubeAnnotationPublisher> kube;
  nlohmann::json kube_off;
  if (kube_resolved->options) {
    auto created = flyt::node::KubeAnnotationPublisher::Create(
        *kube_resolved->options, [p = profiling.get()] { return p->Profiles(); });
    if (!created.ok()) return Fail("[kubernetes]: " + created.status().message());
    kube = std::move(created).value();
    kube->Start();
  } else {
    if (kube_resolved->misconfigured) {
      spdlog::warn("Kubernetes annotations off: {}", kube_resolved->off_reason);
    } else {
      spdlog::info("Kubernetes annotations off: {}", kube_resolved->off_reason);
    }
    kube_off = flyt::node::KubeAnnotationPublisher::DisabledStatusJson(kube_resolved->off_reason);
  }

  flyt::node::NodeServer server(monitor, config, flyt::SystemClock::Instance(), FLYT_VERSION,
                                &tracing->stats(), gpu_servers.get(), profiling.get());
  server.SetKubernetes(kube.get(), std::move(kube_off));
  if (flyt::Status s = server.Start(); !s.ok()) return Fail(s.message());
  spdlog::info("serving on http://{}:{} (metrics at /metrics, API at /api/v1){}",
               config.listen_host, server.port(),
               config.bearer_token.empty() ? "" : ", bearer token required");
  std::unique_ptr<flyt::node::HeartbeatSender> heartbeats;
  if (config.cluster_manager.empty()) {
    spdlog::info("standalone: no cluster manager configured");
  } else {
    if (config.cluster_manager_token.empty() && std::getenv("FLYT_TOKEN") != nullptr) {
      config.cluster_manager_token = std::getenv("FLYT_TOKEN");
    }
    std::string api_url = config.advertise_url;
    if (api_url.empty()) {
      std::string host = config.listen_host;
      if (host == "0.0.0.0" || host == "::" || host.empty()) host = config.name;
      api_url = "http://" + flyt::FormatHostPort(host, server.port());
    }
    heartbeats = std::make_unique<flyt::node::HeartbeatSender>(monitor, config, api_url,
                                                               FLYT_VERSION, &tracing->stats(),
                                                               gpu_servers.get(), profiling.get());
    heartbeats->Start();
    spdlog::info("sending heartbeats to {} every {} s (this node's API: {})",
                 config.cluster_manager, config.heartbeat_interval.count(), api_url);
  }

  const int sig = flyt::WaitForTermination(/*restart_signal=*/true);
  server.Stop();  // no more PUTs
  if (gpu_servers && sig == flyt::kRestartSignal) {
    spdlog::info("gpu-servers: left running (SIGUSR2): the next start re-adopts them");
  } else if (gpu_servers) {
    // The clean stop: every server drained and waited for (bounded). Heartbeats go on meanwhile,
    // so the cluster manager sees them drain; their replies start nothing any more.
    gpu_servers->StopAll();
  }
  if (heartbeats) heartbeats->Stop();
  if (kube) kube->Stop();  // before the profiler it reads goes
  gpu_servers.reset();  // stops the watcher; servers still running (SIGUSR2) stay
  monitor.Stop();  // before the profiler and the tracer it feeds go (stop_sampling again: a no-op)
  monitor.SetSampleObserver(nullptr);
  tracing->Stop();
  spdlog::info("stopped");
  return 0;
}
