// flyt-gpu-server: runs remote clients' CUDA calls on one device. This file parses flags and wires
// a backend (the simulated device, or the real GPU through the driver) to the server core; the
// work is in src/remote (server, sim_backend, driver_backend) and src/cuda_driver.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include "common/daemon.h"
#include "gpu_server/server_files.h"
#include "remote_client/debug_stats.h"
#include "remote_driver/driver_backend.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"

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
  int sm_percent = 0;
  int sm_granularity = 8;
  std::string secret_file, ready_file;
  double stop_grace_s = 10;
  std::string launch_log, log_level = "info", cuda_library = "libcuda.so.1";
  app.add_option("--backend", backend_name, "sim (simulated device, no GPU) or driver (libcuda)")
      ->check(CLI::IsMember({"sim", "driver"}));
  app.add_option("--listen", listen,
                 "HOST:PORT, [ADDR]:PORT or unix:PATH to accept clients on (repeatable)");
  app.add_option("--device", device, "CUDA device ordinal to serve (driver backend)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--memory-limit-mb", memory_limit_mb,
                 "device memory all clients together may allocate, in MiB (0: the device's)");
  CLI::Option* sm_count_option =
      app.add_option("--sm-count", sm_count,
                     "SMs each client may use (0: all); the device grants them in its own steps "
                     "(driver: MPS execution affinity; sim: rounded up to --sm-granularity)")
          ->check(CLI::NonNegativeNumber);
  app.add_option("--sm-percent", sm_percent,
                 "the SMs each client may use as a percentage of the device's (1-100), rounded "
                 "up to whole SMs")
      ->check(CLI::Range(1, 100))
      ->excludes(sm_count_option);
  app.add_option("--sm-granularity", sm_granularity,
                 "sim: the step in which the simulated device grants SMs (a share is rounded up "
                 "to it); driver: what probe reports where it cannot measure it")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--secret-file", secret_file,
                 "file (mode 0600) holding the secret every client's hello must carry "
                 "(FLYT_SERVER_SECRET on the client side); also $FLYT_SERVER_SECRET_FILE. "
                 "Without it any client that reaches the socket is served")
      ->envname("FLYT_SERVER_SECRET_FILE");
  app.add_option("--ready-file", ready_file,
                 "once listening, write a JSON object here (atomically): address, pid, SM counts, "
                 "memory, backend; removed when the server exits");
  app.add_option("--stop-grace", stop_grace_s,
                 "seconds: on SIGTERM, connected clients may go on this long (no new ones are "
                 "accepted) before their connections are closed and their processes killed")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
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
  bool shared_memory = defaults.shared_memory;
  uint64_t shm_arena_mb = defaults.shm_layout.arena_bytes >> 20;
  uint64_t shm_ring_kb = defaults.shm_layout.ring_bytes >> 10;
  app.add_option("--shared-memory", shared_memory,
                 "true: a client on this host that connects over a Unix socket exchanges its "
                 "calls and pinned-memory copies through shared memory (a memfd) instead of the "
                 "socket; false: always the socket")
      ->capture_default_str();
  app.add_option("--shm-arena-mb", shm_arena_mb,
                 "MiB of shared memory per client that back its pinned host memory "
                 "(cudaMallocHost); copies from and into it move without crossing the rings")
      ->check(CLI::Range(uint64_t{0}, uint64_t{65536}))
      ->capture_default_str();
  app.add_option("--shm-ring-kb", shm_ring_kb,
                 "KiB of each of a shared-memory client's two message rings (a power of two, "
                 "64 to 262144)")
      ->check(CLI::Range(uint64_t{64}, uint64_t{262144}))
      ->capture_default_str();
  double claim_timeout_s = 60;
  app.add_option("--claim-timeout", claim_timeout_s,
                 "seconds a client moved here (live migration) has to arrive before what it "
                 "would get is released")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  std::string migration_fault;
  app.add_option("--test-migration-fault", migration_fault,
                 "for tests: export:BYTES exits a client's process after sending BYTES of a "
                 "move; import:BYTES after receiving them")
      ->group("");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  std::string stats_server;
  CLI::App* stats = app.add_subcommand(
      "stats", "print, as JSON, what each client of a running server holds, and exit");
  stats->add_option("--server", stats_server, "the server: HOST:PORT or unix:PATH")->required();
  std::string stats_secret_file;
  stats->add_option("--secret-file", stats_secret_file,
                    "the server's secret file, when it has one (else $FLYT_SERVER_SECRET)");
  CLI::App* migrate_cmd = app.add_subcommand(
      "migrate", "move a client of a running server to another server while it runs (its "
                 "device memory, modules, streams, events and graphs, at the same device "
                 "addresses); print the outcome as JSON; exit 0 when it moved");
  std::string migrate_server, migrate_to, migrate_secret_file, migrate_to_secret_file;
  uint64_t migrate_client = 0;
  double migrate_timeout_s = 30;
  migrate_cmd->add_option("--server", migrate_server, "the client's server: HOST:PORT or unix:PATH")
      ->required();
  migrate_cmd->add_option("--client", migrate_client, "the client's id (as stats lists it)")
      ->required();
  migrate_cmd->add_option("--to", migrate_to,
                          "the new server, as the client reaches it: HOST:PORT or unix:PATH")
      ->required();
  migrate_cmd->add_option("--secret-file", migrate_secret_file,
                          "the client's server's secret file (else $FLYT_SERVER_SECRET)");
  migrate_cmd->add_option("--to-secret-file", migrate_to_secret_file,
                          "the new server's secret file, when it has one");
  migrate_cmd->add_option("--timeout", migrate_timeout_s,
                          "seconds to wait for the client's next call (it moves at a call)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  CLI::App* resize_cmd = app.add_subcommand(
      "resize", "give the clients of a running server a new SM share and/or memory limit without "
                "restarting them (each applies the share at its next call); print the outcome as "
                "JSON; exit 0 when every connected client applied it, 3 when some did not (yet)");
  std::string resize_server, resize_secret_file;
  std::optional<uint32_t> resize_sm_count;
  std::optional<uint64_t> resize_memory_limit_mb;
  double resize_timeout_s = 30;
  resize_cmd->add_option("--server", resize_server, "the server: unix:PATH (its own user or root)")
      ->required();
  resize_cmd->add_option("--secret-file", resize_secret_file,
                         "the server's secret file, when it has one (else $FLYT_SERVER_SECRET)");
  resize_cmd->add_option("--sm-count", resize_sm_count,
                         "the SMs each client runs on (1..the device's; rounded up to the SM "
                         "granularity)");
  resize_cmd->add_option("--memory-limit-mb", resize_memory_limit_mb,
                         "the server's memory limit for all clients together (0: none); refused "
                         "when below what they hold now");
  resize_cmd->add_option("--timeout", resize_timeout_s,
                         "seconds to wait for the connected clients to apply the SM share")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  CLI::App* probe_cmd = app.add_subcommand(
      "probe", "print, as JSON, the device this server would serve (SMs, SM granularity, memory, "
               "name, backend, MPS), and exit; non-zero with the reason when it cannot be used");
  probe_cmd->add_option("--backend", backend_name, "sim or driver")
      ->check(CLI::IsMember({"sim", "driver"}));
  probe_cmd->add_option("--device", device, "CUDA device ordinal (driver backend)")
      ->check(CLI::NonNegativeNumber);
  probe_cmd->add_option("--sm-granularity", sm_granularity,
                        "the granularity reported where it cannot be measured (and the sim's)")
      ->check(CLI::Range(1, 1024));
  probe_cmd->add_option("--cuda-library", cuda_library, "driver library to load");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (stats->parsed()) {
    flyt::Result<flyt::remote::Endpoint> endpoint = flyt::remote::ParseEndpoint(stats_server);
    if (!endpoint.ok()) return Fail("--server: " + endpoint.status().message());
    std::string secret;
    if (!stats_secret_file.empty()) {
      flyt::Result<std::string> read = flyt::gpu_server::ReadSecretFile(stats_secret_file);
      if (!read.ok()) return Fail(read.status().message());
      secret = std::move(read).value();
    } else if (const char* env = std::getenv("FLYT_SERVER_SECRET")) {
      secret = env;
    }
    flyt::Result<flyt::remote::ServerStats> reply = flyt::remote::FetchStats(*endpoint, secret);
    if (!reply.ok()) return Fail(reply.status().message());
    std::printf("%s\n", flyt::remote::StatsToJson(*reply).c_str());
    return 0;
  }
  if (migrate_cmd->parsed()) {
    flyt::Result<flyt::remote::Endpoint> endpoint = flyt::remote::ParseEndpoint(migrate_server);
    if (!endpoint.ok()) return Fail("--server: " + endpoint.status().message());
    if (flyt::Result<flyt::remote::Endpoint> to = flyt::remote::ParseEndpoint(migrate_to);
        !to.ok()) {
      return Fail("--to: " + to.status().message());
    }
    std::string secret, to_secret;
    for (auto [file, out] : {std::pair{&migrate_secret_file, &secret},
                             std::pair{&migrate_to_secret_file, &to_secret}}) {
      if (file->empty()) continue;
      flyt::Result<std::string> read = flyt::gpu_server::ReadSecretFile(*file);
      if (!read.ok()) return Fail(read.status().message());
      *out = std::move(read).value();
    }
    if (migrate_secret_file.empty()) {
      if (const char* env = std::getenv("FLYT_SERVER_SECRET")) secret = env;
    }
    flyt::Result<flyt::remote::MigrateClientReply> reply = flyt::remote::RequestMigration(
        *endpoint, secret, migrate_client, migrate_to, to_secret,
        static_cast<uint32_t>(migrate_timeout_s * 1000));
    if (!reply.ok()) return Fail(reply.status().message());
    std::printf("%s\n", flyt::remote::MigrationToJson(migrate_client, *reply).c_str());
    return reply->outcome == "moved" ? 0 : (reply->outcome == "pending" ? 3 : 1);
  }
  if (resize_cmd->parsed()) {
    flyt::Result<flyt::remote::Endpoint> endpoint = flyt::remote::ParseEndpoint(resize_server);
    if (!endpoint.ok()) return Fail("--server: " + endpoint.status().message());
    if (!resize_sm_count && !resize_memory_limit_mb) {
      return Fail("resize: give --sm-count, --memory-limit-mb or both");
    }
    std::string secret;
    if (!resize_secret_file.empty()) {
      flyt::Result<std::string> read = flyt::gpu_server::ReadSecretFile(resize_secret_file);
      if (!read.ok()) return Fail(read.status().message());
      secret = std::move(read).value();
    } else if (const char* env = std::getenv("FLYT_SERVER_SECRET")) {
      secret = env;
    }
    flyt::Result<flyt::remote::ResizeOutcome> outcome = flyt::remote::RequestResize(
        *endpoint, secret, resize_sm_count, resize_memory_limit_mb,
        static_cast<uint32_t>(resize_timeout_s * 1000));
    if (!outcome.ok()) return Fail(outcome.status().message());
    std::printf("%s\n", flyt::remote::ResizeToJson(*outcome).c_str());
    return outcome->clients_applied == outcome->clients ? 0 : 3;
  }
  if (probe_cmd->parsed()) {
    flyt::Result<flyt::remote::DeviceIdentity> device_identity = [&]()
        -> flyt::Result<flyt::remote::DeviceIdentity> {
      if (backend_name == "sim") {
        flyt::remote::SimOptions sim;
        sim.sm_granularity = sm_granularity;
        return flyt::remote::MakeSimBackend(sim)->Identity();
      }
#if FLYT_HAVE_DRIVER_BACKEND
      flyt::remote::DriverOptions driver;
      driver.device = device;
      driver.library = cuda_library;
      driver.measure_sm_granularity = true;
      driver.default_sm_granularity = sm_granularity;
      FLYT_ASSIGN_OR_RETURN(std::unique_ptr<flyt::remote::Backend> backend,
                            flyt::remote::MakeDriverBackend(driver));
      return backend->Identity();
#else
      return flyt::NotSupported("the driver backend is not part of this build");
#endif
    }();
    if (!device_identity.ok()) {
      return Fail(backend_name + " backend: " + device_identity.status().message());
    }
    std::printf("%s\n", flyt::gpu_server::ProbeJson(*device_identity, backend_name).c_str());
    return 0;
  }
  if (listen.empty()) return Fail("--listen is required (or use the stats or probe subcommand)");
  std::string secret;
  if (!secret_file.empty()) {
    flyt::Result<std::string> read = flyt::gpu_server::ReadSecretFile(secret_file);
    if (!read.ok()) return Fail(read.status().message());
    secret = std::move(read).value();
  }

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
  options.stop_grace = std::chrono::milliseconds(static_cast<int64_t>(stop_grace_s * 1000));
  options.secret = std::move(secret);
  options.shared_memory = shared_memory;
  options.shm_layout.arena_bytes = shm_arena_mb << 20;
  options.shm_layout.ring_bytes = shm_ring_kb << 10;
  options.claim_timeout = std::chrono::milliseconds(static_cast<int64_t>(claim_timeout_s * 1000));
  if (!migration_fault.empty()) {
    auto colon = migration_fault.find(':');
    std::string side = migration_fault.substr(0, colon);
    uint64_t bytes = colon == std::string::npos
                         ? 0
                         : std::strtoull(migration_fault.c_str() + colon + 1, nullptr, 10);
    if ((side != "export" && side != "import") || bytes == 0) {
      return Fail("--test-migration-fault: export:BYTES or import:BYTES");
    }
    (side == "export" ? options.test_exit_after_export_bytes
                      : options.test_exit_after_import_bytes) = bytes;
  }
  if ((options.shm_layout.ring_bytes & (options.shm_layout.ring_bytes - 1)) != 0) {
    return Fail("--shm-ring-kb must be a power of two (64, 128, ... 262144)");
  }
  // Descriptors: a socket, a pidfd and three of shared memory per client, a socket per pending
  // hello, and a few more.
  if (flyt::Status s = RaiseDescriptorLimit(5 * max_clients + max_pending + 64); !s.ok()) {
    return Fail(s.message());
  }

  flyt::SetUpDaemon(log_level);

  flyt::remote::BackendFactory make_backend;
