#include "cluster/config.h"

#include "common/http_server.h"
#include "common/strings.h"
#include "common/toml_reader.h"

namespace flyt::cluster {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kClient: return "client";
    case Role::kNode: return "node";
    case Role::kAdmin: return "admin";
  }
  return "viewer";
}

Result<std::chrono::seconds> ParseDuration(std::string_view text, std::chrono::seconds max) {
  const std::string what = "\"" + std::string(text) + "\"";
  const std::string expected = " (expected a number and a unit: s, m, h, d or w, like \"7d\")";
  if (text == "0") return std::chrono::seconds(0);
  if (text.size() < 2) return InvalidArgument(what + " is not a span of time" + expected);
  int64_t unit = 0;
  switch (text.back()) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    case 'w': unit = 7 * 86400; break;
    default: return InvalidArgument(what + " has no unit" + expected);
  }
  const std::string_view number = text.substr(0, text.size() - 1);
  for (char c : number) {
    if (c < '0' || c > '9') return InvalidArgument(what + " is not a span of time" + expected);
  }
  auto n = ParseInt(number);
  if (!n || *n > max.count() / unit) {
    return InvalidArgument(what + " is longer than the most allowed, " +
                           std::to_string(max.count() / 86400) + "d");
  }
  return std::chrono::seconds(*n * unit);
}

namespace {

// [http] rate_per_second, rate_burst and role_rates.<role> = {rate_per_second, burst}.
Status ReadRateLimits(const TomlReader& r, const toml::table& h, ClusterConfig::RateLimits& out) {
  constexpr double kMaxRate = 1e6;
  double rate = out.client.rate_per_second;
  double burst = out.client.burst;
  FLYT_RETURN_IF_ERROR(r.GetDouble(h, "http", "rate_per_second", 0, kMaxRate, rate));
  FLYT_RETURN_IF_ERROR(r.GetDouble(h, "http", "rate_burst", 1, kMaxRate, burst));
  for (RateLimit* l : {&out.viewer, &out.client, &out.anonymous}) *l = RateLimit{rate, burst};
  const toml::node* roles = h.get("role_rates");
  if (roles == nullptr) return Status::Ok();
  const toml::table* t = roles->as_table();
  if (t == nullptr) {
    return r.Error(roles, "http.role_rates",
                   "expected a table of roles (viewer, client, admin, anonymous)");
  }
  for (const auto& [key, value] : *t) {
    const std::string role(key.str());
    const std::string section = "http.role_rates." + role;
    RateLimit* l = role == "viewer"      ? &out.viewer
                   : role == "client"    ? &out.client
                   : role == "admin"     ? &out.admin
                   : role == "anonymous" ? &out.anonymous
                                         : nullptr;
    if (l == nullptr) {
      return r.Error(&value, section,
                     role == "node" ? "node tokens are never limited (their heartbeats must arrive)"
                                    : "unknown role (viewer, client, admin or anonymous)");
    }
    const toml::table* e = value.as_table();
    if (e == nullptr) return r.Error(&value, section, "expected {rate_per_second, burst}");
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*e, section, {"rate_per_second", "burst"}));
    FLYT_RETURN_IF_ERROR(r.GetDouble(*e, section, "rate_per_second", 0, kMaxRate, l->rate_per_second));
    FLYT_RETURN_IF_ERROR(r.GetDouble(*e, section, "burst", 1, kMaxRate, l->burst));
  }
  return Status::Ok();
}

}  // namespace

