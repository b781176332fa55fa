#include "remote_client/client.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <vector>

#include "remote/shm_channel.h"

namespace flyt::remote {
namespace {

void PutOffset(std::byte* out, uint64_t offset) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((offset >> (8 * i)) & 0xFF);
}

}  // namespace

Result<std::unique_ptr<Connection>> Connection::Open(const Endpoint& endpoint,
                                                     const ClientOptions& options) {
  FLYT_ASSIGN_OR_RETURN(UniqueFd fd, Connect(endpoint));
  Result<std::unique_ptr<Connection>> conn = OpenFd(std::move(fd), options);
  if (!conn.ok()) return conn.status().WithContext(endpoint.ToString());
  if (endpoint.kind != Endpoint::Kind::kTcp || !options.shared_memory ||
      (*conn)->server_.version < MinProtocolVersionOf(CallId::kLocalEndpoint)) {
    return conn;
  }
  // Over TCP: a server on this very host may be reached over its Unix socket, and so through
  // shared memory. Anything short of a shared-memory connection there keeps this one.
  CudaResult<LocalEndpointReply> local = (*conn)->LocalEndpoint({});
  if (!local.ok() || local->path.empty() || local->boot_id.empty() || local->boot_id != HostBootId()) {
    return conn;
  }
  Endpoint unix_endpoint{Endpoint::Kind::kUnix, "", 0, local->path};
  Result<UniqueFd> unix_fd = Connect(unix_endpoint);
  Result<std::unique_ptr<Connection>> near =
      unix_fd.ok() ? OpenFd(std::move(unix_fd).value(), options) : unix_fd.status();
  if (!near.ok()) {
    (*conn)->transport_note_ = "the server is on this host, but its Unix socket " +
                               unix_endpoint.ToString() + " is out of reach (" +
                               near.status().message() + "): staying on TCP";
    return conn;
  }
  if ((*near)->transport() != "shm") {
    (*conn)->transport_note_ = (*near)->transport_note_;
    return conn;
  }
  return near;
}

Result<std::unique_ptr<Connection>> Connection::OpenFd(UniqueFd fd, const ClientOptions& options) {
  std::unique_ptr<Connection> conn(new Connection(std::move(fd), options));
  FLYT_RETURN_IF_ERROR(conn->Hello());
  return conn;
}

Connection::Connection(UniqueFd fd, const ClientOptions& options)
    : options_(options), fd_(std::move(fd)), channel_(std::make_unique<SocketChannel>(fd_.get())) {}

Connection::~Connection() {
  MutexLock lock(mu_);
  if (!broken_) (void)FlushLocked();
}

