// flyt's own declarations of the slice of the CUDA driver API it uses, written from NVIDIA's CUDA
// Driver API reference (cuda.h of CUDA 11.4 through 13.x; the values and layouts below are ABI and
// identical in all of them on LP64).
//
// flyt never includes cuda.h: libcuda.so.1 is loaded at run time with dlopen (cuda_driver/
// library.h), so flyt-gpu-server builds and starts on machines without the CUDA toolkit or a
// driver. Names follow cuda.h so that each line can be checked against it; every struct carries a
// static_assert on its size, and cuda_driver_test.cc checks offsets and constants against numbers
// written from the documentation (and against the toolkit's cuda.h where one is installed).
//
// Plain data and constants only; no state, nothing to synchronise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flyt::cuda_driver {

// CUresult: a plain C enum in cuda.h, 4 bytes. Only the codes flyt acts on are named here; every
// other code is passed on as a number (and named by the driver's cuGetErrorName).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT(runtime/int): cuda.h's type (the _v2 ABI)

// Opaque handles: pointers to incomplete structs.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;

// CUuuid: 16 bytes.
struct CUuuid {
  unsigned char bytes[16];
};
static_assert(sizeof(CUuuid) == 16);

// Enums passed through as numbers (the server forwards the runtime's attribute numbers, which are
// the driver's).
using CUdevice_attribute = int;
using CUfunction_attribute = int;
using CUexecAffinityType = int;

// CUexecAffinityParam_v1: { CUexecAffinityType type; union { CUexecAffinitySmCount smCount; } }.
struct CUexecAffinityParam {
  CUexecAffinityType type;
  union {
    struct {
      unsigned int val;
    } smCount;
  } param;
};
static_assert(sizeof(CUexecAffinityParam) == 8);

// CUctxCreateParams (CUDA 12.5+, cuCtxCreate_v4): affinity array, its length, CIG parameters.
struct CUctxCreateParams {
  CUexecAffinityParam* execAffinityParams;
  int numExecAffinityParams;
  void* cigParams;
};
static_assert(sizeof(CUctxCreateParams) == 24);

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_CONTEXT_ALREADY_CURRENT = 202;  // deprecated since CUDA 3.2
inline constexpr CUresult CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY = 224;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;
inline constexpr CUresult CUDA_ERROR_KEY_ROTATION = 916;  // confidential computing
inline constexpr CUresult CUDA_ERROR_UNKNOWN = 999;

inline constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
inline constexpr CUexecAffinityType CU_EXEC_AFFINITY_TYPE_SM_COUNT = 0;
inline constexpr unsigned int CU_MEMHOSTALLOC_PORTABLE = 0x01;
inline constexpr unsigned int CU_MEMHOSTREGISTER_PORTABLE = 0x01;

// [issue 17: graphs] driver types and constants
struct CUgraph_st;
struct CUgraphExec_st;
using CUgraph = CUgraph_st*;
using CUgraphExec = CUgraphExec_st*;
using CUstreamCaptureMode = int;
inline constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_RELAXED = 2;
inline constexpr unsigned int CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned int CU_EVENT_RECORD_EXTERNAL = 0x1;
inline constexpr unsigned int CU_EVENT_WAIT_EXTERNAL = 0x1;
// (end graphs)

// [issue 17: pools] driver types and constants
// cuLaunchKernelEx's configuration and attributes (as cuda.h lays them out: an attribute is a
// 4-byte id, padding to 8, then a 64-byte value union).
using CUlaunchAttributeID = int;
inline constexpr CUlaunchAttributeID CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2;
inline constexpr CUlaunchAttributeID CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4;
inline constexpr CUlaunchAttributeID CU_LAUNCH_ATTRIBUTE_PRIORITY = 8;
union CUlaunchAttributeValue {
  char pad[64];
  int cooperative;
  int priority;
  struct {
    unsigned int x, y, z;
  } clusterDim;
};
struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
};
static_assert(sizeof(CUlaunchAttribute) == 72);
struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};
// (end pools)

// [issue 17: arrays] driver types and constants
struct CUarray_st;
struct CUmipmappedArray_st;
using CUarray = CUarray_st*;
using CUmipmappedArray = CUmipmappedArray_st*;
using CUtexObject = unsigned long long;   // NOLINT(runtime/int): cuda.h's type
using CUsurfObject = unsigned long long;  // NOLINT(runtime/int): cuda.h's type
using CUarray_format = int;
inline constexpr CUarray_format CU_AD_FORMAT_UNSIGNED_INT8 = 0x01;
inline constexpr CUarray_format CU_AD_FORMAT_UNSIGNED_INT16 = 0x02;
inline constexpr CUarray_format CU_AD_FORMAT_UNSIGNED_INT32 = 0x03;
inline constexpr CUarray_format CU_AD_FORMAT_SIGNED_INT8 = 0x08;
inline constexpr CUarray_format CU_AD_FORMAT_SIGNED_INT16 = 0x09;
inline constexpr CUarray_format CU_AD_FORMAT_SIGNED_INT32 = 0x0a;
inline constexpr CUarray_format CU_AD_FORMAT_HALF = 0x10;
inline constexpr CUarray_format CU_AD_FORMAT_FLOAT = 0x20;
using CUmemorytype = int;
inline constexpr CUmemorytype CU_MEMORYTYPE_HOST = 1;
inline constexpr CUmemorytype CU_MEMORYTYPE_DEVICE = 2;
inline constexpr CUmemorytype CU_MEMORYTYPE_ARRAY = 3;
// CUDA_TEXTURE_DESC flags.
inline constexpr unsigned int CU_TRSF_READ_AS_INTEGER = 0x01;
inline constexpr unsigned int CU_TRSF_NORMALIZED_COORDINATES = 0x02;
inline constexpr unsigned int CU_TRSF_SRGB = 0x10;
inline constexpr unsigned int CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION = 0x20;
inline constexpr unsigned int CU_TRSF_SEAMLESS_CUBEMAP = 0x40;

