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
// A peer cannot hold a slot for ever: the acceptor reads each connection's hello itself,
// non-blocking, and a connection gets a slot, a thread or a process only once its whole hello has
// arrived within hello_timeout; connections still in their hello are bounded (max_pending, and
// max_pending_per_peer per address); at most max_clients are served (one more is refused in its
// hello reply); a served client idle past idle_timeout that holds nothing is closed.
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
#include "remote_server/backend.h"
#include "remote_server/client_registry.h"
#include "remote_server/launch_log.h"
#include "remote/protocol.h"
#include "remote/shm_channel.h"
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
  // Clients served at once (past the hello); one more is refused in its hello reply with
  // kServerBusyPrefix (the runtime turns it into cudaErrorDevicesUnavailable).
  size_t max_clients = 256;
  // The whole hello (header and payload) must arrive within this time of the connection's
  // accept, or the connection is closed. The supervisor reads hellos itself, non-blocking, so a
  // connection costs no process or thread until its hello is complete and valid.
  std::chrono::milliseconds hello_timeout{10'000};
  // Connections still in their hello, in all and from one peer (a TCP source address; for a
  // Unix socket, the peer's uid). Past either bound the oldest such connection is closed.
  size_t max_pending = 64;
  size_t max_pending_per_peer = 16;
  // A served client that makes no call for this long while it holds nothing on the device (no
  // allocation, stream, event, module or undelivered download) is closed and its process
  // exits. 0: never. A client that holds anything is never closed for idleness.
  std::chrono::milliseconds idle_timeout{600'000};
  // Device-to-host data a client may have in flight (copied, not yet delivered) before further
  // async copies fail with cudaErrorMemoryAllocation.
  uint64_t max_pending_download_bytes = 1ull << 30;
  // Isolation::kProcess: how long Stop() lets client processes free what they hold and exit
  // after their connections are shut down, before it kills them.
  std::chrono::milliseconds stop_grace{10'000};
  // Non-empty: a hello must carry exactly this secret (compared in constant time), or it is
  // refused in its hello reply (kAuthRefusedPrefix), counted as refused_auth and logged at most
  // once per 10 s; no thread or process is started for it. Empty: any hello is accepted.
  std::string secret;
  // Offer the shared-memory transport (shm_channel.h) to a client that asks for it over a Unix
  // socket, with rings and an arena of `shm_layout`'s sizes.
  bool shared_memory = true;
  ShmLayout shm_layout;
  // Where a client on this host may reach the server over a Unix socket (LocalEndpoint); empty:
  // the first Unix endpoint of `listen`, if any.
  std::string local_path;
  // Live migration: how long a client moved here (its state imported, ImportFinish answered)
  // has to say hello with its token before what it would get is released.
  std::chrono::milliseconds claim_timeout{60'000};
  // Fault injection for tests (flyt-gpu-server --test-migration-fault): the process moving a
  // client away exits after sending this many bytes of its memory (the source dies mid-transfer);
  // the process taking one in exits after receiving this many (the target dies). 0: never.
  uint64_t test_exit_after_export_bytes = 0;
  uint64_t test_exit_after_import_bytes = 0;
};

// The shared memory the supervisor made for a client that asked for it over a Unix socket: kept
// by the supervisor for the client's life, so that a process that takes the connection over after
// a failed reset maps the same rings.
struct ShmOffer {
  ShmFds fds;
  ShmLayout layout;  // what the region was made with
  uint32_t peer_pid = 0;  // SO_PEERCRED
  uint32_t peer_uid = 0;
};
// Shared memory for a client that asked for it (kCapSharedMemory): only over a Unix socket whose
// peer the kernel names (SO_PEERCRED), since the memfd travels with SCM_RIGHTS. Null, with a
// log line, when the client cannot have it: it is then served over its socket.
std::shared_ptr<ShmOffer> MakeShmOffer(int fd, const ShmLayout& layout, uint64_t id);

// A client's hello as the supervisor received it, complete and decoded: handed to the thread or
// process that serves the client, which answers it.
struct ReceivedHello {
  uint32_t seq = 0;
  HelloRequest request;
};

// What a backend is, found out in a short-lived process (ProbeBackend).
struct BackendProbe {
  std::string name;         // "sim" or "driver"
  std::string description;  // Backend::Describe()
  bool simulated = false;
  DeviceIdentity identity;  // Backend::Identity() (its SM counts, memory, name)
};

// Makes a backend with `factory` in a child process, reports what it is, and lets the child
// exit: the server process checks at start-up that the device can be opened without opening it
// itself (a process that has initialised the CUDA driver cannot fork children that use it).
[[nodiscard]] Result<BackendProbe> ProbeBackend(const BackendFactory& factory);

// Holds spdlog's process-wide console lock across every fork of this process (pthread_atfork),
// so that a forked child never inherits it taken by another thread. Idempotent; the server and
// ProbeBackend call it before they fork.
void GuardLoggerAcrossFork();

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
  // A graceful stop (SIGTERM): stops accepting at once (listeners closed, Unix socket files
  // removed, connections still in their hello closed), lets the connected clients go on until
  // they have all disconnected or `grace` has passed, then Stop()s: the clients left have their
  // connections shut down and their processes are killed if they do not exit within a second.
  void Drain(std::chrono::milliseconds grace);

  Isolation isolation() const { return factory_ ? Isolation::kProcess : Isolation::kThread; }

  // The endpoints as bound (a TCP port 0 replaced by the port chosen).
  const std::vector<Endpoint>& endpoints() const { return bound_; }

  // Serves one already-connected stream socket as a new client (tests use socketpairs); its
  // hello is read like an accepted connection's.
  void ServeConnection(UniqueFd fd);

  DebugStatsReply Stats() const;
  // Connections accepted, turned away and closed, by reason (client_registry.h).
  uint64_t Counter(ServerCounter counter) const;

  // Number of clients connected now.
  size_t client_count() const;

  // Isolation::kProcess: the process serving client `client_id` (its id in the hello reply);
  // 0 when there is none (gone, or a thread serves it).
  pid_t ClientProcess(uint64_t client_id) const;

 private:
  friend class ClientConnection;
  using Clock = std::chrono::steady_clock;
  struct ClientEntry {
    uint64_t id = 0;
    ClientSlot* slot = nullptr;
    int fd = -1;  // shut down at Stop; closed when the client is reaped
    ReceivedHello hello;
    bool finished = false;
    std::thread thread;  // kThread
    pid_t pid = 0;       // kProcess: the client's process
    UniqueFd pidfd;      // kProcess: readable when that process has ended
    std::shared_ptr<ShmOffer> shm;  // null: the client did not ask, or cannot have it
    // Live migration, an import link (kCapMigrationImport): the supervisor's end of the pair
    // over which it hands the moved client's connection (its hello, then the socket) to the
    // process or thread holding the imported state, and that side's end until it is started.
    UniqueFd handoff;
    UniqueFd handoff_peer;
    // The last connection handed over (the supervisor's copy, shut down at Stop): once the
    // state's holder has taken the right one it closes its end of the pair, and no later one
    // gets through.
    UniqueFd claim_fd;
  };

  // A connection whose hello has not fully arrived yet (acceptor thread only).
  struct PendingHello {
    UniqueFd fd;
    std::string peer;  // what max_pending_per_peer counts by
    Clock::time_point deadline;
    std::byte header[kFrameHeaderBytes];
    size_t header_bytes = 0;
    FrameHeader frame;
    Bytes payload;
    size_t payload_bytes = 0;
    ReceivedHello hello;
  };
  enum class HelloProgress { kMore, kComplete, kClosed };
  // How often at most a line is logged per reason a connection is turned away.
  static constexpr std::chrono::seconds kTurnedAwayLogEvery{10};

  void AcceptLoop();
  // A new connection (accepted or handed over): its hello is read by the acceptor from now on.
  void AdoptConnection(UniqueFd fd);
  // Reads what has arrived of `p`'s hello without blocking.
  HelloProgress ReadHello(PendingHello& p);
  // Counts a connection turned away for `reason` and logs it (at most one line per reason per
  // kTurnedAwayLogEvery; the rest at debug level, their number in the next line).
  void NoteTurnedAway(ServerCounter reason, const std::string& peer, const std::string& why);
  // Serves a client whose hello is complete (acceptor thread only: every fork happens there),
  // or refuses it in a hello reply (no common version; max_clients served).
  void StartClient(UniqueFd fd, const std::string& peer, ReceivedHello hello);
  // A hello with a resume token (a migrated client arriving): hands it and its socket to the
  // import link that waits for it; the refusal when none does.
  std::string HandOver(UniqueFd& fd, const ReceivedHello& hello) FLYT_REQUIRES(mu_);
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
  // Removes the Unix socket files bound (once).
  void UnlinkSockets();
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
  std::atomic<bool> draining_{false};
  std::atomic<bool> listeners_closed_{false};  // set by the acceptor once it closed them
  std::atomic<bool> sockets_unlinked_{false};
  // How long StopProcesses waits for client processes after their connections are shut down
  // (options_.stop_grace, or less after a Drain has used the grace already).
  std::atomic<int64_t> stop_grace_ms_{0};
  std::atomic<uint64_t> next_client_id_{0};
  const pid_t server_pid_;

  mutable Mutex mu_;
  std::map<uint64_t, ClientEntry> clients_ FLYT_GUARDED_BY(mu_);
  std::vector<uint64_t> finished_ FLYT_GUARDED_BY(mu_);       // kThread: threads to join
  std::vector<UniqueFd> handed_over_ FLYT_GUARDED_BY(mu_);    // for the acceptor

  // The acceptor thread's own.
  std::vector<PendingHello> pending_;  // in accept order: the oldest first
  struct TurnedAwayLog {
    Clock::time_point last{};
    uint64_t unlogged = 0;
  };
  TurnedAwayLog turned_away_log_[static_cast<size_t>(ServerCounter::kCount)];
};

}  // namespace flyt::remote
