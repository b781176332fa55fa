// ClientConnection's handlers of the memory calls: cudaMalloc, cudaFree, the copies and memset
// (see connection.h). The runtime's side of the same calls: runtime/api_memory.cc.
#include "remote_server/connection.h"

#include <algorithm>
#include <string>

namespace flyt::remote {

CudaResult<MallocReply> ClientConnection::Handle(const MallocRequest& r, Io&) {
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

CudaResult<FreeReply> ClientConnection::Handle(const FreeRequest& r, Io& io) {
  if (r.ptr == 0) return FreeReply{};
  if (pool_allocations_.contains(r.ptr)) {  // [issue 17: pools] cudaFree of a pool's block
    CudaStatus freed = Handle(FreeAsyncRequest{r.ptr, 0}, io).status();  // [issue 17: pools]
    FLYT_CUDA_RETURN_IF_ERROR(freed);  // [issue 17: pools]
    return FreeReply{};  // [issue 17: pools]
  }  // [issue 17: pools]
  std::optional<AddressRanges<uint8_t>::Range> range = allocations_.Find(r.ptr);
  if (!range || range->base != r.ptr) {
    return Error(CudaError::kInvalidValue, Hex(r.ptr) + " is not an allocation of this client");
  }
  if (range->value == kIpcImport) {
    return Error(CudaError::kInvalidValue, Hex(r.ptr) + " was opened from another process's " +
                                               "handle: close it with cudaIpcCloseMemHandle");
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
CudaStatus ClientConnection::ReceiveCopy(const Request& r, Io& io) {
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

CudaResult<MemcpyHtoDReply> ClientConnection::Handle(const MemcpyHtoDRequest& r, Io& io) {
  FLYT_CUDA_RETURN_IF_ERROR(ReceiveCopy(r, io));
  if (r.bytes != 0) {
    FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
    FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
  }
  return MemcpyHtoDReply{};
}

CudaResult<MemcpyHtoDAsyncReply> ClientConnection::Handle(const MemcpyHtoDAsyncRequest& r, Io& io) {
  NoteImported(r.bytes);  // live migration: what an import link has received so far
  FLYT_CUDA_RETURN_IF_ERROR(ReceiveCopy(r, io));
  return MemcpyHtoDAsyncReply{};
}

CudaResult<MemcpyDtoHReply> ClientConnection::Handle(const MemcpyDtoHRequest& r, Io& io) {
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

CudaResult<MemcpyDtoHAsyncReply> ClientConnection::Handle(const MemcpyDtoHAsyncRequest& r, Io& io) {
  Download d;
  d.seq = io.header.seq;
  auto fail = [&](CudaStatus status) -> CudaResult<MemcpyDtoHAsyncReply> {
    downloads_.push_back(std::move(d));  // abandoned: tells the client to stop waiting for it
    return status;
  };
  // Nothing to deliver, and the client waits for nothing (it keeps no landing for 0 bytes).
  if (r.bytes == 0) return MemcpyDtoHAsyncReply{};
  if (CudaStatus room = RoomForDownload(io); !room.ok()) return fail(room);
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

CudaResult<MemcpyDtoDReply> ClientConnection::Handle(const MemcpyDtoDRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.bytes == 0) return MemcpyDtoDReply{};
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(r.src, r.bytes, "source"));
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(r.dst, r.bytes, "destination"));
  FLYT_CUDA_RETURN_IF_ERROR(session_->MemcpyDtoD(r.dst, r.src, r.bytes, stream));
  return MemcpyDtoDReply{};
}

CudaResult<MemsetReply> ClientConnection::Handle(const MemsetRequest& r, Io&) {
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.bytes == 0) return MemsetReply{};
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(r.dst, r.bytes, "memset"));
  FLYT_CUDA_RETURN_IF_ERROR(session_->Memset(r.dst, r.value, r.bytes, stream));
  return MemsetReply{};
}

}  // namespace flyt::remote
