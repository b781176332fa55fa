// flyt-client-manager: the per-client-node daemon that leases remote GPU shares from the cluster
// manager for programs using flyt's libcudart without FLYT_SERVER. This file parses flags, loads
// the config and starts the ClientManager; the work is in src/client_manager.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <spdlog/spdlog.h>

#include "client_manager/config.h"
#include "client_manager/manager.h"
#include "common/clock.h"
#include "common/daemon.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "flyt-client-manager: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  flyt::BlockTerminationSignals();
  CLI::App app{
      "flyt-client-manager — leases remote GPU shares from flyt-cluster-manager for the CUDA "
      "programs of this machine (flyt's libcudart.so.13 without FLYT_SERVER)"};
  app.set_version_flag("--version", std::string("flyt-client-manager ") + FLYT_VERSION);
  std::string config_path, socket, cluster_manager, token, log_level;
  app.add_option("--config", config_path, "TOML config file (configs/client-manager.toml)")
      ->check(CLI::ExistingFile);
  app.add_option("--socket", socket,
                 "Unix socket programs connect to (default /run/flyt/client-manager.sock)");
  app.add_option("--cluster-manager", cluster_manager, "Cluster manager URL");
  app.add_option("--token", token,
                 "Token (role client) for the cluster manager (default: [cluster-manager] token, "
                 "else $FLYT_TOKEN)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  namespace cm = flyt::client_manager;
  flyt::Result<cm::ClientManagerConfig> loaded =
      config_path.empty() ? cm::ParseClientManagerConfig("", "(defaults)")
                          : cm::LoadClientManagerConfig(config_path);
  if (!loaded.ok()) return Fail(loaded.status().message());
  cm::ClientManagerConfig config = std::move(loaded).value();
  if (!socket.empty()) config.socket_path = socket;
  if (!cluster_manager.empty()) config.cluster_manager = cluster_manager;
  if (!token.empty()) config.token = token;
  if (!log_level.empty()) config.log_level = log_level;
  if (config.token.empty() && std::getenv("FLYT_TOKEN") != nullptr) {
    config.token = std::getenv("FLYT_TOKEN");
  }
  if (flyt::Status s = cm::ValidateClientManagerConfig(config); !s.ok()) return Fail(s.message());

  flyt::SetUpDaemon(config.log_level);
  cm::ClientManager manager(config, flyt::SystemClock::Instance());
  if (flyt::Status s = manager.Start(); !s.ok()) return Fail(s.message());
  spdlog::info("client {}: serving programs on {} (mode {:04o}); leases from {} ({}), ttl {} s, "
               "renewed every {} ms, released {} ms after the last program",
               config.name, config.socket_path, static_cast<unsigned>(config.socket_mode),
               config.cluster_manager, config.token.empty() ? "no token" : "with a token",
               config.ttl_seconds, config.RenewInterval().count(), config.release_after.count());
  flyt::WaitForTermination();
  manager.Stop();
  spdlog::info("stopped");
  return 0;
}