Status Connection::Hello() {
  HelloRequest hello;
  hello.magic = kHelloMagic;
  hello.min_version = kMinProtocolVersion;
  hello.max_version = kProtocolVersion;
  hello.capabilities = options_.capabilities;
  // Shared memory is offered only where descriptors can be passed: a Unix socket (after a move
  // too, to a server on this host: new rings; the arena stays the first server's).
  if (!options_.shared_memory || channel_->Kind() != "unix") {
    hello.capabilities &= ~uint64_t{kCapSharedMemory};
  }
  hello.client_label = options_.label;
  hello.pid = options_.pid;
  hello.runtime_version = options_.runtime_version;
  hello.secret = resume_token_.empty() ? options_.secret : std::string();
  hello.resume = resume_token_;
  Bytes out;
  AppendFrame(out, FrameKind::kHello, CallId::kNone, 0, hello);
  FLYT_RETURN_IF_ERROR(channel_->Write(out));

  // Read unbuffered, with any descriptors the server passes along (shared memory): nothing past
  // the reply may be taken from the socket here.
  std::vector<UniqueFd> fds;
  std::byte raw[kFrameHeaderBytes];
  FLYT_RETURN_IF_ERROR(ReadWithFds(fd_.get(), raw, &fds, kShmFdCount));
  Result<FrameHeader> header = DecodeFrameHeader(raw);
  if (!header.ok() || header->kind != FrameKind::kHelloReply) {
    return Unavailable("the peer does not speak the flyt protocol");
  }
  Bytes payload(header->payload_bytes);
  FLYT_RETURN_IF_ERROR(ReadWithFds(fd_.get(), payload, &fds, kShmFdCount));
  HelloReply reply;
  if (!DecodeExactly(payload, reply) || reply.magic != kHelloMagic) {
    return Unavailable("malformed hello reply");
  }
  if (reply.version == 0) {
    std::string why = "server refused the connection: " + reply.error;
    // Full for now, not broken: the caller may try again later.
    if (reply.error.starts_with(kServerBusyPrefix)) return {StatusCode::kResourceExhausted, why};
    if (reply.error.starts_with(kAuthRefusedPrefix)) {
      return Status(StatusCode::kPermissionDenied, why).WithReason("unauthenticated");
    }
    return Unavailable(why);
  }
  if (reply.version < kMinProtocolVersion || reply.version > kProtocolVersion) {
    return Unavailable("server chose protocol version " + std::to_string(reply.version) +
                       ", which this client does not speak");
  }
  server_.version = reply.version;
  server_.capabilities = reply.capabilities & options_.capabilities;
  server_.client_id = reply.client_id;
  server_.label = reply.server_label;
  server_.backend = reply.backend;
  server_.simulated = reply.simulated;
  server_.driver_version = reply.driver_version;
  server_.device_count = reply.device_count;
  // Only an offer this client asked for, from a server whose version has shared memory (5).
  if ((reply.capabilities & hello.capabilities & kCapSharedMemory) != 0 && reply.version >= 5) {
    return AcceptSharedMemory(header->seq, std::move(fds));
  }
  server_.capabilities &= ~uint64_t{kCapSharedMemory};
  return Status::Ok();
}

Status Connection::AcceptSharedMemory(uint32_t hello_seq, std::vector<UniqueFd> fds) {
  ShmAck ack;
  Result<std::unique_ptr<ShmRegion>> region =
      fds.size() == kShmFdCount ? ShmRegion::MapClient(fds[0].get())
                                : Result<std::unique_ptr<ShmRegion>>(InvalidArgument(
                                      "the hello reply offered shared memory without its " +
                                      std::to_string(kShmFdCount) + " descriptors"));
  ack.accepted = region.ok();
  if (!region.ok()) {
    ack.reason = region.status().message();
    transport_note_ = "the server offered shared memory, which this client refused: " + ack.reason;
  }
  Bytes out;
  AppendFrame(out, FrameKind::kHello, CallId::kNone, hello_seq, ack);
  FLYT_RETURN_IF_ERROR(channel_->Write(out));
  if (!region.ok()) return Status::Ok();
  if (!resume_token_.empty()) {
    // After a move: the program's pinned memory lies in the first server's arena, whose region
    // stays mapped (and detached: its copies are ordinary ones); only the rings are new, and the
    // rings of a server moved away from before are unmapped.
    if (shm_ != nullptr && arena_.bytes > 0 && shm_->arena() == arena_.base) {
      arena_region_ = std::move(shm_);
    }
    shm_ = std::move(region).value();
  } else {
    shm_ = std::move(region).value();
    if (resume_token_.empty()) arena_ = SharedArena{shm_->arena(), shm_->arena_bytes()};
  }
  // fds: the memfd, the server's wake-up eventfd, this client's.
  channel_ = std::make_unique<ShmChannel>(ShmChannel::Side::kClient, shm_, std::move(fds[2]),
                                          std::move(fds[1]), fd_.get());
  return Status::Ok();
}

CudaStatus Connection::Broken(const Status& why) {
  if (!broken_) {
    broken_ = why;
    channel_->Shutdown();
  }
  return BrokenStatus();
}

CudaStatus Connection::BrokenStatus() const {
  return CudaStatus(CudaError::kDevicesUnavailable,
                    "connection to the flyt GPU server lost: " + broken_->message());
}

bool Connection::broken() const {
  MutexLock lock(mu_);
  return broken_.has_value();
}

bool Connection::HasUnacknowledgedPosts() const {
  MutexLock lock(mu_);
  return unacknowledged_ || !send_.empty();
}

