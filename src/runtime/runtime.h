// Runtime: the process-wide state of flyt's libcudart.so.13 — the one lazily created object the
// conventions allow (it lives from the first CUDA call, or the program's first fatbin
// registration, to process exit and is never destroyed, so that registration callbacks run from
// atexit still find it).
//
// The connection to the flyt GPU server is the process's client core's (remote_client/
// client_core.h), which lives in flyt's libcuda.so.1 — this library is linked against it — so
// that NVIDIA's libraries calling the driver API in the same process share the connection.
// What the runtime owns:
//   - what the program registered: fatbins (shipped to the server lazily, the first time one of
//     their kernels or variables is used), kernels by host stub, __device__/__constant__ variables;
//   - the program's streams and events (cudaStream_t / cudaEvent_t are pointers to records here;
//     a handle the runtime did not hand out is rejected, never dereferenced);
//   - device allocations and host allocations, to classify pointers (cudaMemcpyDefault,
//     cudaPointerGetAttributes) and to refuse a bad device range before it leaves the process;
//   - cached device facts (properties, attributes), the error state, the log.
// Objects on the server are named by numbers this process picks (remote/handle_table.h), so that
// creating a stream or loading a module is pipelined like a launch. After cudaDeviceReset the
// server holds nothing of this process any more: a generation counter makes every record reload.
//
// Thread safety: every method is thread-safe. One mutex guards the registries and handle maps;
// the connection has its own (remote::Connection). No method calls the server while holding the
// registry mutex except to post (which does not wait for the server).
#pragma once

#include <driver_types.h>
#include <vector_types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "cuda/fatbin.h"
#include "remote/address_ranges.h"
#include "remote/arena_allocator.h"
#include "remote_client/client.h"
#include "runtime/error_state.h"
#include "remote_client/client_core.h"

namespace spdlog {
class logger;
}

namespace flyt::runtime {

using remote::CudaResult;
using remote::CudaStatus;

struct FatbinRecord {
  void* slot = nullptr;  // the program holds &slot as its "fatCubinHandle"
  const void* wrapper = nullptr;
  std::vector<std::span<const std::byte>> containers;  // [0] is loaded; all give layouts
  std::string error;                                   // why the wrapper could not be read
  bool parsed = false;
  std::map<std::string, cuda::KernelInfo> kernels;  // by mangled name
  uint64_t module_id = 0;
  uint64_t module_generation = 0;
};

struct FunctionRecord {
  FatbinRecord* fatbin = nullptr;
  const void* host_fun = nullptr;
  std::string name;  // mangled
  uint64_t function_id = 0;
  uint64_t generation = 0;
  // Function attributes fetched once per generation (FuncGetAttributes), by number.
  std::map<uint32_t, int32_t> attributes;
  uint64_t attributes_generation = 0;
};

struct VarRecord {
  FatbinRecord* fatbin = nullptr;
  const void* host_var = nullptr;
  std::string name;
  size_t size = 0;
  bool constant = false;
  uint64_t ptr = 0;
  uint64_t generation = 0;
};

struct StreamRecord {
  uint64_t id = 0;
  unsigned flags = 0;
  int priority = 0;
  uint64_t generation = 0;
};

struct EventRecord {
  uint64_t id = 0;
  unsigned flags = 0;
  uint64_t generation = 0;
};

// What a launch needs after the registry lookup.
struct LaunchTarget {
  uint64_t function_id = 0;
  const cuda::KernelInfo* layout = nullptr;  // stable: records are never erased while in use
  std::string name;
};

class Runtime {
 public:
  // The process's runtime, created on first use.
  static Runtime& Get();

  ErrorState& errors() { return errors_; }
  spdlog::logger& log() { return *log_; }
  // Logs `message` at warning level the first time `key` is seen.
  void WarnOnce(const std::string& key, const std::string& message);
  // The stub of an entry point flyt does not provide: logs once, returns cudaErrorNotSupported.
  cudaError_t Unsupported(const char* name);

