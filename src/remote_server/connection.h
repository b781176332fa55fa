// ClientConnection: one client of flyt-gpu-server, from its hello to the release of everything
// it held. Made and owned by what serves the client: a thread of the server process
// (Isolation::kThread) or the client's own forked process (kProcess); server.cc makes it.
//
// The connection (connection.cc): the answer to the hello the supervisor has read (opening the
// device and a backend Session), then the serve loop (closing a client idle past
// ServerOptions::idle_timeout that holds nothing): it reads each frame, decodes the request,
// runs the call and answers a kCall (an error of a kPost is kept for the next reply). It reads the
// data frames of host-to-device copies as they arrive, delivers the data of async device-to-host
// copies (Downloads) just before a later reply, and when the client goes away (or resets the
// device) frees everything it still held. A malformed or hostile message ends the connection.
// The call handlers, one Handle overload per call of calls.def, check every handle and device
// range against this client's own tables before the backend sees it; they are split by family as
// the runtime's api_*.cc files are: handlers_device.cc, handlers_memory.cc, handlers_stream.cc,
// handlers_launch.cc (cudaMalloc: runtime/api_memory.cc, then remote_server/handlers_memory.cc).
//
// Thread safety: a ClientConnection is used by the one thread that serves its client. It reaches
// the Server only through parts that are thread-safe (the client registry, the launch log,
// Stats(), the options). Internal to the server: included by server.cc and the handlers only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "remote/address_ranges.h"
#include "remote_server/backend.h"
#include "remote_server/client_registry.h"
#include "remote/channel.h"
#include "remote/cuda_status.h"
#include "remote/handle_table.h"
#include "remote_server/launch_log.h"
#include "remote/protocol.h"
#include "remote_server/server.h"
#include "remote/socket.h"

namespace flyt::remote {

class ClientConnection {
 public:
  // A client process's exit status that asks for a fresh process to take its connection over.
  static constexpr int kRespawnExitCode = 75;

  // The largest hello payload the server reads.
  static constexpr size_t kMaxHelloBytes = 64 << 10;

  // `backend`: the server's (Isolation::kThread). Null: the client's process makes its own with
  // `make_backend` once the hello has been accepted. `hello`: the client's hello, which the
  // server's supervisor has read whole (a peer that never completes one costs no thread,
  // process or device initialisation); this connection answers it.
  // `shm`: the shared memory the supervisor made for this client (null: none), offered in the
  // hello reply.
  ClientConnection(Server& server, Backend* backend, const BackendFactory* make_backend, int fd,
                   uint64_t id, ClientSlot* slot, ReceivedHello hello,
                   std::shared_ptr<ShmOffer> shm = nullptr,
                   std::optional<uint32_t> resume_reset = std::nullopt,
                   UniqueFd handoff = UniqueFd())
      : server_(server),
        hello_(std::move(hello)),
        shm_offer_(std::move(shm)),
        resume_reset_(resume_reset),
        backend_(backend),
        make_backend_(make_backend),
        fd_(fd),
        id_(id),
        slot_(slot),
        counters_(&ClientRegistry::Counters(slot)),
        memory_(*server.registry_, slot),
        channel_(std::make_unique<SocketChannel>(fd)),
        handoff_(std::move(handoff)) {}

  // From the hello (or the resumed reset) to the release of everything the client held.
  void Run();

  // Why the server and this hello have no protocol version in common; "" if they have one.
  static std::string VersionError(const HelloRequest& hello);
  // A hello reply that refuses the client with `error` (version 0).
  static Bytes RefusalFrame(uint32_t seq, const std::string& server_label,
                            const std::string& error);

 private:
  static constexpr size_t kMaxStreams = 1 << 16;
  static constexpr size_t kMaxEvents = 1 << 20;
  static constexpr size_t kMaxModules = 1 << 12;
  static constexpr size_t kMaxFunctions = 1 << 20;
  static constexpr uint64_t kMaxModuleBytes = 1ull << 30;
  // Device-to-host copies in flight whose data or word has not gone out: past kMaxDownloads a
  // new one is refused (and abandoned); past twice that, a client that posts on regardless
  // without a call that would take them is closed.
  static constexpr size_t kMaxDownloads = 1 << 16;

