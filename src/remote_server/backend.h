// Backend: what flyt-gpu-server runs a client's CUDA work on. Two implementations: the simulated
// device (remote_sim/sim_backend.h, device memory in host memory, launches recorded, nothing
// executed) and the real GPU through libcuda.so.1 (remote_driver/driver_backend.h).
//
// A Backend drives exactly one device (the server's --device). Every client connection gets its
// own Session from OpenSession(); everything a client creates (allocations, streams, events,
// modules) is created through, and belongs to, its Session. A Session keeps one client's objects
// apart from another's; it does not contain a fault. A sticky device fault (an illegal address,
// say) poisons every CUDA context of the process it happens in, whichever Session caused it (seen
// on an H100): what isolates clients from each other's faults is a process per client
// (Isolation::kProcess, flyt-gpu-server's default `--isolation process`), where each client's
// process makes its own Backend. Under Isolation::kThread all clients share one Backend, and one
// client's sticky fault reaches them all.
//
// What the server core guarantees before it calls in (the backend need not re-check, but must not
// crash if it does see bad input — it returns an error):
//   - every StreamHandle / EventHandle / ModuleHandle / FunctionHandle passed to a Session was
//     returned by that same Session and not yet destroyed (kDefaultStream is always valid);
//   - every device range of a copy or memset, [ptr, ptr + bytes), lies inside one live allocation
//     of that Session or one global returned by its ModuleGetGlobal, and bytes > 0;
//   - Malloc sizes are > 0 and within the server's memory limit (the server does the accounting,
//     for both backends; the backend only reports the device's own out-of-memory);
//   - Free is called once per pointer that Malloc returned;
//   - before a Session is destroyed, the server has freed/destroyed every object the client still
//     held, in the order modules' users first: events, streams, functions, modules, memory.
//     The Session destructor must still release anything left (belt and braces), and must not
//     block on device work longer than a synchronisation of the session's own streams.
// What it does not guarantee: kernel parameters are opaque bytes; a kernel may dereference any
// address. Keeping one client's kernels out of another's device memory is the business of the
// process per client (each has its own contexts) and the hardware.
//
// The value types it speaks in (DevicePtr, the handles, Dim3, LaunchConfig, ...) are in types.h.
//
// Thread safety: the Backend object itself (device queries, OpenSession) is called concurrently
// from many client threads and must be thread-safe. A Session is used by one thread at a time (the
// server never calls two methods of one Session concurrently), though not necessarily always the
// same thread; a backend that needs a current context per thread makes it current on entry.
// Sessions of different clients run concurrently.
//
// Errors are CudaStatus with the cudaError_t the CUDA runtime would return for the same call on a
// local GPU (see cuda_status.h); a driver backend maps CUresult to the matching runtime code (for
// most codes the numbers are the same). Asynchronous semantics match CUDA: the copy, memset,
// launch and event-record calls below only enqueue work on their stream and return; an error of
// the work itself (a faulting kernel) surfaces from a later synchronising call or query, exactly
// as the driver reports it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "remote/cuda_status.h"
#include "remote/types.h"

namespace flyt::remote {

// Host memory the server copies device data into (device→host copies that complete later).
// The driver backend returns page-locked memory so that the copy is truly asynchronous; the
// default is ordinary heap memory. Freed by its destructor; never touched by two threads at once.
class HostBuffer {
 public:
  virtual ~HostBuffer() = default;
  virtual std::byte* data() = 0;
  virtual size_t size() const = 0;
};

class Session {
 public:
  virtual ~Session() = default;

  // ---- memory ---------------------------------------------------------------------------------
  virtual CudaResult<DevicePtr> Malloc(uint64_t bytes) = 0;
  virtual CudaStatus Free(DevicePtr ptr) = 0;
  virtual CudaResult<MemoryInfo> MemGetInfo() = 0;

