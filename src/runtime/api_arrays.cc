// flyt's libcudart.so.13: the CUDA runtime's arrays family (issue 17). See runtime.h.
//
// CUDA arrays and mipmapped arrays live on the server under numbers this process picks; a
// cudaArray_t / cudaMipmappedArray_t is a pointer to a record here (a handle the runtime did not
// hand out is refused, never dereferenced). Their shape is kept here, so cudaArrayGetInfo and
// cudaGetChannelDesc need no round trip. Texture and surface objects are the values the server
// (the device) returned; their descriptors are kept here for the getters.
//
// 2D/3D copies (cudaMemcpy2D*, cudaMemcpy3D*, the array copies) are one message each: host data
// travels with its rows packed (no pitch gaps) both ways. Host-to-device copies are posted when
// async; device-to-host copies wait for their data even when async (the data is unpacked into the
// program's rows on arrival), which CUDA allows.
#include <texture_types.h>
#include <surface_types.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "runtime/exports.h"
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

Runtime::ArraysState& Runtime::arrays_state() {
  ArraysState* state = arrays_state_.load();
  if (state != nullptr) return *state;
  auto* fresh = new ArraysState();
  if (arrays_state_.compare_exchange_strong(state, fresh)) return *fresh;
  delete fresh;
  return *state;
}

namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }
uint64_t Address(const void* p) { return reinterpret_cast<uint64_t>(p); }
bool MulOk(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool AddOk(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }

// A live array record (this generation) for a handle the program passed, or null.
std::optional<ArrayRecord> FindArray(Runtime& rt, const void* handle) {
  Runtime::ArraysState& st = rt.arrays_state();
  MutexLock lock(st.mu);
  auto it = st.arrays.find(handle);
  if (it == st.arrays.end() || it->second->generation != rt.generation()) return std::nullopt;
  return *it->second;
}

remote::ArrayShape Shape(const cudaChannelFormatDesc& d, cudaExtent e, unsigned flags) {
  return remote::ArrayShape{static_cast<uint32_t>(d.f), d.x, d.y, d.z, d.w, e.width, e.height,
                            e.depth, flags};
}

// One end of a copy as the program named it.
struct End {
  enum class Kind { kHost, kDevice, kArray };
  Kind kind = Kind::kHost;
  void* host = nullptr;  // kHost
  uint64_t ptr = 0;      // kDevice
  uint64_t array = 0;    // kArray: the server's handle
  uint64_t pitch = 0;    // bytes per row (host, device)
  uint64_t height = 0;   // rows per slice (host, device)
  uint64_t x = 0, y = 0, z = 0;  // x in bytes
};

remote::CopyEnd Wire(const End& e) {
  remote::CopyEnd w;
  w.kind = e.kind == End::Kind::kArray ? 2 : 1;
  w.ptr = e.ptr;
  w.array = e.array;
  w.pitch = e.pitch;
  w.height = e.height;
  w.x = e.x;
  w.y = e.y;
  w.z = e.z;
  return w;
}

// Classifies a pointer end by the copy's kind: `device_side` whether the kind puts this end on
// the device (nullopt: cudaMemcpyDefault, decided by the pointer).
CudaStatus ClassifyPointer(Runtime& rt, End& e, void* p, std::optional<bool> device_side) {
  bool device = device_side ? *device_side : rt.IsDevicePointer(p);
  if (device) {
    e.kind = End::Kind::kDevice;
    e.ptr = Address(p);
  } else {
    if (p == nullptr) return Error(CudaError::kInvalidValue, "null host pointer");
    e.kind = End::Kind::kHost;
    e.host = p;
  }
  return CudaStatus::Ok();
}

// The sides a cudaMemcpyKind names: (dst on device, src on device); nullopt for Default.
CudaResult<std::pair<std::optional<bool>, std::optional<bool>>> Sides(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return std::pair<std::optional<bool>, std::optional<bool>>{false, false};
    case cudaMemcpyHostToDevice:
      return std::pair<std::optional<bool>, std::optional<bool>>{true, false};
    case cudaMemcpyDeviceToHost:
      return std::pair<std::optional<bool>, std::optional<bool>>{false, true};
    case cudaMemcpyDeviceToDevice:
      return std::pair<std::optional<bool>, std::optional<bool>>{true, true};
    case cudaMemcpyDefault:
      return std::pair<std::optional<bool>, std::optional<bool>>{std::nullopt, std::nullopt};
  }
  return Error(CudaError::kInvalidMemcpyDirection, "unknown cudaMemcpyKind");
}