  struct Io {
    FrameHeader header;
    Status protocol;  // a protocol violation found while handling (closes the connection)
  };
  struct Function {
    FunctionHandle handle{};
    uint64_t module = 0;
    std::string name;
    std::map<uint32_t, int32_t> attributes;  // set by the client (replayed by a migration)
  };
  struct Module {
    ModuleHandle handle{};
    std::string label;
    Bytes image;  // as loaded (a migration loads it again on the new server)
    // Parameter layout per kernel, read from the image when a launch log is kept.
    std::map<std::string, std::vector<LaunchRecord::Arg>> layouts;
  };
  struct Global {
    uint64_t module = 0;
  };
  // A device-to-host copy whose data goes out before a later reply.
  // kInArena: the bytes are in the client's arena already (MemcpyDtoHStagedAsync); only the
  // word that they landed goes out.
  // Whether one more download may be queued (see kMaxDownloads).
  CudaStatus RoomForDownload(Io& io) const;
  struct Download {
    uint32_t seq = 0;
    CallId call = CallId::kMemcpyDtoHAsync;
    std::unique_ptr<HostBuffer> buffer;  // null and !in_arena: abandoned (the copy failed)
    bool in_arena = false;
    uint64_t bytes = 0;
    std::optional<EventHandle> done;  // none: done already
  };

  // A hello reply naming this server, the client's id and the device (no version: a refusal).
  HelloReply BaseHelloReply() const;
  Status Hello();
  // Sends the hello reply; with a shared-memory offer, with the memfd and its eventfds, and then
  // reads the client's ShmAck and switches to the rings if it took them.
  Status SendHelloReply(const Bytes& reply, bool offer_shm);
  // Maps the offered memory and moves this connection's bytes onto its rings.
  Status SwitchToSharedMemory();
  // Makes this process's backend if there is none yet; false (backend_error_ says why) if the
  // device cannot be opened.
  bool EnsureBackend();
  // Takes the connection over (resume_reset_): opens a fresh session and answers the reset.
  Status Resume();
  // Isolation::kProcess, after a failed reset: hands the connection to a fresh process.
  [[noreturn]] void Respawn(uint32_t reset_seq);
  Status Serve();
  // Waits for the client's next frame; past ServerOptions::idle_timeout with nothing held on the
  // device, a kTimeout that closes the connection (idle_closed_ set).
  Status AwaitNextFrame();
  // Anything on the device that the client would lose with its connection.
  bool HoldsAnything() const;
  Status Dispatch(const FrameHeader& header, std::span<const std::byte> payload);
  template <typename Traits>
  Status Execute(const FrameHeader& header, std::span<const std::byte> payload);
  Status SendReply(const FrameHeader& header, const CudaStatus& status, const Bytes& reply_fields);
  Status SendData(uint32_t seq, CallId call, uint64_t offset, std::span<const std::byte> bytes);
  Status DeliverFinishedDownloads();
  void NoteAsyncError(const FrameHeader& header, const CudaStatus& status);
  void FreeEverything();

  // Receives the data frames of a kIn request, handing each chunk to consume(offset, chunk)
  // until it fails once; the rest is read and dropped. Returns consume's first error.
  // With `direct` (a host view of the destination, HostView), each chunk is read straight into
  // direct + its offset, and consume sees it there.
  template <typename Consume>
  CudaStatus ReceiveData(Io& io, uint64_t bytes, Consume&& consume, std::byte* direct = nullptr);
  // cudaMemcpy / cudaMemcpyAsync host→device: the request, then its data frames.
  template <typename Request>
  CudaStatus ReceiveCopy(const Request& r, Io& io);
  CudaStatus DrainData(Io& io, uint64_t bytes, CudaStatus status) {
    CudaStatus s = ReceiveData(io, bytes, [](uint64_t, std::span<const std::byte>) {
      return CudaStatus::Ok();
    });
    (void)s;
    return status;
  }

