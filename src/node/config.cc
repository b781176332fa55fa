#include "node/config.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include <toml++/toml.h>

#include "common/http_server.h"
#include "common/strings.h"
#include "common/toml_reader.h"
#include "kube/client.h"

namespace flyt::node {
namespace {

using Reader = TomlReader;

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// An unsigned 32-bit key in [min, max] into `out` (unchanged when absent).
Status GetU32(const Reader& r, const toml::table& t, const char* key, int64_t min, int64_t max,
              uint32_t& out) {
  int64_t v = out;
  FLYT_RETURN_IF_ERROR(r.GetInt(t, "trace", key, min, max, v));
  out = static_cast<uint32_t>(v);
  return Status::Ok();
}

// [trace]: the CUDA tracer's options (trace/service.h); every bound is checked here so that a
// bad value stops start-up with the key named, never reaches the tracer.
Status ReadTraceSection(const Reader& r, const toml::table& t, trace::TraceOptions& o) {
  FLYT_RETURN_IF_ERROR(r.CheckKeys(
      t, "trace",
      {"enabled", "ring_buffer_bytes", "drain_interval_ms", "high_water_percent", "max_processes",
       "max_streams_per_process", "max_allocations_per_process", "max_kernel_names_per_process",
       "top_kernels", "exited_keep_seconds", "rate_window_seconds", "watch_setenv",
       "launch_results", "library_dirs"}));
  if (const toml::node* e = t.get("enabled")) {
    if (e->is_boolean()) {
      o.mode = *e->value<bool>() ? trace::TraceMode::kOn : trace::TraceMode::kOff;
    } else if (e->is_string() && *e->value<std::string>() == "auto") {
      o.mode = trace::TraceMode::kAuto;
    } else {
      return r.Error(e, "trace.enabled", "expected \"auto\", true or false");
    }
  }
  int64_t ring = static_cast<int64_t>(o.ring_buffer_bytes);
  FLYT_RETURN_IF_ERROR(r.GetInt(t, "trace", "ring_buffer_bytes", 64 << 10, 1 << 30, ring));
  if ((ring & (ring - 1)) != 0) {
    return r.Error(t.get("ring_buffer_bytes"), "trace.ring_buffer_bytes",
                   "value " + std::to_string(ring) + " is not a power of two");
  }
  o.ring_buffer_bytes = static_cast<uint64_t>(ring);
  FLYT_RETURN_IF_ERROR(GetU32(r, t, "drain_interval_ms", 10, 10000, o.drain_interval_ms));
  FLYT_RETURN_IF_ERROR(GetU32(r, t, "high_water_percent", 1, 100, o.high_water_percent));
  FLYT_RETURN_IF_ERROR(GetU32(r, t, "max_processes", 1, 1 << 20, o.max_processes));
  FLYT_RETURN_IF_ERROR(
      GetU32(r, t, "max_streams_per_process", 1, 1 << 16, o.max_streams_per_process));
  FLYT_RETURN_IF_ERROR(
      GetU32(r, t, "max_allocations_per_process", 1, 1 << 24, o.max_allocations_per_process));
  FLYT_RETURN_IF_ERROR(
      GetU32(r, t, "max_kernel_names_per_process", 1, 1 << 20, o.max_kernel_names_per_process));
  FLYT_RETURN_IF_ERROR(GetU32(r, t, "top_kernels", 1, 100, o.top_kernels));
  FLYT_RETURN_IF_ERROR(GetU32(r, t, "exited_keep_seconds", 0, 7 * 86400, o.exited_keep_seconds));
  FLYT_RETURN_IF_ERROR(GetU32(r, t, "rate_window_seconds", 1, 3600, o.rate_window_seconds));
  FLYT_RETURN_IF_ERROR(r.GetBool(t, "trace", "watch_setenv", o.watch_setenv));
  FLYT_RETURN_IF_ERROR(r.GetBool(t, "trace", "launch_results", o.launch_results));
  if (const toml::node* dirs = t.get("library_dirs")) {
    const toml::array* list = dirs->as_array();
    if (list == nullptr) return r.Error(dirs, "trace.library_dirs", "expected an array of strings");
    if (list->size() > 64) return r.Error(dirs, "trace.library_dirs", "more than 64 directories");
    o.library_dirs.clear();
    for (size_t i = 0; i < list->size(); ++i) {
      const toml::node& d = *list->get(i);
      const std::string key = "trace.library_dirs[" + std::to_string(i) + "]";
      if (!d.is_string()) return r.Error(&d, key, "expected a string");
      const std::string dir = *d.value<std::string>();
      if (dir.empty() || dir[0] != '/') return r.Error(&d, key, "expected an absolute path");
      o.library_dirs.push_back(dir);
    }
  }
  return Status::Ok();
}

// A TOML array of strings (at most `max`) into `out`; `check` refuses an element with a problem.
template <typename Check>
Status GetStringList(const Reader& r, const toml::node* n, const std::string& key, size_t max,
                     Check check, std::vector<std::string>& out) {
  const toml::array* list = n->as_array();
  if (list == nullptr) return r.Error(n, key, "expected an array of strings");
  if (list->size() > max) return r.Error(n, key, "more than " + std::to_string(max) + " entries");
  out.clear();
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::node& e = *list->get(i);
    const std::string name = key + "[" + std::to_string(i) + "]";
    if (!e.is_string()) return r.Error(&e, name, "expected a string");
    std::string v = *e.value<std::string>();
    if (std::string problem = check(v); !problem.empty()) return r.Error(&e, name, problem);
    out.push_back(std::move(v));
  }
  return Status::Ok();
}

// [gpu-servers]: every value is checked here, so a bad one stops start-up with its key named.
Status ReadGpuServersSection(const Reader& r, const toml::table& t, GpuServersConfig& g) {
  const std::string sec = "gpu-servers";
  FLYT_RETURN_IF_ERROR(r.CheckKeys(
      t, sec,
      {"enabled", "binary", "backend", "listen_host", "port_min", "port_max", "state_dir",
       "drain_grace_s", "start_timeout_s", "shared", "mps_pipe_dir", "mps_start",
       "mps_check_interval_s", "log_max_bytes", "log_files", "extra_args"}));
  FLYT_RETURN_IF_ERROR(r.GetBool(t, sec, "enabled", g.enabled));
  FLYT_RETURN_IF_ERROR(r.GetString(t, sec, "binary", g.binary));
  if (t.get("binary") != nullptr && g.binary.empty()) {
    return r.Error(t.get("binary"), "gpu-servers.binary",
                   "must not be empty (leave the key out for the default)");
  }
  FLYT_RETURN_IF_ERROR(r.GetString(t, sec, "backend", g.backend));
  if (g.backend != "driver" && g.backend != "sim") {
    return r.Error(t.get("backend"), "gpu-servers.backend",
                   "expected \"driver\" or \"sim\", not \"" + g.backend + "\"");
  }
  FLYT_RETURN_IF_ERROR(r.GetString(t, sec, "listen_host", g.listen_host));
  if (t.get("listen_host") != nullptr) {
    const std::string& h = g.listen_host;
    in6_addr v6{};
    std::string problem;
    if (h.empty()) {
      problem = "must not be empty";
    } else if (h == "0.0.0.0" || h == "::" || h == "[::]") {
      problem = "is the address clients reach, not a wildcard: give this node's address";
    } else if (h.find_first_of(" /[]") != std::string::npos ||
               (h.find(':') != std::string::npos && inet_pton(AF_INET6, h.c_str(), &v6) != 1)) {
      problem = "expected a host name or an IP address without brackets or port";
    }
    if (!problem.empty()) return r.Error(t.get("listen_host"), "gpu-servers.listen_host", problem);
  }
  int64_t v = g.port_min;
  FLYT_RETURN_IF_ERROR(r.GetInt(t, sec, "port_min", 1, 65535, v));
  g.port_min = static_cast<int>(v);
  v = g.port_max;
  FLYT_RETURN_IF_ERROR(r.GetInt(t, sec, "port_max", 1, 65535, v));
  g.port_max = static_cast<int>(v);
  if (g.port_min > g.port_max) {
    return r.Error(t.get("port_max") ? t.get("port_max") : t.get("port_min"),
                   "gpu-servers.port_max",
                   "port range " + std::to_string(g.port_min) + "-" + std::to_string(g.port_max) +
                       " is empty (port_min > port_max)");
  }
  FLYT_RETURN_IF_ERROR(r.GetString(t, sec, "state_dir", g.state_dir));
  if (g.state_dir.empty() || g.state_dir[0] != '/') {
    return r.Error(t.get("state_dir"), "gpu-servers.state_dir", "expected an absolute path");
  }
  v = g.drain_grace.count();
  FLYT_RETURN_IF_ERROR(r.GetInt(t, sec, "drain_grace_s", 0, 3600, v));
  g.drain_grace = std::chrono::seconds(v);
  v = g.start_timeout.count();
  FLYT_RETURN_IF_ERROR(r.GetInt(t, sec, "start_timeout_s", 1, 600, v));
  g.start_timeout = std::chrono::seconds(v);
  if (const toml::node* s = t.get("shared")) {
    if (s->is_string()) {
      if (*s->value<std::string>() != "all") {
        return r.Error(s, "gpu-servers.shared", "expected \"all\" or an array of GPU UUIDs");
      }
      g.shared_all = true;
    } else {
      FLYT_RETURN_IF_ERROR(GetStringList(
          r, s, "gpu-servers.shared", 1024,
          [](const std::string& uuid) {
            return uuid.empty() || uuid.find_first_of(" \t") != std::string::npos
                       ? std::string("expected a GPU UUID (\"GPU-...\")")
                       : std::string();
          },
          g.shared));
    }
  }
  FLYT_RETURN_IF_ERROR(r.GetString(t, sec, "mps_pipe_dir", g.mps_pipe_dir));
  if (!g.mps_pipe_dir.empty() && g.mps_pipe_dir[0] != '/') {
    return r.Error(t.get("mps_pipe_dir"), "gpu-servers.mps_pipe_dir", "expected an absolute path");
  }
  FLYT_RETURN_IF_ERROR(r.GetBool(t, sec, "mps_start", g.mps_start));
  v = g.mps_check_interval.count();
  FLYT_RETURN_IF_ERROR(r.GetInt(t, sec, "mps_check_interval_s", 1, 3600, v));
  g.mps_check_interval = std::chrono::seconds(v);
  v = static_cast<int64_t>(g.log_max_bytes);
  FLYT_RETURN_IF_ERROR(r.GetInt(t, sec, "log_max_bytes", 4096, int64_t{1} << 40, v));
  g.log_max_bytes = static_cast<uint64_t>(v);
  v = g.log_files;
  FLYT_RETURN_IF_ERROR(r.GetInt(t, sec, "log_files", 0, 100, v));
  g.log_files = static_cast<int>(v);
  if (const toml::node* a = t.get("extra_args")) {
    FLYT_RETURN_IF_ERROR(GetStringList(
        r, a, "gpu-servers.extra_args", 64,
        [](const std::string& arg) -> std::string {
          // The supervisor sets these per lease; a second value would be ambiguous or a leak.
          for (const char* own : {"--device", "--backend", "--listen", "--memory-limit-mb",
                                  "--sm-count", "--sm-percent", "--secret-file", "--ready-file",
                                  "--stop-grace"}) {
            if (arg == own || StartsWith(arg, std::string(own) + "=")) {
              return std::string(own) + " is set by the node manager for each lease";
            }
          }
          return {};
        },
        g.extra_args));
  }
  return Status::Ok();
}

// [profile]: every bound is checked here (the profiler's own Validate runs again at start).
Status ReadProfileSection(const Reader& r, const toml::table& t, ProfileConfig& p) {
  using std::chrono::milliseconds;
  const std::string sec = "profile";
  FLYT_RETURN_IF_ERROR(r.CheckKeys(t, sec,
                                   {"enabled", "allocated_idle_after", "state_hold",
                                    "cycle_window", "analysis_interval", "idle_util_percent",
                                    "min_cycles"}));
  FLYT_RETURN_IF_ERROR(r.GetBool(t, sec, "enabled", p.enabled));
  FLYT_RETURN_IF_ERROR(r.GetDuration(t, sec, "allocated_idle_after", milliseconds(1000),
                                   milliseconds(7LL * 86400 * 1000), p.allocated_idle_after));
  FLYT_RETURN_IF_ERROR(r.GetDuration(t, sec, "state_hold", milliseconds(0),
                                   milliseconds(3600 * 1000), p.state_hold));
  FLYT_RETURN_IF_ERROR(r.GetDuration(t, sec, "cycle_window", milliseconds(30 * 1000),
                                   milliseconds(3600 * 1000), p.cycle_window));
  FLYT_RETURN_IF_ERROR(r.GetDuration(t, sec, "analysis_interval", milliseconds(100),
                                   milliseconds(600 * 1000), p.analysis_interval));
  FLYT_RETURN_IF_ERROR(r.GetDouble(t, sec, "idle_util_percent", 0, 99, p.idle_util_percent));
  FLYT_RETURN_IF_ERROR(r.GetDouble(t, sec, "min_cycles", 2, 100, p.min_cycles));
  // The profiler's own rules between keys, said here with the key's line.
  for (const char* key : {"state_hold", "analysis_interval"}) {
    const auto& value = std::string(key) == "state_hold" ? p.state_hold : p.analysis_interval;
    if (value > p.cycle_window) {
      return r.Error(t.get(key) != nullptr ? t.get(key) : t.get("cycle_window"), sec + "." + key,
                     "must not be longer than cycle_window (" +
                         std::to_string(p.cycle_window.count() / 1000) + " s)");
    }
  }
  return Status::Ok();
}

// [kubernetes] (KubernetesConfig).
Status ReadKubernetesSection(const Reader& r, const toml::table& t, KubernetesConfig& k) {
  const std::string sec = "kubernetes";
  FLYT_RETURN_IF_ERROR(r.CheckKeys(
      t, sec,
      {"enabled", "node_name", "api_server", "token_file", "ca_file", "min_interval", "timeout",
       "util_threshold_percent", "memory_threshold_percent", "period_threshold_percent"}));
  if (const toml::node* e = t.get("enabled")) {
    if (e->is_boolean()) {
      k.mode = *e->value<bool>() ? KubernetesMode::kOn : KubernetesMode::kOff;
    } else if (e->is_string() && *e->value<std::string>() == "auto") {
      k.mode = KubernetesMode::kAuto;
    } else {
      return r.Error(e, "kubernetes.enabled", "expected \"auto\", true or false");
    }
  }
  FLYT_RETURN_IF_ERROR(r.GetString(t, sec, "node_name", k.node_name));
  if (!k.node_name.empty() && !kube::ValidNodeName(k.node_name)) {
    return r.Error(t.get("node_name"), "kubernetes.node_name",
                   "\"" + k.node_name +
                       "\" is not a Kubernetes node name (lower-case DNS subdomain, at most 253 "
                       "characters)");
  }
  FLYT_RETURN_IF_ERROR(r.GetString(t, sec, "api_server", k.api_server));
  if (!k.api_server.empty()) {
    if (auto parsed = kube::ParseApiServer(k.api_server); !parsed.ok()) {
      return r.Error(t.get("api_server"), "kubernetes.api_server", parsed.status().message());
    }
  }
  for (const char* key : {"token_file", "ca_file"}) {
    std::string& path = std::string_view(key) == "token_file" ? k.token_file : k.ca_file;
    FLYT_RETURN_IF_ERROR(r.GetString(t, sec, key, path));
    if (path.empty() || path[0] != '/') {
      return r.Error(t.get(key), std::string("kubernetes.") + key, "expected an absolute path");
    }
  }
  using std::chrono::milliseconds;
  FLYT_RETURN_IF_ERROR(r.GetDuration(t, sec, "min_interval", milliseconds(1000),
                                   milliseconds(24 * 3600 * 1000), k.min_interval));
  FLYT_RETURN_IF_ERROR(r.GetDuration(t, sec, "timeout", milliseconds(100),
                                   milliseconds(300 * 1000), k.timeout));
  FLYT_RETURN_IF_ERROR(r.GetDouble(t, sec, "util_threshold_percent", 0, 100, k.util_threshold_percent));
  FLYT_RETURN_IF_ERROR(
      r.GetDouble(t, sec, "memory_threshold_percent", 0, 100, k.memory_threshold_percent));
  FLYT_RETURN_IF_ERROR(
      r.GetDouble(t, sec, "period_threshold_percent", 0, 100, k.period_threshold_percent));
  return Status::Ok();
}

}  // namespace

