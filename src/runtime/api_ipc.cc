// cudaIpc*: sharing device memory and events between processes through their GPU server (see
// remote_server/handlers_ipc.cc). A handle is the server's 64 bytes, passed by the program to another
// process by its own means; it opens in a process whose flyt runtime talks to the same server.
// Opening a handle already open here returns the same pointer and counts it; the last
// cudaIpcCloseMemHandle unmaps it. Memory opened here is a device range of this process (copies,
// memsets and launches use it) but is not cudaFree'd.
#include <cstring>
#include <map>

#include "common/mutex.h"
#include "runtime/exports.h"
#include "runtime/runtime.h"

namespace flyt::runtime {
namespace {

Mutex ipc_mu;
// Opened memory by pointer: how many opens are not yet closed.
std::map<uint64_t, int>& Opens() FLYT_REQUIRES(ipc_mu) {
  static auto* opens = new std::map<uint64_t, int>();
  return *opens;
}

remote::Bytes HandleBytes(const char* reserved) {
  remote::Bytes out(CUDA_IPC_HANDLE_SIZE);
  std::memcpy(out.data(), reserved, CUDA_IPC_HANDLE_SIZE);
  return out;
}

}  // namespace

bool Runtime::IpcIsOpen(uint64_t ptr) {
  MutexLock lock(ipc_mu);
  return Opens().contains(ptr);
}

void Runtime::IpcForgetAll() {
  MutexLock lock(ipc_mu);
  Opens().clear();
}

}  // namespace flyt::runtime

using flyt::remote::CudaError;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
namespace rt_impl = flyt::runtime;

extern "C" {

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) noexcept {
  return Guard("cudaIpcGetMemHandle", [&] {
    Runtime& rt = Runtime::Get();
    if (handle == nullptr || devPtr == nullptr) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null handle or pointer"));
    }
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto reply = (*conn)->IpcGetMemHandle({reinterpret_cast<uint64_t>(devPtr)});
    if (!reply.ok()) return rt.Finish(reply.status());
    if (reply->handle.size() != CUDA_IPC_HANDLE_SIZE) {
      return rt.Finish(CudaStatus(CudaError::kUnknown, "the server's handle is not 64 bytes"));
    }
    std::memcpy(handle->reserved, reply->handle.data(), CUDA_IPC_HANDLE_SIZE);
    return cudaSuccess;
  });
}

cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle,
                                 unsigned int flags) noexcept {
  return Guard("cudaIpcOpenMemHandle", [&] {
    Runtime& rt = Runtime::Get();
    if (devPtr == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null devPtr"));
    *devPtr = nullptr;
    if ((flags & ~unsigned{cudaIpcMemLazyEnablePeerAccess}) != 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue,
                                  "flags must be 0 or cudaIpcMemLazyEnablePeerAccess"));
    }
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto reply = (*conn)->IpcOpenMemHandle({rt_impl::HandleBytes(handle.reserved), flags});
    if (!reply.ok()) return rt.Finish(reply.status());
    {
      flyt::MutexLock lock(rt_impl::ipc_mu);
      if (rt_impl::Opens()[reply->ptr]++ == 0) rt.AddDeviceAllocation(reply->ptr, reply->bytes);
    }
    *devPtr = reinterpret_cast<void*>(reply->ptr);
    return cudaSuccess;
  });
}

cudaError_t cudaIpcCloseMemHandle(void* devPtr) noexcept {
  return Guard("cudaIpcCloseMemHandle", [&] {
    Runtime& rt = Runtime::Get();
    const auto ptr = reinterpret_cast<uint64_t>(devPtr);
    {
      flyt::MutexLock lock(rt_impl::ipc_mu);
      if (!rt_impl::Opens().contains(ptr)) {
        return rt.Finish(
            CudaStatus(CudaError::kInvalidValue, "not memory opened with cudaIpcOpenMemHandle"));
      }
    }
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    // The device may still be using the memory: CUDA's close waits for it too.
    if (CudaStatus s = (*conn)->DeviceSynchronize({}).status(); !s.ok()) return rt.Finish(s);
    CudaStatus closed = (*conn)->IpcCloseMemHandle({ptr}).status();
    if (!closed.ok()) return rt.Finish(closed);
    flyt::MutexLock lock(rt_impl::ipc_mu);
    auto it = rt_impl::Opens().find(ptr);
    if (it != rt_impl::Opens().end() && --it->second == 0) {
      rt_impl::Opens().erase(it);
      rt.RemoveDeviceAllocation(ptr);
    }
    return cudaSuccess;
  });
}

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) noexcept {
  return Guard("cudaIpcGetEventHandle", [&] {
    Runtime& rt = Runtime::Get();
    if (handle == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null handle"));
    auto record = rt.FindEvent(event);
    if (!record.ok()) return rt.Finish(record.status());
    if ((record->flags & cudaEventInterprocess) == 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidResourceHandle,
                                  "the event was not created with cudaEventInterprocess"));
    }
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto reply = (*conn)->IpcGetEventHandle({record->id});
    if (!reply.ok()) return rt.Finish(reply.status());
    if (reply->handle.size() != CUDA_IPC_HANDLE_SIZE) {
      return rt.Finish(CudaStatus(CudaError::kUnknown, "the server's handle is not 64 bytes"));
    }
    std::memcpy(handle->reserved, reply->handle.data(), CUDA_IPC_HANDLE_SIZE);
    return cudaSuccess;
  });
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) noexcept {
  return Guard("cudaIpcOpenEventHandle", [&] {
    Runtime& rt = Runtime::Get();
    if (event == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null event"));
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    uint64_t id = rt.NewId();
    CudaStatus opened =
        (*conn)->IpcOpenEventHandle({id, rt_impl::HandleBytes(handle.reserved)}).status();
    if (!opened.ok()) return rt.Finish(opened);
    *event = rt.AddEvent({id, cudaEventInterprocess | cudaEventDisableTiming, rt.generation()});
    return cudaSuccess;
  });
}

}  // extern "C"