  // ---- outcomes ---------------------------------------------------------------------------
  // Records a call's outcome as CUDA does and returns its code. A deferred error of posted work
  // that came back with the call's reply is recorded too.
  cudaError_t Finish(const CudaStatus& status);
  // For synchronising calls (device/stream/event synchronize and queries, blocking copies): when
  // the call itself succeeded, a deferred error of posted work is what it returns.
  cudaError_t FinishSync(const CudaStatus& status);
  // Logs a failed call: at debug level, except the loss of the server connection (once, as an
  // error).
  void ReportFailure(const CudaStatus& status);
  // The sticky error as a status, or OK.
  CudaStatus StickyStatus() const;

  // ---- the server -------------------------------------------------------------------------
  // The connection, opened on first use. Never null when ok.
  CudaResult<remote::Connection*> Connection();
  // Whether FLYT_STRICT_ERRORS asks for launch errors at the next cudaGetLastError.
  bool strict_errors() const { return strict_errors_; }
  // The server's driver version (0 before a connection).
  int driver_version();

  // ---- device facts -----------------------------------------------------------------------
  CudaResult<const remote::GetDevicePropertiesReply*> Properties();
  // An attribute (cached); device properties answer most without a round trip.
  CudaResult<int32_t> Attribute(uint32_t attr);
  // The limits every launch is checked against, read once (a launch must not search the
  // device's attributes: it is the call programs make millions of times).
  struct LaunchLimits {
    int32_t block[3] = {0, 0, 0};  // cudaDevAttrMaxBlockDimX..Z
    int32_t grid[3] = {0, 0, 0};   // cudaDevAttrMaxGridDimX..Z
    int32_t threads = 0;           // cudaDevAttrMaxThreadsPerBlock
    int32_t shared_optin = 0;      // cudaDevAttrMaxSharedMemoryPerBlockOptin
  };
  CudaResult<LaunchLimits> Limits();
  uint64_t generation() const { return generation_.load(); }
  // cudaDeviceReset: forget everything the server held for this process.
  CudaStatus Reset();

  // ---- registration -----------------------------------------------------------------------
  void** RegisterFatbin(const void* wrapper);
  void RegisterFunction(void** handle, const void* host_fun, const char* name);
  void RegisterVar(void** handle, const void* host_var, const char* name, size_t size,
                   bool constant);
  void UnregisterFatbin(void** handle);

  // The kernel a host stub or cudaKernel_t names; null when unknown.
  FunctionRecord* FindFunction(const void* host_fun);
  FunctionRecord* FromKernelHandle(const void* kernel);
  // Loads the module and resolves the function on the server if needed (posted), and finds the
  // kernel's parameter layout.
  CudaResult<LaunchTarget> PrepareLaunch(FunctionRecord& function);
  // The device address and size of a registered variable (one round trip the first time).
  CudaResult<std::pair<uint64_t, size_t>> Symbol(const void* host_var);
  // Function attributes by CUfunction_attribute number (one round trip per generation).
  CudaResult<std::map<uint32_t, int32_t>> FunctionAttributes(FunctionRecord& function);
  void ForgetFunctionAttributes(FunctionRecord& function);

  // ---- streams and events -----------------------------------------------------------------
  // The client's stream number for a cudaStream_t as the program passed it. `per_thread` says
  // the call was a _ptsz one (stream 0 means this thread's default stream).
  CudaResult<uint64_t> ResolveStream(cudaStream_t stream, bool per_thread);
  CudaResult<StreamRecord> FindStream(cudaStream_t stream);
  cudaStream_t AddStream(StreamRecord record);
  std::optional<StreamRecord> RemoveStream(cudaStream_t stream);
  CudaResult<EventRecord> FindEvent(cudaEvent_t event);
  cudaEvent_t AddEvent(EventRecord record);
  std::optional<EventRecord> RemoveEvent(cudaEvent_t event);
  uint64_t NewId() { return next_id_.fetch_add(1) + 1; }

