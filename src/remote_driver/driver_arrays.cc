// The driver backend's arrays family (see driver_internal.h): DriverSession's array, mipmapped
// array, 3D copy, texture and surface object calls (driver_session.h). Arrays, mipmapped arrays
// and texture/surface objects are the driver's own handles; the server checked them already.
#include <cstdint>
#include <string>

#include "remote_driver/driver_internal.h"
#include "remote_driver/driver_session.h"

namespace flyt::remote::driver_impl {
namespace {

using ArraySpec = Session::ArraySpec;
using ResourceSpec = Session::ResourceSpec;

CudaStatus ArraysMissing(const char* call) {
  return CudaStatus(ErrorCode::kNotSupported, std::string("this driver does not export ") + call);
}

// The driver's array format for a channel kind (cudaChannelFormatKind) and size.
CudaResult<cuda_driver::CUarray_format> ArrayFormat(uint32_t kind, int32_t bits) {
  using namespace cuda_driver;  // NOLINT(build/namespaces): the CU_AD_FORMAT_* names
  if (kind == 0 && bits == 8) return CU_AD_FORMAT_SIGNED_INT8;
  if (kind == 0 && bits == 16) return CU_AD_FORMAT_SIGNED_INT16;
  if (kind == 0 && bits == 32) return CU_AD_FORMAT_SIGNED_INT32;
  if (kind == 1 && bits == 8) return CU_AD_FORMAT_UNSIGNED_INT8;
  if (kind == 1 && bits == 16) return CU_AD_FORMAT_UNSIGNED_INT16;
  if (kind == 1 && bits == 32) return CU_AD_FORMAT_UNSIGNED_INT32;
  if (kind == 2 && bits == 16) return CU_AD_FORMAT_HALF;
  if (kind == 2 && bits == 32) return CU_AD_FORMAT_FLOAT;
  return CudaStatus(ErrorCode::kInvalidChannelDescriptor, "unsupported channel format");
}

unsigned int Channels(const int32_t bits[4]) {
  unsigned int n = 0;
  while (n < 4 && bits[n] != 0) ++n;
  return n;
}

CudaResult<cuda_driver::CUDA_ARRAY3D_DESCRIPTOR> ArrayDescriptor(const ArraySpec& spec) {
  cuda_driver::CUDA_ARRAY3D_DESCRIPTOR d{};
  FLYT_CUDA_ASSIGN_OR_RETURN(d.Format, ArrayFormat(spec.format, spec.bits[0]));
  d.NumChannels = Channels(spec.bits);
  d.Width = spec.width;
  d.Height = spec.height;
  d.Depth = spec.depth;
  d.Flags = spec.flags;
  return d;
}

CudaResult<cuda_driver::CUDA_RESOURCE_DESC> ResourceDescriptor(const ResourceSpec& r) {
  cuda_driver::CUDA_RESOURCE_DESC d{};
  d.resType = static_cast<int>(r.type);
  switch (r.type) {
    case 0:
      d.res.array.hArray = reinterpret_cast<cuda_driver::CUarray>(r.array);
      break;
    case 1:
      d.res.mipmap.hMipmappedArray = reinterpret_cast<cuda_driver::CUmipmappedArray>(r.array);
      break;
    case 2: {
      FLYT_CUDA_ASSIGN_OR_RETURN(d.res.linear.format, ArrayFormat(r.format, r.bits[0]));
      d.res.linear.devPtr = r.ptr;
      d.res.linear.numChannels = Channels(r.bits);
      d.res.linear.sizeInBytes = r.size_bytes;
      break;
    }
    case 3: {
      FLYT_CUDA_ASSIGN_OR_RETURN(d.res.pitch2D.format, ArrayFormat(r.format, r.bits[0]));
      d.res.pitch2D.devPtr = r.ptr;
      d.res.pitch2D.numChannels = Channels(r.bits);
      d.res.pitch2D.width = r.width;
      d.res.pitch2D.height = r.height;
      d.res.pitch2D.pitchInBytes = r.pitch;
      break;
    }
    default:
      return CudaStatus(ErrorCode::kInvalidValue, "unknown resource type");
  }
  return d;
}

}  // namespace

CudaResult<uint64_t> DriverSession::ArrayCreate(const ArraySpec& spec) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.Array3DCreate == nullptr) return ArraysMissing("cuArray3DCreate");
  FLYT_CUDA_ASSIGN_OR_RETURN(cuda_driver::CUDA_ARRAY3D_DESCRIPTOR d, ArrayDescriptor(spec));
  cuda_driver::CUarray array = nullptr;
  CUresult rc = fn_.Array3DCreate(&array, &d);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuArray3DCreate", rc);
  arr_arrays_.insert(array);
  return reinterpret_cast<uint64_t>(array);
}