// Checks the device range a pitched end covers for w x h x d.
CudaStatus CheckDeviceEnd(Runtime& rt, const End& e, uint64_t w, uint64_t h, uint64_t d) {
  if (e.pitch < w) return Error(CudaError::kInvalidPitchValue, "width exceeds the pitch");
  uint64_t first = 0, last = 0, t = 0, zd = 0, yh = 0, xw = 0;
  if (!AddOk(e.z, d - 1, zd) || !AddOk(e.y, h - 1, yh) || !AddOk(e.x, w, xw) ||
      !MulOk(e.z, e.height, t) || !AddOk(t, e.y, t) || !MulOk(t, e.pitch, t) ||
      !AddOk(t, e.x, first) || !MulOk(zd, e.height, t) || !AddOk(t, yh, t) ||
      !MulOk(t, e.pitch, t) || !AddOk(t, xw, last) || !AddOk(e.ptr, last, t)) {
    return Error(CudaError::kInvalidValue, "pitched range out of range");
  }
  if (!rt.IsDeviceRange(reinterpret_cast<const void*>(e.ptr + first), last - first)) {
    return Error(CudaError::kInvalidValue,
                 "pitched range is not inside a device allocation of this process");
  }
  return CudaStatus::Ok();
}

std::byte* HostRow(const End& e, uint64_t y, uint64_t z) {
  return static_cast<std::byte*>(e.host) + ((e.z + z) * e.height + e.y + y) * e.pitch + e.x;
}

// The one 2D/3D copy: w bytes x h rows x d slices from `src` to `dst`.
cudaError_t Copy3D(End dst, End src, uint64_t w, uint64_t h, uint64_t d, cudaStream_t stream,
                   bool async, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  if (w == 0 || h == 0 || d == 0) return cudaSuccess;
  if ((dst.kind != End::Kind::kArray && dst.pitch < w) ||
      (src.kind != End::Kind::kArray && src.pitch < w)) {
    return rt.Finish(Error(CudaError::kInvalidPitchValue, "width exceeds a pitch"));
  }
  uint64_t bytes = 0;
  if (!MulOk(w, h, bytes) || !MulOk(bytes, d, bytes)) {
    return rt.Finish(Error(CudaError::kInvalidValue, "copy region too large"));
  }
  if (dst.kind == End::Kind::kHost && src.kind == End::Kind::kHost) {
    if (async) {
      CudaResult<remote::Connection*> conn = rt.Connection();
      if (!conn.ok()) return rt.Finish(conn.status());
      CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
      if (!id.ok()) return rt.Finish(id.status());
      cudaError_t synced = rt.FinishSync((*conn)->StreamSynchronize({*id}).status());
      if (synced != cudaSuccess) return synced;
    }
    for (uint64_t z = 0; z < d; ++z) {
      for (uint64_t y = 0; y < h; ++y) std::memmove(HostRow(dst, y, z), HostRow(src, y, z), w);
    }
    return cudaSuccess;
  }
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  for (const End* e : {&dst, &src}) {
    if (e->kind == End::Kind::kDevice) {
      if (CudaStatus s = CheckDeviceEnd(rt, *e, w, h, d); !s.ok()) return rt.Finish(s);
    }
  }
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  remote::Connection& c = **conn;
  if (src.kind == End::Kind::kHost) {
    // Rows packed: straight from the program's memory when they already are.
    std::vector<std::byte> packed;
    std::span<const std::byte> data;
    if (src.pitch == w && (d == 1 || src.height == h)) {
      data = std::span<const std::byte>(HostRow(src, 0, 0), bytes);
    } else {
      packed.resize(bytes);
      std::byte* out = packed.data();
      for (uint64_t z = 0; z < d; ++z) {
        for (uint64_t y = 0; y < h; ++y, out += w) std::memcpy(out, HostRow(src, y, z), w);
      }
      data = packed;
    }
    if (async) return rt.Finish(c.Memcpy3DInAsync({Wire(dst), w, h, d, bytes, *id}, data));
    return rt.FinishSync(c.Memcpy3DIn({Wire(dst), w, h, d, bytes, *id}, data).status());
  }
  if (dst.kind == End::Kind::kHost) {
    std::vector<std::byte> packed;
    std::span<std::byte> landing;
    const bool direct = dst.pitch == w && (d == 1 || dst.height == h);
    if (direct) {
      landing = std::span<std::byte>(HostRow(dst, 0, 0), bytes);
    } else {
      packed.resize(bytes);
      landing = packed;
    }
    CudaStatus s = c.Memcpy3DOut({Wire(src), w, h, d, bytes, *id}, landing).status();
    cudaError_t e = async ? rt.Finish(s) : rt.FinishSync(s);
    if (e != cudaSuccess || direct) return e;
    const std::byte* in = packed.data();
    for (uint64_t z = 0; z < d; ++z) {
      for (uint64_t y = 0; y < h; ++y, in += w) std::memcpy(HostRow(dst, y, z), in, w);
    }
    return cudaSuccess;
  }
  return rt.Finish(c.Memcpy3DDevice({Wire(dst), Wire(src), w, h, d, *id}));
}

