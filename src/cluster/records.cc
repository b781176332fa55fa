#include "cluster/records.h"

#include "common/json_fields.h"
#include "gpu/json.h"

namespace flyt::cluster {

using nlohmann::json;

namespace {

json Labels(const std::map<std::string, std::string>& labels) {
  json out = json::object();
  for (const auto& [k, v] : labels) out[k] = v;
  return out;
}

Result<std::map<std::string, std::string>> LabelsFrom(const json& j, const std::string& what) {
  std::map<std::string, std::string> out;
  if (j.is_null()) return out;
  if (!j.is_object()) return InvalidArgument(what + " must be an object of strings");
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) return InvalidArgument(what + "." + k + " must be a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

// Typed field access that turns a wrong or missing type into an error naming the field.
template <typename T>
Result<T> Field(const json& j, const char* key, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end()) return InvalidArgument(what + ": " + key + " is missing");
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return InvalidArgument(what + ": " + key + " has the wrong type");
  }
}

template <typename T>
T Optional(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

}  // namespace

int64_t ToMillis(WallTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

WallTime FromMillis(int64_t ms) {
  return WallTime(std::chrono::duration_cast<WallTime::duration>(std::chrono::milliseconds(ms)));
}

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kCompleted: return "completed";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "queued";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kCompleted,
                     JobState::kFailed, JobState::kCancelled}) {
    if (name == JobStateName(s)) return s;
  }
  return std::nullopt;
}

const char* PolicyName(sched::Policy p) {
  switch (p) {
    case sched::Policy::kScore: return "score";
    case sched::Policy::kBinpack: return "binpack";
    case sched::Policy::kSpread: return "spread";
  }
  return "score";
}

std::optional<sched::Policy> ParsePolicy(std::string_view name) {
  for (auto p : {sched::Policy::kScore, sched::Policy::kBinpack, sched::Policy::kSpread}) {
    if (name == PolicyName(p)) return p;
  }
  return std::nullopt;
}

json ToJson(const NodeRecord& n) {
  return {{"name", n.name},
          {"api_url", n.api_url},
          {"advertised_api_url", n.advertised_api_url},
          {"api_url_source", n.api_url_source},
          {"api_url_note", n.api_url_note},
          {"labels", Labels(n.labels)},
          {"version", n.version},
          {"snapshot", gpu::ToJson(n.snapshot)},
          {"registered_at_ms", ToMillis(n.registered_at)},
          {"last_heartbeat_ms", ToMillis(n.last_heartbeat)},
          {"heartbeats", n.heartbeats},
          {"reachable", n.reachable},
          {"registered_by", n.registered_by},
          {"cordoned", n.cordoned},
          {"cordon_reason", n.cordon_reason},
          {"gpu_servers", n.gpu_servers.enabled ? ToJson(n.gpu_servers) : json(nullptr)}};
}

Result<NodeRecord> NodeFromJson(const json& j) {
  NodeRecord n;
  FLYT_ASSIGN_OR_RETURN(n.name, Field<std::string>(j, "name", "node"));
  n.api_url = Optional<std::string>(j, "api_url", "");
  n.advertised_api_url = Optional<std::string>(j, "advertised_api_url", "");
  n.api_url_source = Optional<std::string>(j, "api_url_source", "");
  n.api_url_note = Optional<std::string>(j, "api_url_note", "");
  if (n.api_url_source.empty() && !n.api_url.empty()) {
    // Written before the manager checked where a node's API is: not trusted until the node's
    // next heartbeat says it again from its own address.
    n.advertised_api_url = n.api_url;
    n.api_url.clear();
    n.api_url_source = "none";
    n.api_url_note = "stored before the address was checked; waiting for the next heartbeat";
  }
  FLYT_ASSIGN_OR_RETURN(n.labels, LabelsFrom(j.value("labels", json()), "labels"));
  n.version = Optional<std::string>(j, "version", "");
  if (j.contains("snapshot")) {
    FLYT_ASSIGN_OR_RETURN(n.snapshot, gpu::SnapshotFromJson(j["snapshot"]));
  }
  n.registered_at = FromMillis(Optional<int64_t>(j, "registered_at_ms", 0));
  n.last_heartbeat = FromMillis(Optional<int64_t>(j, "last_heartbeat_ms", 0));
  n.heartbeats = Optional<uint64_t>(j, "heartbeats", 0);
  n.reachable = Optional<bool>(j, "reachable", true);
  n.registered_by = Optional<std::string>(j, "registered_by", "");
  n.cordoned = Optional<bool>(j, "cordoned", false);
  n.cordon_reason = Optional<std::string>(j, "cordon_reason", "");
  if (j.contains("gpu_servers") && j["gpu_servers"].is_object()) {
    auto report = GpuServersFromJson(j["gpu_servers"]);
    if (report.ok()) n.gpu_servers = std::move(*report);  // else: as if the node had none yet
  }
  return n;
}

