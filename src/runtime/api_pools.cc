// flyt's libcudart.so.13: the CUDA runtime's pools family (issue 17). See runtime.h.
//
// Stream-ordered allocation: cudaMallocAsync / cudaMallocFromPoolAsync ask the server for a block
// of a pool (one round trip: the address comes from the device), cudaFreeAsync is posted. The
// pools themselves (caching, release threshold, accounting against the memory limit) live in the
// server (remote_server/handlers_pools.cc); a cudaMemPool_t here is a PoolRecord naming one.
#include <algorithm>
#include <cstring>
#include <optional>
#include <tuple>

#include "runtime/exports.h"
#include "runtime/runtime.h"

// flyt's libcuda.so.1 (this library is linked against it); cuda.h's prototype has the same ABI
// (CUresult and the query result are ints).
extern "C" int cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                   unsigned long long flags, int* symbol_status);

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
                    std::string(what) +
                        ": mapped (zero-copy) host memory cannot be shared with "
                        "a GPU on another machine (the device's canMapHostMemory is 0); use "
                        "cudaMallocHost and cudaMemcpyAsync instead");
}

CudaResult<Runtime::LaunchExtras> Runtime::ReadLaunchAttributes(const cudaLaunchAttribute* attrs,
                                                                unsigned count) {
  LaunchExtras extras;
  if (count != 0 && attrs == nullptr) {
    return CudaStatus(CudaError::kInvalidValue, "null launch attributes");
  }
  for (unsigned i = 0; i < count; ++i) {
    const cudaLaunchAttribute& a = attrs[i];
    switch (a.id) {
      case cudaLaunchAttributeIgnore:
        break;
      case cudaLaunchAttributeCooperative:
        extras.cooperative = a.val.cooperative != 0;
        break;
      case cudaLaunchAttributeClusterDimension:
        extras.cluster = {a.val.clusterDim.x, a.val.clusterDim.y, a.val.clusterDim.z};
        break;
      case cudaLaunchAttributePriority:
        extras.priority = a.val.priority;
        break;
      case cudaLaunchAttributeAccessPolicyWindow:
      case cudaLaunchAttributeSynchronizationPolicy:
      case cudaLaunchAttributeClusterSchedulingPolicyPreference:
      case cudaLaunchAttributeProgrammaticStreamSerialization:
      case cudaLaunchAttributeMemSyncDomainMap:
      case cudaLaunchAttributeMemSyncDomain:
        // Hints whose absence changes no result: accepted, not forwarded.
        WarnOnce("launch-attr-" + std::to_string(a.id),
                 "cudaLaunchKernelExC: launch attribute " + std::to_string(a.id) +
                     " is accepted and ignored by flyt's remote runtime");
        break;
      case cudaLaunchAttributePreferredClusterDimension:
      case cudaLaunchAttributePreferredSharedMemoryCarveout:
        WarnOnce("launch-attr-" + std::to_string(a.id),
                 "cudaLaunchKernelExC: launch attribute " + std::to_string(a.id) +
                     " (a preference) is accepted and ignored by flyt's remote runtime");
        break;
      default:
        if (a.id > 16) {
          return CudaStatus(CudaError::kInvalidValue,
                            "unknown launch attribute " + std::to_string(a.id));
        }
        return CudaStatus(CudaError::kNotSupported,
                          "cudaLaunchKernelExC: launch attribute " + std::to_string(a.id) +
                              " is not supported by flyt's remote runtime");
    }
  }
  return extras;
}

