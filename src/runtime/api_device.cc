// Device management, versions and errors.
//
// A flyt GPU server serves one device, ordinal 0. Device properties cross the wire field by field
// (remote/device_props.def) and are written into this CUDA version's cudaDeviceProp; they are
// fetched once and cached, like the attributes.
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "runtime/exports.h"
#include "runtime/runtime.h"

namespace flyt::runtime {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

// The numbers in device_props.def are the toolkit's.
#define FLYT_DEVICE_PROP(field, attr, name)                                     \
  static_assert(static_cast<int>(cudaDevAttr##name) == (attr), "attribute of " #field);
#include "remote/device_props.def"
#undef FLYT_DEVICE_PROP

// And so are the error codes.
#define cudaErrorSuccess cudaSuccess
#define FLYT_CUDA_ERROR(name, value, sticky, text) \
  static_assert(static_cast<int>(cudaError##name) == (value), "error code " #name);
#include "cuda/cuda_errors.def"
#undef FLYT_CUDA_ERROR
#undef cudaErrorSuccess

using PropSetter = void (*)(cudaDeviceProp&, int64_t);
const std::unordered_map<std::string_view, PropSetter>& PropSetters() {
  static const auto* setters = new std::unordered_map<std::string_view, PropSetter>{
#define FLYT_DEVICE_PROP(field, attr, name)                                          \
  {#field, [](cudaDeviceProp& p, int64_t v) {                                        \
     p.field = static_cast<std::remove_reference_t<decltype(p.field)>>(v);           \
   }},
#include "remote/device_props.def"
#undef FLYT_DEVICE_PROP
  };
  return *setters;
}

CudaStatus CheckDevice(int device) {
  if (device != 0) {
    return Error(CudaError::kInvalidDevice,
                 "device " + std::to_string(device) + ": a flyt GPU server has one device, 0");
  }
  return CudaStatus::Ok();
}

constexpr size_t kDefaultLimits[] = {
    1024,     // cudaLimitStackSize
    1 << 20,  // cudaLimitPrintfFifoSize
    8 << 20,  // cudaLimitMallocHeapSize
    2,        // cudaLimitDevRuntimeSyncDepth
    2048,     // cudaLimitDevRuntimePendingLaunchCount
    64,       // cudaLimitMaxL2FetchGranularity
    0,        // cudaLimitPersistingL2CacheSize
};

// Takes deferred errors that already came back; with FLYT_STRICT_ERRORS=1 first asks the server,
// so that launch errors it found are reported by cudaGetLastError right after the launch, where
// CUDA reports them (one round trip, only when something was posted since the last reply).
void CollectLaunchErrors(Runtime& rt) {
  if (rt.strict_errors()) {
    auto conn = rt.Connection();
    if (conn.ok() && (*conn)->HasUnacknowledgedPosts()) {
      rt.Finish((*conn)->Sync({}).status());
      return;
    }
  }
  rt.Finish(CudaStatus::Ok());
}

}  // namespace
}  // namespace flyt::runtime

using flyt::remote::CudaError;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) noexcept {
  return Guard("cudaGetDeviceCount", [&] {
    Runtime& rt = Runtime::Get();
    if (count == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null count"));
    *count = 0;
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    *count = (*conn)->server().device_count;
    return cudaSuccess;
  });
}

cudaError_t cudaSetDevice(int device) noexcept {
  return Guard("cudaSetDevice", [&] {
    Runtime& rt = Runtime::Get();
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    return rt.Finish(flyt::runtime::CheckDevice(device));
  });
}

cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) noexcept {
  return cudaSetDevice(device);
}

cudaError_t cudaGetDevice(int* device) noexcept {
  if (device == nullptr) return flyt::runtime::LocalError(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaChooseDevice(int* device, const struct cudaDeviceProp* prop) noexcept {
  if (device == nullptr || prop == nullptr) return flyt::runtime::LocalError(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) noexcept {
  return Guard("cudaGetDeviceProperties", [&] {
    Runtime& rt = Runtime::Get();
    if (prop == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null prop"));
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    if (CudaStatus s = flyt::runtime::CheckDevice(device); !s.ok()) return rt.Finish(s);
    auto props = rt.Properties();
    if (!props.ok()) return rt.Finish(props.status());
    std::memset(prop, 0, sizeof *prop);
    std::snprintf(prop->name, sizeof prop->name, "%s", (*props)->name.c_str());
    std::memcpy(prop->uuid.bytes, (*props)->uuid.data(),
                std::min(sizeof prop->uuid.bytes, (*props)->uuid.size()));
    const auto& setters = flyt::runtime::PropSetters();
    for (const flyt::remote::NamedValue& v : (*props)->values) {
      if (v.name == "totalGlobalMem") {
        prop->totalGlobalMem = static_cast<size_t>(v.value);
      } else if (auto it = setters.find(v.name); it != setters.end()) {
        it->second(*prop, v.value);
      }
    }
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) noexcept {
  return Guard("cudaDeviceGetAttribute", [&] {
    Runtime& rt = Runtime::Get();
    if (value == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null value"));
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    if (CudaStatus s = flyt::runtime::CheckDevice(device); !s.ok()) return rt.Finish(s);
    auto v = rt.Attribute(static_cast<uint32_t>(attr));
    if (!v.ok()) return rt.Finish(v.status());
    *value = *v;
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceSynchronize() noexcept {
  return Guard("cudaDeviceSynchronize", [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    if (auto r = rt.CaptureUnsafe()) return rt.Finish(*r);  // [issue 17: graphs]
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    return rt.FinishSync((*conn)->DeviceSynchronize({}).status());
  });
}

cudaError_t cudaDeviceReset() noexcept {
  return Guard("cudaDeviceReset", [&] {
    Runtime& rt = Runtime::Get();
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    CudaStatus status = rt.Reset();
    (void)(*conn)->TakeAsyncError();  // errors of work the reset threw away
    return rt.Finish(status);
  });
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) noexcept {
  return Guard("cudaMemGetInfo", [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto info = (*conn)->MemGetInfo({});
    if (!info.ok()) return rt.Finish(info.status());
    if (free) *free = static_cast<size_t>(info->free_bytes);
    if (total) *total = static_cast<size_t>(info->total_bytes);
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaDriverGetVersion(int* driverVersion) noexcept {
  return Guard("cudaDriverGetVersion", [&] {
    if (driverVersion == nullptr) return flyt::runtime::LocalError(cudaErrorInvalidValue);
    // CUDA answers 0 when there is no driver; without a server there is none.
    *driverVersion = Runtime::Get().driver_version();
    return cudaSuccess;
  });
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) noexcept {
  if (runtimeVersion == nullptr) return flyt::runtime::LocalError(cudaErrorInvalidValue);
  *runtimeVersion = 13000;  // the CUDA version this library stands in for
  return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) noexcept {
  return Guard("cudaSetDeviceFlags", [&] {
    constexpr unsigned kKnown = cudaDeviceScheduleMask | cudaDeviceMapHost |
                                cudaDeviceLmemResizeToMax | cudaDeviceSyncMemops;
    if ((flags & ~kKnown) != 0) {
      return Runtime::Get().Finish(CudaStatus(CudaError::kInvalidValue, "unknown device flags"));
    }
    Runtime::Get().device_flags = flags;
    return cudaSuccess;
  });
}

cudaError_t cudaGetDeviceFlags(unsigned int* flags) noexcept {
  if (flags == nullptr) return flyt::runtime::LocalError(cudaErrorInvalidValue);
  *flags = Runtime::Get().device_flags.load();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) noexcept {
  // The range every GPU since Volta reports.
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetLimit(size_t* pValue, enum cudaLimit limit) noexcept {
  return Guard("cudaDeviceGetLimit", [&] {
    Runtime& rt = Runtime::Get();
    auto index = static_cast<size_t>(limit);
    if (pValue == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null value"));
    if (index >= std::size(flyt::runtime::kDefaultLimits)) {
      return rt.Finish(CudaStatus(CudaError::kUnsupportedLimit, "unknown limit"));
    }
    flyt::MutexLock lock(rt.limits_mu);
    auto it = rt.limits.find(static_cast<int>(limit));
    *pValue = it != rt.limits.end() ? it->second : flyt::runtime::kDefaultLimits[index];
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) noexcept {
  return Guard("cudaDeviceSetLimit", [&] {
    Runtime& rt = Runtime::Get();
    auto index = static_cast<size_t>(limit);
    if (index >= std::size(flyt::runtime::kDefaultLimits)) {
      return rt.Finish(CudaStatus(CudaError::kUnsupportedLimit, "unknown limit"));
    }
    rt.WarnOnce("limit-" + std::to_string(index),
                "cudaDeviceSetLimit(" + std::to_string(index) + ", " + std::to_string(value) +
                    ") is remembered but not applied on the flyt GPU server");
    flyt::MutexLock lock(rt.limits_mu);
    rt.limits[static_cast<int>(limit)] = value;
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache* pCacheConfig) noexcept {
  if (pCacheConfig == nullptr) return flyt::runtime::LocalError(cudaErrorInvalidValue);
  *pCacheConfig = static_cast<cudaFuncCache>(Runtime::Get().cache_config.load());
  return cudaSuccess;
}

cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache cacheConfig) noexcept {
  Runtime::Get().cache_config = static_cast<int>(cacheConfig);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig* pConfig) noexcept {
  if (pConfig == nullptr) return flyt::runtime::LocalError(cudaErrorInvalidValue);
  *pConfig = static_cast<cudaSharedMemConfig>(Runtime::Get().shared_mem_config.load());
  return cudaSuccess;
}

cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config) noexcept {
  Runtime::Get().shared_mem_config = static_cast<int>(config);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) noexcept {
  if (canAccessPeer == nullptr) return flyt::runtime::LocalError(cudaErrorInvalidValue);
  if (device != 0 || peerDevice != 0) return flyt::runtime::LocalError(cudaErrorInvalidDevice);
  *canAccessPeer = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) noexcept {
  return Guard("cudaDeviceGetPCIBusId", [&] {
    Runtime& rt = Runtime::Get();
    if (pciBusId == nullptr || len <= 0) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "no buffer"));
    }
    if (CudaStatus s = flyt::runtime::CheckDevice(device); !s.ok()) return rt.Finish(s);
    auto domain = rt.Attribute(50), bus = rt.Attribute(33), dev = rt.Attribute(34);
    if (!domain.ok()) return rt.Finish(domain.status());
    if (!bus.ok()) return rt.Finish(bus.status());
    if (!dev.ok()) return rt.Finish(dev.status());
    std::snprintf(pciBusId, static_cast<size_t>(len), "%08X:%02X:%02X.0",
                  static_cast<unsigned>(*domain), static_cast<unsigned>(*bus),
                  static_cast<unsigned>(*dev));
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) noexcept {
  if (device == nullptr || pciBusId == nullptr) {
    return flyt::runtime::LocalError(cudaErrorInvalidValue);
  }
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaSetValidDevices(int* device_arr, int len) noexcept {
  if (len < 0 || (len > 0 && device_arr == nullptr)) {
    return flyt::runtime::LocalError(cudaErrorInvalidValue);
  }
  for (int i = 0; i < len; ++i) {
    if (device_arr[i] != 0) return flyt::runtime::LocalError(cudaErrorInvalidDevice);
  }
  return cudaSuccess;
}

cudaError_t cudaProfilerStart() noexcept { return cudaSuccess; }
cudaError_t cudaProfilerStop() noexcept { return cudaSuccess; }

cudaError_t cudaGetLastError() noexcept {
  return Guard("cudaGetLastError", [&] {
    Runtime& rt = Runtime::Get();
    flyt::runtime::CollectLaunchErrors(rt);
    return flyt::runtime::ToCuda(rt.errors().GetLast());
  });
}

cudaError_t cudaPeekAtLastError() noexcept {
  return Guard("cudaPeekAtLastError", [&] {
    Runtime& rt = Runtime::Get();
    flyt::runtime::CollectLaunchErrors(rt);
    return flyt::runtime::ToCuda(rt.errors().PeekLast());
  });
}

const char* cudaGetErrorString(cudaError_t error) noexcept {
  return flyt::remote::CudaErrorDescription(flyt::runtime::FromCuda(error)).data();
}

const char* cudaGetErrorName(cudaError_t error) noexcept {
  return flyt::remote::CudaErrorName(flyt::runtime::FromCuda(error)).data();
}

struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                   enum cudaChannelFormatKind f) noexcept {
  cudaChannelFormatDesc desc;
  desc.x = x;
  desc.y = y;
  desc.z = z;
  desc.w = w;
  desc.f = f;
  return desc;
}

}  // extern "C"
