// Memory: device allocations (on the server), host allocations (here), copies of every kind,
// memsets, __device__/__constant__ variables, pointer attributes.
//
// Pointers are classified locally: this process knows every device allocation and variable it
// holds, so cudaMemcpyDefault and cudaPointerGetAttributes need no round trip, and a device range
// outside them is refused before anything is sent. Async copies are posted: host-to-device data
// leaves at once (small copies through the send buffer, large ones straight from the caller's
// memory), device-to-host data lands in the caller's buffer during a later synchronising call —
// which is when CUDA allows the program to look at it.
#include <algorithm>
#include <cstring>
#include <span>

#include "runtime/exports.h"
#include "runtime/runtime.h"

namespace flyt::runtime {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

enum class Direction { kHostToHost, kHostToDevice, kDeviceToHost, kDeviceToDevice };

CudaResult<Direction> Classify(Runtime& rt, void* dst, const void* src, size_t count,
                               cudaMemcpyKind kind) {
  bool dst_device = false, src_device = false;
  switch (kind) {
    case cudaMemcpyHostToHost:
      break;
    case cudaMemcpyHostToDevice:
      dst_device = true;
      break;
    case cudaMemcpyDeviceToHost:
      src_device = true;
      break;
    case cudaMemcpyDeviceToDevice:
      dst_device = src_device = true;
      break;
    case cudaMemcpyDefault:
      dst_device = rt.IsDevicePointer(dst);
      src_device = rt.IsDevicePointer(src);
      break;
    default:
      return Error(CudaError::kInvalidMemcpyDirection, "unknown cudaMemcpyKind");
  }
  if (dst_device && !rt.IsDeviceRange(dst, count)) {
    return Error(CudaError::kInvalidValue,
                 "destination is not inside a device allocation of this process");
  }
  if (src_device && !rt.IsDeviceRange(src, count)) {
    return Error(CudaError::kInvalidValue, "source is not inside a device allocation of this process");
  }
  if ((dst == nullptr && !dst_device) || (src == nullptr && !src_device)) {
    return Error(CudaError::kInvalidValue, "null host pointer");
  }
  if (dst_device) return src_device ? Direction::kDeviceToDevice : Direction::kHostToDevice;
  return src_device ? Direction::kDeviceToHost : Direction::kHostToHost;
}

uint64_t Address(const void* p) { return reinterpret_cast<uint64_t>(p); }

// A host-to-device copy from cudaHostRegister'd memory through the range's copy in the arena, in
// pieces: each is copied in and posted at once, so that the server copies (or the GPU moves)
// one piece while the next is copied in. A synchronous copy's last piece is a call, which
// returns once the stream has done them all.
cudaError_t StagedUpload(Runtime& rt, remote::Connection& c, void* dst, const void* src,
                         size_t count, const Runtime::Staged& staged, uint64_t stream,
                         bool async) {
  constexpr size_t kPiece = 4 << 20;
  CudaStatus s = CudaStatus::Ok();
  for (size_t off = 0; off < count && s.ok(); off += kPiece) {
    const size_t n = std::min(kPiece, count - off);
    const bool last = off + n == count;
    std::memcpy(staged.arena + off, static_cast<const std::byte*>(src) + off, n);
    if (last && !async) {
      s = c.MemcpyHtoDShared({Address(dst) + off, staged.offset + off, n, stream}).status();
    } else {
      s = c.MemcpyHtoDSharedAsync({Address(dst) + off, staged.offset + off, n, stream});
      if (s.ok() && !last) s = c.Flush();
    }
  }
  return async ? rt.Finish(s) : rt.FinishSync(s);
}

// A synchronous device-to-host copy into cudaHostRegister'd memory through the range's copy in
// the arena, in pieces: while the server copies (or the GPU moves) one piece into the arena, the
// one before is copied on into the program's memory. The first piece is a call in stream order,
// so the copy starts after the stream's earlier work, as cudaMemcpy's does.
cudaError_t StagedDownload(Runtime& rt, remote::Connection& c, void* dst, const void* src,
                           size_t count, const Runtime::Staged& staged, uint64_t stream) {
  constexpr size_t kPiece = 4 << 20;
  auto* out = static_cast<std::byte*>(dst);
  size_t ready = std::min(kPiece, count);  // [done, ready) is in the arena, not yet copied on
  size_t done = 0;
  // Each call's own outcome drives the loop; an earlier posted call's error comes with the end.
  CudaStatus s = c.MemcpyDtoHShared({staged.offset, Address(src), ready, stream}).status();
  while (s.ok() && ready < count) {
    const size_t n = std::min(kPiece, count - ready);
    s = c.MemcpyDtoHSharedAsync({staged.offset + ready, Address(src) + ready, n, stream});
    if (s.ok()) s = c.Flush();
    if (!s.ok()) break;
    std::memcpy(out + done, staged.arena + done, ready - done);
    done = ready;
    s = c.StreamSynchronize({stream}).status();
    ready += n;
  }
  if (s.ok()) std::memcpy(out + done, staged.arena + done, ready - done);
  return rt.FinishSync(s);
}

// One copy. `async`: cudaMemcpyAsync semantics; otherwise cudaMemcpy's (host-to-device and
// device-to-host wait; device-to-device does not, as with CUDA).
cudaError_t Copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                 cudaStream_t stream, bool async, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  if (count == 0) return cudaSuccess;
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  CudaResult<Direction> direction = Classify(rt, dst, src, count, kind);
  if (!direction.ok()) return rt.Finish(direction.status());
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  const bool dtod = *direction == Direction::kDeviceToDevice;  // [issue 17: graphs]
  if (auto r = rt.CaptureCopy(*id, dst, src, count, dtod)) return rt.Finish(*r);  // [issue 17: graphs]
  remote::Connection& c = **conn;
  if (CudaStatus m = rt.ManagedBeforeCopy(  // [issue 17: managed]
          dst, src, count, *direction == Direction::kHostToDevice ||  // [issue 17: managed]
                               *direction == Direction::kDeviceToDevice,  // [issue 17: managed]
          *direction == Direction::kDeviceToHost ||  // [issue 17: managed]
              *direction == Direction::kDeviceToDevice,  // [issue 17: managed]
          *id);  // [issue 17: managed]
      !m.ok()) {  // [issue 17: managed]
    return rt.Finish(m);  // [issue 17: managed]
  }  // [issue 17: managed]
  auto in = std::span<const std::byte>(static_cast<const std::byte*>(src), count);
  auto out = std::span<std::byte>(static_cast<std::byte*>(dst), count);
  switch (*direction) {
    case Direction::kHostToHost:
      if (async) {
        // Ordered after the stream's earlier work, as CUDA orders it.
        cudaError_t synced = rt.FinishSync(c.StreamSynchronize({*id}).status());
        if (synced != cudaSuccess) return synced;
      }
      std::memmove(dst, src, count);
      return cudaSuccess;
    case Direction::kHostToDevice: {
      // From pinned memory in the shared arena: the server reads the shared pages (DMA on a GPU,
      // one memcpy on the sim); no bytes cross the rings. From cudaHostRegister'd memory staged
      // in the arena: its bytes are copied in first, and the copy goes the same way.
      if (std::optional<Runtime::Staged> staged = rt.StageIn(c, src, count, async)) {
        return StagedUpload(rt, c, dst, src, count, *staged, *id, async);
      }
      if (std::optional<uint64_t> offset = rt.ArenaOffset(src, count)) {
        if (async) {
          return rt.Finish(c.MemcpyHtoDSharedAsync({Address(dst), *offset, count, *id}));
        }
        return rt.FinishSync(c.MemcpyHtoDShared({Address(dst), *offset, count, *id}).status());
      }
      if (async) return rt.Finish(c.MemcpyHtoDAsync({Address(dst), count, *id}, in));
      return rt.FinishSync(c.MemcpyHtoD({Address(dst), count, *id}, in).status());
    }
    case Direction::kDeviceToHost:
      // Into pinned memory in the shared arena: the server writes the shared pages, an async
      // copy in stream order (the program synchronises before it reads, as CUDA requires).
      if (std::optional<uint64_t> offset = rt.ArenaOffset(dst, count)) {
        if (async) {
          return rt.Finish(c.MemcpyDtoHSharedAsync({*offset, Address(src), count, *id}));
        }
        return rt.FinishSync(c.MemcpyDtoHShared({*offset, Address(src), count, *id}).status());
      }
      // Into cudaHostRegister'd memory staged in the arena: the copy lands there and is copied
      // on, at once or, for an async copy, when the connection hears it landed (before the reply
      // of a later call, so before any synchronisation returns). An async one needs a server
      // that says when (protocol version 8).
      if (!async || c.server().version >= remote::MinProtocolVersionOf(
                                              remote::CallId::kMemcpyDtoHStagedAsync)) {
        if (std::optional<Runtime::Staged> staged = rt.StageOut(c, dst, count, async)) {
          if (async) {
            return rt.Finish(
                c.MemcpyDtoHStagedAsync({staged->offset, Address(src), count, *id}, out));
          }
          return StagedDownload(rt, c, dst, src, count, *staged, *id);
        }
      }
      // Into pinned (cudaMallocHost, cudaHostRegister) memory an async copy lands later; into
      // pageable memory CUDA's copy returns only once the bytes are there (the program may read
      // or free the buffer right after), so it is a synchronous one.
      if (async && rt.HostFlags(dst)) {
        bool synchronous = false;  // [issue 17: pools]
        cudaError_t room = rt.MakeRoomForDownload(c, count, synchronous);  // [issue 17: pools]
        if (room != cudaSuccess) return room;  // [issue 17: pools]
        if (!synchronous) {  // [issue 17: pools]
          return rt.Finish(c.MemcpyDtoHAsync({Address(src), count, *id}, out));
        }  // [issue 17: pools]
      }
      return rt.FinishSync(c.MemcpyDtoH({Address(src), count, *id}, out).status());
    case Direction::kDeviceToDevice:
      return rt.Finish(c.MemcpyDtoD({Address(dst), Address(src), count, *id}));
  }
  return cudaErrorUnknown;
}

