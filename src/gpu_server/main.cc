// flyt-gpu-server: runs remote clients' CUDA calls on one device. This file parses flags and wires
// a backend (the simulated device, or the real GPU through the driver) to the server core; the
// work is in src/remote (server, sim_backend, driver_backend) and src/cuda_driver.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include "common/daemon.h"
#include "remote/debug_stats.h"
#include "remote/driver_backend.h"
#include "remote/server.h"
#include "remote/sim_backend.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "flyt-gpu-server: %s\n", message.c_str());
  return 1;
}

// Raises the soft limit on open descriptors to `needed` if it is lower (up to the hard limit).
flyt::Status RaiseDescriptorLimit(size_t needed) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return flyt::ErrnoError("getrlimit", errno);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur >= needed) return flyt::Status::Ok();
  if (limit.rlim_cur == RLIM_INFINITY) return flyt::Status::Ok();
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < needed) {
    return flyt::InvalidArgument(
        "--max-clients and --max-pending need about " + std::to_string(needed) +
        " open descriptors, and the hard limit (ulimit -Hn) is " +
        std::to_string(limit.rlim_max) + ": lower them or raise the limit");
  }
  limit.rlim_cur = needed;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return flyt::ErrnoError("setrlimit", errno);
  return flyt::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  flyt::BlockTerminationSignals();
  CLI::App app{"flyt-gpu-server — runs remote CUDA programs' calls on this machine's GPU"};
  app.set_version_flag("--version", std::string("flyt-gpu-server ") + FLYT_VERSION);
  std::string backend_name = "driver";
  std::vector<std::string> listen;
  int device = 0;
  uint64_t memory_limit_mb = 0;
  int sm_count = 0;
  std::string launch_log, log_level = "info", cuda_library = "libcuda.so.1";
  app.add_option("--backend", backend_name, "sim (simulated device, no GPU) or driver (libcuda)")
      ->check(CLI::IsMember({"sim", "driver"}));
  app.add_option("--listen", listen,
                 "HOST:PORT, [ADDR]:PORT or unix:PATH to accept clients on (repeatable)");
  app.add_option("--device", device, "CUDA device ordinal to serve (driver backend)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--memory-limit-mb", memory_limit_mb,
                 "device memory all clients together may allocate, in MiB (0: the device's)");
  app.add_option("--sm-count", sm_count, "SMs the clients may use (0: all)")
      ->check(CLI::NonNegativeNumber);
  std::string isolation = "process";
  app.add_option("--isolation", isolation,
                 "process (each client served by a process of its own, so a device fault stays "
                 "with its client) or thread (all clients in this process)")
      ->check(CLI::IsMember({"process", "thread"}));
  app.add_option("--launch-log", launch_log, "append one JSON line per kernel launch to this file");
  app.add_option("--cuda-library", cuda_library, "driver library to load (driver backend)");
  flyt::remote::ServerOptions defaults;
  size_t max_clients = defaults.max_clients;
  size_t max_pending = defaults.max_pending;
  size_t max_pending_per_peer = defaults.max_pending_per_peer;
  double hello_timeout_s = defaults.hello_timeout.count() / 1000.0;
  double idle_timeout_s = defaults.idle_timeout.count() / 1000.0;
  app.add_option("--max-clients", max_clients,
                 "clients served at once; one more is refused at its hello with 'server busy' "
                 "(the program sees cudaErrorDevicesUnavailable)")
      ->check(CLI::Range(size_t{1}, size_t{4096}))
      ->capture_default_str();
  app.add_option("--idle-timeout", idle_timeout_s,
                 "seconds: a client that makes no call for this long while it holds nothing on "
                 "the device (no allocation, stream, event or module) is disconnected; 0: never")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--hello-timeout", hello_timeout_s,
                 "seconds from connecting within which the whole hello must have arrived; no "
                 "process is started for a connection before its hello is complete")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--max-pending", max_pending,
                 "connections still in their hello, in all; past it the oldest is closed")
      ->check(CLI::Range(size_t{1}, size_t{4096}))
      ->capture_default_str();
  app.add_option("--max-pending-per-peer", max_pending_per_peer,
                 "connections still in their hello from one address (Unix socket: one uid); "
                 "past it that peer's oldest is closed")
      ->check(CLI::Range(size_t{1}, size_t{4096}))
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  std::string stats_server;
  CLI::App* stats = app.add_subcommand(
      "stats", "print, as JSON, what each client of a running server holds, and exit");
  stats->add_option("--server", stats_server, "the server: HOST:PORT or unix:PATH")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (stats->parsed()) {
    flyt::Result<flyt::remote::Endpoint> endpoint = flyt::remote::ParseEndpoint(stats_server);
    if (!endpoint.ok()) return Fail("--server: " + endpoint.status().message());
    flyt::Result<flyt::remote::ServerStats> reply = flyt::remote::FetchStats(*endpoint);
    if (!reply.ok()) return Fail(reply.status().message());
    std::printf("%s\n", flyt::remote::StatsToJson(*reply).c_str());
    return 0;
  }
  if (listen.empty()) return Fail("--listen is required (or use the stats subcommand)");

  flyt::remote::ServerOptions options;
  for (const std::string& text : listen) {
    flyt::Result<flyt::remote::Endpoint> endpoint = flyt::remote::ParseEndpoint(text);
    if (!endpoint.ok()) return Fail("--listen: " + endpoint.status().message());
    options.listen.push_back(*endpoint);
  }
  options.memory_limit_bytes = memory_limit_mb << 20;
  options.launch_log_path = launch_log;
  options.max_clients = max_clients;
  options.max_pending = max_pending;
  options.max_pending_per_peer = std::min(max_pending_per_peer, max_pending);
  options.hello_timeout = std::chrono::milliseconds(static_cast<int64_t>(hello_timeout_s * 1000));
  options.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(idle_timeout_s * 1000));
  // Descriptors: a socket and a pidfd per client, a socket per pending hello, and a few more.
  if (flyt::Status s = RaiseDescriptorLimit(2 * max_clients + max_pending + 64); !s.ok()) {
    return Fail(s.message());
  }

  flyt::SetUpDaemon(log_level);

  flyt::remote::BackendFactory make_backend;
  if (backend_name == "sim") {
    flyt::remote::SimOptions sim;
    if (sm_count > 0) sim.sm_count = sm_count;
    make_backend = [sim]() -> flyt::Result<std::unique_ptr<flyt::remote::Backend>> {
      return flyt::remote::MakeSimBackend(sim);
    };
  } else {
#if FLYT_HAVE_DRIVER_BACKEND
    flyt::remote::DriverOptions driver;
    driver.device = device;
    if (sm_count > 0) driver.sm_count = sm_count;
    driver.library = cuda_library;
    make_backend = [driver]() -> flyt::Result<std::unique_ptr<flyt::remote::Backend>> {
      return flyt::remote::MakeDriverBackend(driver);
    };
#else
    return Fail("the driver backend is not part of this build (use --backend sim)");
#endif
  }

  // kProcess: the device is opened in each client's process only; this process checks that it
  // can be, from a short-lived child, and never initialises the driver itself.
  std::unique_ptr<flyt::remote::Backend> shared_backend;
  flyt::remote::BackendProbe probe;
  if (isolation == "process") {
    flyt::Result<flyt::remote::BackendProbe> probed = flyt::remote::ProbeBackend(make_backend);
    if (!probed.ok()) return Fail(backend_name + " backend: " + probed.status().message());
    probe = *probed;
  } else {
    flyt::Result<std::unique_ptr<flyt::remote::Backend>> made = make_backend();
    if (!made.ok()) return Fail(backend_name + " backend: " + made.status().message());
    shared_backend = std::move(made).value();
    probe = {shared_backend->Name(), shared_backend->Describe(),
             shared_backend->Identity().simulated};
  }
  if (probe.simulated) {
    spdlog::warn("SIMULATED device: kernels are recorded, not executed; results are not computed");
  }
  spdlog::info("backend {}: {}", probe.name, probe.description);
  spdlog::info("isolation: {}", isolation == "process"
                                    ? "a process per client"
                                    : "a thread per client (one client's device fault reaches all)");

  std::unique_ptr<flyt::remote::Server> server_owner =
      shared_backend ? std::make_unique<flyt::remote::Server>(*shared_backend, options)
                     : std::make_unique<flyt::remote::Server>(make_backend, options);
  flyt::remote::Server& server = *server_owner;
  if (flyt::Status s = server.Start(); !s.ok()) return Fail(s.message());
  for (const flyt::remote::Endpoint& endpoint : server.endpoints()) {
    spdlog::info("listening on {}", endpoint.ToString());
  }
  if (options.memory_limit_bytes != 0) {
    spdlog::info("memory limit {} MiB for all clients together", memory_limit_mb);
  }
  spdlog::info("at most {} clients; hello within {} s; {}; at most {} connections in their hello "
               "({} per peer)",
               options.max_clients, hello_timeout_s,
               options.idle_timeout.count() == 0
                   ? std::string("no idle timeout")
                   : fmt::format("idle clients holding nothing closed after {} s", idle_timeout_s),
               options.max_pending, options.max_pending_per_peer);
  flyt::WaitForTermination();
  server.Stop();
  spdlog::info("stopped");
  return 0;
}