  // Enqueues a host→device copy on `stream`. `src` is only valid during the call: the backend
  // copies or stages it before returning (the server calls this once per received chunk, so large
  // copies overlap the network).
  virtual CudaStatus MemcpyHtoD(DevicePtr dst, std::span<const std::byte> src,
                                StreamHandle stream) = 0;
  // Copies device→host and returns when `dst` holds the bytes, after all earlier work on `stream`.
  virtual CudaStatus MemcpyDtoH(std::span<std::byte> dst, DevicePtr src, StreamHandle stream) = 0;
  // Enqueues a device→host copy into `dst`, which the server got from NewHostBuffer and keeps
  // alive and untouched until an event it records on `stream` afterwards has completed.
  virtual CudaStatus MemcpyDtoHAsync(std::byte* dst, DevicePtr src, uint64_t bytes,
                                     StreamHandle stream) = 0;
  virtual CudaStatus MemcpyDtoD(DevicePtr dst, DevicePtr src, uint64_t bytes,
                                StreamHandle stream) = 0;
  // Sets `bytes` bytes to `value` (cudaMemset semantics: only the low byte is used).
  virtual CudaStatus Memset(DevicePtr dst, uint8_t value, uint64_t bytes, StreamHandle stream) = 0;
  // Device memory the server may read and write as host memory, for a backend whose device
  // memory is host memory and whose work completes at once (the sim): the server then receives a
  // copy's data straight into it and sends from it, with no staging copy. Null (the default, and
  // for a range the backend does not hold): copy through MemcpyHtoD / MemcpyDtoH. The server
  // checks the stream (StreamSynchronize) before it touches the view.
  virtual std::byte* HostView(DevicePtr /*ptr*/, uint64_t /*bytes*/) { return nullptr; }

  virtual std::unique_ptr<HostBuffer> NewHostBuffer(size_t bytes);
  // Host memory that outlives every copy from or into it (a client's shared-memory arena): a
  // backend that can copy straight from such memory registers it here once (the driver page-locks
  // it, so that copies from and into it are DMA and stay asynchronous), and MemcpyHtoD from it
  // then reads it when the stream gets there, not during the call. The default does nothing:
  // MemcpyHtoD copies during the call, as ever. Unregister before the memory goes.
  virtual CudaStatus RegisterHostMemory(std::byte* /*ptr*/, uint64_t /*bytes*/) {
    return CudaStatus::Ok();
  }
  virtual void UnregisterHostMemory(std::byte* /*ptr*/) {}

  // ---- streams and events -------------------------------------------------------------------
  virtual CudaResult<StreamHandle> StreamCreate(uint32_t flags, int32_t priority) = 0;
  virtual CudaStatus StreamDestroy(StreamHandle stream) = 0;
  virtual CudaStatus StreamSynchronize(StreamHandle stream) = 0;
  // kSuccess when all work is done, kNotReady when not, or the error of the work.
  virtual CudaStatus StreamQuery(StreamHandle stream) = 0;
  virtual CudaStatus StreamWaitEvent(StreamHandle stream, EventHandle event, uint32_t flags) = 0;

  virtual CudaResult<EventHandle> EventCreate(uint32_t flags) = 0;
  virtual CudaStatus EventDestroy(EventHandle event) = 0;
  virtual CudaStatus EventRecord(EventHandle event, StreamHandle stream) = 0;
  virtual CudaStatus EventSynchronize(EventHandle event) = 0;
  virtual CudaStatus EventQuery(EventHandle event) = 0;  // as StreamQuery
  virtual CudaResult<float> EventElapsedMs(EventHandle start, EventHandle end) = 0;

  virtual CudaStatus DeviceSynchronize() = 0;
  // cudaDeviceReset for this client: called after the server destroyed every object the client
  // held; the backend drops and recreates its device state (a new context), which clears a sticky
  // error only where the driver lets the process make a new context (after a fault an H100 does
  // not: Reset then returns the sticky error, and with a process per client the server hands the
  // connection to a fresh process). Other sessions' objects are not touched.
  virtual CudaStatus Reset() = 0;

