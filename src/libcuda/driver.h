// Driver: the process-wide state of flyt's libcuda.so.1, the CUDA driver API over flyt's remote
// protocol. Like the runtime's state it is created on first use and never destroyed (atexit
// handlers of the program and of NVIDIA's libraries may call in while the process ends).
//
// The connection is the process's client core (remote_client/client_core.h), which lives in this
// library; flyt's libcudart.so.13 uses the same one. What the driver API adds on top:
//   - cuInit: every other call but the version and error-string queries returns
//     CUDA_ERROR_NOT_INITIALIZED before it;
//   - contexts: the device's primary context (retained and released, reset) and created ones,
//     a stack of current contexts per thread. Every context of the device is the one context the
//     server holds for this client: memory, modules and streams made in one are valid in every
//     other (what CUDA gives contexts of one device with unified addressing, plus sharing of
//     modules and streams, which a program that keeps its contexts apart never notices);
//   - streams, events, modules and functions: CUstream, CUevent, CUmodule and CUfunction are
//     pointers to records here; a handle this library did not hand out is refused
//     (CUDA_ERROR_INVALID_HANDLE), never dereferenced. Objects on the server are named by
//     numbers this process picks, so creating them is posted like a launch;
//   - kernel parameter layouts, read by flyt's fatbin/cubin/PTX parser from the image the
//     program loads (cuLaunchKernel's kernelParams are packed by them; `extra` launches carry
//     the buffer as given);
//   - device allocations and pinned host allocations, to classify pointers (cuMemcpy,
//     cuPointerGetAttribute, cuMemGetAddressRange) and to refuse a bad range before it leaves the
//     process;
//   - device facts (the properties reply, attributes) cached per device generation (a resize of
//     the share fetches them again).
//
// Errors: remote calls answer with the runtime's codes (cuda_errors.def); ToCu maps them to
// CUresult. An error of posted work comes back with a later reply and is returned by the next
// call that reaches the server; an error that corrupts the context (an illegal address...) is
// sticky: every later call that touches the device returns it.
//
// Thread safety: every method is thread-safe; one mutex guards the registries, and no method
// waits for the server while holding it.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "cuda/fatbin.h"
#include "remote/address_ranges.h"
#include "remote/cuda_status.h"
#include "remote_client/client_core.h"

namespace spdlog {
class logger;
}

namespace flyt::libcuda {

using remote::CudaError;
using remote::CudaResult;
using remote::CudaStatus;

// CUresult of a remote (runtime-numbered) error.
CUresult ToCu(CudaError code);

struct ContextRecord {
  int device = 0;
  unsigned flags = 0;
  bool primary = false;
};

struct StreamRecord {
  uint64_t id = 0;
  unsigned flags = 0;
  int priority = 0;
  ContextRecord* context = nullptr;
};

struct EventRecord {
  uint64_t id = 0;
  unsigned flags = 0;
};

struct FunctionRecord;

struct ModuleRecord {
  uint64_t id = 0;
  std::string label;
  // Kernel layouts by mangled name; `parsed` false when flyt could not read the image (the
  // server may still load it: its kernels then launch only with `extra`).
  bool parsed = false;
  std::map<std::string, cuda::KernelInfo> kernels;
  std::map<std::string, FunctionRecord*> functions;
  // Variables' sizes from the image's cubins (the simulated device sizes a global by them).
  std::map<std::string, uint64_t> globals;
};

struct FunctionRecord {
  uint64_t id = 0;
  ModuleRecord* module = nullptr;
  std::string name;
  const cuda::KernelInfo* layout = nullptr;  // null: unknown (extra launches only)
  std::map<uint32_t, int32_t> attributes;    // by CUfunction_attribute, fetched once
  bool attributes_fetched = false;
};

// Streams or events by the handle the program holds (the record's address): a handle this library
// did not hand out is not found, never followed. Each one is also known to the client core, so
// that flyt's runtime in the same process accepts it. Thread-safe.
template <typename Record>
class HandleRegistry {
 public:
  void* Add(Record record) {
    auto owned = std::make_unique<Record>(record);
    void* handle = owned.get();
    remote::ClientCore::Process().AddHandle(handle, record.id);
    MutexLock lock(mu_);
    records_.emplace(handle, std::move(owned));
    return handle;
  }
  std::optional<Record> Remove(const void* handle) {
    MutexLock lock(mu_);
    auto it = records_.find(handle);
    if (it == records_.end()) return std::nullopt;
    Record record = *it->second;
    records_.erase(it);
    remote::ClientCore::Process().RemoveHandle(handle);
    return record;
  }
  std::optional<Record> Find(const void* handle) const {
    MutexLock lock(mu_);
    auto it = records_.find(handle);
    if (it == records_.end()) return std::nullopt;
    return *it->second;
  }