  // ---- memory -------------------------------------------------------------------------------
  void AddDeviceAllocation(uint64_t ptr, uint64_t bytes);
  bool RemoveDeviceAllocation(uint64_t ptr);
  // The device range [ptr, ptr + bytes) lies inside one allocation or variable of this process.
  bool IsDeviceRange(const void* ptr, size_t bytes);
  bool IsDevicePointer(const void* ptr);
  void* AllocateHost(size_t bytes, unsigned flags);
  bool FreeHost(void* ptr);
  bool RegisterHost(void* ptr, size_t bytes, unsigned flags);
  bool UnregisterHost(void* ptr);
  // Flags of the pinned (cudaMallocHost/cudaHostAlloc/cudaHostRegister) range holding `ptr`.
  std::optional<unsigned> HostFlags(const void* ptr);
  // The offset of [ptr, ptr + bytes) in the shared-memory arena that backs cudaMallocHost when
  // the connection is over shared memory; nullopt when the range is not inside it.
  std::optional<uint64_t> ArenaOffset(const void* ptr, size_t bytes);
  // cudaHostRegister'd memory is staged through the arena when the arena had room for a copy of
  // the range at registration (the server copies from and into shared pages, by DMA on a GPU).
  // StageIn: where [src, src + bytes)'s copy in the arena is, for the caller to copy the bytes
  // into (after a device-to-host copy still landing in that part has landed); nullopt when the
  // range has no copy there, or the connection moved off the arena's server. StageOut: where a device-to-host copy into [dst, dst + bytes) lands
  // first; the caller copies it on (at once, or when the connection says it landed).
  struct Staged {
    uint64_t offset = 0;
    std::byte* arena = nullptr;
  };
  std::optional<Staged> StageIn(remote::Connection& conn, const void* src, size_t bytes,
                                bool async);
  std::optional<Staged> StageOut(remote::Connection& conn, void* dst, size_t bytes, bool async);

  // Device flags and limits kept locally (cudaSetDeviceFlags, cudaDeviceSetLimit...).
  std::atomic<unsigned> device_flags{0};
  std::atomic<int> cache_config{0};
  std::atomic<int> shared_mem_config{0};
  Mutex limits_mu;
  std::map<int, size_t> limits FLYT_GUARDED_BY(limits_mu);

  // [issue 17: graphs] public methods and registries
  // Stream capture (api_graphs.cc). Each hook is called by a stream operation once its stream is
  // resolved: nullopt when the call goes on as usual; otherwise the call's outcome (recorded into
  // the capture, or refused because a capture forbids it — cudaErrorStreamCapture*). Cheap when
  // nothing is being captured (one atomic load).
  bool CaptureActive() const { return captures_active_.load(std::memory_order_relaxed) != 0; }
  // `params` is moved from only when the launch is captured.
  std::optional<CudaStatus> CaptureKernel(uint64_t stream, FunctionRecord* function, dim3 grid,
                                          dim3 block, uint32_t shared_bytes,
                                          remote::Bytes&& params);
  std::optional<CudaStatus> CaptureHost(uint64_t stream,
                                        std::function<void(cudaError_t)> call);
  // `device_to_device`: both ends are device memory (else the copy runs on the client).
  std::optional<CudaStatus> CaptureCopy(uint64_t stream, void* dst, const void* src, size_t count,
                                        bool device_to_device);
  std::optional<CudaStatus> CaptureMemset(uint64_t stream, void* dst, int value, size_t count);
  std::optional<CudaStatus> CaptureRecord(uint64_t event, uint64_t stream);
  std::optional<CudaStatus> CaptureWait(uint64_t stream, uint64_t event);
  // A synchronisation or query of `stream`.
  std::optional<CudaStatus> CaptureSync(uint64_t stream);
  // A call a capture in global (or this thread's thread-local) mode forbids: device
  // synchronisation, cudaMalloc.
  std::optional<CudaStatus> CaptureUnsafe();
  std::atomic<int> captures_active_{0};
  // (end graphs)

