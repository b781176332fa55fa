// Server: the core of flyt-gpu-server. Accepts clients on TCP and/or Unix sockets and runs each
// client's calls on a Backend.
//
// One thread per client. A client gets its own backend Session and its own handle tables, so it
// can name only its own allocations, streams, events, modules and functions; every handle and
// every device range in a request is checked against them before the backend sees it. The
// server does the device-memory accounting for the --memory-limit (cudaErrorMemoryAllocation past
// it, whatever the backend). When a client goes away — a clean exit, a crash, a kill -9, a broken
// network — its thread frees everything the client still held. A malformed or hostile message
// (bad framing, an undecodable request, data that does not match its header) closes that client's
// connection with a logged reason; nothing else is affected.
//
// Thread safety: Start/Stop from one thread; Stats() and ServeConnection() from any thread.
// Stop() (also run by the destructor) closes the listeners, disconnects every client and joins
// every thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "remote/backend.h"
#include "remote/launch_log.h"
#include "remote/protocol.h"
#include "remote/socket.h"

namespace flyt::remote {

struct ServerOptions {
  std::vector<Endpoint> listen;
  // Device memory all clients together may hold; 0: the device's own.
  uint64_t memory_limit_bytes = 0;
  // JSON-lines launch log (launch_log.h); empty: none.
  std::string launch_log_path;
  // Shown to clients in the hello reply.
  std::string label = "flyt-gpu-server";
  size_t max_clients = 256;
  // Device-to-host data a client may have in flight (copied, not yet delivered) before further
  // async copies fail with cudaErrorMemoryAllocation.
  uint64_t max_pending_download_bytes = 1ull << 30;
};

// Per-client counters, shared between the client's thread and Stats().
struct ClientCounters {
  std::atomic<uint64_t> allocations{0};
  std::atomic<uint64_t> allocated_bytes{0};
  std::atomic<uint64_t> streams{0};
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> modules{0};
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> bytes_to_device{0};
  std::atomic<uint64_t> bytes_from_device{0};
};

// The server-wide device-memory account. Thread-safe.
class MemoryAccount {
 public:
  explicit MemoryAccount(uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}
  // Reserves `bytes`; false when that would pass the limit.
  bool TryReserve(uint64_t bytes);
  void Release(uint64_t bytes);
  uint64_t used_bytes() const { return used_.load(); }
  uint64_t limit_bytes() const { return limit_bytes_; }

 private:
  const uint64_t limit_bytes_;
  std::atomic<uint64_t> used_{0};
};

class Server {
 public:
  Server(Backend& backend, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds every listen endpoint and starts accepting.
  [[nodiscard]] Status Start();
  void Stop();

  // The endpoints as bound (a TCP port 0 replaced by the port chosen).
  const std::vector<Endpoint>& endpoints() const { return bound_; }

  // Serves one already-connected stream socket on a new client thread (tests use socketpairs).
  void ServeConnection(UniqueFd fd);

  DebugStatsReply Stats() const;

  // Number of clients connected now.
  size_t client_count() const;

 private:
  friend class ClientSession;
  struct ClientEntry {
    uint64_t id = 0;
    std::string label;
    std::shared_ptr<ClientCounters> counters;
    int fd = -1;  // for shutdown() at Stop; the session owns it
    bool connected = true;
    std::thread thread;
  };

  void AcceptLoop();
  void ReapFinished();
  uint64_t NextClientId() { return next_client_id_.fetch_add(1) + 1; }

  Backend& backend_;
  const ServerOptions options_;
  MemoryAccount memory_;
  std::unique_ptr<LaunchLog> launch_log_;
  std::vector<UniqueFd> listeners_;
  std::vector<Endpoint> bound_;
  UniqueFd wake_read_, wake_write_;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_client_id_{0};

  mutable std::mutex mu_;
  std::map<uint64_t, ClientEntry> clients_;    // guarded by mu_
  std::vector<uint64_t> finished_;             // guarded by mu_: threads to join
  std::deque<ClientStats> departed_;           // guarded by mu_: last stats of gone clients
};

}  // namespace flyt::remote
