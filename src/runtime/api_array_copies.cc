// flyt's libcudart.so.13: the arrays family's 2D/3D copies and memsets (issue 17): cudaMemcpy2D*,
// cudaMemcpy3D*, the array copies, cudaMemset3D* (and, through Runtime::ArraysCopy2D/Set2D, the
// pitched cudaMemcpy2D/cudaMemset2D of the memory family). See runtime.h and arrays_internal.h.
//
// Each copy is one message: host data travels with its rows packed (no pitch gaps) both ways.
// Host-to-device copies are posted when async; device-to-host copies wait for their data even
// when async (the data is unpacked into the program's rows on arrival), which CUDA allows.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "runtime/arrays_internal.h"
#include "runtime/exports.h"
#include "runtime/runtime.h"

namespace flyt::runtime {
namespace arrays {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }
uint64_t Address(const void* p) { return reinterpret_cast<uint64_t>(p); }
bool MulOk(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool AddOk(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }

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

}  // namespace

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

}  // namespace arrays

cudaError_t Runtime::ArraysCopy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                  size_t width, size_t height, cudaMemcpyKind kind,
                                  cudaStream_t stream, bool async, bool per_thread) {
  if (width == 0 || height == 0) return cudaSuccess;
  return arrays::Copy2DAny(nullptr, dst, dpitch, 0, 0, nullptr, src, spitch, 0, 0, width, height, kind,
                   stream, async, per_thread);
}

cudaError_t Runtime::ArraysSet2D(void* dst, size_t pitch, int value, size_t width, size_t height,
                                 cudaStream_t stream, bool per_thread) {
  return arrays::Set3D(rt_pitched(dst, pitch, width, height), value,
               rt_extent(width, height, 1), stream, per_thread);
}

}  // namespace flyt::runtime

using flyt::remote::CudaError;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
namespace rt_impl = flyt::runtime;

extern "C" {

#define FLYT_2D_TO_ARRAY(name, async, per_thread)                                                  \
  cudaError_t name(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,              \
                   size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind,          \
                   cudaStream_t stream) noexcept {                                                \
    return Guard(#name, [&] {                                                                     \
      return rt_impl::arrays::Copy2DAny(dst, nullptr, 0, wOffset, hOffset, nullptr, src, spitch, 0, 0,    \
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
    return rt_impl::arrays::Copy2DAny(dst, nullptr, 0, wOffset, hOffset, nullptr, src, spitch, 0, 0,
                              width, height, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                     const void* src, size_t spitch, size_t width, size_t height,
                                     enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DToArray_ptds", [&] {
    return rt_impl::arrays::Copy2DAny(dst, nullptr, 0, wOffset, hOffset, nullptr, src, spitch, 0, 0,
                              width, height, kind, nullptr, false, true);
  });
}

#define FLYT_2D_FROM_ARRAY(name, async, per_thread)                                                \
  cudaError_t name(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,               \
                   size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind,         \
                   cudaStream_t stream) noexcept {                                                \
    return Guard(#name, [&] {                                                                     \
      return rt_impl::arrays::Copy2DAny(nullptr, dst, dpitch, 0, 0, src, nullptr, 0, wOffset, hOffset,    \
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
    return rt_impl::arrays::Copy2DAny(nullptr, dst, dpitch, 0, 0, src, nullptr, 0, wOffset, hOffset,
                              width, height, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpy2DFromArray_ptds(void* dst, size_t dpitch, cudaArray_const_t src,
                                       size_t wOffset, size_t hOffset, size_t width, size_t height,
                                       enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DFromArray_ptds", [&] {
    return rt_impl::arrays::Copy2DAny(nullptr, dst, dpitch, 0, 0, src, nullptr, 0, wOffset, hOffset,
                              width, height, kind, nullptr, false, true);
  });
}

cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                     cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                     size_t width, size_t height,
                                     enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DArrayToArray", [&] {
    return rt_impl::arrays::Copy2DAny(dst, nullptr, 0, wOffsetDst, hOffsetDst, src, nullptr, 0,
                              wOffsetSrc, hOffsetSrc, width, height, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                          cudaArray_const_t src, size_t wOffsetSrc,
                                          size_t hOffsetSrc, size_t width, size_t height,
                                          enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpy2DArrayToArray_ptds", [&] {
    return rt_impl::arrays::Copy2DAny(dst, nullptr, 0, wOffsetDst, hOffsetDst, src, nullptr, 0,
                              wOffsetSrc, hOffsetSrc, width, height, kind, nullptr, false, true);
  });
}

cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                              size_t count, enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyToArray", [&] {
    return rt_impl::arrays::CopyLinear(dst, wOffset, hOffset, nullptr, nullptr, 0, 0, src, count, kind,
                               nullptr, false, false);
  });
}

cudaError_t cudaMemcpyToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                   const void* src, size_t count,
                                   enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyToArray_ptds", [&] {
    return rt_impl::arrays::CopyLinear(dst, wOffset, hOffset, nullptr, nullptr, 0, 0, src, count, kind,
                               nullptr, false, true);
  });
}

cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                   const void* src, size_t count, enum cudaMemcpyKind kind,
                                   cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyToArrayAsync", [&] {
    return rt_impl::arrays::CopyLinear(dst, wOffset, hOffset, nullptr, nullptr, 0, 0, src, count, kind,
                               stream, true, false);
  });
}

cudaError_t cudaMemcpyToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset, size_t hOffset,
                                        const void* src, size_t count, enum cudaMemcpyKind kind,
                                        cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyToArrayAsync_ptsz", [&] {
    return rt_impl::arrays::CopyLinear(dst, wOffset, hOffset, nullptr, nullptr, 0, 0, src, count, kind,
                               stream, true, true);
  });
}

cudaError_t cudaMemcpyFromArray(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                size_t count, enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyFromArray", [&] {
    return rt_impl::arrays::CopyLinear(nullptr, 0, 0, dst, src, wOffset, hOffset, nullptr, count, kind,
                               nullptr, false, false);
  });
}

cudaError_t cudaMemcpyFromArray_ptds(void* dst, cudaArray_const_t src, size_t wOffset,
                                     size_t hOffset, size_t count,
                                     enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyFromArray_ptds", [&] {
    return rt_impl::arrays::CopyLinear(nullptr, 0, 0, dst, src, wOffset, hOffset, nullptr, count, kind,
                               nullptr, false, true);
  });
}

cudaError_t cudaMemcpyFromArrayAsync(void* dst, cudaArray_const_t src, size_t wOffset,
                                     size_t hOffset, size_t count, enum cudaMemcpyKind kind,
                                     cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyFromArrayAsync", [&] {
    return rt_impl::arrays::CopyLinear(nullptr, 0, 0, dst, src, wOffset, hOffset, nullptr, count, kind,
                               stream, true, false);
  });
}

cudaError_t cudaMemcpyFromArrayAsync_ptsz(void* dst, cudaArray_const_t src, size_t wOffset,
                                          size_t hOffset, size_t count, enum cudaMemcpyKind kind,
                                          cudaStream_t stream) noexcept {
  return Guard("cudaMemcpyFromArrayAsync_ptsz", [&] {
    return rt_impl::arrays::CopyLinear(nullptr, 0, 0, dst, src, wOffset, hOffset, nullptr, count, kind,
                               stream, true, true);
  });
}

cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                   cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                   size_t count, enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyArrayToArray", [&] {
    return rt_impl::arrays::CopyLinear(dst, wOffsetDst, hOffsetDst, nullptr, src, wOffsetSrc, hOffsetSrc,
                               nullptr, count, kind, nullptr, false, false);
  });
}

cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                        cudaArray_const_t src, size_t wOffsetSrc,
                                        size_t hOffsetSrc, size_t count,
                                        enum cudaMemcpyKind kind) noexcept {
  return Guard("cudaMemcpyArrayToArray_ptds", [&] {
    return rt_impl::arrays::CopyLinear(dst, wOffsetDst, hOffsetDst, nullptr, src, wOffsetSrc, hOffsetSrc,
                               nullptr, count, kind, nullptr, false, true);
  });
}

cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms* p) noexcept {
  return Guard("cudaMemcpy3D", [&] { return rt_impl::arrays::Copy3DParms(p, nullptr, false, false); });
}

cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms* p) noexcept {
  return Guard("cudaMemcpy3D_ptds", [&] { return rt_impl::arrays::Copy3DParms(p, nullptr, false, true); });
}

cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms* p, cudaStream_t stream) noexcept {
  return Guard("cudaMemcpy3DAsync", [&] { return rt_impl::arrays::Copy3DParms(p, stream, true, false); });
}

cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms* p,
                                   cudaStream_t stream) noexcept {
  return Guard("cudaMemcpy3DAsync_ptsz",
               [&] { return rt_impl::arrays::Copy3DParms(p, stream, true, true); });
}

cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value,
                         struct cudaExtent extent) noexcept {
  return Guard("cudaMemset3D",
               [&] { return rt_impl::arrays::Set3D(pitchedDevPtr, value, extent, nullptr, false); });
}

cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value,
                              struct cudaExtent extent) noexcept {
  return Guard("cudaMemset3D_ptds",
               [&] { return rt_impl::arrays::Set3D(pitchedDevPtr, value, extent, nullptr, true); });
}

cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value,
                              struct cudaExtent extent, cudaStream_t stream) noexcept {
  return Guard("cudaMemset3DAsync",
               [&] { return rt_impl::arrays::Set3D(pitchedDevPtr, value, extent, stream, false); });
}

cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value,
                                   struct cudaExtent extent, cudaStream_t stream) noexcept {
  return Guard("cudaMemset3DAsync_ptsz",
               [&] { return rt_impl::arrays::Set3D(pitchedDevPtr, value, extent, stream, true); });
}

}  // extern "C"
