// The CUDA driver entry points flyt uses, written once (docs/conventions.md: "One list, many uses").
//
// FLYT_CUDA_DRIVER_ENTRY_POINTS(X) calls X(member, requirement, (params), names...) for each entry
// point; every entry returns CUresult. `names` lists the exported symbols newest first and the
// loader binds the first one the library exports. The list is expanded into the loader's function
// table and its dlsym loop (cuda_driver/library.h) and into the exports of the fake driver the
// loader's tests load (fake_libcuda.cc).
//
// Only the 64-bit (_v2 and later) entry points are ever bound: the unversioned cuMemAlloc,
// cuMemcpyHtoD, cuDeviceTotalMem, cuMemGetInfo, cuModuleGetGlobal still exported by the driver
// take 32-bit CUdeviceptr / unsigned int sizes, so they are never listed as fallbacks. Members
// whose versions differ in signature are separate entries (CtxCreateV4 / CtxCreateV3 /
// CtxCreate); fallbacks are listed only where the signature is the same (cuEventElapsedTime_v2 →
// cuEventElapsedTime, cuDeviceGetUuid_v2 → cuDeviceGetUuid).
//
// requirement: kRequired entries must resolve or the library is refused; kOptional entries may be
// absent (older drivers) and whatever needs them reports kNotSupported or does without. Context
// creation needs one of CtxCreateV4 and CtxCreate (the loader checks that).
#pragma once

#include "cuda_driver/cuda_driver_types.h"

// The families of issue 17, one list each (all kOptional: an older driver without them still
// loads, and the calls that need them answer kNotSupported).
// clang-format off
// [issue 17: graphs]
#define FLYT_CUDA_DRIVER_GRAPHS_ENTRY_POINTS(X)                                                    \
  X(StreamBeginCapture, kOptional, (CUstream stream, CUstreamCaptureMode mode),                    \
    cuStreamBeginCapture_v2)                                                                       \
  X(StreamEndCapture, kOptional, (CUstream stream, CUgraph* graph), cuStreamEndCapture)            \
  X(GraphInstantiateWithFlags, kOptional,                                                          \
    (CUgraphExec* exec, CUgraph graph, unsigned long long flags), /* NOLINT(runtime/int) */        \
    cuGraphInstantiateWithFlags)                                                                   \
  X(GraphLaunch, kOptional, (CUgraphExec exec, CUstream stream), cuGraphLaunch)                    \
  X(GraphExecDestroy, kOptional, (CUgraphExec exec), cuGraphExecDestroy)                           \
  X(GraphDestroy, kOptional, (CUgraph graph), cuGraphDestroy)                                      \
  X(EventRecordWithFlags, kOptional, (CUevent event, CUstream stream, unsigned int flags),         \
    cuEventRecordWithFlags)                                                                        \
  X(MemsetD2D8Async, kOptional,                                                                    \
    (CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,              \
     CUstream stream), cuMemsetD2D8Async)                                                          \
  X(MemsetD2D16Async, kOptional,                                                                   \
    (CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, /* NOLINT */               \
     size_t height, CUstream stream), cuMemsetD2D16Async)                                          \
  X(MemsetD2D32Async, kOptional,                                                                   \
    (CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height,               \
     CUstream stream), cuMemsetD2D32Async)
// (end graphs)

// [issue 17: pools]
#define FLYT_CUDA_DRIVER_POOLS_ENTRY_POINTS(X)                                                     \
  X(LaunchKernelEx, kOptional,                                                                     \
    (const CUlaunchConfig* config, CUfunction function, void** params, void** extra),              \
    cuLaunchKernelEx)
// (end pools)