 private:
  mutable Mutex mu_;
  std::unordered_map<const void*, std::unique_ptr<Record>> records_ FLYT_GUARDED_BY(mu_);
};

class Driver {
 public:
  static Driver& Get();

  spdlog::logger& log();
  // Logs `message` at warning level the first time `key` is seen.
  void WarnOnce(const std::string& key, const std::string& message);
  // An entry point flyt does not provide: logs once, CUDA_ERROR_NOT_SUPPORTED.
  CUresult Unsupported(const char* symbol);

  // ---- outcomes -----------------------------------------------------------------------------
  // The CUresult of a call's status, with any error of posted work that came back and the
  // sticky error folded in (see the file comment). Failures are logged at debug level.
  CUresult Finish(const CudaStatus& status);
  // A call answered in this process (a bad argument): the code, logged at debug level.
  CUresult Local(CUresult code, const std::string& why);
  // CUDA_SUCCESS once cuInit succeeded; else CUDA_ERROR_NOT_INITIALIZED.
  CUresult CheckInit() const;
  // CheckInit, then CUDA_ERROR_INVALID_DEVICE unless `device` is a device of this process.
  CUresult CheckDevice(CUdevice device);
  CUresult Init(unsigned flags);

  // ---- the server ---------------------------------------------------------------------------
  CudaResult<remote::Connection*> Connection();
  int device_count();  // 0 before cuInit
  CudaResult<const remote::GetDevicePropertiesReply*> Properties();
  CudaResult<int32_t> Attribute(uint32_t attr);

  // ---- contexts -----------------------------------------------------------------------------
  // The device's primary context (flyt serves one device per process: ordinal 0).
  ContextRecord* PrimaryContext() { return &primary_; }
  void RetainPrimary() { primary_refs_.fetch_add(1); }
  bool ReleasePrimary();
  bool primary_active() const { return primary_refs_.load() > 0; }
  ContextRecord* NewContext(int device, unsigned flags);
  bool DestroyContext(ContextRecord* context);
  bool IsContext(const ContextRecord* context);
  // The calling thread's current context (top of its stack), or null.
  ContextRecord* Current();
  void SetCurrent(ContextRecord* context);
  void Push(ContextRecord* context);
  ContextRecord* Pop();
  // CUDA_ERROR_INVALID_CONTEXT when the thread has no current context.
  CUresult RequireContext();

  // ---- streams and events -------------------------------------------------------------------
  // The server's stream number for a CUstream as passed; `per_thread`: a _ptsz/_ptds call (the
  // null stream is this thread's default stream).
  CudaResult<uint64_t> ResolveStream(CUstream stream, bool per_thread);
  CUstream AddStream(StreamRecord record);
  std::optional<StreamRecord> RemoveStream(CUstream stream);
  std::optional<StreamRecord> FindStream(CUstream stream);
  CUevent AddEvent(EventRecord record);
  std::optional<EventRecord> RemoveEvent(CUevent event);
  std::optional<EventRecord> FindEvent(CUevent event);
  uint64_t NewId() { return next_id_.fetch_add(1) + 1; }

