#include "client_manager/config.h"

#include <unistd.h>

#include <charconv>
#include <toml++/toml.h>

#include "common/json.h"
#include "common/strings.h"
#include "common/toml_reader.h"

namespace flyt::client_manager {
namespace {

using std::chrono::milliseconds;

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

Status ReadLease(const TomlReader& r, const toml::table& t, ClientManagerConfig& c) {
  FLYT_RETURN_IF_ERROR(
      r.CheckKeys(t, "lease", {"sm_count", "sm_percent", "memory_mb", "gpu_model", "node"}));
  if (t.get("sm_count") != nullptr && t.get("sm_percent") != nullptr) {
    return r.Error(t.get("sm_percent"), "lease.sm_percent",
                   "lease.sm_count and lease.sm_percent exclude each other; set one");
  }
  int64_t v = 0;
  if (t.get("sm_count") != nullptr) {
    FLYT_RETURN_IF_ERROR(r.GetInt(t, "lease", "sm_count", 1, 1 << 20, v));
    c.lease.sm_count = static_cast<uint32_t>(v);
  }
  if (t.get("sm_percent") != nullptr) {
    FLYT_RETURN_IF_ERROR(r.GetInt(t, "lease", "sm_percent", 1, 100, v));
    c.lease.sm_percent = static_cast<uint32_t>(v);
  }
  if (t.get("memory_mb") != nullptr) {
    FLYT_RETURN_IF_ERROR(r.GetInt(t, "lease", "memory_mb", 1, int64_t{1} << 30, v));
    c.lease.memory_mb = static_cast<uint64_t>(v);
  }
  FLYT_RETURN_IF_ERROR(r.GetString(t, "lease", "gpu_model", c.lease.gpu_model));
  FLYT_RETURN_IF_ERROR(r.GetString(t, "lease", "node", c.node));
  return Status::Ok();
}

Status ReadClient(const TomlReader& r, const toml::table& t, ClientManagerConfig& c) {
  FLYT_RETURN_IF_ERROR(r.CheckKeys(t, "client",
                                   {"name", "socket", "socket_mode", "release_after",
                                    "renew_interval", "ttl_seconds", "acquire_timeout",
                                    "max_connections", "max_profiles"}));
  FLYT_RETURN_IF_ERROR(r.GetString(t, "client", "name", c.name));
  if (c.name.empty()) return r.Error(t.get("name"), "client.name", "must not be empty");
  FLYT_RETURN_IF_ERROR(r.GetString(t, "client", "socket", c.socket_path));
  if (c.socket_path.empty() || c.socket_path[0] != '/') {
    return r.Error(t.get("socket"), "client.socket", "expected an absolute path");
  }
  if (c.socket_path.size() >= 108) {  // sockaddr_un.sun_path
    return r.Error(t.get("socket"), "client.socket", "longer than a Unix socket path may be");
  }
  if (const toml::node* m = t.get("socket_mode")) {
    // 0o660 in TOML, or the usual "0660" as a string.
    int64_t mode = -1;
    if (m->is_integer()) {
      mode = *m->value<int64_t>();
    } else if (m->is_string()) {
      const std::string s = *m->value<std::string>();
      unsigned parsed = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), parsed, 8);
      if (!s.empty() && ec == std::errc() && end == s.data() + s.size()) mode = parsed;
    }
    if (mode < 0 || mode > 0777) {
      return r.Error(m, "client.socket_mode", "expected an octal mode such as \"0660\" or 0o660");
    }
    c.socket_mode = static_cast<mode_t>(mode);
  }
  FLYT_RETURN_IF_ERROR(r.GetDuration(t, "client", "release_after", milliseconds(0),
                                   milliseconds(86400LL * 1000), c.release_after));
  if (t.get("renew_interval") != nullptr) {
    milliseconds renew{0};
    FLYT_RETURN_IF_ERROR(r.GetDuration(t, "client", "renew_interval", milliseconds(1000),
                                     milliseconds(86400LL * 1000), renew));
    c.renew_interval = renew;
  }
  int64_t v = c.ttl_seconds;
  FLYT_RETURN_IF_ERROR(r.GetInt(t, "client", "ttl_seconds", 10, 86400, v));
  c.ttl_seconds = static_cast<int>(v);
  FLYT_RETURN_IF_ERROR(r.GetDuration(t, "client", "acquire_timeout", milliseconds(100),
                                   milliseconds(3600LL * 1000), c.acquire_timeout));
  v = c.max_connections;
  FLYT_RETURN_IF_ERROR(r.GetInt(t, "client", "max_connections", 1, 100000, v));
  c.max_connections = static_cast<int>(v);
  v = c.max_profiles;
  FLYT_RETURN_IF_ERROR(r.GetInt(t, "client", "max_profiles", 1, 10000, v));
  c.max_profiles = static_cast<int>(v);
  if (c.renew_interval && *c.renew_interval >= std::chrono::seconds(c.ttl_seconds)) {
    return r.Error(t.get("renew_interval"), "client.renew_interval",
                   "must be shorter than client.ttl_seconds (" + std::to_string(c.ttl_seconds) +
                       " s), or the lease expires between renewals");
  }
  return Status::Ok();
}

}  // namespace