size_t Connection::pending_downloads() const {
  MutexLock lock(mu_);
  return landings_.size();
}

std::optional<uint64_t> Connection::StagedLandingStream(const std::byte* p, uint64_t bytes) const {
  MutexLock lock(mu_);
  for (const auto& [seq, landing] : landings_) {
    if (landing.arena_src == nullptr) continue;
    if (p < landing.arena_src + landing.dst.size() && landing.arena_src < p + bytes) {
      return landing.stream;
    }
  }
  return std::nullopt;
}

// [issue 17: pools]
uint64_t Connection::pending_download_bytes() const {
  MutexLock lock(mu_);
  uint64_t bytes = 0;
  for (const auto& [seq, landing] : landings_) {
    // A copy staged in the arena holds none of the server's memory.
    if (landing.arena_src == nullptr) bytes += landing.dst.size() - landing.received;
  }
  return bytes;
}

std::optional<AsyncError> Connection::TakeAsyncError() {
  MutexLock lock(mu_);
  return std::exchange(async_error_, std::nullopt);
}

CudaStatus Connection::Flush() {
  MutexLock lock(mu_);
  if (broken_) return BrokenStatus();
  return FlushLocked();
}

CudaStatus Connection::FlushLocked() {
  if (send_.empty()) return CudaStatus::Ok();
  Status s = channel_->Write(send_);
  send_.clear();
  if (!s.ok()) return Broken(s);
  return CudaStatus::Ok();
}

CudaStatus Connection::SendDataLocked(CallId call, uint32_t seq, std::span<const std::byte> data) {
  if (data.size() <= options_.inline_data_bytes) {
    for (uint64_t off = 0; off < data.size(); off += kDataChunkBytes) {
      size_t n = std::min<uint64_t>(kDataChunkBytes, data.size() - off);
      size_t start = send_.size();
      send_.resize(start + kFrameHeaderBytes + 8);
      EncodeFrameHeader({static_cast<uint32_t>(8 + n), call, FrameKind::kData, seq},
                        send_.data() + start);
      PutOffset(send_.data() + start + kFrameHeaderBytes, off);
      send_.insert(send_.end(), data.begin() + off, data.begin() + off + n);
    }
    return CudaStatus::Ok();
  }
  // Large: what is buffered goes first, then the data straight from the caller's memory, many
  // chunks per system call.
  FLYT_CUDA_RETURN_IF_ERROR(FlushLocked());
  constexpr size_t kChunksPerWrite = 64;
  std::vector<std::array<std::byte, kFrameHeaderBytes + 8>> heads(kChunksPerWrite);
  std::vector<iovec> iov;
  iov.reserve(2 * kChunksPerWrite);
  uint64_t off = 0;
  while (off < data.size()) {
    iov.clear();
    for (size_t i = 0; i < kChunksPerWrite && off < data.size(); ++i) {
      size_t n = std::min<uint64_t>(kDataChunkBytes, data.size() - off);
      EncodeFrameHeader({static_cast<uint32_t>(8 + n), call, FrameKind::kData, seq},
                        heads[i].data());
      PutOffset(heads[i].data() + kFrameHeaderBytes, off);
      iov.push_back({heads[i].data(), heads[i].size()});
      iov.push_back({const_cast<std::byte*>(data.data() + off), n});
      off += n;
    }
    Status s = channel_->Write(iov);
    if (!s.ok()) return Broken(s);
  }
  return CudaStatus::Ok();
}