CudaStatus DriverSession::ArrayDestroy(uint64_t handle) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  auto array = reinterpret_cast<cuda_driver::CUarray>(handle);
  if (arr_arrays_.erase(array) == 0) return UnknownHandle("cuArrayDestroy", "array");
  CUresult rc = fn_.ArrayDestroy(array);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuArrayDestroy", rc);
  return CudaStatus::Ok();
}

CudaResult<uint64_t> DriverSession::MipmappedArrayCreate(const ArraySpec& spec, uint32_t levels) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.MipmappedArrayCreate == nullptr) return ArraysMissing("cuMipmappedArrayCreate");
  FLYT_CUDA_ASSIGN_OR_RETURN(cuda_driver::CUDA_ARRAY3D_DESCRIPTOR d, ArrayDescriptor(spec));
  cuda_driver::CUmipmappedArray mipmap = nullptr;
  CUresult rc = fn_.MipmappedArrayCreate(&mipmap, &d, levels);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMipmappedArrayCreate", rc);
  arr_mipmaps_.insert(mipmap);
  return reinterpret_cast<uint64_t>(mipmap);
}

CudaResult<uint64_t> DriverSession::MipmappedArrayLevel(uint64_t handle, uint32_t level) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  auto mipmap = reinterpret_cast<cuda_driver::CUmipmappedArray>(handle);
  if (!arr_mipmaps_.contains(mipmap) || fn_.MipmappedArrayGetLevel == nullptr) {
    return UnknownHandle("cuMipmappedArrayGetLevel", "mipmapped array");
  }
  cuda_driver::CUarray array = nullptr;
  CUresult rc = fn_.MipmappedArrayGetLevel(&array, mipmap, level);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMipmappedArrayGetLevel", rc);
  arr_levels_.insert(array);
  return reinterpret_cast<uint64_t>(array);
}

CudaStatus DriverSession::MipmappedArrayDestroy(uint64_t handle) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  auto mipmap = reinterpret_cast<cuda_driver::CUmipmappedArray>(handle);
  if (arr_mipmaps_.erase(mipmap) == 0) {
    return UnknownHandle("cuMipmappedArrayDestroy", "mipmapped array");
  }
  CUresult rc = fn_.MipmappedArrayDestroy(mipmap);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMipmappedArrayDestroy", rc);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::Memcpy3D(const Copy3DSpec& copy, StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.Memcpy3DAsync == nullptr) return ArraysMissing("cuMemcpy3DAsync");
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  cuda_driver::CUDA_MEMCPY3D c{};
  auto fill = [](const CopyEndSpec& e, size_t& x, size_t& y, size_t& z, int& type,
                 CUdeviceptr& device, cuda_driver::CUarray& array, size_t& pitch, size_t& height) {
    x = e.x;
    y = e.y;
    z = e.z;
    switch (e.kind) {
      case CopyEndSpec::Kind::kHost:
        type = cuda_driver::CU_MEMORYTYPE_HOST;
        break;
      case CopyEndSpec::Kind::kDevice:
        type = cuda_driver::CU_MEMORYTYPE_DEVICE;
        device = e.ptr;
        break;
      case CopyEndSpec::Kind::kArray:
        type = cuda_driver::CU_MEMORYTYPE_ARRAY;
        array = reinterpret_cast<cuda_driver::CUarray>(e.array);
        return;
    }
    pitch = e.pitch;
    height = e.height;
  };
  fill(copy.src, c.srcXInBytes, c.srcY, c.srcZ, c.srcMemoryType, c.srcDevice, c.srcArray,
       c.srcPitch, c.srcHeight);
  fill(copy.dst, c.dstXInBytes, c.dstY, c.dstZ, c.dstMemoryType, c.dstDevice, c.dstArray,
       c.dstPitch, c.dstHeight);
  c.srcHost = copy.src.host;
  c.dstHost = copy.dst.host;
  c.WidthInBytes = copy.width_bytes;
  c.Height = copy.height;
  c.Depth = copy.depth;
  CUresult rc = fn_.Memcpy3DAsync(&c, s);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemcpy3DAsync", rc);
  if (copy.src.kind == CopyEndSpec::Kind::kHost || copy.dst.kind == CopyEndSpec::Kind::kHost) {
    // The host end is the server's staging buffer: done before it is sent or reused.
    rc = fn_.StreamSynchronize(s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamSynchronize", rc);
  }
  return CudaStatus::Ok();
}

