// Registration (what nvcc's host code calls at start-up), kernel launches and kernel queries.
//
// CUDA 13's nvcc-generated stubs, per kernel: __cudaGetKernel(&handle, stub) once, then at each
// launch __cudaPopCallConfiguration (what `<<<...>>>` pushed with __cudaPushCallConfiguration)
// and __cudaLaunchKernel(handle, grid, block, args, shmem, stream) — the _ptsz variant under
// --default-stream per-thread. `args` holds one pointer per kernel parameter; flyt copies each
// argument into one flat parameter buffer at the offset the kernel's cubin (.nv.info) or PTX
// gives, and posts the launch without waiting.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/exports.h"
#include "cuda/image.h"
#include "runtime/runtime.h"

namespace flyt::runtime {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

struct CallConfiguration {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
};

std::vector<CallConfiguration>& ConfigStack() {
  static thread_local std::vector<CallConfiguration> stack;
  return stack;
}

// The checks the CUDA runtime makes before a launch leaves the process, against the device's
// limits, so that `kernel<<<bad>>>(); cudaGetLastError()` reports them where CUDA does.
CudaStatus CheckConfiguration(Runtime& rt, dim3 grid, dim3 block, size_t shared_bytes) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 ||
      block.z == 0) {
    return Error(CudaError::kInvalidConfiguration, "a grid or block dimension is 0");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(Runtime::LaunchLimits max, rt.Limits());
  struct Limit {
    uint64_t value;
    int32_t max;
    const char* what;
  };
  const Limit limits[] = {
      {block.x, max.block[0], "block.x"}, {block.y, max.block[1], "block.y"},
      {block.z, max.block[2], "block.z"}, {grid.x, max.grid[0], "grid.x"},
      {grid.y, max.grid[1], "grid.y"},    {grid.z, max.grid[2], "grid.z"},
      {uint64_t{block.x} * block.y * block.z, max.threads, "threads per block"},
  };
  for (const Limit& limit : limits) {
    if (limit.max > 0 && limit.value > static_cast<uint64_t>(limit.max)) {
      return Error(CudaError::kInvalidConfiguration,
                   std::string(limit.what) + " " + std::to_string(limit.value) +
                       " exceeds the device's " + std::to_string(limit.max));
    }
  }
  if (max.shared_optin > 0 && shared_bytes > static_cast<size_t>(max.shared_optin)) {
    return Error(CudaError::kInvalidValue, "dynamic shared memory " +
                                               std::to_string(shared_bytes) +
                                               " exceeds the device's " +
                                               std::to_string(max.shared_optin));
  }
  return CudaStatus::Ok();
}

CudaStatus LaunchStatus(Runtime& rt, FunctionRecord* function, dim3 grid, dim3 block, void** args,
                        size_t shared_bytes, cudaStream_t stream, bool per_thread,
                        const Runtime::LaunchExtras* extras = nullptr) {  // [issue 17: pools]
  FLYT_CUDA_RETURN_IF_ERROR(rt.StickyStatus());
  if (function == nullptr) {
    return Error(CudaError::kInvalidDeviceFunction,
                 "the launched function is not a kernel this program registered");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, rt.Connection());
  FLYT_CUDA_RETURN_IF_ERROR(CheckConfiguration(rt, grid, block, shared_bytes));
  FLYT_CUDA_ASSIGN_OR_RETURN(uint64_t stream_id, rt.ResolveStream(stream, per_thread));
  FLYT_CUDA_ASSIGN_OR_RETURN(LaunchTarget target, rt.PrepareLaunch(*function));
  const cuda::KernelInfo& layout = *target.layout;
  Result<remote::Bytes> packed = cuda::PackParameters(layout, args);
  if (!packed.ok()) {
    return Error(args == nullptr ? CudaError::kInvalidValue : CudaError::kInvalidKernelImage,
                 packed.status().message());
  }
  remote::Bytes params = std::move(packed).value();
  // A launch with attributes (cooperative, cluster, priority) is not recorded into a graph: on a
  // capturing stream it is refused as an operation the capture does not support.
  if (extras != nullptr && rt.CaptureActive()) {  // [issue 17: graphs, pools]
    if (auto r = rt.CaptureSync(stream_id)) return *r;
  }
  if (auto r = rt.CaptureKernel(stream_id, function, grid, block,  // [issue 17: graphs]
                                static_cast<uint32_t>(shared_bytes), std::move(params))) {
    return *r;  // [issue 17: graphs]
  }
  FLYT_CUDA_RETURN_IF_ERROR(rt.ManagedBeforeLaunch(stream_id));  // [issue 17: managed]
  if (extras != nullptr) {  // [issue 17: pools] cooperative, cluster, priority
    return rt.LaunchWithExtras(*conn, target.function_id, grid, block, shared_bytes, stream_id,
                               std::move(params), *extras);
  }  // [issue 17: pools]
  return conn->LaunchKernel({target.function_id,
                             {grid.x, grid.y, grid.z},
                             {block.x, block.y, block.z},
                             static_cast<uint32_t>(shared_bytes),
                             stream_id,
                             std::move(params)});
}

