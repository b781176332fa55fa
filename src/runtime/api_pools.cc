// flyt's libcudart.so.13: the CUDA runtime's pools family (issue 17). See runtime.h.
//
// Stream-ordered allocation: cudaMallocAsync / cudaMallocFromPoolAsync ask the server for a block
// of a pool (one round trip: the address comes from the device), cudaFreeAsync is posted. The
// pools themselves (caching, release threshold, accounting against the memory limit) live in the
// server (remote/handlers_pools.cc); a cudaMemPool_t here is a PoolRecord naming one.
#include <cstring>

#include "runtime/exports.h"
#include "runtime/runtime.h"

namespace flyt::runtime {

using remote::CudaError;

cudaError_t Runtime::MakeRoomForDownload(remote::Connection& conn, uint64_t bytes,
                                         bool& synchronous) {
  synchronous = false;
  uint64_t pending = conn.pending_download_bytes();
  if (pending + bytes <= remote::kMaxDownloadBytesInFlight) return cudaSuccess;
  if (pending > 0) {
    cudaError_t drained = FinishSync(conn.DeviceSynchronize({}).status());
    if (drained != cudaSuccess) return drained;
  }
  synchronous = bytes > remote::kMaxDownloadBytesInFlight;
  return cudaSuccess;
}

cudaMemPool_t Runtime::NewPool(uint64_t id) {
  auto record = std::make_unique<PoolRecord>();
  record->id = id;
  auto handle = reinterpret_cast<cudaMemPool_t>(record.get());
  MutexLock lock(pools_mu_);
  pools_.emplace(record.get(), std::move(record));
  return handle;
}

CudaResult<uint64_t> Runtime::PoolId(cudaMemPool_t pool) {
  if (pool == DefaultPool()) return uint64_t{0};
  MutexLock lock(pools_mu_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) {
    return CudaStatus(CudaError::kInvalidValue, "not a memory pool of this process");
  }
  return it->second->id;
}

bool Runtime::DropPool(cudaMemPool_t pool) {
  MutexLock lock(pools_mu_);
  if (current_pool_ == pool) current_pool_ = nullptr;
  return pools_.erase(pool) == 1;
}

cudaMemPool_t Runtime::CurrentPool() {
  MutexLock lock(pools_mu_);
  return current_pool_ != nullptr ? current_pool_ : DefaultPool();
}

void Runtime::SetCurrentPool(cudaMemPool_t pool) {
  MutexLock lock(pools_mu_);
  current_pool_ = pool == DefaultPool() ? nullptr : pool;
}

CudaStatus Runtime::MappedRefusal(const char* what) {
  return CudaStatus(CudaError::kNotSupported,
                    std::string(what) + ": mapped (zero-copy) host memory cannot be shared with "
                    "a GPU on another machine (the device's canMapHostMemory is 0); use "
                    "cudaMallocHost and cudaMemcpyAsync instead");
}

namespace {

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

uint64_t Address(const void* p) { return reinterpret_cast<uint64_t>(p); }

cudaError_t MallocFromPool(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream,
                           bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (ptr == nullptr) return rt.Finish(Error(CudaError::kInvalidValue, "null devPtr"));
  *ptr = nullptr;
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<uint64_t> pool_id = rt.PoolId(pool);
  if (!pool_id.ok()) return rt.Finish(pool_id.status());
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  if (size == 0) return cudaSuccess;
  auto reply = (*conn)->MallocAsync({*pool_id, size, *id});
  if (!reply.ok()) return rt.Finish(reply.status());
  rt.AddDeviceAllocation(reply->ptr, size);
  *ptr = reinterpret_cast<void*>(reply->ptr);
  return rt.Finish(CudaStatus::Ok());
}

cudaError_t FreeAsync(void* ptr, cudaStream_t stream, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (ptr == nullptr) return cudaSuccess;
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  if (!rt.RemoveDeviceAllocation(Address(ptr))) {
    return rt.Finish(Error(CudaError::kInvalidValue, "not a device allocation of this process"));
  }
  return rt.Finish((*conn)->FreeAsync({Address(ptr), *id}));
}

// The only device is 0 (flyt serves one GPU per connection).
CudaStatus CheckDevice(int device) {
  if (device != 0) return Error(CudaError::kInvalidDevice, "flyt serves one device, number 0");
  return CudaStatus::Ok();
}

}  // namespace
}  // namespace flyt::runtime

using flyt::remote::CudaError;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
namespace rt_impl = flyt::runtime;

extern "C" {

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) noexcept {
  return Guard("cudaMallocAsync", [&] {
    return rt_impl::MallocFromPool(devPtr, size, Runtime::Get().CurrentPool(), hStream, false);
  });
}

cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) noexcept {
  return Guard("cudaMallocAsync_ptsz", [&] {
    return rt_impl::MallocFromPool(devPtr, size, Runtime::Get().CurrentPool(), hStream, true);
  });
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream) noexcept {
  return Guard("cudaMallocFromPoolAsync",
               [&] { return rt_impl::MallocFromPool(ptr, size, memPool, stream, false); });
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream) noexcept {
  return Guard("cudaMallocFromPoolAsync_ptsz",
               [&] { return rt_impl::MallocFromPool(ptr, size, memPool, stream, true); });
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) noexcept {
  return Guard("cudaFreeAsync", [&] { return rt_impl::FreeAsync(devPtr, hStream, false); });
}

cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) noexcept {
  return Guard("cudaFreeAsync_ptsz", [&] { return rt_impl::FreeAsync(devPtr, hStream, true); });
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* poolProps) noexcept {
  return Guard("cudaMemPoolCreate", [&] {
    Runtime& rt = Runtime::Get();
    if (memPool == nullptr || poolProps == nullptr) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null pool or properties"));
    }
    if (poolProps->allocType != cudaMemAllocationTypePinned ||
        poolProps->location.type != cudaMemLocationTypeDevice || poolProps->location.id != 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue,
                                  "a pool must be of pinned memory on device 0"));
    }
    if (poolProps->handleTypes != cudaMemHandleTypeNone) {
      return rt.Finish(CudaStatus(CudaError::kNotSupported,
                                  "memory pools exportable to other processes are not supported "
                                  "by flyt (the device is on another machine)"));
    }
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    uint64_t id = rt.NewId();
    CudaStatus s = (*conn)->MemPoolCreate({id, poolProps->maxSize});
    if (!s.ok()) return rt.Finish(s);
    *memPool = rt.NewPool(id);
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) noexcept {
  return Guard("cudaMemPoolDestroy", [&] {
    Runtime& rt = Runtime::Get();
    if (memPool == rt.DefaultPool()) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "the default pool cannot be destroyed"));
    }
    auto id = rt.PoolId(memPool);
    if (!id.ok()) return rt.Finish(id.status());
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    (void)rt.DropPool(memPool);
    return rt.Finish((*conn)->MemPoolDestroy({*id}));
  });
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                    void* value) noexcept {
  return Guard("cudaMemPoolSetAttribute", [&] {
    Runtime& rt = Runtime::Get();
    if (value == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null value"));
    auto id = rt.PoolId(memPool);
    if (!id.ok()) return rt.Finish(id.status());
    uint64_t v = 0;
    if (attr >= cudaMemPoolAttrReleaseThreshold) {
      std::memcpy(&v, value, sizeof v);  // cuuint64_t
    } else {
      int i = 0;
      std::memcpy(&i, value, sizeof i);
      v = static_cast<uint64_t>(i);
    }
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    return rt.FinishSync((*conn)->MemPoolSetAttribute({*id, static_cast<uint32_t>(attr), v})
                             .status());
  });
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                    void* value) noexcept {
  return Guard("cudaMemPoolGetAttribute", [&] {
    Runtime& rt = Runtime::Get();
    if (value == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null value"));
    auto id = rt.PoolId(memPool);
    if (!id.ok()) return rt.Finish(id.status());
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto reply = (*conn)->MemPoolGetAttribute({*id, static_cast<uint32_t>(attr)});
    if (!reply.ok()) return rt.FinishSync(reply.status());
    if (attr >= cudaMemPoolAttrReleaseThreshold) {
      std::memcpy(value, &reply->value, sizeof reply->value);
    } else {
      int i = static_cast<int>(reply->value);
      std::memcpy(value, &i, sizeof i);
    }
    return rt.FinishSync(CudaStatus::Ok());
  });
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) noexcept {
  return Guard("cudaMemPoolTrimTo", [&] {
    Runtime& rt = Runtime::Get();
    auto id = rt.PoolId(memPool);
    if (!id.ok()) return rt.Finish(id.status());
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    return rt.Finish((*conn)->MemPoolTrimTo({*id, minBytesToKeep}));
  });
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) noexcept {
  return Guard("cudaDeviceGetDefaultMemPool", [&] {
    Runtime& rt = Runtime::Get();
    if (memPool == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null pool"));
    if (CudaStatus s = rt_impl::CheckDevice(device); !s.ok()) return rt.Finish(s);
    *memPool = rt.DefaultPool();
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* memPool, int device) noexcept {
  return Guard("cudaDeviceGetMemPool", [&] {
    Runtime& rt = Runtime::Get();
    if (memPool == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null pool"));
    if (CudaStatus s = rt_impl::CheckDevice(device); !s.ok()) return rt.Finish(s);
    *memPool = rt.CurrentPool();
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) noexcept {
  return Guard("cudaDeviceSetMemPool", [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt_impl::CheckDevice(device); !s.ok()) return rt.Finish(s);
    auto id = rt.PoolId(memPool);
    if (!id.ok()) return rt.Finish(id.status());
    rt.SetCurrentPool(memPool);
    return cudaSuccess;
  });
}

}  // extern "C"