#if FLYT_HAVE_DRIVER_BACKEND
  flyt::remote::DriverOptions driver;
#endif
  if (backend_name == "sim") {
    flyt::remote::SimOptions sim;
    sim.sm_granularity = sm_granularity;
    if (sm_count > 0) {
      if (sm_count > sim.sm_count) {
        return Fail("--sm-count " + std::to_string(sm_count) + " is outside 1.." +
                    std::to_string(sim.sm_count) + " (the SMs of the simulated device)");
      }
      sim.sm_share = sm_count;
    } else if (sm_percent > 0) {
      sim.sm_share = (sm_percent * sim.sm_count + 99) / 100;
    }
    make_backend = [sim]() -> flyt::Result<std::unique_ptr<flyt::remote::Backend>> {
      return flyt::remote::MakeSimBackend(sim);
    };
  } else {
#if FLYT_HAVE_DRIVER_BACKEND
    driver.device = device;
    if (sm_count > 0) driver.sm_count = sm_count;
    if (sm_percent > 0) driver.sm_percent = sm_percent;
    driver.library = cuda_library;
    driver.default_sm_granularity = sm_granularity;
    make_backend = [driver]() -> flyt::Result<std::unique_ptr<flyt::remote::Backend>> {
      return flyt::remote::MakeDriverBackend(driver);
    };
#else
    return Fail("the driver backend is not part of this build (use --backend sim)");
#endif
  }

  // The device is checked from a short-lived child first: it reports the SM grant, from which
  // the MPS limits of the client processes follow, and this process never initialises the
  // driver (kProcess: the device is opened in each client's process only).
  flyt::Result<flyt::remote::BackendProbe> probed = flyt::remote::ProbeBackend(make_backend);
  if (!probed.ok()) return Fail(backend_name + " backend: " + probed.status().message());
  flyt::remote::BackendProbe probe = *probed;
