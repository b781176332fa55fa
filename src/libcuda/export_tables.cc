#include "libcuda/export_tables.h"

#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "libcuda/driver.h"
#include "libcuda/integrity.h"

namespace flyt::libcuda {
namespace {

using Uuid = std::array<uint8_t, 16>;

constexpr Uuid kCudartInterface = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                   0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
constexpr Uuid kToolsCallbacks = {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
                                  0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66};
constexpr Uuid kToolsTls = {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
                            0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc};
constexpr Uuid kContextStorage = {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                                  0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93};
constexpr Uuid kContextChecks = {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43,
                                 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e};
constexpr Uuid kIntegrity = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                             0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};

void* Size(size_t entries) { return reinterpret_cast<void*>(entries * sizeof(void*)); }

// ---- the runtime's interface -------------------------------------------------------------------

CUresult ModuleFromFatbin(CUmodule* module, const void* wrapper) {
  return cuModuleLoadFatBinary(module, wrapper);  // unwraps __fatBinC_Wrapper_t (cuda/image.h)
}

CUresult PrimaryContext(CUcontext* context, CUdevice device) {
  // The same handle cuDevicePrimaryCtxRetain gives (retained here: released contexts are not
  // freed on the server, and a runtime that goes on without retaining still finds it usable).
  return cuDevicePrimaryCtxRetain(context, device);
}

CUresult ModuleFromFatbinWithRelocations(CUmodule* module, const void* wrapper,
                                         const char** names, void** addresses, unsigned count) {
  if (names != nullptr || addresses != nullptr || count != 0) {
    return Driver::Get().Unsupported("a fat binary with host relocations (export table)");
  }
  return cuModuleLoadFatBinary(module, wrapper);
}

void FatbinDestroyed(const void*) {}

CUresult ModuleFromImage(const void* image, CUmodule* module, CUjit_option* options,
                         void** values, unsigned count) {
  return cuModuleLoadDataEx(module, image, count, options, values);
}

CUresult CompilersLoaded() { return CUDA_SUCCESS; }

const void* const kCudartTable[13] = {
    Size(13),
    reinterpret_cast<const void*>(&ModuleFromFatbin),
    reinterpret_cast<const void*>(&PrimaryContext),
    nullptr,
    nullptr,
    nullptr,
    reinterpret_cast<const void*>(&ModuleFromFatbinWithRelocations),
    reinterpret_cast<const void*>(&FatbinDestroyed),
    reinterpret_cast<const void*>(&ModuleFromImage),
    nullptr,
    nullptr,
    nullptr,
    reinterpret_cast<const void*>(&CompilersLoaded),
};

// ---- tools: callbacks and thread-local state ---------------------------------------------------

uint32_t enable_buffer[1024];      // all zero: no tool subscribed to any runtime callback
uint32_t internal_enable_buffer[16];

CUresult NoCallback(uint32_t, const void*) { return CUDA_SUCCESS; }
void EnableBuffer(uint32_t** buffer, size_t* count) {
  *buffer = enable_buffer;
  *count = 1024;
}
void InternalEnableBuffer(uint32_t** buffer, size_t* count) {
  *buffer = internal_enable_buffer;
  *count = 14;
}
CUresult NoStreamId(CUcontext, CUstream, uint64_t* id) {
  if (id != nullptr) *id = 0;
  return CUDA_SUCCESS;
}
CUresult NoContextId(CUcontext, uint64_t* id) {
  if (id != nullptr) *id = 0;
  return CUDA_SUCCESS;
}

const void* const kToolsCallbacksTable[7] = {
    Size(7),
    reinterpret_cast<const void*>(&NoCallback),
    reinterpret_cast<const void*>(&EnableBuffer),
    reinterpret_cast<const void*>(&NoStreamId),
    reinterpret_cast<const void*>(&NoContextId),
    reinterpret_cast<const void*>(&NoCallback),
    reinterpret_cast<const void*>(&InternalEnableBuffer),
};

CUresult ToolsSetCurrent(CUcontext context) { return cuCtxSetCurrent(context); }
CUresult ToolsGetCurrent(CUcontext* context) { return cuCtxGetCurrent(context); }
CUresult ToolsNothing() { return CUDA_SUCCESS; }

const void* const kToolsTlsTable[4] = {
    Size(4),
    reinterpret_cast<const void*>(&ToolsSetCurrent),
    reinterpret_cast<const void*>(&ToolsGetCurrent),
    reinterpret_cast<const void*>(&ToolsNothing),
};

// ---- context-local storage ---------------------------------------------------------------------

struct StoredValue {
  void* data = nullptr;
  void (*destroy)(CUcontext, void*, void*) = nullptr;
};
Mutex storage_mu;
std::map<std::pair<const void*, const void*>, StoredValue>& Storage() {
  static auto* storage = new std::map<std::pair<const void*, const void*>, StoredValue>();
  return *storage;
}

// The context a storage call names: `context`, or the current one.
const void* StorageContext(CUcontext context) {
  if (context != nullptr) return context;
  return Driver::Get().Current();
}

CUresult StorageRegister(CUcontext context, void* key, void* data,
                         void (*destroy)(CUcontext, void*, void*)) {
  const void* owner = StorageContext(context);
  if (owner == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  MutexLock lock(storage_mu);
  Storage()[{owner, key}] = {data, destroy};
  return CUDA_SUCCESS;
}

CUresult StorageUnregister(CUcontext context, void* key) {
  const void* owner = StorageContext(context);
  if (owner == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  MutexLock lock(storage_mu);
  Storage().erase({owner, key});
  return CUDA_SUCCESS;
}

CUresult StorageGet(void** data, CUcontext context, void* key) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const void* owner = StorageContext(context);
  if (owner == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  MutexLock lock(storage_mu);
  auto it = Storage().find({owner, key});
  if (it == Storage().end()) return CUDA_ERROR_INVALID_HANDLE;  // not registered yet
  *data = it->second.data;
  return CUDA_SUCCESS;
}

// No size entry: this table is not versioned.
const void* const kContextStorageTable[4] = {
    reinterpret_cast<const void*>(&StorageRegister),
    reinterpret_cast<const void*>(&StorageUnregister),
    reinterpret_cast<const void*>(&StorageGet),
    nullptr,
};

// ---- context checks ----------------------------------------------------------------------------

CUresult ContextIsWrapped(CUcontext, uint32_t* wrapped, const void**) {
  if (wrapped != nullptr) *wrapped = 0;  // no flyt context wraps another
  return CUDA_SUCCESS;
}
uint32_t ContextCheck3() { return 0; }

const void* const kContextChecksTable[4] = {
    Size(4),
    nullptr,
    reinterpret_cast<const void*>(&ContextIsWrapped),
    reinterpret_cast<const void*>(&ContextCheck3),
};

// ---- the integrity check -----------------------------------------------------------------------

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t* result);
CUresult IntegritySecond(int) { return CUDA_SUCCESS; }

const void* const kIntegrityTable[3] = {
    Size(3),
    reinterpret_cast<const void*>(&IntegrityCheck),
    reinterpret_cast<const void*>(&IntegritySecond),
};

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t* result) {
  if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  IntegrityInputs in;
  int driver_version = 0;
  cuDriverGetVersion(&driver_version);
  in.driver_version = static_cast<uint32_t>(driver_version);
  in.version = version;
  in.pid = static_cast<uint32_t>(::getpid());
  in.tid = static_cast<uint32_t>(::pthread_self());  // its low 32 bits
  in.cudart_table = reinterpret_cast<uint64_t>(kCudartTable);
  in.integrity_table = reinterpret_cast<uint64_t>(kIntegrityTable);
  in.function = reinterpret_cast<uint64_t>(kIntegrityTable[1]);
  in.unix_seconds = unix_seconds;
  // Every device as this library reports it to the program.
  std::vector<IntegrityInputs::Device> devices;
  int count = 0;
  if (cuDeviceGetCount(&count) == CUDA_SUCCESS) {
    for (int d = 0; d < count; ++d) {
      IntegrityInputs::Device device;
      CUuuid uuid;
      if (cuDeviceGetUuid_v2(&uuid, d) == CUDA_SUCCESS) {
        std::memcpy(device.uuid.data(), uuid.bytes, 16);
      }
      cuDeviceGetAttribute(&device.pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
      cuDeviceGetAttribute(&device.pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
      cuDeviceGetAttribute(&device.pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
      devices.push_back(device);
    }
  }
  in.devices = devices;
  const std::array<uint64_t, 2> answer = IntegrityAnswer(in);
  result[0] = answer[0];
  result[1] = answer[1];
  return CUDA_SUCCESS;
}

}  // namespace

const void* FindExportTable(const CUuuid& id) {
  Uuid uuid;
  std::memcpy(uuid.data(), id.bytes, 16);
  if (uuid == kCudartInterface) return kCudartTable;
  if (uuid == kToolsCallbacks) return kToolsCallbacksTable;
  if (uuid == kToolsTls) return kToolsTlsTable;
  if (uuid == kContextStorage) return kContextStorageTable;
  if (uuid == kContextChecks) return kContextChecksTable;
  if (uuid == kIntegrity) return kIntegrityTable;
  return nullptr;
}

}  // namespace flyt::libcuda