// An array end at (x elements, y, z); the kind must put it on the device.
CudaResult<End> ArrayEnd(Runtime& rt, const void* handle, uint64_t x_bytes, uint64_t y,
                         uint64_t z, std::optional<bool> device_side) {
  if (device_side && !*device_side) {
    return Error(CudaError::kInvalidMemcpyDirection, "an array is on the device");
  }
  std::optional<ArrayRecord> a = FindArray(rt, handle);
  if (!a) return Error(CudaError::kInvalidResourceHandle, "not an array of this process");
  End e;
  e.kind = End::Kind::kArray;
  e.array = a->id;
  e.x = x_bytes;
  e.y = y;
  e.z = z;
  return e;
}

// cudaMemcpy2DToArray / FromArray / ArrayToArray and the 2D pointer copies.
cudaError_t Copy2DAny(const void* dst_array, void* dst, size_t dpitch, size_t dx, size_t dy,
                      const void* src_array, const void* src, size_t spitch, size_t sx, size_t sy,
                      size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t stream,
                      bool async, bool per_thread) {
  Runtime& rt = Runtime::Get();
  auto sides = Sides(kind);
  if (!sides.ok()) return rt.Finish(sides.status());
  End d, s;
  if (dst_array != nullptr) {
    auto e = ArrayEnd(rt, dst_array, dx, dy, 0, sides->first);
    if (!e.ok()) return rt.Finish(e.status());
    d = *e;
  } else {
    if (CudaStatus st = ClassifyPointer(rt, d, dst, sides->first); !st.ok()) return rt.Finish(st);
    d.pitch = dpitch;
    d.height = height;
  }
  if (src_array != nullptr) {
    auto e = ArrayEnd(rt, src_array, sx, sy, 0, sides->second);
    if (!e.ok()) return rt.Finish(e.status());
    s = *e;
  } else {
    if (CudaStatus st = ClassifyPointer(rt, s, const_cast<void*>(src), sides->second); !st.ok()) {
      return rt.Finish(st);
    }
    s.pitch = spitch;
    s.height = height;
  }
  return Copy3D(d, s, width, height, 1, stream, async, per_thread);
}