json ToJson(const ClientRecord& c) {
  return {{"name", c.name},
          {"address", c.address},
          {"labels", Labels(c.labels)},
          {"registered_at_ms", ToMillis(c.registered_at)},
          {"last_seen_ms", ToMillis(c.last_seen)}};
}

Result<ClientRecord> ClientFromJson(const json& j) {
  ClientRecord c;
  FLYT_ASSIGN_OR_RETURN(c.name, Field<std::string>(j, "name", "client"));
  c.address = Optional<std::string>(j, "address", "");
  FLYT_ASSIGN_OR_RETURN(c.labels, LabelsFrom(j.value("labels", json()), "labels"));
  c.registered_at = FromMillis(Optional<int64_t>(j, "registered_at_ms", 0));
  c.last_seen = FromMillis(Optional<int64_t>(j, "last_seen_ms", 0));
  return c;
}

json ToJson(const sched::Lease& l) {
  json gpus = json::array();
  std::string node;
  for (const sched::LeasedGpu& g : l.gpus) {
    if (node.empty()) node = g.node;
    gpus.push_back({{"node", g.node},
                    {"index", g.index},
                    {"uuid", g.uuid},
                    {"name", g.name},
                    {"score", g.score},
                    {"reserved_mb", static_cast<double>(g.reserved_bytes) / (1 << 20)},
                    {"reserved_bytes", g.reserved_bytes}});
    if (l.remote) gpus.back()["sm_count"] = g.sm_count;
  }
  return {{"id", l.id},
          {"owner", l.owner},
          {"node", node},
          {"gpus", gpus},
          {"exclusive", l.exclusive},
          {"kind", l.remote ? "remote" : l.exclusive ? "exclusive" : "shared"},
          {"labels", Labels(l.labels)},
          {"granted_at", gpu::FormatTime(l.granted_at)},
          {"granted_at_ms", ToMillis(l.granted_at)},
          {"expires_at", gpu::FormatTime(l.expires_at)},
          {"expires_at_ms", ToMillis(l.expires_at)},
          {"ttl_seconds", l.ttl.count()},
          {"avoid_states", l.avoid_states},
          {"prefer_idle", l.prefer_idle},
          {"grace_extended", l.grace_extended}};
}

Result<sched::Lease> LeaseFromJson(const json& j) {
  sched::Lease l;
  FLYT_ASSIGN_OR_RETURN(l.id, Field<std::string>(j, "id", "lease"));
  l.owner = Optional<std::string>(j, "owner", "");
  l.exclusive = Optional<bool>(j, "exclusive", true);
  l.remote = Optional<std::string>(j, "kind", "") == "remote";
  if (l.remote) l.exclusive = false;
  FLYT_ASSIGN_OR_RETURN(l.labels, LabelsFrom(j.value("labels", json()), "labels"));
  FLYT_ASSIGN_OR_RETURN(int64_t granted, Field<int64_t>(j, "granted_at_ms", "lease " + l.id));
  FLYT_ASSIGN_OR_RETURN(int64_t expires, Field<int64_t>(j, "expires_at_ms", "lease " + l.id));
  l.granted_at = FromMillis(granted);
  l.expires_at = FromMillis(expires);
  l.ttl = std::chrono::seconds(Optional<int64_t>(j, "ttl_seconds", 0));
  // Leases stored before issue 16 were placed without either.
  l.avoid_states = Optional<std::vector<std::string>>(j, "avoid_states", {});
  l.prefer_idle = Optional<bool>(j, "prefer_idle", false);
  l.grace_extended = Optional<bool>(j, "grace_extended", false);
  if (!j.contains("gpus") || !j["gpus"].is_array()) {
    return InvalidArgument("lease " + l.id + ": gpus is missing");
  }
  for (const json& g : j["gpus"]) {
    sched::LeasedGpu lg;
    FLYT_ASSIGN_OR_RETURN(lg.node, Field<std::string>(g, "node", "lease " + l.id));
    FLYT_ASSIGN_OR_RETURN(lg.index, Field<uint32_t>(g, "index", "lease " + l.id));
    FLYT_ASSIGN_OR_RETURN(lg.uuid, Field<std::string>(g, "uuid", "lease " + l.id));
    lg.name = Optional<std::string>(g, "name", "");
    lg.score = Optional<double>(g, "score", 0);
    lg.reserved_bytes = Optional<uint64_t>(g, "reserved_bytes", 0);
    lg.sm_count = Optional<uint32_t>(g, "sm_count", 0);
    l.gpus.push_back(std::move(lg));
  }
  if (l.remote && l.gpus.size() != 1) return InvalidArgument("remote lease " + l.id + ": not one GPU");
  return l;
}