  // [issue 17: pools] public methods and registries
  // Before an async device-to-host copy of `bytes` into pinned memory: the server keeps such data
  // until a reply carries it and refuses past its limit (the multi-stream async-copy bug: several
  // streams' copies in flight, then cudaErrorMemoryAllocation at the next synchronising call).
  // Past remote::kMaxDownloadBytesInFlight this waits for the device (which delivers everything in
  // flight) first; a copy larger than that sets `synchronous` (copy it with MemcpyDtoH).
  cudaError_t MakeRoomForDownload(remote::Connection& conn, uint64_t bytes, bool& synchronous);
  // Memory pools: a cudaMemPool_t is a PoolRecord this runtime made (0: the device's default
  // pool, one per process); one it did not make is refused, never dereferenced.
  struct PoolRecord {
    uint64_t id = 0;
  };
  cudaMemPool_t NewPool(uint64_t id);
  CudaResult<uint64_t> PoolId(cudaMemPool_t pool);
  bool DropPool(cudaMemPool_t pool);
  cudaMemPool_t DefaultPool() { return reinterpret_cast<cudaMemPool_t>(&default_pool_); }
  cudaMemPool_t CurrentPool();
  // Mapped (zero-copy) host memory: refused, naming the reason (canMapHostMemory reads 0).
  static CudaStatus MappedRefusal(const char* what);
  // Launch attributes beyond a plain launch (cudaLaunchCooperativeKernel, cudaLaunchKernelExC).
  struct LaunchExtras {
    bool cooperative = false;
    remote::Dim3 cluster;
    int32_t priority = 0;
    bool plain() const { return !cooperative && cluster == remote::Dim3{} && priority == 0; }
  };
  // cudaLaunchKernelExC's attributes; an unknown one is cudaErrorInvalidValue, as CUDA says.
  CudaResult<LaunchExtras> ReadLaunchAttributes(const cudaLaunchAttribute* attrs, unsigned count);
  // CUDA's checks before such a launch leaves the process: a cooperative grid must fit the
  // device at once (cudaErrorCooperativeLaunchTooLarge; the fit is asked once per kernel, block
  // and shared size), a cluster must divide the grid (cudaErrorInvalidClusterSize).
  CudaStatus CheckLaunchExtras(remote::Connection& conn, uint64_t function_id, dim3 grid,
                               dim3 block, size_t shared_bytes, const LaunchExtras& extras);
  // cudaStreamSetAttribute values kept per stream (by its id): the access-policy window and the
  // synchronisation policy are hints the server is not told of; the priority a stream was made
  // with is its record's.
  bool SetStreamAttribute(uint64_t stream_id, int attr, const cudaLaunchAttributeValue& value);
  std::optional<cudaLaunchAttributeValue> StreamAttribute(uint64_t stream_id, int attr);
  // Checks, then posts the launch (LaunchKernelEx).
  CudaStatus LaunchWithExtras(remote::Connection& conn, uint64_t function_id, dim3 grid,
                              dim3 block, size_t shared_bytes, uint64_t stream_id,
                              remote::Bytes params, const LaunchExtras& extras);
  void SetCurrentPool(cudaMemPool_t pool);
  // (end pools)

  // [issue 17: arrays] public methods and registries
  // The arrays family's records (CUDA arrays, mipmapped arrays, texture and surface objects),
  // made on first use; defined in api_arrays.cc.
  struct ArraysState;
  ArraysState& arrays_state();
  // cudaMemcpy2D(Async) and cudaMemset2D(Async) of api_memory.cc go through the arrays family's
  // 2D/3D path (rows packed on the wire, one message per copy).
  static cudaError_t ArraysCopy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                  size_t width, size_t height, cudaMemcpyKind kind,
                                  cudaStream_t stream, bool async, bool per_thread);
  static cudaError_t ArraysSet2D(void* dst, size_t pitch, int value, size_t width, size_t height,
                                 cudaStream_t stream, bool per_thread);
  // (end arrays)