  CudaResult<StreamHandle> ResolveStream(uint64_t stream) const;
  CudaResult<EventHandle> ResolveEvent(uint64_t event) const;
  CudaStatus CheckRange(uint64_t ptr, uint64_t bytes, const char* what) const;
  // Writes one kernel launch to the server's launch log (which must be open), with the
  // parameter layout of the function's module when it was read.
  void LogLaunch(uint32_t seq, const Function& function, const Dim3& grid, const Dim3& block,
                 uint32_t shared_bytes, uint64_t stream, std::span<const std::byte> params) const;
  std::string Tag() const { return "client " + std::to_string(id_); }

  static CudaStatus Error(CudaError code, std::string message) {
    return {code, std::move(message)};
  }
  static std::string Hex(uint64_t v);
  // The error for a handle the client picked that cannot be taken (HandleTable::Insert).
  static CudaStatus InsertError(HandleInsert result, const char* what, uint64_t id);

  // The call handlers: handlers_{device,memory,stream,launch}.cc. `io` carries the request's
  // frame header and receives a protocol violation found while handling.
#define FLYT_CALL(id, name, mode, data, req, rep) \
  CudaResult<name##Reply> Handle(const name##Request& request, Io& io);
#include "remote/calls.def"
#undef FLYT_CALL

  // The server-wide device-memory account, as seen by one client.
  class Memory {
   public:
    Memory(ClientRegistry& registry, ClientSlot* slot) : registry_(registry), slot_(slot) {}
    bool TryReserve(uint64_t bytes) { return registry_.TryReserve(slot_, bytes); }
    void Release(uint64_t bytes) { registry_.Release(slot_, bytes); }
    uint64_t used_bytes() const { return registry_.used_bytes(); }
    uint64_t limit_bytes() const { return registry_.limit_bytes(); }

   private:
    ClientRegistry& registry_;
    ClientSlot* slot_;
  };

  Server& server_;
  ReceivedHello hello_;
  std::shared_ptr<ShmOffer> shm_offer_;
  std::shared_ptr<ShmRegion> shm_;  // mapped once the client took the offer
  bool idle_closed_ = false;
  // Set in a process that takes a connection over after its previous process could not reset
  // the device: the seq of the cudaDeviceReset to answer instead of a hello.
  std::optional<uint32_t> resume_reset_;
  Backend* backend_;
  const BackendFactory* make_backend_;
  std::unique_ptr<Backend> owned_backend_;  // made by make_backend_; outlives session_
  std::string backend_error_;
  int fd_;
  uint64_t id_;
  ClientSlot* slot_;
  ClientCounters* counters_;
  Memory memory_;
  std::unique_ptr<Channel> channel_;
  Bytes payload_;
  Bytes data_;
  std::string label_;
  uint32_t pid_ = 0;

  std::unique_ptr<Session> session_;
  AddressRanges<uint8_t> allocations_;
  AddressRanges<Global> globals_;
  std::map<std::pair<uint64_t, std::string>, GlobalSymbol> global_cache_;
  HandleTable<StreamHandle> streams_{kMaxStreams};
  HandleTable<EventHandle> events_{kMaxEvents};
  HandleTable<Module> modules_{kMaxModules};
  HandleTable<Function> functions_{kMaxFunctions};
  std::list<Download> downloads_;
  uint64_t download_bytes_ = 0;

  // The first error of posted work since the last reply.
  std::optional<ReplyStatus> async_error_;

