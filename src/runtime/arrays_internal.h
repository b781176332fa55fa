// The arrays family's shared parts in flyt's libcudart.so.13 (issue 17, arrays): the records a
// cudaArray_t / cudaMipmappedArray_t points at and the descriptors kept for texture and surface
// objects (Runtime::ArraysState), and the calls the entry points of api_arrays.cc (allocation,
// objects, getters) and api_array_copies.cc (2D/3D copies and memsets) share.
//
// Ownership: Runtime::ArraysState (Runtime::arrays_state(), created on first use, never freed,
// as the Runtime) owns every array, mipmapped array and texture/surface object record. A handle
// the program passes in is looked up there (FindArray, FindObject), never dereferenced; a record
// from an earlier generation (before a device reset) is dead.
// Thread safety: ArraysState's maps are guarded by its `mu`; the functions below take it
// themselves (none is called with it held) and return copies of records, never pointers into the
// maps. The cuda* functions here report through Runtime::Finish like the entry points.
#pragma once

#include <texture_types.h>
#include <surface_types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "runtime/runtime.h"

namespace flyt::runtime {

struct ArrayRecord {
  uint64_t id = 0;
  cudaChannelFormatDesc desc{};
  cudaExtent extent{};
  unsigned flags = 0;
  uint64_t generation = 0;
  bool level = false;  // a level of a mipmapped array (freed with it)
  size_t element_bytes() const { return static_cast<size_t>(desc.x + desc.y + desc.z + desc.w) / 8; }
};

struct MipmapRecord {
  uint64_t id = 0;
  cudaChannelFormatDesc desc{};
  cudaExtent extent{};
  unsigned flags = 0;
  unsigned levels = 0;
  uint64_t generation = 0;
  std::vector<ArrayRecord*> level_records;  // by level; null until asked for
};

struct TextureRecord {
  uint64_t id = 0;
  cudaResourceDesc resource{};
  cudaTextureDesc texture{};
  std::optional<cudaResourceViewDesc> view;
  uint64_t generation = 0;
};

inline cudaExtent rt_extent(size_t w, size_t h, size_t d) { return cudaExtent{w, h, d}; }
inline cudaPitchedPtr rt_pitched(void* p, size_t pitch, size_t xsize, size_t ysize) {
  return cudaPitchedPtr{p, pitch, xsize, ysize};
}

struct Runtime::ArraysState {
  Mutex mu;
  std::unordered_map<const void*, std::unique_ptr<ArrayRecord>> arrays FLYT_GUARDED_BY(mu);
  std::unordered_map<const void*, std::unique_ptr<MipmapRecord>> mipmaps FLYT_GUARDED_BY(mu);
  std::unordered_map<uint64_t, TextureRecord> textures FLYT_GUARDED_BY(mu);  // by value
  std::unordered_map<uint64_t, TextureRecord> surfaces FLYT_GUARDED_BY(mu);  // by value
};

namespace arrays {

// A live array record (this generation) for a handle the program passed, or null.
std::optional<ArrayRecord> FindArray(Runtime& rt, const void* handle);

// The wire shape of an array.
remote::ArrayShape Shape(const cudaChannelFormatDesc& d, cudaExtent e, unsigned flags);

// cudaMemcpy2DToArray / FromArray / ArrayToArray and the 2D pointer copies.
cudaError_t Copy2DAny(const void* dst_array, void* dst, size_t dpitch, size_t dx, size_t dy,
                      const void* src_array, const void* src, size_t spitch, size_t sx, size_t sy,
                      size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t stream,
                      bool async, bool per_thread);

// The deprecated linear copies to/from arrays: `count` bytes from (wOffset, hOffset) on, row
// after row; split into a partial first row, whole rows and a partial last row.
cudaError_t CopyLinear(const void* dst_array, size_t dx, size_t dy, void* dst,
                       const void* src_array, size_t sx, size_t sy, const void* src, size_t count,
                       cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread);

cudaError_t Copy3DParms(const cudaMemcpy3DParms* p, cudaStream_t stream, bool async,
                        bool per_thread);

cudaError_t Set3D(cudaPitchedPtr p, int value, cudaExtent extent, cudaStream_t stream,
                  bool per_thread);

cudaError_t MallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, cudaExtent extent,
                        unsigned flags);

cudaError_t FreeArray(cudaArray_t array);

cudaError_t CreateObject(bool texture, unsigned long long* out, const cudaResourceDesc* res,
                         const cudaTextureDesc* tex, const cudaResourceViewDesc* view);

cudaError_t DestroyObject(bool texture, unsigned long long value);

// A texture or surface record by value (a copy), or null.
std::optional<TextureRecord> FindObject(bool texture, unsigned long long value);

cudaError_t MallocMipmapped(cudaMipmappedArray_t* out, const cudaChannelFormatDesc* desc,
                            cudaExtent extent, unsigned levels, unsigned flags);

cudaError_t MipmapLevel(cudaArray_t* out, cudaMipmappedArray_const_t mipmap, unsigned level);

cudaError_t FreeMipmapped(cudaMipmappedArray_t mipmap);

}  // namespace arrays
}  // namespace flyt::runtime