  // ---- modules ------------------------------------------------------------------------------
  // Loads an image (fatbin, cubin or PTX; `bytes` is its whole size) on the server (posted).
  CudaResult<CUmodule> LoadModule(std::span<const std::byte> image, std::string label);
  CudaStatus UnloadModule(CUmodule module);
  ModuleRecord* FindModule(CUmodule module);
  CudaResult<CUfunction> GetFunction(CUmodule module, const std::string& name);
  FunctionRecord* FindFunction(CUfunction function);
  CudaResult<std::map<uint32_t, int32_t>> FunctionAttributes(FunctionRecord& function);
  void ForgetFunctionAttributes(FunctionRecord& function);

  // ---- memory -------------------------------------------------------------------------------
  // Device memory is the client core's (shared with flyt's runtime); `global`: a module's.
  void AddDeviceAllocation(uint64_t ptr, uint64_t bytes, bool global = false);
  bool RemoveDeviceAllocation(uint64_t ptr);
  // The allocation holding `ptr`: (base, size).
  std::optional<std::pair<uint64_t, uint64_t>> DeviceAllocation(uint64_t ptr);
  bool IsDeviceRange(uint64_t ptr, uint64_t bytes);
  void* AllocateHost(size_t bytes, unsigned flags);
  bool FreeHost(void* ptr);
  bool RegisterHost(void* ptr, size_t bytes, unsigned flags);
  bool UnregisterHost(void* ptr);
  std::optional<unsigned> HostFlags(const void* ptr);
  // Before an async device-to-host copy: keeps what the server holds for this client's pending
  // downloads under remote::kMaxDownloadBytesInFlight; `synchronous` when this copy alone is
  // larger (it is made with a blocking copy).
  CudaStatus MakeRoomForDownload(remote::Connection& conn, uint64_t bytes, bool& synchronous);

 private:
  Driver();
  CudaStatus StickyStatus() const;

  std::shared_ptr<spdlog::logger> log_;
  std::atomic<bool> initialized_{false};
  std::atomic<uint32_t> sticky_{0};
  std::atomic<uint64_t> next_id_{0};

  Mutex device_mu_;
  std::list<remote::GetDevicePropertiesReply> fetched_properties_ FLYT_GUARDED_BY(device_mu_);
  const remote::GetDevicePropertiesReply* properties_ FLYT_GUARDED_BY(device_mu_) = nullptr;
  uint64_t properties_generation_ FLYT_GUARDED_BY(device_mu_) = 0;
  std::map<uint32_t, int32_t> attributes_ FLYT_GUARDED_BY(device_mu_);

  ContextRecord primary_{0, 0, true};
  HandleRegistry<StreamRecord> streams_;
  HandleRegistry<EventRecord> events_;
  std::atomic<int> primary_refs_{0};

  Mutex mu_;
  std::unordered_set<std::string> warned_ FLYT_GUARDED_BY(mu_);
  std::unordered_map<const void*, std::unique_ptr<ContextRecord>> contexts_ FLYT_GUARDED_BY(mu_);
  std::unordered_map<const void*, std::unique_ptr<ModuleRecord>> modules_ FLYT_GUARDED_BY(mu_);
  std::unordered_map<const void*, std::unique_ptr<FunctionRecord>> functions_ FLYT_GUARDED_BY(mu_);
  remote::AddressRanges<unsigned> host_memory_ FLYT_GUARDED_BY(mu_);
  std::unordered_set<void*> host_allocations_ FLYT_GUARDED_BY(mu_);
};

// Returns driver.Finish(status) from the calling function when `expr` (a CudaStatus) failed.
#define FLYT_CU_RETURN_IF_ERROR(driver, expr)                             \
  do {                                                                    \
    ::flyt::remote::CudaStatus flyt_cu_status__ = (expr);                 \
    if (!flyt_cu_status__.ok()) return (driver).Finish(flyt_cu_status__); \
  } while (0)

// Runs `body` (returning CUresult) and turns any exception into CUDA_ERROR_UNKNOWN: an exception
// must not cross into the C caller.
template <typename Body>
CUresult Guard(const char* name, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    try {
      Driver::Get().WarnOnce(std::string("exception:") + name,
                             std::string(name) + " failed inside flyt: " + e.what());
    } catch (...) {
    }
  } catch (...) {
  }
  return CUDA_ERROR_UNKNOWN;
}

}  // namespace flyt::libcuda
