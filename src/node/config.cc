#include "node/config.h"

#include <unistd.h>

#include <algorithm>

#include <toml++/toml.h>

#include "common/http_server.h"
#include "common/strings.h"
#include "common/toml_reader.h"

namespace flyt::node {
namespace {

using Reader = TomlReader;

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

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
      r.CheckKeys(root, "", {"node", "http", "monitor", "nvml", "cluster-manager", "log"}));
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
  FLYT_RETURN_IF_ERROR(r.LogSection(root, c.log_level));
  return c;
}

Result<NodeConfig> LoadNodeConfig(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok()) return InvalidArgument("config " + text.status().message());
  return ParseNodeConfig(*text, path);
}

}  // namespace flyt::node
