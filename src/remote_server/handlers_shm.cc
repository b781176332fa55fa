// ClientConnection's handlers of the shared-memory transport's calls (protocol version 5): copies
// between device memory and the client's arena, the server's local endpoint, and each client's
// transport for stats (see connection.h and shm_channel.h). The runtime's side: the copies of
// runtime/api_memory.cc from and into pinned memory that lies in the arena.
#include <fcntl.h>

#include <cstring>
#include <spdlog/spdlog.h>

#include "remote_server/connection.h"
#include "remote/shm_channel.h"

namespace flyt::remote {

CudaResult<std::byte*> ClientConnection::ArenaRange(uint64_t offset, uint64_t bytes) const {
  if (shm_ == nullptr) {
    return Error(CudaError::kInvalidValue, "this client has no shared-memory arena");
  }
  if (!shm_->InArena(offset, bytes)) {
    return Error(CudaError::kInvalidValue,
                 "arena range " + std::to_string(offset) + "+" + std::to_string(bytes) +
                     " is outside this client's arena of " + std::to_string(shm_->arena_bytes()) +
                     " bytes");
  }
  return shm_->arena() + offset;
}

void ClientConnection::RegisterArena() {
  if (shm_ == nullptr || arena_registered_ || shm_->arena_bytes() == 0 || !session_) return;
  CudaStatus s = session_->RegisterHostMemory(shm_->arena(), shm_->arena_bytes());
  if (!s.ok()) {
    spdlog::warn("{}: the shared arena cannot be registered with the device ({}); its copies "
                 "are staged",
                 Tag(), s.ToString());
    return;
  }
  arena_registered_ = true;
}

void ClientConnection::UnregisterArena() {
  if (!arena_registered_ || !session_) return;
  session_->UnregisterHostMemory(shm_->arena());
  arena_registered_ = false;
}

CudaResult<MemcpyHtoDSharedReply> ClientConnection::Handle(const MemcpyHtoDSharedRequest& r,
                                                           Io& io) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.bytes == 0) return MemcpyHtoDSharedReply{};
  MemcpyHtoDSharedAsyncRequest async{r.dst, r.offset, r.bytes, r.stream};
  FLYT_CUDA_RETURN_IF_ERROR(Handle(async, io).status());
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
  return MemcpyHtoDSharedReply{};
}

CudaResult<MemcpyHtoDSharedAsyncReply> ClientConnection::Handle(
    const MemcpyHtoDSharedAsyncRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.bytes == 0) return MemcpyHtoDSharedAsyncReply{};
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(r.dst, r.bytes, "destination"));
  FLYT_CUDA_ASSIGN_OR_RETURN(std::byte* src, ArenaRange(r.offset, r.bytes));
  counters_->bytes_to_device += r.bytes;
  counters_->arena_copy_bytes += r.bytes;
  if (std::byte* view = session_->HostView(r.dst, r.bytes)) {
    // Device memory that is host memory (the sim): one memcpy, in stream order.
    FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
    std::memcpy(view, src, r.bytes);
    return MemcpyHtoDSharedAsyncReply{};
  }
  // From registered memory the backend reads when the stream gets there (DMA); otherwise it
  // stages the bytes now. Either way the client leaves the range alone until the stream is done.
  FLYT_CUDA_RETURN_IF_ERROR(
      session_->MemcpyHtoD(r.dst, std::span<const std::byte>(src, r.bytes), stream));
  return MemcpyHtoDSharedAsyncReply{};
}

CudaResult<MemcpyDtoHSharedReply> ClientConnection::Handle(const MemcpyDtoHSharedRequest& r,
                                                           Io& io) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.bytes == 0) return MemcpyDtoHSharedReply{};
  MemcpyDtoHSharedAsyncRequest async{r.offset, r.src, r.bytes, r.stream};
  FLYT_CUDA_RETURN_IF_ERROR(Handle(async, io).status());
  FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
  return MemcpyDtoHSharedReply{};
}

