// flyt-cluster-manager: the control plane. This file parses flags, loads the config and wires
// the store, the cluster state and the HTTP server together; the work is in src/cluster,
// src/sched and src/store.
//
// A store that has existed never silently restarts empty: the manager keeps a record of each
// store it created or used (var_dir/store.created: "<created_ms> <store>" per line, the store's
// own meta 'created_ms'), and refuses to start on a store that is missing while the record names
// it, on an empty (0-byte) file or a database without flyt's schema, or on a store created at
// another time than the record says (it was replaced). `--store-init` creates a new, empty store
// on purpose and refuses where one with data exists. Only a first start (no file, no record)
// creates one without being asked.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <spdlog/spdlog.h>
#include <sstream>

#include "cluster/auth.h"
#include "cluster/cluster.h"
#include "cluster/config.h"
#include "cluster/server.h"
#include "cluster/web_assets.h"
#include "common/clock.h"
#include "common/daemon.h"
#include "common/strings.h"
#include "gpu/json.h"
#include "store/store.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "flyt-cluster-manager: %s\n", message.c_str());
  return 1;
}

constexpr const char* kStoreRecordFile = "store.created";

// var_dir/store.created: the creation time of each store this manager has used, by Describe().
std::map<std::string, int64_t> ReadStoreRecord(const std::filesystem::path& path) {
  std::map<std::string, int64_t> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int64_t created_ms = 0;
    std::string store;
    if (fields >> created_ms >> store) out[store] = created_ms;
  }
  return out;
}

flyt::Status WriteStoreRecord(const std::filesystem::path& path,
                              const std::map<std::string, int64_t>& record) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const std::filesystem::path temp = path.string() + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    for (const auto& [store, created_ms] : record) out << created_ms << " " << store << "\n";
    out.flush();
    if (!out) return flyt::Internal("cannot write " + temp.string());
  }
  std::filesystem::rename(temp, path, ec);
  if (ec) return flyt::ErrnoError("rename " + temp.string(), ec.value());
  return flyt::Status::Ok();
}

std::string FormatMs(int64_t ms) {
  return flyt::gpu::FormatTime(std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
}

// Opens the store as the file comment says; the error names the store and what to do.
flyt::Result<std::unique_ptr<flyt::store::Store>> OpenStore(const flyt::cluster::ClusterConfig& config,
                                                            bool init) {
  using flyt::store::OpenMode;
  using flyt::store::Store;
  FLYT_ASSIGN_OR_RETURN(const std::string describe, Store::DescribeUrl(config.store));
  const std::filesystem::path record_path =
      std::filesystem::path(config.var_dir) / kStoreRecordFile;
  std::map<std::string, int64_t> record = ReadStoreRecord(record_path);
  const auto recorded = record.find(describe);
  const bool sqlite = flyt::StartsWith(describe, "sqlite:");
  auto opened = Store::Open(config.store, OpenMode::kExisting);
  const std::string reason = opened.ok() ? std::string() : opened.status().reason();
  const bool missing = reason == flyt::store::kStoreMissingReason;
  const bool uninitialized = reason == flyt::store::kStoreUninitializedReason;
  const std::string what_to_do =
      "restore it from a backup; or, to start a new, empty store on purpose (every lease and job "
      "it held is forgotten), run flyt-cluster-manager --store-init";
  if (init) {
    if (opened.ok()) {
      FLYT_ASSIGN_OR_RETURN(const int64_t revision, (*opened)->Revision());
      if (revision > 0) {
        return flyt::Status(flyt::StatusCode::kFailedPrecondition,
                            describe + " already holds a flyt store (created " +
                                FormatMs((*opened)->CreatedMs()) + ", " +
                                std::to_string(revision) +
                                " changes): --store-init creates a store only where there is "
                                "none; to start over, stop its managers and move it away first");
      }
    } else if (missing || uninitialized) {
      opened = Store::Open(config.store, OpenMode::kCreate);
      if (opened.ok()) spdlog::warn("--store-init: created a new, empty store {}", describe);
    }
  } else if (missing && recorded == record.end()) {
    // The first start: no store, and none was ever made here.
    opened = Store::Open(config.store, OpenMode::kCreate);
    if (opened.ok()) spdlog::info("created a new store {}", describe);
  } else if (uninitialized && !sqlite && recorded == record.end()) {
    // A PostgreSQL database made for flyt (createdb) starts empty: the first start fills it.
    opened = Store::Open(config.store, OpenMode::kCreate);
    if (opened.ok()) spdlog::info("created flyt's tables in {}", describe);
  } else if (missing || uninitialized) {
    std::string message = opened.status().message();
    if (recorded != record.end()) {
      message += ", but this manager's record (" + record_path.string() + ") says a store was "
                 "created there at " + FormatMs(recorded->second);
    }
    return flyt::Status(flyt::StatusCode::kFailedPrecondition,
                        message + "; refusing to start on an empty store: " + what_to_do);
  }
  if (!opened.ok()) {
    if (opened.status().reason() == flyt::store::kStoreDamagedReason) {
      return opened.status().WithContext(
          "refusing to start on a damaged store; restore it from a backup (or move it away and "
          "run flyt-cluster-manager --store-init to start a new, empty one)");
    }
    return opened.status();
  }
  const int64_t created_ms = (*opened)->CreatedMs();
  if (!init && recorded != record.end() && recorded->second != created_ms) {
    return flyt::Status(flyt::StatusCode::kFailedPrecondition,
                        describe + " was created at " + FormatMs(created_ms) +
                            ", but this manager's record (" + record_path.string() +
                            ") says its store was created at " + FormatMs(recorded->second) +
                            ": it was replaced by another one; " + what_to_do);
  }
  if (recorded == record.end() || recorded->second != created_ms) {
    record[describe] = created_ms;
    FLYT_RETURN_IF_ERROR(WriteStoreRecord(record_path, record));
  }
  return std::move(opened).value();
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

  auto store = OpenStore(config, store_init);
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