  // ---- modules and launches -----------------------------------------------------------------
  // Loads a fatbin container (magic 0xBA55ED50, as nvcc embeds it; possibly with compressed
  // entries) or a bare cubin ELF; the backend picks the entry for its device.
  virtual CudaResult<ModuleHandle> ModuleLoad(std::span<const std::byte> image) = 0;
  virtual CudaStatus ModuleUnload(ModuleHandle module) = 0;
  // `name` is the mangled name (__cudaRegisterFunction's deviceName).
  virtual CudaResult<FunctionHandle> ModuleGetFunction(ModuleHandle module,
                                                       const std::string& name) = 0;
  // A __device__ / __constant__ variable. `registered_bytes` is the size the program registered
  // (__cudaRegisterVar); a backend that knows the real size returns that instead (the server
  // refuses a mismatch), one that cannot know (sim) uses it.
  virtual CudaResult<GlobalSymbol> ModuleGetGlobal(ModuleHandle module, const std::string& name,
                                                   uint64_t registered_bytes) = 0;

  virtual CudaResult<int32_t> FuncGetAttribute(FunctionHandle function, FunctionAttribute attr) = 0;
  virtual CudaStatus FuncSetAttribute(FunctionHandle function, FunctionAttribute attr,
                                      int32_t value) = 0;
  // cudaOccupancyMaxActiveBlocksPerMultiprocessor(WithFlags).
  virtual CudaResult<int32_t> OccupancyMaxActiveBlocksPerSm(FunctionHandle function,
                                                            int32_t block_size,
                                                            uint64_t dynamic_shared_bytes,
                                                            uint32_t flags) = 0;

  // Enqueues a launch. `params` is the kernel's whole parameter buffer, laid out as the cubin's
  // .nv.info says (each argument at its offset), exactly what cuLaunchKernel's
  // CU_LAUNCH_PARAM_BUFFER_POINTER takes.
  virtual CudaStatus LaunchKernel(FunctionHandle function, const LaunchConfig& config,
                                  std::span<const std::byte> params) = 0;

  // ---- issue 17 families: every method here has a default body that returns kNotSupported
  // naming what is missing, so that a backend without the family still builds and answers.
  // [issue 17: graphs] session methods
  // An instantiated graph: nodes in topological order, each depending only on earlier ones
  // (deps are indices), handles already resolved and ranges checked by the server. Host work
  // never reaches the backend (the client runs it). A launch runs the whole graph on `stream`,
  // ordered after the stream's earlier work and before its later work.
  enum class GraphNodeKind : uint8_t {
    kEmpty = 0,
    kKernel,
    kCopy,
    kMemset,
    kEventRecord,
    kEventWait,
  };
  struct GraphNodeSpec {
    GraphNodeKind kind = GraphNodeKind::kEmpty;
    std::vector<uint32_t> deps;
    FunctionHandle function{};
    Dim3 grid, block;
    uint32_t shared_bytes = 0;
    std::vector<std::byte> params;
    DevicePtr dst = 0, src = 0;
    uint64_t bytes = 0;
    uint32_t value = 0, element_size = 1;
    uint64_t width = 0, height = 1, pitch = 0;
    EventHandle event{};
  };
  virtual CudaResult<uint64_t> GraphInstantiate(std::span<const GraphNodeSpec> /*nodes*/) {
    return CudaStatus(CudaError::kNotSupported, "CUDA graphs are not supported by this backend");
  }
  // Same count, kinds and dependencies as the exec's nodes (the server checks).
  virtual CudaStatus GraphUpdate(uint64_t /*exec*/, std::span<const GraphNodeSpec> /*nodes*/) {
    return CudaStatus(CudaError::kNotSupported, "CUDA graphs are not supported by this backend");
  }
  virtual CudaStatus GraphLaunch(uint64_t /*exec*/, StreamHandle /*stream*/) {
    return CudaStatus(CudaError::kNotSupported, "CUDA graphs are not supported by this backend");
  }
  virtual CudaStatus GraphDestroy(uint64_t /*exec*/) {
    return CudaStatus(CudaError::kNotSupported, "CUDA graphs are not supported by this backend");
  }
  // (end graphs)

  // [issue 17: pools] session methods
  // What a launch asks beyond LaunchKernel's (cudaLaunchCooperativeKernel, cudaLaunchKernelExC).
  struct LaunchAttributes {
    bool cooperative = false;  // all blocks co-resident (grid-wide synchronisation)
    Dim3 cluster;              // thread-block cluster dimensions; 1,1,1: none
    int32_t priority = 0;
  };
  // Enqueues a launch with attributes. kCooperativeLaunchTooLarge when a cooperative grid has
  // more blocks than the device holds at once; kInvalidClusterSize for a cluster the grid is not
  // a multiple of or the device cannot schedule.
  virtual CudaStatus LaunchKernelEx(FunctionHandle /*function*/, const LaunchConfig& /*config*/,
                                    const LaunchAttributes& /*attributes*/,
                                    std::span<const std::byte> /*params*/) {
    return CudaStatus(CudaError::kNotSupported,
                      "launches with attributes are not supported by this backend");
  }
  // (end pools)