// [issue 17: arrays]
#define FLYT_CUDA_DRIVER_ARRAYS_ENTRY_POINTS(X)                                                    \
  X(Array3DCreate, kOptional, (CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc),             \
    cuArray3DCreate_v2)                                                                          \
  X(ArrayDestroy, kOptional, (CUarray array), cuArrayDestroy)                                    \
  X(MipmappedArrayCreate, kOptional,                                                             \
    (CUmipmappedArray* mipmap, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels),        \
    cuMipmappedArrayCreate)                                                                      \
  X(MipmappedArrayGetLevel, kOptional,                                                           \
    (CUarray* level, CUmipmappedArray mipmap, unsigned int index), cuMipmappedArrayGetLevel)     \
  X(MipmappedArrayDestroy, kOptional, (CUmipmappedArray mipmap), cuMipmappedArrayDestroy)        \
  X(Memcpy3DAsync, kOptional, (const CUDA_MEMCPY3D* copy, CUstream stream), cuMemcpy3DAsync_v2)  \
  X(TexObjectCreate, kOptional,                                                                  \
    (CUtexObject* object, const CUDA_RESOURCE_DESC* resource, const CUDA_TEXTURE_DESC* texture,  \
     const CUDA_RESOURCE_VIEW_DESC* view),                                                       \
    cuTexObjectCreate)                                                                           \
  X(TexObjectDestroy, kOptional, (CUtexObject object), cuTexObjectDestroy)                       \
  X(SurfObjectCreate, kOptional, (CUsurfObject* object, const CUDA_RESOURCE_DESC* resource),     \
    cuSurfObjectCreate)                                                                          \
  X(SurfObjectDestroy, kOptional, (CUsurfObject object), cuSurfObjectDestroy)
// (end arrays)

// [issue 17: managed] and interprocess memory and events
#define FLYT_CUDA_DRIVER_MANAGED_ENTRY_POINTS(X)                                                   \
  X(IpcGetMemHandle, kOptional, (CUipcMemHandle* handle, CUdeviceptr ptr), cuIpcGetMemHandle)    \
  X(IpcOpenMemHandle, kOptional, (CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags),  \
    cuIpcOpenMemHandle_v2)                                                                       \
  X(IpcCloseMemHandle, kOptional, (CUdeviceptr ptr), cuIpcCloseMemHandle)                        \
  X(IpcGetEventHandle, kOptional, (CUipcEventHandle* handle, CUevent event), cuIpcGetEventHandle) \
  X(IpcOpenEventHandle, kOptional, (CUevent* event, CUipcEventHandle handle),                    \
    cuIpcOpenEventHandle)                                                                        \
  X(MemGetAddressRange, kOptional, (CUdeviceptr* base, size_t* bytes, CUdeviceptr ptr),          \
    cuMemGetAddressRange_v2)
// (end managed)

// [issue 18: migration] virtual memory management: device memory at a chosen address
// (Session::MallocAt). No versioned names: cuda.h maps none of these.
#define FLYT_CUDA_DRIVER_MIGRATION_ENTRY_POINTS(X)                                                 \
  X(MemAddressReserve, kOptional,                                                                  \
    (CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr address,                         \
     unsigned long long flags), /* NOLINT(runtime/int) */                                          \
    cuMemAddressReserve)                                                                           \
  X(MemAddressFree, kOptional, (CUdeviceptr ptr, size_t size), cuMemAddressFree)                   \
  X(MemCreate, kOptional,                                                                          \
    (CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,           \
     unsigned long long flags), /* NOLINT(runtime/int) */                                          \
    cuMemCreate)                                                                                   \
  X(MemRelease, kOptional, (CUmemGenericAllocationHandle handle), cuMemRelease)                    \
  X(MemMap, kOptional,                                                                             \
    (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,             \
     unsigned long long flags), /* NOLINT(runtime/int) */                                          \
    cuMemMap)                                                                                      \
  X(MemUnmap, kOptional, (CUdeviceptr ptr, size_t size), cuMemUnmap)                               \
  X(MemSetAccess, kOptional,                                                                       \
    (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count), cuMemSetAccess)     \
  X(MemGetAllocationGranularity, kOptional,                                                        \
    (size_t* granularity, const CUmemAllocationProp* prop,                                         \
     CUmemAllocationGranularity_flags option), cuMemGetAllocationGranularity)
// (end migration)