CudaResult<MemcpyDtoHSharedAsyncReply> ClientConnection::Handle(
    const MemcpyDtoHSharedAsyncRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.bytes == 0) return MemcpyDtoHSharedAsyncReply{};
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(r.src, r.bytes, "source"));
  FLYT_CUDA_ASSIGN_OR_RETURN(std::byte* dst, ArenaRange(r.offset, r.bytes));
  counters_->bytes_from_device += r.bytes;
  counters_->arena_copy_bytes += r.bytes;
  if (std::byte* view = session_->HostView(r.src, r.bytes)) {
    FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
    std::memcpy(dst, view, r.bytes);
    return MemcpyDtoHSharedAsyncReply{};
  }
  // The arena lives as long as the connection, and FreeEverything synchronises the device before
  // it goes: the copy may land whenever the stream gets there.
  FLYT_CUDA_RETURN_IF_ERROR(session_->MemcpyDtoHAsync(dst, r.src, r.bytes, stream));
  return MemcpyDtoHSharedAsyncReply{};
}

// Into the arena like MemcpyDtoHSharedAsync, for host memory outside it that the runtime stages
// there (cudaHostRegister'd ranges): the client copies the range on once a Data frame says the
// stream got there, before a later reply. A refused copy still sends that frame (abandoned), so
// that the client stops waiting for it.
CudaResult<MemcpyDtoHStagedAsyncReply> ClientConnection::Handle(
    const MemcpyDtoHStagedAsyncRequest& r, Io& io) {
  Download d;
  d.seq = io.header.seq;
  d.call = CallId::kMemcpyDtoHStagedAsync;
  if (r.bytes == 0) return MemcpyDtoHStagedAsyncReply{};  // the client waits for nothing
  auto fail = [&](CudaStatus status) -> CudaResult<MemcpyDtoHStagedAsyncReply> {
    downloads_.push_back(std::move(d));
    return status;
  };
  if (CudaStatus room = RoomForDownload(io); !room.ok()) return fail(room);
  CudaResult<StreamHandle> stream = ResolveStream(r.stream);
  if (!stream.ok()) return fail(stream.status());
  MemcpyDtoHSharedAsyncRequest copy{r.offset, r.src, r.bytes, r.stream};
  if (CudaStatus s = Handle(copy, io).status(); !s.ok()) return fail(s);
  d.in_arena = true;
  d.bytes = r.bytes;
  if (session_->HostView(r.src, r.bytes) == nullptr) {
    // The copy lands when the stream gets there; without an event to tell, wait for it now.
    CudaResult<EventHandle> event = session_->EventCreate(kEventDisableTiming);
    if (event.ok() && session_->EventRecord(*event, *stream).ok()) {
      d.done = *event;
    } else {
      if (event.ok()) (void)session_->EventDestroy(*event);
      if (CudaStatus s = session_->StreamSynchronize(*stream); !s.ok()) {
        d.in_arena = false;
        return fail(s);
      }
    }
  }
  downloads_.push_back(std::move(d));
  return MemcpyDtoHStagedAsyncReply{};
}

CudaResult<LocalEndpointReply> ClientConnection::Handle(const LocalEndpointRequest&, Io&) {
  LocalEndpointReply reply;
  std::string path = server_.options_.local_path;
  if (path.empty()) {
    for (const Endpoint& e : server_.endpoints()) {
      if (e.kind == Endpoint::Kind::kUnix) {
        path = e.path;
        break;
      }
    }
  }
  if (path.empty() || !server_.options_.shared_memory) return reply;
  reply.boot_id = HostBootId();
  reply.path = path;
  return reply;
}

CudaResult<ClientTransportsReply> ClientConnection::Handle(const ClientTransportsRequest&, Io&) {
  return ClientTransportsReply{server_.registry_->Transports()};
}

}  // namespace flyt::remote