json ToJson(const sched::Lease& lease, const RemoteLeaseInfo& r) {
  json j = ToJson(lease);
  json remote = {{"client", r.client},
                 {"sm_count_asked", r.sm_count_asked},
                 {"sm_percent", r.sm_percent ? json(*r.sm_percent) : json(nullptr)},
                 {"state", r.state},
                 {"reason", r.reason},
                 {"secret", r.secret},
                 {"server_address", r.server_address},
                 {"server_state", r.server_state},
                 {"server_pid", r.server_pid ? json(*r.server_pid) : json(nullptr)},
                 {"generation", r.generation}};
  if (r.moving) {
    const RemoteMove& m = *r.moving;
    json moving = {{"target", m.target},
                   {"generation", m.generation},
                   {"node", m.gpu.node},
                   {"index", m.gpu.index},
                   {"uuid", m.gpu.uuid},
                   {"name", m.gpu.name},
                   {"score", m.gpu.score},
                   {"reserved_bytes", m.gpu.reserved_bytes},
                   {"sm_count", m.gpu.sm_count},
                   {"started_at_ms", ToMillis(m.started_at)},
                   {"by", m.by},
                   {"address", m.address},
                   {"pid", m.pid ? json(*m.pid) : json(nullptr)},
                   {"clients_until_ms",
                    m.clients_until ? json(ToMillis(*m.clients_until)) : json(nullptr)}};
    remote["moving"] = std::move(moving);
  }
  if (r.resizing) {
    const RemoteResize& z = *r.resizing;
    remote["resizing"] = {{"sm_count_before", z.sm_count_before},
                          {"memory_bytes_before", z.memory_bytes_before},
                          {"sm_count", z.sm_count},
                          {"memory_bytes", z.memory_bytes},
                          {"sm_count_asked", z.sm_count_asked},
                          {"sm_percent", z.sm_percent ? json(*z.sm_percent) : json(nullptr)},
                          {"started_at_ms", ToMillis(z.started_at)},
                          {"by", z.by},
                          {"node_until_ms", ToMillis(z.node_until)}};
  }
  j["remote"] = std::move(remote);
  return j;
}

sched::Lease ReservationOf(const sched::Lease& lease, const RemoteMove& move) {
  sched::Lease r;
  r.id = move.target;
  r.owner = lease.owner;
  r.labels = lease.labels;
  r.exclusive = false;
  r.remote = true;
  r.gpus = {move.gpu};
  r.granted_at = move.started_at;
  r.expires_at = lease.expires_at;
  r.ttl = lease.ttl;
  r.avoid_states = lease.avoid_states;
  r.prefer_idle = lease.prefer_idle;
  return r;
}

