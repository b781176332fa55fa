// flyt-cluster-manager: the control plane. This file parses flags, loads the config and wires
// the store, the cluster state and the HTTP server together; the work is in src/cluster,
// src/sched and src/store.
//
// How the store is opened (never silently empty; --store-init) is cluster/store_open.h.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <spdlog/spdlog.h>

#include "cluster/auth.h"
#include "cluster/cluster.h"
#include "cluster/config.h"
#include "cluster/server.h"
#include "cluster/store_open.h"
#include "cluster/web_assets.h"
#include "common/clock.h"
#include "common/daemon.h"
#include "common/strings.h"
#include "store/store.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "flyt-cluster-manager: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  flyt::BlockTerminationSignals();
  CLI::App app{"flyt-cluster-manager — cluster inventory, reservation ledger, GPU-aware job queue"};
  app.set_version_flag("--version", std::string("flyt-cluster-manager ") + FLYT_VERSION);
  std::string config_path, listen, store_url, var_dir, log_level, web_dir;
  bool store_init = false;
  app.add_option("--config", config_path, "TOML config file (configs/cluster-manager.toml)")
      ->check(CLI::ExistingFile);
  app.add_option("--listen", listen, "HOST:PORT to serve on (default 127.0.0.1:12400)");
  app.add_option("--store", store_url,
                 "sqlite:PATH or postgresql://... (default sqlite:var/flyt.db)");
  app.add_flag("--store-init", store_init,
               "Create a new, empty store on purpose where there is none (a missing or 0-byte "
               "file, an empty database); refused where a store with data exists");
  app.add_option("--var-dir", var_dir, "Directory for the generated admin token (default var)");
  app.add_option("--web-dir", web_dir,
                 "The built dashboard (default: <bin>/../share/flyt/web)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  auto loaded = config_path.empty() ? flyt::cluster::ParseClusterConfig("", "(defaults)")
                                    : flyt::cluster::LoadClusterConfig(config_path);
  if (!loaded.ok()) return Fail(loaded.status().message());
  flyt::cluster::ClusterConfig config = std::move(loaded).value();
  if (!listen.empty()) {
    auto address = flyt::ParseHostPort(listen);
    if (!address.ok()) return Fail("--listen: " + address.status().message());
    config.listen_host = address->first;
    config.listen_port = address->second;
  }
  if (!store_url.empty()) config.store = store_url;
  if (!var_dir.empty()) config.var_dir = var_dir;
  if (!log_level.empty()) config.log_level = log_level;
  if (!web_dir.empty()) config.web_dir = web_dir;

  flyt::SetUpDaemon(config.log_level);

  const char* env_token = std::getenv("FLYT_ADMIN_TOKEN");
  auto auth = flyt::cluster::Auth::Build(config, env_token ? env_token : "");
  if (!auth.ok()) return Fail(auth.status().message());
  if (!auth->generated_token_path.empty()) {
    spdlog::warn("no token configured: {} the admin token {} (mode 0600); give it to flytctl "
                 "with --token or FLYT_TOKEN",
                 auth->generated_now ? "generated" : "using", auth->generated_token_path);
  }

  auto store = flyt::cluster::OpenClusterStore(config, store_init);
  if (!store.ok()) return Fail("store: " + store.status().message());
  spdlog::info("store: {} (schema version {})", (*store)->Describe(), (*store)->SchemaVersion());

  flyt::cluster::Cluster cluster(std::move(store).value(), config,
                                 flyt::SystemClock::Instance());
  if (flyt::Status s = cluster.Load(); !s.ok()) return Fail("loading the store: " + s.message());
  cluster.Start();

  std::optional<flyt::cluster::WebAssets> web;
  if (config.web_enabled) {
    const std::string dir =
        config.web_dir.empty() ? flyt::cluster::WebAssets::FindDefaultDir() : config.web_dir;
    auto assets = flyt::cluster::WebAssets::Load(dir.empty() ? "(none found)" : dir);
    if (assets.ok()) {
      spdlog::info("dashboard: {} ({} files)", assets->dir(), assets->size());
      web = std::move(assets).value();
    } else if (!config.web_dir.empty()) {
      // Asked for by name: a wrong path is a mistake to report, not to run around.
      cluster.Stop();
      return Fail("web.dir: " + assets.status().message());
    } else {
      spdlog::warn("dashboard not built (no share/flyt/web next to the program); / says how");
    }
  }
  flyt::cluster::ClusterServer server(cluster, std::move(auth->auth), config, FLYT_VERSION,
                                      std::move(web));
  if (flyt::Status s = server.Start(); !s.ok()) {
    cluster.Stop();
    return Fail(s.message());
  }
  spdlog::info("serving on http://{}:{} (dashboard at /, API at /api/v1, metrics at /metrics)",
               config.listen_host, server.port());

  flyt::WaitForTermination();
  server.Stop();
  cluster.Stop();
  spdlog::info("stopped");
  return 0;
}
