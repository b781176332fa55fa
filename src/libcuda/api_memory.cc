// libcuda.so.1: device and pinned host memory, copies and memsets (1D), memory information and
// pointer queries.
#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "libcuda/driver.h"

using flyt::libcuda::Driver;
using flyt::libcuda::Guard;
using flyt::remote::CudaError;
using flyt::remote::CudaStatus;

namespace {

std::span<const std::byte> In(const void* p, size_t n) {
  return {static_cast<const std::byte*>(p), n};
}
std::span<std::byte> Out(void* p, size_t n) { return {static_cast<std::byte*>(p), n}; }

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

CudaStatus CheckDevice(Driver& d, CUdeviceptr ptr, size_t bytes, const char* what) {
  if (!d.IsDeviceRange(ptr, bytes)) {
    return Error(CudaError::kInvalidValue, std::string(what) + ": [" + std::to_string(ptr) + ", +" +
                                               std::to_string(bytes) +
                                               ") is not device memory of this process");
  }
  return CudaStatus::Ok();
}

// The call's connection and stream, after the context and handle checks every copy makes.
struct Target {
  flyt::remote::Connection* conn = nullptr;
  uint64_t stream = 0;
};
CUresult Prepare(Driver& d, CUstream stream, bool per_thread, Target& target) {
  if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
  auto conn = d.Connection();
  if (!conn.ok()) return d.Finish(conn.status());
  auto id = d.ResolveStream(stream, per_thread);
  if (!id.ok()) return d.Finish(id.status());
  target = {*conn, *id};
  return CUDA_SUCCESS;
}

CUresult CopyHtoD(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream, bool async,
                  bool per_thread) {
  Driver& d = Driver::Get();
  Target t;
  if (CUresult r = Prepare(d, stream, per_thread, t); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_SUCCESS;
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FLYT_CU_RETURN_IF_ERROR(d, CheckDevice(d, dst, bytes, "cuMemcpyHtoD"));
  if (async) return d.Finish(t.conn->MemcpyHtoDAsync({dst, bytes, t.stream}, In(src, bytes)));
  return d.Finish(t.conn->MemcpyHtoD({dst, bytes, t.stream}, In(src, bytes)).status());
}

CUresult CopyDtoH(void* dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async,
                  bool per_thread) {
  Driver& d = Driver::Get();
  Target t;
  if (CUresult r = Prepare(d, stream, per_thread, t); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FLYT_CU_RETURN_IF_ERROR(d, CheckDevice(d, src, bytes, "cuMemcpyDtoH"));
  if (async) {
    bool synchronous = false;
    FLYT_CU_RETURN_IF_ERROR(d, d.MakeRoomForDownload(*t.conn, bytes, synchronous));
    if (!synchronous) {
      return d.Finish(t.conn->MemcpyDtoHAsync({src, bytes, t.stream}, Out(dst, bytes)));
    }
  }
  return d.Finish(t.conn->MemcpyDtoH({src, bytes, t.stream}, Out(dst, bytes)).status());
}

CUresult CopyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async,
                  bool per_thread) {
  Driver& d = Driver::Get();
  Target t;
  if (CUresult r = Prepare(d, stream, per_thread, t); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_SUCCESS;
  FLYT_CU_RETURN_IF_ERROR(d, CheckDevice(d, dst, bytes, "cuMemcpyDtoD"));
  FLYT_CU_RETURN_IF_ERROR(d, CheckDevice(d, src, bytes, "cuMemcpyDtoD"));
  CudaStatus posted = t.conn->MemcpyDtoD({dst, src, bytes, t.stream});
  if (!posted.ok() || async) return d.Finish(posted);
  // A synchronous device-to-device copy returns once the copy is done, as CUDA's does for
  // programs that read the result through another stream.
  return d.Finish(t.conn->StreamSynchronize({t.stream}).status());
}

// cuMemcpy(Async): the direction from the pointers (unified addressing).
CUresult CopyUnified(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async,
                     bool per_thread) {
  Driver& d = Driver::Get();
  const bool dst_device = d.DeviceAllocation(dst).has_value();
  const bool src_device = d.DeviceAllocation(src).has_value();
  if (dst_device && src_device) return CopyDtoD(dst, src, bytes, stream, async, per_thread);
  if (dst_device) {
    return CopyHtoD(dst, reinterpret_cast<const void*>(src), bytes, stream, async, per_thread);
  }
  if (src_device) {
    return CopyDtoH(reinterpret_cast<void*>(dst), src, bytes, stream, async, per_thread);
  }
  // Host to host: in order with the stream's work, as CUDA orders it.
  Target t;
  if (CUresult r = Prepare(d, stream, per_thread, t); r != CUDA_SUCCESS) return r;
  if (CUresult r = d.Finish(t.conn->StreamSynchronize({t.stream}).status()); r != CUDA_SUCCESS) {
    return r;
  }
  if (bytes != 0) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), bytes);
  return CUDA_SUCCESS;
}

// cuMemsetD8/D16/D32: a pattern of `width` bytes repeated `count` times. A pattern of one repeated
// byte is one Memset; any other is uploaded (in pieces of at most 64 MiB).
CUresult Set(CUdeviceptr dst, uint32_t value, size_t width, size_t count, CUstream stream,
             bool async, bool per_thread) {
  Driver& d = Driver::Get();
  Target t;
  if (CUresult r = Prepare(d, stream, per_thread, t); r != CUDA_SUCCESS) return r;
  if (count == 0) return CUDA_SUCCESS;
  if (dst % width != 0) return d.Local(CUDA_ERROR_INVALID_VALUE, "cuMemset: misaligned pointer");
  const size_t bytes = width * count;
  FLYT_CU_RETURN_IF_ERROR(d, CheckDevice(d, dst, bytes, "cuMemset"));
  std::byte pattern[4];
  std::memcpy(pattern, &value, width);
  const bool one_byte =
      std::all_of(pattern, pattern + width, [&](std::byte b) { return b == pattern[0]; });
  CudaStatus status;
  if (one_byte) {
    status = t.conn->Memset({dst, static_cast<uint8_t>(pattern[0]), bytes, t.stream});
  } else {
    constexpr size_t kPiece = size_t{64} << 20;
    std::vector<std::byte> buffer(std::min(bytes, kPiece));
    for (size_t i = 0; i < buffer.size(); i += width) std::memcpy(&buffer[i], pattern, width);
    for (size_t done = 0; done < bytes && status.ok(); done += buffer.size()) {
      const size_t n = std::min(buffer.size(), bytes - done);
      status = t.conn->MemcpyHtoDAsync({dst + done, n, t.stream}, In(buffer.data(), n));
    }
  }
  if (!status.ok() || async) return d.Finish(status);
  return d.Finish(t.conn->StreamSynchronize({t.stream}).status());
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  return Guard("cuMemAlloc_v2", [&] {
    if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    if (bytes == 0) return d.Local(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc of 0 bytes");
    auto conn = d.Connection();
    if (!conn.ok()) return d.Finish(conn.status());
    auto reply = (*conn)->Malloc({bytes});
    if (!reply.ok()) return d.Finish(reply.status());
    d.AddDeviceAllocation(reply->ptr, bytes);
    *ptr = reply->ptr;
    return d.Finish(CudaStatus::Ok());
  });
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height,
                                    unsigned int element_bytes) {
  return Guard("cuMemAllocPitch_v2", [&] {
    if (ptr == nullptr || pitch == nullptr || width == 0 || height == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    // Rows aligned as the device aligns textures' pitches (512 bytes on current GPUs).
    int alignment = 512;
    cuDeviceGetAttribute(&alignment, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 0);
    if (alignment <= 0) alignment = 512;
    const size_t a = static_cast<size_t>(alignment);
    *pitch = (width + a - 1) / a * a;
    return cuMemAlloc_v2(ptr, *pitch * height);
  });
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr ptr) {
  return Guard("cuMemFree_v2", [&] {
    Driver& d = Driver::Get();
    if (CUresult r = d.CheckInit(); r != CUDA_SUCCESS) return r;
    if (ptr == 0) return CUDA_SUCCESS;
    if (!d.RemoveDeviceAllocation(ptr)) {
      return d.Local(CUDA_ERROR_INVALID_VALUE, "cuMemFree: not an allocation of this process");
    }
    auto conn = d.Connection();
    if (!conn.ok()) return d.Finish(conn.status());
    // The driver waits for the device before it frees (the memory may be in use).
    if (CUresult r = d.Finish((*conn)->DeviceSynchronize({}).status()); r != CUDA_SUCCESS) {
      return r;
    }
    return d.Finish((*conn)->Free({ptr}));
  });
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  return Guard("cuMemGetInfo_v2", [&] {
    if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    auto conn = d.Connection();
    if (!conn.ok()) return d.Finish(conn.status());
    auto reply = (*conn)->MemGetInfo({});
    if (!reply.ok()) return d.Finish(reply.status());
    *free_bytes = reply->free_bytes;
    *total_bytes = reply->total_bytes;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  return Guard("cuMemGetAddressRange_v2", [&] {
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    auto range = d.DeviceAllocation(ptr);
    if (!range) return d.Local(CUDA_ERROR_NOT_FOUND, "cuMemGetAddressRange: not device memory");
    if (base != nullptr) *base = range->first;
    if (size != nullptr) *size = range->second;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemAllocHost_v2(void** ptr, size_t bytes) {
  return Guard("cuMemAllocHost_v2", [&] {
    if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    *ptr = d.AllocateHost(bytes, 0);
    return *ptr != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  });
}

CUresult CUDAAPI cuMemHostAlloc(void** ptr, size_t bytes, unsigned int flags) {
  return Guard("cuMemHostAlloc", [&] {
    if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    if ((flags & ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                   CU_MEMHOSTALLOC_WRITECOMBINED)) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if ((flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0) {
      // The device cannot reach this machine's memory (canMapHostMemory reads 0).
      return d.Local(CUDA_ERROR_NOT_SUPPORTED, "cuMemHostAlloc: mapped memory over the network");
    }
    *ptr = d.AllocateHost(bytes, flags);
    return *ptr != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  });
}

CUresult CUDAAPI cuMemFreeHost(void* ptr) {
  return Guard("cuMemFreeHost", [&] {
    Driver& d = Driver::Get();
    if (CUresult r = d.CheckInit(); r != CUDA_SUCCESS) return r;
    return d.FreeHost(ptr) ? CUDA_SUCCESS
                           : d.Local(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost: not ours");
  });
}

CUresult CUDAAPI cuMemHostRegister_v2(void* ptr, size_t bytes, unsigned int flags) {
  return Guard("cuMemHostRegister_v2", [&] {
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_MEMHOSTREGISTER_DEVICEMAP) != 0) {
      return d.Local(CUDA_ERROR_NOT_SUPPORTED, "cuMemHostRegister: mapped memory over the network");
    }
    return d.RegisterHost(ptr, bytes, flags) ? CUDA_SUCCESS
                                             : CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  });
}

CUresult CUDAAPI cuMemHostUnregister(void* ptr) {
  return Guard("cuMemHostUnregister", [&] {
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    return d.UnregisterHost(ptr) ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  });
}

CUresult CUDAAPI cuMemHostGetFlags(unsigned int* flags, void* ptr) {
  return Guard("cuMemHostGetFlags", [&] {
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    std::optional<unsigned> found = d.HostFlags(ptr);
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    *flags = *found;
    return CUDA_SUCCESS;
  });
}

// ---- copies ------------------------------------------------------------------------------------

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return Guard("cuMemcpyHtoD_v2", [&] { return CopyHtoD(dst, src, bytes, nullptr, false, false); });
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes) {
  return Guard("cuMemcpyHtoD_v2_ptds",
               [&] { return CopyHtoD(dst, src, bytes, nullptr, false, true); });
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream s) {
  return Guard("cuMemcpyHtoDAsync_v2", [&] { return CopyHtoD(dst, src, bytes, s, true, false); });
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t bytes,
                                           CUstream s) {
  return Guard("cuMemcpyHtoDAsync_v2_ptsz",
               [&] { return CopyHtoD(dst, src, bytes, s, true, true); });
}
CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return Guard("cuMemcpyDtoH_v2", [&] { return CopyDtoH(dst, src, bytes, nullptr, false, false); });
}
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes) {
  return Guard("cuMemcpyDtoH_v2_ptds",
               [&] { return CopyDtoH(dst, src, bytes, nullptr, false, true); });
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return Guard("cuMemcpyDtoHAsync_v2", [&] { return CopyDtoH(dst, src, bytes, s, true, false); });
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return Guard("cuMemcpyDtoHAsync_v2_ptsz",
               [&] { return CopyDtoH(dst, src, bytes, s, true, true); });
}
CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return Guard("cuMemcpyDtoD_v2", [&] { return CopyDtoD(dst, src, bytes, nullptr, false, false); });
}
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return Guard("cuMemcpyDtoD_v2_ptds",
               [&] { return CopyDtoD(dst, src, bytes, nullptr, false, true); });
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return Guard("cuMemcpyDtoDAsync_v2", [&] { return CopyDtoD(dst, src, bytes, s, true, false); });
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                           CUstream s) {
  return Guard("cuMemcpyDtoDAsync_v2_ptsz",
               [&] { return CopyDtoD(dst, src, bytes, s, true, true); });
}
CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return Guard("cuMemcpy", [&] { return CopyUnified(dst, src, bytes, nullptr, false, false); });
}
CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return Guard("cuMemcpy_ptds", [&] { return CopyUnified(dst, src, bytes, nullptr, false, true); });
}
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return Guard("cuMemcpyAsync", [&] { return CopyUnified(dst, src, bytes, s, true, false); });
}
CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return Guard("cuMemcpyAsync_ptsz", [&] { return CopyUnified(dst, src, bytes, s, true, true); });
}