  // [issue 17: graphs] per-client state
  // Graph execs by the client's number: the backend's exec and the nodes as the client sent
  // them (client numbers), re-checked at each launch (a function, event or range may be gone).
  struct GraphExec {
    uint64_t backend = 0;
    std::vector<GraphNode> nodes;
    uint64_t kernels = 0;
    // What a launch re-checks, each once: functions and events by the client's number and the
    // backend handle it named when the graph was instantiated (a number destroyed and made again
    // names another object, which the backend's graph does not hold), and device ranges.
    std::vector<std::pair<uint64_t, FunctionHandle>> functions;
    std::vector<std::pair<uint64_t, EventHandle>> events;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    uint64_t footprint_bytes = 0;  // what the server holds for it, against kMaxGraphBytes
  };
  // Fills `exec`'s launch checks from its nodes, which ResolveGraph accepted.
  void IndexGraph(GraphExec& exec) const;
  // The server memory a graph of `nodes` takes, about.
  static uint64_t GraphFootprint(const std::vector<GraphNode>& nodes);
  static constexpr size_t kMaxGraphExecs = 1 << 14;
  static constexpr size_t kMaxGraphNodes = 1 << 16;
  // All of a client's graph execs together: their nodes and kernel parameters, held in server
  // memory (not device memory, so not counted against --memory-limit-mb).
  static constexpr uint64_t kMaxGraphBytes = 256ull << 20;
  uint64_t graph_bytes_ = 0;
  HandleTable<GraphExec> graph_execs_{kMaxGraphExecs};
  CudaResult<std::vector<Session::GraphNodeSpec>> ResolveGraph(const std::vector<GraphNode>& nodes);
  // (end graphs)

  // [issue 17: pools] per-client state
  // Stream-ordered pools (handlers_pools.cc). Each block of a pool is a Session::Malloc of its
  // own, counted against the memory limit while the pool holds it (live or cached). A freed
  // block is cached in its pool with an event recorded on the freeing stream: reused by a later
  // allocation of the same size once that event completed (or on the same stream), released when
  // the pool holds more than its release threshold, by trim, or when the client goes.
  static constexpr size_t kMaxPools = 1 << 10;
  // A device attribute as a remote client sees it, whatever the backend: canMapHostMemory (19)
  // is 0, since the client's host memory is on another machine than the device.
  static int32_t ClientAttribute(uint32_t attr, int32_t value);
  struct PoolBlock {
    DevicePtr ptr = 0;
    uint64_t bytes = 0;
    StreamHandle stream{};
    std::optional<EventHandle> freed;  // recorded on `stream` by FreeAsync
  };
  struct Pool {
    uint64_t max_bytes = 0;  // 0: no limit
    uint64_t release_threshold = 0;
    uint64_t reuse[3] = {1, 1, 1};  // cudaMemPoolReuse* (attributes 1-3)
    uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
    std::vector<PoolBlock> cached;
    bool destroyed = false;  // gone once nothing of it is live
  };
  struct LiveBlock {
    uint64_t pool = 0;
    uint64_t bytes = 0;
  };
  CudaResult<Pool*> FindPool(uint64_t pool);
  // Releases cached blocks of `pool` whose free completed, until it holds at most `keep_bytes`.
  void ReleaseCached(Pool& pool, uint64_t keep_bytes);
  void ReleasePools();
  std::map<uint64_t, Pool> pools_;                 // 0: the default pool, made on first use
  std::map<uint64_t, LiveBlock> pool_allocations_;  // live pool blocks by address
  // (end pools)