Result<ClusterConfig> ParseClusterConfig(std::string_view text, const std::string& source) {
  TomlReader r(source);
  FLYT_ASSIGN_OR_RETURN(toml::table root, r.Parse(text));
  ClusterConfig c;
  FLYT_RETURN_IF_ERROR(
      r.CheckKeys(root, "", {"manager", "http", "ledger", "queue", "jobs", "auth", "nodes", "events",
                             "remote", "web", "log"}));
  auto seconds = [&](const toml::table& t, const std::string& section, const char* key,
                     int64_t min, int64_t max, std::chrono::seconds& out) -> Status {
    int64_t v = out.count();
    FLYT_RETURN_IF_ERROR(r.GetInt(t, section, key, min, max, v));
    out = std::chrono::seconds(v);
    return Status::Ok();
  };

  FLYT_ASSIGN_OR_RETURN(const toml::table* m, r.Section(root, "manager"));
  if (m != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(
        *m, "manager",
        {"listen", "store", "var_dir", "max_body_bytes", "sync_interval_ms",
         "idempotency_keep_for", "store_check_interval_seconds"}));
    if (const toml::node* l = m->get("listen")) {
      if (!l->is_string()) return r.Error(l, "manager.listen", "expected a string HOST:PORT");
      auto address = ParseHostPort(*l->value<std::string>());
      if (!address.ok()) return r.Error(l, "manager.listen", address.status().message());
      c.listen_host = address->first;
      c.listen_port = address->second;
    }
    FLYT_RETURN_IF_ERROR(r.GetString(*m, "manager", "store", c.store));
    FLYT_RETURN_IF_ERROR(r.GetString(*m, "manager", "var_dir", c.var_dir));
    int64_t body = static_cast<int64_t>(c.max_body_bytes);
    FLYT_RETURN_IF_ERROR(r.GetInt(*m, "manager", "max_body_bytes", 4096, 64 << 20, body));
    c.max_body_bytes = static_cast<size_t>(body);
    int64_t sync = c.sync_interval.count();
    FLYT_RETURN_IF_ERROR(r.GetInt(*m, "manager", "sync_interval_ms", 0, 3600000, sync));
    c.sync_interval = std::chrono::milliseconds(sync);
    if (const toml::node* k = m->get("idempotency_keep_for")) {
      if (!k->is_string()) {
        return r.Error(k, "manager.idempotency_keep_for", "expected a string like \"24h\"");
      }
      auto span = ParseDuration(*k->value<std::string>(), std::chrono::hours(24 * 30));
      if (!span.ok()) return r.Error(k, "manager.idempotency_keep_for", span.status().message());
      if (span->count() <= 0) {
        return r.Error(k, "manager.idempotency_keep_for", "must be longer than 0");
      }
      c.idempotency_keep_for = *span;
    }
    FLYT_RETURN_IF_ERROR(seconds(*m, "manager", "store_check_interval_seconds", 0, 7 * 86400,
                                 c.store_check_interval));
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* h, r.Section(root, "http"));
  if (h != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*h, "http",
                                     {"threads", "max_connections_per_peer", "max_connections",
                                      "request_deadline_seconds", "idle_timeout_seconds",
                                      "rate_per_second", "rate_burst", "role_rates"}));
    FLYT_RETURN_IF_ERROR(http::ReadServerOptions(r, *h, "http", c.http));
    FLYT_RETURN_IF_ERROR(ReadRateLimits(r, *h, c.rate_limits));
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* l, r.Section(root, "ledger"));
  if (l != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*l, "ledger",
                                     {"unreachable_after_seconds", "lease_grace_seconds",
                                      "memory_weight", "utilization_weight",
                                      "default_lease_ttl_seconds", "prefer_idle"}));
    FLYT_RETURN_IF_ERROR(seconds(*l, "ledger", "unreachable_after_seconds", 1, 86400,
                                 c.ledger.unreachable_after));
    FLYT_RETURN_IF_ERROR(
        seconds(*l, "ledger", "lease_grace_seconds", 0, 30 * 86400, c.ledger.lease_grace));
    FLYT_RETURN_IF_ERROR(r.GetDouble(*l, "ledger", "memory_weight", 0, 1, c.ledger.memory_weight));
    FLYT_RETURN_IF_ERROR(
        r.GetDouble(*l, "ledger", "utilization_weight", 0, 1, c.ledger.utilization_weight));
    if (c.ledger.memory_weight + c.ledger.utilization_weight <= 0) {
      return r.Error(l, "ledger.memory_weight", "the two score weights must not both be 0");
    }
    FLYT_RETURN_IF_ERROR(seconds(*l, "ledger", "default_lease_ttl_seconds", 1, 30 * 86400,
                                 c.default_lease_ttl));
    FLYT_RETURN_IF_ERROR(r.GetBool(*l, "ledger", "prefer_idle", c.prefer_idle));
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* q, r.Section(root, "queue"));
  if (q != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(
        *q, "queue", {"job_timeout_seconds", "job_lease_ttl_seconds", "backfill_hold_seconds"}));
    FLYT_RETURN_IF_ERROR(seconds(*q, "queue", "job_timeout_seconds", 1, 30 * 86400, c.job_timeout));
    FLYT_RETURN_IF_ERROR(
        seconds(*q, "queue", "job_lease_ttl_seconds", 1, 30 * 86400, c.job_lease_ttl));
    FLYT_RETURN_IF_ERROR(
        seconds(*q, "queue", "backfill_hold_seconds", 0, 30 * 86400, c.queue.backfill_hold));
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* jobs, r.Section(root, "jobs"));
  if (jobs != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(
        *jobs, "jobs", {"keep_finished_for", "keep_finished_max", "max_queued_per_owner",
                             "max_expanded_bytes"}));
    if (const toml::node* k = jobs->get("keep_finished_for")) {
      if (!k->is_string()) {
        return r.Error(k, "jobs.keep_finished_for", "expected a string like \"7d\" (or \"0\")");
      }
      auto span = ParseDuration(*k->value<std::string>(), std::chrono::hours(24 * 3650));
      if (!span.ok()) return r.Error(k, "jobs.keep_finished_for", span.status().message());
      c.keep_finished_for = *span;
    }
    int64_t keep = static_cast<int64_t>(c.keep_finished_max);
    FLYT_RETURN_IF_ERROR(r.GetInt(*jobs, "jobs", "keep_finished_max", 0, 10000000, keep));
    c.keep_finished_max = static_cast<size_t>(keep);
    int64_t cap = static_cast<int64_t>(c.max_queued_per_owner);
    FLYT_RETURN_IF_ERROR(r.GetInt(*jobs, "jobs", "max_queued_per_owner", 0, 10000000, cap));
    c.max_queued_per_owner = static_cast<size_t>(cap);
    int64_t expanded = static_cast<int64_t>(c.max_expanded_bytes);
    FLYT_RETURN_IF_ERROR(
        r.GetInt(*jobs, "jobs", "max_expanded_bytes", 4096, int64_t{1} << 32, expanded));
    c.max_expanded_bytes = static_cast<size_t>(expanded);
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* a, r.Section(root, "auth"));
  if (a != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*a, "auth", {"anonymous_read", "tokens"}));
    FLYT_RETURN_IF_ERROR(r.GetBool(*a, "auth", "anonymous_read", c.anonymous_read));
    if (const toml::node* t = a->get("tokens")) {
      const toml::array* list = t->as_array();
      if (list == nullptr) {
        return r.Error(t, "auth.tokens", "expected an array of {name, token, role} tables");
      }
      for (const toml::node& item : *list) {
        const toml::table* e = item.as_table();
        if (e == nullptr) return r.Error(&item, "auth.tokens", "expected {name, token, role}");
        FLYT_RETURN_IF_ERROR(r.CheckKeys(*e, "auth.tokens", {"name", "token", "role"}));
        TokenEntry entry;
        std::string role;
        FLYT_RETURN_IF_ERROR(r.GetString(*e, "auth.tokens", "name", entry.name));
        FLYT_RETURN_IF_ERROR(r.GetString(*e, "auth.tokens", "token", entry.token));
        FLYT_RETURN_IF_ERROR(r.GetString(*e, "auth.tokens", "role", role));
        if (entry.name.empty()) return r.Error(&item, "auth.tokens.name", "must be set");
        if (entry.token.size() < 16) {
          return r.Error(&item, "auth.tokens.token",
                         "must be at least 16 characters (token of " + entry.name + ")");
        }
        if (role == "admin") {
          entry.role = Role::kAdmin;
        } else if (role == "node") {
          entry.role = Role::kNode;
        } else if (role == "client") {
          entry.role = Role::kClient;
        } else if (role == "viewer") {
          entry.role = Role::kViewer;
        } else {
          return r.Error(&item, "auth.tokens.role",
                         "unknown role '" + role + "' (admin, node, client or viewer)");
        }
        for (const TokenEntry& other : c.tokens) {
          if (other.token == entry.token) {
            return r.Error(&item, "auth.tokens.token", "the same token is listed twice");
          }
        }
        c.tokens.push_back(std::move(entry));
      }
    }
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* n, r.Section(root, "nodes"));
  if (n != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*n, "nodes", {"api_token", "api_networks"}));
    FLYT_RETURN_IF_ERROR(r.GetString(*n, "nodes", "api_token", c.node_api_token));
    if (const toml::node* nets = n->get("api_networks")) {
      const toml::array* list = nets->as_array();
      if (list == nullptr) {
        return r.Error(nets, "nodes.api_networks", "must be a list of CIDRs, like [\"10.0.0.0/8\"]");
      }
      for (const toml::node& item : *list) {
        const auto* entry = item.as_string();
        if (entry == nullptr) return r.Error(&item, "nodes.api_networks", "each entry must be a string");
        auto net = ParseIpNetwork(entry->get());
        if (!net.ok()) return r.Error(&item, "nodes.api_networks", net.status().message());
        c.node_api_networks.push_back(std::move(*net));
      }
    }
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* ev, r.Section(root, "events"));
  if (ev != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(
        *ev, "events", {"retention", "max_bytes", "max_per_heartbeat", "max_event_bytes"}));
    int64_t keep = static_cast<int64_t>(c.event_retention);
    FLYT_RETURN_IF_ERROR(r.GetInt(*ev, "events", "retention", 100, 100000000, keep));
    c.event_retention = static_cast<size_t>(keep);
    int64_t bytes = static_cast<int64_t>(c.event_max_bytes);
    FLYT_RETURN_IF_ERROR(
        r.GetInt(*ev, "events", "max_bytes", 1 << 20, int64_t{1} << 40, bytes));
    c.event_max_bytes = static_cast<uint64_t>(bytes);
    int64_t per = static_cast<int64_t>(c.max_events_per_heartbeat);
    FLYT_RETURN_IF_ERROR(r.GetInt(*ev, "events", "max_per_heartbeat", 0, 100, per));
    c.max_events_per_heartbeat = static_cast<size_t>(per);
    int64_t size = static_cast<int64_t>(c.max_event_bytes);
    FLYT_RETURN_IF_ERROR(r.GetInt(*ev, "events", "max_event_bytes", 256, 1 << 20, size));
    c.max_event_bytes = static_cast<size_t>(size);
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* rm, r.Section(root, "remote"));
  if (rm != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(
        *rm, "remote", {"enabled", "default_ttl_s", "max_ttl_s", "server_start_timeout_s"}));
    FLYT_RETURN_IF_ERROR(r.GetBool(*rm, "remote", "enabled", c.remote_enabled));
    FLYT_RETURN_IF_ERROR(seconds(*rm, "remote", "max_ttl_s", 10, 30 * 86400, c.remote_max_ttl));
    FLYT_RETURN_IF_ERROR(
        seconds(*rm, "remote", "default_ttl_s", 10, 30 * 86400, c.remote_default_ttl));
    if (c.remote_default_ttl > c.remote_max_ttl) {
      return r.Error(rm, "remote.default_ttl_s", "must not be longer than remote.max_ttl_s");
    }
    FLYT_RETURN_IF_ERROR(seconds(*rm, "remote", "server_start_timeout_s", 1, 600,
                                 c.remote_server_start_timeout));
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* w, r.Section(root, "web"));
  if (w != nullptr) {
    FLYT_RETURN_IF_ERROR(
        r.CheckKeys(*w, "web", {"enabled", "dir", "max_streams", "stream_min_gap_ms"}));
    FLYT_RETURN_IF_ERROR(r.GetBool(*w, "web", "enabled", c.web_enabled));
    FLYT_RETURN_IF_ERROR(r.GetString(*w, "web", "dir", c.web_dir));
    int64_t streams = c.max_streams;
    FLYT_RETURN_IF_ERROR(r.GetInt(*w, "web", "max_streams", 0, 1024, streams));
    c.max_streams = static_cast<int>(streams);
    int64_t gap = c.stream_min_gap.count();
    FLYT_RETURN_IF_ERROR(r.GetInt(*w, "web", "stream_min_gap_ms", 0, 60000, gap));
    c.stream_min_gap = std::chrono::milliseconds(gap);
  }
  FLYT_RETURN_IF_ERROR(r.LogSection(root, c.log_level));
  return c;
}

Result<ClusterConfig> LoadClusterConfig(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok()) return InvalidArgument("config " + text.status().message());
  return ParseClusterConfig(*text, path);
}

}  // namespace flyt::cluster