CudaStatus Runtime::CheckLaunchExtras(remote::Connection& conn, uint64_t function_id, dim3 grid,
                                      dim3 block, size_t shared_bytes, const LaunchExtras& extras) {
  const remote::Dim3& c = extras.cluster;
  if (c.x == 0 || c.y == 0 || c.z == 0 || grid.x % c.x != 0 || grid.y % c.y != 0 ||
      grid.z % c.z != 0) {
    return CudaStatus(CudaError::kInvalidClusterSize,
                      "the grid is not a whole number of clusters of the given dimensions");
  }
  if (!extras.cooperative) return CudaStatus::Ok();
  uint32_t threads = block.x * block.y * block.z;
  auto key = std::make_tuple(function_id, threads, uint64_t{shared_bytes});
  std::optional<int32_t> per_sm;
  {
    MutexLock lock(pools_mu_);
    if (auto it = cooperative_fit_.find(key); it != cooperative_fit_.end()) per_sm = it->second;
  }
  if (!per_sm) {
    FLYT_CUDA_ASSIGN_OR_RETURN(
        remote::OccupancyMaxActiveBlocksReply reply,
        conn.OccupancyMaxActiveBlocks(
            {function_id, static_cast<int32_t>(threads), uint64_t{shared_bytes}, 0}));
    per_sm = reply.blocks;
    MutexLock lock(pools_mu_);
    cooperative_fit_[key] = *per_sm;
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(int32_t sms, Attribute(cudaDevAttrMultiProcessorCount));
  uint64_t fit = uint64_t(std::max(*per_sm, 0)) * uint64_t(std::max(sms, 0));
  uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  if (blocks > fit) {
    return CudaStatus(CudaError::kCooperativeLaunchTooLarge,
                      "a cooperative grid of " + std::to_string(blocks) + " blocks exceeds the " +
                          std::to_string(fit) + " the device holds at once");
  }
  return CudaStatus::Ok();
}

CudaStatus Runtime::LaunchWithExtras(remote::Connection& conn, uint64_t function_id, dim3 grid,
                                     dim3 block, size_t shared_bytes, uint64_t stream_id,
                                     remote::Bytes params, const LaunchExtras& extras) {
  FLYT_CUDA_RETURN_IF_ERROR(
      CheckLaunchExtras(conn, function_id, grid, block, shared_bytes, extras));
  return conn.LaunchKernelEx({function_id,
                              {grid.x, grid.y, grid.z},
                              {block.x, block.y, block.z},
                              static_cast<uint32_t>(shared_bytes),
                              stream_id,
                              std::move(params),
                              extras.cooperative ? 1u : 0u,
                              extras.cluster,
                              extras.priority});
}

bool Runtime::SetStreamAttribute(uint64_t stream_id, int attr,
                                 const cudaLaunchAttributeValue& value) {
  MutexLock lock(pools_mu_);
  stream_attributes_[{stream_id, attr}] = value;
  return true;
}

std::optional<cudaLaunchAttributeValue> Runtime::StreamAttribute(uint64_t stream_id, int attr) {
  MutexLock lock(pools_mu_);
  auto it = stream_attributes_.find({stream_id, attr});
  if (it == stream_attributes_.end()) return std::nullopt;
  return it->second;
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

cudaError_t StreamAttribute(cudaStream_t stream, cudaLaunchAttributeID attr,
                            const cudaLaunchAttributeValue* in, cudaLaunchAttributeValue* out,
                            bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (in == nullptr && out == nullptr) {
    return rt.Finish(Error(CudaError::kInvalidValue, "null value"));
  }
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  switch (attr) {
    case cudaLaunchAttributeAccessPolicyWindow:
    case cudaLaunchAttributeSynchronizationPolicy:
    case cudaLaunchAttributeMemSyncDomain:
    case cudaLaunchAttributeMemSyncDomainMap:
      break;
    case cudaLaunchAttributePriority:
      if (in != nullptr) break;  // accepted: the priority is a scheduling hint
      if (auto record = rt.FindStream(stream); record.ok() && !rt.StreamAttribute(*id, attr)) {
        std::memset(out, 0, sizeof *out);
        out->priority = record->priority;
        return cudaSuccess;
      }
      break;
    default:
      return rt.Finish(Error(CudaError::kInvalidValue, "stream attribute " + std::to_string(attr) +
                                                           " is not one of a "
                                                           "stream's"));
  }
  if (in != nullptr) {
    rt.SetStreamAttribute(*id, attr, *in);
    return cudaSuccess;
  }
  if (auto value = rt.StreamAttribute(*id, attr)) {
    *out = *value;
  } else {
    std::memset(out, 0, sizeof *out);  // the defaults: no window, the default policies
    if (attr == cudaLaunchAttributeSynchronizationPolicy) out->syncPolicy = cudaSyncPolicyAuto;
  }
  return cudaSuccess;
}

cudaError_t DriverEntryPoint(const char* symbol, void** func, unsigned cuda_version,
                             unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  Runtime& rt = Runtime::Get();
  if (symbol == nullptr || func == nullptr) {
    return rt.Finish(Error(CudaError::kInvalidValue, "null symbol or funcPtr"));
  }
  // The runtime initialises the driver before it answers (the connection is the driver's too).
  if (CudaResult<remote::Connection*> conn = rt.Connection(); !conn.ok()) {
    return rt.Finish(conn.status());
  }
  // flyt's libcuda.so.1 (this library is linked against it) answers, with its own functions;
  // the flags and the query result have the driver's numbers.
  int result = 0;
  const int rc = cuGetProcAddress_v2(symbol, func, static_cast<int>(cuda_version), flags, &result);
  if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(result);
  if (rc != 0) {
    return rt.Finish(Error(CudaError::kInvalidValue,
                           std::string("cuGetProcAddress(") + symbol + ") failed: " +
                               std::to_string(rc)));
  }
  return cudaSuccess;
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

cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool,
                              const struct cudaMemPoolProps* poolProps) noexcept {
  return Guard("cudaMemPoolCreate", [&] {
    Runtime& rt = Runtime::Get();
    if (memPool == nullptr || poolProps == nullptr) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null pool or properties"));
    }
    if (poolProps->allocType != cudaMemAllocationTypePinned ||
        poolProps->location.type != cudaMemLocationTypeDevice || poolProps->location.id != 0) {
      return rt.Finish(
          CudaStatus(CudaError::kInvalidValue, "a pool must be of pinned memory on device 0"));
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
      return rt.Finish(
          CudaStatus(CudaError::kInvalidValue, "the default pool cannot be destroyed"));
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
    return rt.FinishSync(
        (*conn)->MemPoolSetAttribute({*id, static_cast<uint32_t>(attr), v}).status());
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

cudaError_t cudaStreamSetAttribute(cudaStream_t hStream, cudaLaunchAttributeID attr,
                                   const cudaLaunchAttributeValue* value) noexcept {
  return Guard("cudaStreamSetAttribute", [&] {
    if (value == nullptr) {
      return Runtime::Get().Finish(CudaStatus(CudaError::kInvalidValue, "null value"));
    }
    return rt_impl::StreamAttribute(hStream, attr, value, nullptr, false);
  });
}

cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t hStream, cudaLaunchAttributeID attr,
                                        const cudaLaunchAttributeValue* value) noexcept {
  return Guard("cudaStreamSetAttribute_ptsz", [&] {
    if (value == nullptr) {
      return Runtime::Get().Finish(CudaStatus(CudaError::kInvalidValue, "null value"));
    }
    return rt_impl::StreamAttribute(hStream, attr, value, nullptr, true);
  });
}

cudaError_t cudaStreamGetAttribute(cudaStream_t hStream, cudaLaunchAttributeID attr,
                                   cudaLaunchAttributeValue* value_out) noexcept {
  return Guard("cudaStreamGetAttribute", [&] {
    if (value_out == nullptr) {
      return Runtime::Get().Finish(CudaStatus(CudaError::kInvalidValue, "null value"));
    }
    return rt_impl::StreamAttribute(hStream, attr, nullptr, value_out, false);
  });
}

cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t hStream, cudaLaunchAttributeID attr,
                                        cudaLaunchAttributeValue* value_out) noexcept {
  return Guard("cudaStreamGetAttribute_ptsz", [&] {
    if (value_out == nullptr) {
      return Runtime::Get().Finish(CudaStatus(CudaError::kInvalidValue, "null value"));
    }
    return rt_impl::StreamAttribute(hStream, attr, nullptr, value_out, true);
  });
}

// Persisting L2 lines are a cache hint the server's device is not told of: nothing to reset.
cudaError_t cudaCtxResetPersistingL2Cache(void) noexcept {
  return Guard("cudaCtxResetPersistingL2Cache", [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    return cudaSuccess;
  });
}

cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) noexcept {
  return Guard("cudaGetFuncBySymbol", [&] {
    Runtime& rt = Runtime::Get();
    if (functionPtr == nullptr) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null functionPtr"));
    }
    rt_impl::FunctionRecord* f = rt.FindFunction(symbolPtr);
    if (f == nullptr) f = rt.FromKernelHandle(symbolPtr);
    if (f == nullptr) {
      return rt.Finish(CudaStatus(CudaError::kInvalidDeviceFunction, "not a registered kernel"));
    }
    // The same handle cudaGetKernel gives: a name for the kernel, which this runtime accepts
    // wherever it takes a kernel (it is not a driver CUfunction).
    *functionPtr = reinterpret_cast<cudaFunction_t>(f);
    return cudaSuccess;
  });
}

// Without a version: the CUDA version this runtime stands in for. The _ptsz forms' default is
// the per-thread default stream.
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult* driverStatus) noexcept {
  return Guard("cudaGetDriverEntryPoint", [&] {
    return rt_impl::DriverEntryPoint(symbol, funcPtr, 13000, flags, driverStatus);
  });
}

