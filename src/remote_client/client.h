// Connection: the client end of the remote CUDA protocol, as the runtime library uses it.
//
// One method per call of calls.def (generated), named after the call: `Malloc(MallocRequest)`.
// A kCall method sends everything buffered plus its request and waits for the reply; it returns
// the call's own CudaStatus/reply. A kPost method only appends its request to the send buffer and
// returns at once (it fails only when the connection is gone); the buffer goes out when a kCall
// comes, when it holds `batch_bytes`, or on Flush(). Errors of posted work arrive in the header of
// a later reply; TakeAsyncError() hands out the first one not yet taken.
//
// Bulk data: a kIn call takes the bytes to send (copied into the buffer when small, otherwise
// written straight from the caller's memory in Data frames, without waiting for anything); a kOut
// kCall takes the span to fill before it returns; a kOut kPost (MemcpyDtoHAsync) takes the span
// to fill later: the caller keeps it alive until a later call has returned (the runtime's
// synchronising calls), as CUDA requires of the host buffer of an async copy. The data of such a
// copy is written into the span by whichever thread is then waiting for a reply.
//
// Transport: the bytes go over the socket (TCP or Unix), or, when the server is on this host and
// offers it, through shared memory (shm_channel.h): over a Unix socket the hello asks for it;
// over TCP, Open asks the server for its Unix socket (LocalEndpoint) and, when the server's boot
// id is this host's, connects there instead. A memfd that cannot be mapped leaves the connection
// on its socket. transport() says which; arena() is the shared pinned-memory arena (empty when
// none), for the copies of calls.def's *Shared calls.
//
// Live migration: a server told by an operator to move this client sends a kNotice before a
// reply; once that call has returned (nothing else in flight, the lock still held) the client
// calls Migrate and, when the server moved its state, says hello to the new server with the
// token it got and goes on there with the same handles and device addresses (over a socket:
// the pinned memory of a shared-memory arena stays mapped, and its copies become ordinary ones).
// A move that fails leaves the connection where it was. ClientOptions::note hears about both.
//
// Resizing (protocol version 7): a server that applied a new SM share for this client sends a
// kNotice with call ResizeServer before a reply; device_generation() counts them, so that what
// caches device facts (the runtime's properties) fetches them again.
//
// Thread safety: every method may be called from any thread; calls are serialised by one
// mutex, so the wire order is the order calls entered. Once the connection breaks (server gone,
// protocol error) every call fails with cudaErrorDevicesUnavailable.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "common/mutex.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "remote/channel.h"
#include "remote/cuda_status.h"
#include "remote/protocol.h"
#include "remote/socket.h"

namespace flyt::remote {

class ShmRegion;

struct ClientOptions {
  std::string label;         // program name, host, pid: shown in the server's logs
  uint32_t pid = 0;
  int32_t runtime_version = 0;
  uint64_t capabilities = kAllCapabilities;
  // The server's secret (its lease's, from FLYT_SERVER_SECRET for the runtime); empty: none.
  // Sent in the hello; a server started with a secret refuses a hello without the same one.
  std::string secret;
  size_t batch_bytes = 256 << 10;       // flush the send buffer past this
  size_t inline_data_bytes = 64 << 10;  // copy bulk data up to this into the buffer
  // Offer the shared-memory transport when the server is on this host (FLYT_SHM=0 in the
  // runtime turns it off).
  bool shared_memory = true;
  // Told one line whenever the connection moves to another server (live migration), or a move
  // asked for failed and it stays; may be called from any thread that makes a call.
  std::function<void(bool failed, const std::string& line)> note;
};

// The part of the shared memory that backs the client's pinned host memory.
struct SharedArena {
  std::byte* base = nullptr;
  uint64_t bytes = 0;
  bool Contains(const void* p, uint64_t n) const {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base);
    return base != nullptr && a >= b && a - b <= bytes && n <= bytes - (a - b);
  }
  uint64_t OffsetOf(const void* p) const {
    return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(base);
  }
};

