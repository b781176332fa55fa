// Cluster's lifecycle (construction, Start, Stop), its ids and clocks, and its side of the node
// worker (NodeWorkerHost): what a monitoring session is opened for and where its result goes.
// The rest of the class is split by concern; see cluster.h.
#include "cluster/cluster.h"

#include <random>

#include "cluster/cluster_internal.h"
#include "common/strings.h"

namespace flyt::cluster {

using nlohmann::json;
using store::Durability;

const char* TopicName(Topic topic) {
  switch (topic) {
    case Topic::kNodes: return "nodes";
    case Topic::kClients: return "clients";
    case Topic::kLeases: return "allocations";
    case Topic::kJobs: return "jobs";
    case Topic::kEvents: return "events";
  }
  return "?";
}

Cluster::Cluster(std::unique_ptr<store::Store> store, ClusterConfig config, const Clock& clock)
    : store_(std::move(store)),
      config_(std::move(config)),
      clock_(clock),
      shared_store_(config_.sync_interval.count() > 0 &&
                    StartsWith(store_->Describe(), "postgres")),
      ledger_(std::make_unique<sched::Ledger>(clock, config_.ledger)),
      queue_(config_.queue),
      worker_(*this, config_.node_api_token) {
  std::random_device rd;
  random_state_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                  static_cast<uint64_t>(clock.SteadyNow().time_since_epoch().count());
}

Cluster::~Cluster() { Stop(); }

std::string Cluster::NewId(const std::string& prefix) {
  // splitmix64 over a random seed: ids unique across replicas without coordination.
  uint64_t z = (random_state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%012llx", static_cast<unsigned long long>(z >> 16));
  return prefix + "-" + buf;
}

void Cluster::NoteIngestImpaired() {
  const int64_t now = clock_.SteadyNow().time_since_epoch().count();
  int64_t seen = impaired_at_.load();
  while (seen < now && !impaired_at_.compare_exchange_weak(seen, now)) {
  }
  ++ingest_impaired_;
}

std::optional<std::chrono::steady_clock::time_point> Cluster::ImpairedAt() const {
  const int64_t at = impaired_at_.load();
  if (at == INT64_MIN) return std::nullopt;
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(at));
}

std::chrono::steady_clock::time_point Cluster::HeardAt(WallTime last_heartbeat) const {
  const auto now_wall = clock_.WallNow();
  const auto now = clock_.SteadyNow();
  auto ago = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      now_wall - std::min(now_wall, last_heartbeat));
  return now - ago;
}

// ---- lifecycle -------------------------------------------------------------------------------

void Cluster::Start() {
  {
    MutexLock lock(mu_);
    last_pass_ = clock_.SteadyNow() - std::chrono::hours(1);
    // Moves and resizes recorded in the store (a restart between their steps): settled as soon
    // as the nodes can tell where the clients are, or which share the server runs with.
    for (const auto& [id, mv] : moves_) {
      if (!mv.running) {
        QueueResolveLocked();
        break;
      }
    }
  }
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  worker_.Start();
}

void Cluster::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    streams_closed_ = true;
    wake_cv_.NotifyAll();
    change_cv_.NotifyAll();
  }
  if (scheduler_.joinable()) scheduler_.join();
  worker_.Stop();
}

// ---- the node worker's host side -----------------------------------------------------------

std::optional<SessionTarget> Cluster::SessionToOpen(const std::string& job_id) {
  MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.state != JobState::kRunning) return std::nullopt;
  SessionTarget target;
  const std::string node = it->second.gpu_info.value("node", std::string());
  if (nodes_.count(node)) target.url = nodes_.at(node).api_url;
  if (target.url.empty()) return std::nullopt;
  target.gpus = it->second.gpu_info.value("device_ids", json::array());
  target.lease_id = it->second.lease_id;
  return target;
}

bool Cluster::SessionOpened(const std::string& job_id, const std::string& lease_id,
                            const std::string& session, const std::string& error) {
  MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  const bool still_running = it != jobs_.end() && it->second.state == JobState::kRunning &&
                             it->second.lease_id == lease_id;
  if (!still_running) return false;
  Status recorded =
      WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
        Job& job = jobs_.at(job_id);
        if (!session.empty()) {
          job.monitoring_session = session;
        } else {
          job.metrics["gpu_monitoring_error"] = error;
        }
        return PutJob(txn, job);
      });
  // A session that could not be recorded (the store is out) would never be closed: close it now.
  return recorded.ok();
}

void Cluster::SetCompleteHookForTest(std::function<void()> hook) {
  MutexLock lock(mu_);
  complete_hook_ = std::move(hook);
}

std::optional<SessionTarget> Cluster::SessionToClose(const std::string& job_id) {
  MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.monitoring_session.empty()) return std::nullopt;
  SessionTarget target;
  target.session = it->second.monitoring_session;
  const std::string node = it->second.gpu_info.value("node", std::string());
  if (nodes_.count(node)) target.url = nodes_.at(node).api_url;
  return target;
}

void Cluster::SessionClosed(const std::string& job_id, const std::string& session,
                            Result<json> stats) {
  MutexLock lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.monitoring_session != session) return;
  (void)WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    Job& job = jobs_.at(job_id);
    if (stats.ok() && stats->is_object()) {
      stats->erase("id");
      job.metrics["gpu_monitoring"] = *stats;
    } else if (stats.ok()) {
      job.metrics["gpu_monitoring_error"] =
          "the node answered with something other than session stats";
    } else {
      job.metrics["gpu_monitoring_error"] = stats.status().message();
    }
    job.monitoring_session.clear();
    return PutJob(txn, job);
  });
}

}  // namespace flyt::cluster