  // [issue 17: managed] public methods and registries
  // Managed memory (api_managed.cc): each cudaMallocManaged allocation and __managed__ variable
  // has a host mirror here at the address its device copy has on the server, kept coherent:
  // pages the host writes are recorded (write-protection and a SIGSEGV handler) and pushed before
  // device work; device work makes the mirror stale, and a page is fetched at its first host
  // access afterwards. Every method is cheap when the process has no managed memory.
  // Before a launch on `stream_id`: pushes written pages, then marks every mirror stale.
  CudaStatus ManagedBeforeLaunch(uint64_t stream_id);
  // Before a copy or memset: pushes written pages when the device takes part, fetches the pages of
  // a host-side managed range (the runtime reads or writes it), marks a device-side managed
  // destination stale.
  CudaStatus ManagedBeforeCopy(const void* dst, const void* src, size_t bytes, bool dst_device,
                               bool src_device, uint64_t stream_id);
  // cudaFree of a managed pointer: drops its mirror (after the runtime removed the allocation).
  void ManagedFree(const void* ptr);
  // cudaPointerGetAttributes of managed memory; false when `ptr` is not managed.
  bool ManagedPointerAttributes(const void* ptr, cudaPointerAttributes* attributes);
  // concurrentManagedAccess reads 0 and managedMemory 1, whatever the device says.
  static void ManagedAdjustProperties(remote::GetDevicePropertiesReply& properties);
  // cudaDeviceReset: every mirror is gone with its device memory.
  void ManagedForgetAll();
  // __cudaInitModule: places the module's __managed__ variables (1 when done).
  static char ManagedInitModule(void** handle);
  // (end managed)

  // Interprocess memory (api_ipc.cc): whether `ptr` was opened with cudaIpcOpenMemHandle (not
  // cudaFree'd, closed instead); cudaDeviceReset closes them all.
  static bool IpcIsOpen(uint64_t ptr);
  static void IpcForgetAll();


 private:
  Runtime();
  CudaStatus EnsureModuleLocked(FatbinRecord& fatbin) FLYT_REQUIRES(mu_);
  void ParseLocked(FatbinRecord& fatbin) FLYT_REQUIRES(mu_);
  uint64_t PerThreadStream(CudaStatus& status);

  ErrorState errors_;
  std::shared_ptr<spdlog::logger> log_;
  bool strict_errors_ = false;

  // Whether the connection's shared arena has been taken over (Connection()).
  std::atomic<bool> arena_adopted_{false};

  Mutex device_mu_;
  // The device properties, fetched again when the server says they changed (a resize: the
  // connection's device_generation). Every fetched reply is kept for the process's life (one per
  // resize), since a caller may still read the one it was handed.
  const remote::GetDevicePropertiesReply* properties_ FLYT_GUARDED_BY(device_mu_) = nullptr;
  std::list<remote::GetDevicePropertiesReply> fetched_properties_ FLYT_GUARDED_BY(device_mu_);
  std::pair<const remote::Connection*, uint64_t> device_generation_ FLYT_GUARDED_BY(device_mu_);
  // Whether the cached device facts are still the server's (the lock held).
  bool DeviceFactsCurrent() const FLYT_REQUIRES(device_mu_);
  std::optional<LaunchLimits> limits_ FLYT_GUARDED_BY(device_mu_);
  std::map<uint32_t, int32_t> attributes_ FLYT_GUARDED_BY(device_mu_);

  std::atomic<uint64_t> generation_{1};
  std::atomic<uint64_t> next_id_{0};