struct ServerInfo {
  uint16_t version = 0;
  uint64_t capabilities = 0;
  uint64_t client_id = 0;
  std::string label;
  std::string backend;
  bool simulated = false;
  int32_t driver_version = 0;
  int32_t device_count = 0;
};

struct AsyncError {
  CudaStatus status;
  CallId call = CallId::kNone;
  uint32_t seq = 0;
};

// The type of a call's data argument.
template <CallId kId>
using DataArg =
    std::conditional_t<CallTraits<kId>::kData == DataFlow::kIn, std::span<const std::byte>,
                       std::conditional_t<CallTraits<kId>::kData == DataFlow::kOut,
                                          std::span<std::byte>, std::nullptr_t>>;
// What a call returns: the reply for a kCall, the local outcome for a kPost.
template <CallId kId>
using CallReturn = std::conditional_t<CallTraits<kId>::kMode == CallMode::kCall,
                                      CudaResult<typename CallTraits<kId>::Reply>, CudaStatus>;

// [issue 17: pools] Device-to-host data the runtime lets be in flight on one connection before it
// waits for the device (far below the server's default limit of 1 GiB).
inline constexpr uint64_t kMaxDownloadBytesInFlight = 256ull << 20;

class Connection {
 public:
  // Connects and says hello. Fails (kUnavailable) when the server cannot be reached or refuses;
  // kResourceExhausted when it serves as many clients as it may; kPermissionDenied with reason
  // "unauthenticated" when it refused the secret (absent or wrong).
  [[nodiscard]] static Result<std::unique_ptr<Connection>> Open(const Endpoint& endpoint,
                                                                const ClientOptions& options);
  // Over an already-connected socket (tests).
  [[nodiscard]] static Result<std::unique_ptr<Connection>> OpenFd(UniqueFd fd,
                                                                  const ClientOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const ServerInfo& server() const { return server_; }
  // "tcp", "unix" or "shm".
  std::string_view transport() const { return channel_->Kind(); }
  // Why a connection is not on shared memory although it might have been ("" when it is, or
  // when the server is remote or offers none): the runtime logs it once.
  const std::string& transport_note() const { return transport_note_; }
  SharedArena arena() const { return arena_; }

#define FLYT_CALL(id, name, mode, data, req, rep)                                         \
  CallReturn<CallId::k##name> name(const name##Request& request,                          \
                                   DataArg<CallId::k##name> data_arg = {}) {              \
    return Invoke<CallTraits<CallId::k##name>>(request, data_arg);                        \
  }
#include "remote/calls.def"
#undef FLYT_CALL

  // Sends what is buffered. Failure means the connection broke.
  CudaStatus Flush();
  std::optional<AsyncError> TakeAsyncError();
  // Posted requests not yet answered by any reply (0 right after a kCall).
  bool HasUnacknowledgedPosts() const;
  bool broken() const;
  // How many times the server said this client's device facts changed (a resize).
  uint64_t device_generation() const { return device_generation_.load(); }
  // Pending device-to-host copies whose data has not arrived.
  size_t pending_downloads() const;
  // The stream of a MemcpyDtoHStagedAsync not yet landed whose arena range overlaps
  // [p, p + bytes), if any: the runtime waits for it before it writes that part of the arena.
  std::optional<uint64_t> StagedLandingStream(const std::byte* p, uint64_t bytes) const;
  // The connection left the server whose arena arena() is: copies through it are ordinary ones.
  bool arena_detached() const { return arena_detached_.load(); }
  // [issue 17: pools] Bytes of those copies not yet arrived: the server holds them in its host
  // memory until a reply carries them (ServerOptions::max_pending_download_bytes, default 1 GiB;
  // past it posted copies fail), so the runtime keeps this under kMaxDownloadBytesInFlight.
  uint64_t pending_download_bytes() const;

