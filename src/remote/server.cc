#include "remote/server.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <list>
#include <map>
#include <spdlog/details/console_globals.h>
#include <spdlog/spdlog.h>
#include <utility>

#include "cuda/fatbin.h"
#include "remote/address_ranges.h"
#include "remote/handle_table.h"

namespace flyt::remote {

namespace {

constexpr size_t kMaxStreams = 1 << 16;
constexpr size_t kMaxEvents = 1 << 20;
constexpr size_t kMaxModules = 1 << 12;
constexpr size_t kMaxFunctions = 1 << 20;
constexpr uint64_t kMaxModuleBytes = 1ull << 30;
constexpr size_t kMaxHelloBytes = 64 << 10;
constexpr size_t kDepartedKept = 64;
// Connections beyond max_clients that may be open at once, to be refused by their hello.
constexpr size_t kConnectSlack = 16;
// A Data frame with this offset and no bytes: "the download of this seq was abandoned".
constexpr uint64_t kAbandonedOffset = ~uint64_t{0};
// A client process's exit status that asks for a fresh process to take its connection over.
constexpr int kRespawnExitCode = 75;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

// One client's connection: its thread runs Run() from hello to cleanup.
class ClientSession {
 public:
  // `backend`: the server's (Isolation::kThread). Null: the client's process makes its own with
  // `make_backend` once the hello has been accepted, so that a peer that never says hello
  // costs no device initialisation.
  ClientSession(Server& server, Backend* backend, const BackendFactory* make_backend, int fd,
                uint64_t id, ClientSlot* slot, std::optional<uint32_t> resume_reset = std::nullopt)
      : server_(server),
        resume_reset_(resume_reset),
        backend_(backend),
        make_backend_(make_backend),
        fd_(fd),
        id_(id),
        slot_(slot),
        counters_(&ClientRegistry::Counters(slot)),
        memory_(*server.registry_, slot),
        reader_(fd) {}

  void Run();

 private:
  struct Io {
    FrameHeader header;
    Status protocol;  // a protocol violation found while handling (closes the connection)
  };
  struct Function {
    FunctionHandle handle{};
    uint64_t module = 0;
    std::string name;
  };
  struct Module {
    ModuleHandle handle{};
    std::string label;
    // Parameter layout per kernel, read from the image when a launch log is kept.
    std::map<std::string, std::vector<LaunchRecord::Arg>> layouts;
  };
  struct Global {
    uint64_t module = 0;
  };
  // A device-to-host copy whose data goes out before a later reply.
  struct Download {
    uint32_t seq = 0;
    CallId call = CallId::kMemcpyDtoHAsync;
    std::unique_ptr<HostBuffer> buffer;  // null: abandoned (the copy failed)
    uint64_t bytes = 0;
    std::optional<EventHandle> done;
  };