cudaError_t cudaGetDriverEntryPoint_ptsz(
    const char* symbol, void** funcPtr, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult* driverStatus) noexcept {
  return Guard("cudaGetDriverEntryPoint_ptsz", [&] {
    return rt_impl::DriverEntryPoint(symbol, funcPtr, 13000,
                                     flags == cudaEnableDefault
                                         ? static_cast<unsigned long long>(cudaEnablePerThreadDefaultStream)
                                                                : flags,
                                     driverStatus);
  });
}

cudaError_t cudaGetDriverEntryPointByVersion(
    const char* symbol, void** funcPtr, unsigned int version, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult* driverStatus) noexcept {
  return Guard("cudaGetDriverEntryPointByVersion", [&] {
    return rt_impl::DriverEntryPoint(symbol, funcPtr, version, flags, driverStatus);
  });
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** funcPtr, unsigned int version, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult* driverStatus) noexcept {
  return Guard("cudaGetDriverEntryPointByVersion_ptsz", [&] {
    return rt_impl::DriverEntryPoint(symbol, funcPtr, version,
                                     flags == cudaEnableDefault
                                         ? static_cast<unsigned long long>(cudaEnablePerThreadDefaultStream)
                                                                : flags,
                                     driverStatus);
  });
}

}  // extern "C"