// The deprecated linear copies to/from arrays: `count` bytes from (wOffset, hOffset) on, row
// after row; split into a partial first row, whole rows and a partial last row.
cudaError_t CopyLinear(const void* dst_array, size_t dx, size_t dy, void* dst,
                       const void* src_array, size_t sx, size_t sy, const void* src, size_t count,
                       cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (count == 0) return cudaSuccess;
  const void* handle = dst_array != nullptr ? dst_array : src_array;
  std::optional<ArrayRecord> a = FindArray(rt, handle);
  if (!a) return rt.Finish(Error(CudaError::kInvalidResourceHandle, "not an array"));
  const size_t row = a->extent.width * a->element_bytes();
  size_t x = dst_array != nullptr ? dx : sx, y = dst_array != nullptr ? dy : sy;
  if (dst_array != nullptr && src_array != nullptr) {
    // Array to array: byte by byte positions may differ; copy row-sized pieces of each.
    std::optional<ArrayRecord> b = FindArray(rt, src_array);
    if (!b) return rt.Finish(Error(CudaError::kInvalidResourceHandle, "not an array"));
    const size_t srow = b->extent.width * b->element_bytes();
    size_t done = 0, tx = dx, ty = dy, fx = sx, fy = sy;
    while (done < count) {
      size_t n = std::min({count - done, row - std::min(row, tx), srow - std::min(srow, fx)});
      if (n == 0) return rt.Finish(Error(CudaError::kInvalidValue, "copy past the array's end"));
      cudaError_t e = Copy2DAny(dst_array, nullptr, 0, tx, ty, src_array, nullptr, 0, fx, fy, n, 1,
                                kind, stream, async, per_thread);
      if (e != cudaSuccess) return e;
      done += n;
      tx += n;
      fx += n;
      if (tx == row) tx = 0, ++ty;
      if (fx == srow) fx = 0, ++fy;
    }
    return cudaSuccess;
  }
  std::byte* hp = static_cast<std::byte*>(dst_array != nullptr ? const_cast<void*>(src) : dst);
  size_t done = 0;
  auto piece = [&](size_t px, size_t py, size_t w, size_t h) {
    void* pd = dst_array != nullptr ? nullptr : static_cast<void*>(hp + done);
    const void* ps = dst_array != nullptr ? static_cast<const void*>(hp + done) : nullptr;
    return Copy2DAny(dst_array, pd, w, px, py, src_array, ps, w, px, py, w, h, kind, stream,
                     async, per_thread);
  };
  if (x >= row && row != 0) return rt.Finish(Error(CudaError::kInvalidValue, "offset past a row"));
  if (x != 0) {
    size_t n = std::min(count, row - x);
    if (cudaError_t e = piece(x, y, n, 1); e != cudaSuccess) return e;
    done += n;
    ++y;
  }
  if (count - done >= row && row != 0) {
    size_t rows = (count - done) / row;
    if (cudaError_t e = piece(0, y, row, rows); e != cudaSuccess) return e;
    done += rows * row;
    y += rows;
  }
  if (done < count) {
    if (cudaError_t e = piece(0, y, count - done, 1); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t Copy3DParms(const cudaMemcpy3DParms* p, cudaStream_t stream, bool async,
                        bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (p == nullptr) return rt.Finish(Error(CudaError::kInvalidValue, "null parameters"));
  auto sides = Sides(p->kind);
  if (!sides.ok()) return rt.Finish(sides.status());
  if ((p->srcArray != nullptr) == (p->srcPtr.ptr != nullptr) ||
      (p->dstArray != nullptr) == (p->dstPtr.ptr != nullptr)) {
    return rt.Finish(Error(CudaError::kInvalidValue, "exactly one of array and pointer per end"));
  }
  // With an array at either end, widths and x positions are in elements.
  size_t elem = 1;
  if (p->srcArray != nullptr || p->dstArray != nullptr) {
    std::optional<ArrayRecord> a =
        FindArray(rt, p->srcArray != nullptr ? p->srcArray : p->dstArray);
    if (!a) return rt.Finish(Error(CudaError::kInvalidResourceHandle, "not an array"));
    elem = a->element_bytes();
  }
  auto make = [&](cudaArray_t array, const cudaPos& pos, const cudaPitchedPtr& ptr,
                  std::optional<bool> side) -> CudaResult<End> {
    if (array != nullptr) return ArrayEnd(rt, array, pos.x * elem, pos.y, pos.z, side);
    End e;
    FLYT_CUDA_RETURN_IF_ERROR(ClassifyPointer(rt, e, ptr.ptr, side));
    e.pitch = ptr.pitch;
    e.height = ptr.ysize;
    e.x = pos.x * elem;
    e.y = pos.y;
    e.z = pos.z;
    return e;
  };
  auto d = make(p->dstArray, p->dstPos, p->dstPtr, sides->first);
  if (!d.ok()) return rt.Finish(d.status());
  auto s = make(p->srcArray, p->srcPos, p->srcPtr, sides->second);
  if (!s.ok()) return rt.Finish(s.status());
  const uint64_t h = std::max<size_t>(p->extent.height, 1), dd = std::max<size_t>(p->extent.depth, 1);
  if (p->extent.width == 0 || p->extent.height == 0 || p->extent.depth == 0) return cudaSuccess;
  for (End* e : {&*d, &*s}) {
    if (e->kind != End::Kind::kArray && dd > 1 && e->height < e->y + h) {
      return rt.Finish(Error(CudaError::kInvalidValue, "rows exceed the slice height (ysize)"));
    }
    if (e->kind != End::Kind::kArray && e->height == 0) e->height = h;
  }
  return Copy3D(*d, *s, p->extent.width * elem, h, dd, stream, async, per_thread);
}

cudaError_t Set3D(cudaPitchedPtr p, int value, cudaExtent extent, cudaStream_t stream,
                  bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (CudaStatus s = rt.StickyStatus(); !s.ok()) return rt.Finish(s);
  if (extent.width == 0 || extent.height == 0 || extent.depth == 0) return cudaSuccess;
  if (p.pitch < extent.width) {
    return rt.Finish(Error(CudaError::kInvalidPitchValue, "width exceeds the pitch"));
  }
  CudaResult<remote::Connection*> conn = rt.Connection();
  if (!conn.ok()) return rt.Finish(conn.status());
  End e;
  e.kind = End::Kind::kDevice;
  e.ptr = Address(p.ptr);
  e.pitch = p.pitch;
  e.height = extent.depth > 1 ? p.ysize : extent.height;
  if (extent.depth > 1 && p.ysize < extent.height) {
    return rt.Finish(Error(CudaError::kInvalidValue, "height exceeds ysize"));
  }
  if (CudaStatus s = CheckDeviceEnd(rt, e, extent.width, extent.height, extent.depth); !s.ok()) {
    return rt.Finish(Error(CudaError::kInvalidValue, s.message()));
  }
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  return rt.Finish((*conn)->Memset3D({Wire(e), static_cast<uint8_t>(value & 0xFF), extent.width,
                                      extent.height, extent.depth, *id}));
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
    void* p = res->resType == cudaResourceTypeLinear ? res->res.linear.devPtr
                                                     : res->res.pitch2D.devPtr;
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
      return rt.Finish(Error(CudaError::kInvalidValue,
                             texture ? "not a texture object of this process"
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
    auto shrink = [level](size_t v) -> size_t { return v == 0 ? 0 : std::max<size_t>(v >> level, 1); };
    fresh->extent = rt_extent(shrink(m.extent.width), shrink(m.extent.height),
                                    (m.flags & cudaArrayLayered) != 0 ? m.extent.depth
                                                                      : shrink(m.extent.depth));
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

}  // namespace

cudaError_t Runtime::ArraysCopy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                  size_t width, size_t height, cudaMemcpyKind kind,
                                  cudaStream_t stream, bool async, bool per_thread) {
  if (width == 0 || height == 0) return cudaSuccess;
  return Copy2DAny(nullptr, dst, dpitch, 0, 0, nullptr, src, spitch, 0, 0, width, height, kind,
                   stream, async, per_thread);
}

cudaError_t Runtime::ArraysSet2D(void* dst, size_t pitch, int value, size_t width, size_t height,
                                 cudaStream_t stream, bool per_thread) {
  return Set3D(rt_pitched(dst, pitch, width, height), value,
               rt_extent(width, height, 1), stream, per_thread);
}

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
    return rt_impl::MallocArray(array, desc, rt_impl::rt_extent(width, height, 0), flags);
  });
}

cudaError_t cudaMalloc3DArray(cudaArray_t* array, const struct cudaChannelFormatDesc* desc,
                              struct cudaExtent extent, unsigned int flags) noexcept {
  return Guard("cudaMalloc3DArray",
               [&] { return rt_impl::MallocArray(array, desc, extent, flags); });
}

cudaError_t cudaFreeArray(cudaArray_t array) noexcept {
  return Guard("cudaFreeArray", [&] { return rt_impl::FreeArray(array); });
}

cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc* desc, struct cudaExtent* extent,
                             unsigned int* flags, cudaArray_t array) noexcept {
  return Guard("cudaArrayGetInfo", [&] {
    Runtime& rt = Runtime::Get();
    std::optional<rt_impl::ArrayRecord> a = rt_impl::FindArray(rt, array);
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
    std::optional<rt_impl::ArrayRecord> a = rt_impl::FindArray(rt, array);
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

#define FLYT_2D_TO_ARRAY(name, async, per_thread)                                                  \
  cudaError_t name(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,              \
                   size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind,          \
                   cudaStream_t stream) noexcept {                                                \
    return Guard(#name, [&] {                                                                     \
      return rt_impl::Copy2DAny(dst, nullptr, 0, wOffset, hOffset, nullptr, src, spitch, 0, 0,    \
                                width, height, kind, stream, async, per_thread);                  \
    });                                                                                           \
  }
FLYT_2D_TO_ARRAY(cudaMemcpy2DToArrayAsync, true, false)
FLYT_2D_TO_ARRAY(cudaMemcpy2DToArrayAsync_ptsz, true, true)
#undef FLYT_2D_TO_ARRAY

cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                size_t spitch, size_t width, size_t height,
                                enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DToArray", [&] {
    return rt_impl::Copy2DAny(dst, nullptr, 0, wOffset, hOffset, nullptr, src, spitch, 0, 0,
                              width, height, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                     const void* src, size_t spitch, size_t width, size_t height,
                                     enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DToArray_ptds", [&] {
    return rt_impl::Copy2DAny(dst, nullptr, 0, wOffset, hOffset, nullptr, src, spitch, 0, 0,
                              width, height, kind, nullptr, false, true);
  });
}

