// ClientRegistry: flyt-gpu-server's table of clients and its device-memory account, kept in one
// anonymous shared memory mapping so that it stays right when each client is served by a process
// of its own (--isolation process, the default): the server process, every client process it
// forks and a `stats` request served by any of them all see the same table.
//
// Why processes: with the real driver, a kernel fault (an illegal address, a trap) is sticky for
// every CUDA context of the process that ran it, so clients served by threads of one process
// would all fail with the faulting client. A process per client confines a fault, a crash of the
// driver library or a leak to that client; the process's exit returns everything to the driver.
//
// Slots. The server process (only it) acquires a slot for a new connection and marks it departed
// when the connection's thread or process has ended; it keeps the last `departed_kept` departed
// slots for stats and reuses the oldest of them when no slot is free. The slot's owner (the
// client's thread or process) alone writes its counters and label; anyone may read them.
//
// Memory account. TryReserve/Release move the server-wide total and the client's own reserved
// bytes together, so that when a client process dies without freeing, the server process gives
// back exactly what it held (Depart). The two updates are adjacent atomic operations, not one:
// a process killed between them (a few instructions) leaves its last reservation counted.
//
// Resizing (ResizeServer): the memory limit lives in the table (SetLimitBytes; TryReserve honours
// a new one at once), and the clients' SM share is a generation-stamped value in its header
// (PostSmShare). Each client's thread or process compares the generation at its next clean point,
// applies the share through its Session and records the outcome in its slot (NoteSmShare), which
// the operator's process reads (SmShareOf) while it waits.
//
// Thread and process safety: every shared field is a lock-free atomic (address-free, so valid
// across processes); the label is published with a release store and read only after an acquire
// load of the same generation, and a reader that sees the generation change retries or skips the
// slot. Acquire/Depart are for one thread of the server process.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "remote/protocol.h"

namespace flyt::remote {

// Per-client counters, written by the client's thread or process, read by Stats.
struct ClientCounters {
  std::atomic<uint64_t> allocations{0};
  std::atomic<uint64_t> allocated_bytes{0};
  std::atomic<uint64_t> streams{0};
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> modules{0};
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> bytes_to_device{0};
  std::atomic<uint64_t> bytes_from_device{0};
  std::atomic<uint64_t> arena_copy_bytes{0};  // moved by copies through the shared arena
};

// How a client's bytes travel (ClientTransport::transport).
enum class TransportKind : uint32_t { kUnknown = 0, kTcp, kUnix, kShm };
std::string_view TransportName(TransportKind kind);

struct ClientSlot;

// Live migration of a client (migrate.cc): an operator's order, posted into the client's slot by
// the process that serves the MigrateClient call, taken by the client's own process at its next
// clean point, and its outcome, written back there.
enum class MigrationState : uint32_t {
  kNone = 0,
  kPosting,    // an order is being written
  kRequested,  // waiting for the client's next call
  kRunning,    // the client's process is moving it
  kMoved,
  kFailed,     // the client stays where it was
  kWithdrawn,  // the requester gave up before the client made a call
};
struct MigrationOrder {
  std::string endpoint;  // the new server, as the client reaches it
  std::string secret;    // its secret (empty: none)
};
struct MigrationOutcome {
  MigrationState state = MigrationState::kNone;
  std::string message;
  uint64_t new_client_id = 0;
  uint64_t bytes = 0;     // device memory moved
  uint64_t pause_us = 0;  // from the client's Migrate call to the answer
};

// The SM share an operator asked of every client (generation 0: none since the server started).
struct SmShareOrder {
  uint32_t generation = 0;
  uint32_t sm_count = 0;
};
// What one client did with the SM share orders: the last generation it applied or refused, the
// SMs it runs with now, the pause the last application took and, when refused, why.
struct SmShareState {
  uint32_t generation = 0;
  bool refused = false;
  uint32_t sm_count_granted = 0;
  uint64_t pause_us = 0;
  std::string message;
};

// What the server turned away or closed, by reason (hostile, broken or overloaded peers), and
// what it accepted: kept in the shared table, so whichever process answers stats sees them.
enum class ServerCounter : uint32_t {
  kAccepted,        // connections accepted
  kHelloTimeout,    // closed: no complete hello within ServerOptions::hello_timeout
  kHelloMalformed,  // closed: the first bytes were not a valid hello
  kEvictedPending,  // closed in their hello: ServerOptions::max_pending were pending
  kEvictedPeer,     // closed in their hello: max_pending_per_peer were pending from that peer
  kRefusedBusy,     // refused in the hello reply: max_clients were being served
  kRefusedVersion,  // refused in the hello reply: no common protocol version
  kRefusedAuth,     // refused in the hello reply: the secret was absent or wrong
  kIdleClosed,      // served, closed after idle_timeout with no call and nothing held
  kPending,         // a gauge: connections in their hello now
  kCount,
};
// "accepted", "hello_timeout", ... (snake_case, as the stats JSON names them).
std::string_view ServerCounterName(ServerCounter counter);

class ClientRegistry {
 public:
  // Maps the shared table: room for `live_capacity` connected clients and the last
  // `departed_kept` departed ones. `memory_limit_bytes` 0: no limit.
  [[nodiscard]] static Result<std::unique_ptr<ClientRegistry>> Create(size_t live_capacity,
                                                                      size_t departed_kept,
                                                                      uint64_t memory_limit_bytes);
  ~ClientRegistry();
  ClientRegistry(const ClientRegistry&) = delete;
  ClientRegistry& operator=(const ClientRegistry&) = delete;