Result<std::optional<RemoteLeaseInfo>> RemoteInfoFromJson(const json& j) {
  if (Optional<std::string>(j, "kind", "") != "remote") return std::optional<RemoteLeaseInfo>();
  auto it = j.find("remote");
  if (it == j.end() || !it->is_object()) {
    return InvalidArgument("remote lease " + Optional<std::string>(j, "id", "") +
                           ": its remote part is missing");
  }
  const json& r = *it;
  RemoteLeaseInfo info;
  info.client = Optional<std::string>(r, "client", "");
  info.sm_count_asked = Optional<uint32_t>(r, "sm_count_asked", 0);
  if (r.contains("sm_percent") && r["sm_percent"].is_number()) {
    info.sm_percent = r["sm_percent"].get<double>();
  }
  info.state = Optional<std::string>(r, "state", "starting");
  info.reason = Optional<std::string>(r, "reason", "");
  info.secret = Optional<std::string>(r, "secret", "");
  info.server_address = Optional<std::string>(r, "server_address", "");
  info.server_state = Optional<std::string>(r, "server_state", "");
  if (r.contains("server_pid") && r["server_pid"].is_number_integer()) {
    info.server_pid = r["server_pid"].get<int64_t>();
  }
  info.generation = Optional<uint32_t>(r, "generation", 0);
  if (auto m = r.find("moving"); m != r.end() && m->is_object()) {
    const std::string what = "remote lease " + Optional<std::string>(j, "id", "") + "'s move";
    RemoteMove move;
    FLYT_ASSIGN_OR_RETURN(move.target, Field<std::string>(*m, "target", what));
    FLYT_ASSIGN_OR_RETURN(move.generation, Field<uint32_t>(*m, "generation", what));
    FLYT_ASSIGN_OR_RETURN(move.gpu.node, Field<std::string>(*m, "node", what));
    FLYT_ASSIGN_OR_RETURN(move.gpu.index, Field<uint32_t>(*m, "index", what));
    FLYT_ASSIGN_OR_RETURN(move.gpu.uuid, Field<std::string>(*m, "uuid", what));
    move.gpu.name = Optional<std::string>(*m, "name", "");
    move.gpu.score = Optional<double>(*m, "score", 0);
    move.gpu.reserved_bytes = Optional<uint64_t>(*m, "reserved_bytes", 0);
    move.gpu.sm_count = Optional<uint32_t>(*m, "sm_count", 0);
    move.started_at = FromMillis(Optional<int64_t>(*m, "started_at_ms", 0));
    move.by = Optional<std::string>(*m, "by", "");
    move.address = Optional<std::string>(*m, "address", "");
    if (m->contains("pid") && (*m)["pid"].is_number_integer()) move.pid = (*m)["pid"].get<int64_t>();
    if (m->contains("clients_until_ms") && (*m)["clients_until_ms"].is_number_integer()) {
      move.clients_until = FromMillis((*m)["clients_until_ms"].get<int64_t>());
    }
    info.moving = std::move(move);
  }
  if (auto z = r.find("resizing"); z != r.end() && z->is_object()) {
    const std::string what = "remote lease " + Optional<std::string>(j, "id", "") + "'s resize";
    RemoteResize resize;
    FLYT_ASSIGN_OR_RETURN(resize.sm_count_before, Field<uint32_t>(*z, "sm_count_before", what));
    FLYT_ASSIGN_OR_RETURN(resize.memory_bytes_before,
                          Field<uint64_t>(*z, "memory_bytes_before", what));
    FLYT_ASSIGN_OR_RETURN(resize.sm_count, Field<uint32_t>(*z, "sm_count", what));
    FLYT_ASSIGN_OR_RETURN(resize.memory_bytes, Field<uint64_t>(*z, "memory_bytes", what));
    resize.sm_count_asked = Optional<uint32_t>(*z, "sm_count_asked", 0);
    if (z->contains("sm_percent") && (*z)["sm_percent"].is_number()) {
      resize.sm_percent = (*z)["sm_percent"].get<double>();
    }
    resize.started_at = FromMillis(Optional<int64_t>(*z, "started_at_ms", 0));
    resize.by = Optional<std::string>(*z, "by", "");
    resize.node_until = FromMillis(Optional<int64_t>(*z, "node_until_ms", 0));
    info.resizing = std::move(resize);
  }
  return std::optional<RemoteLeaseInfo>(std::move(info));
}