Status Connection::LandData(const FrameHeader& header) {
  if (header.payload_bytes < 8) return InvalidArgument("data frame without an offset");
  std::byte raw[8];
  FLYT_RETURN_IF_ERROR(channel_->Read(raw));
  Reader r(raw);
  uint64_t offset = 0;
  (void)r.Get(offset);
  const size_t n = header.payload_bytes - 8;
  auto it = landings_.find(header.seq);
  if (it == landings_.end()) {
    return InvalidArgument("data for unknown copy seq " + std::to_string(header.seq));
  }
  if (offset == kDataAbandoned) {
    landings_.erase(it);
    return channel_->Skip(n);
  }
  Landing& landing = it->second;
  if (offset == kDataInArena) {
    if (landing.arena_src == nullptr || n != 0) {
      return InvalidArgument("an in-arena data frame for a copy that was not staged there");
    }
    // The staged copy's range of the arena, on into the program's memory.
    std::memcpy(landing.dst.data(), landing.arena_src, landing.dst.size());
    landings_.erase(it);
    return Status::Ok();
  }
  if (landing.arena_src != nullptr) {
    return InvalidArgument("data bytes for a copy staged in the arena");
  }
  if (offset > landing.dst.size() || n > landing.dst.size() - offset) {
    return InvalidArgument("data frame past the end of its copy");
  }
  // Straight into the caller's memory: no staging copy.
  FLYT_RETURN_IF_ERROR(channel_->Read(landing.dst.subspan(offset, n)));
  landing.received += n;
  if (landing.received >= landing.dst.size()) landings_.erase(it);
  return Status::Ok();
}

CudaStatus Connection::AwaitReplyLocked(CallId call, uint32_t seq, ReplyStatus& status,
                                        Bytes& fields) {
  std::byte raw[kFrameHeaderBytes];
  while (true) {
    Status s = channel_->Read(raw);
    if (!s.ok()) return Broken(s);
    Result<FrameHeader> header = DecodeFrameHeader(raw);
    if (!header.ok()) return Broken(header.status());
    if (header->kind == FrameKind::kData) {
      s = LandData(*header);
      if (!s.ok()) return Broken(s);
      continue;
    }
    if (header->kind == FrameKind::kNotice && header->payload_bytes == 0 &&
        header->call == CallId::kResizeServer) {
      device_generation_.fetch_add(1);  // a new SM share: device facts to fetch again
      continue;
    }
    if (header->kind == FrameKind::kNotice && header->payload_bytes == 0 &&
        header->call == CallId::kNone && (options_.capabilities & kCapMigration) != 0) {
      migrate_pending_ = true;  // answered once this call has returned
      continue;
    }
    payload_.resize(header->payload_bytes);
    s = channel_->Read(payload_);
    if (!s.ok()) return Broken(s);
    if (header->kind != FrameKind::kReply || header->seq != seq || header->call != call) {
      return Broken(InvalidArgument("unexpected frame from the server while waiting for " +
                                    std::string(CallName(call))));
    }
    Reader r(payload_);
    if (!Decode(r, status)) return Broken(InvalidArgument("malformed reply status"));
    std::span<const std::byte> rest;
    (void)r.GetRaw(rest, r.remaining());
    fields.assign(rest.begin(), rest.end());
    unacknowledged_ = false;
    if (status.async_code != 0 && !async_error_) {
      async_error_ = AsyncError{
          CudaStatus(static_cast<CudaError>(status.async_code), status.async_message),
          static_cast<CallId>(status.async_call), status.async_seq};
    }
    return CudaStatus::Ok();
  }
}

template <typename Traits>
CallReturn<Traits::kId> Connection::Invoke(const typename Traits::Request& request,
                                           DataArg<Traits::kId> data) {
  constexpr CallId kId = Traits::kId;
  MutexLock lock(mu_);
  // Under the lock: a move (MigrateLocked, under it too) detaches the arena between calls only.
  CallReturn<kId> result = [&]() FLYT_REQUIRES(mu_) {
    if constexpr (kId == CallId::kMemcpyHtoDShared || kId == CallId::kMemcpyHtoDSharedAsync ||
                  kId == CallId::kMemcpyDtoHShared || kId == CallId::kMemcpyDtoHSharedAsync ||
                  kId == CallId::kMemcpyDtoHStagedAsync) {
      if (arena_detached_.load(std::memory_order_relaxed)) {
        return ArenaCopyOverSocketLocked<Traits>(request, data);
      }
    }
    return InvokeLocked<Traits>(request, data);
  }();
  if constexpr (Traits::kMode == CallMode::kCall) {
    if (migrate_pending_ && !broken_) MigrateLocked();
  }
  return result;
}