// ---- memsets -----------------------------------------------------------------------------------

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  return Guard("cuMemsetD8_v2", [&] { return Set(dst, value, 1, n, nullptr, false, false); });
}
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t n) {
  return Guard("cuMemsetD8_v2_ptds", [&] { return Set(dst, value, 1, n, nullptr, false, true); });
}
CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t n) {
  return Guard("cuMemsetD16_v2", [&] { return Set(dst, value, 2, n, nullptr, false, false); });
}
CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr dst, unsigned short value, size_t n) {
  return Guard("cuMemsetD16_v2_ptds", [&] { return Set(dst, value, 2, n, nullptr, false, true); });
}
CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n) {
  return Guard("cuMemsetD32_v2", [&] { return Set(dst, value, 4, n, nullptr, false, false); });
}
CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int value, size_t n) {
  return Guard("cuMemsetD32_v2_ptds", [&] { return Set(dst, value, 4, n, nullptr, false, true); });
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
  return Guard("cuMemsetD8Async", [&] { return Set(dst, value, 1, n, s, true, false); });
}
CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
  return Guard("cuMemsetD8Async_ptsz", [&] { return Set(dst, value, 1, n, s, true, true); });
}
CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t n, CUstream s) {
  return Guard("cuMemsetD16Async", [&] { return Set(dst, value, 2, n, s, true, false); });
}
CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dst, unsigned short value, size_t n,
                                       CUstream s) {
  return Guard("cuMemsetD16Async_ptsz", [&] { return Set(dst, value, 2, n, s, true, true); });
}
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, CUstream s) {
  return Guard("cuMemsetD32Async", [&] { return Set(dst, value, 4, n, s, true, false); });
}
CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int value, size_t n, CUstream s) {
  return Guard("cuMemsetD32Async_ptsz", [&] { return Set(dst, value, 4, n, s, true, true); });
}

