#include "remote/client.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

namespace flyt::remote {
namespace {

constexpr uint64_t kAbandonedOffset = ~uint64_t{0};

void PutOffset(std::byte* out, uint64_t offset) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((offset >> (8 * i)) & 0xFF);
}

}  // namespace

Result<std::unique_ptr<Connection>> Connection::Open(const Endpoint& endpoint,
                                                     const ClientOptions& options) {
  FLYT_ASSIGN_OR_RETURN(UniqueFd fd, Connect(endpoint));
  Result<std::unique_ptr<Connection>> conn = OpenFd(std::move(fd), options);
  if (!conn.ok()) return conn.status().WithContext(endpoint.ToString());
  return conn;
}

Result<std::unique_ptr<Connection>> Connection::OpenFd(UniqueFd fd, const ClientOptions& options) {
  std::unique_ptr<Connection> conn(new Connection(std::move(fd), options));
  FLYT_RETURN_IF_ERROR(conn->Hello());
  return conn;
}

Connection::Connection(UniqueFd fd, const ClientOptions& options)
    : options_(options), fd_(std::move(fd)), reader_(fd_.get()) {}

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
  hello.client_label = options_.label;
  hello.pid = options_.pid;
  hello.runtime_version = options_.runtime_version;
  hello.secret = options_.secret;
  Bytes out;
  AppendFrame(out, FrameKind::kHello, CallId::kNone, 0, hello);
  FLYT_RETURN_IF_ERROR(WriteAll(fd_.get(), out));

  std::byte raw[kFrameHeaderBytes];
  FLYT_RETURN_IF_ERROR(reader_.Read(raw));
  Result<FrameHeader> header = DecodeFrameHeader(raw);
  if (!header.ok() || header->kind != FrameKind::kHelloReply) {
    return Unavailable("the peer does not speak the flyt protocol");
  }
  Bytes payload(header->payload_bytes);
  FLYT_RETURN_IF_ERROR(reader_.Read(payload));
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
  return Status::Ok();
}

CudaStatus Connection::Broken(const Status& why) {
  if (!broken_) {
    broken_ = why;
    ::shutdown(fd_.get(), SHUT_RDWR);
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

// [issue 17: pools]
uint64_t Connection::pending_download_bytes() const {
  MutexLock lock(mu_);
  uint64_t bytes = 0;
  for (const auto& [seq, landing] : landings_) bytes += landing.dst.size() - landing.received;
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
  Status s = WriteAll(fd_.get(), send_);
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
    Status s = WriteAll(fd_.get(), iov);
    if (!s.ok()) return Broken(s);
  }
  return CudaStatus::Ok();
}

Status Connection::LandData(const FrameHeader& header) {
  if (header.payload_bytes < 8) return InvalidArgument("data frame without an offset");
  std::byte raw[8];
  FLYT_RETURN_IF_ERROR(reader_.Read(raw));
  Reader r(raw);
  uint64_t offset = 0;
  (void)r.Get(offset);
  const size_t n = header.payload_bytes - 8;
  auto it = landings_.find(header.seq);
  if (it == landings_.end()) {
    return InvalidArgument("data for unknown copy seq " + std::to_string(header.seq));
  }
  if (offset == kAbandonedOffset) {
    landings_.erase(it);
    return reader_.Skip(n);
  }
  Landing& landing = it->second;
  if (offset > landing.dst.size() || n > landing.dst.size() - offset) {
    return InvalidArgument("data frame past the end of its copy");
  }
  // Straight into the caller's memory: no staging copy.
  FLYT_RETURN_IF_ERROR(reader_.Read(landing.dst.subspan(offset, n)));
  landing.received += n;
  if (landing.received >= landing.dst.size()) landings_.erase(it);
  return Status::Ok();
}

CudaStatus Connection::AwaitReplyLocked(CallId call, uint32_t seq, ReplyStatus& status,
                                        Bytes& fields) {
  std::byte raw[kFrameHeaderBytes];
  while (true) {
    Status s = reader_.Read(raw);
    if (!s.ok()) return Broken(s);
    Result<FrameHeader> header = DecodeFrameHeader(raw);
    if (!header.ok()) return Broken(header.status());
    if (header->kind == FrameKind::kData) {
      s = LandData(*header);
      if (!s.ok()) return Broken(s);
      continue;
    }
    payload_.resize(header->payload_bytes);
    s = reader_.Read(payload_);
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
  MutexLock lock(mu_);
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
  uint32_t seq = NextSeq();
  constexpr FrameKind kKind =
      Traits::kMode == CallMode::kCall ? FrameKind::kCall : FrameKind::kPost;
  AppendFrame(send_, kKind, Traits::kId, seq, request);
  if constexpr (Traits::kData == DataFlow::kIn) {
    FLYT_CUDA_RETURN_IF_ERROR(SendDataLocked(Traits::kId, seq, data));
  }
  if constexpr (Traits::kData == DataFlow::kOut) {
    if (request.bytes > 0) landings_[seq] = Landing{data.first(request.bytes), 0};
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