cudaError_t Set(void* dst, int value, size_t count, cudaStream_t stream, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  if (count == 0) return cudaSuccess;
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  if (!rt.IsDeviceRange(dst, count)) {
    return rt.Finish(Error(CudaError::kInvalidValue,
                           "memset range is not inside a device allocation of this process"));
  }
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  if (auto r = rt.CaptureMemset(*id, dst, value, count)) return rt.Finish(*r);  // [issue 17: graphs]
  if (CudaStatus m = rt.ManagedBeforeCopy(dst, nullptr, count, true, false, *id); !m.ok()) {
    return rt.Finish(m);  // [issue 17: managed]
  }  // [issue 17: managed]
  return rt.Finish(
      (*conn)->Memset({Address(dst), static_cast<uint8_t>(value & 0xFF), count, *id}));
}

// 2D copies: row by row, except a device-to-host copy, which fetches the span the rows cover in
// one piece and picks the rows out of it (one round trip instead of `height`).
cudaError_t Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                   size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool async,
                   bool per_thread) {
  return Runtime::ArraysCopy2D(  // [issue 17: arrays]
      dst, dpitch, src, spitch, width, height, kind, stream, async, per_thread);  // [issue 17: arrays]
  Runtime& rt = Runtime::Get();
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dpitch || width > spitch) {
    return rt.Finish(Error(CudaError::kInvalidPitchValue, "width exceeds a pitch"));
  }
  if (dpitch == width && spitch == width) {
    return Copy(dst, src, width * height, kind, stream, async, per_thread);
  }
  size_t src_span = spitch * (height - 1) + width;
  size_t dst_span = dpitch * (height - 1) + width;
  CudaResult<Direction> direction = Classify(rt, dst, src, 0, kind);
  if (!direction.ok()) return rt.Finish(direction.status());
  if (*direction == Direction::kDeviceToHost) {
    std::vector<std::byte> staging(src_span);
    cudaError_t e = Copy(staging.data(), src, src_span, cudaMemcpyDeviceToHost, stream, false,
                         per_thread);
    if (e != cudaSuccess) return e;
    for (size_t row = 0; row < height; ++row) {
      std::memcpy(static_cast<std::byte*>(dst) + row * dpitch, staging.data() + row * spitch,
                  width);
    }
    return cudaSuccess;
  }
  (void)dst_span;
  if (*direction == Direction::kHostToHost) {
    for (size_t row = 0; row < height; ++row) {
      std::memmove(static_cast<std::byte*>(dst) + row * dpitch,
                   static_cast<const std::byte*>(src) + row * spitch, width);
    }
    return cudaSuccess;
  }
  for (size_t row = 0; row < height; ++row) {
    cudaError_t e = Copy(static_cast<std::byte*>(dst) + row * dpitch,
                         static_cast<const std::byte*>(src) + row * spitch, width,
                         *direction == Direction::kHostToDevice ? cudaMemcpyHostToDevice
                                                                 : cudaMemcpyDeviceToDevice,
                         stream, true, per_thread);
    if (e != cudaSuccess) return e;
  }
  if (async || *direction != Direction::kHostToDevice) return cudaSuccess;
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  auto conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  return rt.FinishSync((*conn)->StreamSynchronize({*id}).status());
}