// ---- pointers ----------------------------------------------------------------------------------

CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  return Guard("cuPointerGetAttribute", [&] {
    if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.CheckInit(); r != CUDA_SUCCESS) return r;
    auto device = d.DeviceAllocation(ptr);
    std::optional<unsigned> host =
        device ? std::nullopt : d.HostFlags(reinterpret_cast<void*>(ptr));
    if (!device && !host) {
      return d.Local(CUDA_ERROR_INVALID_VALUE, "cuPointerGetAttribute: memory flyt does not know");
    }
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(d.PrimaryContext());
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!device) return CUDA_ERROR_INVALID_VALUE;  // mapped host memory: none here
        *static_cast<CUdeviceptr*>(data) = ptr;
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (device) return CUDA_ERROR_INVALID_VALUE;
        *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *static_cast<unsigned*>(data) = 0;
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int*>(data) = 0;
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        if (!device) return CUDA_ERROR_INVALID_VALUE;
        *static_cast<CUdeviceptr*>(data) = device->first;
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        if (!device) return CUDA_ERROR_INVALID_VALUE;
        *static_cast<size_t*>(data) = device->second;
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_MAPPED:
        *static_cast<unsigned*>(data) = device ? 1 : 0;
        return CUDA_SUCCESS;
      default:
        return d.Unsupported("cuPointerGetAttribute of this attribute");
    }
  });
}

}  // extern "C"