#if FLYT_HAVE_DRIVER_BACKEND
  if (backend_name == "driver") {
    // Each client process is an MPS client with this memory limit (the MPS server enforces it);
    // its SM share is its context's execution affinity. Without MPS the variable is ignored.
    std::optional<int> granted;
    if (sm_count > 0 || sm_percent > 0) granted = probe.identity.sm_count_granted;
    driver.environment = flyt::remote::MpsEnvironment(device, memory_limit_mb);
    for (const auto& [name, value] : driver.environment) {
      spdlog::info("client processes run with {}={}", name, value);
    }
    driver.probed_granted_sm_count = granted;
    make_backend = [driver]() -> flyt::Result<std::unique_ptr<flyt::remote::Backend>> {
      return flyt::remote::MakeDriverBackend(driver);
    };
  }
#endif
  std::unique_ptr<flyt::remote::Backend> shared_backend;
  if (isolation != "process") {
    flyt::Result<std::unique_ptr<flyt::remote::Backend>> made = make_backend();
    if (!made.ok()) return Fail(backend_name + " backend: " + made.status().message());
    shared_backend = std::move(made).value();
  }
  if (memory_limit_mb != 0 && (memory_limit_mb << 20) > probe.identity.total_memory_bytes) {
    spdlog::warn("--memory-limit-mb {} is more than the device's {} MiB", memory_limit_mb,
                 probe.identity.total_memory_bytes >> 20);
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
  if (options.shared_memory) {
    spdlog::info("shared memory for clients on this host over a Unix socket: {} MiB pinned-memory "
                 "arena and two {} KiB rings each",
                 shm_arena_mb, shm_ring_kb);
  }
  if (options.memory_limit_bytes != 0) {
    spdlog::info("memory limit {} MiB for all clients together", memory_limit_mb);
  }
  if (sm_count > 0 || sm_percent > 0) {
    spdlog::info("SM share: each client sees {} of the device's {} SMs",
                 probe.identity.sm_count_granted, probe.identity.sm_count_total);
  }
  if (!options.secret.empty()) {
    spdlog::info("clients must present the secret of {} (others are refused)", secret_file);
  }
  if (!ready_file.empty()) {
    flyt::gpu_server::ReadyInfo ready;
    ready.address = server.endpoints().front().ToString();
    ready.pid = ::getpid();
    ready.device = probe.identity;
    ready.backend = probe.name;
    if (memory_limit_mb != 0) ready.memory_limit_mb = memory_limit_mb;
    if (flyt::Status s =
            flyt::gpu_server::WriteFileAtomically(ready_file, flyt::gpu_server::ReadyJson(ready));
        !s.ok()) {
      server.Stop();
      return Fail("--ready-file: " + s.message());
    }
  }
  spdlog::info("at most {} clients; hello within {} s; {}; at most {} connections in their hello "
               "({} per peer)",
               options.max_clients, hello_timeout_s,
               options.idle_timeout.count() == 0
                   ? std::string("no idle timeout")
                   : fmt::format("idle clients holding nothing closed after {} s", idle_timeout_s),
               options.max_pending, options.max_pending_per_peer);
  flyt::WaitForTermination();
  // Draining: no new clients; those connected may finish within --stop-grace.
  if (!ready_file.empty()) ::unlink(ready_file.c_str());
  server.Drain(options.stop_grace);
  spdlog::info("stopped");
  return 0;
}