cudaError_t Set2D(void* dst, size_t pitch, int value, size_t width, size_t height,
                  cudaStream_t stream, bool per_thread) {
  return Runtime::ArraysSet2D(  // [issue 17: arrays]
      dst, pitch, value, width, height, stream, per_thread);  // [issue 17: arrays]
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > pitch) {
    return Runtime::Get().Finish(Error(CudaError::kInvalidPitchValue, "width exceeds the pitch"));
  }
  if (width == pitch) return Set(dst, value, width * height, stream, per_thread);
  for (size_t row = 0; row < height; ++row) {
    cudaError_t e = Set(static_cast<std::byte*>(dst) + row * pitch, value, width, stream,
                        per_thread);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t ToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                     cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice &&
      kind != cudaMemcpyDefault) {
    return rt.Finish(Error(CudaError::kInvalidMemcpyDirection, "copy to a symbol from the host"));
  }
  CudaResult<std::pair<uint64_t, size_t>> sym = rt.Symbol(symbol);
  if (!sym.ok()) return rt.Finish(sym.status());
  if (offset > sym->second || count > sym->second - offset) {
    return rt.Finish(Error(CudaError::kInvalidValue, "copy past the end of the symbol"));
  }
  return Copy(reinterpret_cast<void*>(sym->first + offset), src, count, kind, stream, async,
              per_thread);
}