cudaError_t Launch(const char* name, FunctionRecord* function, dim3 grid, dim3 block, void** args,
                   size_t shared_bytes, cudaStream_t stream, bool per_thread,
                   const Runtime::LaunchExtras* extras = nullptr) noexcept {  // [issue 17: pools]
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    if (shared_bytes > UINT32_MAX) {
      return rt.Finish(Error(CudaError::kInvalidValue, "dynamic shared memory too large"));
    }
    return rt.Finish(
        LaunchStatus(rt, function, grid, block, args, shared_bytes, stream, per_thread, extras));
  });
}

// A host function pointer or a cudaKernel_t (CUDA accepts both where it takes `const void* func`).
FunctionRecord* FunctionOf(const void* func) {
  Runtime& rt = Runtime::Get();
  if (FunctionRecord* f = rt.FindFunction(func)) return f;
  return rt.FromKernelHandle(func);
}

cudaError_t LaunchEx(const char* name, const cudaLaunchConfig_t* config, const void* func,
                     void** args, bool per_thread) noexcept {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    if (config == nullptr) return rt.Finish(Error(CudaError::kInvalidValue, "null config"));
    // [issue 17: pools] the attributes: cooperative, cluster dimensions, priority
    CudaResult<Runtime::LaunchExtras> extras =
        rt.ReadLaunchAttributes(config->attrs, config->numAttrs);
    if (!extras.ok()) return rt.Finish(extras.status());
    return Launch(name, FunctionOf(func), config->gridDim, config->blockDim, args,
                  config->dynamicSmemBytes, config->stream, per_thread,
                  extras->plain() ? nullptr : &*extras);
  });
}

// [issue 17: pools] cudaLaunchCooperativeKernel(+_ptsz)
cudaError_t LaunchCooperative(const char* name, const void* func, dim3 grid, dim3 block,
                              void** args, size_t shared_bytes, cudaStream_t stream,
                              bool per_thread) noexcept {
  Runtime::LaunchExtras extras;
  extras.cooperative = true;
  return Launch(name, FunctionOf(func), grid, block, args, shared_bytes, stream, per_thread,
                &extras);
}