  // [issue 17: arrays] session methods
  // A CUDA array's element format (cudaChannelFormatDesc: kind number, bits per channel) and
  // extent in elements (height/depth 0 for fewer dimensions), with its cudaArray* flags. The
  // server has checked it (channels, sizes) and accounted its bytes before the call.
  struct ArraySpec {
    uint32_t format = 0;
    int32_t bits[4] = {0, 0, 0, 0};
    uint64_t width = 0;
    uint64_t height = 0;
    uint64_t depth = 0;
    uint32_t flags = 0;
    uint64_t element_bytes() const {
      return static_cast<uint64_t>(bits[0] + bits[1] + bits[2] + bits[3]) / 8;
    }
    uint64_t row_bytes() const { return width * element_bytes(); }
    uint64_t rows() const { return height == 0 ? 1 : height; }
    uint64_t slices() const { return depth == 0 ? 1 : depth; }
  };
  // One end of a 2D/3D copy: host memory (`host`, rows `pitch` apart), pitched device memory at
  // `ptr`, or an array (a handle this session returned). x in bytes; y, z in rows and slices;
  // `height` the rows of a slice (pitched ends). The server has checked every device range.
  struct CopyEndSpec {
    enum class Kind { kHost, kDevice, kArray };
    Kind kind = Kind::kHost;
    std::byte* host = nullptr;
    DevicePtr ptr = 0;
    uint64_t array = 0;
    uint64_t pitch = 0;
    uint64_t height = 0;
    uint64_t x = 0;
    uint64_t y = 0;
    uint64_t z = 0;
  };
  struct Copy3DSpec {
    CopyEndSpec dst;
    CopyEndSpec src;
    uint64_t width_bytes = 0;
    uint64_t height = 1;
    uint64_t depth = 1;
  };
  // cudaResourceDesc (array: the session's array or mipmapped-array handle), cudaTextureDesc and
  // cudaResourceViewDesc, field by field, enumerations by their CUDA numbers.
  struct ResourceSpec {
    uint32_t type = 0;  // cudaResourceType: 0 array, 1 mipmapped array, 2 linear, 3 pitch2D
    uint64_t array = 0;
    DevicePtr ptr = 0;
    uint32_t format = 0;
    int32_t bits[4] = {0, 0, 0, 0};
    uint64_t size_bytes = 0;
    uint64_t width = 0;
    uint64_t height = 0;
    uint64_t pitch = 0;
  };
  struct TextureSpec {
    uint32_t address_mode[3] = {0, 0, 0};
    uint32_t filter_mode = 0;
    uint32_t read_mode = 0;
    int32_t srgb = 0;
    float border[4] = {0, 0, 0, 0};
    int32_t normalized_coords = 0;
    uint32_t max_anisotropy = 0;
    uint32_t mipmap_filter_mode = 0;
    float mipmap_level_bias = 0;
    float min_mipmap_level_clamp = 0;
    float max_mipmap_level_clamp = 0;
    int32_t disable_trilinear_optimization = 0;
    int32_t seamless_cubemap = 0;
  };
  struct ViewSpec {
    uint32_t format = 0;
    uint64_t width = 0;
    uint64_t height = 0;
    uint64_t depth = 0;
    uint32_t first_mipmap_level = 0;
    uint32_t last_mipmap_level = 0;
    uint32_t first_layer = 0;
    uint32_t last_layer = 0;
  };
  virtual CudaResult<uint64_t> ArrayCreate(const ArraySpec& /*spec*/) {
    return CudaStatus(CudaError::kNotSupported, "CUDA arrays are not supported by this backend");
  }
  virtual CudaStatus ArrayDestroy(uint64_t /*array*/) {
    return CudaStatus(CudaError::kNotSupported, "CUDA arrays are not supported by this backend");
  }
  virtual CudaResult<uint64_t> MipmappedArrayCreate(const ArraySpec& /*spec*/,
                                                    uint32_t /*levels*/) {
    return CudaStatus(CudaError::kNotSupported,
                      "mipmapped arrays are not supported by this backend");
  }
  // Level `level` as an array handle owned by the mipmapped array (never ArrayDestroy'ed).
  virtual CudaResult<uint64_t> MipmappedArrayLevel(uint64_t /*mipmap*/, uint32_t /*level*/) {
    return CudaStatus(CudaError::kNotSupported,
                      "mipmapped arrays are not supported by this backend");
  }
  virtual CudaStatus MipmappedArrayDestroy(uint64_t /*mipmap*/) {
    return CudaStatus(CudaError::kNotSupported,
                      "mipmapped arrays are not supported by this backend");
  }
  // A 2D/3D copy on `stream`. With a host end it returns once the host bytes have been read or
  // written (the host memory is the server's staging buffer); between device ends it enqueues.
  virtual CudaStatus Memcpy3D(const Copy3DSpec& /*copy*/, StreamHandle /*stream*/) {
    return CudaStatus(CudaError::kNotSupported, "2D/3D array copies are not supported by this backend");
  }
  // Returns the value kernels receive (cudaTextureObject_t / cudaSurfaceObject_t).
  virtual CudaResult<uint64_t> TextureCreate(const ResourceSpec& /*resource*/,
                                             const TextureSpec& /*texture*/,
                                             const ViewSpec* /*view*/) {
    return CudaStatus(CudaError::kNotSupported, "texture objects are not supported by this backend");
  }
  virtual CudaStatus TextureDestroy(uint64_t /*value*/) {
    return CudaStatus(CudaError::kNotSupported, "texture objects are not supported by this backend");
  }
  virtual CudaResult<uint64_t> SurfaceCreate(const ResourceSpec& /*resource*/) {
    return CudaStatus(CudaError::kNotSupported, "surface objects are not supported by this backend");
  }
  virtual CudaStatus SurfaceDestroy(uint64_t /*value*/) {
    return CudaStatus(CudaError::kNotSupported, "surface objects are not supported by this backend");
  }
  // (end arrays)

