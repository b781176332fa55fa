// ClientConnection's handlers of the arrays calls (see connection.h): CUDA arrays and mipmapped
// arrays (handles the client picks, bytes counted against the server's memory limit), 2D/3D
// copies between the wire (rows packed), pitched device memory and arrays, 2D/3D memsets, and
// texture/surface objects. Every handle and device range is checked against this client's own
// tables before the backend sees it. The runtime's side: runtime/api_arrays.cc.
#include <algorithm>
#include <string>

#include "remote_server/connection.h"

namespace flyt::remote {

namespace {

// A 2D/3D copy between host and device is staged whole in server memory (rows packed): at most
// this much per call, so that one request cannot make the server allocate what a device
// allocation holds. A larger copy is refused; the program can split it.
constexpr uint64_t kMaxStagingBytes = 1ull << 30;
// Rows a strided memset (pitch ≠ width) may set in one call.
constexpr uint64_t kMaxMemsetRows = 1ull << 20;

// A channel format as CUDA accepts it for arrays and texture resources:
// cudaChannelFormatKindSigned/Unsigned/Float (0..2); channels of 8, 16 or 32 bits, all the same
// size, 1, 2 or 4 of them (x first; float not 8-bit). The element's bytes.
CudaResult<uint64_t> ChannelElementBytes(uint32_t format, int32_t x, int32_t y, int32_t z,
                                         int32_t w) {
  const int32_t bits[4] = {x, y, z, w};
  int channels = 0;
  for (int i = 0; i < 4 && bits[i] != 0; ++i) {
    if (bits[i] != bits[0] || (bits[i] != 8 && bits[i] != 16 && bits[i] != 32)) {
      return CudaStatus(CudaError::kInvalidChannelDescriptor, "bad channel bits");
    }
    ++channels;
  }
  for (int i = channels; i < 4; ++i) {
    if (bits[i] != 0) return CudaStatus(CudaError::kInvalidChannelDescriptor, "channel gap");
  }
  if (channels == 0 || channels == 3 || format > 2 || (format == 2 && bits[0] == 8)) {
    return CudaStatus(CudaError::kInvalidChannelDescriptor, "unsupported channel format");
  }
  return static_cast<uint64_t>(channels) * static_cast<uint64_t>(bits[0]) / 8;
}

CudaStatus CheckStaging(uint64_t bytes) {
  if (bytes <= kMaxStagingBytes) return CudaStatus::Ok();
  return {CudaError::kMemoryAllocation,
          "a 2D/3D copy between host and device of more than " +
              std::to_string(kMaxStagingBytes >> 20) +
              " MiB is not supported by flyt in one call (split it)"};
}

}  // namespace
namespace {

bool MulOk(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool AddOk(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }

// No dimension of an array may exceed this (CUDA's largest is 131072); keeps sizes far from
// overflow.
constexpr uint64_t kMaxArrayDim = 1 << 20;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

// The region's bytes, rows packed; 0 when it overflows.
uint64_t RegionBytes(uint64_t width_bytes, uint64_t height, uint64_t depth) {
  uint64_t rows = 0, bytes = 0;
  if (!MulOk(width_bytes, height, rows) || !MulOk(rows, depth, bytes)) return 0;
  return bytes;
}

}  // namespace

CudaResult<Session::ArraySpec> ClientConnection::CheckArrayShape(const ArrayShape& shape,
                                                                 uint32_t levels,
                                                                 uint64_t* bytes) const {
  Session::ArraySpec spec;
  spec.format = shape.format;
  spec.bits[0] = shape.x;
  spec.bits[1] = shape.y;
  spec.bits[2] = shape.z;
  spec.bits[3] = shape.w;
  spec.width = shape.width;
  spec.height = shape.height;
  spec.depth = shape.depth;
  spec.flags = shape.flags;
  FLYT_CUDA_RETURN_IF_ERROR(
      ChannelElementBytes(spec.format, shape.x, shape.y, shape.z, shape.w).status());
  if (spec.width == 0 || spec.width > kMaxArrayDim || spec.height > kMaxArrayDim ||
      spec.depth > kMaxArrayDim || (spec.height == 0 && spec.depth != 0) || levels > 32) {
    return Error(CudaError::kInvalidValue, "bad array extent");
  }
  if ((spec.flags & ~uint32_t{0x1F}) != 0) {
    return Error(CudaError::kInvalidValue, "unknown array flags");
  }
  uint64_t total = 0;
  for (uint32_t level = 0; level < std::max<uint32_t>(levels, 1); ++level) {
    auto shrink = [level](uint64_t v) -> uint64_t {
      return v == 0 ? 0 : std::max<uint64_t>(v >> level, 1);
    };
    uint64_t w = shrink(spec.width), h = std::max<uint64_t>(shrink(spec.height), 1);
    // Layered (0x01) and cubemap (0x04) arrays keep their layers or faces at every level.
    uint64_t d = (spec.flags & 0x05) != 0 ? std::max<uint64_t>(spec.depth, 1)
                                          : std::max<uint64_t>(shrink(spec.depth), 1);
    uint64_t b = RegionBytes(w * spec.element_bytes(), h, d);
    if (b == 0 || !AddOk(total, b, total)) {
      return Error(CudaError::kMemoryAllocation, "array too large");
    }
  }
  *bytes = total;
  return spec;
}

CudaResult<MallocArrayReply> ClientConnection::Handle(const MallocArrayRequest& r, Io&) {
  uint64_t bytes = 0;
  FLYT_CUDA_ASSIGN_OR_RETURN(Session::ArraySpec spec, CheckArrayShape(r.shape, 0, &bytes));
  if (r.array == 0 || arrays_.Find(r.array) != nullptr) {
    return InsertError(r.array == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "array", r.array);
  }
  if (!memory_.TryReserve(bytes)) {
    return Error(CudaError::kMemoryAllocation,
                 "the server's memory limit of " + std::to_string(memory_.limit_bytes() >> 20) +
                     " MiB is reached (" + std::to_string(memory_.used_bytes() >> 20) +
                     " MiB in use)");
  }
  CudaResult<uint64_t> handle = session_->ArrayCreate(spec);
  if (!handle.ok()) {
    memory_.Release(bytes);
    return handle.status();
  }
  HandleInsert inserted = arrays_.Insert(r.array, ArrayEntry{*handle, spec, bytes, 0});
  if (inserted != HandleInsert::kOk) {
    (void)session_->ArrayDestroy(*handle);
    memory_.Release(bytes);
    return InsertError(inserted, "array", r.array);
  }
  counters_->allocated_bytes += bytes;
  return MallocArrayReply{};
}

CudaResult<FreeArrayReply> ClientConnection::Handle(const FreeArrayRequest& r, Io&) {
  const ArrayEntry* entry = arrays_.Find(r.array);
  if (entry == nullptr || entry->mipmap != 0) {
    return Error(CudaError::kInvalidValue, "no array " + std::to_string(r.array));
  }
  ArrayEntry e = *arrays_.Erase(r.array);
  CudaStatus s = session_->ArrayDestroy(e.backend);
  memory_.Release(e.bytes);
  counters_->allocated_bytes -= e.bytes;
  FLYT_CUDA_RETURN_IF_ERROR(s);
  return FreeArrayReply{};
}

CudaResult<Session::CopyEndSpec> ClientConnection::CheckCopyEnd(const CopyEnd& end,
                                                                uint64_t width_bytes,
                                                                uint64_t height,
                                                                uint64_t depth) const {
  Session::CopyEndSpec spec;
  spec.ptr = end.ptr;
  spec.pitch = end.pitch;
  spec.height = end.height;
  spec.x = end.x;
  spec.y = end.y;
  spec.z = end.z;
  if (end.kind == 2) {
    const ArrayEntry* a = arrays_.Find(end.array);
    if (a == nullptr) {
      return Error(CudaError::kInvalidResourceHandle, "no array " + std::to_string(end.array));
    }
    const uint64_t row = a->spec.row_bytes(), rows = a->spec.rows(), slices = a->spec.slices();
    if (end.x > row || width_bytes > row - end.x || end.y > rows || height > rows - end.y ||
        end.z > slices || depth > slices - end.z) {
      return Error(CudaError::kInvalidValue, "copy region outside the array");
    }
    spec.kind = Session::CopyEndSpec::Kind::kArray;
    spec.array = a->backend;
    return spec;
  }
  if (end.kind != 1) return Error(CudaError::kInvalidValue, "bad copy end");
  if (end.pitch < width_bytes) return Error(CudaError::kInvalidPitchValue, "width exceeds pitch");
  if (depth > 1 && (end.y > end.height || height > end.height - end.y)) {
    return Error(CudaError::kInvalidValue, "rows exceed the slice height");
  }
  uint64_t first = 0, last = 0, t = 0, zd = 0, yh = 0, xw = 0;
  if (!AddOk(end.z, depth - 1, zd) || !AddOk(end.y, height - 1, yh) ||
      !AddOk(end.x, width_bytes, xw) || !MulOk(end.z, end.height, t) || !AddOk(t, end.y, t) ||
      !MulOk(t, end.pitch, t) || !AddOk(t, end.x, first) || !MulOk(zd, end.height, t) ||
      !AddOk(t, yh, t) || !MulOk(t, end.pitch, t) || !AddOk(t, xw, last) ||
      !AddOk(end.ptr, first, t)) {
    return Error(CudaError::kInvalidValue, "pitched region out of range");
  }
  FLYT_CUDA_RETURN_IF_ERROR(CheckRange(end.ptr + first, last - first, "pitched"));
  spec.kind = Session::CopyEndSpec::Kind::kDevice;
  return spec;
}

template <typename Request>
static CudaStatus CheckExtent(const Request& r, uint64_t* bytes) {
  *bytes = RegionBytes(r.width_bytes, r.height, r.depth);
  if (*bytes == 0 && r.width_bytes != 0 && r.height != 0 && r.depth != 0) {
    return Error(CudaError::kInvalidValue, "copy region too large");
  }
  return CudaStatus::Ok();
}

namespace {

template <typename Request>
CudaResult<Session::Copy3DSpec> CopyShape(const Request& r) {
  Session::Copy3DSpec copy;
  copy.width_bytes = r.width_bytes;
  copy.height = r.height;
  copy.depth = r.depth;
  return copy;
}

}  // namespace

CudaResult<Memcpy3DInReply> ClientConnection::Handle(const Memcpy3DInRequest& r, Io& io) {
  CudaResult<Memcpy3DInAsyncReply> done = Handle(
      Memcpy3DInAsyncRequest{r.dst, r.width_bytes, r.height, r.depth, r.bytes, r.stream}, io);
  if (!done.ok()) return done.status();
  if (r.bytes != 0) {
    FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
    FLYT_CUDA_RETURN_IF_ERROR(session_->StreamSynchronize(stream));
  }
  return Memcpy3DInReply{};
}

CudaResult<Memcpy3DInAsyncReply> ClientConnection::Handle(const Memcpy3DInAsyncRequest& r,
                                                          Io& io) {
  uint64_t bytes = 0;
  if (CudaStatus s = CheckExtent(r, &bytes); !s.ok()) return DrainData(io, r.bytes, s);
  if (bytes != r.bytes) {
    return DrainData(io, r.bytes,
                     Error(CudaError::kInvalidValue, "data size does not match the region"));
  }
  if (bytes == 0) return Memcpy3DInAsyncReply{};
  CudaResult<StreamHandle> stream = ResolveStream(r.stream);
  if (!stream.ok()) return DrainData(io, r.bytes, stream.status());
  CudaResult<Session::CopyEndSpec> dst = CheckCopyEnd(r.dst, r.width_bytes, r.height, r.depth);
  if (!dst.ok()) return DrainData(io, r.bytes, dst.status());
  if (CudaStatus s = CheckStaging(bytes); !s.ok()) return DrainData(io, r.bytes, s);
  Bytes staging(bytes);
  FLYT_CUDA_RETURN_IF_ERROR(ReceiveData(
      io, bytes,
      [&](uint64_t off, std::span<const std::byte> chunk) {
        counters_->bytes_to_device += chunk.size();
        (void)off;
        return CudaStatus::Ok();
      },
      staging.data()));
  Session::Copy3DSpec copy = *CopyShape(r);
  copy.dst = *dst;
  copy.src.kind = Session::CopyEndSpec::Kind::kHost;
  copy.src.host = staging.data();
  copy.src.pitch = r.width_bytes;
  copy.src.height = r.height;
  FLYT_CUDA_RETURN_IF_ERROR(session_->Memcpy3D(copy, *stream));
  return Memcpy3DInAsyncReply{};
}

CudaResult<Memcpy3DOutReply> ClientConnection::Handle(const Memcpy3DOutRequest& r, Io& io) {
  uint64_t bytes = 0;
  FLYT_CUDA_RETURN_IF_ERROR(CheckExtent(r, &bytes));
  if (bytes != r.bytes) {
    return Error(CudaError::kInvalidValue, "data size does not match the region");
  }
  if (bytes == 0) return Memcpy3DOutReply{};
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  FLYT_CUDA_ASSIGN_OR_RETURN(Session::CopyEndSpec src,
                             CheckCopyEnd(r.src, r.width_bytes, r.height, r.depth));
  FLYT_CUDA_RETURN_IF_ERROR(CheckStaging(bytes));
  Bytes staging(bytes);
  Session::Copy3DSpec copy = *CopyShape(r);
  copy.src = src;
  copy.dst.kind = Session::CopyEndSpec::Kind::kHost;
  copy.dst.host = staging.data();
  copy.dst.pitch = r.width_bytes;
  copy.dst.height = r.height;
  FLYT_CUDA_RETURN_IF_ERROR(session_->Memcpy3D(copy, stream));
  for (uint64_t off = 0; off < bytes; off += kDataChunkBytes) {
    size_t n = std::min<uint64_t>(kDataChunkBytes, bytes - off);
    io.protocol = SendData(io.header.seq, io.header.call, off, std::span(staging.data() + off, n));
    if (!io.protocol.ok()) return Error(CudaError::kUnknown, "connection lost");
    counters_->bytes_from_device += n;
  }
  return Memcpy3DOutReply{};
}

CudaResult<Memcpy3DDeviceReply> ClientConnection::Handle(const Memcpy3DDeviceRequest& r, Io&) {
  uint64_t bytes = 0;
  FLYT_CUDA_RETURN_IF_ERROR(CheckExtent(r, &bytes));
  if (bytes == 0) return Memcpy3DDeviceReply{};
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  Session::Copy3DSpec copy = *CopyShape(r);
  FLYT_CUDA_ASSIGN_OR_RETURN(copy.dst, CheckCopyEnd(r.dst, r.width_bytes, r.height, r.depth));
  FLYT_CUDA_ASSIGN_OR_RETURN(copy.src, CheckCopyEnd(r.src, r.width_bytes, r.height, r.depth));
  FLYT_CUDA_RETURN_IF_ERROR(session_->Memcpy3D(copy, stream));
  return Memcpy3DDeviceReply{};
}

CudaResult<Memset3DReply> ClientConnection::Handle(const Memset3DRequest& r, Io&) {
  uint64_t bytes = 0;
  FLYT_CUDA_RETURN_IF_ERROR(CheckExtent(r, &bytes));
  if (bytes == 0) return Memset3DReply{};
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  if (r.dst.kind != 1) return Error(CudaError::kInvalidValue, "memset of a non-pitched range");
  FLYT_CUDA_ASSIGN_OR_RETURN(Session::CopyEndSpec dst,
                             CheckCopyEnd(r.dst, r.width_bytes, r.height, r.depth));
  const uint64_t base = dst.ptr + (dst.z * dst.height + dst.y) * dst.pitch + dst.x;
  if (dst.pitch == r.width_bytes && (r.depth == 1 || dst.height == r.height)) {
    FLYT_CUDA_RETURN_IF_ERROR(session_->Memset(base, r.value, bytes, stream));
    return Memset3DReply{};
  }
  // Row by row (the backend has no strided memset): bounded, so that one request cannot queue
  // billions of memsets.
  if (r.height * r.depth > kMaxMemsetRows) {
    return Error(CudaError::kInvalidValue,
                 "a strided memset of more than " + std::to_string(kMaxMemsetRows) +
                     " rows is not supported by flyt (pitch differs from the width)");
  }
  for (uint64_t z = 0; z < r.depth; ++z) {
    for (uint64_t y = 0; y < r.height; ++y) {
      FLYT_CUDA_RETURN_IF_ERROR(session_->Memset(
          base + (z * dst.height + y) * dst.pitch, r.value, r.width_bytes, stream));
    }
  }
  return Memset3DReply{};
}

CudaResult<Session::ResourceSpec> ClientConnection::CheckResource(const ResourceDesc& d) const {
  Session::ResourceSpec spec;
  spec.type = d.type;
  spec.format = d.format;
  spec.bits[0] = d.x;
  spec.bits[1] = d.y;
  spec.bits[2] = d.z;
  spec.bits[3] = d.w;
  spec.size_bytes = d.size_bytes;
  spec.width = d.width;
  spec.height = d.height;
  spec.pitch = d.pitch;
  spec.ptr = d.ptr;
  switch (d.type) {
    case 0: {
      const ArrayEntry* a = arrays_.Find(d.array);
      if (a == nullptr) return Error(CudaError::kInvalidResourceHandle, "no such array");
      spec.array = a->backend;
      return spec;
    }
    case 1: {
      const MipmapEntry* m = mipmaps_.Find(d.array);
      if (m == nullptr) return Error(CudaError::kInvalidResourceHandle, "no such mipmapped array");
      spec.array = m->backend;
      return spec;
    }
    case 2:
      FLYT_CUDA_RETURN_IF_ERROR(ChannelElementBytes(d.format, d.x, d.y, d.z, d.w).status());
      if (d.size_bytes == 0) return Error(CudaError::kInvalidValue, "empty linear resource");
      FLYT_CUDA_RETURN_IF_ERROR(CheckRange(d.ptr, d.size_bytes, "linear resource"));
      return spec;
    case 3: {
      // The element size the device reads with: the same rule as an array's channels.
      FLYT_CUDA_ASSIGN_OR_RETURN(uint64_t elem, ChannelElementBytes(d.format, d.x, d.y, d.z, d.w));
      uint64_t row = 0, span = 0;
      if (d.width == 0 || d.height == 0 || d.width > kMaxArrayDim || d.height > kMaxArrayDim ||
          !MulOk(d.width, elem, row) || d.pitch < row || !MulOk(d.pitch, d.height - 1, span) ||
          !AddOk(span, row, span)) {
        return Error(CudaError::kInvalidValue, "bad pitch2D resource");
      }
      FLYT_CUDA_RETURN_IF_ERROR(CheckRange(d.ptr, span, "pitch2D resource"));
      return spec;
    }
    default:
      return Error(CudaError::kInvalidValue, "unknown cudaResourceType " + std::to_string(d.type));
  }
}

CudaResult<CreateTextureObjectReply> ClientConnection::Handle(
    const CreateTextureObjectRequest& r, Io&) {
  if (r.object == 0 || textures_.Find(r.object) != nullptr) {
    return InsertError(r.object == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "texture",
                       r.object);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(Session::ResourceSpec resource, CheckResource(r.resource));
  const TextureDesc& t = r.texture;
  if (t.address_mode0 > 3 || t.address_mode1 > 3 || t.address_mode2 > 3 || t.filter_mode > 1 ||
      t.read_mode > 1 || t.mipmap_filter_mode > 1) {
    return Error(CudaError::kInvalidValue, "bad texture descriptor");
  }
  Session::TextureSpec texture;
  texture.address_mode[0] = t.address_mode0;
  texture.address_mode[1] = t.address_mode1;
  texture.address_mode[2] = t.address_mode2;
  texture.filter_mode = t.filter_mode;
  texture.read_mode = t.read_mode;
  texture.srgb = t.srgb;
  texture.border[0] = t.border0;
  texture.border[1] = t.border1;
  texture.border[2] = t.border2;
  texture.border[3] = t.border3;
  texture.normalized_coords = t.normalized_coords;
  texture.max_anisotropy = t.max_anisotropy;
  texture.mipmap_filter_mode = t.mipmap_filter_mode;
  texture.mipmap_level_bias = t.mipmap_level_bias;
  texture.min_mipmap_level_clamp = t.min_mipmap_level_clamp;
  texture.max_mipmap_level_clamp = t.max_mipmap_level_clamp;
  texture.disable_trilinear_optimization = t.disable_trilinear_optimization;
  texture.seamless_cubemap = t.seamless_cubemap;
  Session::ViewSpec view;
  if (r.view.present) {
    view.format = r.view.format;
    view.width = r.view.width;
    view.height = r.view.height;
    view.depth = r.view.depth;
    view.first_mipmap_level = r.view.first_mipmap_level;
    view.last_mipmap_level = r.view.last_mipmap_level;
    view.first_layer = r.view.first_layer;
    view.last_layer = r.view.last_layer;
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(uint64_t value, session_->TextureCreate(
                                                 resource, texture, r.view.present ? &view : nullptr));
  HandleInsert inserted = textures_.Insert(r.object, value);
  if (inserted != HandleInsert::kOk) {
    (void)session_->TextureDestroy(value);
    return InsertError(inserted, "texture", r.object);
  }
  return CreateTextureObjectReply{value};
}

CudaResult<DestroyTextureObjectReply> ClientConnection::Handle(
    const DestroyTextureObjectRequest& r, Io&) {
  std::optional<uint64_t> value = textures_.Erase(r.object);
  if (!value) return Error(CudaError::kInvalidValue, "no texture object " + std::to_string(r.object));
  FLYT_CUDA_RETURN_IF_ERROR(session_->TextureDestroy(*value));
  return DestroyTextureObjectReply{};
}

CudaResult<CreateSurfaceObjectReply> ClientConnection::Handle(
    const CreateSurfaceObjectRequest& r, Io&) {
  if (r.object == 0 || surfaces_.Find(r.object) != nullptr) {
    return InsertError(r.object == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "surface",
                       r.object);
  }
  if (r.resource.type != 0) {
    return Error(CudaError::kInvalidValue, "a surface object needs an array resource");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(Session::ResourceSpec resource, CheckResource(r.resource));
  // The rule CUDA documents, checked here for every backend: the driver itself accepts a surface
  // over an array made without the flag (seen on an H100, driver 580).
  if ((arrays_.Find(r.resource.array)->spec.flags & 0x02) == 0) {
    return Error(CudaError::kInvalidValue, "the array was not made with cudaArraySurfaceLoadStore");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(uint64_t value, session_->SurfaceCreate(resource));
  HandleInsert inserted = surfaces_.Insert(r.object, value);
  if (inserted != HandleInsert::kOk) {
    (void)session_->SurfaceDestroy(value);
    return InsertError(inserted, "surface", r.object);
  }
  return CreateSurfaceObjectReply{value};
}

CudaResult<DestroySurfaceObjectReply> ClientConnection::Handle(
    const DestroySurfaceObjectRequest& r, Io&) {
  std::optional<uint64_t> value = surfaces_.Erase(r.object);
  if (!value) return Error(CudaError::kInvalidValue, "no surface object " + std::to_string(r.object));
  FLYT_CUDA_RETURN_IF_ERROR(session_->SurfaceDestroy(*value));
  return DestroySurfaceObjectReply{};
}

CudaResult<MallocMipmappedArrayReply> ClientConnection::Handle(
    const MallocMipmappedArrayRequest& r, Io&) {
  if (r.levels == 0) return Error(CudaError::kInvalidValue, "no levels");
  uint64_t bytes = 0;
  FLYT_CUDA_ASSIGN_OR_RETURN(Session::ArraySpec spec, CheckArrayShape(r.shape, r.levels, &bytes));
  if (r.mipmap == 0 || mipmaps_.Find(r.mipmap) != nullptr) {
    return InsertError(r.mipmap == 0 ? HandleInsert::kZero : HandleInsert::kTaken,
                       "mipmapped array", r.mipmap);
  }
  if (!memory_.TryReserve(bytes)) {
    return Error(CudaError::kMemoryAllocation,
                 "the server's memory limit of " + std::to_string(memory_.limit_bytes() >> 20) +
                     " MiB is reached");
  }
  CudaResult<uint64_t> handle = session_->MipmappedArrayCreate(spec, r.levels);
  if (!handle.ok()) {
    memory_.Release(bytes);
    return handle.status();
  }
  HandleInsert inserted =
      mipmaps_.Insert(r.mipmap, MipmapEntry{*handle, spec, r.levels, bytes, {}});
  if (inserted != HandleInsert::kOk) {
    (void)session_->MipmappedArrayDestroy(*handle);
    memory_.Release(bytes);
    return InsertError(inserted, "mipmapped array", r.mipmap);
  }
  counters_->allocated_bytes += bytes;
  return MallocMipmappedArrayReply{};
}

CudaResult<GetMipmappedArrayLevelReply> ClientConnection::Handle(
    const GetMipmappedArrayLevelRequest& r, Io&) {
  MipmapEntry* m = mipmaps_.Find(r.mipmap);
  if (m == nullptr) return Error(CudaError::kInvalidResourceHandle, "no such mipmapped array");
  if (r.level >= m->levels) return Error(CudaError::kInvalidValue, "no such level");
  if (r.array == 0 || arrays_.Find(r.array) != nullptr) {
    return InsertError(r.array == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "array", r.array);
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(uint64_t level, session_->MipmappedArrayLevel(m->backend, r.level));
  Session::ArraySpec spec = m->spec;
  auto shrink = [&](uint64_t v) -> uint64_t {
    return v == 0 ? 0 : std::max<uint64_t>(v >> r.level, 1);
  };
  spec.width = shrink(spec.width);
  spec.height = shrink(spec.height);
  if ((spec.flags & 0x01) == 0) spec.depth = shrink(spec.depth);
  HandleInsert inserted = arrays_.Insert(r.array, ArrayEntry{level, spec, 0, r.mipmap});
  if (inserted != HandleInsert::kOk) return InsertError(inserted, "array", r.array);
  m->level_ids.push_back(r.array);
  return GetMipmappedArrayLevelReply{};
}

CudaResult<FreeMipmappedArrayReply> ClientConnection::Handle(const FreeMipmappedArrayRequest& r,
                                                             Io&) {
  std::optional<MipmapEntry> m = mipmaps_.Erase(r.mipmap);
  if (!m) return Error(CudaError::kInvalidValue, "no mipmapped array " + std::to_string(r.mipmap));
  for (uint64_t id : m->level_ids) arrays_.Erase(id);
  CudaStatus s = session_->MipmappedArrayDestroy(m->backend);
  memory_.Release(m->bytes);
  counters_->allocated_bytes -= m->bytes;
  FLYT_CUDA_RETURN_IF_ERROR(s);
  return FreeMipmappedArrayReply{};
}

void ClientConnection::ReleaseArrays() {
  for (auto& [id, value] : textures_.TakeAll()) (void)session_->TextureDestroy(value);
  for (auto& [id, value] : surfaces_.TakeAll()) (void)session_->SurfaceDestroy(value);
  for (auto& [id, entry] : arrays_.TakeAll()) {
    if (entry.mipmap != 0) continue;
    (void)session_->ArrayDestroy(entry.backend);
    memory_.Release(entry.bytes);
    counters_->allocated_bytes -= entry.bytes;
  }
  for (auto& [id, entry] : mipmaps_.TakeAll()) {
    (void)session_->MipmappedArrayDestroy(entry.backend);
    memory_.Release(entry.bytes);
    counters_->allocated_bytes -= entry.bytes;
  }
}

}  // namespace flyt::remote