cudaError_t FuncGetAttributes(cudaFuncAttributes* attr, const void* func) noexcept {
  return Guard("cudaFuncGetAttributes", [&] {
    Runtime& rt = Runtime::Get();
    if (attr == nullptr) return rt.Finish(Error(CudaError::kInvalidValue, "null attributes"));
    FunctionRecord* f = FunctionOf(func);
    if (f == nullptr) {
      return rt.Finish(Error(CudaError::kInvalidDeviceFunction, "not a registered kernel"));
    }
    CudaResult<std::map<uint32_t, int32_t>> values = rt.FunctionAttributes(*f);
    if (!values.ok()) return rt.Finish(values.status());
    auto get = [&](remote::FunctionAttribute a) {
      auto it = values->find(static_cast<uint32_t>(a));
      return it == values->end() ? 0 : it->second;
    };
    using A = remote::FunctionAttribute;
    std::memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = get(A::kMaxThreadsPerBlock);
    attr->sharedSizeBytes = static_cast<size_t>(get(A::kSharedSizeBytes));
    attr->constSizeBytes = static_cast<size_t>(get(A::kConstSizeBytes));
    attr->localSizeBytes = static_cast<size_t>(get(A::kLocalSizeBytes));
    attr->numRegs = get(A::kNumRegs);
    attr->ptxVersion = get(A::kPtxVersion);
    attr->binaryVersion = get(A::kBinaryVersion);
    attr->cacheModeCA = get(A::kCacheModeCa);
    attr->maxDynamicSharedSizeBytes = get(A::kMaxDynamicSharedSizeBytes);
    attr->preferredShmemCarveout = get(A::kPreferredSharedMemoryCarveout);
    attr->clusterDimMustBeSet = get(A::kClusterSizeMustBeSet);
    attr->requiredClusterWidth = get(A::kRequiredClusterWidth);
    attr->requiredClusterHeight = get(A::kRequiredClusterHeight);
    attr->requiredClusterDepth = get(A::kRequiredClusterDepth);
    attr->clusterSchedulingPolicyPreference = get(A::kClusterSchedulingPolicyPreference);
    attr->nonPortableClusterSizeAllowed = get(A::kNonPortableClusterSizeAllowed);
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t Occupancy(int* blocks, const void* func, int block_size, size_t dynamic_shared,
                      unsigned flags) noexcept {
  return Guard("cudaOccupancyMaxActiveBlocksPerMultiprocessor", [&] {
    Runtime& rt = Runtime::Get();
    if (blocks == nullptr) return rt.Finish(Error(CudaError::kInvalidValue, "null numBlocks"));
    FunctionRecord* f = FunctionOf(func);
    if (f == nullptr) {
      return rt.Finish(Error(CudaError::kInvalidDeviceFunction, "not a registered kernel"));
    }
    CudaResult<LaunchTarget> target = rt.PrepareLaunch(*f);
    if (!target.ok()) return rt.Finish(target.status());
    CudaResult<remote::Connection*> conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    auto reply = (*conn)->OccupancyMaxActiveBlocks(
        {target->function_id, block_size, dynamic_shared, flags});
    if (!reply.ok()) return rt.Finish(reply.status());
    *blocks = reply->blocks;
    return rt.Finish(CudaStatus::Ok());
  });
}

// Host callbacks run in the calling thread once the stream has drained: the same order as on a
// GPU (everything before has finished, nothing after has started, since the caller has not
// issued it yet), at the cost of blocking the caller. As with CUDA, a context already in error
// refuses the call; when the stream's work failed, a host function (cudaLaunchHostFunc) is not
// run and the call returns the error, while a stream callback is run with it (`on_error`).
cudaError_t HostCallback(const char* name, cudaStream_t stream, bool per_thread, bool on_error,
                         const std::function<void(cudaError_t)>& call) noexcept {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
    CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
    if (!id.ok()) return rt.Finish(id.status());
    if (auto r = rt.CaptureHost(*id, call)) return rt.Finish(*r);  // [issue 17: graphs]
    CudaResult<remote::Connection*> conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    cudaError_t status = rt.FinishSync((*conn)->StreamSynchronize({*id}).status());
    if (status != cudaSuccess && !on_error) return status;
    call(status);
    return status;
  });
}

}  // namespace
}  // namespace flyt::runtime

using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;

extern "C" {

void** __cudaRegisterFatBinary(void* fatCubin) noexcept {
  try {
    return Runtime::Get().RegisterFatbin(fatCubin);
  } catch (...) {
    return nullptr;
  }
}

void __cudaRegisterFatBinaryEnd(void**) noexcept {}

void __cudaUnregisterFatBinary(void** fatCubinHandle) noexcept {
  try {
    Runtime::Get().UnregisterFatbin(fatCubinHandle);
  } catch (...) {
  }
}

void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char*,
                            const char* deviceName, int, uint3*, uint3*, dim3*, dim3*,
                            int*) noexcept {
  try {
    Runtime::Get().RegisterFunction(fatCubinHandle, hostFun, deviceName);
  } catch (...) {
  }
}

void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char*, const char* deviceName, int,
                       size_t size, int constant, int) noexcept {
  try {
    Runtime::Get().RegisterVar(fatCubinHandle, hostVar, deviceName, size, constant != 0);
  } catch (...) {
  }
}

// [issue 17: managed] __cudaRegisterManagedVar is in api_managed.cc.

void __cudaRegisterHostVar(void**, const char*, char*, size_t) noexcept {}
void __cudaRegisterUnifiedTable(void**, const char**, void**, size_t) noexcept {}

// Called by the code nvcc generates for programs that use __managed__ variables.
char __cudaInitModule(void** handle) noexcept {
  return flyt::runtime::Runtime::ManagedInitModule(handle);  // [issue 17: managed]
}

cudaError_t __cudaGetProcAddress(const char*, void**, int,
                                 unsigned long long) noexcept {  // NOLINT(runtime/int)
  try {
    return Runtime::Get().Unsupported("__cudaGetProcAddress");
  } catch (...) {
    return cudaErrorNotSupported;
  }
}

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream) noexcept {
  try {
    flyt::runtime::ConfigStack().push_back({gridDim, blockDim, sharedMem, stream});
    return 0;
  } catch (...) {
    return 1;
  }
}

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) noexcept {
  auto& stack = flyt::runtime::ConfigStack();
  if (stack.empty()) return cudaErrorMissingConfiguration;
  flyt::runtime::CallConfiguration config = stack.back();
  stack.pop_back();
  *gridDim = config.grid;
  *blockDim = config.block;
  *sharedMem = config.shared_bytes;
  *static_cast<cudaStream_t*>(stream) = config.stream;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* func) noexcept {
  return Guard("__cudaGetKernel", [&] {
    flyt::runtime::FunctionRecord* f = Runtime::Get().FindFunction(func);
    if (kernel == nullptr || f == nullptr) return cudaErrorInvalidDeviceFunction;
    *kernel = reinterpret_cast<cudaKernel_t>(f);
    return cudaSuccess;
  });
}

