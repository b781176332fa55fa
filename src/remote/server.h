// Server: the core of flyt-gpu-server. Accepts clients on TCP and/or Unix sockets and runs each
// client's calls on a Backend.
//
// A process per client (Isolation::kProcess, what flyt-gpu-server runs) or a thread per client
// (kThread, for in-process tests and when a fault may take every client down). A client gets its
// own backend Session and its own handle tables, so it can name only its own allocations,
// streams, events, modules and functions; every handle and every device range in a request is
// checked against them before the backend sees it. The server does the device-memory accounting
// for the --memory-limit (cudaErrorMemoryAllocation past it, whatever the backend), in a table
// shared with the client processes (client_registry.h). When a client goes away — a clean exit, a
// crash, a kill -9, a broken network — its thread or process frees everything the client still
// held; when a client's process itself dies, its exit hands the device memory back to the driver
// and the server process takes its share out of the account. A malformed or hostile message
// (bad framing, an undecodable request, data that does not match its header) closes that client's
// connection with a logged reason; nothing else is affected.
//
// Thread safety: Start/Stop from one thread; Stats() and ServeConnection() from any thread.
// Stop() (also run by the destructor) closes the listeners, disconnects every client and joins
// every thread, or waits for every client process (killing those that outlive
// ServerOptions::stop_grace).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "remote/backend.h"
#include "remote/client_registry.h"
#include "remote/launch_log.h"
#include "remote/protocol.h"
#include "remote/socket.h"

namespace flyt::remote {

// How clients are kept apart.
enum class Isolation {
  // Each client is served by a process of its own, forked from the server process when it
  // connects; the server process never opens the device itself. A device fault, a crash or a
  // hang in one client's process leaves the others untouched.
  kProcess,
  // Each client is served by a thread of the server process, all on one Backend: cheaper, but a
  // sticky device fault of one client reaches every client (CUDA's faults are per process).
  kThread,
};

// Makes the backend a client's process serves with (Isolation::kProcess): called in that
// process, after the fork.
using BackendFactory = std::function<Result<std::unique_ptr<Backend>>()>;

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
  // Isolation::kProcess: how long Stop() lets client processes free what they hold and exit
  // after their connections are shut down, before it kills them.
  std::chrono::milliseconds stop_grace{10'000};
};

// What a backend is, found out in a short-lived process (ProbeBackend).
struct BackendProbe {
  std::string name;         // "sim" or "driver"
  std::string description;  // Backend::Describe()
  bool simulated = false;
};

// Makes a backend with `factory` in a child process, reports what it is, and lets the child
// exit: the server process checks at start-up that the device can be opened without opening it
// itself (a process that has initialised the CUDA driver cannot fork children that use it).
[[nodiscard]] Result<BackendProbe> ProbeBackend(const BackendFactory& factory);

class Server {
 public:
  // Isolation::kThread: every client on `backend`, which must outlive the server.
  Server(Backend& backend, ServerOptions options);
  // Isolation::kProcess: every client's process makes its own backend with `factory`.
  Server(BackendFactory factory, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds every listen endpoint and starts accepting.
  [[nodiscard]] Status Start();
  void Stop();

  Isolation isolation() const { return factory_ ? Isolation::kProcess : Isolation::kThread; }

  // The endpoints as bound (a TCP port 0 replaced by the port chosen).
  const std::vector<Endpoint>& endpoints() const { return bound_; }

  // Serves one already-connected stream socket as a new client (tests use socketpairs).
  void ServeConnection(UniqueFd fd);

  DebugStatsReply Stats() const;

  // Number of clients connected now.
  size_t client_count() const;

  // Isolation::kProcess: the process serving client `client_id` (its id in the hello reply);
  // 0 when there is none (gone, or a thread serves it).
  pid_t ClientProcess(uint64_t client_id) const;

 private:
  friend class ClientConnection;
  struct ClientEntry {
    uint64_t id = 0;
    ClientSlot* slot = nullptr;
    int fd = -1;  // shut down at Stop; closed when the client is reaped
    bool finished = false;
    std::thread thread;  // kThread
    pid_t pid = 0;       // kProcess: the client's process
    UniqueFd pidfd;      // kProcess: readable when that process has ended
  };

  void AcceptLoop();
  // Adopts a connection (acceptor thread only in kProcess: every fork happens there).
  void StartClient(UniqueFd fd);
  void StartClientThread(ClientEntry& entry) FLYT_REQUIRES(mu_);
  // Forks the process that serves `entry` (again, after a respawn request); false if it cannot.
  bool StartClientProcess(ClientEntry& entry) FLYT_REQUIRES(mu_);
  // In the forked child, which inherited mu_ held by the thread that forked (its only thread).
  [[noreturn]] void RunClientProcess(uint64_t id) FLYT_REQUIRES(mu_);
  void ReapFinished();
  // kProcess: collects ended client processes (WNOHANG), logging how each ended.
  void ReapProcesses();
  void Depart(ClientEntry& entry) FLYT_REQUIRES(mu_);
  void StopProcesses();
  void Wake();
  uint64_t NextClientId() { return next_client_id_.fetch_add(1) + 1; }

  Backend* backend_ = nullptr;  // kThread
  BackendFactory factory_;      // kProcess
  const ServerOptions options_;
  std::unique_ptr<ClientRegistry> registry_;
  std::unique_ptr<LaunchLog> launch_log_;
  std::vector<UniqueFd> listeners_;
  std::vector<Endpoint> bound_;
  UniqueFd wake_read_, wake_write_;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_client_id_{0};
  const pid_t server_pid_;

  mutable Mutex mu_;
  std::map<uint64_t, ClientEntry> clients_ FLYT_GUARDED_BY(mu_);
  std::vector<uint64_t> finished_ FLYT_GUARDED_BY(mu_);       // kThread: threads to join
  std::vector<UniqueFd> handed_over_ FLYT_GUARDED_BY(mu_);    // kProcess: for the acceptor
};

}  // namespace flyt::remote