json RemoteLeaseView(const sched::Lease& l, const RemoteLeaseInfo& r, WallTime now,
                     bool with_secret) {
  const sched::LeasedGpu* g = l.gpus.empty() ? nullptr : &l.gpus.front();
  json server = {{"address", r.server_address.empty() ? json(nullptr) : json(r.server_address)},
                 {"state", r.server_state.empty() ? json(nullptr) : json(r.server_state)}};
  if (r.server_pid) server["pid"] = *r.server_pid;
  json j = {{"id", l.id},
            {"kind", "remote"},
            {"owner", l.owner},
            {"client", r.client},
            {"node", g ? json(g->node) : json(nullptr)},
            {"gpu", g ? json{{"uuid", g->uuid}, {"index", g->index}, {"name", g->name}}
                      : json(nullptr)},
            {"sm_count", g ? g->sm_count : 0},
            {"sm_count_asked", r.sm_count_asked > 0 ? json(r.sm_count_asked) : json(nullptr)},
            {"memory_mb", g ? g->reserved_bytes >> 20 : 0},
            {"state", r.state},
            {"server", server},
            {"granted_at", gpu::FormatTime(l.granted_at)},
            {"expires_at", gpu::FormatTime(l.expires_at)},
            {"ttl_seconds", l.ttl.count()},
            {"expires_in_seconds",
             std::max(0.0, std::chrono::duration<double>(l.expires_at - now).count())},
            {"labels", Labels(l.labels)}};
  if (r.sm_percent) j["sm_percent"] = *r.sm_percent;
  if (!r.reason.empty()) j["reason"] = r.reason;
  j["migrations"] = r.generation;
  if (r.moving) {
    const RemoteMove& m = *r.moving;
    j["moving_to"] = {{"node", m.gpu.node},
                      {"gpu", {{"uuid", m.gpu.uuid}, {"index", m.gpu.index}, {"name", m.gpu.name}}},
                      {"server", m.address.empty() ? json(nullptr) : json(m.address)},
                      {"since", gpu::FormatTime(m.started_at)}};
  }
  if (r.resizing) {
    // The share it had stays shown until the resize is settled (the ledger holds the larger).
    const RemoteResize& z = *r.resizing;
    j["sm_count"] = z.sm_count_before;
    j["memory_mb"] = z.memory_bytes_before >> 20;
    j["resizing_to"] = {{"sm_count", z.sm_count},
                        {"memory_mb", z.memory_bytes >> 20},
                        {"since", gpu::FormatTime(z.started_at)}};
  }
  if (with_secret) j["secret"] = r.secret;
  return j;
}

namespace {

constexpr size_t kMaxGpuServers = 1024;
constexpr size_t kMaxCapacityGpus = 256;

// One server record of a node, rebuilt from its known fields (a newer node may send more; a
// secret is never kept).
Result<json> ServerRecordFromJson(const json& value, const std::string& name) {
  FLYT_RETURN_IF_ERROR(JsonFields::Of(value, name).status());
  JsonFields f(value, name + ".");
  json out = json::object();
  FLYT_ASSIGN_OR_RETURN(std::string lease_id, f.RequiredString("lease_id", 128));
  FLYT_ASSIGN_OR_RETURN(std::string state,
                        f.RequiredEnum("state", {"starting", "running", "draining", "stopped",
                                                 "failed"}));
  out["lease_id"] = lease_id;
  out["state"] = state;
  for (const char* key : {"gpu_uuid", "address", "started_at", "ended_at"}) {
    std::string v;
    FLYT_RETURN_IF_ERROR(f.OptionalString(key, 256, v));
    if (f.Has(key)) out[key] = v;
  }
  std::string reason;
  FLYT_RETURN_IF_ERROR(f.OptionalString("reason", 4096, reason));
  if (f.Has("reason")) out["reason"] = reason;
  for (const char* key : {"gpu_index", "pid", "sm_count", "sm_count_granted", "memory_mb",
                          "clients"}) {
    int64_t v = 0;
    FLYT_RETURN_IF_ERROR(f.OptionalInt<int64_t>(key, 0, int64_t{1} << 40, v));
    if (f.Has(key)) out[key] = v;
  }
  return out;
}

}  // namespace