cudaError_t FromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                       cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice &&
      kind != cudaMemcpyDefault) {
    return rt.Finish(Error(CudaError::kInvalidMemcpyDirection, "copy from a symbol to the host"));
  }
  CudaResult<std::pair<uint64_t, size_t>> sym = rt.Symbol(symbol);
  if (!sym.ok()) return rt.Finish(sym.status());
  if (offset > sym->second || count > sym->second - offset) {
    return rt.Finish(Error(CudaError::kInvalidValue, "copy past the end of the symbol"));
  }
  return Copy(dst, reinterpret_cast<const void*>(sym->first + offset), count, kind, stream, async,
              per_thread);
}

cudaError_t Malloc(void** devPtr, size_t size) {
  Runtime& rt = Runtime::Get();
  if (devPtr == nullptr) return rt.Finish(Error(CudaError::kInvalidValue, "null devPtr"));
  *devPtr = nullptr;
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  if (size == 0) return cudaSuccess;
  auto reply = (*conn)->Malloc({size});
  if (!reply.ok()) return rt.Finish(reply.status());
  rt.AddDeviceAllocation(reply->ptr, size);
  *devPtr = reinterpret_cast<void*>(reply->ptr);
  return rt.Finish(CudaStatus::Ok());
}

cudaError_t Free(void* devPtr) {
  Runtime& rt = Runtime::Get();
  if (devPtr == nullptr) return cudaSuccess;
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  if (Runtime::IpcIsOpen(Address(devPtr))) {
    return rt.Finish(Error(CudaError::kInvalidValue,
                           "memory opened with cudaIpcOpenMemHandle is closed with "
                           "cudaIpcCloseMemHandle, not cudaFree"));
  }
  if (!rt.RemoveDeviceAllocation(Address(devPtr))) {
    return rt.Finish(Error(CudaError::kInvalidValue, "not a device allocation of this process"));
  }
  rt.ManagedFree(devPtr);  // [issue 17: managed]
  return rt.Finish((*conn)->Free({Address(devPtr)}));
}

}  // namespace
}  // namespace flyt::runtime