Status CheckGpuServersAccess(const NodeConfig& config) {
  if (!config.gpu_servers.enabled || !config.bearer_token.empty()) return Status::Ok();
  const std::string& host = config.listen_host;
  const bool loopback = host == "localhost" || host == "::1" || StartsWith(host, "127.");
  if (loopback) return Status::Ok();
  return InvalidArgument("[gpu-servers] enabled = true needs [http] bearer_token when the API listens on " +
                         host + ": without it anyone who reaches the node could start GPU servers on its "
                         "GPUs or drain the servers of other leases");
}

Status SetListen(NodeConfig& config, const std::string& host_port) {
  FLYT_ASSIGN_OR_RETURN(auto address, ParseHostPort(host_port));
  config.listen_host = address.first;
  config.listen_port = address.second;
  return Status::Ok();
}

Result<NodeConfig> ParseNodeConfig(std::string_view text, const std::string& source) {
  Reader r(source);
  FLYT_ASSIGN_OR_RETURN(toml::table root, r.Parse(text));
  NodeConfig c;
  c.name = Hostname();
  FLYT_RETURN_IF_ERROR(
      r.CheckKeys(root, "", {"node", "http", "monitor", "nvml", "cluster-manager", "trace",
                                 "gpu-servers", "profile", "kubernetes", "log"}));
  auto section = [&](const char* name) { return r.Section(root, name); };

  FLYT_ASSIGN_OR_RETURN(const toml::table* node, section("node"));
  if (node != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*node, "node", {"name", "labels"}));
    FLYT_RETURN_IF_ERROR(r.GetString(*node, "node", "name", c.name));
    if (c.name.empty()) return r.Error(node->get("name"), "node.name", "must not be empty");
    if (const toml::node* l = node->get("labels")) {
      const toml::table* labels = l->as_table();
      if (labels == nullptr) return r.Error(l, "node.labels", "expected a table of strings");
      for (const auto& [k, v] : *labels) {
        std::string key(k.str());
        if (!ValidLabelName(key)) {
          return r.Error(&v, "node.labels." + key,
                         "not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, no leading __)");
        }
        if (!v.is_string()) return r.Error(&v, "node.labels." + key, "expected a string");
        c.labels[key] = *v.value<std::string>();
      }
    }
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* http, section("http"));
  if (http != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*http, "http",
                                     {"listen", "bearer_token", "max_body_bytes", "threads",
                                      "max_connections_per_peer", "max_connections",
                                      "request_deadline_seconds", "idle_timeout_seconds"}));
    if (const toml::node* l = http->get("listen")) {
      if (!l->is_string()) return r.Error(l, "http.listen", "expected a string HOST:PORT");
      Status s = SetListen(c, *l->value<std::string>());
      if (!s.ok()) return r.Error(l, "http.listen", s.message());
    }
    FLYT_RETURN_IF_ERROR(r.GetString(*http, "http", "bearer_token", c.bearer_token));
    int64_t body = static_cast<int64_t>(c.max_body_bytes);
    FLYT_RETURN_IF_ERROR(r.GetInt(*http, "http", "max_body_bytes", 1024, 16 << 20, body));
    c.max_body_bytes = static_cast<size_t>(body);
    FLYT_RETURN_IF_ERROR(http::ReadServerOptions(r, *http, "http", c.http));
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* mon, section("monitor"));
  if (mon != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*mon, "monitor",
                                     {"interval_ms", "cache_ttl_ms", "history_retention_s",
                                      "max_sessions", "session_expiry_s"}));
    int64_t v = c.interval.count();
    FLYT_RETURN_IF_ERROR(r.GetInt(*mon, "monitor", "interval_ms", 100, 3600000, v));
    c.interval = std::chrono::milliseconds(v);
    v = c.cache_ttl.count();
    FLYT_RETURN_IF_ERROR(r.GetInt(*mon, "monitor", "cache_ttl_ms", 0, 3600000, v));
    c.cache_ttl = std::chrono::milliseconds(v);
    v = c.history_retention.count();
    FLYT_RETURN_IF_ERROR(r.GetInt(*mon, "monitor", "history_retention_s", 1, 30 * 86400, v));
    c.history_retention = std::chrono::seconds(v);
    v = static_cast<int64_t>(c.max_sessions);
    FLYT_RETURN_IF_ERROR(r.GetInt(*mon, "monitor", "max_sessions", 1, 10000, v));
    c.max_sessions = static_cast<size_t>(v);
    v = c.session_expiry.count();
    FLYT_RETURN_IF_ERROR(r.GetInt(*mon, "monitor", "session_expiry_s", 1, 30 * 86400, v));
    c.session_expiry = std::chrono::seconds(v);
  }
  // History is reserved per GPU at (retention / interval) points of 32 bytes: refuse settings
  // that would reserve more than 32 MiB per GPU.
  if (mon != nullptr) {
    const int64_t points =
        c.history_retention.count() * 1000 / std::max<int64_t>(1, c.interval.count());
    if (points > (1 << 20)) {
      return r.Error(mon->get("history_retention_s") ? mon->get("history_retention_s") : mon,
                     "monitor.history_retention_s",
                     std::to_string(points) + " points per GPU at monitor.interval_ms = " +
                         std::to_string(c.interval.count()) +
                         " is more than 1048576 (32 MiB per GPU); shorten the retention or lengthen "
                         "the interval");
    }
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* nvml, section("nvml"));
  if (nvml != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*nvml, "nvml", {"library"}));
    FLYT_RETURN_IF_ERROR(r.GetString(*nvml, "nvml", "library", c.nvml_library));
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* cm, section("cluster-manager"));
  if (cm != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(
        *cm, "cluster-manager", {"address", "token", "heartbeat_interval_s", "advertise_url"}));
    FLYT_RETURN_IF_ERROR(r.GetString(*cm, "cluster-manager", "address", c.cluster_manager));
    FLYT_RETURN_IF_ERROR(r.GetString(*cm, "cluster-manager", "token", c.cluster_manager_token));
    FLYT_RETURN_IF_ERROR(
        r.GetString(*cm, "cluster-manager", "advertise_url", c.advertise_url));
    int64_t hb = c.heartbeat_interval.count();
    FLYT_RETURN_IF_ERROR(r.GetInt(*cm, "cluster-manager", "heartbeat_interval_s", 1, 3600, hb));
    c.heartbeat_interval = std::chrono::seconds(hb);
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* trace, section("trace"));
  if (trace != nullptr) FLYT_RETURN_IF_ERROR(ReadTraceSection(r, *trace, c.trace));
  FLYT_ASSIGN_OR_RETURN(const toml::table* gs, section("gpu-servers"));
  if (gs != nullptr) FLYT_RETURN_IF_ERROR(ReadGpuServersSection(r, *gs, c.gpu_servers));
  FLYT_ASSIGN_OR_RETURN(const toml::table* prof, section("profile"));
  if (prof != nullptr) FLYT_RETURN_IF_ERROR(ReadProfileSection(r, *prof, c.profile));
  FLYT_ASSIGN_OR_RETURN(const toml::table* kube, section("kubernetes"));
  if (kube != nullptr) FLYT_RETURN_IF_ERROR(ReadKubernetesSection(r, *kube, c.kubernetes));
  FLYT_RETURN_IF_ERROR(r.LogSection(root, c.log_level));
  return c;
}

Result<NodeConfig> LoadNodeConfig(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok()) return InvalidArgument("config " + text.status().message());
  return ParseNodeConfig(*text, path);
}

}  // namespace flyt::node
