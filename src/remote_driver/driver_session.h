// DriverSession: the driver backend's Session, the whole Session interface on a real GPU through
// libcuda, call by call, in the order of sim_backend.cc. Declared here so that each family defines
// its own calls in its own file: the core (memory, streams, events, modules, launches, cleanup) is
// driver_session.cc; graphs, pools, arrays and managed memory are driver_<family>.cc. Internal to
// flyt_driver_backend; OpenDriverSession (driver_internal.h) is how a session is made.
//
// Ownership: a DriverSession owns every driver object the client created through it (allocations,
// streams, events, modules, graphs, arrays, texture and surface objects) and destroys what is left
// in its destructor or on Reset; it shares its Context with the pinned buffers it hands out.
// Thread safety: none of its own. A Session is used by one thread at a time (backend.h), which may
// change between calls; every call makes the session's context current on entry (Enter).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda_driver/cuda_driver_types.h"
#include "remote_driver/driver_internal.h"
#include "remote_driver/granule_chunks.h"

namespace flyt::remote::driver_impl {

// Session handles are the driver's own pointers.
template <typename Handle, typename Native>
Handle ToHandle(Native native) {
  return static_cast<Handle>(reinterpret_cast<uintptr_t>(native));
}
template <typename Native, typename Handle>
Native FromHandle(Handle handle) {
  return reinterpret_cast<Native>(static_cast<uintptr_t>(handle));
}

class DriverSession final : public Session {
 public:
  DriverSession(DriverPtr driver, CUdevice device, std::optional<int> sm_count, std::string label,
                std::shared_ptr<Context> ctx)
      : driver_(std::move(driver)),
        fn_(driver_->api()),
        device_(device),
        sm_count_(sm_count),
        label_(std::move(label)),
        ctx_(std::move(ctx)) {}

  DriverSession(const DriverSession&) = delete;
  DriverSession& operator=(const DriverSession&) = delete;