  // [issue 17: managed] session methods
  // Device memory behind a cudaMallocManaged host mirror: like Malloc, at `address_hint` (a
  // client's host address, page aligned) when the backend can place it there, else anywhere (the
  // client then moves its mirror to the returned address). Free releases it.
  virtual CudaResult<DevicePtr> MallocManaged(uint64_t /*bytes*/, uint64_t /*address_hint*/) {
    return CudaStatus(CudaError::kNotSupported,
                      "managed memory is not supported by this backend");
  }
  // A __managed__ variable's device storage (as ModuleGetGlobal), at `address_hint` where the
  // backend can place it; the global is then reachable at both addresses until the module goes.
  virtual CudaResult<GlobalSymbol> ModuleGetManagedGlobal(ModuleHandle /*module*/,
                                                          const std::string& /*name*/,
                                                          uint64_t /*registered_bytes*/,
                                                          uint64_t /*address_hint*/) {
    return CudaStatus(CudaError::kNotSupported,
                      "managed variables are not supported by this backend");
  }
  // (end managed)

  // Interprocess memory and events (cudaIpc*). A handle is 64 bytes this backend makes and
  // checks; it names a whole allocation (`base`, as Malloc returned it) or an event created with
  // the interprocess flag. Open maps the allocation into this session (its address and size),
  // Close unmaps it; an opened event is an ordinary event of this session (EventDestroy ends it).
  static constexpr size_t kIpcHandleBytes = 64;
  virtual CudaResult<std::vector<std::byte>> IpcGetMemHandle(DevicePtr /*base*/) {
    return CudaStatus(CudaError::kNotSupported, "interprocess memory is not supported here");
  }
  virtual CudaResult<std::pair<DevicePtr, uint64_t>> IpcOpenMemHandle(
      const std::vector<std::byte>& /*handle*/) {
    return CudaStatus(CudaError::kNotSupported, "interprocess memory is not supported here");
  }
  virtual CudaStatus IpcCloseMemHandle(DevicePtr /*ptr*/) {
    return CudaStatus(CudaError::kNotSupported, "interprocess memory is not supported here");
  }
  virtual CudaResult<std::vector<std::byte>> IpcGetEventHandle(EventHandle /*event*/) {
    return CudaStatus(CudaError::kNotSupported, "interprocess events are not supported here");
  }
  virtual CudaResult<EventHandle> IpcOpenEventHandle(const std::vector<std::byte>& /*handle*/) {
    return CudaStatus(CudaError::kNotSupported, "interprocess events are not supported here");
  }

