// NodeConfig: flyt-node-manager's configuration, from a TOML file (configs/node-manager.toml
// documents every key) with command-line overrides applied on top.
//
// Loading refuses a broken file with the file, line, key and problem ("node-manager.toml:12:
// monitor.interval_ms: value -5 is out of range [100, 3600000]"), and unknown keys, so a typo
// never silently becomes a default. Plain values; copy freely.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/http.h"
#include "common/status.h"
#include "trace/service.h"

namespace flyt::node {

// [gpu-servers]: flyt-gpu-server processes this node manager starts for the cluster's remote
// leases (gpu_servers.h). Off by default.
struct GpuServersConfig {
  bool enabled = false;
  std::string binary;  // empty: flyt-gpu-server next to the node manager's executable, else PATH
  std::string backend = "driver";        // "driver" or "sim"
  std::string listen_host = "127.0.0.1";  // the address clients reach (never a wildcard)
  int port_min = 12500;
  int port_max = 12599;
  std::string state_dir = "/var/lib/flyt/gpu-servers";
  std::chrono::seconds drain_grace{10};
  std::chrono::seconds start_timeout{10};
  bool shared_all = false;          // shared = "all"
  std::vector<std::string> shared;  // UUIDs of GPUs under MPS that take several leases
  std::string mps_pipe_dir;         // empty: $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps
  bool mps_start = false;           // start nvidia-cuda-mps-control -d for a shared GPU
  // How often the MPS control daemon is asked whether it still answers (mps_watch.h).
  std::chrono::seconds mps_check_interval{5};
  // Each server's state_dir/<lease>.log is rotated past this size, keeping log_files old ones.
  uint64_t log_max_bytes = 10 << 20;
  int log_files = 3;
  std::vector<std::string> extra_args;
};

// [profile]: the continuous usage profiles of the node's GPUs (profiling.h). On by default.
struct ProfileConfig {
  bool enabled = true;
  std::chrono::milliseconds allocated_idle_after{300000};  // "5m"
  std::chrono::milliseconds state_hold{10000};              // "10s"
  std::chrono::milliseconds cycle_window{600000};           // "10m"
  std::chrono::milliseconds analysis_interval{5000};        // "5s"
  double idle_util_percent = 2;
  double min_cycles = 3;
};

// [kubernetes]: Kubernetes node annotations with each GPU's usage profile
// (kube_annotations.h). The empty strings are resolved from the environment at start-up
// (ResolveKubernetes), not here.
enum class KubernetesMode { kAuto, kOn, kOff };
struct KubernetesConfig {
  KubernetesMode mode = KubernetesMode::kAuto;  // enabled = "auto" | true | false
  std::string node_name;   // empty: $NODE_NAME
  std::string api_server;  // empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::chrono::milliseconds min_interval{30000};
  std::chrono::milliseconds timeout{10000};
  double util_threshold_percent = 10;
  double memory_threshold_percent = 5;
  double period_threshold_percent = 10;
};

struct NodeConfig {
  // [node]
  std::string name;  // default: the host name
  std::map<std::string, std::string> labels;
  // [http]
  std::string listen_host = "127.0.0.1";
  int listen_port = 12401;
  std::string bearer_token;  // empty: no authentication
  size_t max_body_bytes = 64 * 1024;
  // Connection limits of the HTTP server (threads, per-peer and total caps, request deadline,
  // idle timeout); max_body_bytes above is the one that counts, not http.max_body_bytes.
  http::ServerOptions http;
  // [monitor]
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds cache_ttl{5000};
  std::chrono::seconds history_retention{3600};
  size_t max_sessions = 64;
  std::chrono::seconds session_expiry{24 * 3600};
  // [nvml]
  std::string nvml_library;  // empty: $FLYT_NVML_LIBRARY or libnvidia-ml.so.1
  // [cluster-manager]
  std::string cluster_manager;  // empty: standalone
  std::string cluster_manager_token;  // a "node" token of the manager; default $FLYT_TOKEN
  std::chrono::seconds heartbeat_interval{5};
  std::string advertise_url;  // where the manager reaches this node's API; default from listen
  // [trace]: the CUDA tracer (eBPF). Defaults are TraceOptions' own.
  trace::TraceOptions trace;
  // [gpu-servers]
  GpuServersConfig gpu_servers;
  // [profile]
  ProfileConfig profile;
  // [kubernetes]
  KubernetesConfig kubernetes;
  // [log]
  std::string log_level = "info";
};

// Parses TOML text; `source` names it in messages.
Result<NodeConfig> ParseNodeConfig(std::string_view text, const std::string& source);
Result<NodeConfig> LoadNodeConfig(const std::string& path);

// "HOST:PORT" (IPv6 as "[::1]:12401") into the config; errors say what is wrong.
Status SetListen(NodeConfig& config, const std::string& host_port);

// Refuses [gpu-servers] enabled on an API that listens beyond loopback without [http]
// bearer_token: whoever reached it could start GPU servers with secrets of their own, or drain
// other leases' servers. Checked after the command line's overrides.
Status CheckGpuServersAccess(const NodeConfig& config);

}  // namespace flyt::node
