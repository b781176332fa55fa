// flyt's libcudart.so.13: the CUDA runtime's arrays family (issue 17): arrays, mipmapped arrays,
// texture and surface objects and their getters. See runtime.h and arrays_internal.h.
//
// CUDA arrays and mipmapped arrays live on the server under numbers this process picks; a
// cudaArray_t / cudaMipmappedArray_t is a pointer to a record here (a handle the runtime did not
// hand out is refused, never dereferenced). Their shape is kept here, so cudaArrayGetInfo and
// cudaGetChannelDesc need no round trip. Texture and surface objects are the values the server
// (the device) returned; their descriptors are kept here for the getters. 2D/3D copies and
// memsets are api_array_copies.cc.
#include <surface_types.h>
#include <texture_types.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "runtime/arrays_internal.h"
#include "runtime/exports.h"
#include "runtime/runtime.h"

namespace flyt::runtime {

Runtime::ArraysState& Runtime::arrays_state() {
  ArraysState* state = arrays_state_.load();
  if (state != nullptr) return *state;
  auto* fresh = new ArraysState();
  if (arrays_state_.compare_exchange_strong(state, fresh)) return *fresh;
  delete fresh;
  return *state;
}

namespace arrays {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }
uint64_t Address(const void* p) { return reinterpret_cast<uint64_t>(p); }

}  // namespace

// A live array record (this generation) for a handle the program passed, or null.
std::optional<ArrayRecord> FindArray(Runtime& rt, const void* handle) {
  Runtime::ArraysState& st = rt.arrays_state();
  MutexLock lock(st.mu);
  auto it = st.arrays.find(handle);
  if (it == st.arrays.end() || it->second->generation != rt.generation()) return std::nullopt;
  return *it->second;
}

remote::ArrayShape Shape(const cudaChannelFormatDesc& d, cudaExtent e, unsigned flags) {
  return remote::ArrayShape{
      static_cast<uint32_t>(d.f), d.x, d.y, d.z, d.w, e.width, e.height, e.depth, flags};
}

cudaError_t MallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, cudaExtent extent,
                        unsigned flags) {
  Runtime& rt = Runtime::Get();
  if (array == nullptr || desc == nullptr) {
    return rt.Finish(Error(CudaError::kInvalidValue, "null array or descriptor"));
  }
  *array = nullptr;
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  auto record = std::make_unique<ArrayRecord>();
  record->id = rt.NewId();
  record->desc = *desc;
  record->extent = extent;
  record->flags = flags;
  record->generation = rt.generation();
  auto reply = (*conn)->MallocArray({record->id, Shape(*desc, extent, flags)});
  if (!reply.ok()) return rt.Finish(reply.status());
  Runtime::ArraysState& st = rt.arrays_state();
  MutexLock lock(st.mu);
  *array = reinterpret_cast<cudaArray_t>(record.get());
  st.arrays.emplace(record.get(), std::move(record));
  return rt.Finish(CudaStatus::Ok());
}

cudaError_t FreeArray(cudaArray_t array) {
  Runtime& rt = Runtime::Get();
  if (array == nullptr) return cudaSuccess;
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  uint64_t id = 0;
  bool live = false;
  {
    Runtime::ArraysState& st = rt.arrays_state();
    MutexLock lock(st.mu);
    auto it = st.arrays.find(array);
    if (it == st.arrays.end() || it->second->level) {
      return rt.Finish(Error(CudaError::kInvalidValue, "not an array of this process"));
    }
    id = it->second->id;
    live = it->second->generation == rt.generation();
    st.arrays.erase(it);
  }
  if (!live) return cudaSuccess;  // freed by cudaDeviceReset
  return rt.Finish((*conn)->FreeArray({id}));
}

void FillResource(const cudaResourceDesc& d, remote::ResourceDesc& w) {
  w.type = static_cast<uint32_t>(d.resType);
  switch (d.resType) {
    case cudaResourceTypeLinear:
      w.ptr = Address(d.res.linear.devPtr);
      w.format = static_cast<uint32_t>(d.res.linear.desc.f);
      w.x = d.res.linear.desc.x, w.y = d.res.linear.desc.y;
      w.z = d.res.linear.desc.z, w.w = d.res.linear.desc.w;
      w.size_bytes = d.res.linear.sizeInBytes;
      break;
    case cudaResourceTypePitch2D:
      w.ptr = Address(d.res.pitch2D.devPtr);
      w.format = static_cast<uint32_t>(d.res.pitch2D.desc.f);
      w.x = d.res.pitch2D.desc.x, w.y = d.res.pitch2D.desc.y;
      w.z = d.res.pitch2D.desc.z, w.w = d.res.pitch2D.desc.w;
      w.width = d.res.pitch2D.width;
      w.height = d.res.pitch2D.height;
      w.pitch = d.res.pitch2D.pitchInBytes;
      break;
    default:
      break;
  }
}