  Status Hello();
  // Makes this process's backend if there is none yet; false (backend_error_ says why) if the
  // device cannot be opened.
  bool EnsureBackend();
  // Takes the connection over (resume_reset_): opens a fresh session and answers the reset.
  Status Resume();
  // Isolation::kProcess, after a failed reset: hands the connection to a fresh process.
  [[noreturn]] void Respawn(uint32_t reset_seq);
  Status Serve();
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
  std::string Tag() const { return "client " + std::to_string(id_); }

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
  SocketReader reader_;
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
};

void ClientSession::Run() {
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
    if (status.code() == StatusCode::kUnavailable) {
      spdlog::info("{}: disconnected ({})", Tag(), status.message());
    } else if (!status.ok()) {
      spdlog::warn("{}: closing the connection: {}", Tag(), status.message());
    }
  } else if (status.code() == StatusCode::kUnavailable) {
    spdlog::info("{}: went away before the hello ({})", Tag(), status.message());
  } else {
    spdlog::warn("{}: refused: {}", Tag(), status.message());
  }
  ::shutdown(fd_, SHUT_RDWR);
  if (session_) {
    FreeEverything();
    session_.reset();
    spdlog::info("{}: released everything it held", Tag());
  }
}

Status ClientSession::Hello() {
  // A peer that connects and says nothing must not hold a thread for ever.
  timeval timeout{10, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::byte raw[kFrameHeaderBytes];
  Status read = reader_.Read(raw);
  if (!read.ok()) {
    if (read.code() == StatusCode::kTimeout) return InvalidArgument("no hello within 10 s");
    return read;
  }
  FLYT_ASSIGN_OR_RETURN(FrameHeader header, DecodeFrameHeader(raw));
  if (header.kind != FrameKind::kHello) return InvalidArgument("first frame is not a hello");
  if (header.payload_bytes > kMaxHelloBytes) return InvalidArgument("oversized hello");
  payload_.resize(header.payload_bytes);
  FLYT_RETURN_IF_ERROR(reader_.Read(payload_));
  timeout = {0, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);

  HelloRequest hello;
  if (!DecodeExactly(payload_, hello) || hello.magic != kHelloMagic) {
    return InvalidArgument("malformed hello");
  }
  label_ = hello.client_label.substr(0, 200);
  pid_ = hello.pid;
  ClientRegistry::SetClientPid(slot_, pid_);

  HelloReply reply;
  reply.magic = kHelloMagic;
  reply.max_frame_payload = kMaxFramePayload;
  reply.client_id = id_;
  reply.server_label = server_.options_.label;
  reply.device_count = 1;
  Status refusal;
  if (hello.max_version < kMinProtocolVersion || hello.min_version > kProtocolVersion ||
      hello.min_version > hello.max_version) {
    reply.error = "no common protocol version (client " + std::to_string(hello.min_version) +
                  "-" + std::to_string(hello.max_version) + ", server " +
                  std::to_string(kMinProtocolVersion) + "-" + std::to_string(kProtocolVersion) +
                  ")";
  } else if (server_.client_count() > server_.options_.max_clients) {
    reply.error = "server busy: " + std::to_string(server_.options_.max_clients) +
                  " clients connected";
  } else if (!EnsureBackend()) {
    reply.error = "cannot open the device: " + backend_error_;
  } else {
    reply.version = std::min(hello.max_version, kProtocolVersion);
    reply.capabilities = hello.capabilities & kAllCapabilities;
    CudaResult<std::unique_ptr<Session>> session =
        backend_->OpenSession(label_ + " (client " + std::to_string(id_) + ")");
    if (!session.ok()) {
      reply.version = 0;
      reply.error = "cannot open a device session: " + session.status().ToString();
    } else {
      session_ = std::move(session).value();
    }
  }
  if (backend_ != nullptr) {
    reply.backend = backend_->Name();
    DeviceIdentity identity = backend_->Identity();
    reply.simulated = identity.simulated;
    reply.driver_version = identity.driver_version;
  }
  if (!reply.error.empty()) {
    reply.version = 0;
    refusal = Unavailable(reply.error);
  }
  Bytes out;
  AppendFrame(out, FrameKind::kHelloReply, CallId::kNone, header.seq, reply);
  FLYT_RETURN_IF_ERROR(WriteAll(fd_, out));
  if (!refusal.ok()) return InvalidArgument(refusal.message());
  ClientRegistry::SetLabel(slot_, label_);
  return Status::Ok();
}

bool ClientSession::EnsureBackend() {
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

Status ClientSession::Resume() {
  label_ = ClientRegistry::Label(slot_);
  pid_ = ClientRegistry::ClientPid(slot_);
  if (!EnsureBackend()) return Unavailable("cannot open the device again: " + backend_error_);
  CudaResult<std::unique_ptr<Session>> session =
      backend_->OpenSession(label_ + " (client " + std::to_string(id_) + ")");
  if (!session.ok()) {
    return Unavailable("cannot open a device session again: " + session.status().ToString());
  }
  session_ = std::move(session).value();
  spdlog::info("{}: goes on in a fresh process {} after its device reset", Tag(), ::getpid());
  Bytes fields;
  Writer w(fields);
  Encode(w, DeviceResetReply{});
  return SendReply({0, CallId::kDeviceReset, FrameKind::kCall, *resume_reset_}, CudaStatus::Ok(),
                   fields);
}

void ClientSession::Respawn(uint32_t reset_seq) {
  spdlog::warn("{}: a fault corrupted the device state of its process {}; a fresh process takes "
               "over for cudaDeviceReset",
               Tag(), ::getpid());
  ClientRegistry::RequestRespawn(slot_, reset_seq);
  if (std::shared_ptr<spdlog::logger> logger = spdlog::default_logger()) logger->flush();
  // No destructor runs: the driver's state is corrupt, and the process's exit releases it all.
  ::_exit(kRespawnExitCode);
}

Status ClientSession::Serve() {
  std::byte raw[kFrameHeaderBytes];
  while (true) {
    FLYT_RETURN_IF_ERROR(reader_.Read(raw));
    FLYT_ASSIGN_OR_RETURN(FrameHeader header, DecodeFrameHeader(raw));
    if (header.kind != FrameKind::kCall && header.kind != FrameKind::kPost) {
      return InvalidArgument("unexpected frame kind " +
                             std::to_string(static_cast<int>(header.kind)) + " for call " +
                             std::string(CallName(header.call)));
    }
    payload_.resize(header.payload_bytes);
    FLYT_RETURN_IF_ERROR(reader_.Read(payload_));
    FLYT_RETURN_IF_ERROR(Dispatch(header, payload_));
  }
}

Status ClientSession::Dispatch(const FrameHeader& header, std::span<const std::byte> payload) {
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
Status ClientSession::Execute(const FrameHeader& header, std::span<const std::byte> payload) {
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

Status ClientSession::SendReply(const FrameHeader& header, const CudaStatus& status,
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
  return WriteAll(fd_, out);
}

Status ClientSession::SendData(uint32_t seq, CallId call, uint64_t offset,
                               std::span<const std::byte> bytes) {
  std::byte head[kFrameHeaderBytes + 8];
  EncodeFrameHeader({static_cast<uint32_t>(8 + bytes.size()), call, FrameKind::kData, seq}, head);
  for (int i = 0; i < 8; ++i) {
    head[kFrameHeaderBytes + i] = static_cast<std::byte>((offset >> (8 * i)) & 0xFF);
  }
  iovec iov[2] = {{head, sizeof head}, {const_cast<std::byte*>(bytes.data()), bytes.size()}};
  counters_->bytes_from_device += bytes.size();
  return WriteAll(fd_, std::span<const iovec>(iov, bytes.empty() ? 1 : 2));
}

void ClientSession::NoteAsyncError(const FrameHeader& header, const CudaStatus& status) {
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

Status ClientSession::DeliverFinishedDownloads() {
  for (auto it = downloads_.begin(); it != downloads_.end();) {
    Download& d = *it;
    if (d.buffer) {
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
        FLYT_RETURN_IF_ERROR(SendData(d.seq, d.call, kAbandonedOffset, {}));
      }
      (void)session_->EventDestroy(*d.done);
      download_bytes_ -= d.bytes;
    } else {
      FLYT_RETURN_IF_ERROR(SendData(d.seq, d.call, kAbandonedOffset, {}));
    }
    it = downloads_.erase(it);
  }
  return Status::Ok();
}

template <typename Consume>
CudaStatus ClientSession::ReceiveData(Io& io, uint64_t bytes, Consume&& consume,
                                      std::byte* direct) {
  CudaStatus first;
  uint64_t offset = 0;
  while (offset < bytes) {
    std::byte raw[kFrameHeaderBytes + 8];
    io.protocol = reader_.Read(std::span(raw, kFrameHeaderBytes));
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
    io.protocol = reader_.Read(std::span(raw + kFrameHeaderBytes, 8));
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
    io.protocol = reader_.Read(chunk);
    if (!io.protocol.ok()) return Error(CudaError::kUnknown, "connection lost");
    if (first.ok()) first = consume(offset, std::span<const std::byte>(chunk));
    offset += n;
  }
  return first;
}

CudaResult<StreamHandle> ClientSession::ResolveStream(uint64_t stream) const {
  if (stream == 0) return kDefaultStream;
  const StreamHandle* handle = streams_.Find(stream);
  if (!handle) {
    return Error(CudaError::kInvalidResourceHandle, "no stream " + std::to_string(stream));
  }
  return *handle;
}

CudaResult<EventHandle> ClientSession::ResolveEvent(uint64_t event) const {
  const EventHandle* handle = events_.Find(event);
  if (!handle) {
    return Error(CudaError::kInvalidResourceHandle, "no event " + std::to_string(event));
  }
  return *handle;
}

CudaStatus ClientSession::CheckRange(uint64_t ptr, uint64_t bytes, const char* what) const {
  if (allocations_.Contains(ptr, bytes) || globals_.Contains(ptr, bytes)) return CudaStatus::Ok();
  return Error(CudaError::kInvalidValue, std::string(what) + " range " + Hex(ptr) + "+" +
                                             std::to_string(bytes) +
                                             " is not inside one of this client's allocations");
}

void ClientSession::FreeEverything() {
  // Device work still queued may write into download buffers or read memory about to be freed.
  (void)session_->DeviceSynchronize();
  for (Download& d : downloads_) {
    if (d.done) (void)session_->EventDestroy(*d.done);
  }
  downloads_.clear();
  download_bytes_ = 0;
  for (auto& [id, event] : events_.TakeAll()) (void)session_->EventDestroy(event);
  for (auto& [id, stream] : streams_.TakeAll()) (void)session_->StreamDestroy(stream);
  functions_.TakeAll();
  for (auto& [id, module] : modules_.TakeAll()) (void)session_->ModuleUnload(module.handle);
  globals_.Clear();
  global_cache_.clear();
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

// ---- handlers ----------------------------------------------------------------------------------

CudaResult<GetDevicePropertiesReply> ClientSession::Handle(const GetDevicePropertiesRequest& r,
                                                            Io&) {
  if (r.device != 0) {
    return Error(CudaError::kInvalidDevice, "this server has one device, 0");
  }
  GetDevicePropertiesReply reply;
  DeviceIdentity identity = backend_->Identity();
  reply.name = identity.name;
  reply.uuid.assign(reinterpret_cast<const std::byte*>(identity.uuid.data()),
                    reinterpret_cast<const std::byte*>(identity.uuid.data()) + identity.uuid.size());
  uint64_t total = identity.total_memory_bytes;
  if (memory_.limit_bytes() != 0) total = std::min(total, memory_.limit_bytes());
  reply.values.push_back({"totalGlobalMem", static_cast<int64_t>(total)});
#define FLYT_DEVICE_PROP(field, attr, name)                                \
  if (CudaResult<int32_t> v = backend_->DeviceAttribute(attr); v.ok()) { \
    reply.values.push_back({#field, *v});                              \
  }
#include "remote/device_props.def"
#undef FLYT_DEVICE_PROP
  return reply;
}

CudaResult<DeviceGetAttributeReply> ClientSession::Handle(const DeviceGetAttributeRequest& r,
                                                           Io&) {
  if (r.device != 0) return Error(CudaError::kInvalidDevice, "this server has one device, 0");
  FLYT_CUDA_ASSIGN_OR_RETURN(int32_t value, backend_->DeviceAttribute(r.attr));
  return DeviceGetAttributeReply{value};
}

CudaResult<DeviceSynchronizeReply> ClientSession::Handle(const DeviceSynchronizeRequest&, Io&) {
  FLYT_CUDA_RETURN_IF_ERROR(session_->DeviceSynchronize());
  return DeviceSynchronizeReply{};
}

CudaResult<DeviceResetReply> ClientSession::Handle(const DeviceResetRequest&, Io& io) {
  // Async device-to-host copies still owed to the program: what finished is delivered, the rest
  // is abandoned, so that no landing is left waiting on the client's side.
  (void)session_->DeviceSynchronize();
  io.protocol = DeliverFinishedDownloads();
  for (const Download& d : downloads_) {
    if (!io.protocol.ok()) break;
    io.protocol = SendData(d.seq, d.call, kAbandonedOffset, {});
  }
  if (!io.protocol.ok()) return Error(CudaError::kUnknown, "connection lost");
  FreeEverything();
  CudaStatus reset = session_->Reset();
  // A fault can leave the process unable to make a new context (the H100 does): with a process
  // per client, a fresh process goes on with the connection. Only when nothing of the client's
  // stream is buffered here unread (it would be lost with this process).
  if (!reset.ok() && IsStickyCudaError(reset.code()) &&
      server_.isolation() == Isolation::kProcess && reader_.buffered() == 0) {
    Respawn(io.header.seq);
  }
  FLYT_CUDA_RETURN_IF_ERROR(reset);
  return DeviceResetReply{};
}

CudaResult<MemGetInfoReply> ClientSession::Handle(const MemGetInfoRequest&, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(MemoryInfo info, session_->MemGetInfo());
  uint64_t limit = memory_.limit_bytes();
  if (limit != 0) info.total_bytes = std::min(info.total_bytes, limit);
  // What every client of this server holds is not free, whether or not the backend sees it (a
  // client process's sim device knows only its own allocations; a GPU's count includes them).
  uint64_t used = memory_.used_bytes();
  info.free_bytes = std::min(info.free_bytes, used >= info.total_bytes ? 0 : info.total_bytes - used);
  return MemGetInfoReply{info.free_bytes, info.total_bytes};
}

CudaResult<SyncReply> ClientSession::Handle(const SyncRequest&, Io&) { return SyncReply{}; }

CudaResult<MallocReply> ClientSession::Handle(const MallocRequest& r, Io&) {
  if (r.bytes == 0) return MallocReply{0};
  if (!memory_.TryReserve(r.bytes)) {
    return Error(CudaError::kMemoryAllocation,
                 "the server's memory limit of " +
                     std::to_string(memory_.limit_bytes() >> 20) + " MiB is reached (" +
                     std::to_string(memory_.used_bytes() >> 20) + " MiB in use)");
  }
  CudaResult<DevicePtr> ptr = session_->Malloc(r.bytes);
  if (!ptr.ok()) {
    memory_.Release(r.bytes);
    return ptr.status();
  }
  if (!allocations_.Add(*ptr, r.bytes)) {
    (void)session_->Free(*ptr);
    memory_.Release(r.bytes);
    return Error(CudaError::kUnknown, "backend returned an address that overlaps another");
  }
  counters_->allocations += 1;
  counters_->allocated_bytes += r.bytes;
  return MallocReply{*ptr};
}

CudaResult<FreeReply> ClientSession::Handle(const FreeRequest& r, Io&) {
  if (r.ptr == 0) return FreeReply{};
  std::optional<AddressRanges<uint8_t>::Range> range = allocations_.Find(r.ptr);
  if (!range || range->base != r.ptr) {
    return Error(CudaError::kInvalidValue, Hex(r.ptr) + " is not an allocation of this client");
  }
  CudaStatus freed = session_->Free(r.ptr);
  allocations_.Remove(r.ptr);
  memory_.Release(range->size);
  counters_->allocations -= 1;
  counters_->allocated_bytes -= range->size;
  FLYT_CUDA_RETURN_IF_ERROR(freed);
  return FreeReply{};
}

template <typename Request>
CudaStatus ClientSession::ReceiveCopy(const Request& r, Io& io) {
  CudaResult<StreamHandle> stream = ResolveStream(r.stream);
  if (!stream.ok()) return DrainData(io, r.bytes, stream.status());
  if (r.bytes == 0) return CudaStatus::Ok();
  if (CudaStatus s = CheckRange(r.dst, r.bytes, "destination"); !s.ok()) {
    return DrainData(io, r.bytes, s);
  }
  if (std::byte* view = session_->HostView(r.dst, r.bytes)) {
    if (CudaStatus s = session_->StreamSynchronize(*stream); !s.ok()) {
      return DrainData(io, r.bytes, s);
    }
    return ReceiveData(
        io, r.bytes,
        [&](uint64_t, std::span<const std::byte> chunk) {
          counters_->bytes_to_device += chunk.size();
          return CudaStatus::Ok();
        },
        view);
  }
  return ReceiveData(io, r.bytes, [&](uint64_t off, std::span<const std::byte> chunk) {
    counters_->bytes_to_device += chunk.size();
    return session_->MemcpyHtoD(r.dst + off, chunk, *stream);
  });
}

CudaResult<MemcpyHtoDReply> ClientSession::Handle(const MemcpyHtoDRequest& r, Io& io) {
  FLYT_CUDA_RETURN_IF_ERROR(ReceiveCopy(r, io));
  if (r.bytes != 0) {
    FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
    FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
  }
  return MemcpyHtoDReply{};
}

CudaResult<MemcpyHtoDAsyncReply> ClientSession::Handle(const MemcpyHtoDAsyncRequest& r, Io& io) {
  FLYT_CUDA_RETURN_IF_ERROR(ReceiveCopy(r, io));
  return MemcpyHtoDAsyncReply{};
}

CudaResult<MemcpyDtoHReply> ClientSession::Handle(const MemcpyDtoHRequest& r, Io& io) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.bytes == 0) return MemcpyDtoHReply{};
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(r.src, r.bytes, "source"));
  std::byte* view = session_->HostView(r.src, r.bytes);
  if (view != nullptr) {
    FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
  } else {
    data_.resize(std::min<uint64_t>(r.bytes, kDataChunkBytes));
  }
  for (uint64_t off = 0; off < r.bytes; off += kDataChunkBytes) {
    size_t n = std::min<uint64_t>(kDataChunkBytes, r.bytes - off);
    std::span<std::byte> chunk = view != nullptr ? std::span(view + off, n)
                                                  : std::span(data_.data(), n);
    if (view == nullptr) {
      FLYT_CUDA_RETURN_IF_ERROR(session_->MemcpyDtoH(chunk, r.src + off, stream));
    }
    io.protocol = SendData(io.header.seq, io.header.call, off, chunk);
    if (!io.protocol.ok()) return Error(CudaError::kUnknown, "connection lost");
  }
  return MemcpyDtoHReply{};
}

CudaResult<MemcpyDtoHAsyncReply> ClientSession::Handle(const MemcpyDtoHAsyncRequest& r, Io& io) {
  Download d;
  d.seq = io.header.seq;
  auto fail = [&](CudaStatus status) -> CudaResult<MemcpyDtoHAsyncReply> {
    downloads_.push_back(std::move(d));  // abandoned: tells the client to stop waiting for it
    return status;
  };
  // Nothing to deliver, and the client waits for nothing (it keeps no landing for 0 bytes).
  if (r.bytes == 0) return MemcpyDtoHAsyncReply{};
  CudaResult<StreamHandle> stream = ResolveStream(r.stream);
  if (!stream.ok()) return fail(stream.status());
  if (CudaStatus s = CheckRange(r.src, r.bytes, "source"); !s.ok()) return fail(s);
  if (r.bytes > server_.options_.max_pending_download_bytes - download_bytes_) {
    return fail(Error(CudaError::kMemoryAllocation,
                      "too much device-to-host data in flight; synchronise first"));
  }
  std::unique_ptr<HostBuffer> buffer = session_->NewHostBuffer(r.bytes);
  if (!buffer) return fail(Error(CudaError::kMemoryAllocation, "no host staging memory"));
  if (CudaStatus s = session_->MemcpyDtoHAsync(buffer->data(), r.src, r.bytes, *stream); !s.ok()) {
    return fail(s);
  }
  CudaResult<EventHandle> event = session_->EventCreate(kEventDisableTiming);
  if (!event.ok()) {
    (void)session_->StreamSynchronize(*stream);
    return fail(event.status());
  }
  if (CudaStatus s = session_->EventRecord(*event, *stream); !s.ok()) {
    (void)session_->StreamSynchronize(*stream);
    (void)session_->EventDestroy(*event);
    return fail(s);
  }
  d.buffer = std::move(buffer);
  d.bytes = r.bytes;
  d.done = *event;
  download_bytes_ += r.bytes;
  downloads_.push_back(std::move(d));
  return MemcpyDtoHAsyncReply{};
}

CudaResult<MemcpyDtoDReply> ClientSession::Handle(const MemcpyDtoDRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.bytes == 0) return MemcpyDtoDReply{};
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(r.src, r.bytes, "source"));
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(r.dst, r.bytes, "destination"));
  FLYT_CUDA_RETURN_IF_ERROR(session_->MemcpyDtoD(r.dst, r.src, r.bytes, stream));
  return MemcpyDtoDReply{};
}

CudaResult<MemsetReply> ClientSession::Handle(const MemsetRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.bytes == 0) return MemsetReply{};
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(r.dst, r.bytes, "memset"));
  FLYT_CUDA_RETURN_IF_ERROR(session_->Memset(r.dst, r.value, r.bytes, stream));
  return MemsetReply{};
}