template <typename Traits>
CallReturn<Traits::kId> Connection::ArenaCopyOverSocketLocked(const typename Traits::Request& r,
                                                              DataArg<Traits::kId> data) {
  constexpr CallId kId = Traits::kId;
  if constexpr (kId == CallId::kMemcpyDtoHStagedAsync) {
    // Straight into the program's memory, as an ordinary copy.
    return InvokeLocked<CallTraits<CallId::kMemcpyDtoHAsync>>({r.src, r.bytes, r.stream}, data);
  } else {
    if (r.offset > arena_.bytes || r.bytes > arena_.bytes - r.offset) {
      return CudaStatus(CudaError::kInvalidValue, "range not inside the shared arena");
    }
    std::byte* host = arena_.base + r.offset;
    if constexpr (kId == CallId::kMemcpyHtoDShared) {
      CudaResult<MemcpyHtoDReply> done = InvokeLocked<CallTraits<CallId::kMemcpyHtoD>>(
          {r.dst, r.bytes, r.stream}, {host, r.bytes});
      if (!done.ok()) return done.status();
      return MemcpyHtoDSharedReply{};
    } else if constexpr (kId == CallId::kMemcpyHtoDSharedAsync) {
      return InvokeLocked<CallTraits<CallId::kMemcpyHtoDAsync>>({r.dst, r.bytes, r.stream},
                                                                 {host, r.bytes});
    } else if constexpr (kId == CallId::kMemcpyDtoHShared) {
      CudaResult<MemcpyDtoHReply> done = InvokeLocked<CallTraits<CallId::kMemcpyDtoH>>(
          {r.src, r.bytes, r.stream}, {host, r.bytes});
      if (!done.ok()) return done.status();
      return MemcpyDtoHSharedReply{};
    } else {
      return InvokeLocked<CallTraits<CallId::kMemcpyDtoHAsync>>({r.src, r.bytes, r.stream},
                                                                 {host, r.bytes});
    }
  }
}

void Connection::MigrateLocked() {
  migrate_pending_ = false;
  const std::string from = server_.label;
  auto note = [&](bool failed, const std::string& line) {
    if (options_.note) options_.note(failed, line);
  };
  const auto start = std::chrono::steady_clock::now();
  CudaResult<MigrateReply> reply = InvokeLocked<CallTraits<CallId::kMigrate>>({}, nullptr);
  if (!reply.ok()) {
    note(true, "a move of this client away from " + from + " failed: " + reply.status().message());
    return;
  }
  if (!reply->error.empty()) {
    note(true, "stays on " + from + ": " + reply->error);
    return;
  }
  // One endpoint, or (version 9) a list: the new server's Unix socket when it is on this host,
  // then the address the move was given. The first that connects and takes the hello; a refusal
  // does not use the token up, so the next is tried.
  const uint64_t old_id = server_.client_id;
  Status reached = InvalidArgument("no endpoint in the move's answer");
  std::string_view endpoints = reply->endpoint;
  while (!endpoints.empty()) {
    const size_t comma = endpoints.find(',');
    const std::string_view one = endpoints.substr(0, comma);
    endpoints = comma == std::string_view::npos ? std::string_view() : endpoints.substr(comma + 1);
    Result<Endpoint> endpoint = ParseEndpoint(one);
    Result<UniqueFd> fd = endpoint.ok() ? Connect(*endpoint) : Result<UniqueFd>(endpoint.status());
    if (!fd.ok()) {
      reached = Unavailable(std::string(one) + " cannot be reached: " + fd.status().message());
      continue;
    }
    channel_ = std::make_unique<SocketChannel>(fd->get());
    fd_ = std::move(fd).value();
    resume_token_ = reply->token;
    reached = Hello();
    resume_token_.clear();
    if (reached.ok()) break;
    reached = Unavailable(std::string(one) + " did not take it: " + reached.message());
  }
  if (!reached.ok()) {
    (void)Broken(Unavailable("moved to " + reply->endpoint + ", but " + reached.message()));
    note(true, broken_->message());
    return;
  }
  if (arena_.bytes > 0) arena_detached_.store(true);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  note(false, "moved from " + from + " (client " + std::to_string(old_id) + ") to " +
                  server_.label + " at " + reply->endpoint + " (client " +
                  std::to_string(server_.client_id) + ", over " + std::string(channel_->Kind()) +
                  "), paused " + std::to_string(ms) + " ms");
}