// Translates the program's resource description into the wire's (array handles to ids).
CudaResult<remote::ResourceDesc> WireResource(Runtime& rt, const cudaResourceDesc& d) {
  remote::ResourceDesc w;
  FillResource(d, w);
  Runtime::ArraysState& st = rt.arrays_state();
  MutexLock lock(st.mu);
  if (d.resType == cudaResourceTypeArray) {
    auto it = st.arrays.find(d.res.array.array);
    if (it == st.arrays.end() || it->second->generation != rt.generation()) {
      return Error(CudaError::kInvalidResourceHandle, "not an array of this process");
    }
    w.array = it->second->id;
  } else if (d.resType == cudaResourceTypeMipmappedArray) {
    auto it = st.mipmaps.find(d.res.mipmap.mipmap);
    if (it == st.mipmaps.end() || it->second->generation != rt.generation()) {
      return Error(CudaError::kInvalidResourceHandle, "not a mipmapped array of this process");
    }
    w.array = it->second->id;
  } else if (d.resType != cudaResourceTypeLinear && d.resType != cudaResourceTypePitch2D) {
    return Error(CudaError::kInvalidValue, "unknown resource type");
  }
  return w;
}

remote::TextureDesc WireTexture(const cudaTextureDesc& t) {
  remote::TextureDesc w;
  w.address_mode0 = static_cast<uint32_t>(t.addressMode[0]);
  w.address_mode1 = static_cast<uint32_t>(t.addressMode[1]);
  w.address_mode2 = static_cast<uint32_t>(t.addressMode[2]);
  w.filter_mode = static_cast<uint32_t>(t.filterMode);
  w.read_mode = static_cast<uint32_t>(t.readMode);
  w.srgb = t.sRGB;
  w.border0 = t.borderColor[0];
  w.border1 = t.borderColor[1];
  w.border2 = t.borderColor[2];
  w.border3 = t.borderColor[3];
  w.normalized_coords = t.normalizedCoords;
  w.max_anisotropy = t.maxAnisotropy;
  w.mipmap_filter_mode = static_cast<uint32_t>(t.mipmapFilterMode);
  w.mipmap_level_bias = t.mipmapLevelBias;
  w.min_mipmap_level_clamp = t.minMipmapLevelClamp;
  w.max_mipmap_level_clamp = t.maxMipmapLevelClamp;
  w.disable_trilinear_optimization = t.disableTrilinearOptimization;
  w.seamless_cubemap = t.seamlessCubemap;
  return w;
}

remote::ResourceViewDesc WireView(const cudaResourceViewDesc* v) {
  remote::ResourceViewDesc w;
  if (v == nullptr) return w;
  w.present = true;
  w.format = static_cast<uint32_t>(v->format);
  w.width = v->width;
  w.height = v->height;
  w.depth = v->depth;
  w.first_mipmap_level = v->firstMipmapLevel;
  w.last_mipmap_level = v->lastMipmapLevel;
  w.first_layer = v->firstLayer;
  w.last_layer = v->lastLayer;
  return w;
}

cudaError_t CreateObject(bool texture, unsigned long long* out, const cudaResourceDesc* res,
                         const cudaTextureDesc* tex, const cudaResourceViewDesc* view) {
  Runtime& rt = Runtime::Get();
  if (out == nullptr || res == nullptr || (texture && tex == nullptr)) {
    return rt.Finish(Error(CudaError::kInvalidValue, "null argument"));
  }
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  auto wire = WireResource(rt, *res);
  if (!wire.ok()) return rt.Finish(wire.status());
  if ((res->resType == cudaResourceTypeLinear || res->resType == cudaResourceTypePitch2D)) {
    void* p =
        res->resType == cudaResourceTypeLinear ? res->res.linear.devPtr : res->res.pitch2D.devPtr;
    if (!rt.IsDevicePointer(p)) {
      return rt.Finish(Error(CudaError::kInvalidValue, "resource memory is not device memory"));
    }
  }
  TextureRecord record;
  record.id = rt.NewId();
  record.resource = *res;
  record.generation = rt.generation();
  uint64_t value = 0;
  if (texture) {
    record.texture = *tex;
    if (view != nullptr) record.view = *view;
    auto reply =
        (*conn)->CreateTextureObject({record.id, *wire, WireTexture(*tex), WireView(view)});
    if (!reply.ok()) return rt.Finish(reply.status());
    value = reply->value;
  } else {
    auto reply = (*conn)->CreateSurfaceObject({record.id, *wire});
    if (!reply.ok()) return rt.Finish(reply.status());
    value = reply->value;
  }
  Runtime::ArraysState& st = rt.arrays_state();
  MutexLock lock(st.mu);
  (texture ? st.textures : st.surfaces)[value] = std::move(record);
  *out = value;
  return rt.Finish(CudaStatus::Ok());
}

