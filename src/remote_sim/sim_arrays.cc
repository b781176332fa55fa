// The simulated device's arrays family (see sim_internal.h and sim_backend.h): CUDA arrays and
// mipmapped arrays as dense blocks of host memory (byte-exact copies in and out), 2D/3D copies
// between host, pitched device memory and arrays, and texture/surface objects as unique numbers
// that keep the descriptors they were made with (kernels are not run, so nothing samples them).
#include <cstring>

#include "remote_sim/sim_internal.h"

namespace flyt::remote::sim_internal {
namespace {

bool MulOk(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool AddOk(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }

// Bytes of a dense array of `spec`'s shape; 0 when it overflows.
uint64_t ArrayBytes(const Session::ArraySpec& spec) {
  uint64_t rows = 0, bytes = 0;
  if (!MulOk(spec.row_bytes(), spec.rows(), rows) || !MulOk(rows, spec.slices(), bytes)) return 0;
  return bytes;
}

Session::ArraySpec LevelSpec(const Session::ArraySpec& spec, uint32_t level) {
  Session::ArraySpec s = spec;
  auto shrink = [level](uint64_t v) -> uint64_t {
    if (v == 0) return 0;
    uint64_t r = level >= 64 ? 0 : v >> level;
    return r == 0 ? 1 : r;
  };
  s.width = shrink(spec.width);
  s.height = shrink(spec.height);
  // Layered (0x01) and cubemap (0x04) arrays keep their layers or faces at every level.
  if ((spec.flags & 0x05) == 0) s.depth = shrink(spec.depth);
  return s;
}

}  // namespace

SimSession::SimArray::SimArray(SimBackend& b, const ArraySpec& s) : backend(b), spec(s) {}

SimSession::SimArray::~SimArray() {
  if (reserved) backend.Release(bytes);
}

CudaResult<std::unique_ptr<SimSession::SimArray>> SimSession::NewArray(const ArraySpec& spec) {
  uint64_t bytes = ArrayBytes(spec);
  if (bytes == 0) return Error(CudaError::kInvalidValue, "array size is zero or too large");
  auto array = std::make_unique<SimArray>(backend_, spec);
  if (!backend_.Reserve(bytes)) {
    return Error(CudaError::kMemoryAllocation, "simulated device memory exhausted");
  }
  array->bytes = bytes;
  array->reserved = true;
  array->block = std::make_unique<Block>(bytes, nullptr);  // no pointer names an array
  if (!array->block->ok()) {
    return Error(CudaError::kMemoryAllocation, "host memory for the simulated device exhausted");
  }
  return array;
}

CudaResult<uint64_t> SimSession::ArrayCreate(const ArraySpec& spec) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  FLYT_CUDA_ASSIGN_OR_RETURN(std::unique_ptr<SimArray> array, NewArray(spec));
  uint64_t handle = next_handle_++;
  arrays_.emplace(handle, std::move(array));
  return handle;
}

CudaStatus SimSession::ArrayDestroy(uint64_t array) {
  auto it = arrays_.find(array);
  if (it == arrays_.end() || it->second->mipmap != 0) {
    return Error(CudaError::kInvalidValue, "not an array of this session");
  }
  arrays_.erase(it);
  return CudaStatus::Ok();
}

CudaResult<uint64_t> SimSession::MipmappedArrayCreate(const ArraySpec& spec, uint32_t levels) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  if (levels == 0 || levels > 32) return Error(CudaError::kInvalidValue, "bad level count");
  uint64_t handle = next_handle_++;
  SimMipmap mipmap{spec, {}};
  std::vector<std::pair<uint64_t, std::unique_ptr<SimArray>>> made;
  for (uint32_t level = 0; level < levels; ++level) {
    FLYT_CUDA_ASSIGN_OR_RETURN(std::unique_ptr<SimArray> array, NewArray(LevelSpec(spec, level)));
    array->mipmap = handle;
    made.emplace_back(next_handle_++, std::move(array));
  }
  for (auto& [id, array] : made) {
    mipmap.levels.push_back(id);
    arrays_.emplace(id, std::move(array));
  }
  mipmaps_.emplace(handle, std::move(mipmap));
  return handle;
}

CudaResult<uint64_t> SimSession::MipmappedArrayLevel(uint64_t mipmap, uint32_t level) {
  auto it = mipmaps_.find(mipmap);
  if (it == mipmaps_.end()) return Error(CudaError::kInvalidResourceHandle, "unknown mipmapped array");
  if (level >= it->second.levels.size()) return Error(CudaError::kInvalidValue, "no such level");
  return it->second.levels[level];
}

CudaStatus SimSession::MipmappedArrayDestroy(uint64_t mipmap) {
  auto it = mipmaps_.find(mipmap);
  if (it == mipmaps_.end()) return Error(CudaError::kInvalidValue, "unknown mipmapped array");
  for (uint64_t level : it->second.levels) arrays_.erase(level);
  mipmaps_.erase(it);
  return CudaStatus::Ok();
}