namespace {
CudaStatus InsertError(HandleInsert result, const char* what, uint64_t id) {
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
}  // namespace

CudaResult<StreamCreateReply> ClientSession::Handle(const StreamCreateRequest& r, Io&) {
  if ((r.flags & ~kStreamNonBlocking) != 0) {
    return Error(CudaError::kInvalidValue, "unknown stream flags " + Hex(r.flags));
  }
  if (r.stream == 0 || streams_.Find(r.stream)) {
    return InsertError(r.stream == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "stream",
                       r.stream);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle handle, session_->StreamCreate(r.flags, r.priority));
  if (CudaStatus s = InsertError(streams_.Insert(r.stream, handle), "stream", r.stream); !s.ok()) {
    (void)session_->StreamDestroy(handle);
    return s;
  }
  counters_->streams += 1;
  return StreamCreateReply{};
}

CudaResult<StreamDestroyReply> ClientSession::Handle(const StreamDestroyRequest& r, Io&) {
  std::optional<StreamHandle> handle = r.stream == 0 ? std::nullopt : streams_.Erase(r.stream);
  if (!handle) {
    return Error(CudaError::kInvalidResourceHandle, "no stream " + std::to_string(r.stream));
  }
  counters_->streams -= 1;
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamDestroy(*handle));
  return StreamDestroyReply{};
}

