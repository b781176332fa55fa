// NodeWorker: the cluster manager's one thread that talks to node managers — it opens a GPU
// monitoring session on the node when a job starts and closes it (keeping its stats) when the
// job ends, and tells a node to drain the GPU server of a remote lease that ended. A remote
// lease's server is started with StartGpuServer, on the caller's thread (the API request waits
// for it), with no lock held.
//
// A call to a node may take seconds or time out; the cluster's state lock must never be held
// across one, or every API request and the scheduler would wait on a slow node. So the cluster
// only queues work here (OpenSession/CloseSession return at once, even with the cluster's lock
// held), and the worker asks the cluster what to do and tells it what happened through the
// narrow NodeWorkerHost interface, each of whose calls takes and drops the cluster's lock by
// itself. The worker holds its own mutex only around its queue, never across a host call or a
// network call, so the lock order is always cluster → worker.
//
// Ownership: the NodeWorker belongs to the Cluster (its host), which outlives it. Thread-safety:
// every method may be called from any thread; Start and Stop from the owner only.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"

namespace flyt::cluster {

// Where a job's monitoring session lives.
struct SessionTarget {
  std::string url;       // the node manager's API URL (empty: the node advertised none)
  std::string lease_id;  // the job's lease when the session is opened
  nlohmann::json gpus;   // the device indexes to monitor (opening)
  std::string session;   // the session id (closing)
};

// What the worker needs from the cluster. Each call takes the cluster's lock itself: the worker
// calls them with no lock held.
class NodeWorkerHost {
 public:
  virtual ~NodeWorkerHost() = default;
  // The session to open for a running job; nullopt when the job is not running or its node has
  // no API URL.
  virtual std::optional<SessionTarget> SessionToOpen(const std::string& job_id) = 0;
  // Records the session the node opened (`session`), or why none was (`error`). Returns false
  // when the job no longer runs on that lease, or the session could not be recorded (the store is
  // out): the caller must close the session again.
  virtual bool SessionOpened(const std::string& job_id, const std::string& lease_id,
                             const std::string& session, const std::string& error) = 0;
  // The session to close for a job; nullopt when it has none.
  virtual std::optional<SessionTarget> SessionToClose(const std::string& job_id) = 0;
  // Records what closing `session` returned (the session's stats, or the failure).
  virtual void SessionClosed(const std::string& job_id, const std::string& session,
                             Result<nlohmann::json> stats) = 0;
};

class NodeWorker {
 public:
  NodeWorker(NodeWorkerHost& host, std::string node_api_token);
  ~NodeWorker();
  NodeWorker(const NodeWorker&) = delete;
  NodeWorker& operator=(const NodeWorker&) = delete;

  void Start();
  // Drops the calls not yet made and joins the thread; later Open/CloseSession do nothing.
  void Stop() FLYT_EXCLUDES(mu_);

  // Queue the opening / closing of a job's monitoring session.
  void OpenSession(const std::string& job_id) FLYT_EXCLUDES(mu_);
  void CloseSession(const std::string& job_id) FLYT_EXCLUDES(mu_);

  // Closes a session on a node now, on the caller's thread, and returns its stats (for a caller
  // that must wait for them and holds no lock).
  Result<nlohmann::json> DeleteSession(const std::string& url, const std::string& session) const;

  // PUT /api/v1/gpu-servers/{lease} on the node at `url` with `body` (section 2 of the remote
  // lease contract), waiting at most `timeout` for the node's answer (the server record), on the
  // caller's thread. The caller holds no lock.
  Result<nlohmann::json> StartGpuServer(const std::string& url, const std::string& lease_id,
                                        const nlohmann::json& body,
                                        std::chrono::seconds timeout) const;
  // POST /api/v1/gpu-servers/{key}/{action} ("migrate": move the server's clients to another
  // server; "resize": a new SM share and memory limit) on the node at `url`, waiting at most
  // `timeout` for the answer, on the caller's thread. The caller holds no lock.
  Result<nlohmann::json> GpuServerAction(const std::string& url, const std::string& key,
                                         const std::string& action, const nlohmann::json& body,
                                         std::chrono::seconds timeout) const;
  // GET /api/v1/gpu-servers/{key} on the node at `url`: the server's record, with the number of
  // clients connected to it ("clients"), waiting at most `timeout`, on the caller's thread.
  Result<nlohmann::json> GetGpuServer(const std::string& url, const std::string& key,
                                      std::chrono::seconds timeout) const;
  // Runs `task` on the worker's thread, after the calls queued before it (a task that calls the
  // cluster takes its lock itself). Dropped when the worker stops first.
  void Queue(std::function<void()> task) FLYT_EXCLUDES(mu_) { Post(std::move(task)); }
  // Queues DELETE /api/v1/gpu-servers/{lease} on the node at `url` (drain); a 404 is fine. A call
  // that fails is logged; the node's next heartbeat reconciliation drains it anyway.
  void DrainGpuServer(const std::string& url, const std::string& lease_id) FLYT_EXCLUDES(mu_);

 private:
  void Post(std::function<void()> task) FLYT_EXCLUDES(mu_);
  void Loop() FLYT_EXCLUDES(mu_);
  void DoOpen(const std::string& job_id);
  void DoClose(const std::string& job_id);

  NodeWorkerHost& host_;
  const std::string node_api_token_;

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> work_ FLYT_GUARDED_BY(mu_);
  bool stopping_ FLYT_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace flyt::cluster