 private:
  explicit Connection(UniqueFd fd, const ClientOptions& options);
  Status Hello();
  // After a hello reply that offered shared memory: maps it (or says why not) and answers with
  // a ShmAck; on success the connection's bytes go through the rings from then on.
  Status AcceptSharedMemory(uint32_t hello_seq, std::vector<UniqueFd> fds);

  template <typename Traits>
  CallReturn<Traits::kId> Invoke(const typename Traits::Request& request,
                                 DataArg<Traits::kId> data);
  template <typename Traits>
  CallReturn<Traits::kId> InvokeLocked(const typename Traits::Request& request,
                                       DataArg<Traits::kId> data) FLYT_REQUIRES(mu_);
  // A copy through the arena after the connection moved off shared memory: the same copy as an
  // ordinary one, from or into the arena's pages.
  template <typename Traits>
  CallReturn<Traits::kId> ArenaCopyOverSocketLocked(const typename Traits::Request& request,
                                                    DataArg<Traits::kId> data) FLYT_REQUIRES(mu_);
  // After a kNotice: asks the server to move this client and follows it (see the file comment).
  void MigrateLocked() FLYT_REQUIRES(mu_);

  uint32_t NextSeq() FLYT_REQUIRES(mu_) { return ++seq_ == 0 ? ++seq_ : seq_; }
  CudaStatus SendDataLocked(CallId call, uint32_t seq, std::span<const std::byte> data)
      FLYT_REQUIRES(mu_);
  CudaStatus FlushLocked() FLYT_REQUIRES(mu_);
  // Reads frames until the reply to `seq`; lands data frames. Returns the reply payload after
  // the ReplyStatus, and the ReplyStatus.
  CudaStatus AwaitReplyLocked(CallId call, uint32_t seq, ReplyStatus& status, Bytes& fields)
      FLYT_REQUIRES(mu_);
  // Reads a data frame's payload (after `header`) into the memory of the copy it belongs to.
  Status LandData(const FrameHeader& header) FLYT_REQUIRES(mu_);
  CudaStatus Broken(const Status& why) FLYT_REQUIRES(mu_);
  CudaStatus BrokenStatus() const FLYT_REQUIRES(mu_);

  struct Landing {
    std::span<std::byte> dst;
    uint64_t received = 0;
    // A MemcpyDtoHStagedAsync: the bytes arrive in the arena here, not in data frames.
    const std::byte* arena_src = nullptr;
    uint64_t stream = 0;
  };

  const ClientOptions options_;
  UniqueFd fd_;
  std::unique_ptr<Channel> channel_;
  std::shared_ptr<ShmRegion> shm_;
  // After a move onto new rings: the first server's region, kept mapped for its arena, which
  // holds the program's pinned memory.
  std::shared_ptr<ShmRegion> arena_region_;
  SharedArena arena_;
  std::string transport_note_;
  ServerInfo server_;

  mutable Mutex mu_;
  Bytes send_ FLYT_GUARDED_BY(mu_);
  uint32_t seq_ FLYT_GUARDED_BY(mu_) = 0;
  bool unacknowledged_ FLYT_GUARDED_BY(mu_) = false;
  std::optional<Status> broken_ FLYT_GUARDED_BY(mu_);
  std::optional<AsyncError> async_error_ FLYT_GUARDED_BY(mu_);
  std::map<uint32_t, Landing> landings_ FLYT_GUARDED_BY(mu_);
  Bytes payload_ FLYT_GUARDED_BY(mu_);
  bool migrate_pending_ FLYT_GUARDED_BY(mu_) = false;
  std::string resume_token_;  // for the hello to the server a move goes to
  // The connection left the server whose arena arena_ is (the pages stay mapped).
  std::atomic<bool> arena_detached_{false};
  std::atomic<uint64_t> device_generation_{0};
};

}  // namespace flyt::remote
