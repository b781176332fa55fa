#include "node/config.h"

#include <gtest/gtest.h>

namespace flyt::node {
namespace {

TEST(NodeConfigTest, ShippedConfigLoadsAndMatchesTheDefaults) {
  auto c = LoadNodeConfig(std::string(FLYT_SOURCE_DIR) + "/configs/node-manager.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listen_host, "127.0.0.1");
  EXPECT_EQ(c->listen_port, 12401);
  EXPECT_EQ(c->interval, std::chrono::milliseconds(1000));
  EXPECT_EQ(c->cache_ttl, std::chrono::milliseconds(5000));
  EXPECT_TRUE(c->cluster_manager.empty());
  const trace::TraceOptions t;
  EXPECT_EQ(c->trace.mode, t.mode);
  EXPECT_EQ(c->trace.ring_buffer_bytes, t.ring_buffer_bytes);
  EXPECT_EQ(c->trace.drain_interval_ms, t.drain_interval_ms);
  EXPECT_EQ(c->trace.high_water_percent, t.high_water_percent);
  EXPECT_EQ(c->trace.max_processes, t.max_processes);
  EXPECT_EQ(c->trace.max_streams_per_process, t.max_streams_per_process);
  EXPECT_EQ(c->trace.max_allocations_per_process, t.max_allocations_per_process);
  EXPECT_EQ(c->trace.max_kernel_names_per_process, t.max_kernel_names_per_process);
  EXPECT_EQ(c->trace.top_kernels, t.top_kernels);
  EXPECT_EQ(c->trace.exited_keep_seconds, t.exited_keep_seconds);
  EXPECT_EQ(c->trace.rate_window_seconds, t.rate_window_seconds);
  EXPECT_EQ(c->trace.watch_setenv, t.watch_setenv);
  EXPECT_EQ(c->trace.launch_results, t.launch_results);
  EXPECT_EQ(c->trace.library_dirs, t.library_dirs);
  const http::ServerOptions d;
  EXPECT_EQ(c->http.threads, d.threads);
  EXPECT_EQ(c->http.max_connections_per_peer, d.max_connections_per_peer);
  EXPECT_EQ(c->http.max_connections, d.max_connections);
  EXPECT_EQ(c->http.request_deadline_seconds, d.request_deadline_seconds);
  EXPECT_EQ(c->http.idle_timeout_seconds, d.idle_timeout_seconds);
  const GpuServersConfig g;
  EXPECT_EQ(c->gpu_servers.enabled, g.enabled);
  EXPECT_EQ(c->gpu_servers.binary, g.binary);
  EXPECT_EQ(c->gpu_servers.backend, g.backend);
  EXPECT_EQ(c->gpu_servers.listen_host, g.listen_host);
  EXPECT_EQ(c->gpu_servers.port_min, g.port_min);
  EXPECT_EQ(c->gpu_servers.port_max, g.port_max);
  EXPECT_EQ(c->gpu_servers.state_dir, g.state_dir);
  EXPECT_EQ(c->gpu_servers.drain_grace, g.drain_grace);
  EXPECT_EQ(c->gpu_servers.start_timeout, g.start_timeout);
  EXPECT_EQ(c->gpu_servers.shared_all, g.shared_all);
  EXPECT_EQ(c->gpu_servers.shared, g.shared);
  EXPECT_EQ(c->gpu_servers.mps_pipe_dir, g.mps_pipe_dir);
  EXPECT_EQ(c->gpu_servers.mps_start, g.mps_start);
  EXPECT_EQ(c->gpu_servers.mps_check_interval, g.mps_check_interval);
  EXPECT_EQ(c->gpu_servers.log_max_bytes, g.log_max_bytes);
  EXPECT_EQ(c->gpu_servers.log_files, g.log_files);
  EXPECT_EQ(c->gpu_servers.extra_args, g.extra_args);
}

TEST(NodeConfigTest, EveryGpuServersKeyIsRead) {
  auto c = ParseNodeConfig(R"(
[gpu-servers]
enabled = true
binary = "/opt/flyt/bin/flyt-gpu-server"
backend = "sim"
listen_host = "10.1.2.3"
port_min = 13000
port_max = 13010
state_dir = "/srv/flyt/servers"
drain_grace_s = 3
start_timeout_s = 30
shared = ["GPU-1", "GPU-2"]
mps_pipe_dir = "/run/mps"
mps_start = true
mps_check_interval_s = 2
log_max_bytes = 1048576
log_files = 5
extra_args = ["--max-clients", "8"]
)",
                           "<t>");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const GpuServersConfig& g = c->gpu_servers;
  EXPECT_TRUE(g.enabled);
  EXPECT_EQ(g.binary, "/opt/flyt/bin/flyt-gpu-server");
  EXPECT_EQ(g.backend, "sim");
  EXPECT_EQ(g.listen_host, "10.1.2.3");
  EXPECT_EQ(g.port_min, 13000);
  EXPECT_EQ(g.port_max, 13010);
  EXPECT_EQ(g.state_dir, "/srv/flyt/servers");
  EXPECT_EQ(g.drain_grace, std::chrono::seconds(3));
  EXPECT_EQ(g.start_timeout, std::chrono::seconds(30));
  EXPECT_FALSE(g.shared_all);
  EXPECT_EQ(g.shared, (std::vector<std::string>{"GPU-1", "GPU-2"}));
  EXPECT_EQ(g.mps_pipe_dir, "/run/mps");
  EXPECT_TRUE(g.mps_start);
  EXPECT_EQ(g.mps_check_interval, std::chrono::seconds(2));
  EXPECT_EQ(g.log_max_bytes, 1048576u);
  EXPECT_EQ(g.log_files, 5);
  EXPECT_EQ(g.extra_args, (std::vector<std::string>{"--max-clients", "8"}));
  c = ParseNodeConfig("[gpu-servers]\nshared = \"all\"\n", "<t>");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->gpu_servers.shared_all);
}

TEST(NodeConfigTest, EveryKeyIsRead) {
  auto c = ParseNodeConfig(R"(
[node]
name = "gpu-a7"
labels = { rack = "r12", zone = "eu-1" }
[http]
listen = "0.0.0.0:9400"
bearer_token = "s3cret"
max_body_bytes = 4096
threads = 4
max_connections_per_peer = 8
max_connections = 100
request_deadline_seconds = 3
idle_timeout_seconds = 2
[monitor]
interval_ms = 500
cache_ttl_ms = 2000
history_retention_s = 600
max_sessions = 8
session_expiry_s = 3600
[nvml]
library = "/opt/nvidia/libnvidia-ml.so.1"
[cluster-manager]
address = "http://10.0.0.1:12400"
[trace]
enabled = false
ring_buffer_bytes = 1048576
drain_interval_ms = 50
high_water_percent = 75
max_processes = 64
max_streams_per_process = 8
max_allocations_per_process = 1000
max_kernel_names_per_process = 100
top_kernels = 5
exited_keep_seconds = 60
rate_window_seconds = 5
watch_setenv = false
launch_results = true
library_dirs = ["/opt/cuda/lib64"]
[log]
level = "debug"
)",
                           "<t>");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "gpu-a7");
  EXPECT_EQ(c->labels.at("rack"), "r12");
  EXPECT_EQ(c->listen_host, "0.0.0.0");
  EXPECT_EQ(c->listen_port, 9400);
  EXPECT_EQ(c->bearer_token, "s3cret");
  EXPECT_EQ(c->max_body_bytes, 4096u);
  EXPECT_EQ(c->http.threads, 4);
  EXPECT_EQ(c->http.max_connections_per_peer, 8);
  EXPECT_EQ(c->http.max_connections, 100);
  EXPECT_EQ(c->http.request_deadline_seconds, 3);
  EXPECT_EQ(c->http.idle_timeout_seconds, 2);
  EXPECT_EQ(c->interval, std::chrono::milliseconds(500));
  EXPECT_EQ(c->history_retention, std::chrono::seconds(600));
  EXPECT_EQ(c->max_sessions, 8u);
  EXPECT_EQ(c->nvml_library, "/opt/nvidia/libnvidia-ml.so.1");
  EXPECT_EQ(c->cluster_manager, "http://10.0.0.1:12400");
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_EQ(c->trace.mode, trace::TraceMode::kOff);
  EXPECT_EQ(c->trace.ring_buffer_bytes, 1048576u);
  EXPECT_EQ(c->trace.drain_interval_ms, 50u);
  EXPECT_EQ(c->trace.high_water_percent, 75u);
  EXPECT_EQ(c->trace.max_processes, 64u);
  EXPECT_EQ(c->trace.max_streams_per_process, 8u);
  EXPECT_EQ(c->trace.max_allocations_per_process, 1000u);
  EXPECT_EQ(c->trace.max_kernel_names_per_process, 100u);
  EXPECT_EQ(c->trace.top_kernels, 5u);
  EXPECT_EQ(c->trace.exited_keep_seconds, 60u);
  EXPECT_EQ(c->trace.rate_window_seconds, 5u);
  EXPECT_FALSE(c->trace.watch_setenv);
  EXPECT_TRUE(c->trace.launch_results);
  EXPECT_EQ(c->trace.library_dirs, std::vector<std::string>{"/opt/cuda/lib64"});
}