#define FLYT_2D_FROM_ARRAY(name, async, per_thread)                                                \
  cudaError_t name(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,               \
                   size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind,         \
                   cudaStream_t stream) noexcept {                                                \
    return Guard(#name, [&] {                                                                     \
      return rt_impl::Copy2DAny(nullptr, dst, dpitch, 0, 0, src, nullptr, 0, wOffset, hOffset,    \
                                width, height, kind, stream, async, per_thread);                  \
    });                                                                                           \
  }
FLYT_2D_FROM_ARRAY(cudaMemcpy2DFromArrayAsync, true, false)
FLYT_2D_FROM_ARRAY(cudaMemcpy2DFromArrayAsync_ptsz, true, true)
#undef FLYT_2D_FROM_ARRAY

cudaError_t cudaMemcpy2DFromArray(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                  size_t hOffset, size_t width, size_t height,
                                  enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DFromArray", [&] {
    return rt_impl::Copy2DAny(nullptr, dst, dpitch, 0, 0, src, nullptr, 0, wOffset, hOffset,
                              width, height, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpy2DFromArray_ptds(void* dst, size_t dpitch, cudaArray_const_t src,
                                       size_t wOffset, size_t hOffset, size_t width, size_t height,
                                       enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DFromArray_ptds", [&] {
    return rt_impl::Copy2DAny(nullptr, dst, dpitch, 0, 0, src, nullptr, 0, wOffset, hOffset,
                              width, height, kind, nullptr, false, true);
  });
}

cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                     cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                     size_t width, size_t height,
                                     enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DArrayToArray", [&] {
    return rt_impl::Copy2DAny(dst, nullptr, 0, wOffsetDst, hOffsetDst, src, nullptr, 0,
                              wOffsetSrc, hOffsetSrc, width, height, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                          cudaArray_const_t src, size_t wOffsetSrc,
                                          size_t hOffsetSrc, size_t width, size_t height,
                                          enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DArrayToArray_ptds", [&] {
    return rt_impl::Copy2DAny(dst, nullptr, 0, wOffsetDst, hOffsetDst, src, nullptr, 0,
                              wOffsetSrc, hOffsetSrc, width, height, kind, nullptr, false, true);
  });
}

cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                              size_t count, enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyToArray", [&] {
    return rt_impl::CopyLinear(dst, wOffset, hOffset, nullptr, nullptr, 0, 0, src, count, kind,
                               nullptr, false, false);
  });
}

cudaError_t cudaMemcpyToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                   const void* src, size_t count,
                                   enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyToArray_ptds", [&] {
    return rt_impl::CopyLinear(dst, wOffset, hOffset, nullptr, nullptr, 0, 0, src, count, kind,
                               nullptr, false, true);
  });
}

cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                   const void* src, size_t count, enum cudaMemcpyKind kind,
                                   cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyToArrayAsync", [&] {
    return rt_impl::CopyLinear(dst, wOffset, hOffset, nullptr, nullptr, 0, 0, src, count, kind,
                               stream, true, false);
  });
}