using flyt::remote::CudaError;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
namespace rt_impl = flyt::runtime;

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) noexcept {
  return Guard("cudaMalloc", [&] {
    Runtime& rt = Runtime::Get();                                // [issue 17: graphs]
    if (auto r = rt.CaptureUnsafe()) return rt.Finish(*r);  // [issue 17: graphs]
    return rt_impl::Malloc(devPtr, size);
  });
}

cudaError_t cudaFree(void* devPtr) noexcept {
  return Guard("cudaFree", [&] { return rt_impl::Free(devPtr); });
}

// cudaMallocAsync / cudaFreeAsync (+_ptsz): runtime/api_pools.cc.  // [issue 17: pools]

cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) noexcept {
  return Guard("cudaMallocPitch", [&] {
    Runtime& rt = Runtime::Get();
    if (pitch == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null pitch"));
    auto alignment = rt.Attribute(51);  // texturePitchAlignment
    size_t align = alignment.ok() && *alignment > 0 ? static_cast<size_t>(*alignment) : 512;
    align = std::max<size_t>(align, 512);
    *pitch = (width + align - 1) / align * align;
    return rt_impl::Malloc(devPtr, *pitch * height);
  });
}

// [issue 17: managed] cudaMallocManaged is in api_managed.cc.

cudaError_t cudaMallocHost(void** ptr, size_t size) noexcept {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) noexcept {
  return Guard("cudaHostAlloc", [&] {
    Runtime& rt = Runtime::Get();
    constexpr unsigned kKnown =
        cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
    if (pHost == nullptr || (flags & ~kKnown) != 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "bad pointer or flags"));
    }
    if ((flags & cudaHostAllocMapped) != 0) {  // [issue 17: pools]
      *pHost = nullptr;  // [issue 17: pools]
      return rt.Finish(Runtime::MappedRefusal("cudaHostAlloc(cudaHostAllocMapped)"));
    }
    *pHost = rt.AllocateHost(size, flags);
    if (*pHost == nullptr) {
      return rt.Finish(CudaStatus(CudaError::kMemoryAllocation, "host memory exhausted"));
    }
    return cudaSuccess;
  });
}

cudaError_t cudaFreeHost(void* ptr) noexcept {
  return Guard("cudaFreeHost", [&] {
    if (ptr == nullptr) return cudaSuccess;
    Runtime& rt = Runtime::Get();
    if (!rt.FreeHost(ptr)) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "not allocated by cudaMallocHost"));
    }
    return cudaSuccess;
  });
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) noexcept {
  return Guard("cudaHostRegister", [&] {
    Runtime& rt = Runtime::Get();
    if (ptr == nullptr || size == 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "empty range"));
    }
    if ((flags & cudaHostRegisterMapped) != 0) {  // [issue 17: pools]
      return rt.Finish(Runtime::MappedRefusal("cudaHostRegister(cudaHostRegisterMapped)"));
    }  // [issue 17: pools]
    if (!rt.RegisterHost(ptr, size, flags)) {
      return rt.Finish(CudaStatus(CudaError::kHostMemoryAlreadyRegistered, "already registered"));
    }
    return cudaSuccess;
  });
}