cudaError_t DestroyObject(bool texture, unsigned long long value) {
  Runtime& rt = Runtime::Get();
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  uint64_t id = 0;
  bool live = false;
  {
    Runtime::ArraysState& st = rt.arrays_state();
    MutexLock lock(st.mu);
    auto& map = texture ? st.textures : st.surfaces;
    auto it = map.find(value);
    if (it == map.end()) {
      return rt.Finish(
          Error(CudaError::kInvalidValue, texture ? "not a texture object of this process"
                                                  : "not a surface object of this process"));
    }
    id = it->second.id;
    live = it->second.generation == rt.generation();
    map.erase(it);
  }
  if (!live) return cudaSuccess;
  if (texture) return rt.Finish((*conn)->DestroyTextureObject({id}));
  return rt.Finish((*conn)->DestroySurfaceObject({id}));
}

// A texture or surface record by value (a copy), or null.
std::optional<TextureRecord> FindObject(bool texture, unsigned long long value) {
  Runtime& rt = Runtime::Get();
  Runtime::ArraysState& st = rt.arrays_state();
  MutexLock lock(st.mu);
  auto& map = texture ? st.textures : st.surfaces;
  auto it = map.find(value);
  if (it == map.end() || it->second.generation != rt.generation()) return std::nullopt;
  return it->second;
}

cudaError_t MallocMipmapped(cudaMipmappedArray_t* out, const cudaChannelFormatDesc* desc,
                            cudaExtent extent, unsigned levels, unsigned flags) {
  Runtime& rt = Runtime::Get();
  if (out == nullptr || desc == nullptr) {
    return rt.Finish(Error(CudaError::kInvalidValue, "null argument"));
  }
  *out = nullptr;
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  // numLevels is clamped to what the extent allows (1 + floor(log2(max dimension))).
  size_t largest = std::max({extent.width, extent.height, extent.depth});
  unsigned most = 1;
  while (largest > 1) largest >>= 1, ++most;
  if (levels == 0 || levels > most) levels = most;
  auto record = std::make_unique<MipmapRecord>();
  record->id = rt.NewId();
  record->desc = *desc;
  record->extent = extent;
  record->flags = flags;
  record->levels = levels;
  record->generation = rt.generation();
  record->level_records.assign(levels, nullptr);
  auto reply = (*conn)->MallocMipmappedArray({record->id, Shape(*desc, extent, flags), levels});
  if (!reply.ok()) return rt.Finish(reply.status());
  Runtime::ArraysState& st = rt.arrays_state();
  MutexLock lock(st.mu);
  *out = reinterpret_cast<cudaMipmappedArray_t>(record.get());
  st.mipmaps.emplace(record.get(), std::move(record));
  return rt.Finish(CudaStatus::Ok());
}