CudaResult<StreamSynchronizeReply> ClientSession::Handle(const StreamSynchronizeRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
  return StreamSynchronizeReply{};
}

CudaResult<StreamQueryReply> ClientSession::Handle(const StreamQueryRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamQuery(stream));
  return StreamQueryReply{};
}

CudaResult<StreamWaitEventReply> ClientSession::Handle(const StreamWaitEventRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle event, ResolveEvent(r.event));
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamWaitEvent(stream, event, r.flags));
  return StreamWaitEventReply{};
}

CudaResult<EventCreateReply> ClientSession::Handle(const EventCreateRequest& r, Io&) {
  if ((r.flags & ~0x7u) != 0) {
    return Error(CudaError::kInvalidValue, "unknown event flags " + Hex(r.flags));
  }
  if (r.event == 0 || events_.Find(r.event)) {
    return InsertError(r.event == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "event",
                       r.event);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle handle, session_->EventCreate(r.flags));
  if (CudaStatus s = InsertError(events_.Insert(r.event, handle), "event", r.event); !s.ok()) {
    (void)session_->EventDestroy(handle);
    return s;
  }
  counters_->events += 1;
  return EventCreateReply{};
}

CudaResult<EventDestroyReply> ClientSession::Handle(const EventDestroyRequest& r, Io&) {
  std::optional<EventHandle> handle = events_.Erase(r.event);
  if (!handle) {
    return Error(CudaError::kInvalidResourceHandle, "no event " + std::to_string(r.event));
  }
  counters_->events -= 1;
  FLYT_CUDA_RETURN_IF_ERROR(session_->EventDestroy(*handle));
  return EventDestroyReply{};
}