Result<GpuServersReport> GpuServersFromJson(const json& j) {
  FLYT_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(j, "gpu_servers"));
  GpuServersReport r;
  r.enabled = true;
  FLYT_RETURN_IF_ERROR(f.OptionalBool("enabled", r.enabled));
  const json* servers = nullptr;
  FLYT_RETURN_IF_ERROR(f.OptionalArray("servers", kMaxGpuServers, servers));
  if (servers != nullptr) {
    for (size_t i = 0; i < servers->size(); ++i) {
      FLYT_ASSIGN_OR_RETURN(json rec, ServerRecordFromJson((*servers)[i], "gpu_servers.servers[" +
                                                                              std::to_string(i) +
                                                                              "]"));
      r.servers.push_back(std::move(rec));
    }
  }
  const json* gpus = nullptr;
  FLYT_RETURN_IF_ERROR(f.OptionalArray("gpus", kMaxCapacityGpus, gpus));
  if (gpus != nullptr) {
    for (size_t i = 0; i < gpus->size(); ++i) {
      const std::string name = "gpu_servers.gpus[" + std::to_string(i) + "]";
      FLYT_RETURN_IF_ERROR(JsonFields::Of((*gpus)[i], name).status());
      JsonFields g((*gpus)[i], name + ".");
      GpuServerCapacity c;
      FLYT_ASSIGN_OR_RETURN(c.uuid, g.RequiredString("uuid", 128));
      FLYT_RETURN_IF_ERROR(g.OptionalInt<uint32_t>("index", 0, 65535, c.index));
      if (g.Has("sm_count")) {
        FLYT_ASSIGN_OR_RETURN(c.sm_count, g.RequiredInt<uint32_t>("sm_count", 1, 1 << 20));
      }
      if (g.Has("sm_granularity")) {
        FLYT_ASSIGN_OR_RETURN(c.sm_granularity,
                              g.RequiredInt<uint32_t>("sm_granularity", 1, 1 << 20));
      }
      if (g.Has("memory_total_mb")) {
        FLYT_ASSIGN_OR_RETURN(c.memory_total_mb,
                              g.RequiredInt<uint64_t>("memory_total_mb", 1, uint64_t{1} << 32));
      }
      FLYT_RETURN_IF_ERROR(g.OptionalBool("shared", c.shared));
      FLYT_RETURN_IF_ERROR(g.OptionalString("mps", 32, c.mps));
      FLYT_RETURN_IF_ERROR(g.OptionalString("mps_reason", 1024, c.mps_reason));
      r.gpus.push_back(std::move(c));
    }
  }
  return r;
}

json ToJson(const GpuServersReport& r) {
  json gpus = json::array();
  for (const GpuServerCapacity& c : r.gpus) {
    json g = {{"uuid", c.uuid},
              {"index", c.index},
              {"sm_count", c.sm_count ? json(*c.sm_count) : json(nullptr)},
              {"sm_granularity", c.sm_granularity ? json(*c.sm_granularity) : json(nullptr)},
              {"memory_total_mb", c.memory_total_mb ? json(*c.memory_total_mb) : json(nullptr)},
              {"shared", c.shared},
              {"mps", c.mps}};
    if (!c.mps_reason.empty()) g["mps_reason"] = c.mps_reason;
    gpus.push_back(std::move(g));
  }
  return {{"enabled", r.enabled}, {"servers", r.servers}, {"gpus", gpus}};
}

json ToJson(const sched::AllocationRequest& r) {
  return {{"gpus", r.gpus},
          {"min_free_memory_mb", static_cast<double>(r.min_free_memory_bytes) / (1 << 20)},
          {"max_utilization", r.max_utilization_percent},
          {"same_node", r.same_node},
          {"gpu_model", r.gpu_model},
          {"policy", PolicyName(r.policy)},
          {"exclusive", r.exclusive},
          {"ttl_seconds", r.ttl.count()},
          {"min_free_fraction", r.min_free_fraction},
          {"max_free_spread", r.max_free_spread},
          {"avoid_states", r.avoid_states},
          {"prefer_idle", r.prefer_idle}};
}

namespace {

Result<sched::AllocationRequest> RequestFromJson(const json& j) {
  sched::AllocationRequest r;
  r.gpus = Optional<int>(j, "gpus", 1);
  r.min_free_memory_bytes =
      static_cast<uint64_t>(Optional<double>(j, "min_free_memory_mb", 0) * (1 << 20));
  r.max_utilization_percent = Optional<uint32_t>(j, "max_utilization", 100);
  r.same_node = Optional<bool>(j, "same_node", true);
  r.gpu_model = Optional<std::string>(j, "gpu_model", "");
  auto policy = ParsePolicy(Optional<std::string>(j, "policy", "score"));
  if (!policy) return InvalidArgument("unknown policy in a stored job");
  r.policy = *policy;
  r.exclusive = Optional<bool>(j, "exclusive", true);
  r.ttl = std::chrono::seconds(Optional<int64_t>(j, "ttl_seconds", 3600));
  r.min_free_fraction = Optional<double>(j, "min_free_fraction", 0);
  r.max_free_spread = Optional<double>(j, "max_free_spread", 0);
  // A job stored before issue 16 keeps the placement it was submitted for: no preference.
  r.avoid_states = Optional<std::vector<std::string>>(j, "avoid_states", {});
  r.prefer_idle = Optional<bool>(j, "prefer_idle", false);
  return r;
}

}  // namespace

