// ClientManager: the heart of flyt-client-manager. It listens on a Unix socket for programs that
// use flyt's libcudart without FLYT_SERVER, leases a share of a remote GPU for them from the
// cluster manager, and answers each with the GPU server's address and the lease's secret.
//
// Protocol (docs/design.md, "flyt-client-manager"): one JSON object per line, at most 64 KiB.
// A program sends {"op":"acquire","pid":N,"program":"name","version":1,"profile"?:{...}} and keeps
// the connection open for its lifetime; it is counted as connected while it is open (the kernel
// closes it at exit, crash or kill -9). The answer is {"ok":true,"server","secret","lease_id",
// "node","gpu_uuid","sm_count","memory_mb"} or {"ok":false,"code","error"}. Later the manager
// may push {"event":"lease_failed",...} on the connection. A malformed or oversize line, an
// unknown op, a second acquire or no acquire within the first-line timeout closes the connection.
//
// Leases: one per profile (the [lease] defaults with the program's fields over them). Programs
// asking at once for a profile that has no lease wait for one request to the cluster manager; an
// answer comes within acquire_timeout whatever the cluster manager does. A lease is renewed every
// renew_interval until it is released, release_after after its last program disconnected. A renew
// answered lease_failed or already_ended drops the lease (a failed one is also released, to free
// its share): its programs get the event, the next program a new lease.
//
// Lease creation is idempotent: each intended lease gets an Idempotency-Key, sent on every
// attempt of that creation (a retry after no answer, a poll of a lease whose server is still
// starting) and kept for the profile's next acquire while no answer settled it, so a lost answer
// never leaves a second lease (and GPU server) behind.
//
// A dead server: a program that cannot connect to the server it was given sends
// {"op":"server_dead","lease_id","server"} on its connection (it must hold that lease). The
// manager probes the address itself; only a server that refuses connections (or whose socket is
// gone) is dead: its lease is dropped (holders get lease_failed), released at the cluster
// manager, and a new one is asked for at once. The answer is {"ok":true,"replaced":true} (a new
// acquire gets the new lease) or {"ok":false,"code","error"}: "conflict" when the server accepts
// connections (the lease is kept), "unavailable" when a profile's lease was replaced less than
// dead_server_interval ago (one replacement per interval and profile).
//
// Threads: one loop thread owns every connection and lease (no lock needed for them); each call
// to the cluster manager runs on a thread of its own and hands its outcome back through a queue
// (mu_) and an eventfd. Start/Stop/GetStats/Wake are thread-safe. Time is read from the injected
// Clock; the loop also wakes at least every `max_poll` of real time, so a test's FakeClock moves
// are noticed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client_manager/cluster_client.h"
#include "client_manager/config.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace flyt::client_manager {

inline constexpr size_t kMaxLineBytes = 64 << 10;

struct ManagerTuning {
  std::chrono::milliseconds max_poll{1000};
  std::chrono::milliseconds first_line_timeout{10000};
  std::chrono::milliseconds cluster_call_timeout{10000};  // renew and release
  // One attempt of a lease creation (the whole creation is bounded by acquire_timeout); the
  // pause before the next attempt or the next look at a lease whose server is starting.
  std::chrono::milliseconds create_attempt_timeout{10000};
  std::chrono::milliseconds create_retry_pause{500};
  // How long a probe of a reported-dead server may take, and how often one profile's lease may
  // be replaced for a dead server.
  std::chrono::milliseconds dead_probe_timeout{2000};
  std::chrono::milliseconds dead_server_interval{5000};
};

// What GetStats reports (for logs and tests).
struct LeaseView {
  std::string id;
  std::string profile;  // LeaseProfile::Key()
  std::string server;
  size_t programs = 0;  // connected programs holding it
  bool releasing = false;
  uint64_t renewals = 0;
};
struct ManagerStats {
  size_t connections = 0;
  uint64_t loop_passes = 0;
  uint64_t acquires_ok = 0;
  uint64_t acquires_failed = 0;
  uint64_t lease_requests = 0;  // POSTs to the cluster manager
  uint64_t leases_released = 0;
  uint64_t leases_dropped = 0;  // renew answered lease_failed / already_ended
  uint64_t closed_protocol = 0;  // connections closed for a bad line, size or timeout
  uint64_t refused_connections = 0;  // over max_connections
  uint64_t dead_reports = 0;          // server_dead reports received
  uint64_t dead_servers_replaced = 0;  // reports the probe confirmed: lease dropped, new one asked
  uint64_t dead_reports_refused = 0;  // the server answered the probe, or rate-limited
  std::vector<LeaseView> leases;
};