cudaError_t cudaHostUnregister(void* ptr) noexcept {
  return Guard("cudaHostUnregister", [&] {
    Runtime& rt = Runtime::Get();
    if (!rt.UnregisterHost(ptr)) {
      return rt.Finish(CudaStatus(CudaError::kHostMemoryNotRegistered, "not registered"));
    }
    return cudaSuccess;
  });
}

cudaError_t cudaHostGetFlags(unsigned int* pFlags, void* pHost) noexcept {
  return Guard("cudaHostGetFlags", [&] {
    Runtime& rt = Runtime::Get();
    auto flags = rt.HostFlags(pHost);
    if (pFlags == nullptr || !flags) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "not page-locked host memory"));
    }
    *pFlags = *flags;
    return cudaSuccess;
  });
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void*, unsigned int) noexcept {
  return Guard("cudaHostGetDevicePointer", [&] {
    if (pDevice) *pDevice = nullptr;
    // [issue 17: pools]
    return Runtime::Get().Finish(Runtime::MappedRefusal("cudaHostGetDevicePointer"));
  });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count,
                       enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy",
               [&] { return rt_impl::Copy(dst, src, count, kind, nullptr, false, false); });
}

cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count,
                            enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy_ptds",
               [&] { return rt_impl::Copy(dst, src, count, kind, nullptr, false, true); });
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyAsync",
               [&] { return rt_impl::Copy(dst, src, count, kind, stream, true, false); });
}

cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count,
                                 enum cudaMemcpyKind kind, cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyAsync_ptsz",
               [&] { return rt_impl::Copy(dst, src, count, kind, stream, true, true); });
}

cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice,
                           size_t count) noexcept {
  if (dstDevice != 0 || srcDevice != 0) return flyt::runtime::LocalError(cudaErrorInvalidDevice);
  return cudaMemcpy(dst, src, count, cudaMemcpyDeviceToDevice);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice,
                                size_t count, cudaStream_t stream) noexcept {
  if (dstDevice != 0 || srcDevice != 0) return flyt::runtime::LocalError(cudaErrorInvalidDevice);
  return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2D", [&] {
    return rt_impl::Copy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2D_ptds", [&] {
    return rt_impl::Copy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, false, true);
  });
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream) noexcept {
  return Guard("cudaMemcpy2DAsync", [&] {
    return rt_impl::Copy2D(dst, dpitch, src, spitch, width, height, kind, stream, true, false);
  });
}

cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind,
                                   cudaStream_t stream) noexcept {
  return Guard("cudaMemcpy2DAsync_ptsz", [&] {
    return rt_impl::Copy2D(dst, dpitch, src, spitch, width, height, kind, stream, true, true);
  });
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) noexcept {
  return Guard("cudaMemset", [&] { return rt_impl::Set(devPtr, value, count, nullptr, false); });
}

cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) noexcept {
  return Guard("cudaMemset_ptds", [&] { return rt_impl::Set(devPtr, value, count, nullptr, true); });
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) noexcept {
  return Guard("cudaMemsetAsync", [&] { return rt_impl::Set(devPtr, value, count, stream, false); });
}

cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count,
                                 cudaStream_t stream) noexcept {
  return Guard("cudaMemsetAsync_ptsz",
               [&] { return rt_impl::Set(devPtr, value, count, stream, true); });
}

cudaError_t cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width,
                         size_t height) noexcept {
  return Guard("cudaMemset2D",
               [&] { return rt_impl::Set2D(devPtr, pitch, value, width, height, nullptr, false); });
}