json ToJson(const TaskRecord& task) {
  return {{"id", task.id},
          {"task_name", task.task_name},
          {"owner", task.owner},
          {"experiments", task.experiments},
          {"parameters", task.shared_parameters},
          {"submitted_at_ms", ToMillis(task.submitted_at)}};
}

Result<TaskRecord> TaskFromJson(const json& j) {
  TaskRecord task;
  FLYT_ASSIGN_OR_RETURN(task.id, Field<std::string>(j, "id", "task"));
  task.task_name = Optional<std::string>(j, "task_name", "");
  task.owner = Optional<std::string>(j, "owner", "");
  task.experiments = Optional<size_t>(j, "experiments", 1);
  task.shared_parameters = j.value("parameters", json::object());
  task.submitted_at = FromMillis(Optional<int64_t>(j, "submitted_at_ms", 0));
  task.shared_bytes = task.shared_parameters.dump().size();
  return task;
}

json ToJson(const Job& job) {
  auto time_or_null = [](const std::optional<WallTime>& t) {
    return t ? json(gpu::FormatTime(*t)) : json(nullptr);
  };
  auto ms_or_null = [](const std::optional<WallTime>& t) {
    return t ? json(ToMillis(*t)) : json(nullptr);
  };
  return {{"id", job.id},
          {"submission", job.submission},
          {"task_name", job.task_name},
          {"model", job.model},
          {"runtime", job.runtime},
          {"experiment", job.experiment},
          {"experiments", job.experiments},
          {"task_id", job.task_id.empty() ? json(nullptr) : json(job.task_id)},
          {"parameters", job.parameters},
          {"estimate", job.estimate},
          {"owner", job.owner},
          {"priority", job.priority},
          {"order", job.order},
          {"requirement", ToJson(job.request)},
          {"lease_id_planned", job.request.id},
          {"timeout_seconds", job.timeout.count()},
          {"status", JobStateName(job.state)},
          {"message", job.message},
          {"submitted_at", gpu::FormatTime(job.submitted_at)},
          {"submitted_at_ms", ToMillis(job.submitted_at)},
          {"started_at", time_or_null(job.started_at)},
          {"started_at_ms", ms_or_null(job.started_at)},
          {"finished_at", time_or_null(job.finished_at)},
          {"finished_at_ms", ms_or_null(job.finished_at)},
          {"lease_id", job.lease_id.empty() ? json(nullptr) : json(job.lease_id)},
          {"gpu_info", job.gpu_info},
          {"monitoring_session",
           job.monitoring_session.empty() ? json(nullptr) : json(job.monitoring_session)},
          {"metrics", job.metrics}};
}