  // [issue 17: arrays] per-client state
  static constexpr size_t kMaxArrays = 1 << 20;
  static constexpr size_t kMaxTextures = 1 << 20;
  struct ArrayEntry {
    uint64_t backend = 0;  // the Session's handle
    Session::ArraySpec spec;
    uint64_t bytes = 0;   // accounted against the memory limit (0 for a mipmap level)
    uint64_t mipmap = 0;  // the client's mipmapped array owning this level; 0: a plain array
  };
  struct MipmapEntry {
    uint64_t backend = 0;
    Session::ArraySpec spec;
    uint32_t levels = 0;
    uint64_t bytes = 0;
    std::vector<uint64_t> level_ids;  // the client's handles of levels it asked for
  };
  HandleTable<ArrayEntry> arrays_{kMaxArrays};
  HandleTable<MipmapEntry> mipmaps_{kMaxArrays};
  HandleTable<uint64_t> textures_{kMaxTextures};  // the backend's value
  HandleTable<uint64_t> surfaces_{kMaxTextures};
  // Checks a CUDA array shape from the wire; its bytes (levels: all of them) in *bytes.
  CudaResult<Session::ArraySpec> CheckArrayShape(const ArrayShape& shape, uint32_t levels,
                                                 uint64_t* bytes) const;
  // Checks one end of a 2D/3D copy (a device range inside an allocation, or a region inside an
  // array) and translates it for the backend. kind 0 (the request's data) is not accepted here.
  CudaResult<Session::CopyEndSpec> CheckCopyEnd(const CopyEnd& end, uint64_t width_bytes,
                                                uint64_t height, uint64_t depth) const;
  CudaResult<Session::ResourceSpec> CheckResource(const ResourceDesc& resource) const;
  void ReleaseArrays();
  // (end arrays)

  // [issue 17: managed] per-client state
  // (end managed)

  // Interprocess memory (handlers_ipc.cc): what allocations_ holds besides cudaMalloc memory.
  static constexpr uint8_t kPlainAllocation = 0;
  static constexpr uint8_t kIpcImport = 1;          // opened from another client's handle
  static constexpr uint8_t kManagedAllocation = 2;  // cudaMallocManaged (cannot be exported)
  static constexpr size_t kMaxIpcImports = 4096;
  struct IpcImport {
    Bytes handle;
    uint64_t opens = 0;  // cudaIpcOpenMemHandle of the same handle gives the same pointer
  };
  std::map<uint64_t, IpcImport> ipc_imports_;  // by pointer
  // Closes every opened handle (on disconnect and reset).
  void CloseIpcImports();

  // Live migration (migrate.cc). Moving this client away: the state, replayed over an import
  // link to the other server as a client would make it (MallocAt and ModuleGetGlobalAt keep the
  // device addresses), then the memory; what is sent is only read here, so a failure leaves the
  // client as it was. Taking a client in (an import link): the creates, then ImportFinish, then
  // the client's own hello handed over by the supervisor (AwaitClaim).
  struct MoveResult {
    std::string token;
    uint64_t new_client_id = 0;
    uint64_t bytes = 0;
    std::string local_path;  // the new server's Unix socket when it is on this host, else ""
  };
  CudaResult<MoveResult> MoveTo(const MigrationOrder& order);
  // Why this client cannot be moved now ("" when it can).
  std::string Unmovable() const;
  // Writes a kNotice before a reply when an operator asked for this client to move, and one with
  // call ResizeServer when it runs on a new SM share (resize.cc).
  Status MaybeNotice();
  Status AwaitClaim();
  // Answers a migrated client's hello on its new connection (this connection's state is its).
  Status Claim(UniqueFd fd, uint32_t seq, const HelloRequest& hello);
  // Counts device memory copied in over an import link (the test fault of the target).
  void NoteImported(uint64_t bytes);
  bool importing_ = false;     // an import link, not yet claimed
  bool await_claim_ = false;   // ImportFinish answered: the link is done
  bool notice_sent_ = false;
  std::string import_token_;
  std::string moved_to_;  // set once the client moved: the serve loop ends
  uint64_t import_bytes_ = 0;
  UniqueFd handoff_;
  UniqueFd claimed_fd_;
  uint16_t client_version_ = 0;
  uint64_t client_caps_ = 0;
  bool ipc_exported_ = false;  // the client exported memory or an event (cannot move)