#define FLYT_CUDA_DRIVER_ENTRY_POINTS(X)                                                           \
  X(Init, kRequired, (unsigned int flags), cuInit)                                                 \
  X(DriverGetVersion, kRequired, (int* version), cuDriverGetVersion)                               \
  X(GetErrorName, kOptional, (CUresult error, const char** name), cuGetErrorName)                  \
  X(GetErrorString, kOptional, (CUresult error, const char** text), cuGetErrorString)              \
  X(DeviceGetCount, kRequired, (int* count), cuDeviceGetCount)                                     \
  X(DeviceGet, kRequired, (CUdevice* device, int ordinal), cuDeviceGet)                            \
  X(DeviceGetName, kRequired, (char* name, int length, CUdevice device), cuDeviceGetName)          \
  X(DeviceGetUuid, kOptional, (CUuuid* uuid, CUdevice device), cuDeviceGetUuid_v2,                 \
    cuDeviceGetUuid)                                                                               \
  X(DeviceTotalMem, kRequired, (size_t* bytes, CUdevice device), cuDeviceTotalMem_v2)              \
  X(DeviceGetAttribute, kRequired, (int* value, CUdevice_attribute attr, CUdevice device),         \
    cuDeviceGetAttribute)                                                                          \
  X(DeviceGetExecAffinitySupport, kOptional,                                                       \
    (int* supported, CUexecAffinityType type, CUdevice device), cuDeviceGetExecAffinitySupport)    \
  X(CtxCreateV4, kOptional,                                                                        \
    (CUcontext* ctx, CUctxCreateParams* params, unsigned int flags, CUdevice device),              \
    cuCtxCreate_v4)                                                                                \
  X(CtxCreateV3, kOptional,                                                                        \
    (CUcontext* ctx, CUexecAffinityParam* params, int count, unsigned int flags, CUdevice device), \
    cuCtxCreate_v3)                                                                                \
  X(CtxCreate, kOptional, (CUcontext* ctx, unsigned int flags, CUdevice device), cuCtxCreate_v2)   \
  X(CtxDestroy, kRequired, (CUcontext ctx), cuCtxDestroy_v2)                                       \
  X(CtxSetCurrent, kRequired, (CUcontext ctx), cuCtxSetCurrent)                                    \
  X(CtxPopCurrent, kRequired, (CUcontext* ctx), cuCtxPopCurrent_v2)                                \
  X(CtxSynchronize, kRequired, (void), cuCtxSynchronize)                                           \
  X(CtxGetExecAffinity, kOptional, (CUexecAffinityParam* param, CUexecAffinityType type),          \
    cuCtxGetExecAffinity)                                                                          \
  X(MemAlloc, kRequired, (CUdeviceptr* ptr, size_t bytes), cuMemAlloc_v2)                          \
  X(MemFree, kRequired, (CUdeviceptr ptr), cuMemFree_v2)                                           \
  X(MemGetInfo, kRequired, (size_t* free_bytes, size_t* total_bytes), cuMemGetInfo_v2)             \
  X(MemHostAlloc, kRequired, (void** ptr, size_t bytes, unsigned int flags), cuMemHostAlloc)       \
  X(MemFreeHost, kRequired, (void* ptr), cuMemFreeHost)                                            \
  X(MemHostRegister, kOptional, (void* ptr, size_t bytes, unsigned int flags),                    \
    cuMemHostRegister_v2)                                                                          \
  X(MemHostUnregister, kOptional, (void* ptr), cuMemHostUnregister)                                \
  X(MemcpyDtoH, kRequired, (void* dst, CUdeviceptr src, size_t bytes), cuMemcpyDtoH_v2)            \
  X(MemcpyHtoDAsync, kRequired,                                                                    \
    (CUdeviceptr dst, const void* src, size_t bytes, CUstream stream), cuMemcpyHtoDAsync_v2)       \
  X(MemcpyDtoHAsync, kRequired,                                                                    \
    (void* dst, CUdeviceptr src, size_t bytes, CUstream stream), cuMemcpyDtoHAsync_v2)             \
  X(MemcpyDtoDAsync, kRequired,                                                                    \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream), cuMemcpyDtoDAsync_v2)       \
  X(MemsetD8Async, kRequired,                                                                      \
    (CUdeviceptr dst, unsigned char value, size_t count, CUstream stream), cuMemsetD8Async)        \
  X(StreamCreateWithPriority, kRequired, (CUstream* stream, unsigned int flags, int priority),     \
    cuStreamCreateWithPriority)                                                                    \
  X(StreamDestroy, kRequired, (CUstream stream), cuStreamDestroy_v2)                               \
  X(StreamSynchronize, kRequired, (CUstream stream), cuStreamSynchronize)                          \
  X(StreamQuery, kRequired, (CUstream stream), cuStreamQuery)                                      \
  X(StreamWaitEvent, kRequired, (CUstream stream, CUevent event, unsigned int flags),              \
    cuStreamWaitEvent)                                                                             \
  X(EventCreate, kRequired, (CUevent* event, unsigned int flags), cuEventCreate)                   \
  X(EventDestroy, kRequired, (CUevent event), cuEventDestroy_v2)                                   \
  X(EventRecord, kRequired, (CUevent event, CUstream stream), cuEventRecord)                       \
  X(EventSynchronize, kRequired, (CUevent event), cuEventSynchronize)                              \
  X(EventQuery, kRequired, (CUevent event), cuEventQuery)                                          \
  X(EventElapsedTime, kRequired, (float* ms, CUevent start, CUevent end),                          \
    cuEventElapsedTime_v2, cuEventElapsedTime)                                                     \
  X(ModuleLoadData, kRequired, (CUmodule* module, const void* image), cuModuleLoadData)            \
  X(ModuleUnload, kRequired, (CUmodule module), cuModuleUnload)                                    \
  X(ModuleGetFunction, kRequired, (CUfunction* function, CUmodule module, const char* name),       \
    cuModuleGetFunction)                                                                           \
  X(ModuleGetGlobal, kRequired,                                                                    \
    (CUdeviceptr* ptr, size_t* bytes, CUmodule module, const char* name), cuModuleGetGlobal_v2)    \
  X(FuncGetAttribute, kRequired, (int* value, CUfunction_attribute attr, CUfunction function),     \
    cuFuncGetAttribute)                                                                            \
  X(FuncSetAttribute, kRequired, (CUfunction function, CUfunction_attribute attr, int value),      \
    cuFuncSetAttribute)                                                                            \
  X(FuncGetParamInfo, kOptional,                                                                   \
    (CUfunction function, size_t index, size_t* offset, size_t* bytes), cuFuncGetParamInfo)        \
  X(OccupancyMaxActiveBlocksPerMultiprocessorWithFlags, kRequired,                                 \
    (int* blocks, CUfunction function, int block_size, size_t dynamic_shared_bytes,                \
     unsigned int flags), cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)                    \
  X(LaunchKernel, kRequired,                                                                       \
    (CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,           \
     unsigned int block_x, unsigned int block_y, unsigned int block_z,                             \
     unsigned int shared_bytes, CUstream stream, void** params, void** extra), cuLaunchKernel)    \
  FLYT_CUDA_DRIVER_GRAPHS_ENTRY_POINTS(X)                                                          \
  FLYT_CUDA_DRIVER_POOLS_ENTRY_POINTS(X)                                                           \
  FLYT_CUDA_DRIVER_ARRAYS_ENTRY_POINTS(X)                                                          \
  FLYT_CUDA_DRIVER_MANAGED_ENTRY_POINTS(X)                                                         \
  FLYT_CUDA_DRIVER_MIGRATION_ENTRY_POINTS(X)
// clang-format on

// Applies M(context, name) to each of up to three symbol names.
#define FLYT_CUDA_DRIVER_FOR_EACH_NAME_1(M, c, a) M(c, a)
#define FLYT_CUDA_DRIVER_FOR_EACH_NAME_2(M, c, a, b) M(c, a) M(c, b)
#define FLYT_CUDA_DRIVER_FOR_EACH_NAME_3(M, c, a, b, d) M(c, a) M(c, b) M(c, d)
#define FLYT_CUDA_DRIVER_PICK_4TH(_1, _2, _3, NAME, ...) NAME
#define FLYT_CUDA_DRIVER_FOR_EACH_NAME(M, c, ...)                                               \
  FLYT_CUDA_DRIVER_PICK_4TH(__VA_ARGS__, FLYT_CUDA_DRIVER_FOR_EACH_NAME_3,                      \
                            FLYT_CUDA_DRIVER_FOR_EACH_NAME_2, FLYT_CUDA_DRIVER_FOR_EACH_NAME_1) \
  (M, c, __VA_ARGS__)
#define FLYT_CUDA_DRIVER_STRINGIFY_NAME(c, name) #name,