template <typename Traits>
CallReturn<Traits::kId> Connection::InvokeLocked(const typename Traits::Request& request,
                                                 DataArg<Traits::kId> data) {
  if (broken_) return BrokenStatus();
  // A call the server's protocol version does not have would close the connection there.
  if (server_.version < MinProtocolVersionOf(Traits::kId)) {
    return CudaStatus(CudaError::kNotSupported,
                      std::string(Traits::kName) + " needs protocol version " +
                          std::to_string(MinProtocolVersionOf(Traits::kId)) +
                          "; the flyt GPU server speaks " + std::to_string(server_.version));
  }
  // A request that would lie about its data is refused before anything is sent.
  if constexpr (Traits::kData == DataFlow::kIn) {
    static_assert(std::is_same_v<decltype(request.bytes), uint64_t>,
                  "a call with data in needs a `bytes` field");
    if (request.bytes != data.size()) {
      return CudaStatus(CudaError::kInvalidValue, "data size does not match the request");
    }
  }
  if constexpr (Traits::kData == DataFlow::kOut) {
    static_assert(std::is_same_v<decltype(request.bytes), uint64_t>,
                  "a call with data out needs a `bytes` field");
    if (request.bytes > data.size()) {
      return CudaStatus(CudaError::kInvalidValue, "destination smaller than the copy");
    }
  }
  if constexpr (Traits::kId == CallId::kMemcpyDtoHStagedAsync) {
    if (request.offset > arena_.bytes || request.bytes > arena_.bytes - request.offset) {
      return CudaStatus(CudaError::kInvalidValue, "range not inside the shared arena");
    }
  }
  uint32_t seq = NextSeq();
  constexpr FrameKind kKind =
      Traits::kMode == CallMode::kCall ? FrameKind::kCall : FrameKind::kPost;
  AppendFrame(send_, kKind, Traits::kId, seq, request);
  if constexpr (Traits::kData == DataFlow::kIn) {
    FLYT_CUDA_RETURN_IF_ERROR(SendDataLocked(Traits::kId, seq, data));
  }
  if constexpr (Traits::kData == DataFlow::kOut) {
    if (request.bytes > 0) {
      Landing landing{data.first(request.bytes), 0, nullptr};
      if constexpr (Traits::kId == CallId::kMemcpyDtoHStagedAsync) {
        landing.arena_src = arena_.base + request.offset;  // checked above
        landing.stream = request.stream;
      }
      landings_[seq] = landing;
    }
  }
  if constexpr (Traits::kMode == CallMode::kPost) {
    unacknowledged_ = true;
    if (send_.size() >= options_.batch_bytes) FLYT_CUDA_RETURN_IF_ERROR(FlushLocked());
    return CudaStatus::Ok();
  } else {
    FLYT_CUDA_RETURN_IF_ERROR(FlushLocked());
    ReplyStatus status;
    Bytes fields;
    FLYT_CUDA_RETURN_IF_ERROR(AwaitReplyLocked(Traits::kId, seq, status, fields));
    if constexpr (Traits::kData == DataFlow::kOut) landings_.erase(seq);
    if (status.code != 0) {
      return CudaStatus(static_cast<CudaError>(status.code), status.message);
    }
    typename Traits::Reply reply;
    if (!DecodeExactly(fields, reply)) {
      return Broken(InvalidArgument("malformed " + std::string(Traits::kName) + " reply"));
    }
    return reply;
  }
}

// The stubs in client.h call these.
#define FLYT_CALL(id, name, mode, data, req, rep)                                              \
  template CallReturn<CallId::k##name> Connection::Invoke<CallTraits<CallId::k##name>>(        \
      const name##Request&, DataArg<CallId::k##name>);
#include "remote/calls.def"
#undef FLYT_CALL

}  // namespace flyt::remote