  // Operator calls (MigrateClient, ResizeServer): only the server's own user or root, over its
  // Unix socket (SO_PEERCRED), may ask for `what`; kNotPermitted otherwise.
  CudaStatus CheckOperator(std::string_view what) const;
  // Resizing (resize.cc). After the session opened: the SMs it runs with, then the current share
  // when an operator resized the server before this client came. Before each call (a clean
  // point): applies an SM share whose generation this client has not seen yet and records the
  // outcome in its slot.
  void StartSmShare();
  // The backend's device attribute as this client sees it (its own SM share).
  CudaResult<int32_t> DeviceAttribute(uint32_t attr) const;
  void MaybeApplySmShare();
  uint32_t sm_share_generation_ = 0;  // the last share generation applied or refused
  int32_t sm_count_granted_ = 0;      // the SMs this client's session runs with (0: no session)
  bool share_notice_ = false;  // a kNotice (ResizeServer) goes before the next reply
  std::map<uint64_t, std::pair<uint32_t, int32_t>> stream_params_;  // flags, priority
  std::map<uint64_t, uint32_t> event_flags_;

  // The shared-memory transport (handlers_shm.cc). The arena range [offset, offset + bytes) as
  // the server's pointer, or kInvalidValue when it is not inside this client's arena (or the
  // client has none).
  CudaResult<std::byte*> ArenaRange(uint64_t offset, uint64_t bytes) const;
  // Registers the arena with the backend (RegisterHostMemory) once per device session; a backend
  // that refuses leaves copies correct, only staged.
  void RegisterArena();
  void UnregisterArena();
  bool arena_registered_ = false;

};

template <typename Consume>
CudaStatus ClientConnection::ReceiveData(Io& io, uint64_t bytes, Consume&& consume,
                                         std::byte* direct) {
  CudaStatus first;
  uint64_t offset = 0;
  while (offset < bytes) {
    std::byte raw[kFrameHeaderBytes + 8];
    io.protocol = channel_->Read(std::span(raw, kFrameHeaderBytes));
    if (!io.protocol.ok()) return Error(CudaError::kUnknown, "connection lost");
    Result<FrameHeader> header = DecodeFrameHeader(raw);
    if (!header.ok()) {
      io.protocol = header.status();
      return Error(CudaError::kUnknown, "protocol error");
    }
    if (header->kind != FrameKind::kData || header->seq != io.header.seq ||
        header->call != io.header.call || header->payload_bytes < 8 ||
        header->payload_bytes - 8 > bytes - offset) {
      io.protocol = InvalidArgument("data of " + std::string(CallName(io.header.call)) +
                                    " (seq " + std::to_string(io.header.seq) +
                                    ") does not match its request");
      return Error(CudaError::kUnknown, "protocol error");
    }
    io.protocol = channel_->Read(std::span(raw + kFrameHeaderBytes, 8));
    if (!io.protocol.ok()) return Error(CudaError::kUnknown, "connection lost");
    Reader r(std::span<const std::byte>(raw + kFrameHeaderBytes, 8));
    uint64_t chunk_offset = 0;
    const size_t n = header->payload_bytes - 8;
    if (!r.Get(chunk_offset) || chunk_offset != offset) {
      io.protocol = InvalidArgument("data chunk out of order for " +
                                    std::string(CallName(io.header.call)));
      return Error(CudaError::kUnknown, "protocol error");
    }
    if (n == 0) {
      io.protocol = InvalidArgument("empty data chunk");
      return Error(CudaError::kUnknown, "protocol error");
    }
    // The header check above keeps offset + n within the request's `bytes`, which the caller
    // checked against the client's allocation before passing `direct`.
    std::span<std::byte> chunk;
    if (direct != nullptr && first.ok()) {
      chunk = std::span(direct + offset, n);
    } else {
      data_.resize(n);
      chunk = std::span(data_.data(), n);
    }
    io.protocol = channel_->Read(chunk);
    if (!io.protocol.ok()) return Error(CudaError::kUnknown, "connection lost");
    if (first.ok()) first = consume(offset, std::span<const std::byte>(chunk));
    offset += n;
  }
  return first;
}

}  // namespace flyt::remote
