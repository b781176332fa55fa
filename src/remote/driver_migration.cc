// The driver backend's part of live migration (backend.h, issue 18): device memory at the address
// a migrated client's pointers hold, through the driver's virtual memory management. MallocAt
// reserves exactly that virtual range (cuMemAddressReserve with the address as its fixed start),
// creates physical memory on the session's device (cuMemCreate), maps it over the range (cuMemMap)
// and makes it readable and writable by the device (cuMemSetAccess); Free and the session's
// cleanup undo the four steps. Sizes and addresses are in the device's allocation granularity
// (2 MiB on current GPUs): an address off it cannot be placed (kInvalidValue).
//
// A module's globals stay where the driver loads them: ModuleGetGlobalAt is Session's default.
// NOT YET RUN ON A GPU (DriverBackendGpuTest.MallocAtPlacesMemoryAtAFreedAddress checks it there).
#include <cstdint>
#include <string>

#include "cuda_driver/cuda_driver_types.h"
#include "common/strings.h"
#include "remote/driver_internal.h"
#include "remote/driver_session.h"

namespace flyt::remote::driver_impl {
namespace {

using cuda_driver::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
using cuda_driver::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
using cuda_driver::CU_MEM_ALLOCATION_TYPE_PINNED;
using cuda_driver::CU_MEM_HANDLE_TYPE_NONE;
using cuda_driver::CU_MEM_LOCATION_TYPE_DEVICE;
using cuda_driver::CUmemAccessDesc;
using cuda_driver::CUmemAllocationProp;
using cuda_driver::CUmemGenericAllocationHandle;

// CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED.
constexpr CUdevice_attribute kVirtualMemoryManagementSupported = 102;

}  // namespace

bool DriverSession::CanPlaceMemory() const {
  if (fn_.MemAddressReserve == nullptr || fn_.MemAddressFree == nullptr ||
      fn_.MemCreate == nullptr || fn_.MemRelease == nullptr || fn_.MemMap == nullptr ||
      fn_.MemUnmap == nullptr || fn_.MemSetAccess == nullptr ||
      fn_.MemGetAllocationGranularity == nullptr) {
    return false;
  }
  int supported = 0;
  return fn_.DeviceGetAttribute(&supported, kVirtualMemoryManagementSupported, device_) ==
             CUDA_SUCCESS &&
         supported != 0;
}

CudaResult<DevicePtr> DriverSession::MallocAt(DevicePtr address, uint64_t bytes) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (!CanPlaceMemory()) {
    return CudaStatus(ErrorCode::kNotSupported,
                      "this driver or device has no virtual memory management (cuMemAddressReserve, "
                      "cuMemCreate, cuMemMap): memory cannot be placed at a given address");
  }
  if (bytes == 0) return CudaStatus(ErrorCode::kInvalidValue, "MallocAt of 0 bytes");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;  // the ordinal: cuDeviceGet's handle is the ordinal
  size_t granularity = 0;
  CUresult rc =
      fn_.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemGetAllocationGranularity", rc);
  if (granularity == 0) granularity = size_t{2} << 20;
  if (address == 0 || address % granularity != 0) {
    return CudaStatus(ErrorCode::kInvalidValue,
                      "address " + HexAddress(address) + " is not on this device's allocation granularity (" +
                          std::to_string(granularity) + " bytes)");
  }
  if (bytes > UINT64_MAX - granularity) {
    return CudaStatus(ErrorCode::kMemoryAllocation, "MallocAt of " + std::to_string(bytes) + " bytes");
  }
  const size_t size = (bytes + granularity - 1) / granularity * granularity;

  CUdeviceptr va = 0;
  rc = fn_.MemAddressReserve(&va, size, 0, address, 0);
  if (rc != CUDA_SUCCESS) {
    return DriverError(*driver_, "cuMemAddressReserve", rc, ErrorCode::kInvalidValue);
  }
  if (va != address) {  // the address is a hint: the driver chose another range
    fn_.MemAddressFree(va, size);
    return CudaStatus(ErrorCode::kInvalidValue,
                      "address " + HexAddress(address) + " is taken on this device");
  }
  CUmemGenericAllocationHandle handle = 0;
  rc = fn_.MemCreate(&handle, size, &prop, 0);
  if (rc != CUDA_SUCCESS) {
    fn_.MemAddressFree(va, size);
    return DriverError(*driver_, "cuMemCreate", rc);
  }
  rc = fn_.MemMap(va, size, 0, handle, 0);
  if (rc != CUDA_SUCCESS) {
    fn_.MemRelease(handle);
    fn_.MemAddressFree(va, size);
    return DriverError(*driver_, "cuMemMap", rc);
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  rc = fn_.MemSetAccess(va, size, &access, 1);
  if (rc != CUDA_SUCCESS) {
    fn_.MemUnmap(va, size);
    fn_.MemRelease(handle);
    fn_.MemAddressFree(va, size);
    return DriverError(*driver_, "cuMemSetAccess", rc);
  }
  placed_.emplace(va, PlacedAllocation{size, handle});
  return DevicePtr{va};
}

CudaStatus DriverSession::ReleasePlaced(CUdeviceptr ptr, const PlacedAllocation& placed) {
  CudaStatus status = CudaStatus::Ok();
  auto check = [&](const char* call, CUresult rc) {
    if (rc != CUDA_SUCCESS && status.ok()) status = DriverError(*driver_, call, rc);
  };
  check("cuMemUnmap", fn_.MemUnmap(ptr, placed.bytes));
  check("cuMemRelease", fn_.MemRelease(placed.handle));
  check("cuMemAddressFree", fn_.MemAddressFree(ptr, placed.bytes));
  return status;
}

}  // namespace flyt::remote::driver_impl
