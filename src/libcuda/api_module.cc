// libcuda.so.1: modules (fatbin, cubin or PTX images, from memory or a file), their functions
// and globals, function attributes, occupancy, and kernel launches (posted: no round trip).
#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cuda/image.h"
#include "libcuda/driver.h"

using flyt::libcuda::Driver;
using flyt::libcuda::FunctionRecord;
using flyt::libcuda::Guard;
using flyt::libcuda::ModuleRecord;
using flyt::remote::CudaError;
using flyt::remote::CudaStatus;

namespace {

CUresult LoadImage(CUmodule* module, const void* image, const std::string& label) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = Driver::Get();
  if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
  flyt::Result<flyt::cuda::ImageSpan> located = flyt::cuda::LocateImage(image);
  if (!located.ok()) {
    return d.Local(CUDA_ERROR_INVALID_IMAGE, "module image: " + located.status().message());
  }
  auto loaded = d.LoadModule(located->bytes, label);
  if (!loaded.ok()) return d.Finish(loaded.status());
  *module = *loaded;
  return d.Finish(CudaStatus::Ok());
}

std::string ImageLabel(const void* image) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "image@%p", image);
  return buf;
}

FunctionRecord* Function(CUfunction f) { return Driver::Get().FindFunction(f); }

// One launch: the parameter buffer from kernelParams (packed by the kernel's layout) or from
// `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE, as given).
struct Launch {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  CUstream stream;
  void** params;
  void** extra;
  bool cooperative = false;
  flyt::remote::Dim3 cluster{1, 1, 1};
  int32_t priority = 0;
};

CUresult DoLaunch(CUfunction f, const Launch& l, bool per_thread) {
  Driver& d = Driver::Get();
  if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
  FunctionRecord* function = Function(f);
  if (function == nullptr)
    return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel: not a function");
  for (int i = 0; i < 3; ++i) {
    if (l.grid[i] == 0 || l.block[i] == 0) {
      return d.Local(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: a zero grid or block dimension");
    }
  }
  if (l.params != nullptr && l.extra != nullptr) {
    return d.Local(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: both kernelParams and extra");
  }
  flyt::remote::Bytes params;
  if (l.extra != nullptr) {
    const void* buffer = nullptr;
    size_t size = 0;
    bool size_given = false;
    for (void** e = l.extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = e[1];
      } else if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        size = *static_cast<const size_t*>(e[1]);
        size_given = true;
      } else {
        return d.Local(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: unknown `extra` entry");
      }
    }
    if (!size_given || (buffer == nullptr && size != 0)) {
      return d.Local(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: `extra` without buffer and size");
    }
    if (function->layout != nullptr && size < function->layout->param_bytes) {
      return d.Local(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: `extra` buffer of " +
                                                   std::to_string(size) + " bytes, " +
                                                   function->name + " takes " +
                                                   std::to_string(function->layout->param_bytes));
    }
    params.assign(static_cast<const std::byte*>(buffer),
                  static_cast<const std::byte*>(buffer) + size);
  } else if (function->layout == nullptr) {
    d.WarnOnce("no-layout:" + function->name,
               "flyt does not know the parameters of kernel " + function->name +
                   " (its module could not be read): launch it with `extra`");
    return CUDA_ERROR_NOT_SUPPORTED;
  } else {
    flyt::Result<flyt::remote::Bytes> packed =
        flyt::cuda::PackParameters(*function->layout, l.params);
    if (!packed.ok()) return d.Local(CUDA_ERROR_INVALID_VALUE, packed.status().message());
    params = std::move(packed).value();
  }
  auto conn = d.Connection();
  if (!conn.ok()) return d.Finish(conn.status());
  auto stream = d.ResolveStream(l.stream, per_thread);
  if (!stream.ok()) return d.Finish(stream.status());
  const flyt::remote::Dim3 grid{l.grid[0], l.grid[1], l.grid[2]};
  const flyt::remote::Dim3 block{l.block[0], l.block[1], l.block[2]};
  if (!l.cooperative && l.cluster == flyt::remote::Dim3{1, 1, 1} && l.priority == 0) {
    return d.Finish((*conn)->LaunchKernel(
        {function->id, grid, block, l.shared_bytes, *stream, std::move(params)}));
  }
  return d.Finish(
      (*conn)->LaunchKernelEx({function->id, grid, block, l.shared_bytes, *stream,
                               std::move(params), l.cooperative ? 1u : 0u, l.cluster, l.priority}));
}

CUresult LaunchEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra,
                  bool per_thread) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Launch l{{config->gridDimX, config->gridDimY, config->gridDimZ},
           {config->blockDimX, config->blockDimY, config->blockDimZ},
           config->sharedMemBytes,
           config->hStream,
           params,
           extra};
  if (config->numAttrs > 0 && config->attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    switch (a.id) {
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        l.cooperative = a.value.cooperative != 0;
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        l.cluster = {a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z};
        break;
      case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        l.priority = a.value.priority;
        break;
      case CU_LAUNCH_ATTRIBUTE_IGNORE:
      case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
      case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        break;  // hints the launch runs without
      default:
        return Driver::Get().Unsupported("cuLaunchKernelEx with this launch attribute");
    }
  }
  return DoLaunch(f, l, per_thread);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  return Guard("cuModuleLoadData", [&] { return LoadImage(module, image, ImageLabel(image)); });
}

