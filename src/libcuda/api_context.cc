// libcuda.so.1: primary and created contexts, the current context of each thread (driver.h says
// what a context is here: every context of the device is the server's one context for this
// process).
#include <cuda.h>

#include <map>
#include <optional>

#include "common/mutex.h"
#include "libcuda/driver.h"

using flyt::libcuda::ContextRecord;
using flyt::libcuda::Driver;
using flyt::libcuda::Guard;

namespace {

ContextRecord* Record(CUcontext context) { return reinterpret_cast<ContextRecord*>(context); }
CUcontext Handle(ContextRecord* context) { return reinterpret_cast<CUcontext>(context); }

// The context a call names: `context`, or the current one when null.
CUresult Resolve(CUcontext context, ContextRecord** out) {
  Driver& d = Driver::Get();
  if (CUresult init = d.CheckInit(); init != CUDA_SUCCESS) return init;
  ContextRecord* record = context == nullptr ? d.Current() : Record(context);
  if (record == nullptr) return d.Local(CUDA_ERROR_INVALID_CONTEXT, "no current context");
  if (!d.IsContext(record)) return d.Local(CUDA_ERROR_INVALID_CONTEXT, "not a context");
  *out = record;
  return CUDA_SUCCESS;
}

constexpr unsigned kSchedMask = CU_CTX_SCHED_MASK;
constexpr unsigned kKnownFlags = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                                 CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE |
                                 CU_CTX_SYNC_MEMOPS;

// The process's limits (one device, one server context), the driver's defaults until set.
flyt::Mutex limits_mu;
std::map<int, size_t>& Limits() {
  static auto* limits = new std::map<int, size_t>{
      {CU_LIMIT_STACK_SIZE, 1024},
      {CU_LIMIT_PRINTF_FIFO_SIZE, 1 << 20},
      {CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20},
      {CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 2},
      {CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 2048},
      {CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 64},
      {CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0},
      {CU_LIMIT_CIG_ENABLED, 0},
      {CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED, 0},
  };
  return *limits;
}
std::optional<size_t> LimitValue(CUlimit limit) {
  flyt::MutexLock lock(limits_mu);
  auto it = Limits().find(limit);
  if (it == Limits().end()) return std::nullopt;
  return it->second;
}
void SetLimitValue(CUlimit limit, size_t value) {
  flyt::MutexLock lock(limits_mu);
  Limits()[limit] = value;
}

CUresult CreateContext(CUcontext* context, unsigned flags, CUdevice device) {
  Driver& d = Driver::Get();
  if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult ok = Driver::Get().CheckDevice(device); ok != CUDA_SUCCESS) return ok;
  if ((flags & ~kKnownFlags) != 0 || (flags & kSchedMask) == kSchedMask) {
    return d.Local(CUDA_ERROR_INVALID_VALUE, "cuCtxCreate: unknown flags");
  }
  ContextRecord* record = d.NewContext(device, flags);
  d.Push(record);  // a new context is made current
  *context = Handle(record);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  return Guard("cuDevicePrimaryCtxRetain", [&] {
    if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult ok = Driver::Get().CheckDevice(device); ok != CUDA_SUCCESS) return ok;
    Driver& d = Driver::Get();
    d.RetainPrimary();
    *context = Handle(d.PrimaryContext());
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  return Guard("cuDevicePrimaryCtxRelease_v2", [&] {
    if (CUresult ok = Driver::Get().CheckDevice(device); ok != CUDA_SUCCESS) return ok;
    // The last release leaves the server's context as it is (its memory stays until the
    // process ends or a reset): docs/design.md, "libcuda.so.1".
    if (!Driver::Get().ReleasePrimary()) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  return Guard("cuDevicePrimaryCtxGetState", [&] {
    if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult ok = Driver::Get().CheckDevice(device); ok != CUDA_SUCCESS) return ok;
    Driver& d = Driver::Get();
    *flags = d.PrimaryContext()->flags;
    *active = d.primary_active() ? 1 : 0;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice device, unsigned int flags) {
  return Guard("cuDevicePrimaryCtxSetFlags_v2", [&] {
    if (CUresult ok = Driver::Get().CheckDevice(device); ok != CUDA_SUCCESS) return ok;
    Driver& d = Driver::Get();
    if ((flags & ~kKnownFlags) != 0 || (flags & kSchedMask) == kSchedMask) {
      return d.Local(CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxSetFlags: unknown flags");
    }
    d.PrimaryContext()->flags = flags;  // scheduling hints: the server's context is unchanged
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice device) {
  return Guard("cuDevicePrimaryCtxReset_v2", [&] {
    if (CUresult ok = Driver::Get().CheckDevice(device); ok != CUDA_SUCCESS) return ok;
    Driver& d = Driver::Get();
    auto conn = d.Connection();
    if (!conn.ok()) return d.Finish(conn.status());
    while (d.ReleasePrimary()) {
    }
    return d.Finish((*conn)->DeviceSynchronize({}).status());
  });
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext* context, CUctxCreateParams* params, unsigned int flags,
                                CUdevice device) {
  return Guard("cuCtxCreate_v4", [&] {
    if (params != nullptr &&
        (params->execAffinityParams != nullptr || params->cigParams != nullptr)) {
      return Driver::Get().Unsupported("cuCtxCreate_v4 with execution affinity or CIG parameters");
    }
    return CreateContext(context, flags, device);
  });
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext* context, unsigned int flags, CUdevice device) {
  return Guard("cuCtxCreate_v2", [&] { return CreateContext(context, flags, device); });
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext context) {
  return Guard("cuCtxDestroy_v2", [&] {
    Driver& d = Driver::Get();
    if (CUresult init = d.CheckInit(); init != CUDA_SUCCESS) return init;
    ContextRecord* record = Record(context);
    if (record == nullptr || record->primary || !d.DestroyContext(record)) {
      return d.Local(CUDA_ERROR_INVALID_CONTEXT, "cuCtxDestroy: not a created context");
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext context) {
  return Guard("cuCtxPushCurrent_v2", [&] {
    Driver& d = Driver::Get();
    if (CUresult init = d.CheckInit(); init != CUDA_SUCCESS) return init;
    if (context == nullptr || !d.IsContext(Record(context))) {
      return d.Local(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPushCurrent: not a context");
    }
    d.Push(Record(context));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* context) {
  return Guard("cuCtxPopCurrent_v2", [&] {
    Driver& d = Driver::Get();
    if (CUresult init = d.CheckInit(); init != CUDA_SUCCESS) return init;
    ContextRecord* top = d.Pop();
    if (top == nullptr) return d.Local(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPopCurrent: none");
    if (context != nullptr) *context = Handle(top);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
  return Guard("cuCtxSetCurrent", [&] {
    Driver& d = Driver::Get();
    if (CUresult init = d.CheckInit(); init != CUDA_SUCCESS) return init;
    if (context != nullptr && !d.IsContext(Record(context))) {
      return d.Local(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent: not a context");
    }
    d.SetCurrent(Record(context));
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* context) {
  return Guard("cuCtxGetCurrent", [&] {
    if (context == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult init = d.CheckInit(); init != CUDA_SUCCESS) return init;
    *context = Handle(d.Current());
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  return Guard("cuCtxGetDevice", [&] {
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(nullptr, &record); r != CUDA_SUCCESS) return r;
    *device = record->device;
    return CUDA_SUCCESS;
  });
}

// CUDA 13: of a given context (null: the current one).
CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext context) {
  return Guard("cuCtxGetDevice_v2", [&] {
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(context, &record); r != CUDA_SUCCESS) return r;
    *device = record->device;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  return Guard("cuCtxGetFlags", [&] {
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(nullptr, &record); r != CUDA_SUCCESS) return r;
    *flags = record->flags;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSetFlags(unsigned int flags) {
  return Guard("cuCtxSetFlags", [&] {
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(nullptr, &record); r != CUDA_SUCCESS) return r;
    if ((flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
    record->flags = flags;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext context, unsigned int* version) {
  return Guard("cuCtxGetApiVersion", [&] {
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(context, &record); r != CUDA_SUCCESS) return r;
    *version = 3020;  // what the driver reports for every context since the v2 ABI
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetId(CUcontext context, unsigned long long* id) {
  return Guard("cuCtxGetId", [&] {
    if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(context, &record); r != CUDA_SUCCESS) return r;
    *id = reinterpret_cast<uintptr_t>(record);
    return CUDA_SUCCESS;
  });
}

namespace {
CUresult SynchronizeContext(CUcontext context) {
  Driver& d = Driver::Get();
  ContextRecord* record = nullptr;
  if (CUresult r = Resolve(context, &record); r != CUDA_SUCCESS) return r;
  auto conn = d.Connection();
  if (!conn.ok()) return d.Finish(conn.status());
  return d.Finish((*conn)->DeviceSynchronize({}).status());
}
}  // namespace

CUresult CUDAAPI cuCtxSynchronize(void) {
  return Guard("cuCtxSynchronize", [&] { return SynchronizeContext(nullptr); });
}

// CUDA 13: of a given context (null: the current one).
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext context) {
  return Guard("cuCtxSynchronize_v2", [&] { return SynchronizeContext(context); });
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  return Guard("cuCtxGetStreamPriorityRange", [&] {
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(nullptr, &record); r != CUDA_SUCCESS) return r;
    // What every GPU since Volta reports.
    if (least != nullptr) *least = 0;
    if (greatest != nullptr) *greatest = -5;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache* config) {
  return Guard("cuCtxGetCacheConfig", [&] {
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(nullptr, &record); r != CUDA_SUCCESS) return r;
    *config = CU_FUNC_CACHE_PREFER_NONE;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config) {
  return Guard("cuCtxSetCacheConfig", [&] {
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(nullptr, &record); r != CUDA_SUCCESS) return r;
    if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;  // a hint, as on devices whose L1/shared split is fixed
  });
}

// Limits are kept here, as flyt's runtime keeps cudaDeviceSetLimit's: the server's context keeps
// its own (the driver's defaults), so a limit set is what later reads return, not what the GPU
// enforces (docs/design.md, "libcuda.so.1").
CUresult CUDAAPI cuCtxGetLimit(size_t* value, CUlimit limit) {
  return Guard("cuCtxGetLimit", [&] {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(nullptr, &record); r != CUDA_SUCCESS) return r;
    if (limit == CU_LIMIT_SHMEM_SIZE) {  // not a CIG context: what one block may opt in to
      int bytes = 0;
      if (CUresult r = cuDeviceGetAttribute(
              &bytes, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, record->device);
          r != CUDA_SUCCESS) {
        return r;
      }
      *value = static_cast<size_t>(bytes);
      return CUDA_SUCCESS;
    }
    std::optional<size_t> found = LimitValue(limit);
    if (!found) return CUDA_ERROR_UNSUPPORTED_LIMIT;
    *value = *found;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  return Guard("cuCtxSetLimit", [&] {
    ContextRecord* record = nullptr;
    if (CUresult r = Resolve(nullptr, &record); r != CUDA_SUCCESS) return r;
    if (limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED) {
      return CUDA_ERROR_INVALID_VALUE;  // queries only
    }
    if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128) return CUDA_ERROR_INVALID_VALUE;
    if (!LimitValue(limit)) return CUDA_ERROR_UNSUPPORTED_LIMIT;
    SetLimitValue(limit, value);
    return CUDA_SUCCESS;
  });
}

}  // extern "C"

// The first ABIs of the primary-context calls (CUDA 7.0): the same calls.
extern "C" {
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice device) {
  return cuDevicePrimaryCtxRelease_v2(device);
}
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice device) {
  return cuDevicePrimaryCtxReset_v2(device);
}
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(device, flags);
}
}  // extern "C"