  ~DriverSession() override;
  // ---- memory -------------------------------------------------------------------------------
  CudaResult<DevicePtr> Malloc(uint64_t bytes) override;
  CudaStatus Free(DevicePtr ptr) override;
  CudaResult<MemoryInfo> MemGetInfo() override;
  // The async form for every stream: from pageable memory it returns once the source has been
  // staged, which is what the contract asks (`src` is only valid during the call).
  CudaStatus MemcpyHtoD(DevicePtr dst, std::span<const std::byte> src,
                        StreamHandle stream) override;
  CudaStatus MemcpyDtoH(std::span<std::byte> dst, DevicePtr src, StreamHandle stream) override;
  CudaStatus MemcpyDtoHAsync(std::byte* dst, DevicePtr src, uint64_t bytes,
                             StreamHandle stream) override;
  CudaStatus MemcpyDtoD(DevicePtr dst, DevicePtr src, uint64_t bytes, StreamHandle stream) override;
  CudaStatus Memset(DevicePtr dst, uint8_t value, uint64_t bytes, StreamHandle stream) override;
  // Page-locked when the driver can give it; ordinary heap memory otherwise (the copy into it is
  // then synchronous, but still correct).
  std::unique_ptr<HostBuffer> NewHostBuffer(size_t bytes) override;
  CudaStatus RegisterHostMemory(std::byte* ptr, uint64_t bytes) override;
  void UnregisterHostMemory(std::byte* ptr) override;
  // ---- streams and events -------------------------------------------------------------------
  CudaResult<StreamHandle> StreamCreate(uint32_t flags, int32_t priority) override;
  CudaStatus StreamDestroy(StreamHandle stream) override;
  CudaStatus StreamSynchronize(StreamHandle stream) override;
  CudaStatus StreamQuery(StreamHandle stream) override;
  CudaStatus StreamWaitEvent(StreamHandle stream, EventHandle event, uint32_t flags) override;
  CudaResult<EventHandle> EventCreate(uint32_t flags) override;
  CudaStatus EventDestroy(EventHandle event) override;
  CudaStatus EventRecord(EventHandle event, StreamHandle stream) override;
  CudaStatus EventSynchronize(EventHandle event) override;
  CudaStatus EventQuery(EventHandle event) override;
  CudaResult<float> EventElapsedMs(EventHandle start, EventHandle end) override;
  CudaStatus DeviceSynchronize() override;
  CudaStatus Reset() override;
  // ---- modules and launches -----------------------------------------------------------------
  CudaResult<ModuleHandle> ModuleLoad(std::span<const std::byte> image) override;
  CudaStatus ModuleUnload(ModuleHandle module) override;
  CudaResult<FunctionHandle> ModuleGetFunction(ModuleHandle module,
                                               const std::string& name) override;
  CudaResult<GlobalSymbol> ModuleGetGlobal(ModuleHandle module, const std::string& name,
                                           uint64_t /*registered_bytes*/) override;
  CudaResult<int32_t> FuncGetAttribute(FunctionHandle function, FunctionAttribute attr) override;
  CudaStatus FuncSetAttribute(FunctionHandle function, FunctionAttribute attr,
                              int32_t value) override;
  CudaResult<int32_t> OccupancyMaxActiveBlocksPerSm(FunctionHandle function, int32_t block_size,
                                                    uint64_t dynamic_shared_bytes,
                                                    uint32_t flags) override;
  CudaStatus LaunchKernel(FunctionHandle function, const LaunchConfig& config,
                          std::span<const std::byte> params) override;
  // [issue 17: graphs] overrides: defined in driver_<family>.cc
  CudaResult<uint64_t> GraphInstantiate(std::span<const GraphNodeSpec> nodes) override;
  // Re-captures and re-instantiates (the nodes' parameters live in the new capture).
  CudaStatus GraphUpdate(uint64_t exec, std::span<const GraphNodeSpec> nodes) override;
  CudaStatus GraphLaunch(uint64_t exec, StreamHandle stream) override;
  CudaStatus GraphDestroy(uint64_t exec) override;
  // The nodes with their handles as driver objects; `nodes` must outlive the result (parameter
  // buffers are borrowed).
  CudaResult<std::vector<DriverGraphNode>> DriverNodes(std::span<const GraphNodeSpec> nodes);
  // (end graphs)

  // [issue 17: pools] overrides: defined in driver_<family>.cc
  // cuLaunchKernelEx with the cooperative, cluster and priority attributes (NOT YET RUN ON A GPU).
  CudaStatus LaunchKernelEx(FunctionHandle function, const LaunchConfig& config,
                            const LaunchAttributes& attributes,
                            std::span<const std::byte> params) override;
  // (end pools)

  // [issue 17: arrays] overrides: defined in driver_<family>.cc
  // (Arrays, mipmapped arrays and texture/surface objects are the driver's own handles; the
  // server checked them already.)
  CudaResult<uint64_t> ArrayCreate(const ArraySpec& spec) override;
  CudaStatus ArrayDestroy(uint64_t handle) override;
  CudaResult<uint64_t> MipmappedArrayCreate(const ArraySpec& spec, uint32_t levels) override;
  CudaResult<uint64_t> MipmappedArrayLevel(uint64_t handle, uint32_t level) override;
  CudaStatus MipmappedArrayDestroy(uint64_t handle) override;
  CudaStatus Memcpy3D(const Copy3DSpec& copy, StreamHandle stream) override;
  CudaResult<uint64_t> TextureCreate(const ResourceSpec& resource, const TextureSpec& texture,
                                     const ViewSpec* view) override;
  CudaStatus TextureDestroy(uint64_t value) override;
  CudaResult<uint64_t> SurfaceCreate(const ResourceSpec& resource) override;
  CudaStatus SurfaceDestroy(uint64_t value) override;
  // (end arrays)