cudaError_t cudaMemcpyToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                        const void* src, size_t count, enum cudaMemcpyKind kind,
                                        cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyToArrayAsync_ptsz", [&] {
    return rt_impl::CopyLinear(dst, wOffset, hOffset, nullptr, nullptr, 0, 0, src, count, kind,
                               stream, true, true);
  });
}

cudaError_t cudaMemcpyFromArray(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                size_t count, enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyFromArray", [&] {
    return rt_impl::CopyLinear(nullptr, 0, 0, dst, src, wOffset, hOffset, nullptr, count, kind,
                               nullptr, false, false);
  });
}

cudaError_t cudaMemcpyFromArray_ptds(void* dst, cudaArray_const_t src, size_t wOffset,
                                     size_t hOffset, size_t count,
                                     enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyFromArray_ptds", [&] {
    return rt_impl::CopyLinear(nullptr, 0, 0, dst, src, wOffset, hOffset, nullptr, count, kind,
                               nullptr, false, true);
  });
}

cudaError_t cudaMemcpyFromArrayAsync(void* dst, cudaArray_const_t src, size_t wOffset,
                                     size_t hOffset, size_t count, enum cudaMemcpyKind kind,
                                     cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyFromArrayAsync", [&] {
    return rt_impl::CopyLinear(nullptr, 0, 0, dst, src, wOffset, hOffset, nullptr, count, kind,
                               stream, true, false);
  });
}

cudaError_t cudaMemcpyFromArrayAsync_ptsz(void* dst, cudaArray_const_t src, size_t wOffset,
                                          size_t hOffset, size_t count, enum cudaMemcpyKind kind,
                                          cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyFromArrayAsync_ptsz", [&] {
    return rt_impl::CopyLinear(nullptr, 0, 0, dst, src, wOffset, hOffset, nullptr, count, kind,
                               stream, true, true);
  });
}

cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                   cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                   size_t count, enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyArrayToArray", [&] {
    return rt_impl::CopyLinear(dst, wOffsetDst, hOffsetDst, nullptr, src, wOffsetSrc, hOffsetSrc,
                               nullptr, count, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                        cudaArray_const_t src, size_t wOffsetSrc,
                                        size_t hOffsetSrc, size_t count,
                                        enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyArrayToArray_ptds", [&] {
    return rt_impl::CopyLinear(dst, wOffsetDst, hOffsetDst, nullptr, src, wOffsetSrc, hOffsetSrc,
                               nullptr, count, kind, nullptr, false, true);
  });
}

cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms* p) noexcept {
  return Guard("cudaMemcpy3D", [&] { return rt_impl::Copy3DParms(p, nullptr, false, false); });
}

cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms* p) noexcept {
  return Guard("cudaMemcpy3D_ptds", [&] { return rt_impl::Copy3DParms(p, nullptr, false, true); });
}

cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms* p, cudaStream_t stream) noexcept {
  return Guard("cudaMemcpy3DAsync", [&] { return rt_impl::Copy3DParms(p, stream, true, false); });
}

cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms* p,
                                   cudaStream_t stream) noexcept {
  return Guard("cudaMemcpy3DAsync_ptsz",
               [&] { return rt_impl::Copy3DParms(p, stream, true, true); });
}

cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value,
                         struct cudaExtent extent) noexcept {
  return Guard("cudaMemset3D",
               [&] { return rt_impl::Set3D(pitchedDevPtr, value, extent, nullptr, false); });
}

cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value,
                              struct cudaExtent extent) noexcept {
  return Guard("cudaMemset3D_ptds",
               [&] { return rt_impl::Set3D(pitchedDevPtr, value, extent, nullptr, true); });
}

cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value,
                              struct cudaExtent extent, cudaStream_t stream) noexcept {
  return Guard("cudaMemset3DAsync",
               [&] { return rt_impl::Set3D(pitchedDevPtr, value, extent, stream, false); });
}

cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value,
                                   struct cudaExtent extent, cudaStream_t stream) noexcept {
  return Guard("cudaMemset3DAsync_ptsz",
               [&] { return rt_impl::Set3D(pitchedDevPtr, value, extent, stream, true); });
}

cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* mipmappedArray,
                                     const struct cudaChannelFormatDesc* desc,
                                     struct cudaExtent extent, unsigned int numLevels,
                                     unsigned int flags) noexcept {
  return Guard("cudaMallocMipmappedArray", [&] {
    return rt_impl::MallocMipmapped(mipmappedArray, desc, extent, numLevels, flags);
  });
}

cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t* levelArray,
                                       cudaMipmappedArray_const_t mipmappedArray,
                                       unsigned int level) noexcept {
  return Guard("cudaGetMipmappedArrayLevel",
               [&] { return rt_impl::MipmapLevel(levelArray, mipmappedArray, level); });
}

cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray) noexcept {
  return Guard("cudaFreeMipmappedArray", [&] { return rt_impl::FreeMipmapped(mipmappedArray); });
}

cudaError_t cudaCreateTextureObject(cudaTextureObject_t* pTexObject,
                                    const struct cudaResourceDesc* pResDesc,
                                    const struct cudaTextureDesc* pTexDesc,
                                    const struct cudaResourceViewDesc* pResViewDesc) noexcept {
  return Guard("cudaCreateTextureObject", [&] {
    return rt_impl::CreateObject(true, pTexObject, pResDesc, pTexDesc, pResViewDesc);
  });
}

cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject) noexcept {
  return Guard("cudaDestroyTextureObject",
               [&] { return rt_impl::DestroyObject(true, texObject); });
}

cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc* pResDesc,
                                             cudaTextureObject_t texObject) noexcept {
  return Guard("cudaGetTextureObjectResourceDesc", [&] {
    Runtime& rt = Runtime::Get();
    auto t = rt_impl::FindObject(true, texObject);
    if (pResDesc == nullptr || !t) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "not a texture object"));
    }
    *pResDesc = t->resource;
    return cudaSuccess;
  });
}

cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc* pTexDesc,
                                            cudaTextureObject_t texObject) noexcept {
  return Guard("cudaGetTextureObjectTextureDesc", [&] {
    Runtime& rt = Runtime::Get();
    auto t = rt_impl::FindObject(true, texObject);
    if (pTexDesc == nullptr || !t) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "not a texture object"));
    }
    *pTexDesc = t->texture;
    return cudaSuccess;
  });
}

cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc* pResViewDesc,
                                                 cudaTextureObject_t texObject) noexcept {
  return Guard("cudaGetTextureObjectResourceViewDesc", [&] {
    Runtime& rt = Runtime::Get();
    auto t = rt_impl::FindObject(true, texObject);
    if (pResViewDesc == nullptr || !t) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "not a texture object"));
    }
    if (t->view) {
      *pResViewDesc = *t->view;
    } else {
      std::memset(pResViewDesc, 0, sizeof *pResViewDesc);
    }
    return cudaSuccess;
  });
}

cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* pSurfObject,
                                    const struct cudaResourceDesc* pResDesc) noexcept {
  return Guard("cudaCreateSurfaceObject", [&] {
    return rt_impl::CreateObject(false, pSurfObject, pResDesc, nullptr, nullptr);
  });
}

cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject) noexcept {
  return Guard("cudaDestroySurfaceObject",
               [&] { return rt_impl::DestroyObject(false, surfObject); });
}

cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc* pResDesc,
                                             cudaSurfaceObject_t surfObject) noexcept {
  return Guard("cudaGetSurfaceObjectResourceDesc", [&] {
    Runtime& rt = Runtime::Get();
    auto t = rt_impl::FindObject(false, surfObject);
    if (pResDesc == nullptr || !t) {
      return rt.Finish(CudaStatus(CudaError::kInvalidValue, "not a surface object"));
    }
    *pResDesc = t->resource;
    return cudaSuccess;
  });
}

}  // extern "C"
