// The driver backend's interprocess memory and events (see driver_session.h, handlers_ipc.cc): the
// handles are the driver's own (cuIpcGetMemHandle, cuIpcGetEventHandle), opened by another client's
// process on the same device. The driver checks them; a handle of another device or machine, or a
// forged one, is refused by cuIpcOpenMemHandle.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "remote_driver/driver_internal.h"
#include "remote_driver/driver_session.h"

namespace flyt::remote::driver_impl {
namespace {

CudaStatus IpcMissing(const char* call) {
  return CudaStatus(ErrorCode::kNotSupported, std::string("this driver does not export ") + call);
}

template <typename Handle>
std::vector<std::byte> ToBytes(const Handle& h) {
  std::vector<std::byte> out(sizeof h.reserved);
  std::memcpy(out.data(), h.reserved, sizeof h.reserved);
  return out;
}

template <typename Handle>
Handle FromBytes(const std::vector<std::byte>& bytes) {
  Handle h{};
  std::memcpy(h.reserved, bytes.data(), std::min(bytes.size(), sizeof h.reserved));
  return h;
}

}  // namespace

CudaResult<std::vector<std::byte>> DriverSession::IpcGetMemHandle(DevicePtr base) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.IpcGetMemHandle == nullptr) return IpcMissing("cuIpcGetMemHandle");
  if (!allocations_.contains(base)) {
    return CudaStatus(CudaError::kInvalidValue, "not an allocation of this session");
  }
  cuda_driver::CUipcMemHandle handle{};
  CUresult rc = fn_.IpcGetMemHandle(&handle, base);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuIpcGetMemHandle", rc);
  return ToBytes(handle);
}

CudaResult<std::pair<DevicePtr, uint64_t>> DriverSession::IpcOpenMemHandle(
    const std::vector<std::byte>& handle) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.IpcOpenMemHandle == nullptr) return IpcMissing("cuIpcOpenMemHandle");
  if (fn_.MemGetAddressRange == nullptr) return IpcMissing("cuMemGetAddressRange");
  CUdeviceptr ptr = 0;
  CUresult rc = fn_.IpcOpenMemHandle(&ptr, FromBytes<cuda_driver::CUipcMemHandle>(handle),
                                     cuda_driver::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuIpcOpenMemHandle", rc);
  CUdeviceptr base = 0;
  size_t bytes = 0;
  rc = fn_.MemGetAddressRange(&base, &bytes, ptr);
  if (rc != CUDA_SUCCESS || base != ptr || bytes == 0) {
    fn_.IpcCloseMemHandle(ptr);
    return rc != CUDA_SUCCESS ? DriverError(*driver_, "cuMemGetAddressRange", rc)
                              : CudaStatus(CudaError::kUnknown,
                                           "the opened memory's range is not the allocation's");
  }
  ipc_imports_[ptr] += 1;
  return std::make_pair(DevicePtr{ptr}, uint64_t{bytes});
}

CudaStatus DriverSession::IpcCloseMemHandle(DevicePtr ptr) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.IpcCloseMemHandle == nullptr) return IpcMissing("cuIpcCloseMemHandle");
  auto it = ipc_imports_.find(ptr);
  if (it == ipc_imports_.end()) {
    return CudaStatus(CudaError::kInvalidValue, "not memory this session opened");
  }
  if (--it->second == 0) ipc_imports_.erase(it);
  CUresult rc = fn_.IpcCloseMemHandle(ptr);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuIpcCloseMemHandle", rc);
  return CudaStatus::Ok();
}

CudaResult<std::vector<std::byte>> DriverSession::IpcGetEventHandle(EventHandle event) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.IpcGetEventHandle == nullptr) return IpcMissing("cuIpcGetEventHandle");
  FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuIpcGetEventHandle"));
  cuda_driver::CUipcEventHandle handle{};
  CUresult rc = fn_.IpcGetEventHandle(&handle, e);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuIpcGetEventHandle", rc);
  return ToBytes(handle);
}

CudaResult<EventHandle> DriverSession::IpcOpenEventHandle(const std::vector<std::byte>& handle) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.IpcOpenEventHandle == nullptr) return IpcMissing("cuIpcOpenEventHandle");
  CUevent event = nullptr;
  CUresult rc = fn_.IpcOpenEventHandle(&event, FromBytes<cuda_driver::CUipcEventHandle>(handle));
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuIpcOpenEventHandle", rc);
  events_.insert(event);
  return ToHandle<EventHandle>(event);
}

}  // namespace flyt::remote::driver_impl
