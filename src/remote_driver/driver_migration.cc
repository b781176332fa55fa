// The driver backend's part of live migration (backend.h, issue 18): device memory at the address
// a migrated client's pointers hold, through the driver's virtual memory management. MallocAt
// places the allocation in chunks of whole granules (2 MiB on current GPUs; granule_chunks.h), as
// the driver maps memory only so: for each run of granules the range needs that no chunk of this
// session covers yet, it reserves exactly that virtual range (cuMemAddressReserve with the address
// as its fixed start), creates physical memory on the session's device (cuMemCreate), maps it
// over the range (cuMemMap) and makes it readable and writable by the device (cuMemSetAccess).
// Small allocations the old server's cuMemAlloc put inside one granule so share its chunk. Free
// and the session's cleanup undo the four steps for a chunk once no allocation uses it. A range
// someone else holds (in a granule the range needs) cannot be placed (kInvalidValue).
//
// A module's globals stay where the driver loads them: ModuleGetGlobalAt is Session's default.
// NOT YET RUN ON A GPU (DriverBackendGpuTest.MallocAtPlacesMemoryAtAFreedAddress checks it there).
#include <cstdint>
#include <string>

#include "cuda_driver/cuda_driver_types.h"
#include "common/strings.h"
#include "remote_driver/driver_internal.h"
#include "remote_driver/driver_session.h"

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
  if (!placed_) {
    CUmemAllocationProp prop = ChunkProperties();
    size_t granularity = 0;
    CUresult rc =
        fn_.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemGetAllocationGranularity", rc);
    placed_.emplace(granularity == 0 ? uint64_t{2} << 20 : granularity);
  }
  std::optional<std::vector<PlacedChunks::Run>> runs;
  if (address != 0) runs = placed_->Plan(address, bytes);
  if (!runs) {
    return CudaStatus(ErrorCode::kInvalidValue,
                      "cannot place " + std::to_string(bytes) + " bytes at " + HexAddress(address) +
                          ": the range is null, wraps, or overlaps memory placed already");
  }
  std::vector<CUmemGenericAllocationHandle> handles;
  for (const PlacedChunks::Run& run : *runs) {
    CudaResult<CUmemGenericAllocationHandle> handle = MapChunk(run.base, run.bytes);
    if (!handle.ok()) {
      for (size_t i = 0; i < handles.size(); ++i) {
        (void)ReleaseChunk((*runs)[i].base, (*runs)[i].bytes, handles[i]);
      }
      return handle.status();
    }
    handles.push_back(*handle);
  }
  placed_->Commit(address, bytes, *runs, std::move(handles));
  return DevicePtr{address};
}

CUmemAllocationProp DriverSession::ChunkProperties() const {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;  // the ordinal: cuDeviceGet's handle is the ordinal
  return prop;
}

CudaResult<CUmemGenericAllocationHandle> DriverSession::MapChunk(CUdeviceptr base, size_t bytes) {
  const CUmemAllocationProp prop = ChunkProperties();
  CUdeviceptr va = 0;
  CUresult rc = fn_.MemAddressReserve(&va, bytes, 0, base, 0);
  if (rc != CUDA_SUCCESS) {
    return DriverError(*driver_, "cuMemAddressReserve", rc, ErrorCode::kInvalidValue);
  }
  if (va != base) {  // the address is a hint: the driver chose another range
    fn_.MemAddressFree(va, bytes);
    return CudaStatus(ErrorCode::kInvalidValue, "the range " + HexAddress(base) + "+" +
                                                    std::to_string(bytes) +
                                                    " is taken on this device");
  }
  CUmemGenericAllocationHandle handle = 0;
  rc = fn_.MemCreate(&handle, bytes, &prop, 0);
  if (rc != CUDA_SUCCESS) {
    fn_.MemAddressFree(va, bytes);
    return DriverError(*driver_, "cuMemCreate", rc);
  }
  rc = fn_.MemMap(va, bytes, 0, handle, 0);
  if (rc != CUDA_SUCCESS) {
    fn_.MemRelease(handle);
    fn_.MemAddressFree(va, bytes);
    return DriverError(*driver_, "cuMemMap", rc);
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  rc = fn_.MemSetAccess(va, bytes, &access, 1);
  if (rc != CUDA_SUCCESS) {
    (void)ReleaseChunk(va, bytes, handle);
    return DriverError(*driver_, "cuMemSetAccess", rc);
  }
  return handle;
}

CudaStatus DriverSession::ReleaseChunk(CUdeviceptr base, size_t bytes,
                                       CUmemGenericAllocationHandle handle) {
  CudaStatus status = CudaStatus::Ok();
  auto check = [&](const char* call, CUresult rc) {
    if (rc != CUDA_SUCCESS && status.ok()) status = DriverError(*driver_, call, rc);
  };
  check("cuMemUnmap", fn_.MemUnmap(base, bytes));
  check("cuMemRelease", fn_.MemRelease(handle));
  check("cuMemAddressFree", fn_.MemAddressFree(base, bytes));
  return status;
}

CudaStatus DriverSession::FreePlaced(DevicePtr ptr, bool& was_placed) {
  std::vector<PlacedChunks::Chunk> released;
  was_placed = placed_ && placed_->Remove(ptr, released);
  CudaStatus status = CudaStatus::Ok();
  for (const PlacedChunks::Chunk& c : released) {
    CudaStatus s = ReleaseChunk(c.base, c.bytes, c.payload);
    if (status.ok()) status = s;
  }
  return status;
}

void DriverSession::ReleaseAllPlaced() {
  if (!placed_) return;
  for (const PlacedChunks::Chunk& c : placed_->TakeAll()) {
    (void)ReleaseChunk(c.base, c.bytes, c.payload);
  }
}

}  // namespace flyt::remote::driver_impl