TEST(NodeConfigTest, TraceEnabledTakesAutoTrueOrFalse) {
  auto c = ParseNodeConfig("[trace]\nenabled = \"auto\"\n", "<t>");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->trace.mode, trace::TraceMode::kAuto);
  c = ParseNodeConfig("[trace]\nenabled = true\n", "<t>");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->trace.mode, trace::TraceMode::kOn);
}

TEST(NodeConfigTest, BrokenConfigsNameTheKeyAndTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"[http]\nrequest_deadline_seconds = 0\n",
       "<t>:2: http.request_deadline_seconds: value 0 is out of range [1, 3600]"},
      {"[http]\nmax_connections = 4\n",
       "http.max_connections: max_connections_per_peer (64) must not be above max_connections (4)"},
      {"[monitor]\ninterval_ms = 5\n", "<t>:2: monitor.interval_ms: value 5 is out of range [100, 3600000]"},
      {"[monitor]\ninterval_ms = \"1s\"\n", "monitor.interval_ms: expected an integer"},
      {"[monitor]\nintervall_ms = 1000\n", "monitor.intervall_ms: unknown key"},
      {"[http]\nlisten = \"localhost\"\n", "http.listen: listen address 'localhost' is not HOST:PORT"},
      {"[http]\nlisten = \"127.0.0.1:99999\"\n", "port must be 0-65535"},
      {"[node]\nlabels = { \"bad-name\" = \"x\" }\n", "node.labels.bad-name: not a valid label name"},
      {"[log]\nlevel = \"loud\"\n", "log.level: unknown level 'loud'"},
      {"[sampler]\n", "sampler: unknown key"},
      {"monitor = 3\n", "monitor: expected a [monitor] table"},
      {"[node\n", "<t>:1:"},
      {"[trace]\nenabled = \"yes\"\n", "<t>:2: trace.enabled: expected \"auto\", true or false"},
      {"[trace]\nring_buffer_bytes = 100000\n",
       "<t>:2: trace.ring_buffer_bytes: value 100000 is not a power of two"},
      {"[trace]\nring_buffer_bytes = 4096\n",
       "trace.ring_buffer_bytes: value 4096 is out of range [65536, 1073741824]"},
      {"[trace]\ndrain_interval_ms = 5\n", "trace.drain_interval_ms: value 5 is out of range [10, 10000]"},
      {"[trace]\nhigh_water_percent = 0\n", "trace.high_water_percent: value 0 is out of range [1, 100]"},
      {"[trace]\ntop_kernels = 101\n", "trace.top_kernels: value 101 is out of range [1, 100]"},
      {"[trace]\nmax_processes = 0\n", "trace.max_processes: value 0 is out of range"},
      {"[trace]\nwatch_setenv = 1\n", "trace.watch_setenv: expected true or false"},
      {"[trace]\nlaunch_results = \"yes\"\n", "trace.launch_results: expected true or false"},
      {"[trace]\nlibrary_dirs = \"/usr/lib\"\n", "trace.library_dirs: expected an array of strings"},
      {"[trace]\nlibrary_dirs = [\"lib\"]\n", "trace.library_dirs[0]: expected an absolute path"},
      {"[trace]\nlibrary_dirs = [3]\n", "trace.library_dirs[0]: expected a string"},
      {"[trace]\nring_buffer = 1\n", "trace.ring_buffer: unknown key"},
      {"[gpu-servers]\nenabled = \"yes\"\n", "<t>:2: gpu-servers.enabled: expected true or false"},
      {"[gpu-servers]\nbackend = \"cuda\"\n",
       "<t>:2: gpu-servers.backend: expected \"driver\" or \"sim\", not \"cuda\""},
      {"[gpu-servers]\nbinary = \"\"\n", "<t>:2: gpu-servers.binary: must not be empty"},
      {"[gpu-servers]\nlisten_host = \"0.0.0.0\"\n",
       "<t>:2: gpu-servers.listen_host: is the address clients reach, not a wildcard"},
      {"[gpu-servers]\nlisten_host = \"10.0.0.1:80\"\n", "<t>:2: gpu-servers.listen_host:"},
      {"[gpu-servers]\nport_min = 0\n", "<t>:2: gpu-servers.port_min: value 0 is out of range [1, 65535]"},
      {"[gpu-servers]\nport_max = 70000\n", "gpu-servers.port_max: value 70000 is out of range"},
      {"[gpu-servers]\nport_min = 13000\nport_max = 12000\n",
       "<t>:3: gpu-servers.port_max: port range 13000-12000 is empty"},
      {"[gpu-servers]\nstate_dir = \"state\"\n", "<t>:2: gpu-servers.state_dir: expected an absolute path"},
      {"[gpu-servers]\ndrain_grace_s = -1\n", "gpu-servers.drain_grace_s: value -1 is out of range [0, 3600]"},
      {"[gpu-servers]\nstart_timeout_s = 0\n", "gpu-servers.start_timeout_s: value 0 is out of range [1, 600]"},
      {"[gpu-servers]\nshared = \"some\"\n", "<t>:2: gpu-servers.shared: expected \"all\" or an array"},
      {"[gpu-servers]\nshared = [1]\n", "<t>:2: gpu-servers.shared[0]: expected a string"},
      {"[gpu-servers]\nmps_pipe_dir = \"mps\"\n", "gpu-servers.mps_pipe_dir: expected an absolute path"},
      {"[gpu-servers]\nmps_start = 1\n", "gpu-servers.mps_start: expected true or false"},
      {"[gpu-servers]\nmps_check_interval_s = 0\n",
       "gpu-servers.mps_check_interval_s: value 0 is out of range [1, 3600]"},
      {"[gpu-servers]\nlog_max_bytes = 100\n", "gpu-servers.log_max_bytes: value 100 is out of range"},
      {"[gpu-servers]\nlog_files = -1\n", "gpu-servers.log_files: value -1 is out of range [0, 100]"},
      {"[gpu-servers]\nextra_args = \"--x\"\n", "gpu-servers.extra_args: expected an array of strings"},
      {"[gpu-servers]\nextra_args = [\"--log-level\", \"debug\", \"--secret-file=/tmp/s\"]\n",
       "<t>:2: gpu-servers.extra_args[2]: --secret-file is set by the node manager for each lease"},
      {"[gpu-servers]\nport = 1\n", "gpu-servers.port: unknown key"},
      {"[monitor]\ninterval_ms = 100\nhistory_retention_s = 2592000\n",
       "monitor.history_retention_s: 25920000 points per GPU at monitor.interval_ms = 100"},
  };
  for (const auto& [text, expected] : cases) {
    auto c = ParseNodeConfig(text, "<t>");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find(expected), std::string::npos)
        << c.status().message() << "\nexpected: " << expected;
  }
}