  // Server process only. A slot for a new client with this id, or null when the table is full
  // of connected clients.
  ClientSlot* Acquire(uint64_t id);
  // Server process only. The client has gone: its slot is kept for stats as departed, and what
  // it still had reserved (a process that died without freeing) goes back to the account.
  // Returns those bytes.
  uint64_t Depart(ClientSlot* slot);

  // The slot's owner.
  static ClientCounters& Counters(ClientSlot* slot);
  static void SetLabel(ClientSlot* slot, const std::string& label);
  static std::string Label(const ClientSlot* slot);
  // The client program's pid, from its hello.
  static void SetClientPid(ClientSlot* slot, uint32_t pid);
  static uint32_t ClientPid(const ClientSlot* slot);
  // How the client's bytes travel; the peer's credentials for a Unix socket (0 otherwise).
  static void SetTransport(ClientSlot* slot, TransportKind kind, uint32_t peer_pid,
                           uint32_t peer_uid, uint64_t arena_bytes);
  static TransportKind Transport(const ClientSlot* slot);

  // Isolation::kProcess. A client process whose device state a fault has corrupted past
  // cudaDeviceReset asks, before it exits, for a fresh process to go on with its connection and
  // answer that reset (the request's `seq`). The fresh process takes the request.
  static void RequestRespawn(ClientSlot* slot, uint32_t reset_seq);
  static bool RespawnRequested(const ClientSlot* slot);
  static std::optional<uint32_t> TakeRespawn(ClientSlot* slot);

  // A connected client's slot by id; null when none is live. Any process.
  ClientSlot* FindLive(uint64_t id);
  // Live migration (see MigrationState). Post: false when an order is already pending or
  // running. Take: the order, once, by the client's process (requested → running; the secret is
  // wiped from the table). Withdraw: requested → withdrawn; false when it runs already.
  static bool PostMigration(ClientSlot* slot, const MigrationOrder& order);
  static bool MigrationRequested(const ClientSlot* slot);
  static std::optional<MigrationOrder> TakeMigration(ClientSlot* slot);
  static void FinishMigration(ClientSlot* slot, const MigrationOutcome& outcome);
  static MigrationOutcome Migration(const ClientSlot* slot);
  static bool WithdrawMigration(ClientSlot* slot);

  // Device memory, all clients together. TryReserve fails (false) past the limit.
  bool TryReserve(ClientSlot* slot, uint64_t bytes);
  void Release(ClientSlot* slot, uint64_t bytes);
  uint64_t used_bytes() const;
  uint64_t limit_bytes() const;
  // A new limit (0: none), unless it is below the bytes reserved now: then the limit stays as it
  // was and the result is those bytes. A reservation racing with it either counts in that check
  // or sees the new limit (TryReserve checks again after reserving). Any process.
  std::optional<uint64_t> SetLimitBytes(uint64_t limit);

  // The SM share (any process). Post: a new generation asking `sm_count` SMs of every client;
  // returns it. Current: what the clients are to run with.
  uint32_t PostSmShare(uint32_t sm_count);
  SmShareOrder CurrentSmShare() const;
  // The slot's owner: it applied (or, `refused`, could not apply) generation `generation`.
  static void NoteSmShare(ClientSlot* slot, const SmShareState& state);
  static SmShareState SmShareOf(const ClientSlot* slot);
  // The ids of the connected clients, in slot order.
  std::vector<uint64_t> LiveIds() const;

  // Any process.
  void Count(ServerCounter counter, uint64_t n = 1);
  void SetGauge(ServerCounter counter, uint64_t value);
  uint64_t Counter(ServerCounter counter) const;
  // Every counter by name, in enum order.
  std::vector<NamedValue> CounterValues() const;

  size_t LiveCount() const;
  // Departed clients, oldest first, then connected ones in id order; the memory totals.
  DebugStatsReply Snapshot() const;
  // The transport of each client Snapshot lists.
  std::vector<ClientTransport> Transports() const;
  // The SM share of each connected client, by id.
  std::vector<ClientShare> Shares() const;

 private:
  struct Header;
  ClientRegistry(void* mapping, size_t mapping_bytes, size_t slot_count, size_t departed_kept,
                 uint64_t limit_bytes);

  void* const mapping_;
  const size_t mapping_bytes_;
  Header* const header_;
  ClientSlot* const slots_;
  const size_t slot_count_;
  const size_t departed_kept_;
};

}  // namespace flyt::remote