CudaResult<EventRecordReply> ClientSession::Handle(const EventRecordRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle event, ResolveEvent(r.event));
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_RETURN_IF_ERROR(session_->EventRecord(event, stream));
  return EventRecordReply{};
}

CudaResult<EventSynchronizeReply> ClientSession::Handle(const EventSynchronizeRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle event, ResolveEvent(r.event));
  FLYT_CUDA_RETURN_IF_ERROR(session_->EventSynchronize(event));
  return EventSynchronizeReply{};
}

CudaResult<EventQueryReply> ClientSession::Handle(const EventQueryRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle event, ResolveEvent(r.event));
  FLYT_CUDA_RETURN_IF_ERROR(session_->EventQuery(event));
  return EventQueryReply{};
}

CudaResult<EventElapsedTimeReply> ClientSession::Handle(const EventElapsedTimeRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle start, ResolveEvent(r.start));
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle end, ResolveEvent(r.end));
  FLYT_CUDA_ASSIGN_OR_RETURN(float ms, session_->EventElapsedMs(start, end));
  return EventElapsedTimeReply{ms};
}

CudaResult<ModuleLoadReply> ClientSession::Handle(const ModuleLoadRequest& r, Io& io) {
  if (r.bytes == 0 || r.bytes > kMaxModuleBytes) {
    return DrainData(io, std::min(r.bytes, kMaxModuleBytes),
                     Error(CudaError::kInvalidKernelImage,
                           "module image of " + std::to_string(r.bytes) + " bytes"));
  }
  if (r.module == 0 || modules_.Find(r.module)) {
    return DrainData(io, r.bytes,
                     InsertError(r.module == 0 ? HandleInsert::kZero : HandleInsert::kTaken,
                                 "module", r.module));
  }
  Bytes image;
  image.reserve(r.bytes);
  FLYT_CUDA_RETURN_IF_ERROR(ReceiveData(io, r.bytes, [&](uint64_t, std::span<const std::byte> c) {
    image.insert(image.end(), c.begin(), c.end());
    return CudaStatus::Ok();
  }));
  FLYT_CUDA_ASSIGN_OR_RETURN(ModuleHandle handle, session_->ModuleLoad(image));
  Module module{handle, r.label.substr(0, 200), {}};
  if (server_.launch_log_) {
    // Argument layouts for the launch log; a module flyt cannot parse still loads.
    Result<cuda::Fatbin> fatbin = cuda::ParseFatbin(image);
    Result<std::vector<cuda::KernelInfo>> kernels =
        fatbin.ok() ? cuda::KernelsOf(*fatbin) : cuda::ParseCubin(image);
    if (kernels.ok()) {
      for (const cuda::KernelInfo& k : *kernels) {
        std::vector<LaunchRecord::Arg> args;
        for (const cuda::KernelParam& p : k.params) args.push_back({p.offset, p.size_bytes});
        module.layouts.emplace(k.name, std::move(args));
      }
    }
  }
  if (CudaStatus s = InsertError(modules_.Insert(r.module, std::move(module)), "module", r.module);
      !s.ok()) {
    (void)session_->ModuleUnload(handle);
    return s;
  }
  counters_->modules += 1;
  return ModuleLoadReply{};
}

CudaResult<ModuleUnloadReply> ClientSession::Handle(const ModuleUnloadRequest& r, Io&) {
  std::optional<Module> module = modules_.Erase(r.module);
  if (!module) {
    return Error(CudaError::kInvalidResourceHandle, "no module " + std::to_string(r.module));
  }
  counters_->modules -= 1;
  functions_.EraseIf([&](uint64_t, const Function& f) { return f.module == r.module; });
  std::vector<uint64_t> gone;
  globals_.ForEach([&](uint64_t base, uint64_t, const Global& g) {
    if (g.module == r.module) gone.push_back(base);
  });
  for (uint64_t base : gone) globals_.Remove(base);
  std::erase_if(global_cache_, [&](const auto& entry) { return entry.first.first == r.module; });
  FLYT_CUDA_RETURN_IF_ERROR(session_->ModuleUnload(module->handle));
  return ModuleUnloadReply{};
}