cudaError_t cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) noexcept {
  return Guard("cudaGetKernel", [&] {
    Runtime& rt = Runtime::Get();
    flyt::runtime::FunctionRecord* f = flyt::runtime::FunctionOf(entryFuncAddr);
    if (kernelPtr == nullptr || f == nullptr) {
      return rt.Finish(CudaStatus(flyt::remote::CudaError::kInvalidDeviceFunction,
                                  "not a registered kernel"));
    }
    *kernelPtr = reinterpret_cast<cudaKernel_t>(f);
    return cudaSuccess;
  });
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                               size_t sharedMem, cudaStream_t stream) noexcept {
  return flyt::runtime::Launch("__cudaLaunchKernel", Runtime::Get().FromKernelHandle(kernel),
                               gridDim, blockDim, args, sharedMem, stream, false);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                    size_t sharedMem, cudaStream_t stream) noexcept {
  return flyt::runtime::Launch("__cudaLaunchKernel_ptsz", Runtime::Get().FromKernelHandle(kernel),
                               gridDim, blockDim, args, sharedMem, stream, true);
}

cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                             size_t sharedMem, cudaStream_t stream) noexcept {
  return flyt::runtime::Launch("cudaLaunchKernel", flyt::runtime::FunctionOf(func), gridDim,
                               blockDim, args, sharedMem, stream, false);
}

cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                  size_t sharedMem, cudaStream_t stream) noexcept {
  return flyt::runtime::Launch("cudaLaunchKernel_ptsz", flyt::runtime::FunctionOf(func), gridDim,
                               blockDim, args, sharedMem, stream, true);
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func,
                                void** args) noexcept {
  return flyt::runtime::LaunchEx("cudaLaunchKernelExC", config, func, args, false);
}

cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                     void** args) noexcept {
  return flyt::runtime::LaunchEx("cudaLaunchKernelExC_ptsz", config, func, args, true);
}

// [issue 17: pools]
cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                        size_t sharedMem, cudaStream_t stream) noexcept {
  return flyt::runtime::LaunchCooperative("cudaLaunchCooperativeKernel", func, gridDim, blockDim,
                                          args, sharedMem, stream, false);
}

// [issue 17: pools]
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim,
                                             void** args, size_t sharedMem,
                                             cudaStream_t stream) noexcept {
  return flyt::runtime::LaunchCooperative("cudaLaunchCooperativeKernel_ptsz", func, gridDim,
                                          blockDim, args, sharedMem, stream, true);
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) noexcept {
  return flyt::runtime::FuncGetAttributes(attr, func);
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr,
                                 int value) noexcept {
  return Guard("cudaFuncSetAttribute", [&] {
    Runtime& rt = Runtime::Get();
    flyt::runtime::FunctionRecord* f = flyt::runtime::FunctionOf(func);
    if (f == nullptr) {
      return rt.Finish(CudaStatus(flyt::remote::CudaError::kInvalidDeviceFunction,
                                  "not a registered kernel"));
    }
    auto target = rt.PrepareLaunch(*f);
    if (!target.ok()) return rt.Finish(target.status());
    auto conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    CudaStatus status =
        (*conn)->FuncSetAttribute({target->function_id, static_cast<uint32_t>(attr), value})
            .status();
    rt.ForgetFunctionAttributes(*f);
    return rt.Finish(status);
  });
}

cudaError_t cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache) noexcept {
  return Guard("cudaFuncSetCacheConfig", [&] {
    Runtime& rt = Runtime::Get();
    if (flyt::runtime::FunctionOf(func) == nullptr) {
      return rt.Finish(CudaStatus(flyt::remote::CudaError::kInvalidDeviceFunction,
                                  "not a registered kernel"));
    }
    return cudaSuccess;  // a preference; the device may ignore it, and so does flyt
  });
}

cudaError_t cudaFuncSetSharedMemConfig(const void* func, enum cudaSharedMemConfig) noexcept {
  return cudaFuncSetCacheConfig(func, cudaFuncCachePreferNone);
}