class ClientManager {
 public:
  ClientManager(ClientManagerConfig config, Clock& clock, ManagerTuning tuning = {});
  ~ClientManager();
  ClientManager(const ClientManager&) = delete;
  ClientManager& operator=(const ClientManager&) = delete;

  // Creates the socket (its directory too, mode 0755) and starts the loop. A live manager on the
  // same path is an error; a socket file left by a dead one is replaced; anything else there is
  // an error (never removed).
  Status Start();
  // Closes every connection, releases every lease (bounded), removes the socket.
  void Stop();
  // Makes the loop look at the clock now.
  void Wake();
  ManagerStats GetStats() const;

 private:
  struct Conn;
  struct Slot;
  struct Lease;
  struct Outcome;  // a cluster call's result, for the loop

  void Loop();
  void Accept();
  void ReadFrom(uint64_t conn_id);
  // Handles one complete line; false closes the connection.
  bool HandleLine(Conn& conn, const std::string& line);
  void StartAcquire(Slot& slot);
  // `answered`: the cluster manager answered the last attempt (which settles its key).
  void OnAcquired(const std::string& slot_key, Result<nlohmann::json> answer, bool answered);
  void OnRenewed(const std::string& lease_id, Result<nlohmann::json> answer);
  // A program's server_dead report; the probe's verdict.
  bool HandleDeadReport(Conn& conn, const nlohmann::json& request);
  void OnProbed(const std::string& lease_id, Result<nlohmann::json> verdict);
  void AnswerReporters(std::vector<uint64_t> reporters, const nlohmann::json& answer);
  void Attach(Conn& conn, Lease& lease);
  void Detach(Conn& conn);
  void DropLease(const std::string& lease_id, const std::string& code, const std::string& why);
  void StartRelease(Lease& lease, const char* why);
  void Timers();
  void CloseConn(uint64_t conn_id, const char* why);
  bool Send(Conn& conn, const nlohmann::json& message);
  void FailAcquire(Conn& conn, const std::string& code, const std::string& error);
  // Runs `call` on a thread of its own; its outcome comes back to the loop.
  void RunCall(Outcome outcome, std::function<Result<nlohmann::json>()> call);
  void TakeOutcomes();
  void Publish();
  std::chrono::steady_clock::time_point Now() const { return clock_.SteadyNow(); }

  const ClientManagerConfig config_;
  Clock& clock_;
  const ManagerTuning tuning_;
  ClusterClient cluster_;

  UniqueFd listen_fd_;
  UniqueFd wake_fd_;  // eventfd
  ino_t socket_inode_ = 0;
  std::thread loop_;
  std::atomic<bool> stop_{false};

  // Owned by the loop thread.
  uint64_t next_conn_id_ = 0;
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::map<std::string, std::unique_ptr<Slot>> slots_;
  std::map<std::string, std::unique_ptr<Lease>> leases_;
  // Profile key -> the Idempotency-Key of a creation no answer has settled yet.
  std::map<std::string, std::string> create_keys_;
  // Profile key -> when its lease was last replaced for a dead server.
  std::map<std::string, std::chrono::steady_clock::time_point> dead_drops_;
  ManagerStats counters_;

  mutable Mutex mu_;
  std::vector<Outcome> outcomes_ FLYT_GUARDED_BY(mu_);
  std::map<uint64_t, std::thread> calls_ FLYT_GUARDED_BY(mu_);
  uint64_t next_call_id_ FLYT_GUARDED_BY(mu_) = 0;
  ManagerStats published_ FLYT_GUARDED_BY(mu_);
};

}  // namespace flyt::client_manager