  Mutex mu_;
  std::vector<std::unique_ptr<FatbinRecord>> fatbins_ FLYT_GUARDED_BY(mu_);
  std::unordered_map<const void*, std::unique_ptr<FunctionRecord>> functions_ FLYT_GUARDED_BY(mu_);
  std::unordered_set<const void*> kernel_handles_ FLYT_GUARDED_BY(mu_);
  std::unordered_map<const void*, std::unique_ptr<VarRecord>> vars_ FLYT_GUARDED_BY(mu_);
  std::unordered_map<const void*, std::unique_ptr<StreamRecord>> streams_ FLYT_GUARDED_BY(mu_);
  std::unordered_map<const void*, std::unique_ptr<EventRecord>> events_ FLYT_GUARDED_BY(mu_);
  // Pinned/registered host ranges and their flags.
  remote::AddressRanges<unsigned> host_memory_ FLYT_GUARDED_BY(mu_);
  std::unordered_set<void*> host_allocations_ FLYT_GUARDED_BY(mu_);  // ours to free
  // The connection's shared arena (empty: none) and its blocks: cudaMallocHost allocates there
  // first, and falls back to the heap when the arena is full. A lock of their own, taken after
  // mu_ where both are held (Connection() runs under mu_) and never before it.
  Mutex arena_mu_;
  remote::SharedArena arena_ FLYT_GUARDED_BY(arena_mu_);
  std::optional<remote::ArenaAllocator> arena_blocks_ FLYT_GUARDED_BY(arena_mu_);
  // The arena copies of cudaHostRegister'd ranges, by the range's base address. `async`: an async
  // copy used it (its unregistration waits for the device first). Which async device-to-host
  // copies into it have yet to land, the connection knows (StagedLandingStream).
  struct StagingCopy {
    uint64_t base = 0;
    uint64_t bytes = 0;
    uint64_t offset = 0;
    bool async = false;
  };
  std::map<uint64_t, StagingCopy> staging_ FLYT_GUARDED_BY(arena_mu_);
  // The staging copy holding [address, address + bytes), or null.
  StagingCopy* FindStagingLocked(uint64_t address, size_t bytes) FLYT_REQUIRES(arena_mu_);
  std::unordered_set<std::string> warned_ FLYT_GUARDED_BY(mu_);

  // [issue 17: graphs] private state
  // (end graphs)

  // [issue 17: pools] private state
  PoolRecord default_pool_;
  Mutex pools_mu_;
  std::unordered_map<const void*, std::unique_ptr<PoolRecord>> pools_ FLYT_GUARDED_BY(pools_mu_);
  cudaMemPool_t current_pool_ FLYT_GUARDED_BY(pools_mu_) = nullptr;  // null: the default
  // Blocks per SM by (function, threads per block, dynamic shared bytes), for cooperative fits.
  std::map<std::tuple<uint64_t, uint32_t, uint64_t>, int32_t> cooperative_fit_
      FLYT_GUARDED_BY(pools_mu_);
  std::map<std::pair<uint64_t, int>, cudaLaunchAttributeValue> stream_attributes_
      FLYT_GUARDED_BY(pools_mu_);
  // (end pools)

  // [issue 17: arrays] private state
  std::atomic<ArraysState*> arrays_state_{nullptr};  // never freed, as the Runtime
  // (end arrays)

  // [issue 17: managed] private state
  // (end managed)

};

// Converts between flyt's and CUDA's error types (the same numbers).
inline cudaError_t ToCuda(remote::CudaError e) { return static_cast<cudaError_t>(e); }
inline remote::CudaError FromCuda(cudaError_t e) { return static_cast<remote::CudaError>(e); }

// The error of a call answered in this process (a null out-pointer, a device other than 0),
// recorded as the last error as CUDA records it, and returned.
inline cudaError_t LocalError(cudaError_t e) {
  return ToCuda(Runtime::Get().errors().Record(FromCuda(e)));
}

// Runs `body` (returning cudaError_t) and turns any exception into cudaErrorUnknown: an
// exception must not cross into the C caller (docs/conventions.md, Errors).
template <typename Body>
cudaError_t Guard(const char* name, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    try {
      Runtime::Get().WarnOnce(std::string("exception:") + name,
                              std::string(name) + " failed inside flyt: " + e.what());
    } catch (...) {
    }
  } catch (...) {
  }
  return cudaErrorUnknown;
}

}  // namespace flyt::runtime
