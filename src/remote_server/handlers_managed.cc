// ClientConnection's handlers of the managed calls (see connection.h): cudaMallocManaged's device
// memory and __managed__ variables. The runtime's side of the same calls, with the host mirror
// and its coherence: runtime/api_managed.cc.
//
// A managed allocation is an ordinary allocation of the client's (counted against the memory
// limit, in allocations_, freed by Free and FreeEverything); only its address differs: the backend
// places it at the client's mirror where it can. A __managed__ global placed at the client's
// mirror is a second range of the module's global in globals_ (removed with the module).
#include "remote_server/connection.h"

namespace flyt::remote {
namespace {

constexpr uint64_t kManagedAlignment = 4096;  // the client's mirror is page aligned
constexpr uint32_t kManagedFlags = 0x1 | 0x2;  // cudaMemAttachGlobal | cudaMemAttachHost

}  // namespace

CudaResult<MallocManagedReply> ClientConnection::Handle(const MallocManagedRequest& r, Io&) {
  if (r.bytes == 0) return Error(CudaError::kInvalidValue, "cudaMallocManaged of 0 bytes");
  if ((r.flags & ~kManagedFlags) != 0 || (r.flags & kManagedFlags) == kManagedFlags ||
      r.flags == 0) {
    return Error(CudaError::kInvalidValue, "cudaMallocManaged flags must be cudaMemAttachGlobal "
                                           "or cudaMemAttachHost");
  }
  if (r.address_hint % kManagedAlignment != 0 || r.address_hint + r.bytes < r.address_hint) {
    return Error(CudaError::kInvalidValue, "managed memory address hint " + Hex(r.address_hint) +
                                               " is not page aligned");
  }
  if (!memory_.TryReserve(r.bytes)) {
    return Error(CudaError::kMemoryAllocation,
                 "the server's memory limit of " + std::to_string(memory_.limit_bytes() >> 20) +
                     " MiB is reached (" + std::to_string(memory_.used_bytes() >> 20) +
                     " MiB in use)");
  }
  CudaResult<DevicePtr> ptr = session_->MallocManaged(r.bytes, r.address_hint);
  if (!ptr.ok()) {
    memory_.Release(r.bytes);
    return ptr.status();
  }
  if (!allocations_.Add(*ptr, r.bytes, kManagedAllocation) || globals_.Find(*ptr)) {
    allocations_.Remove(*ptr);
    (void)session_->Free(*ptr);
    memory_.Release(r.bytes);
    return Error(CudaError::kMemoryAllocation,
                 "managed memory at " + Hex(*ptr) + " would overlap another range of this client");
  }
  counters_->allocations += 1;
  counters_->allocated_bytes += r.bytes;
  return MallocManagedReply{*ptr};
}

CudaResult<ModuleGetManagedGlobalReply> ClientConnection::Handle(
    const ModuleGetManagedGlobalRequest& r, Io&) {
  const Module* module = modules_.Find(r.module);
  if (!module) {
    return Error(CudaError::kInvalidResourceHandle, "no module " + std::to_string(r.module));
  }
  if (r.address_hint % kManagedAlignment != 0 ||
      r.address_hint + r.registered_bytes < r.address_hint) {
    return Error(CudaError::kInvalidValue, "managed variable address hint " +
                                               Hex(r.address_hint) + " is not page aligned");
  }
  if (r.address_hint != 0 &&
      (allocations_.Find(r.address_hint) || globals_.Find(r.address_hint) ||
       (r.registered_bytes != 0 &&
        (allocations_.Find(r.address_hint + r.registered_bytes - 1) ||
         globals_.Find(r.address_hint + r.registered_bytes - 1))))) {
    return Error(CudaError::kInvalidValue,
                 "managed variable address " + Hex(r.address_hint) + " is already in use");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(
      GlobalSymbol global,
      session_->ModuleGetManagedGlobal(module->handle, r.name, r.registered_bytes,
                                       r.address_hint));
  // The backend's own global (ModuleGetGlobal) may already be in globals_; a placed one is new.
  if (global.bytes != 0 && !globals_.Contains(global.ptr, global.bytes) &&
      (allocations_.Find(global.ptr) || !globals_.Add(global.ptr, global.bytes, Global{r.module}))) {
    return Error(CudaError::kUnknown, "backend returned a global that overlaps another range");
  }
  return ModuleGetManagedGlobalReply{global.ptr, global.bytes};
}

}  // namespace flyt::remote