CudaResult<ModuleGetFunctionReply> ClientSession::Handle(const ModuleGetFunctionRequest& r, Io&) {
  const Module* module = modules_.Find(r.module);
  if (!module) {
    return Error(CudaError::kInvalidResourceHandle, "no module " + std::to_string(r.module));
  }
  if (r.function == 0 || functions_.Find(r.function)) {
    return InsertError(r.function == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "function",
                       r.function);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(FunctionHandle handle,
                             session_->ModuleGetFunction(module->handle, r.name));
  FLYT_CUDA_RETURN_IF_ERROR(InsertError(
      functions_.Insert(r.function, Function{handle, r.module, r.name}), "function", r.function));
  return ModuleGetFunctionReply{};
}

CudaResult<ModuleGetGlobalReply> ClientSession::Handle(const ModuleGetGlobalRequest& r, Io&) {
  const Module* module = modules_.Find(r.module);
  if (!module) {
    return Error(CudaError::kInvalidResourceHandle, "no module " + std::to_string(r.module));
  }
  auto key = std::make_pair(r.module, r.name);
  if (auto it = global_cache_.find(key); it != global_cache_.end()) {
    return ModuleGetGlobalReply{it->second.ptr, it->second.bytes};
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(GlobalSymbol global,
                             session_->ModuleGetGlobal(module->handle, r.name, r.registered_bytes));
  if (r.registered_bytes != 0 && global.bytes != r.registered_bytes) {
    spdlog::debug("{}: global {} is {} bytes on the device, {} registered", Tag(), r.name,
                  global.bytes, r.registered_bytes);
  }
  if (global.bytes != 0 && !globals_.Add(global.ptr, global.bytes, Global{r.module})) {
    return Error(CudaError::kUnknown, "backend returned a global that overlaps another range");
  }
  global_cache_.emplace(key, global);
  return ModuleGetGlobalReply{global.ptr, global.bytes};
}

CudaResult<FuncGetAttributesReply> ClientSession::Handle(const FuncGetAttributesRequest& r, Io&) {
  const Function* function = functions_.Find(r.function);
  if (!function) {
    return Error(CudaError::kInvalidDeviceFunction, "no function " + std::to_string(r.function));
  }
  FuncGetAttributesReply reply;
  for (uint32_t attr = 0; attr < kFunctionAttributeCount; ++attr) {
    CudaResult<int32_t> value =
        session_->FuncGetAttribute(function->handle, static_cast<FunctionAttribute>(attr));
    if (value.ok()) {
      reply.values.push_back({attr, *value});
    } else if (attr == 0) {
      return value.status();
    }
  }
  return reply;
}

CudaResult<FuncSetAttributeReply> ClientSession::Handle(const FuncSetAttributeRequest& r, Io&) {
  const Function* function = functions_.Find(r.function);
  if (!function) {
    return Error(CudaError::kInvalidDeviceFunction, "no function " + std::to_string(r.function));
  }
  if (r.attr >= kFunctionAttributeCount) {
    return Error(CudaError::kInvalidValue, "unknown function attribute " + std::to_string(r.attr));
  }
  FLYT_CUDA_RETURN_IF_ERROR(session_->FuncSetAttribute(
      function->handle, static_cast<FunctionAttribute>(r.attr), r.value));
  return FuncSetAttributeReply{};
}

CudaResult<OccupancyMaxActiveBlocksReply> ClientSession::Handle(
    const OccupancyMaxActiveBlocksRequest& r, Io&) {
  const Function* function = functions_.Find(r.function);
  if (!function) {
    return Error(CudaError::kInvalidDeviceFunction, "no function " + std::to_string(r.function));
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(int32_t blocks,
                             session_->OccupancyMaxActiveBlocksPerSm(
                                 function->handle, r.block_size, r.dynamic_shared_bytes, r.flags));
  return OccupancyMaxActiveBlocksReply{blocks};
}

CudaResult<LaunchKernelReply> ClientSession::Handle(const LaunchKernelRequest& r, Io& io) {
  const Function* function = functions_.Find(r.function);
  if (!function) {
    return Error(CudaError::kInvalidDeviceFunction, "no function " + std::to_string(r.function));
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.grid.x == 0 || r.grid.y == 0 || r.grid.z == 0 || r.block.x == 0 || r.block.y == 0 ||
      r.block.z == 0) {
    return Error(CudaError::kInvalidConfiguration, "zero grid or block dimension");
  }
  LaunchConfig config{r.grid, r.block, r.shared_bytes, stream};
  FLYT_CUDA_RETURN_IF_ERROR(session_->LaunchKernel(function->handle, config, r.params));
  counters_->launches += 1;
  if (server_.launch_log_) {
    LaunchRecord record;
    record.client_id = id_;
    record.pid = pid_;
    record.seq = io.header.seq;
    record.kernel = function->name;
    record.grid = r.grid;
    record.block = r.block;
    record.shared_bytes = r.shared_bytes;
    record.stream = r.stream;
    record.params = r.params;
    if (const Module* module = modules_.Find(function->module)) {
      if (auto it = module->layouts.find(function->name); it != module->layouts.end()) {
        record.layout = it->second;
      }
    }
    server_.launch_log_->Append(record);
  }
  return LaunchKernelReply{};
}

CudaResult<DebugStatsReply> ClientSession::Handle(const DebugStatsRequest&, Io&) {
  return server_.Stats();
}

// ---- Server ------------------------------------------------------------------------------------

namespace {

// The console sinks' lock is spdlog's, process-wide: another thread (main, logging "SIGTERM
// received") may hold it while the acceptor forks, and the child would block on its first log
// line for ever. Held across every fork, it is never inherited taken.
void GuardLoggerAcrossFork() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork([] { spdlog::details::console_mutex::mutex().lock(); },
                     [] { spdlog::details::console_mutex::mutex().unlock(); },
                     [] { spdlog::details::console_mutex::mutex().unlock(); });
  });
}

}  // namespace

Server::Server(Backend& backend, ServerOptions options)
    : backend_(&backend), options_(std::move(options)), server_pid_(::getpid()) {}

Server::Server(BackendFactory factory, ServerOptions options)
    : factory_(std::move(factory)), options_(std::move(options)), server_pid_(::getpid()) {
  GuardLoggerAcrossFork();
}

Server::~Server() { Stop(); }