TEST(NodeConfigTest, ListenAcceptsIpv6) {
  NodeConfig c;
  ASSERT_TRUE(SetListen(c, "[::1]:8080").ok());
  EXPECT_EQ(c.listen_host, "::1");
  EXPECT_EQ(c.listen_port, 8080);
}

TEST(NodeConfigTest, GpuServersBeyondLoopbackNeedAToken) {
  auto c = ParseNodeConfig("[gpu-servers]\nenabled = true\n", "<t>");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(CheckGpuServersAccess(*c).ok());  // 127.0.0.1 by default
  ASSERT_TRUE(SetListen(*c, "10.0.0.5:12401").ok());
  Status open = CheckGpuServersAccess(*c);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.message().find("needs [http] bearer_token when the API listens on 10.0.0.5"),
            std::string::npos)
      << open.message();
  c->bearer_token = "node-api-token";
  EXPECT_TRUE(CheckGpuServersAccess(*c).ok());
  c->bearer_token.clear();
  c->gpu_servers.enabled = false;
  EXPECT_TRUE(CheckGpuServersAccess(*c).ok());
}

// [kubernetes]
TEST(NodeConfigTest, KubernetesSectionDefaultsAndEveryKey) {
  auto d = ParseNodeConfig("", "<t>");
  ASSERT_TRUE(d.ok());
  const KubernetesConfig k;
  EXPECT_EQ(d->kubernetes.mode, KubernetesMode::kAuto);
  EXPECT_EQ(d->kubernetes.token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  EXPECT_EQ(d->kubernetes.ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
  EXPECT_EQ(d->kubernetes.min_interval, std::chrono::seconds(30));
  EXPECT_EQ(d->kubernetes.timeout, std::chrono::seconds(10));
  auto shipped = LoadNodeConfig(std::string(FLYT_SOURCE_DIR) + "/configs/node-manager.toml");
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  EXPECT_EQ(shipped->kubernetes.mode, k.mode);
  EXPECT_EQ(shipped->kubernetes.node_name, k.node_name);
  EXPECT_EQ(shipped->kubernetes.api_server, k.api_server);
  EXPECT_EQ(shipped->kubernetes.token_file, k.token_file);
  EXPECT_EQ(shipped->kubernetes.ca_file, k.ca_file);
  EXPECT_EQ(shipped->kubernetes.min_interval, k.min_interval);
  EXPECT_EQ(shipped->kubernetes.timeout, k.timeout);
  EXPECT_EQ(shipped->kubernetes.util_threshold_percent, k.util_threshold_percent);
  EXPECT_EQ(shipped->kubernetes.memory_threshold_percent, k.memory_threshold_percent);
  EXPECT_EQ(shipped->kubernetes.period_threshold_percent, k.period_threshold_percent);
  // The DaemonSet's config (deploy/kubernetes/node-manager.toml, the ConfigMap's content) loads.
  auto daemonset = LoadNodeConfig(std::string(FLYT_SOURCE_DIR) + "/deploy/kubernetes/node-manager.toml");
  ASSERT_TRUE(daemonset.ok()) << daemonset.status().ToString();
  EXPECT_EQ(daemonset->kubernetes.mode, KubernetesMode::kAuto);

  auto c = ParseNodeConfig(
      "[kubernetes]\nenabled = true\nnode_name = \"gpu-node-1.example\"\n"
      "api_server = \"https://[fd00::1]:6443\"\ntoken_file = \"/t/token\"\nca_file = \"/t/ca.crt\"\n"
      "min_interval = \"2m\"\ntimeout = \"500ms\"\nutil_threshold_percent = 5\n"
      "memory_threshold_percent = 2.5\nperiod_threshold_percent = 20\n",
      "<t>");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->kubernetes.mode, KubernetesMode::kOn);
  EXPECT_EQ(c->kubernetes.node_name, "gpu-node-1.example");
  EXPECT_EQ(c->kubernetes.api_server, "https://[fd00::1]:6443");
  EXPECT_EQ(c->kubernetes.token_file, "/t/token");
  EXPECT_EQ(c->kubernetes.ca_file, "/t/ca.crt");
  EXPECT_EQ(c->kubernetes.min_interval, std::chrono::minutes(2));
  EXPECT_EQ(c->kubernetes.timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(c->kubernetes.util_threshold_percent, 5);
  EXPECT_EQ(c->kubernetes.memory_threshold_percent, 2.5);
  EXPECT_EQ(c->kubernetes.period_threshold_percent, 20);
  c = ParseNodeConfig("[kubernetes]\nenabled = false\nmin_interval = \"1h\"\n", "<t>");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kubernetes.mode, KubernetesMode::kOff);
  EXPECT_EQ(c->kubernetes.min_interval, std::chrono::hours(1));
}

TEST(NodeConfigTest, BrokenKubernetesSectionsNameTheKeyAndTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"[kubernetes]\nenabled = \"yes\"\n", "<t>:2: kubernetes.enabled: expected \"auto\", true or false"},
      {"[kubernetes]\nnode_name = \"GPU_1\"\n", "<t>:2: kubernetes.node_name: \"GPU_1\" is not a Kubernetes node name"},
      {"[kubernetes]\napi_server = \"http://10.0.0.1\"\n", "kubernetes.api_server: API server 'http://10.0.0.1' must start with https://"},
      {"[kubernetes]\napi_server = \"https://10.0.0.1/api\"\n", "kubernetes.api_server:"},
      {"[kubernetes]\ntoken_file = \"token\"\n", "<t>:2: kubernetes.token_file: expected an absolute path"},
      {"[kubernetes]\nca_file = \"\"\n", "kubernetes.ca_file: expected an absolute path"},
      {"[kubernetes]\nmin_interval = true\n", "<t>:2: kubernetes.min_interval: expected a duration"},
      {"[kubernetes]\nmin_interval = \"30 s\"\n", "kubernetes.min_interval: '30 s' is not a duration"},
      {"[kubernetes]\nmin_interval = \"500ms\"\n", "kubernetes.min_interval: 500 ms is out of range [1000 ms, 86400000 ms]"},
      {"[kubernetes]\ntimeout = \"0s\"\n", "kubernetes.timeout: 0 ms is out of range"},
      {"[kubernetes]\ntimeout = \"1d\"\n", "kubernetes.timeout: '1d' is not a duration"},
      {"[kubernetes]\nutil_threshold_percent = 101\n", "kubernetes.util_threshold_percent: value 101"},
      {"[kubernetes]\nmemory_threshold_percent = -1\n", "kubernetes.memory_threshold_percent: value -1"},
      {"[kubernetes]\nperiod_threshold_percent = \"10\"\n", "kubernetes.period_threshold_percent: expected a number"},
      {"[kubernetes]\nnamespace = \"x\"\n", "kubernetes.namespace: unknown key"},
  };
  for (const auto& [text, expected] : cases) {
    auto c = ParseNodeConfig(text, "<t>");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find(expected), std::string::npos)
        << c.status().message() << "\nexpected: " << expected;
  }
}

}  // namespace
}  // namespace flyt::node