  // [issue 17: managed] overrides: defined in driver_<family>.cc
  // Managed memory is plain device memory here (the client keeps the host mirror and moves it
  // to the address returned); a __managed__ variable is the module's global where it is.
  CudaResult<DevicePtr> MallocManaged(uint64_t bytes, uint64_t) override;
  CudaResult<GlobalSymbol> ModuleGetManagedGlobal(ModuleHandle module, const std::string& name,
                                                  uint64_t registered_bytes, uint64_t) override;
  // (end managed)

  // Resizing: a context's SM limit (execution affinity) is fixed when the context is made, and
  // memory from cuMemAlloc, modules, streams and events belong to the context that made them. So
  // a session that holds any of them refuses (kNotSupported: the share applies to clients that
  // connect after the resize); an empty one (a client that just connected) waits for its context
  // and moves to a new one made with the share.
  CudaStatus ApplySmShare(int sm_count, int* granted) override;

  // Interprocess memory and events (driver_ipc.cc): the driver's own 64-byte handles.
  CudaResult<std::vector<std::byte>> IpcGetMemHandle(DevicePtr base) override;
  CudaResult<std::pair<DevicePtr, uint64_t>> IpcOpenMemHandle(
      const std::vector<std::byte>& handle) override;
  CudaStatus IpcCloseMemHandle(DevicePtr ptr) override;
  CudaResult<std::vector<std::byte>> IpcGetEventHandle(EventHandle event) override;
  CudaResult<EventHandle> IpcOpenEventHandle(const std::vector<std::byte>& handle) override;

  // Live migration (driver_migration.cc): memory at a chosen address through the driver's virtual
  // memory management (NOT YET RUN ON A GPU). A module's globals stay where the driver loads
  // them (ModuleGetGlobalAt is Session's default).
  CudaResult<DevicePtr> MallocAt(DevicePtr address, uint64_t bytes) override;
  bool CanPlaceMemory() const override;

 private:
  struct FunctionInfo {
    CUmodule module = nullptr;
    std::string name;
    // The parameter buffer size the driver computes (cuFuncGetParamInfo, CUDA 12.4+ drivers).
    std::optional<size_t> param_bytes;
    bool mismatch_logged = false;
  };

  // Makes the session's context current on this thread (a Session may move between threads).
  CudaStatus Enter() {
    if (ctx_ == nullptr) {
      return {ErrorCode::kDeviceUninitialized,
              "this session has no CUDA context (an earlier reset failed to create one)"};
    }
    return ctx_->MakeCurrent();
  }

  CudaStatus UnknownHandle(std::string_view call, std::string_view what) const {
    return {ErrorCode::kInvalidResourceHandle,
            std::string(call) + ": unknown " + std::string(what) + " handle for this session"};
  }

  CudaResult<CUstream> StreamOf(StreamHandle handle) const {
    if (handle == kDefaultStream) return CUstream{nullptr};
    CUstream stream = FromHandle<CUstream>(handle);
    if (!streams_.contains(stream)) return UnknownHandle("stream", "stream");
    return stream;
  }
  CudaResult<CUevent> EventOf(EventHandle handle, std::string_view call) const {
    CUevent event = FromHandle<CUevent>(handle);
    if (!events_.contains(event)) return UnknownHandle(call, "event");
    return event;
  }
  CudaResult<CUmodule> ModuleOf(ModuleHandle handle, std::string_view call) const {
    CUmodule module = FromHandle<CUmodule>(handle);
    if (!modules_.contains(module)) return UnknownHandle(call, "module");
    return module;
  }
  CudaResult<CUfunction> FunctionOf(FunctionHandle handle, std::string_view call) const {
    CUfunction function = FromHandle<CUfunction>(handle);
    if (!functions_.contains(function)) return UnknownHandle(call, "function");
    return function;
  }