// JIT options are for PTX compilation, which the server's driver does with its defaults.
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int,
                                    CUjit_option*, void**) {
  return Guard("cuModuleLoadDataEx", [&] { return LoadImage(module, image, ImageLabel(image)); });
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatbin) {
  return Guard("cuModuleLoadFatBinary",
               [&] { return LoadImage(module, fatbin, ImageLabel(fatbin)); });
}

CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* path) {
  return Guard("cuModuleLoad", [&] {
    if (module == nullptr || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::ifstream file(path, std::ios::binary);
    if (!file)
      return Driver::Get().Local(CUDA_ERROR_FILE_NOT_FOUND, std::string("cuModuleLoad: ") + path);
    std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    bytes.resize(bytes.size() + 8, '\0');  // PTX text gets its terminator; padding for headers
    std::string label = path;
    return LoadImage(module, bytes.data(), label.substr(label.find_last_of('/') + 1));
  });
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  return Guard("cuModuleUnload", [&] {
    Driver& d = Driver::Get();
    if (CUresult r = d.CheckInit(); r != CUDA_SUCCESS) return r;
    return d.Finish(d.UnloadModule(module));
  });
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  return Guard("cuModuleGetFunction", [&] {
    if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    auto found = d.GetFunction(module, name);
    if (!found.ok()) return d.Finish(found.status());
    *function = *found;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* ptr, size_t* bytes, CUmodule module,
                                      const char* name) {
  return Guard("cuModuleGetGlobal_v2", [&] {
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    ModuleRecord* record = d.FindModule(module);
    if (record == nullptr)
      return d.Local(CUDA_ERROR_INVALID_HANDLE, "cuModuleGetGlobal: not a module");
    auto conn = d.Connection();
    if (!conn.ok()) return d.Finish(conn.status());
    auto size = record->globals.find(name);
    const uint64_t known_bytes = size == record->globals.end() ? 0 : size->second;
    auto reply = (*conn)->ModuleGetGlobal({record->id, name, known_bytes});
    if (!reply.ok()) {
      if (reply.status().code() == CudaError::kInvalidSymbol ||
          reply.status().code() == CudaError::kInvalidValue) {
        return d.Local(CUDA_ERROR_NOT_FOUND, std::string("no global ") + name);
      }
      return d.Finish(reply.status());
    }
    d.AddDeviceAllocation(reply->ptr, reply->bytes, /*global=*/true);
    if (ptr != nullptr) *ptr = reply->ptr;
    if (bytes != nullptr) *bytes = reply->bytes;
    return CUDA_SUCCESS;
  });
}

// Modules are sent to the server when they are loaded (not at their first use).
CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Driver::Get().CheckInit(); r != CUDA_SUCCESS) return r;
  *mode = CU_MODULE_EAGER_LOADING;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int* count, CUmodule module) {
  return Guard("cuModuleGetFunctionCount", [&] {
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    ModuleRecord* record = d.FindModule(module);
    if (record == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (!record->parsed)
      return d.Unsupported("cuModuleGetFunctionCount of a module flyt cannot read");
    *count = static_cast<unsigned>(record->kernels.size());
    return CUDA_SUCCESS;
  });
}

// ---- functions ---------------------------------------------------------------------------------

CUresult CUDAAPI cuFuncGetAttribute(int* value, CUfunction_attribute attr, CUfunction f) {
  return Guard("cuFuncGetAttribute", [&] {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    FunctionRecord* function = Function(f);
    if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    auto values = d.FunctionAttributes(*function);
    if (!values.ok()) return d.Finish(values.status());
    auto it = values->find(static_cast<uint32_t>(attr));
    if (it == values->end()) return d.Local(CUDA_ERROR_INVALID_VALUE, "unknown function attribute");
    *value = it->second;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value) {
  return Guard("cuFuncSetAttribute", [&] {
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    FunctionRecord* function = Function(f);
    if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    auto conn = d.Connection();
    if (!conn.ok()) return d.Finish(conn.status());
    CUresult r = d.Finish(
        (*conn)->FuncSetAttribute({function->id, static_cast<uint32_t>(attr), value}).status());
    d.ForgetFunctionAttributes(*function);
    return r;
  });
}

CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config) {
  return Guard("cuFuncSetCacheConfig", [&] {
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    if (Function(f) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;  // a hint
  });
}

CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction f) {
  return Guard("cuFuncGetName", [&] {
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionRecord* function = Function(f);
    if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *name = function->name.c_str();
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuFuncGetModule(CUmodule* module, CUfunction f) {
  return Guard("cuFuncGetModule", [&] {
    if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionRecord* function = Function(f);
    if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *module = reinterpret_cast<CUmodule>(function->module);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction f, size_t index, size_t* offset, size_t* size) {
  return Guard("cuFuncGetParamInfo", [&] {
    FunctionRecord* function = Function(f);
    if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (function->layout == nullptr) return Driver::Get().Unsupported("cuFuncGetParamInfo");
    const auto& params = function->layout->params;
    if (index >= params.size()) return CUDA_ERROR_INVALID_VALUE;
    if (offset != nullptr) *offset = params[index].offset;
    if (size != nullptr) *size = params[index].size_bytes;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction f,
                                                                      int block_size,
                                                                      size_t dynamic_shared,
                                                                      unsigned int flags) {
  return Guard("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", [&] {
    if (blocks == nullptr || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    FunctionRecord* function = Function(f);
    if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    auto conn = d.Connection();
    if (!conn.ok()) return d.Finish(conn.status());
    auto reply =
        (*conn)->OccupancyMaxActiveBlocks({function->id, block_size, dynamic_shared, flags});
    if (!reply.ok()) return d.Finish(reply.status());
    *blocks = reply->blocks;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction f,
                                                             int block_size,
                                                             size_t dynamic_shared) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, f, block_size, dynamic_shared,
                                                              0);
}

// What a block may still take of dynamic shared memory when `blocks` blocks share an SM: the SM's
// shared memory split between them, less each block's reservation and static shared memory, at
// most what one block may opt in to (the device's and the kernel's figures; the block size does
// not enter on current GPUs).
CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, CUfunction f, int blocks,
                                                         int block_size) {
  return Guard("cuOccupancyAvailableDynamicSMemPerBlock", [&] {
    if (bytes == nullptr || blocks <= 0 || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    FunctionRecord* function = Function(f);
    if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    auto per_sm = d.Attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    auto reserved = d.Attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
    auto optin = d.Attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    auto attributes = d.FunctionAttributes(*function);
    for (const auto* status : {&per_sm.status(), &reserved.status(), &optin.status()}) {
      if (!status->ok()) return d.Finish(*status);
    }
    if (!attributes.ok()) return d.Finish(attributes.status());
    const int64_t static_bytes = (*attributes)[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES];
    const int64_t share = *per_sm / blocks - *reserved - static_bytes;
    const int64_t cap = *optin - static_bytes;
    *bytes = static_cast<size_t>(std::max<int64_t>(0, std::min(share, cap)));
    return CUDA_SUCCESS;
  });
}

// An estimate: the blocks of the configuration that fit on the device at once (occupancy per SM,
// from the server, times the SMs), divided by the cluster's size. A GPU's clusters must also fit
// within one GPC, which can make the true figure smaller (docs/hardware-verification.md).
CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* clusters, CUfunction f,
                                              const CUlaunchConfig* config) {
  return Guard("cuOccupancyMaxActiveClusters", [&] {
    if (clusters == nullptr || config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    FunctionRecord* function = Function(f);
    if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    int64_t cluster_size = 1;
    for (unsigned i = 0; i < config->numAttrs && config->attrs != nullptr; ++i) {
      if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
        const auto& dim = config->attrs[i].value.clusterDim;
        cluster_size = int64_t{dim.x} * dim.y * dim.z;
      }
    }
    if (cluster_size <= 0) return CUDA_ERROR_INVALID_VALUE;
    const int64_t threads = int64_t{config->blockDimX} * config->blockDimY * config->blockDimZ;
    auto sms = d.Attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    if (!sms.ok()) return d.Finish(sms.status());
    auto conn = d.Connection();
    if (!conn.ok()) return d.Finish(conn.status());
    auto reply = (*conn)->OccupancyMaxActiveBlocks(
        {function->id, static_cast<int32_t>(threads), config->sharedMemBytes, 0});
    if (!reply.ok()) return d.Finish(reply.status());
    *clusters = static_cast<int>(int64_t{reply->blocks} * *sms / cluster_size);
    return CUDA_SUCCESS;
  });
}

// ---- launches ----------------------------------------------------------------------------------

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shared, CUstream stream, void** params, void** extra) {
  return Guard("cuLaunchKernel", [&] {
    return DoLaunch(f, Launch{{gx, gy, gz}, {bx, by, bz}, shared, stream, params, extra}, false);
  });
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int shared, CUstream stream,
                                     void** params, void** extra) {
  return Guard("cuLaunchKernel_ptsz", [&] {
    return DoLaunch(f, Launch{{gx, gy, gz}, {bx, by, bz}, shared, stream, params, extra}, true);
  });
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                           unsigned int gz, unsigned int bx, unsigned int by,
                                           unsigned int bz, unsigned int shared, CUstream stream,
                                           void** params) {
  return Guard("cuLaunchCooperativeKernel", [&] {
    Launch l{{gx, gy, gz}, {bx, by, bz}, shared, stream, params, nullptr};
    l.cooperative = true;
    return DoLaunch(f, l, false);
  });
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                unsigned int gz, unsigned int bx, unsigned int by,
                                                unsigned int bz, unsigned int shared,
                                                CUstream stream, void** params) {
  return Guard("cuLaunchCooperativeKernel_ptsz", [&] {
    Launch l{{gx, gy, gz}, {bx, by, bz}, shared, stream, params, nullptr};
    l.cooperative = true;
    return DoLaunch(f, l, true);
  });
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                  void** extra) {
  return Guard("cuLaunchKernelEx", [&] { return LaunchEx(config, f, params, extra, false); });
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                       void** extra) {
  return Guard("cuLaunchKernelEx_ptsz", [&] { return LaunchEx(config, f, params, extra, true); });
}

// ---- libraries and kernels (CUDA 12) ----------------------------------------------------------
// A library is a module here (CUlibrary and CUmodule are the same record) and a kernel is its
// function (CUkernel and CUfunction are the same record, so a CUkernel launches as CUDA 12
// allows). Loading is not lazy yet: the image is sent at load. NVIDIA's static runtime loads the
// program's fat binaries this way (the wrapper it registered).

CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**,
                                   unsigned int, CUlibraryOption*, void**, unsigned int) {
  return Guard("cuLibraryLoadData", [&] {
    if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.CheckInit(); r != CUDA_SUCCESS) return r;  // no context needed
    flyt::Result<flyt::cuda::ImageSpan> located = flyt::cuda::LocateImage(code);
    if (!located.ok()) {
      return d.Local(CUDA_ERROR_INVALID_IMAGE, "library image: " + located.status().message());
    }
    auto loaded = d.LoadModule(located->bytes, ImageLabel(code));
    if (!loaded.ok()) return d.Finish(loaded.status());
    *library = reinterpret_cast<CUlibrary>(*loaded);
    return d.Finish(CudaStatus::Ok());
  });
}

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* path, CUjit_option*,
                                       void**, unsigned int, CUlibraryOption*, void**,
                                       unsigned int) {
  return Guard("cuLibraryLoadFromFile", [&] {
    if (library == nullptr || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUmodule module = nullptr;
    CUresult r = cuModuleLoad(&module, path);
    if (r == CUDA_SUCCESS) *library = reinterpret_cast<CUlibrary>(module);
    return r;
  });
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  return cuModuleUnload(reinterpret_cast<CUmodule>(library));
}

CUresult CUDAAPI cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  return Guard("cuLibraryGetModule", [&] {
    if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.RequireContext(); r != CUDA_SUCCESS) return r;
    if (d.FindModule(reinterpret_cast<CUmodule>(library)) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *module = reinterpret_cast<CUmodule>(library);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  return Guard("cuLibraryGetKernel", [&] {
    if (kernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Driver& d = Driver::Get();
    if (CUresult r = d.CheckInit(); r != CUDA_SUCCESS) return r;
    auto found = d.GetFunction(reinterpret_cast<CUmodule>(library), name);
    if (!found.ok()) return d.Finish(found.status());
    *kernel = reinterpret_cast<CUkernel>(*found);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary library) {
  return cuModuleGetFunctionCount(count, reinterpret_cast<CUmodule>(library));
}

CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr* ptr, size_t* bytes, CUlibrary library,
                                    const char* name) {
  return cuModuleGetGlobal_v2(ptr, bytes, reinterpret_cast<CUmodule>(library), name);
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  return Guard("cuKernelGetFunction", [&] {
    if (function == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (Function(reinterpret_cast<CUfunction>(kernel)) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *function = reinterpret_cast<CUfunction>(kernel);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuKernelGetLibrary(CUlibrary* library, CUkernel kernel) {
  return Guard("cuKernelGetLibrary", [&] {
    if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionRecord* function = Function(reinterpret_cast<CUfunction>(kernel));
    if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *library = reinterpret_cast<CUlibrary>(function->module);
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuKernelGetAttribute(int* value, CUfunction_attribute attr, CUkernel kernel,
                                      CUdevice) {
  return cuFuncGetAttribute(value, attr, reinterpret_cast<CUfunction>(kernel));
}

CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attr, int value, CUkernel kernel,
                                      CUdevice) {
  return cuFuncSetAttribute(reinterpret_cast<CUfunction>(kernel), attr, value);
}

CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice) {
  return cuFuncSetCacheConfig(reinterpret_cast<CUfunction>(kernel), config);
}

CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel kernel) {
  return cuFuncGetName(name, reinterpret_cast<CUfunction>(kernel));
}

CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t* offset,
                                      size_t* size) {
  return cuFuncGetParamInfo(reinterpret_cast<CUfunction>(kernel), index, offset, size);
}

}  // extern "C"