cudaError_t cudaMemset2D_ptds(void* devPtr, size_t pitch, int value, size_t width,
                              size_t height) noexcept {
  return Guard("cudaMemset2D_ptds",
               [&] { return rt_impl::Set2D(devPtr, pitch, value, width, height, nullptr, true); });
}

cudaError_t cudaMemset2DAsync(void* devPtr, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t stream) noexcept {
  return Guard("cudaMemset2DAsync",
               [&] { return rt_impl::Set2D(devPtr, pitch, value, width, height, stream, false); });
}

cudaError_t cudaMemset2DAsync_ptsz(void* devPtr, size_t pitch, int value, size_t width,
                                   size_t height, cudaStream_t stream) noexcept {
  return Guard("cudaMemset2DAsync_ptsz",
               [&] { return rt_impl::Set2D(devPtr, pitch, value, width, height, stream, true); });
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyToSymbol", [&] {
    return rt_impl::ToSymbol(symbol, src, count, offset, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count,
                                    size_t offset, enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyToSymbol_ptds", [&] {
    return rt_impl::ToSymbol(symbol, src, count, offset, kind, nullptr, false, true);
  });
}

cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count,
                                    size_t offset, enum cudaMemcpyKind kind,
                                    cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyToSymbolAsync", [&] {
    return rt_impl::ToSymbol(symbol, src, count, offset, kind, stream, true, false);
  });
}

cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count,
                                         size_t offset, enum cudaMemcpyKind kind,
                                         cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyToSymbolAsync_ptsz", [&] {
    return rt_impl::ToSymbol(symbol, src, count, offset, kind, stream, true, true);
  });
}

cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyFromSymbol", [&] {
    return rt_impl::FromSymbol(dst, symbol, count, offset, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyFromSymbol_ptds", [&] {
    return rt_impl::FromSymbol(dst, symbol, count, offset, kind, nullptr, false, true);
  });
}

cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyFromSymbolAsync", [&] {
    return rt_impl::FromSymbol(dst, symbol, count, offset, kind, stream, true, false);
  });
}

cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count,
                                           size_t offset, enum cudaMemcpyKind kind,
                                           cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyFromSymbolAsync_ptsz", [&] {
    return rt_impl::FromSymbol(dst, symbol, count, offset, kind, stream, true, true);
  });
}

cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) noexcept {
  return Guard("cudaGetSymbolAddress", [&] {
    Runtime& rt = Runtime::Get();
    if (devPtr == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null devPtr"));
    auto sym = rt.Symbol(symbol);
    if (!sym.ok()) return rt.Finish(sym.status());
    *devPtr = reinterpret_cast<void*>(sym->first);
    return cudaSuccess;
  });
}

cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) noexcept {
  return Guard("cudaGetSymbolSize", [&] {
    Runtime& rt = Runtime::Get();
    if (size == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null size"));
    auto sym = rt.Symbol(symbol);
    if (!sym.ok()) return rt.Finish(sym.status());
    *size = sym->second;
    return cudaSuccess;
  });
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes,
                                     const void* ptr) noexcept {
  return Guard("cudaPointerGetAttributes", [&] {
    Runtime& rt = Runtime::Get();
    if (attributes == nullptr) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null attributes"));
    }
    std::memset(attributes, 0, sizeof *attributes);
    attributes->device = 0;
    if (rt.ManagedPointerAttributes(ptr, attributes)) return cudaSuccess;  // [issue 17: managed]
    if (rt.IsDevicePointer(ptr)) {
      attributes->type = cudaMemoryTypeDevice;
      attributes->devicePointer = const_cast<void*>(ptr);
    } else if (rt.HostFlags(ptr)) {
      attributes->type = cudaMemoryTypeHost;
      attributes->hostPointer = const_cast<void*>(ptr);
    } else {
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->hostPointer = const_cast<void*>(ptr);
    }
    return cudaSuccess;
  });
}

}  // extern "C"