Status Server::Start() {
  FLYT_ASSIGN_OR_RETURN(registry_, ClientRegistry::Create(options_.max_clients + kConnectSlack,
                                                          kDepartedKept,
                                                          options_.memory_limit_bytes));
  if (!options_.launch_log_path.empty()) {
    FLYT_ASSIGN_OR_RETURN(launch_log_, LaunchLog::Open(options_.launch_log_path));
  }
  for (const Endpoint& endpoint : options_.listen) {
    FLYT_ASSIGN_OR_RETURN(UniqueFd fd, Listen(endpoint));
    Endpoint bound = endpoint;
    if (bound.kind == Endpoint::Kind::kTcp && bound.port == 0) {
      FLYT_ASSIGN_OR_RETURN(bound.port, BoundPort(fd.get()));
    }
    listeners_.push_back(std::move(fd));
    bound_.push_back(bound);
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoError("pipe", errno);
  wake_read_.Reset(pipe_fds[0]);
  wake_write_.Reset(pipe_fds[1]);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void Server::Wake() {
  char byte = 1;
  (void)!::write(wake_write_.get(), &byte, 1);
}

void Server::AcceptLoop() {
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    fds.clear();
    for (const UniqueFd& fd : listeners_) fds.push_back({fd.get(), POLLIN, 0});
    fds.push_back({wake_read_.get(), POLLIN, 0});
    {
      MutexLock lock(mu_);
      for (const auto& [id, entry] : clients_) {
        if (entry.pidfd.valid()) fds.push_back({entry.pidfd.get(), POLLIN, 0});
      }
    }
    int n = ::poll(fds.data(), fds.size(), 500);
    ReapFinished();
    ReapProcesses();
    if (n < 0 && errno != EINTR) {
      spdlog::error("poll: {}", std::strerror(errno));
      break;
    }
    if (fds[listeners_.size()].revents & POLLIN) {
      char drain[64];
      while (::read(wake_read_.get(), drain, sizeof drain) > 0) {
      }
      std::vector<UniqueFd> handed;
      {
        MutexLock lock(mu_);
        handed.swap(handed_over_);
      }
      for (UniqueFd& fd : handed) StartClient(std::move(fd));
    }
    if (n <= 0) continue;
    for (size_t i = 0; i < listeners_.size(); ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      int client = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) {
        if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
          spdlog::warn("accept on {}: {}", bound_[i].ToString(), std::strerror(errno));
        }
        continue;
      }
      TuneStreamSocket(client);
      StartClient(UniqueFd(client));
    }
  }
  // Stopping. Client processes die with this thread (PR_SET_PDEATHSIG follows the thread that
  // forked them), so it outlives them: it shuts their connections down and waits for each to
  // free what it holds and exit.
  listeners_.clear();
  if (isolation() == Isolation::kProcess) {
    {
      MutexLock lock(mu_);
      handed_over_.clear();
      for (auto& [id, entry] : clients_) ::shutdown(entry.fd, SHUT_RDWR);
    }
    StopProcesses();
  }
}

void Server::ServeConnection(UniqueFd fd) {
  if (isolation() == Isolation::kThread) {
    StartClient(std::move(fd));
    return;
  }
  // Every fork happens on the acceptor thread, so no other thread of this process can be
  // holding a lock (the logger's, this server's) that the child would inherit held.
  {
    MutexLock lock(mu_);
    if (stopping_.load()) return;
    handed_over_.push_back(std::move(fd));
  }
  Wake();
}

void Server::StartClient(UniqueFd fd) {
  ReapFinished();
  MutexLock lock(mu_);
  if (stopping_.load()) return;
  uint64_t id = NextClientId();
  ClientSlot* slot = registry_->Acquire(id);
  if (slot == nullptr) {
    // More connections than max_clients + kConnectSlack are open (most of them not yet past
    // the hello, or the hello would have refused them): drop this one unheard.
    spdlog::warn("client {}: refused: {} connections open", id, registry_->LiveCount());
    return;
  }
  ClientEntry& entry = clients_[id];
  entry.id = id;
  entry.slot = slot;
  entry.fd = fd.Release();
  if (isolation() == Isolation::kThread) {
    StartClientThread(entry);
  } else if (!StartClientProcess(entry)) {
    Depart(entry);
    clients_.erase(id);
  }
}

void Server::StartClientThread(ClientEntry& entry) {
  uint64_t id = entry.id;
  int raw = entry.fd;
  ClientSlot* slot = entry.slot;
  entry.thread = std::thread([this, raw, id, slot] {
    try {
      ClientSession session(*this, backend_, nullptr, raw, id, slot);
      session.Run();
    } catch (const std::exception& e) {
      // Out of host memory for this client's buffers, say: it alone loses its connection.
      spdlog::error("client {}: closing the connection: {}", id, e.what());
      ::shutdown(raw, SHUT_RDWR);
    }
    MutexLock done(mu_);
    auto it = clients_.find(id);
    if (it == clients_.end()) return;
    it->second.finished = true;
    finished_.push_back(id);
  });
}

bool Server::StartClientProcess(ClientEntry& entry) {
  pid_t pid = ::fork();
  if (pid < 0) {
    spdlog::error("client {}: cannot start its process: {}", entry.id, std::strerror(errno));
    return false;
  }
  if (pid == 0) RunClientProcess(entry.id);
  entry.pid = pid;
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    entry.pidfd.Reset(pidfd);
  } else {
    // Kernels before 5.3: the acceptor's half-second poll timeout reaps it instead.
    spdlog::debug("pidfd_open: {}", std::strerror(errno));
  }
  spdlog::debug("client {}: served by process {}", entry.id, pid);
  return true;
}

namespace {
void CloseAllFdsExcept(std::vector<int> keep);
std::string DescribeExit(int status);
}  // namespace

// In the child, on the acceptor thread (the only thread the child has). It owns nothing of the
// server process but the client's socket and the shared table; it leaves with _exit, so no
// destructor of the parent's objects (listeners, socket files) runs here.
void Server::RunClientProcess(uint64_t id) {
  // Die with the server process: a client process must not outlive it holding the device.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != server_pid_) ::_exit(1);
  std::string name = "flyt-client-" + std::to_string(id);
  ::prctl(PR_SET_NAME, name.c_str());
  int fd = -1;
  ClientSlot* slot = nullptr;
  if (auto it = clients_.find(id); it != clients_.end()) {
    fd = it->second.fd;
    slot = it->second.slot;
  }
  // Everything else this process inherited (listeners, other clients' connections, whatever
  // the program embedding the server holds) is not this client's to keep open: a peer whose
  // socket stayed open in a sibling would never see its connection end.
  std::vector<int> keep = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, fd};
  if (launch_log_) keep.push_back(launch_log_->fd());
  CloseAllFdsExcept(keep);
  // The termination signals stay blocked, as in the server process: the server ends a client
  // process by shutting its connection down (the process then frees everything and exits), or
  // with SIGKILL. The session opens the device once the client's hello is accepted.
  try {
    ClientSession session(*this, nullptr, &factory_, fd, id, slot,
                          ClientRegistry::TakeRespawn(slot));
    session.Run();
  } catch (const std::exception& e) {
    spdlog::error("client {}: closing the connection: {}", id, e.what());
    if (std::shared_ptr<spdlog::logger> logger = spdlog::default_logger()) logger->flush();
    ::_exit(1);
  }
  if (std::shared_ptr<spdlog::logger> logger = spdlog::default_logger()) logger->flush();
  ::_exit(0);
}