  // ---- live migration (issue 18)
  // Device memory of `bytes` at exactly `address`: how a migrated client's allocations are made
  // again on the new server, so that pointers stored in device memory, interior pointers and
  // pointers inside structs stay valid. Freed with Free like Malloc's. kInvalidValue when the
  // range (or part of it) is held already or is not a device address this backend can place;
  // kNotSupported where the backend cannot place memory at all.
  virtual CudaResult<DevicePtr> MallocAt(DevicePtr /*address*/, uint64_t /*bytes*/) {
    return CudaStatus(CudaError::kNotSupported,
                      "this backend cannot place device memory at a given address");
  }
  // ModuleGetGlobal, with the global's storage at `address` (where the variable lived on the old
  // server). A backend that cannot move a global succeeds only when the global already is at
  // `address` (the default, below).
  virtual CudaResult<GlobalSymbol> ModuleGetGlobalAt(ModuleHandle module, const std::string& name,
                                                     uint64_t registered_bytes, DevicePtr address);
  // Whether this backend can MallocAt (the server checks before it starts a migration).
  virtual bool CanPlaceMemory() const { return false; }

  // ---- resizing (ResizeServer) ----------------------------------------------------------------
  // Runs this session's later work on `sm_count` SMs of the device (1..the device's), called at a
  // clean point: between the client's calls, nothing of it in flight on the server's side. The
  // session waits for its posted device work first. On success `*granted` is the SMs it runs with
  // now (the backend rounds up to its granularity); on failure nothing changed and the error says
  // why (the default: this backend cannot change a session's share).
  virtual CudaStatus ApplySmShare(int sm_count, int* granted);
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "sim" or "driver".
  virtual std::string Name() const = 0;
  // One line for the server's start-up log, e.g. "NVIDIA H100 80GB HBM3, 132 SMs, 79.1 GiB".
  virtual std::string Describe() const = 0;

  virtual DeviceIdentity Identity() const = 0;
  // A device attribute by its cudaDeviceAttr / CUdevice_attribute number (the same numbers);
  // kInvalidValue for a number the backend does not know.
  virtual CudaResult<int32_t> DeviceAttribute(uint32_t attr) const = 0;

  // A fresh, empty session for one client. `client_label` names the client in the backend's logs.
  virtual CudaResult<std::unique_ptr<Session>> OpenSession(const std::string& client_label) = 0;
};

inline CudaResult<GlobalSymbol> Session::ModuleGetGlobalAt(ModuleHandle module,
                                                          const std::string& name,
                                                          uint64_t registered_bytes,
                                                          DevicePtr address) {
  CudaResult<GlobalSymbol> global = ModuleGetGlobal(module, name, registered_bytes);
  if (!global.ok() || global->ptr == address) return global;
  return CudaStatus(CudaError::kNotSupported, "global " + name + " would move from " +
                                                  HexAddress(global->ptr) + " to " +
                                                  HexAddress(address));
}

inline CudaStatus Session::ApplySmShare(int /*sm_count*/, int* /*granted*/) {
  return CudaStatus(CudaError::kNotSupported, "this backend cannot change a client's SM share");
}

inline std::unique_ptr<HostBuffer> Session::NewHostBuffer(size_t bytes) {
  class HeapBuffer final : public HostBuffer {
   public:
    explicit HeapBuffer(size_t n) : data_(std::make_unique<std::byte[]>(n)), size_(n) {}
    std::byte* data() override { return data_.get(); }
    size_t size() const override { return size_; }

   private:
    std::unique_ptr<std::byte[]> data_;
    size_t size_;
  };
  return std::make_unique<HeapBuffer>(bytes);
}

}  // namespace flyt::remote
