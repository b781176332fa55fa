// The read side of Cluster: the JSON the API serves for nodes, GPUs, clients, allocations, jobs,
// the queue and events, the live stream's marks, and the Prometheus text of /metrics. Nothing here
// changes the state; each view takes the state lock for as long as it reads. See cluster.h.
#include <algorithm>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "common/json.h"
#include "gpu/json.h"
#include "profile/json.h"

namespace flyt::cluster {

using internal::kMiB;
using internal::Seconds;
using nlohmann::json;

namespace {

// The live leases on each GPU, by (node, UUID): the identity the ledger and the store's claims
// use. Shared by the GPU list and /metrics, so that both count the same states.
struct Hold {
  const sched::Lease* lease;
  uint64_t reserved_bytes;
};
using Holds = std::map<std::pair<std::string, std::string>, std::vector<Hold>>;

// Where a job stands in the jobs listing: newest first, by submission time, then submission order,
// then id. A cursor names the last job of a page.
struct JobKey {
  int64_t submitted_ms = 0;
  int64_t order = 0;
  std::string id;
  bool operator<(const JobKey& o) const {
    return std::tie(submitted_ms, order, id) < std::tie(o.submitted_ms, o.order, o.id);
  }
};

JobKey KeyOf(const Job& job) { return {ToMillis(job.submitted_at), job.order, job.id}; }

// A cursor is opaque to clients: "j1" and the key's text in hex.
std::string JobCursor(const JobKey& key) {
  const std::string text =
      std::to_string(key.submitted_ms) + ":" + std::to_string(key.order) + ":" + key.id;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "j1";
  for (unsigned char c : text) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::optional<JobKey> ParseJobCursor(const std::string& cursor) {
  if (cursor.size() < 2 || cursor.size() > 1024 || cursor.compare(0, 2, "j1") != 0 ||
      cursor.size() % 2 != 0) {
    return std::nullopt;
  }
  std::string text;
  for (size_t i = 2; i < cursor.size(); i += 2) {
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int hi = nibble(cursor[i]), lo = nibble(cursor[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    text += static_cast<char>(hi * 16 + lo);
  }
  const size_t first = text.find(':');
  const size_t second = first == std::string::npos ? first : text.find(':', first + 1);
  if (second == std::string::npos) return std::nullopt;
  JobKey key;
  try {
    size_t used = 0;
    key.submitted_ms = std::stoll(text.substr(0, first), &used);
    if (used != first) return std::nullopt;
    key.order = std::stoll(text.substr(first + 1, second - first - 1), &used);
    if (used != second - first - 1) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  key.id = text.substr(second + 1);
  return key;
}

Holds HoldsOf(const std::vector<sched::Lease>& leases, WallTime now) {
  Holds holds;
  for (const sched::Lease& l : leases) {
    if (l.expires_at <= now) continue;
    for (const auto& g : l.gpus) holds[{g.node, g.uuid}].push_back({&l, g.reserved_bytes});
  }
  return holds;
}

const char* AllocationState(bool reachable, bool lost, const std::vector<Hold>& holds) {
  if (!reachable) return "unreachable";
  if (lost) return "lost";
  for (const Hold& h : holds) {
    if (h.lease->exclusive) return "leased";
  }
  return holds.empty() ? "free" : "shared";
}

// One GPU as the API shows it: its readings, where it is and who holds it; for a GPU served
// remotely, its SM count, the remote shares carved out of it and the SMs left.
json GpuJson(const sched::Ledger& ledger, const NodeRecord& node_record, const gpu::GpuInfo& g,
             bool reachable, const std::vector<Hold>& on_gpu,
             const std::map<std::string, RemoteLeaseInfo>& remote) {
  const std::string& node = node_record.name;
  json j = gpu::ToJson(g);
  std::optional<uint32_t> sm_count;
  if (node_record.gpu_servers.enabled) {
    for (const GpuServerCapacity& c : node_record.gpu_servers.gpus) {
      if (c.uuid == g.uuid) sm_count = c.sm_count;
    }
  }
  json shares = json::array();
  uint64_t sms_used = 0;
  for (const Hold& h : on_gpu) {
    if (!h.lease->remote) continue;
    auto info = remote.find(h.lease->id);
    uint32_t sms = 0;
    for (const auto& lg : h.lease->gpus) sms = lg.sm_count;
    sms_used += sms;
    shares.push_back({{"lease_id", h.lease->id},
                      {"client", info == remote.end() ? "" : info->second.client},
                      {"sm_count", sms},
                      {"memory_mb", h.reserved_bytes >> 20},
                      {"state", info == remote.end() ? "starting" : info->second.state}});
  }
  j["sm_count"] = sm_count ? json(*sm_count) : json(nullptr);
  j["remote_shares"] = shares;
  j["sm_free"] = sm_count ? json(*sm_count > sms_used ? *sm_count - sms_used : 0) : json(nullptr);
  j["process_count"] = g.processes.size();
  j["node"] = node;
  uint64_t reserved = 0;
  json holders = json::array();
  for (const Hold& h : on_gpu) {
    reserved += h.reserved_bytes;
    holders.push_back({{"lease_id", h.lease->id},
                       {"owner", h.lease->owner},
                       {"exclusive", h.lease->exclusive},
                       {"kind", h.lease->remote      ? "remote"
                                : h.lease->exclusive ? "exclusive"
                                                     : "shared"},
                       {"expires_at", gpu::FormatTime(h.lease->expires_at)}});
  }
  j["allocation_state"] = AllocationState(reachable, g.lost, on_gpu);
  j["leases"] = holders;
  j["reserved_memory_mb"] = static_cast<double>(reserved) / kMiB;
  j["score"] = ledger.Score(LedgerGpu(g), reserved);
  // The usage profile from the node's last heartbeat (kept while the node is unreachable; its
  // allocation_state says so), or null.
  const profile::GpuProfile* p = ProfileOf(node_record, g.uuid);
  j["profile"] = p != nullptr ? profile::ToJson(*p) : json(nullptr);
  return j;
}

json CudaJson(const CudaSummary& c) {
  return {{"pid", c.pid},
          {"comm", c.comm},
          {"gpu_uuid", c.gpu_uuid},
          {"remote", c.remote},
          {"launches", c.launches},
          {"launches_per_second", c.launches_per_second},
          {"device_memory_bytes", c.device_memory_bytes},
          {"device_memory_peak_bytes", c.device_memory_peak_bytes},
          {"leaked_bytes", c.leaked_bytes},
          {"busy_seconds", c.busy_seconds},
          {"core_usage", c.core_usage},
          {"exited", c.exited}};
}

// The GPU detail's processes gain what the node's CUDA tracer saw of them (its last heartbeat):
// "cuda" on the process NVML lists (null when not traced), and entries of their own (source
// "trace") for traced processes on this GPU that NVML does not list (e.g. exited with a leak).
void AddCuda(json& gpu, const std::string& uuid, const std::vector<CudaSummary>& cuda) {
  if (!gpu.contains("processes") || !gpu["processes"].is_array()) return;
  std::vector<bool> used(cuda.size(), false);
  for (json& p : gpu["processes"]) {
    p["source"] = "nvml";
    p["cuda"] = nullptr;
    const uint64_t pid = p.value("pid", uint64_t{0});
    for (size_t i = 0; i < cuda.size(); ++i) {
      if (!used[i] && cuda[i].pid == pid && cuda[i].gpu_uuid == uuid) {
        p["cuda"] = CudaJson(cuda[i]);
        used[i] = true;
        break;
      }
    }
  }
  for (size_t i = 0; i < cuda.size(); ++i) {
    if (used[i] || cuda[i].gpu_uuid != uuid) continue;
    gpu["processes"].push_back({{"pid", cuda[i].pid},
                                {"name", cuda[i].comm},
                                {"used_memory_bytes", nullptr},
                                {"source", "trace"},
                                {"cuda", CudaJson(cuda[i])}});
  }
}

}  // namespace

json Cluster::Nodes() const {
  MutexLock lock(mu_);
  std::map<std::string, int> leased;
  for (const sched::Lease& l : ledger_->Leases()) {
    for (const auto& g : l.gpus) ++leased[g.node];
  }
  json list = json::array();
  for (const auto& [name, n] : nodes_) {
    int lost = 0;
    for (const auto& g : n.snapshot.gpus) lost += g.lost ? 1 : 0;
    list.push_back(
        {{"name", name},
         {"state", ledger_->Reachable(name) ? "reachable" : "unreachable"},
         {"cordoned", n.cordoned},
         {"cordon_reason", n.cordon_reason.empty() ? json(nullptr) : json(n.cordon_reason)},
         {"labels", ToJson(n)["labels"]},
         {"api_url", n.api_url},
         {"advertised_api_url", n.advertised_api_url},
         {"api_url_source", n.api_url_source},
         {"version", n.version},
         {"gpu_count", n.snapshot.gpus.size()},
         {"gpus_lost", lost},
         {"gpus_leased", leased[name]},
         {"gpu_model", n.snapshot.gpus.empty() ? "" : n.snapshot.gpus[0].name},
         {"driver_version", n.snapshot.driver_version.value_or("")},
         {"source", gpu::SourceName(n.snapshot.source)},
         {"simulated_scenario",
          n.snapshot.simulated_scenario ? json(*n.snapshot.simulated_scenario) : json(nullptr)},
         {"registered_at", gpu::FormatTime(n.registered_at)},
         {"last_heartbeat", gpu::FormatTime(n.last_heartbeat)},
         {"seconds_since_heartbeat", Seconds(clock_.WallNow() - n.last_heartbeat)},
         {"heartbeats", n.heartbeats}});
  }
  return {{"nodes", list}};
}

Result<json> Cluster::Node(const std::string& name) const {
  MutexLock lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return NotFound("no node " + name);
  json j = ToJson(it->second);
  j["state"] = ledger_->Reachable(name) ? "reachable" : "unreachable";
  j["registered_at"] = gpu::FormatTime(it->second.registered_at);
  j["last_heartbeat"] = gpu::FormatTime(it->second.last_heartbeat);
  json cuda = json::array();
  for (const CudaSummary& c : it->second.cuda) cuda.push_back(CudaJson(c));
  j["cuda"] = cuda;  // the node's traced CUDA processes, from its last heartbeat (in memory)
  return j;
}

json Cluster::Gpus() const {
  MutexLock lock(mu_);
  const std::vector<sched::Lease> leases = ledger_->Leases();
  Holds holds = HoldsOf(leases, clock_.WallNow());
  json list = json::array();
  for (const auto& [name, n] : nodes_) {
    const bool reachable = ledger_->Reachable(name);
    for (const gpu::GpuInfo& g : n.snapshot.gpus) {
      json j = GpuJson(*ledger_, n, g, reachable, holds[{name, g.uuid}], remote_);
      j.erase("processes");
      list.push_back(std::move(j));
    }
  }
  return {{"gpus", list}};
}

Result<json> Cluster::Gpu(const std::string& node, unsigned index) const {
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound("no node " + node);
  for (const gpu::GpuInfo& g : it->second.snapshot.gpus) {
    if (g.index != index) continue;
    const std::vector<sched::Lease> leases = ledger_->Leases();  // the holds point into it
    Holds holds = HoldsOf(leases, clock_.WallNow());
    json j = GpuJson(*ledger_, it->second, g, ledger_->Reachable(node), holds[{node, g.uuid}],
                     remote_);
    AddCuda(j, g.uuid, it->second.cuda);
    j["node_api_url"] = it->second.api_url;
    return j;
  }
  return NotFound("node " + node + " has no GPU " + std::to_string(index));
}

Result<std::string> Cluster::NodeApiUrl(const std::string& node) const {
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound("no node " + node);
  if (it->second.api_url.empty()) {
    if (!it->second.advertised_api_url.empty()) {
      return NotFound("node " + node + "'s API is not called: " + it->second.api_url_note);
    }
    return NotFound("node " + node + " did not advertise an API URL (--advertise-url)");
  }
  return it->second.api_url;
}

std::shared_ptr<const std::string> Cluster::GpusBody() {
  // Serialising every GPU of a large cluster costs milliseconds (8.8 MB for 8,000 GPUs): build
  // it at most once per state change, and at most once a second while heartbeats stream in —
  // but at once after a change of leases, so that a GPU just granted never shows as free.
  const auto now = std::chrono::steady_clock::now();
  uint64_t version, leases_version;
  {
    MutexLock lock(mu_);
    version = state_version_;
    leases_version = leases_version_;
  }
  {
    MutexLock lock(gpus_mu_);
    if (gpus_body_ && (gpus_version_ == version ||
                       (gpus_leases_version_ == leases_version &&
                        now - gpus_built_ < std::chrono::seconds(1)))) {
      return gpus_body_;
    }
  }
  auto body = std::make_shared<const std::string>(DumpJson(Gpus()) + "\n");
  MutexLock lock(gpus_mu_);
  gpus_body_ = body;
  gpus_version_ = version;
  gpus_leases_version_ = leases_version;
  gpus_built_ = now;
  return body;
}

json Cluster::Clients() const {
  MutexLock lock(mu_);
  std::map<std::string, int> leases;
  // Remote leases by their client node; a client named only by remote leases (its client
  // manager does not register) is listed too, with "registered": false.
  std::map<std::string, json> remote;
  const auto now = clock_.WallNow();
  for (const sched::Lease& l : ledger_->Leases()) {
    ++leases[l.owner];
    if (!l.remote || l.expires_at <= now) continue;
    json& ids = remote[RemoteInfoLocked(l.id).client];
    if (ids.is_null()) ids = json::array();
    ids.push_back(l.id);
  }
  json list = json::array();
  for (const auto& [name, c] : clients_) {
    json j = ToJson(c);
    j["registered"] = true;
    j["registered_at"] = gpu::FormatTime(c.registered_at);
    j["last_seen"] = gpu::FormatTime(c.last_seen);
    j["leases"] = leases[name];
    auto r = remote.find(name);
    j["remote_leases"] = r == remote.end() ? json::array() : r->second;
    list.push_back(std::move(j));
  }
  for (const auto& [name, ids] : remote) {
    if (clients_.count(name)) continue;
    list.push_back({{"name", name}, {"registered", false}, {"leases", 0}, {"remote_leases", ids}});
  }
  return {{"clients", list}};
}

json Cluster::Allocations() const {
  MutexLock lock(mu_);
  json list = json::array();
  const auto now = clock_.WallNow();
  for (const sched::Lease& l : ledger_->Leases()) {
    if (l.expires_at <= now) continue;
    json j = ToJson(l);
    j["expires_in_seconds"] = Seconds(l.expires_at - now);
    auto jl = job_of_lease_.find(l.id);
    j["job_id"] = jl == job_of_lease_.end() ? json(nullptr) : json(jl->second);
    list.push_back(std::move(j));
  }
  return {{"allocations", list}};
}

Result<json> Cluster::Jobs(const std::string& status_filter, size_t limit,
                           const std::string& cursor) const {
  std::optional<JobState> want;
  if (!status_filter.empty()) {
    want = ParseJobState(status_filter);
    if (!want) {
      return InvalidArgument("status must be queued, running, completed, failed or cancelled");
    }
  }
  std::optional<JobKey> after;
  if (!cursor.empty()) {
    after = ParseJobCursor(cursor);
    if (!after) return InvalidArgument("continue is not a cursor this manager gave");
  }
  MutexLock lock(mu_);
  // Newest first: a page is the `limit` greatest keys below the cursor (a partial sort).
  std::vector<std::pair<JobKey, const Job*>> sorted;
  size_t matching = 0;
  for (const auto& [id, job] : jobs_) {
    if (want && job.state != *want) continue;
    ++matching;
    JobKey key = KeyOf(job);
    if (after && !(key < *after)) continue;
    sorted.emplace_back(std::move(key), &job);
  }
  const bool more = sorted.size() > limit;
  const size_t page = std::min(limit, sorted.size());
  std::partial_sort(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(page),
                    sorted.end(), [](const auto& a, const auto& b) { return b.first < a.first; });
  sorted.resize(page);
  // A listing shows a job's own values and, when they are small (kListedSharedBytes), its task's
  // shared ones: a page of a thousand jobs must not repeat a large shared value a thousand times
  // (GET /api/v1/jobs/{id} shows them all).
  constexpr size_t kListedSharedBytes = 1024;
  auto listed = [&](const Job& job) FLYT_REQUIRES(mu_) -> std::pair<json, bool> {
    auto task = job.task_id.empty() ? tasks_.end() : tasks_.find(job.task_id);
    if (task == tasks_.end()) return {job.parameters, false};
    if (task->second.shared_bytes > kListedSharedBytes) return {job.parameters, true};
    return {MergedParametersLocked(job), false};
  };
  const auto now = clock_.WallNow();
  json list = json::array();
  for (const auto& [key, job] : sorted) {
    const WallTime started = job->started_at.value_or(job->finished_at.value_or(now));
    json gpu_model = nullptr;
    if (job->gpu_info.is_object() && job->gpu_info.contains("model")) {
      gpu_model = job->gpu_info["model"];
    }
    list.push_back(
        {{"id", job->id},
         {"submission", job->submission},
         {"task_name", job->task_name},
         {"experiment", job->experiment},
         {"experiments", job->experiments},
         {"parameters", listed(*job).first},
         {"parameters_omitted", listed(*job).second},
         {"task_id", job->task_id.empty() ? json(nullptr) : json(job->task_id)},
         {"model", job->model},
         {"runtime", job->runtime},
         {"owner", job->owner},
         {"priority", job->priority},
         {"status", JobStateName(job->state)},
         {"message", job->message},
         {"gpus", job->request.gpus},
         {"gpu_model", gpu_model},
         {"node",
          job->gpu_info.is_object() ? job->gpu_info.value("node", json(nullptr)) : json(nullptr)},
         {"has_monitoring", job->metrics.contains("gpu_monitoring")},
         {"submitted_at", gpu::FormatTime(job->submitted_at)},
         {"wait_seconds", Seconds(started - job->submitted_at)},
         {"runtime_seconds", job->started_at
                                 ? json(Seconds(job->finished_at.value_or(now) - *job->started_at))
                                 : json(nullptr)}});
  }
  json next = nullptr;
  if (more && !sorted.empty()) next = JobCursor(sorted.back().first);
  return json{{"jobs", list}, {"total", matching}, {"more", more}, {"continue", next}};
}

Result<json> Cluster::GetJob(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job " + id);
  json j = ToJson(it->second);
  j.erase("lease_id_planned");
  j["parameters"] = MergedParametersLocked(it->second);
  if (it->second.state == JobState::kQueued) {
    size_t position = 0;
    for (const sched::QueuedJob& q : queue_.Ordered()) {
      ++position;
      if (q.id == id) {
        j["queue_position"] = position;
        j["message"] = q.last_reason.empty() ? it->second.message : q.last_reason;
      }
    }
  }
  return j;
}

json Cluster::Queue() const {
  MutexLock lock(mu_);
  json list = json::array();
  const auto now = clock_.WallNow();
  size_t position = 0;
  for (const sched::QueuedJob& q : queue_.Ordered()) {
    json j = {{"position", ++position},
              {"job_id", q.id},
              {"priority", q.priority},
              {"requirement", ToJson(q.request)},
              {"waiting_seconds", Seconds(now - q.submitted_at)},
              {"timeout_in_seconds", Seconds(q.deadline - now)},
              {"reason", q.last_reason}};
    auto it = jobs_.find(q.id);
    if (it != jobs_.end()) {
      j["task_name"] = it->second.task_name;
      j["experiment"] = it->second.experiment;
      j["owner"] = it->second.owner;
    }
    list.push_back(std::move(j));
  }
  return {{"queue", list}};
}

Result<json> Cluster::Events(int64_t after_id, size_t limit, bool latest) const {
  // A page stops at about this many bytes of events too (events stored before [events]
  // max_event_bytes existed may be large): at least one event, then no more past it.
  constexpr size_t kMaxEventsReplyBytes = 4 << 20;
  FLYT_ASSIGN_OR_RETURN(auto rows, latest ? store_->LatestEvents(limit + 1)
                                          : store_->Events(after_id, limit + 1));
  bool more = rows.size() > limit;
  if (more) {
    // Oldest first: `latest` drops the oldest, a page after an id its last.
    if (latest) {
      rows.erase(rows.begin());
    } else {
      rows.pop_back();
    }
  }
  size_t bytes = 0, first = 0, last = rows.size();
  if (latest) {
    for (size_t i = rows.size(); i-- > 0;) {
      bytes += rows[i].body.size();
      if (bytes > kMaxEventsReplyBytes && i + 1 < rows.size()) {
        first = i + 1;
        more = true;
        break;
      }
    }
  } else {
    for (size_t i = 0; i < rows.size(); ++i) {
      bytes += rows[i].body.size();
      if (bytes > kMaxEventsReplyBytes && i > 0) {
        last = i;
        more = true;
        break;
      }
    }
  }
  json list = json::array();
  int64_t next_after = after_id;
  for (size_t i = first; i < last; ++i) {
    const store::EventRow& r = rows[i];
    json body = json::parse(r.body, nullptr, false);
    if (!body.is_object()) body = json::object();
    body["id"] = r.id;
    body["kind"] = r.kind;
    body["at"] = gpu::FormatTime(FromMillis(r.at_ms));
    list.push_back(std::move(body));
    next_after = std::max(next_after, r.id);
  }
  return json{{"events", list}, {"more", more}, {"next_after", next_after}};
}

ChangeMark Cluster::Changes() const {
  MutexLock lock(mu_);
  return changes_;
}

ChangeMark Cluster::WaitForChange(uint64_t seen_seq, std::chrono::milliseconds timeout) const {
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!streams_closed_ && changes_.seq == seen_seq) {
    if (!change_cv_.WaitUntil(mu_, deadline)) break;
  }
  return changes_;
}

void Cluster::CloseStreams() {
  MutexLock lock(mu_);
  streams_closed_ = true;
  change_cv_.NotifyAll();
}

bool Cluster::StreamsClosed() const {
  MutexLock lock(mu_);
  return streams_closed_;
}

std::string Cluster::Metrics() const {
  MutexLock lock(mu_);
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto sample = [&](const std::string& series, double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    out += series + " " + buf + "\n";
  };
  // A family of one unlabelled sample.
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    family(name, type, help);
    sample(name, v);
  };
  // A family with one sample per key of `counts`, as name{label="key"}.
  auto by_label = [&](const char* name, const char* type, const char* help, const char* label,
                      const std::map<std::string, int>& counts) {
    family(name, type, help);
    for (const auto& [key, count] : counts) {
      sample(std::string(name) + "{" + label + "=\"" + key + "\"}", count);
    }
  };
  int reachable = 0;
  for (const auto& [name, n] : nodes_) reachable += ledger_->Reachable(name) ? 1 : 0;
  by_label(
      "flyt_cluster_nodes", "gauge", "Nodes known to the manager, by state.", "state",
      {{"reachable", reachable}, {"unreachable", static_cast<int>(nodes_.size()) - reachable}});

  std::map<std::string, int> gpu_states = {
      {"free", 0}, {"leased", 0}, {"shared", 0}, {"lost", 0}, {"unreachable", 0}};
  const std::vector<sched::Lease> leases = ledger_->Leases();
  Holds holds = HoldsOf(leases, clock_.WallNow());
  for (const auto& [name, n] : nodes_) {
    const bool ok = ledger_->Reachable(name);
    for (const auto& g : n.snapshot.gpus)
      ++gpu_states[AllocationState(ok, g.lost, holds[{name, g.uuid}])];
  }
  by_label("flyt_cluster_gpus", "gauge", "GPUs in the cluster, by allocation state.", "state",
           gpu_states);
  std::map<std::string, int> profile_states;
  for (profile::State s : profile::AllStates()) profile_states[profile::StateName(s)] = 0;
  for (const auto& [name, n] : nodes_) {
    for (const auto& g : n.snapshot.gpus) {
      const profile::GpuProfile* p = ProfileOf(n, g.uuid);
      ++profile_states[profile::StateName(p != nullptr ? p->state : profile::State::kUnknown)];
    }
  }
  by_label("flyt_cluster_gpus_by_state", "gauge",
           "GPUs in the cluster, by the state of their usage profile (nodes' last heartbeats; "
           "a GPU without a profile counts as unknown).",
           "state", profile_states);
  metric("flyt_cluster_gpu_state_changes_total", "counter",
         "gpu.state_changed events raised (a GPU's usage-profile state changed).",
         static_cast<double>(counters_.gpu_state_changes));
  metric("flyt_cluster_gpu_state_changes_held_total", "counter",
         "Usage-profile state changes not raised as events: within 30 s of the GPU's last one.",
         static_cast<double>(counters_.gpu_state_changes_held));
  metric("flyt_cluster_leases", "gauge", "Active leases.", static_cast<double>(leases.size()));
  std::map<std::string, int> job_states = {
      {"queued", 0}, {"running", 0}, {"completed", 0}, {"failed", 0}, {"cancelled", 0}};
  for (const auto& [id, job] : jobs_) ++job_states[JobStateName(job.state)];
  by_label("flyt_cluster_jobs", "gauge", "Jobs (experiments) known to the manager, by status.",
           "status", job_states);
  std::map<std::string, int> remote_states = {{"starting", 0}, {"ready", 0}, {"failed", 0}};
  for (const sched::Lease& l : leases) {
    if (l.remote) ++remote_states[RemoteInfoLocked(l.id).state];
  }
  by_label("flyt_cluster_remote_leases", "gauge", "Live remote leases, by state.", "state",
           remote_states);
  metric("flyt_cluster_remote_lease_grants_total", "counter",
         "Remote leases granted (answered once their GPU server was up).",
         static_cast<double>(counters_.remote_grants));
  metric("flyt_cluster_remote_lease_migrations_total", "counter",
         "Remote leases moved to another GPU server (flytctl remote migrate, nodes drain).",
         static_cast<double>(counters_.remote_migrations));
  metric("flyt_cluster_remote_lease_migration_failures_total", "counter",
         "Moves of remote leases that ended with the lease where it was.",
         static_cast<double>(counters_.remote_migration_failures));
  metric("flyt_cluster_remote_lease_resizes_total", "counter",
         "Remote leases given a new SM share or memory limit while running.",
         static_cast<double>(counters_.remote_resizes));
  metric("flyt_cluster_remote_lease_resize_failures_total", "counter",
         "Resizes of remote leases that their GPU server did not take.",
         static_cast<double>(counters_.remote_resize_failures));
  metric("flyt_cluster_remote_lease_refusals_total", "counter",
         "Remote lease requests refused: no GPU with room (insufficient_gpus, never_fits).",
         static_cast<double>(counters_.remote_refusals));
  metric("flyt_cluster_remote_lease_start_failures_total", "counter",
         "Remote leases released because their node did not start the GPU server (503).",
         static_cast<double>(counters_.remote_start_failures));
  std::map<std::string, int> server_states = {
      {"starting", 0}, {"running", 0}, {"draining", 0}, {"stopped", 0}, {"failed", 0}};
  for (const auto& [name, n] : nodes_) {
    for (const json& server : n.gpu_servers.servers) ++server_states[server.value("state", "")];
  }
  server_states.erase("");  // a server without a state counts in none
  by_label("flyt_cluster_gpu_servers", "gauge",
           "GPU servers the nodes reported in their latest heartbeats, by state.", "state",
           server_states);
  metric("flyt_cluster_queue_length", "gauge", "Jobs waiting for GPUs.",
         static_cast<double>(queue_.size()));
  metric("flyt_cluster_heartbeats_total", "counter", "Node heartbeats accepted.",
         static_cast<double>(counters_.heartbeats));
  metric("flyt_cluster_gpu_conflicts_total", "counter",
         "Node heartbeats refused: they listed a GPU UUID another node reported first.",
         static_cast<double>(counters_.gpu_conflicts));
  metric("flyt_cluster_nodes_removed_total", "counter", "Nodes removed by an admin.",
         static_cast<double>(counters_.nodes_removed));
  family("flyt_cluster_allocations_total", "counter", "Allocation requests, by result.");
  sample("flyt_cluster_allocations_total{result=\"granted\"}",
         static_cast<double>(counters_.allocations_granted));
  sample("flyt_cluster_allocations_total{result=\"refused\"}",
         static_cast<double>(counters_.allocations_refused));
  metric("flyt_cluster_ingest_impaired_total", "counter",
         "Times the manager could not receive in time (connections refused, requests waiting for "
         "a worker, a stalled loop); node silence is not counted toward lease_grace then.",
         static_cast<double>(ingest_impaired_.load()));
  metric("flyt_cluster_schedule_passes_total", "counter", "Scheduler passes over the queue.",
         static_cast<double>(counters_.schedule_passes));
  metric("flyt_cluster_last_schedule_pass_seconds", "gauge",
         "Wall time of the last scheduler pass, store transaction included.",
         counters_.last_pass_seconds);
  metric("flyt_cluster_store_errors_total", "counter",
         "Store transactions that failed (the manager reloaded its state, or entered an outage).",
         static_cast<double>(counters_.store_errors));
  metric("flyt_cluster_store_revision", "gauge", "The store revision this manager reflects.",
         static_cast<double>(revision_));
  metric("flyt_cluster_store_up", "gauge",
         "1 while the store can be written; 0 during an outage (changes refused with 503).",
         outage_ ? 0 : 1);
  metric("flyt_cluster_store_healthy", "gauge",
         "1 while the store can be written and its last consistency check (and every "
         "transaction since) found it sound; 0 otherwise (see /healthz).",
         outage_ || damage_ ? 0 : 1);
  family("flyt_cluster_store_error_kinds_total", "counter",
         "Store errors by kind: disk_full, unwritable, damaged, busy, connection, refused, other.");
  for (const char* kind :
       {"disk_full", "unwritable", "damaged", "busy", "connection", "refused", "other"}) {
    auto it = store_errors_by_kind_.find(kind);
    sample(std::string("flyt_cluster_store_error_kinds_total{kind=\"") + kind + "\"}",
           it == store_errors_by_kind_.end() ? 0.0 : static_cast<double>(it->second));
  }
  metric("flyt_cluster_store_outages_total", "counter",
         "Times the store became unwritable (full or read-only disk, lost database).",
         static_cast<double>(counters_.store_outages));
  metric("flyt_cluster_store_writes_refused_total", "counter",
         "Changes refused with 503 store_unavailable because the store could not be written.",
         static_cast<double>(counters_.writes_refused));
  metric("flyt_cluster_jobs_pruned_total", "counter",
         "Finished jobs dropped by retention ([jobs] keep_finished_for, keep_finished_max).",
         static_cast<double>(counters_.jobs_pruned));
  metric("flyt_cluster_profiles_refused_total", "counter",
         "Usage profiles in node heartbeats that did not parse, or profiled a GPU twice: dropped "
         "(the heartbeat is kept).",
         static_cast<double>(counters_.profiles_refused));
  metric("flyt_cluster_node_events_dropped_total", "counter",
         "Node events dropped: past [events] max_per_heartbeat in one heartbeat.",
         static_cast<double>(counters_.events_dropped));
  metric("flyt_cluster_node_events_truncated_total", "counter",
         "Node events cut short (marked truncated): larger than [events] max_event_bytes.",
         static_cast<double>(counters_.events_truncated));
  metric("flyt_cluster_idempotent_replays_total", "counter",
         "POST /allocations and /jobs answered again from their Idempotency-Key.",
         static_cast<double>(counters_.idempotent_replays));
  metric("flyt_cluster_submissions_too_large_total", "counter",
         "Submissions refused (413) for expanding past [jobs] max_expanded_bytes.",
         static_cast<double>(counters_.submissions_too_large));
  return out;
}

json Cluster::StoreHealth() const {
  MutexLock lock(mu_);
  // /healthz is public: where the store is stays in the log and the 503s; what the database said
  // is told without it.
  const std::string where = store_->Describe();
  auto without_where = [&where](std::string message) {
    for (size_t at; (at = message.find(where)) != std::string::npos;) {
      size_t end = at + where.size();
      if (message.compare(end, 2, ": ") == 0) end += 2;
      message.erase(at, end - at);
    }
    return message;
  };
  if (outage_) {
    return {{"state", "unavailable"},
            {"since", gpu::FormatTime(outage_->since_wall)},
            {"seconds",
             std::chrono::duration<double>(clock_.SteadyNow() - outage_->since).count()},
            {"writes_refused", outage_->writes_refused},
            {"message", without_where(outage_->error)}};
  }
  if (damage_) {
    return {{"state", "damaged"},
            {"since", gpu::FormatTime(damage_->since)},
            {"message", without_where(damage_->error)}};
  }
  return {{"state", "ok"}};
}

}  // namespace flyt::cluster
