// ClientConnection's connection half: hello, resume after a respawn, the serve loop and
// dispatch, replies and data frames, deferred errors of posted calls, delivery of async
// device-to-host copies, and the cleanup when the client goes away. See connection.h.
#include "remote_server/connection.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <spdlog/spdlog.h>

#include "common/strings.h"

namespace flyt::remote {

std::string ClientConnection::Hex(uint64_t v) { return HexAddress(v); }

CudaStatus ClientConnection::InsertError(HandleInsert result, const char* what, uint64_t id) {
  switch (result) {
    case HandleInsert::kOk:
      return CudaStatus::Ok();
    case HandleInsert::kZero:
      return Error(CudaError::kInvalidValue, std::string(what) + " handle 0 is reserved");
    case HandleInsert::kTaken:
      return Error(CudaError::kInvalidValue,
                   std::string(what) + " handle " + std::to_string(id) + " is already in use");
    case HandleInsert::kFull:
      return Error(CudaError::kMemoryAllocation, std::string("too many ") + what + "s");
  }
  return CudaStatus::Ok();
}

void ClientConnection::Run() {
  Status status = resume_reset_ ? Resume() : Hello();
  if (status.ok()) {
    if (resume_reset_) {
      // Resume said so.
    } else if (server_.isolation() == Isolation::kProcess) {
      spdlog::info("{}: connected ({}, pid {}; served by process {})", Tag(), label_, pid_,
                   ::getpid());
    } else {
      spdlog::info("{}: connected ({}, pid {})", Tag(), label_, pid_);
    }
    status = Serve();
    if (!moved_to_.empty()) {
      spdlog::info("{}: moved to {}", Tag(), moved_to_);
    } else if (idle_closed_) {
      spdlog::info("{}: closing the connection: {}", Tag(), status.message());
    } else if (status.code() == StatusCode::kUnavailable) {
      spdlog::info("{}: disconnected ({})", Tag(), status.message());
    } else if (!status.ok()) {
      spdlog::warn("{}: closing the connection: {}", Tag(), status.message());
    }
  } else if (status.code() == StatusCode::kUnavailable) {
    spdlog::info("{}: went away before the hello ({})", Tag(), status.message());
  } else {
    spdlog::warn("{}: refused: {}", Tag(), status.message());
  }
  channel_->Shutdown();
  ::shutdown(fd_, SHUT_RDWR);
  if (session_) {
    FreeEverything();
    session_.reset();
    spdlog::info("{}: released everything it held", Tag());
  }
}

std::string ClientConnection::VersionError(const HelloRequest& hello) {
  if (hello.max_version < kMinProtocolVersion || hello.min_version > kProtocolVersion ||
      hello.min_version > hello.max_version) {
    return "no common protocol version (client " + std::to_string(hello.min_version) + "-" +
           std::to_string(hello.max_version) + ", server " + std::to_string(kMinProtocolVersion) +
           "-" + std::to_string(kProtocolVersion) + ")";
  }
  return "";
}

Bytes ClientConnection::RefusalFrame(uint32_t seq, const std::string& server_label,
                                     const std::string& error) {
  HelloReply reply;
  reply.magic = kHelloMagic;
  reply.version = 0;
  reply.max_frame_payload = kMaxFramePayload;
  reply.server_label = server_label;
  reply.error = error;
  Bytes out;
  AppendFrame(out, FrameKind::kHelloReply, CallId::kNone, seq, reply);
  return out;
}

HelloReply ClientConnection::BaseHelloReply() const {
  HelloReply reply;
  reply.magic = kHelloMagic;
  reply.max_frame_payload = kMaxFramePayload;
  reply.client_id = id_;
  reply.server_label = server_.options_.label;
  reply.device_count = 1;
  if (backend_ != nullptr) {
    reply.backend = backend_->Name();
    DeviceIdentity identity = backend_->Identity();
    reply.simulated = identity.simulated;
    reply.driver_version = identity.driver_version;
  }
  return reply;
}

Status ClientConnection::Hello() {
  // The server's supervisor read the hello whole, within its deadline, and checked its framing,
  // its magic, the protocol version and the client count.
  const HelloRequest& hello = hello_.request;
  label_ = hello.client_label.substr(0, 200);
  pid_ = hello.pid;
  ClientRegistry::SetClientPid(slot_, pid_);

  HelloReply reply = BaseHelloReply();
  Status refusal;
  if (std::string version = VersionError(hello); !version.empty()) {
    reply.error = version;
  } else if (!EnsureBackend()) {
    reply.error = "cannot open the device: " + backend_error_;
  } else {
    reply.version = std::min(hello.max_version, kProtocolVersion);
    reply.capabilities = hello.capabilities & kAllCapabilities;
    // An import link: another server's process moving a client here (the supervisor made the
    // hand-over pair for the client's own hello that comes after).
    importing_ = (hello.capabilities & kCapMigrationImport) != 0 && reply.version >= 6 &&
                 handoff_.valid();
    if (importing_) reply.capabilities |= kCapMigrationImport;
    client_version_ = reply.version;
    client_caps_ = reply.capabilities;
    if (shm_offer_ == nullptr || reply.version < 5) {
      reply.capabilities &= ~uint64_t{kCapSharedMemory};
    }
    CudaResult<std::unique_ptr<Session>> session =
        backend_->OpenSession(label_ + " (client " + std::to_string(id_) + ")");
    if (!session.ok()) {
      reply.version = 0;
      reply.error = "cannot open a device session: " + session.status().ToString();
    } else {
      session_ = std::move(session).value();
      StartSmShare();
    }
  }
  if (backend_ != nullptr) {
    HelloReply device = BaseHelloReply();
    reply.backend = device.backend;
    reply.simulated = device.simulated;
    reply.driver_version = device.driver_version;
  }
  if (!reply.error.empty()) {
    reply.version = 0;
    refusal = Unavailable(reply.error);
  }
  Bytes out;
  AppendFrame(out, FrameKind::kHelloReply, CallId::kNone, hello_.seq, reply);
  ClientRegistry::SetLabel(slot_, label_);
  if (!refusal.ok()) {
    FLYT_RETURN_IF_ERROR(channel_->Write(out));
    return InvalidArgument(refusal.message());
  }
  return SendHelloReply(out, (reply.capabilities & kCapSharedMemory) != 0);
}

Status ClientConnection::SendHelloReply(const Bytes& reply, bool offer_shm) {
  const TransportKind socket_kind =
      channel_->Kind() == "unix" ? TransportKind::kUnix : TransportKind::kTcp;
  const uint32_t peer_pid = shm_offer_ ? shm_offer_->peer_pid : 0;
  const uint32_t peer_uid = shm_offer_ ? shm_offer_->peer_uid : 0;
  if (!offer_shm) {
    ClientRegistry::SetTransport(slot_, socket_kind, peer_pid, peer_uid, 0);
    return channel_->Write(reply);
  }
  const ShmFds& fds = shm_offer_->fds;
  const int passed[kShmFdCount] = {fds.memfd.get(), fds.server_wake.get(), fds.client_wake.get()};
  FLYT_RETURN_IF_ERROR(SendWithFds(fd_, reply, passed));
  // The client's ShmAck, on the socket, within the hello's time.
  FLYT_ASSIGN_OR_RETURN(bool readable, channel_->WaitReadable(server_.options_.hello_timeout));
  if (!readable) return InvalidArgument("no answer to the shared-memory offer in time");
  std::byte raw[kFrameHeaderBytes];
  FLYT_RETURN_IF_ERROR(channel_->Read(raw));
  FLYT_ASSIGN_OR_RETURN(FrameHeader header, DecodeFrameHeader(raw));
  if (header.kind != FrameKind::kHello || header.seq != hello_.seq || header.payload_bytes > 4096) {
    return InvalidArgument("the answer to the shared-memory offer is not a ShmAck");
  }
  payload_.resize(header.payload_bytes);
  FLYT_RETURN_IF_ERROR(channel_->Read(payload_));
  ShmAck ack;
  if (!DecodeExactly(payload_, ack)) return InvalidArgument("malformed ShmAck");
  if (!ack.accepted) {
    spdlog::info("{}: stays on its socket: it refused shared memory ({})", Tag(),
                 ack.reason.substr(0, 300));
    ClientRegistry::SetTransport(slot_, socket_kind, peer_pid, peer_uid, 0);
    return Status::Ok();
  }
  // Nothing may follow the ShmAck on the socket: every later byte goes through the rings.
  if (channel_->buffered() != 0) {
    return InvalidArgument("bytes on the socket after the ShmAck");
  }
  return SwitchToSharedMemory();
}

Status ClientConnection::SwitchToSharedMemory() {
  const ShmFds& fds = shm_offer_->fds;
  FLYT_ASSIGN_OR_RETURN(std::unique_ptr<ShmRegion> region,
                        ShmRegion::MapServer(fds.memfd.get(), shm_offer_->layout));
  shm_ = std::move(region);
  // Each end's own descriptors: the supervisor keeps the offer's for a respawned process.
  UniqueFd own(::fcntl(fds.server_wake.get(), F_DUPFD_CLOEXEC, 0));
  UniqueFd peer(::fcntl(fds.client_wake.get(), F_DUPFD_CLOEXEC, 0));
  if (!own.valid() || !peer.valid()) return ErrnoError("dup an eventfd", errno);
  channel_ = std::make_unique<ShmChannel>(ShmChannel::Side::kServer, shm_, std::move(own),
                                          std::move(peer), fd_);
  ClientRegistry::SetTransport(slot_, TransportKind::kShm, shm_offer_->peer_pid,
                               shm_offer_->peer_uid, shm_->arena_bytes());
  RegisterArena();
  spdlog::debug("{}: shared memory: {} MiB arena, peer pid {} uid {}", Tag(),
                shm_->arena_bytes() >> 20, shm_offer_->peer_pid, shm_offer_->peer_uid);
  return Status::Ok();
}

bool ClientConnection::EnsureBackend() {
  if (backend_ != nullptr) return true;
  if (make_backend_ == nullptr || !*make_backend_) {
    backend_error_ = "no backend";
    return false;
  }
  Result<std::unique_ptr<Backend>> made = (*make_backend_)();
  if (!made.ok()) {
    backend_error_ = made.status().message();
    spdlog::error("{}: cannot open the device: {}", Tag(), backend_error_);
    return false;
  }
  owned_backend_ = std::move(made).value();
  backend_ = owned_backend_.get();
  return true;
}

Status ClientConnection::Resume() {
  label_ = ClientRegistry::Label(slot_);
  pid_ = ClientRegistry::ClientPid(slot_);
  if (!EnsureBackend()) return Unavailable("cannot open the device again: " + backend_error_);
  CudaResult<std::unique_ptr<Session>> session =
      backend_->OpenSession(label_ + " (client " + std::to_string(id_) + ")");
  if (!session.ok()) {
    return Unavailable("cannot open a device session again: " + session.status().ToString());
  }
  session_ = std::move(session).value();
  StartSmShare();
  // The rings hold the connection's place: the reply goes where the previous process left off.
  if (ClientRegistry::Transport(slot_) == TransportKind::kShm && shm_offer_ != nullptr) {
    FLYT_RETURN_IF_ERROR(SwitchToSharedMemory());
  }
  spdlog::info("{}: goes on in a fresh process {} after its device reset", Tag(), ::getpid());
  Bytes fields;
  Writer w(fields);
  Encode(w, DeviceResetReply{});
  return SendReply({0, CallId::kDeviceReset, FrameKind::kCall, *resume_reset_}, CudaStatus::Ok(),
                   fields);
}

void ClientConnection::Respawn(uint32_t reset_seq) {
  spdlog::warn("{}: a fault corrupted the device state of its process {}; a fresh process takes "
               "over for cudaDeviceReset",
               Tag(), ::getpid());
  ClientRegistry::RequestRespawn(slot_, reset_seq);
  if (std::shared_ptr<spdlog::logger> logger = spdlog::default_logger()) logger->flush();
  // No destructor runs: the driver's state is corrupt, and the process's exit releases it all.
  ::_exit(kRespawnExitCode);
}

Status ClientConnection::Serve() {
  std::byte raw[kFrameHeaderBytes];
  while (true) {
    if (channel_->buffered() == 0) FLYT_RETURN_IF_ERROR(AwaitNextFrame());
    FLYT_RETURN_IF_ERROR(channel_->Read(raw));
    FLYT_ASSIGN_OR_RETURN(FrameHeader header, DecodeFrameHeader(raw));
    if (header.kind != FrameKind::kCall && header.kind != FrameKind::kPost) {
      return InvalidArgument("unexpected frame kind " +
                             std::to_string(static_cast<int>(header.kind)) + " for call " +
                             std::string(CallName(header.call)));
    }
    payload_.resize(header.payload_bytes);
    FLYT_RETURN_IF_ERROR(channel_->Read(payload_));
    MaybeApplySmShare();  // a clean point: the previous call is done, this one not begun
    FLYT_RETURN_IF_ERROR(Dispatch(header, payload_));
    if (!moved_to_.empty()) return Status::Ok();
    if (await_claim_) FLYT_RETURN_IF_ERROR(AwaitClaim());
  }
}

bool ClientConnection::HoldsAnything() const {
  bool held = !allocations_.empty() || streams_.size() != 0 || events_.size() != 0 ||
              modules_.size() != 0 || !downloads_.empty();
  // [issue 17: graphs] held &= ...; objects that keep a client from being closed for idleness
  held = held || graph_execs_.size() > 0;
  // (end graphs)

  // [issue 17: pools] held &= ...; objects that keep a client from being closed for idleness
  held = held || !pool_allocations_.empty();
  // (end pools)

  // [issue 17: arrays] held &= ...; objects that keep a client from being closed for idleness
  held = held || arrays_.size() != 0 || mipmaps_.size() != 0 || textures_.size() != 0 ||
         surfaces_.size() != 0;
  // (end arrays)

  // [issue 17: managed] held &= ...; objects that keep a client from being closed for idleness
  // (end managed)

  return held;
}

Status ClientConnection::AwaitNextFrame() {
  const std::chrono::milliseconds idle = server_.options_.idle_timeout;
  // Nothing held can change while no call arrives: one check decides how long to wait.
  if (idle.count() <= 0 || HoldsAnything()) return Status::Ok();
  FLYT_ASSIGN_OR_RETURN(bool readable, channel_->WaitReadable(idle));
  if (readable) return Status::Ok();  // data, or the end of the stream: Read says which
  idle_closed_ = true;
  server_.registry_->Count(ServerCounter::kIdleClosed);
  return Status(StatusCode::kTimeout,
                "no call for " + std::to_string(idle.count() / 1000.0).substr(0, 5) +
                    " s while it holds nothing on the device (idle timeout)");
}

Status ClientConnection::Dispatch(const FrameHeader& header, std::span<const std::byte> payload) {
  switch (header.call) {
#define FLYT_CALL(id, name, mode, data, req, rep) \
  case CallId::k##name:                           \
    return Execute<CallTraits<CallId::k##name>>(header, payload);
#include "remote/calls.def"
#undef FLYT_CALL
    case CallId::kNone:
      break;
  }
  return InvalidArgument("unknown call " + std::to_string(static_cast<int>(header.call)));
}

template <typename Traits>
Status ClientConnection::Execute(const FrameHeader& header, std::span<const std::byte> payload) {
  constexpr FrameKind kExpected =
      Traits::kMode == CallMode::kCall ? FrameKind::kCall : FrameKind::kPost;
  if (header.kind != kExpected) {
    return InvalidArgument(std::string(Traits::kName) + " sent as the wrong frame kind");
  }
  typename Traits::Request request;
  if (!DecodeExactly(payload, request)) {
    return InvalidArgument("malformed " + std::string(Traits::kName) + " request");
  }
  Io io{header, Status::Ok()};
  CudaResult<typename Traits::Reply> result = Handle(request, io);
  if (!io.protocol.ok()) return io.protocol;
  if constexpr (Traits::kMode == CallMode::kPost) {
    if (!result.ok()) NoteAsyncError(header, result.status());
    return Status::Ok();
  } else {
    FLYT_RETURN_IF_ERROR(DeliverFinishedDownloads());
    Bytes fields;
    if (result.ok()) {
      Writer w(fields);
      Encode(w, *result);
    }
    return SendReply(header, result.status(), fields);
  }
}

Status ClientConnection::SendReply(const FrameHeader& header, const CudaStatus& status,
                                   const Bytes& reply_fields) {
  ReplyStatus rs;
  rs.code = static_cast<uint32_t>(status.code());
  rs.message = status.message();
  if (async_error_) {
    rs.async_code = async_error_->async_code;
    rs.async_call = async_error_->async_call;
    rs.async_seq = async_error_->async_seq;
    rs.async_message = async_error_->async_message;
    async_error_.reset();
  }
  Bytes out;
  AppendFrame(out, FrameKind::kReply, header.call, header.seq, rs);
  out.insert(out.end(), reply_fields.begin(), reply_fields.end());
  // Patch the payload length to cover the reply fields too.
  FrameHeader full{static_cast<uint32_t>(out.size() - kFrameHeaderBytes), header.call,
                   FrameKind::kReply, header.seq};
  EncodeFrameHeader(full, out.data());
  FLYT_RETURN_IF_ERROR(MaybeNotice());
  return channel_->Write(out);
}

Status ClientConnection::SendData(uint32_t seq, CallId call, uint64_t offset,
                                  std::span<const std::byte> bytes) {
  std::byte head[kFrameHeaderBytes + 8];
  EncodeFrameHeader({static_cast<uint32_t>(8 + bytes.size()), call, FrameKind::kData, seq}, head);
  for (int i = 0; i < 8; ++i) {
    head[kFrameHeaderBytes + i] = static_cast<std::byte>((offset >> (8 * i)) & 0xFF);
  }
  iovec iov[2] = {{head, sizeof head}, {const_cast<std::byte*>(bytes.data()), bytes.size()}};
  counters_->bytes_from_device += bytes.size();
  return channel_->Write(std::span<const iovec>(iov, bytes.empty() ? 1 : 2));
}

void ClientConnection::NoteAsyncError(const FrameHeader& header, const CudaStatus& status) {
  spdlog::debug("{}: posted {} (seq {}) failed: {}", Tag(), CallName(header.call), header.seq,
                status.ToString());
  if (async_error_) return;  // the first one is what the program sees, as with CUDA
  ReplyStatus rs;
  rs.async_code = static_cast<uint32_t>(status.code());
  rs.async_call = static_cast<uint16_t>(header.call);
  rs.async_seq = header.seq;
  rs.async_message = status.message();
  async_error_ = std::move(rs);
}

CudaStatus ClientConnection::RoomForDownload(Io& io) const {
  if (downloads_.size() < kMaxDownloads) return CudaStatus::Ok();
  if (downloads_.size() >= 2 * kMaxDownloads) {
    io.protocol = InvalidArgument("more than " + std::to_string(2 * kMaxDownloads) +
                                  " device-to-host copies posted with no call to take them");
  }
  return Error(CudaError::kMemoryAllocation,
               std::to_string(kMaxDownloads) +
                   " device-to-host copies in flight; synchronise before posting more");
}

Status ClientConnection::DeliverFinishedDownloads() {
  for (auto it = downloads_.begin(); it != downloads_.end();) {
    Download& d = *it;
    if (d.in_arena) {
      CudaStatus done = d.done ? session_->EventQuery(*d.done) : CudaStatus::Ok();
      if (done.code() == CudaError::kNotReady) {
        ++it;
        continue;
      }
      FLYT_RETURN_IF_ERROR(SendData(d.seq, d.call, done.ok() ? kDataInArena : kDataAbandoned, {}));
      if (d.done) (void)session_->EventDestroy(*d.done);
    } else if (d.buffer) {
      CudaStatus done = session_->EventQuery(*d.done);
      if (done.code() == CudaError::kNotReady) {
        ++it;
        continue;
      }
      if (done.ok()) {
        std::span<const std::byte> all(d.buffer->data(), d.bytes);
        for (uint64_t off = 0; off < d.bytes; off += kDataChunkBytes) {
          FLYT_RETURN_IF_ERROR(
              SendData(d.seq, d.call, off, all.subspan(off, std::min<uint64_t>(kDataChunkBytes,
                                                                               d.bytes - off))));
        }
      } else {
        FLYT_RETURN_IF_ERROR(SendData(d.seq, d.call, kDataAbandoned, {}));
      }
      (void)session_->EventDestroy(*d.done);
      download_bytes_ -= d.bytes;
    } else {
      FLYT_RETURN_IF_ERROR(SendData(d.seq, d.call, kDataAbandoned, {}));
    }
    it = downloads_.erase(it);
  }
  return Status::Ok();
}


CudaResult<StreamHandle> ClientConnection::ResolveStream(uint64_t stream) const {
  if (stream == 0) return kDefaultStream;
  const StreamHandle* handle = streams_.Find(stream);
  if (!handle) {
    return Error(CudaError::kInvalidResourceHandle, "no stream " + std::to_string(stream));
  }
  return *handle;
}

CudaResult<EventHandle> ClientConnection::ResolveEvent(uint64_t event) const {
  const EventHandle* handle = events_.Find(event);
  if (!handle) {
    return Error(CudaError::kInvalidResourceHandle, "no event " + std::to_string(event));
  }
  return *handle;
}

CudaStatus ClientConnection::CheckRange(uint64_t ptr, uint64_t bytes, const char* what) const {
  if (allocations_.Contains(ptr, bytes) || globals_.Contains(ptr, bytes)) return CudaStatus::Ok();
  return Error(CudaError::kInvalidValue, std::string(what) + " range " + Hex(ptr) + "+" +
                                             std::to_string(bytes) +
                                             " is not inside one of this client's allocations");
}

void ClientConnection::FreeEverything() {
  // Device work still queued may write into download buffers (or the arena) or read memory
  // about to be freed.
  (void)session_->DeviceSynchronize();
  UnregisterArena();
  for (Download& d : downloads_) {
    if (d.done) (void)session_->EventDestroy(*d.done);
  }
  downloads_.clear();
  download_bytes_ = 0;
  // [issue 17: graphs] release (before events, streams, modules and memory)
  for (auto& [id, exec] : graph_execs_.TakeAll()) (void)session_->GraphDestroy(exec.backend);
  graph_bytes_ = 0;
  // (end graphs)

  // [issue 17: pools] release (before events, streams, modules and memory)
  ReleasePools();
  // (end pools)

  // [issue 17: arrays] release (before events, streams, modules and memory)
  ReleaseArrays();
  // (end arrays)

  // [issue 17: managed] release (before events, streams, modules and memory)
  // (end managed)

  for (auto& [id, event] : events_.TakeAll()) (void)session_->EventDestroy(event);
  for (auto& [id, stream] : streams_.TakeAll()) (void)session_->StreamDestroy(stream);
  event_flags_.clear();
  stream_params_.clear();
  functions_.TakeAll();
  for (auto& [id, module] : modules_.TakeAll()) (void)session_->ModuleUnload(module.handle);
  globals_.Clear();
  global_cache_.clear();
  CloseIpcImports();
  std::vector<std::pair<uint64_t, uint64_t>> allocations;
  allocations_.ForEach([&](uint64_t base, uint64_t size, uint8_t) {
    allocations.emplace_back(base, size);
  });
  for (auto [base, size] : allocations) {
    CudaStatus s = session_->Free(base);
    if (!s.ok()) spdlog::warn("{}: freeing {}: {}", Tag(), Hex(base), s.ToString());
    memory_.Release(size);
  }
  allocations_.Clear();
  counters_->allocations = 0;
  counters_->allocated_bytes = 0;
  counters_->streams = 0;
  counters_->events = 0;
  counters_->modules = 0;
}

}  // namespace flyt::remote