Result<Job> JobFromJson(const json& j) {
  Job job;
  FLYT_ASSIGN_OR_RETURN(job.id, Field<std::string>(j, "id", "job"));
  const std::string what = "job " + job.id;
  job.submission = Optional<std::string>(j, "submission", "");
  job.task_name = Optional<std::string>(j, "task_name", "");
  job.model = Optional<std::string>(j, "model", "");
  job.runtime = Optional<std::string>(j, "runtime", "");
  job.experiment = Optional<size_t>(j, "experiment", 0);
  job.experiments = Optional<size_t>(j, "experiments", 1);
  job.task_id = Optional<std::string>(j, "task_id", "");
  job.parameters = j.value("parameters", json::object());
  job.estimate = j.value("estimate", json(nullptr));
  job.owner = Optional<std::string>(j, "owner", "");
  job.priority = Optional<int>(j, "priority", 0);
  job.order = Optional<int64_t>(j, "order", 0);
  FLYT_ASSIGN_OR_RETURN(job.request, RequestFromJson(j.value("requirement", json::object())));
  job.request.id = Optional<std::string>(j, "lease_id_planned", "");
  job.request.owner = job.owner;
  job.timeout = std::chrono::seconds(Optional<int64_t>(j, "timeout_seconds", 300));
  auto state = ParseJobState(Optional<std::string>(j, "status", ""));
  if (!state) return InvalidArgument(what + ": unknown status");
  job.state = *state;
  job.message = Optional<std::string>(j, "message", "");
  FLYT_ASSIGN_OR_RETURN(int64_t submitted, Field<int64_t>(j, "submitted_at_ms", what));
  job.submitted_at = FromMillis(submitted);
  if (j.contains("started_at_ms") && j["started_at_ms"].is_number()) {
    job.started_at = FromMillis(j["started_at_ms"].get<int64_t>());
  }
  if (j.contains("finished_at_ms") && j["finished_at_ms"].is_number()) {
    job.finished_at = FromMillis(j["finished_at_ms"].get<int64_t>());
  }
  job.lease_id = Optional<std::string>(j, "lease_id", "");
  job.gpu_info = j.value("gpu_info", json(nullptr));
  job.monitoring_session = Optional<std::string>(j, "monitoring_session", "");
  job.metrics = j.value("metrics", json::object());
  return job;
}

sched::GpuState LedgerGpu(const gpu::GpuInfo& g) {
  sched::GpuState s;
  s.index = g.index;
  s.uuid = g.uuid;
  s.name = g.name;
  s.lost = g.lost;
  s.memory_total_bytes = g.memory_total_bytes;
  s.memory_free_bytes = g.memory_free_bytes;
  s.utilization_percent = g.gpu_util_percent;
  s.holds_processes = !g.processes.empty();
  return s;
}

std::vector<sched::GpuState> LedgerGpus(const gpu::GpuSnapshot& snapshot) {
  std::vector<sched::GpuState> out;
  for (const gpu::GpuInfo& g : snapshot.gpus) out.push_back(LedgerGpu(g));
  return out;
}

const profile::GpuProfile* ProfileOf(const NodeRecord& node, const std::string& uuid) {
  for (const profile::GpuProfile& p : node.profiles) {
    if (p.uuid == uuid) return &p;
  }
  return nullptr;
}

std::string ServerKey(const std::string& lease_id, uint32_t generation) {
  return generation == 0 ? lease_id : lease_id + ".m" + std::to_string(generation);
}

std::optional<std::pair<std::string, uint32_t>> ParseServerKey(const std::string& key) {
  const size_t dot = key.rfind(".m");
  if (dot != std::string::npos && dot > 0 && dot + 2 < key.size() && dot + 2 + 9 >= key.size() &&
      key[dot + 2] != '0') {
    uint32_t n = 0;
    bool digits = true;
    for (size_t i = dot + 2; i < key.size(); ++i) {
      if (key[i] < '0' || key[i] > '9') digits = false;
      else n = n * 10 + static_cast<uint32_t>(key[i] - '0');
    }
    if (digits) return std::make_pair(key.substr(0, dot), n);
  }
  if (key.empty()) return std::nullopt;
  return std::make_pair(key, 0u);
}

std::vector<sched::GpuState> LedgerGpus(const NodeRecord& node) {
  std::vector<sched::GpuState> out = LedgerGpus(node.snapshot);
  for (sched::GpuState& g : out) {
    g.cordoned = node.cordoned;
    if (const profile::GpuProfile* p = ProfileOf(node, g.uuid)) {
      g.profile_state = profile::StateName(p->state);
    }
  }
  if (!node.gpu_servers.enabled) return out;
  for (sched::GpuState& g : out) {
    for (const GpuServerCapacity& c : node.gpu_servers.gpus) {
      if (c.uuid != g.uuid) continue;
      g.remote_capable = true;
      g.sm_count = c.sm_count;
      g.sm_granularity = c.sm_granularity;
      g.shared = c.shared;
      // The probe's total (what a server may hand out) when NVML has none.
      if (!g.memory_total_bytes && c.memory_total_mb) g.memory_total_bytes = *c.memory_total_mb << 20;
      break;
    }
  }
  return out;
}

}  // namespace flyt::cluster