CudaResult<uint64_t> DriverSession::TextureCreate(const ResourceSpec& resource,
                                                  const TextureSpec& texture,
                                                  const ViewSpec* view) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.TexObjectCreate == nullptr) return ArraysMissing("cuTexObjectCreate");
  FLYT_CUDA_ASSIGN_OR_RETURN(cuda_driver::CUDA_RESOURCE_DESC r, ResourceDescriptor(resource));
  cuda_driver::CUDA_TEXTURE_DESC t{};
  for (int i = 0; i < 3; ++i) t.addressMode[i] = static_cast<int>(texture.address_mode[i]);
  t.filterMode = static_cast<int>(texture.filter_mode);
  if (texture.read_mode == 0) t.flags |= cuda_driver::CU_TRSF_READ_AS_INTEGER;
  if (texture.normalized_coords != 0) t.flags |= cuda_driver::CU_TRSF_NORMALIZED_COORDINATES;
  if (texture.srgb != 0) t.flags |= cuda_driver::CU_TRSF_SRGB;
  if (texture.disable_trilinear_optimization != 0) {
    t.flags |= cuda_driver::CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION;
  }
  if (texture.seamless_cubemap != 0) t.flags |= cuda_driver::CU_TRSF_SEAMLESS_CUBEMAP;
  t.maxAnisotropy = texture.max_anisotropy;
  t.mipmapFilterMode = static_cast<int>(texture.mipmap_filter_mode);
  t.mipmapLevelBias = texture.mipmap_level_bias;
  t.minMipmapLevelClamp = texture.min_mipmap_level_clamp;
  t.maxMipmapLevelClamp = texture.max_mipmap_level_clamp;
  for (int i = 0; i < 4; ++i) t.borderColor[i] = texture.border[i];
  cuda_driver::CUDA_RESOURCE_VIEW_DESC v{};
  if (view != nullptr) {
    v.format = static_cast<int>(view->format);
    v.width = view->width;
    v.height = view->height;
    v.depth = view->depth;
    v.firstMipmapLevel = view->first_mipmap_level;
    v.lastMipmapLevel = view->last_mipmap_level;
    v.firstLayer = view->first_layer;
    v.lastLayer = view->last_layer;
  }
  cuda_driver::CUtexObject object = 0;
  CUresult rc = fn_.TexObjectCreate(&object, &r, &t, view != nullptr ? &v : nullptr);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuTexObjectCreate", rc);
  arr_textures_.insert(object);
  return object;
}

CudaStatus DriverSession::TextureDestroy(uint64_t value) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (arr_textures_.erase(value) == 0) return UnknownHandle("cuTexObjectDestroy", "texture");
  CUresult rc = fn_.TexObjectDestroy(value);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuTexObjectDestroy", rc);
  return CudaStatus::Ok();
}

CudaResult<uint64_t> DriverSession::SurfaceCreate(const ResourceSpec& resource) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.SurfObjectCreate == nullptr) return ArraysMissing("cuSurfObjectCreate");
  FLYT_CUDA_ASSIGN_OR_RETURN(cuda_driver::CUDA_RESOURCE_DESC r, ResourceDescriptor(resource));
  cuda_driver::CUsurfObject object = 0;
  CUresult rc = fn_.SurfObjectCreate(&object, &r);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuSurfObjectCreate", rc);
  arr_surfaces_.insert(object);
  return object;
}

CudaStatus DriverSession::SurfaceDestroy(uint64_t value) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (arr_surfaces_.erase(value) == 0) return UnknownHandle("cuSurfObjectDestroy", "surface");
  CUresult rc = fn_.SurfObjectDestroy(value);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuSurfObjectDestroy", rc);
  return CudaStatus::Ok();
}

void DriverSession::ReleaseArrays() {
  for (cuda_driver::CUtexObject t : arr_textures_) fn_.TexObjectDestroy(t);
  for (cuda_driver::CUsurfObject o : arr_surfaces_) fn_.SurfObjectDestroy(o);
  for (cuda_driver::CUarray a : arr_arrays_) fn_.ArrayDestroy(a);
  for (cuda_driver::CUmipmappedArray m : arr_mipmaps_) fn_.MipmappedArrayDestroy(m);
  arr_textures_.clear();
  arr_surfaces_.clear();
  arr_arrays_.clear();
  arr_levels_.clear();
  arr_mipmaps_.clear();
}

}  // namespace flyt::remote::driver_impl
