// ClientManagerConfig: flyt-client-manager's configuration, from a TOML file
// (configs/client-manager.toml documents every key) with command-line overrides applied on top.
//
// Loading refuses a broken file with the file, line, key and problem ("client-manager.toml:7:
// client.release_after: '30 parsecs' is not a duration (e.g. 500ms, 30s, 5m, 1h)") and unknown
// keys, so a typo never silently becomes a default. Plain values; copy freely.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace flyt::client_manager {

// What one remote lease asks for: the default profile ([lease]) with a program's own fields
// (FLYT_REMOTE_*) laid over it. Programs whose profiles are equal share one lease.
struct LeaseProfile {
  std::optional<uint32_t> sm_count;    // SMs of the GPU; exclusive with sm_percent
  std::optional<uint32_t> sm_percent;  // 1-100
  std::optional<uint64_t> memory_mb;   // required by the cluster manager
  std::string gpu_model;               // empty: any

  // The fields of `over` replace these (sm_count and sm_percent replace each other).
  LeaseProfile Overlaid(const LeaseProfile& over) const;
  // A canonical text form: equal profiles, equal keys.
  std::string Key() const;
  // {"sm_count"|"sm_percent", "memory_mb", "gpu_model"?} as the lease request and answers use.
  nlohmann::json ToJson() const;
  bool operator==(const LeaseProfile&) const = default;
};

struct ClientManagerConfig {
  // [client]
  std::string name;  // this client node's name at the cluster manager; default: the host name
  std::string socket_path = "/run/flyt/client-manager.sock";
  mode_t socket_mode = 0666;
  std::chrono::milliseconds release_after{30000};
  std::optional<std::chrono::milliseconds> renew_interval;  // default: ttl / 3
  int ttl_seconds = 60;
  std::chrono::milliseconds acquire_timeout{30000};
  int max_connections = 1024;  // programs connected at once; more are refused
  int max_profiles = 64;       // distinct lease profiles held or asked for at once
  // [cluster-manager]
  std::string cluster_manager;  // URL; required to run
  std::string token;            // a "client" token; default $FLYT_TOKEN
  // [lease]: the default profile, and the node to pin leases to (empty: the manager chooses)
  LeaseProfile lease;
  std::string node;
  // [log]
  std::string log_level = "info";

  std::chrono::milliseconds RenewInterval() const;
};

// Parses TOML text; `source` names it in messages.
Result<ClientManagerConfig> ParseClientManagerConfig(std::string_view text,
                                                     const std::string& source);
Result<ClientManagerConfig> LoadClientManagerConfig(const std::string& path);

// Checks what the file cannot check alone (after flags are applied): an address to reach, and a
// renew interval shorter than the lease's ttl.
Status ValidateClientManagerConfig(const ClientManagerConfig& config);

}  // namespace flyt::client_manager