cudaError_t MipmapLevel(cudaArray_t* out, cudaMipmappedArray_const_t mipmap, unsigned level) {
  Runtime& rt = Runtime::Get();
  if (out == nullptr) return rt.Finish(Error(CudaError::kInvalidValue, "null levelArray"));
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  Runtime::ArraysState& st = rt.arrays_state();
  std::unique_ptr<ArrayRecord> fresh;
  uint64_t mipmap_id = 0;
  {
    MutexLock lock(st.mu);
    auto it = st.mipmaps.find(mipmap);
    if (it == st.mipmaps.end() || it->second->generation != rt.generation()) {
      return rt.Finish(Error(CudaError::kInvalidResourceHandle, "not a mipmapped array"));
    }
    MipmapRecord& m = *it->second;
    if (level >= m.levels) return rt.Finish(Error(CudaError::kInvalidValue, "no such level"));
    if (m.level_records[level] != nullptr) {
      *out = reinterpret_cast<cudaArray_t>(m.level_records[level]);
      return cudaSuccess;
    }
    mipmap_id = m.id;
    fresh = std::make_unique<ArrayRecord>();
    fresh->id = rt.NewId();
    fresh->desc = m.desc;
    auto shrink = [level](size_t v) -> size_t {
      return v == 0 ? 0 : std::max<size_t>(v >> level, 1);
    };
    fresh->extent =
        rt_extent(shrink(m.extent.width), shrink(m.extent.height),
                  (m.flags & cudaArrayLayered) != 0 ? m.extent.depth : shrink(m.extent.depth));
    fresh->flags = m.flags;
    fresh->generation = m.generation;
    fresh->level = true;
  }
  auto reply = (*conn)->GetMipmappedArrayLevel({mipmap_id, level, fresh->id});
  if (!reply.ok()) return rt.Finish(reply.status());
  MutexLock lock(st.mu);
  auto it = st.mipmaps.find(mipmap);
  if (it == st.mipmaps.end()) return rt.Finish(Error(CudaError::kInvalidResourceHandle, "freed"));
  it->second->level_records[level] = fresh.get();
  *out = reinterpret_cast<cudaArray_t>(fresh.get());
  st.arrays.emplace(fresh.get(), std::move(fresh));
  return rt.Finish(CudaStatus::Ok());
}

cudaError_t FreeMipmapped(cudaMipmappedArray_t mipmap) {
  Runtime& rt = Runtime::Get();
  if (mipmap == nullptr) return cudaSuccess;
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  uint64_t id = 0;
  bool live = false;
  {
    Runtime::ArraysState& st = rt.arrays_state();
    MutexLock lock(st.mu);
    auto it = st.mipmaps.find(mipmap);
    if (it == st.mipmaps.end()) {
      return rt.Finish(Error(CudaError::kInvalidValue, "not a mipmapped array of this process"));
    }
    for (ArrayRecord* level : it->second->level_records) {
      if (level != nullptr) st.arrays.erase(level);
    }
    id = it->second->id;
    live = it->second->generation == rt.generation();
    st.mipmaps.erase(it);
  }
  if (!live) return cudaSuccess;
  return rt.Finish((*conn)->FreeMipmappedArray({id}));
}

// A texture (`texture`) or surface object's descriptor, filled into the program's `out` by
// `fill(record)`: cudaErrorInvalidValue for a null `out` or an object this process did not make.
template <typename Out, typename Fill>
cudaError_t GetObjectDesc(bool texture, uint64_t object, Out* out, Fill&& fill) {
  Runtime& rt = Runtime::Get();
  auto t = FindObject(texture, object);
  if (out == nullptr || !t) {
    return rt.Finish(CudaStatus(CudaError::kInvalidValue,
                                texture ? "not a texture object" : "not a surface object"));
  }
  fill(*t, *out);
  return cudaSuccess;
}

}  // namespace arrays
}  // namespace flyt::runtime

using flyt::remote::CudaError;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
namespace rt_impl = flyt::runtime;

extern "C" {

cudaError_t cudaMallocArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc,
                            size_t width, size_t height, unsigned int flags) noexcept {
  return Guard("cudaMallocArray", [&] {
    return rt_impl::arrays::MallocArray(array, desc, rt_impl::rt_extent(width, height, 0), flags);
  });
}

cudaError_t cudaMalloc3DArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc,
                              struct cudaExtent extent, unsigned int flags) noexcept {
  return Guard("cudaMalloc3DArray",
               [&] { return rt_impl::arrays::MallocArray(array, desc, extent, flags); });
}

cudaError_t cudaFreeArray(cudaArray_t array) noexcept {
  return Guard("cudaFreeArray", [&] { return rt_impl::arrays::FreeArray(array); });
}

cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc* desc, struct cudaExtent* extent,
                             unsigned int* flags, cudaArray_t array) noexcept {
  return Guard("cudaArrayGetInfo", [&] {
    Runtime& rt = Runtime::Get();
    std::optional<rt_impl::ArrayRecord> a = rt_impl::arrays::FindArray(rt, array);
    if (!a) return rt.Finish(CudaStatus(CudaError::kInvalidResourceHandle, "not an array"));
    if (desc != nullptr) *desc = a->desc;
    if (extent != nullptr) *extent = a->extent;
    if (flags != nullptr) *flags = a->flags;
    return cudaSuccess;
  });
}

cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc* desc,
                               cudaArray_const_t array) noexcept {
  return Guard("cudaGetChannelDesc", [&] {
    Runtime& rt = Runtime::Get();
    if (desc == nullptr) return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null desc"));
    std::optional<rt_impl::ArrayRecord> a = rt_impl::arrays::FindArray(rt, array);
    if (!a) return rt.Finish(CudaStatus(CudaError::kInvalidResourceHandle, "not an array"));
    *desc = a->desc;
    return cudaSuccess;
  });
}

cudaError_t cudaMalloc3D(struct cudaPitchedPtr* pitchedDevPtr, struct cudaExtent extent) noexcept {
  return Guard("cudaMalloc3D", [&] {
    Runtime& rt = Runtime::Get();
    if (pitchedDevPtr == nullptr) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "null pitchedDevPtr"));
    }
    size_t pitch = 0;
    void* ptr = nullptr;
    size_t rows = 0;
    if (__builtin_mul_overflow(extent.height, extent.depth, &rows)) {
      return rt.Finish(CudaStatus(CudaError::kMemoryAllocation, "extent too large"));
    }
    cudaError_t e = cudaMallocPitch(&ptr, &pitch, extent.width, rows);
    *pitchedDevPtr = rt_impl::rt_pitched(ptr, pitch, extent.width, extent.height);
    return e;
  });
}

cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* mipmappedArray,
                                     const struct cudaChannelFormatDesc* desc,
                                     struct cudaExtent extent, unsigned int numLevels,
                                     unsigned int flags) noexcept {
  return Guard("cudaMallocMipmappedArray", [&] {
    return rt_impl::arrays::MallocMipmapped(mipmappedArray, desc, extent, numLevels, flags);
  });
}

cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t* levelArray,
                                       cudaMipmappedArray_const_t mipmappedArray,
                                       unsigned int level) noexcept {
  return Guard("cudaGetMipmappedArrayLevel",
               [&] { return rt_impl::arrays::MipmapLevel(levelArray, mipmappedArray, level); });
}

cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray) noexcept {
  return Guard("cudaFreeMipmappedArray",
               [&] { return rt_impl::arrays::FreeMipmapped(mipmappedArray); });
}

cudaError_t cudaCreateTextureObject(cudaTextureObject_t* pTexObject,
                                    const struct cudaResourceDesc* pResDesc,
                                    const struct cudaTextureDesc* pTexDesc,
                                    const struct cudaResourceViewDesc* pResViewDesc) noexcept {
  return Guard("cudaCreateTextureObject", [&] {
    return rt_impl::arrays::CreateObject(true, pTexObject, pResDesc, pTexDesc, pResViewDesc);
  });
}

cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject) noexcept {
  return Guard("cudaDestroyTextureObject",
               [&] { return rt_impl::arrays::DestroyObject(true, texObject); });
}

cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc* pResDesc,
                                             cudaTextureObject_t texObject) noexcept {
  return Guard("cudaGetTextureObjectResourceDesc", [&] {
    return rt_impl::arrays::GetObjectDesc(true, texObject, pResDesc,
                                          [](const auto& t, auto& out) { out = t.resource; });
  });
}

cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc* pTexDesc,
                                            cudaTextureObject_t texObject) noexcept {
  return Guard("cudaGetTextureObjectTextureDesc", [&] {
    return rt_impl::arrays::GetObjectDesc(true, texObject, pTexDesc,
                                          [](const auto& t, auto& out) { out = t.texture; });
  });
}

cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc* pResViewDesc,
                                                 cudaTextureObject_t texObject) noexcept {
  return Guard("cudaGetTextureObjectResourceViewDesc", [&] {
    return rt_impl::arrays::GetObjectDesc(
        true, texObject, pResViewDesc,
        [](const auto& t, auto& out) { out = t.view ? *t.view : cudaResourceViewDesc{}; });
  });
}

cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* pSurfObject,
                                    const struct cudaResourceDesc* pResDesc) noexcept {
  return Guard("cudaCreateSurfaceObject", [&] {
    return rt_impl::arrays::CreateObject(false, pSurfObject, pResDesc, nullptr, nullptr);
  });
}

cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject) noexcept {
  return Guard("cudaDestroySurfaceObject",
               [&] { return rt_impl::arrays::DestroyObject(false, surfObject); });
}

cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc* pResDesc,
                                             cudaSurfaceObject_t surfObject) noexcept {
  return Guard("cudaGetSurfaceObjectResourceDesc", [&] {
    return rt_impl::arrays::GetObjectDesc(false, surfObject, pResDesc,
                                          [](const auto& t, auto& out) { out = t.resource; });
  });
}

}  // extern "C"
