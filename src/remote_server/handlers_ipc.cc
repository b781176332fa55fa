// ClientConnection's handlers of interprocess memory and events (cudaIpc*; see connection.h).
// The runtime's side: runtime/api_ipc.cc; the backends' handles: sim_ipc.cc, driver_ipc.cc.
//
// A client exports a whole cudaMalloc allocation of its own (not managed memory, not a pool's
// block, not memory it opened itself) as a 64-byte handle the backend makes. Another client of
// the same server opens it: the memory appears in its allocations_ as kIpcImport, usable by
// copies, memsets and launches like its own, counted against the memory limit as the exporter's
// is (the exporter may free its allocation while it stays open here), never freed by cudaFree,
// and closed by cudaIpcCloseMemHandle or when the client goes.
// Opening a handle already open in this connection counts it once more and returns the same
// pointer, as CUDA does; the last close unmaps it.
#include <spdlog/spdlog.h>

#include "remote_server/connection.h"

namespace flyt::remote {

CudaResult<IpcGetMemHandleReply> ClientConnection::Handle(const IpcGetMemHandleRequest& r, Io&) {
  ipc_exported_ = true;
  std::optional<AddressRanges<uint8_t>::Range> range = allocations_.Find(r.ptr);
  if (!range) {
    return Error(CudaError::kInvalidValue,
                 Hex(r.ptr) + " is not inside a device allocation of this client");
  }
  if (range->value == kIpcImport) {
    return Error(CudaError::kInvalidValue,
                 "memory opened from another process's handle cannot be exported again");
  }
  if (range->value == kManagedAllocation) {
    return Error(CudaError::kInvalidValue, "managed memory cannot be shared between processes");
  }
  if (pool_allocations_.contains(range->base)) {
    return Error(CudaError::kInvalidValue,
                 "memory from a stream-ordered pool cannot be exported with cudaIpcGetMemHandle");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(Bytes handle, session_->IpcGetMemHandle(range->base));
  if (handle.size() != Session::kIpcHandleBytes) {
    return Error(CudaError::kUnknown,
                 "the backend made a handle of " + std::to_string(handle.size()) + " bytes");
  }
  return IpcGetMemHandleReply{std::move(handle)};
}

CudaResult<IpcOpenMemHandleReply> ClientConnection::Handle(const IpcOpenMemHandleRequest& r, Io&) {
  if (r.handle.size() != Session::kIpcHandleBytes) {
    return Error(CudaError::kInvalidValue,
                 "an IPC memory handle is 64 bytes, not " + std::to_string(r.handle.size()));
  }
  if ((r.flags & ~1u) != 0) {
    return Error(CudaError::kInvalidValue,
                 "cudaIpcOpenMemHandle flags must be 0 or cudaIpcMemLazyEnablePeerAccess");
  }
  for (auto& [ptr, import] : ipc_imports_) {
    if (import.handle == r.handle) {
      import.opens += 1;
      return IpcOpenMemHandleReply{ptr, allocations_.Find(ptr)->size};
    }
  }
  if (ipc_imports_.size() >= kMaxIpcImports) {
    return Error(CudaError::kMemoryAllocation,
                 "this client has " + std::to_string(kMaxIpcImports) + " IPC handles open");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(auto opened, session_->IpcOpenMemHandle(r.handle));
  auto [ptr, bytes] = opened;
  if (auto it = ipc_imports_.find(ptr); it != ipc_imports_.end()) {
    // The driver gave the pointer of a handle already open under other bytes: it counted one
    // more reference, dropped at once; this connection counts the open.
    (void)session_->IpcCloseMemHandle(ptr);
    it->second.opens += 1;
    return IpcOpenMemHandleReply{ptr, allocations_.Find(ptr)->size};
  }
  // The opener is charged too: the exporter may free its allocation while it stays open here.
  if (!memory_.TryReserve(bytes)) {
    (void)session_->IpcCloseMemHandle(ptr);
    return Error(CudaError::kMemoryAllocation,
                 "the server's memory limit of " + std::to_string(memory_.limit_bytes() >> 20) +
                     " MiB is reached (" + std::to_string(memory_.used_bytes() >> 20) +
                     " MiB in use)");
  }
  if (globals_.Find(ptr) || !allocations_.Add(ptr, bytes, kIpcImport)) {
    memory_.Release(bytes);
    (void)session_->IpcCloseMemHandle(ptr);
    return Error(CudaError::kInvalidValue,
                 "the opened memory at " + Hex(ptr) + " overlaps another range of this client");
  }
  ipc_imports_[ptr] = IpcImport{r.handle, 1};
  return IpcOpenMemHandleReply{ptr, bytes};
}

CudaResult<IpcCloseMemHandleReply> ClientConnection::Handle(const IpcCloseMemHandleRequest& r,
                                                            Io&) {
  auto it = ipc_imports_.find(r.ptr);
  if (it == ipc_imports_.end()) {
    return Error(CudaError::kInvalidValue,
                 Hex(r.ptr) + " is not memory this client opened with cudaIpcOpenMemHandle");
  }
  if (--it->second.opens > 0) return IpcCloseMemHandleReply{};
  ipc_imports_.erase(it);
  if (auto range = allocations_.Find(r.ptr)) memory_.Release(range->size);
  allocations_.Remove(r.ptr);
  FLYT_CUDA_RETURN_IF_ERROR(session_->IpcCloseMemHandle(r.ptr));
  return IpcCloseMemHandleReply{};
}

void ClientConnection::CloseIpcImports() {
  for (const auto& [ptr, import] : ipc_imports_) {
    if (auto range = allocations_.Find(ptr)) memory_.Release(range->size);
    allocations_.Remove(ptr);
    CudaStatus s = session_->IpcCloseMemHandle(ptr);
    if (!s.ok()) spdlog::warn("{}: closing IPC memory {}: {}", Tag(), Hex(ptr), s.ToString());
  }
  ipc_imports_.clear();
}

CudaResult<IpcGetEventHandleReply> ClientConnection::Handle(const IpcGetEventHandleRequest& r,
                                                            Io&) {
  ipc_exported_ = true;
  const EventHandle* event = events_.Find(r.event);
  if (event == nullptr) {
    return Error(CudaError::kInvalidResourceHandle, "no event " + std::to_string(r.event));
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(Bytes handle, session_->IpcGetEventHandle(*event));
  if (handle.size() != Session::kIpcHandleBytes) {
    return Error(CudaError::kUnknown,
                 "the backend made a handle of " + std::to_string(handle.size()) + " bytes");
  }
  return IpcGetEventHandleReply{std::move(handle)};
}

CudaResult<IpcOpenEventHandleReply> ClientConnection::Handle(const IpcOpenEventHandleRequest& r,
                                                             Io&) {
  if (r.handle.size() != Session::kIpcHandleBytes) {
    return Error(CudaError::kInvalidValue,
                 "an IPC event handle is 64 bytes, not " + std::to_string(r.handle.size()));
  }
  if (r.event == 0 || events_.Find(r.event)) {
    return InsertError(r.event == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "event", r.event);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(EventHandle handle, session_->IpcOpenEventHandle(r.handle));
  if (CudaStatus s = InsertError(events_.Insert(r.event, handle), "event", r.event); !s.ok()) {
    (void)session_->EventDestroy(handle);
    return s;
  }
  counters_->events += 1;
  return IpcOpenEventHandleReply{};
}

}  // namespace flyt::remote