LeaseProfile LeaseProfile::Overlaid(const LeaseProfile& over) const {
  LeaseProfile p = *this;
  if (over.sm_count || over.sm_percent) {
    p.sm_count = over.sm_count;
    p.sm_percent = over.sm_percent;
  }
  if (over.memory_mb) p.memory_mb = over.memory_mb;
  if (!over.gpu_model.empty()) p.gpu_model = over.gpu_model;
  return p;
}

std::string LeaseProfile::Key() const {
  return DumpJson(ToJson());
}

nlohmann::json LeaseProfile::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  if (sm_count) j["sm_count"] = *sm_count;
  if (sm_percent) j["sm_percent"] = *sm_percent;
  if (memory_mb) j["memory_mb"] = *memory_mb;
  if (!gpu_model.empty()) j["gpu_model"] = gpu_model;
  return j;
}

std::chrono::milliseconds ClientManagerConfig::RenewInterval() const {
  if (renew_interval) return *renew_interval;
  return milliseconds(int64_t{ttl_seconds} * 1000 / 3);
}

Result<ClientManagerConfig> ParseClientManagerConfig(std::string_view text,
                                                     const std::string& source) {
  TomlReader r(source);
  FLYT_ASSIGN_OR_RETURN(toml::table root, r.Parse(text));
  ClientManagerConfig c;
  c.name = Hostname();
  FLYT_RETURN_IF_ERROR(r.CheckKeys(root, "", {"client", "cluster-manager", "lease", "log"}));
  FLYT_ASSIGN_OR_RETURN(const toml::table* client, r.Section(root, "client"));
  if (client != nullptr) FLYT_RETURN_IF_ERROR(ReadClient(r, *client, c));
  FLYT_ASSIGN_OR_RETURN(const toml::table* cm, r.Section(root, "cluster-manager"));
  if (cm != nullptr) {
    FLYT_RETURN_IF_ERROR(r.CheckKeys(*cm, "cluster-manager", {"address", "token"}));
    FLYT_RETURN_IF_ERROR(r.GetString(*cm, "cluster-manager", "address", c.cluster_manager));
    FLYT_RETURN_IF_ERROR(r.GetString(*cm, "cluster-manager", "token", c.token));
  }
  FLYT_ASSIGN_OR_RETURN(const toml::table* lease, r.Section(root, "lease"));
  if (lease != nullptr) FLYT_RETURN_IF_ERROR(ReadLease(r, *lease, c));
  FLYT_RETURN_IF_ERROR(r.LogSection(root, c.log_level));
  return c;
}

Result<ClientManagerConfig> LoadClientManagerConfig(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok()) return InvalidArgument("config " + text.status().message());
  return ParseClientManagerConfig(*text, path);
}

Status ValidateClientManagerConfig(const ClientManagerConfig& config) {
  if (config.cluster_manager.empty()) {
    return InvalidArgument(
        "no cluster manager: set [cluster-manager] address or --cluster-manager");
  }
  if (config.RenewInterval() >= std::chrono::seconds(config.ttl_seconds)) {
    return InvalidArgument("client.renew_interval must be shorter than client.ttl_seconds");
  }
  if (config.socket_path.empty() || config.socket_path[0] != '/' ||
      config.socket_path.size() >= 108) {
    return InvalidArgument("socket '" + config.socket_path +
                           "': expected an absolute path shorter than 108 bytes");
  }
  return Status::Ok();
}

}  // namespace flyt::client_manager