void Server::Depart(ClientEntry& entry) {
  uint64_t held = registry_->Depart(entry.slot);
  if (held != 0) {
    spdlog::warn("client {}: {} MiB it held went back to the memory account", entry.id,
                 (held + (1 << 20) - 1) >> 20);
  }
  ::close(entry.fd);
}

void Server::ReapFinished() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(mu_);
    for (uint64_t id : finished_) {
      auto it = clients_.find(id);
      if (it == clients_.end()) continue;
      Depart(it->second);
      threads.push_back(std::move(it->second.thread));
      clients_.erase(it);
    }
    finished_.clear();
  }
  for (std::thread& t : threads) t.join();
}

namespace {

void CloseAllFdsExcept(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned int from = 0;
  bool ok = true;
  for (int fd : keep) {
    if (fd < 0) continue;
    if (static_cast<unsigned int>(fd) > from) {
      ok = ok && ::close_range(from, static_cast<unsigned int>(fd) - 1, 0) == 0;
    }
    from = static_cast<unsigned int>(fd) + 1;
  }
  ok = ok && ::close_range(from, ~0u, 0) == 0;
  if (ok) return;
  // Kernels before 5.9 have no close_range: close one by one, up to the descriptor limit.
  long limit = ::sysconf(_SC_OPEN_MAX);
  for (long fd = 0; fd < (limit > 0 ? limit : 65536); ++fd) {
    if (!std::binary_search(keep.begin(), keep.end(), static_cast<int>(fd))) {
      ::close(static_cast<int>(fd));
    }
  }
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  return "ended (status " + std::to_string(status) + ")";
}

}  // namespace

void Server::ReapProcesses() {
  if (isolation() != Isolation::kProcess) return;
  MutexLock lock(mu_);
  for (auto it = clients_.begin(); it != clients_.end();) {
    ClientEntry& entry = it->second;
    int status = 0;
    pid_t got = ::waitpid(entry.pid, &status, WNOHANG);
    if (got == 0 || (got < 0 && errno == EINTR)) {
      ++it;
      continue;
    }
    if (got == entry.pid && WIFEXITED(status) && WEXITSTATUS(status) == kRespawnExitCode &&
        ClientRegistry::RespawnRequested(entry.slot) && !stopping_.load()) {
      if (StartClientProcess(entry)) {
        ++it;
        continue;
      }
    }
    if (got == entry.pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      spdlog::warn("client {}: its process {} {}; the driver takes back its device memory",
                   entry.id, entry.pid, DescribeExit(status));
    }
    Depart(entry);
    it = clients_.erase(it);
  }
}

void Server::StopProcesses() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::now() + options_.stop_grace;
  while (true) {
    ReapProcesses();
    {
      MutexLock lock(mu_);
      if (clients_.empty()) return;
      if (Clock::now() >= deadline) {
        for (auto& [id, entry] : clients_) {
          spdlog::warn("client {}: its process {} did not exit within {} ms of the stop; killing it",
                       id, entry.pid, options_.stop_grace.count());
          ::kill(entry.pid, SIGKILL);
        }
        deadline = Clock::time_point::max();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Server::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_write_.valid()) Wake();
  if (acceptor_.joinable()) acceptor_.join();
  listeners_.clear();
  for (const Endpoint& endpoint : bound_) {
    if (endpoint.kind == Endpoint::Kind::kUnix) ::unlink(endpoint.path.c_str());
  }
  if (isolation() == Isolation::kProcess) return;  // the acceptor ended every client process
  {
    MutexLock lock(mu_);
    for (auto& [id, entry] : clients_) ::shutdown(entry.fd, SHUT_RDWR);
  }
  // Join without holding the lock: finishing threads take it.
  while (true) {
    std::thread t;
    {
      MutexLock lock(mu_);
      for (auto& [id, entry] : clients_) {
        if (entry.thread.joinable()) {
          t = std::move(entry.thread);
          break;
        }
      }
    }
    if (!t.joinable()) break;
    t.join();
  }
  MutexLock lock(mu_);
  for (auto& [id, entry] : clients_) Depart(entry);
  clients_.clear();
  finished_.clear();
}

pid_t Server::ClientProcess(uint64_t client_id) const {
  MutexLock lock(mu_);
  auto it = clients_.find(client_id);
  return it == clients_.end() ? 0 : it->second.pid;
}

size_t Server::client_count() const { return registry_ ? registry_->LiveCount() : 0; }

DebugStatsReply Server::Stats() const { return registry_ ? registry_->Snapshot() : DebugStatsReply{}; }

Result<BackendProbe> ProbeBackend(const BackendFactory& factory) {
  GuardLoggerAcrossFork();
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return ErrnoError("socketpair", errno);
  }
  UniqueFd read_end(pair[0]), write_end(pair[1]);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork the backend probe", errno);
  if (pid == 0) {
    read_end.Reset();
    std::string report;
    {
      Result<std::unique_ptr<Backend>> made = factory();
      if (made.ok()) {
        report = "ok\n" + (*made)->Name() + "\n" + ((*made)->Identity().simulated ? "1" : "0") +
                 "\n" + (*made)->Describe();
      } else {
        report = "error\n" + made.status().message();
      }
    }
    Status written = WriteAll(write_end.get(), std::as_bytes(std::span(report)));
    ::_exit(written.ok() ? 0 : 1);
  }
  write_end.Reset();
  std::string report;
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    report.append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto line = [&report](size_t& at) {
    size_t end = report.find('\n', at);
    std::string out = report.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? report.size() : end + 1;
    return out;
  };
  size_t at = 0;
  std::string verdict = line(at);
  if (verdict == "error") return Unavailable(report.substr(at));
  if (verdict != "ok") {
    return Internal("the backend probe process " + DescribeExit(status) +
                    " without a report");
  }
  BackendProbe probe;
  probe.name = line(at);
  probe.simulated = line(at) == "1";
  probe.description = report.substr(at);
  return probe;
}

}  // namespace flyt::remote