cudaError_t cudaFuncGetName(const char** name, const void* func) noexcept {
  return Guard("cudaFuncGetName", [&] {
    Runtime& rt = Runtime::Get();
    flyt::runtime::FunctionRecord* f = flyt::runtime::FunctionOf(func);
    if (name == nullptr || f == nullptr) {
      return rt.Finish(CudaStatus(flyt::remote::CudaError::kInvalidDeviceFunction,
                                  "not a registered kernel"));
    }
    *name = f->name.c_str();
    return cudaSuccess;
  });
}

cudaError_t cudaFuncGetParamInfo(const void* func, size_t paramIndex, size_t* paramOffset,
                                 size_t* paramSize) noexcept {
  return Guard("cudaFuncGetParamInfo", [&] {
    Runtime& rt = Runtime::Get();
    flyt::runtime::FunctionRecord* f = flyt::runtime::FunctionOf(func);
    if (f == nullptr) {
      return rt.Finish(CudaStatus(flyt::remote::CudaError::kInvalidDeviceFunction,
                                  "not a registered kernel"));
    }
    auto target = rt.PrepareLaunch(*f);
    if (!target.ok()) return rt.Finish(target.status());
    const auto& params = target->layout->params;
    if (paramIndex >= params.size()) {
      return rt.Finish(CudaStatus(flyt::remote::CudaError::kInvalidValue,
                                  "the kernel has " + std::to_string(params.size()) +
                                      " parameters"));
    }
    if (paramOffset) *paramOffset = params[paramIndex].offset;
    if (paramSize) *paramSize = params[paramIndex].size_bytes;
    return cudaSuccess;
  });
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func,
                                                          int blockSize,
                                                          size_t dynamicSMemSize) noexcept {
  return flyt::runtime::Occupancy(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks,
                                                                   const void* func,
                                                                   int blockSize,
                                                                   size_t dynamicSMemSize,
                                                                   unsigned int flags) noexcept {
  return flyt::runtime::Occupancy(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, const void* func,
                                                      int numBlocks, int blockSize) noexcept {
  return Guard("cudaOccupancyAvailableDynamicSMemPerBlock", [&] {
    Runtime& rt = Runtime::Get();
    flyt::runtime::FunctionRecord* f = flyt::runtime::FunctionOf(func);
    if (dynamicSmemSize == nullptr || f == nullptr || numBlocks <= 0 || blockSize <= 0) {
      return rt.Finish(CudaStatus(flyt::remote::CudaError::kInvalidValue, "bad arguments"));
    }
    auto attrs = rt.FunctionAttributes(*f);
    if (!attrs.ok()) return rt.Finish(attrs.status());
    auto per_sm = rt.Attribute(81);        // shared memory per multiprocessor
    auto reserved = rt.Attribute(111);     // reserved per block
    auto per_block_max = rt.Attribute(97);  // per-block opt-in maximum
    if (!per_sm.ok() || !reserved.ok() || !per_block_max.ok()) {
      return rt.Finish(CudaStatus(flyt::remote::CudaError::kUnknown, "device facts unavailable"));
    }
    int64_t static_bytes = (*attrs)[static_cast<uint32_t>(flyt::remote::FunctionAttribute::kSharedSizeBytes)];
    int64_t per_block = *per_sm / numBlocks - *reserved - static_bytes;
    per_block = std::min<int64_t>(per_block, *per_block_max - static_bytes);
    *dynamicSmemSize = static_cast<size_t>(std::max<int64_t>(per_block, 0));
    return cudaSuccess;
  });
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) noexcept {
  return flyt::runtime::HostCallback("cudaLaunchHostFunc", stream, false, false,
                                     [=](cudaError_t) { fn(userData); });  // [issue 17: graphs]
}

cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* userData) noexcept {
  return flyt::runtime::HostCallback("cudaLaunchHostFunc_ptsz", stream, true, false,
                                     [=](cudaError_t) { fn(userData); });  // [issue 17: graphs]
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                  void* userData, unsigned int) noexcept {
  return flyt::runtime::HostCallback(
      "cudaStreamAddCallback", stream, false, true,
      [=](cudaError_t status) { callback(stream, status, userData); });  // [issue 17: graphs]
}

cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback,
                                       void* userData, unsigned int) noexcept {
  return flyt::runtime::HostCallback(
      "cudaStreamAddCallback_ptsz", stream, true, true,
      [=](cudaError_t status) { callback(stream, status, userData); });  // [issue 17: graphs]
}

}  // extern "C"