  // The size of the kernel's parameter buffer as the driver lays it out: the end of its last
  // parameter. Absent when the driver cannot say (no cuFuncGetParamInfo).
  std::optional<size_t> DriverParamBytes(CUfunction function) const;

  // Cross-checks the buffer the server built (from the cubin's .nv.info, parsed by flyt) against
  // the driver's own layout. A shorter buffer would make the driver read past it: refused. A
  // longer one (trailing padding) is launched, but logged, once per function, because it means
  // the two disagree.
  CudaStatus CheckParamLayout(FunctionInfo& info, size_t size);

  // Destroys what the client left behind (the context is current). Errors are ignored: a context
  // with a sticky error refuses most calls, and destroying the context frees everything anyway.
  void ReleaseAll();
  void ReleaseGraphs();  // [issue 17: graphs] driver_graphs.cc
  void ReleaseArrays();  // [issue 17: arrays] driver_arrays.cc

  const DriverPtr driver_;
  const FunctionTable& fn_;  // driver_'s table
  const CUdevice device_;
  std::optional<int> sm_count_;  // the share its contexts are made with (ApplySmShare changes it)
  const std::string label_;
  std::shared_ptr<Context> ctx_;  // null only after a failed Reset
  std::unordered_set<CUdeviceptr> allocations_;
  std::unordered_map<CUdeviceptr, int> ipc_imports_;  // cuIpcOpenMemHandle references held
  std::unordered_set<CUstream> streams_;
  std::unordered_set<CUevent> events_;
  std::unordered_set<CUmodule> modules_;
  std::unordered_map<CUfunction, FunctionInfo> functions_;
  std::vector<uint64_t> scratch_;  // an aligned copy of a misaligned parameter buffer

  // [issue 17: graphs] session state
  struct Graph {
    DriverGraph graph;
    std::vector<GraphNodeSpec> nodes;  // owns the parameter buffers the capture read
  };
  std::unordered_map<uint64_t, Graph> graphs_;
  uint64_t next_graph_ = 1;
  // (end graphs)

  // [issue 17: pools] session state
  // (end pools)

  // [issue 17: arrays] session state
  std::unordered_set<cuda_driver::CUarray> arr_arrays_;
  std::unordered_set<cuda_driver::CUarray> arr_levels_;  // owned by their mipmapped arrays
  std::unordered_set<cuda_driver::CUmipmappedArray> arr_mipmaps_;
  std::unordered_set<cuda_driver::CUtexObject> arr_textures_;
  std::unordered_set<cuda_driver::CUsurfObject> arr_surfaces_;
  // (end arrays)

  // [issue 17: managed] session state
  // (end managed)

  // Live migration: the allocations MallocAt made (driver_migration.cc), placed in chunks of
  // whole granules, each a reserved range with one physical allocation mapped over all of it
  // (granule_chunks.h), made on the first MallocAt. Free and ReleaseAll undo a chunk (unmap,
  // release, free the range) once no allocation uses it, instead of cuMemFree.
  using PlacedChunks = GranuleChunks<cuda_driver::CUmemGenericAllocationHandle>;
  std::optional<PlacedChunks> placed_;
  cuda_driver::CUmemAllocationProp ChunkProperties() const;
  // Reserves [base, base + bytes) exactly, creates physical memory for it and maps it readable
  // and writable by the device; kInvalidValue when the range is taken.
  CudaResult<cuda_driver::CUmemGenericAllocationHandle> MapChunk(CUdeviceptr base, size_t bytes);
  // Unmaps and releases a chunk and frees its range; the first failing call's error.
  CudaStatus ReleaseChunk(CUdeviceptr base, size_t bytes,
                          cuda_driver::CUmemGenericAllocationHandle handle);
  // Free's part for MallocAt's allocations (`was_placed`: ptr is one) and ReleaseAll's.
  CudaStatus FreePlaced(DevicePtr ptr, bool& was_placed);
  void ReleaseAllPlaced();
};

}  // namespace flyt::remote::driver_impl