struct CUDA_ARRAY3D_DESCRIPTOR {
  size_t Width;
  size_t Height;
  size_t Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
};
static_assert(sizeof(CUDA_ARRAY3D_DESCRIPTOR) == 40);

struct CUDA_MEMCPY3D {
  size_t srcXInBytes;
  size_t srcY;
  size_t srcZ;
  size_t srcLOD;
  CUmemorytype srcMemoryType;
  const void* srcHost;
  CUdeviceptr srcDevice;
  CUarray srcArray;
  void* reserved0;
  size_t srcPitch;
  size_t srcHeight;
  size_t dstXInBytes;
  size_t dstY;
  size_t dstZ;
  size_t dstLOD;
  CUmemorytype dstMemoryType;
  void* dstHost;
  CUdeviceptr dstDevice;
  CUarray dstArray;
  void* reserved1;
  size_t dstPitch;
  size_t dstHeight;
  size_t WidthInBytes;
  size_t Height;
  size_t Depth;
};
static_assert(sizeof(CUDA_MEMCPY3D) == 200);

struct CUDA_RESOURCE_DESC {
  int resType;  // CUresourcetype: 0 array, 1 mipmapped array, 2 linear, 3 pitch2D
  union {
    struct {
      CUarray hArray;
    } array;
    struct {
      CUmipmappedArray hMipmappedArray;
    } mipmap;
    struct {
      CUdeviceptr devPtr;
      CUarray_format format;
      unsigned int numChannels;
      size_t sizeInBytes;
    } linear;
    struct {
      CUdeviceptr devPtr;
      CUarray_format format;
      unsigned int numChannels;
      size_t width;
      size_t height;
      size_t pitchInBytes;
    } pitch2D;
    struct {
      int reserved[32];
    } reserved;
  } res;
  unsigned int flags;
};
static_assert(sizeof(CUDA_RESOURCE_DESC) == 144);

struct CUDA_TEXTURE_DESC {
  int addressMode[3];  // CUaddress_mode
  int filterMode;      // CUfilter_mode
  unsigned int flags;
  unsigned int maxAnisotropy;
  int mipmapFilterMode;
  float mipmapLevelBias;
  float minMipmapLevelClamp;
  float maxMipmapLevelClamp;
  float borderColor[4];
  int reserved[12];
};
static_assert(sizeof(CUDA_TEXTURE_DESC) == 104);

struct CUDA_RESOURCE_VIEW_DESC {
  int format;  // CUresourceViewFormat
  size_t width;
  size_t height;
  size_t depth;
  unsigned int firstMipmapLevel;
  unsigned int lastMipmapLevel;
  unsigned int firstLayer;
  unsigned int lastLayer;
  unsigned int reserved[16];
};
static_assert(sizeof(CUDA_RESOURCE_VIEW_DESC) == 112);
// (end arrays)

// [issue 17: managed] driver types and constants
// (end managed)

// [issue 18: migration] virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap):
// device memory placed at a chosen address.
using CUmemGenericAllocationHandle = unsigned long long;  // NOLINT(runtime/int): cuda.h's type
using CUmemAllocationType = int;
using CUmemAllocationHandleType = int;
using CUmemLocationType = int;
using CUmemAccess_flags = int;
using CUmemAllocationGranularity_flags = int;
inline constexpr CUmemAllocationType CU_MEM_ALLOCATION_TYPE_PINNED = 0x1;
inline constexpr CUmemAllocationHandleType CU_MEM_HANDLE_TYPE_NONE = 0x0;
inline constexpr CUmemLocationType CU_MEM_LOCATION_TYPE_DEVICE = 0x1;
inline constexpr CUmemAccess_flags CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3;
inline constexpr CUmemAllocationGranularity_flags CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0;

struct CUmemLocation {
  CUmemLocationType type;
  int id;  // the device ordinal, for CU_MEM_LOCATION_TYPE_DEVICE
};
static_assert(sizeof(CUmemLocation) == 8);

struct CUmemAllocationProp {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;  // NOLINT(runtime/int): cuda.h's type
    unsigned char reserved[4];
  } allocFlags;
};
static_assert(sizeof(CUmemAllocationProp) == 32);

struct CUmemAccessDesc {
  CUmemLocation location;
  CUmemAccess_flags flags;
};
static_assert(sizeof(CUmemAccessDesc) == 12);
// (end migration)

// cuLaunchKernel's `extra` keys (cuda.h defines them as the pointers 0, 1 and 2).
inline void* const CU_LAUNCH_PARAM_END = nullptr;
inline void* const CU_LAUNCH_PARAM_BUFFER_POINTER = reinterpret_cast<void*>(uintptr_t{1});
inline void* const CU_LAUNCH_PARAM_BUFFER_SIZE = reinterpret_cast<void*>(uintptr_t{2});

// Interprocess handles (cuIpc*): 64 opaque bytes each, passed by value.
inline constexpr size_t CU_IPC_HANDLE_SIZE = 64;
struct CUipcMemHandle {
  char reserved[CU_IPC_HANDLE_SIZE];
};
struct CUipcEventHandle {
  char reserved[CU_IPC_HANDLE_SIZE];
};
inline constexpr unsigned int CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1;

}  // namespace flyt::cuda_driver