CudaResult<SimSession::Plane> SimSession::ResolveEnd(const CopyEndSpec& end,
                                                     const Copy3DSpec& copy) const {
  const uint64_t w = copy.width_bytes, h = copy.height, d = copy.depth;
  switch (end.kind) {
    case CopyEndSpec::Kind::kHost:
      return Plane{end.host, end.pitch, end.pitch * end.height};
    case CopyEndSpec::Kind::kArray: {
      auto it = arrays_.find(end.array);
      if (it == arrays_.end()) return Error(CudaError::kInvalidResourceHandle, "unknown array");
      const SimArray& a = *it->second;
      const uint64_t row = a.spec.row_bytes(), rows = a.spec.rows();
      if (end.x > row || w > row - end.x || end.y > rows || h > rows - end.y ||
          end.z > a.spec.slices() || d > a.spec.slices() - end.z) {
        return Error(CudaError::kInvalidValue, "copy region outside the array");
      }
      std::byte* base = a.block->data() + (end.z * rows + end.y) * row + end.x;
      return Plane{base, row, row * rows};
    }
    case CopyEndSpec::Kind::kDevice: {
      uint64_t first = 0, last = 0, t = 0, zd = 0, yh = 0, xw = 0;
      if (end.pitch < w || (d > 1 && (end.y > end.height || h > end.height - end.y)) ||
          !AddOk(end.z, d - 1, zd) || !AddOk(end.y, h - 1, yh) || !AddOk(end.x, w, xw) ||
          !MulOk(end.z, end.height, t) || !AddOk(t, end.y, t) || !MulOk(t, end.pitch, t) ||
          !AddOk(t, end.x, first) || !MulOk(zd, end.height, t) || !AddOk(t, yh, t) ||
          !MulOk(t, end.pitch, t) || !AddOk(t, xw, last)) {
        return Error(CudaError::kInvalidValue, "pitched copy region out of range");
      }
      FLYT_CUDA_ASSIGN_OR_RETURN(std::byte * base, Translate(end.ptr + first, last - first));
      return Plane{base, end.pitch, end.pitch * end.height};
    }
  }
  return Error(CudaError::kInvalidValue, "bad copy end");
}

CudaStatus SimSession::Memcpy3D(const Copy3DSpec& copy, StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(CheckStream(stream));
  if (copy.width_bytes == 0 || copy.height == 0 || copy.depth == 0) return CudaStatus::Ok();
  FLYT_CUDA_ASSIGN_OR_RETURN(Plane dst, ResolveEnd(copy.dst, copy));
  FLYT_CUDA_ASSIGN_OR_RETURN(Plane src, ResolveEnd(copy.src, copy));
  for (uint64_t z = 0; z < copy.depth; ++z) {
    for (uint64_t y = 0; y < copy.height; ++y) {
      std::memmove(dst.base + z * dst.slice + y * dst.pitch, src.base + z * src.slice + y * src.pitch,
                   copy.width_bytes);
    }
  }
  return CudaStatus::Ok();
}

CudaStatus SimSession::CheckResource(const ResourceSpec& r) const {
  switch (r.type) {
    case 0:
      if (!arrays_.contains(r.array)) return Error(CudaError::kInvalidResourceHandle, "unknown array");
      return CudaStatus::Ok();
    case 1:
      if (!mipmaps_.contains(r.array)) {
        return Error(CudaError::kInvalidResourceHandle, "unknown mipmapped array");
      }
      return CudaStatus::Ok();
    case 2:
      return Translate(r.ptr, r.size_bytes).status();
    case 3: {
      uint64_t elem = static_cast<uint64_t>(r.bits[0] + r.bits[1] + r.bits[2] + r.bits[3]) / 8;
      if (r.height == 0 || r.width == 0 || r.pitch < r.width * elem) {
        return Error(CudaError::kInvalidValue, "bad pitch2D resource");
      }
      return Translate(r.ptr, r.pitch * (r.height - 1) + r.width * elem).status();
    }
    default:
      return Error(CudaError::kInvalidValue, "unknown resource type");
  }
}

CudaResult<uint64_t> SimSession::TextureCreate(const ResourceSpec& resource,
                                               const TextureSpec& texture, const ViewSpec* view) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  FLYT_CUDA_RETURN_IF_ERROR(CheckResource(resource));
  uint64_t value = next_handle_++;
  SimTexture t{resource, texture, std::nullopt};
  if (view != nullptr) t.view = *view;
  textures_.emplace(value, std::move(t));
  return value;
}

CudaStatus SimSession::TextureDestroy(uint64_t value) {
  if (textures_.erase(value) == 0) return Error(CudaError::kInvalidValue, "unknown texture object");
  return CudaStatus::Ok();
}

CudaResult<uint64_t> SimSession::SurfaceCreate(const ResourceSpec& resource) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  if (resource.type != 0) return Error(CudaError::kInvalidValue, "a surface needs an array");
  auto it = arrays_.find(resource.array);
  if (it == arrays_.end()) return Error(CudaError::kInvalidResourceHandle, "unknown array");
  uint64_t value = next_handle_++;
  surfaces_.emplace(value, resource);
  return value;
}

CudaStatus SimSession::SurfaceDestroy(uint64_t value) {
  if (surfaces_.erase(value) == 0) return Error(CudaError::kInvalidValue, "unknown surface object");
  return CudaStatus::Ok();
}

}  // namespace flyt::remote::sim_internal
