// The driver backend's sessions: DriverSession implements the whole Session interface on a real
// GPU through libcuda, call by call, in the order of sim_backend.cc, so a reader compares the two
// backends side by side. The backend itself (loading, the device, contexts) is driver_backend.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "cuda/elf.h"
#include "cuda/fatbin.h"
#include "cuda_driver/cuda_driver_types.h"
#include "cuda_driver/library.h"

#include "remote/driver_internal.h"

namespace flyt::remote::driver_impl {
namespace {

// Page-locked host memory (cuMemHostAlloc, portable to every context) for device→host copies that
// complete later. Keeps the context it was allocated in alive until it is freed.
class PinnedBuffer final : public HostBuffer {
 public:
  PinnedBuffer(std::shared_ptr<Context> ctx, void* data, size_t size)
      : ctx_(std::move(ctx)), data_(static_cast<std::byte*>(data)), size_(size) {}
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() override {
    if (ctx_->MakeCurrent().ok()) ctx_->driver().api().MemFreeHost(data_);
  }
  std::byte* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  std::shared_ptr<Context> ctx_;
  std::byte* data_;
  size_t size_;
};

// ---------------------------------------------------------------------------------------------
// Images.

// Refuses an image whose headers claim more bytes than it has, before the driver (which trusts
// the headers) reads it. Deeper damage inside a well-sized image is the driver's to reject; at
// worst it takes down this lease's own server process, which serves only this client.
CudaStatus CheckImage(std::span<const std::byte> image) {
  uint32_t magic = 0;
  if (image.size() >= sizeof magic) std::memcpy(&magic, image.data(), sizeof magic);
  if (magic == cuda::kFatbinMagic) {
    Result<size_t> size = cuda::FatbinSize(image);
    if (!size.ok()) {
      return {ErrorCode::kInvalidKernelImage, "fatbin container: " + size.status().message()};
    }
    if (*size > image.size()) {
      return {ErrorCode::kInvalidKernelImage, "fatbin container claims " + std::to_string(*size) +
                                                  " bytes, " + std::to_string(image.size()) +
                                                  " were sent"};
    }
    return CudaStatus::Ok();
  }
  constexpr std::array<unsigned char, 4> kElfMagic = {0x7f, 'E', 'L', 'F'};
  if (image.size() >= kElfMagic.size() &&
      std::memcmp(image.data(), kElfMagic.data(), kElfMagic.size()) == 0) {
    Result<cuda::ElfFile> elf = cuda::ElfFile::Parse(image, "cubin");
    if (!elf.ok()) return {ErrorCode::kInvalidKernelImage, elf.status().message()};
    return CudaStatus::Ok();
  }
  return {ErrorCode::kInvalidKernelImage,
          "module image is neither a fatbin container nor a cubin (" +
              std::to_string(image.size()) + " bytes)"};
}

// ---------------------------------------------------------------------------------------------
// Sessions.

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

  ~DriverSession() override {
    if (ctx_ == nullptr) return;
    if (ctx_->MakeCurrent().ok()) {
      // Only this session's own work: the context is the session's.
      fn_.CtxSynchronize();
      ReleaseAll();
    }
  }

  // ---- memory -------------------------------------------------------------------------------
  CudaResult<DevicePtr> Malloc(uint64_t bytes) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    CUdeviceptr ptr = 0;
    CUresult rc = fn_.MemAlloc(&ptr, bytes);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemAlloc", rc);
    allocations_.insert(ptr);
    return DevicePtr{ptr};
  }

  CudaStatus Free(DevicePtr ptr) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) {
      return {ErrorCode::kInvalidValue, "cuMemFree: not an allocation of this session"};
    }
    CUresult rc = fn_.MemFree(ptr);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemFree", rc);
    allocations_.erase(it);
    return CudaStatus::Ok();
  }

  CudaResult<MemoryInfo> MemGetInfo() override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    size_t free_bytes = 0, total_bytes = 0;
    CUresult rc = fn_.MemGetInfo(&free_bytes, &total_bytes);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemGetInfo", rc);
    return MemoryInfo{free_bytes, total_bytes};
  }

  // The async form for every stream: from pageable memory it returns once the source has been
  // staged, which is what the contract asks (`src` is only valid during the call).
  CudaStatus MemcpyHtoD(DevicePtr dst, std::span<const std::byte> src,
                        StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    CUresult rc = fn_.MemcpyHtoDAsync(dst, src.data(), src.size(), s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemcpyHtoDAsync", rc);
    return CudaStatus::Ok();
  }

  CudaStatus MemcpyDtoH(std::span<std::byte> dst, DevicePtr src, StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    if (s == nullptr) {
      // The legacy default stream: the synchronous copy waits for it (and so for every blocking
      // stream), as cudaMemcpy does.
      CUresult rc = fn_.MemcpyDtoH(dst.data(), src, dst.size());
      if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemcpyDtoH", rc);
      return CudaStatus::Ok();
    }
    CUresult rc = fn_.MemcpyDtoHAsync(dst.data(), src, dst.size(), s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemcpyDtoHAsync", rc);
    rc = fn_.StreamSynchronize(s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamSynchronize", rc);
    return CudaStatus::Ok();
  }

  CudaStatus MemcpyDtoHAsync(std::byte* dst, DevicePtr src, uint64_t bytes,
                             StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    CUresult rc = fn_.MemcpyDtoHAsync(dst, src, bytes, s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemcpyDtoHAsync", rc);
    return CudaStatus::Ok();
  }

  CudaStatus MemcpyDtoD(DevicePtr dst, DevicePtr src, uint64_t bytes,
                        StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    CUresult rc = fn_.MemcpyDtoDAsync(dst, src, bytes, s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemcpyDtoDAsync", rc);
    return CudaStatus::Ok();
  }

  CudaStatus Memset(DevicePtr dst, uint8_t value, uint64_t bytes, StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    CUresult rc = fn_.MemsetD8Async(dst, value, bytes, s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemsetD8Async", rc);
    return CudaStatus::Ok();
  }

  // Page-locked when the driver can give it; ordinary heap memory otherwise (the copy into it is
  // then synchronous, but still correct).
  std::unique_ptr<HostBuffer> NewHostBuffer(size_t bytes) override {
    if (bytes > 0 && Enter().ok()) {
      void* data = nullptr;
      CUresult rc = fn_.MemHostAlloc(&data, bytes, CU_MEMHOSTALLOC_PORTABLE);
      if (rc == CUDA_SUCCESS) return std::make_unique<PinnedBuffer>(ctx_, data, bytes);
      spdlog::warn("driver backend [{}]: {}; using pageable memory", label_,
                   driver_->ErrorMessage("cuMemHostAlloc", rc));
    }
    return Session::NewHostBuffer(bytes);
  }

  // ---- streams and events -------------------------------------------------------------------
  CudaResult<StreamHandle> StreamCreate(uint32_t flags, int32_t priority) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    CUstream stream = nullptr;
    CUresult rc = fn_.StreamCreateWithPriority(&stream, flags, priority);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamCreateWithPriority", rc);
    streams_.insert(stream);
    return ToHandle<StreamHandle>(stream);
  }

  CudaStatus StreamDestroy(StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    auto it = streams_.find(FromHandle<CUstream>(stream));
    if (it == streams_.end()) return UnknownHandle("cuStreamDestroy", "stream");
    CUresult rc = fn_.StreamDestroy(*it);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamDestroy", rc);
    streams_.erase(it);
    return CudaStatus::Ok();
  }

  CudaStatus StreamSynchronize(StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    CUresult rc = fn_.StreamSynchronize(s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamSynchronize", rc);
    return CudaStatus::Ok();
  }

  CudaStatus StreamQuery(StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    CUresult rc = fn_.StreamQuery(s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamQuery", rc);
    return CudaStatus::Ok();
  }

  CudaStatus StreamWaitEvent(StreamHandle stream, EventHandle event, uint32_t flags) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuStreamWaitEvent"));
    CUresult rc = fn_.StreamWaitEvent(s, e, flags);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamWaitEvent", rc);
    return CudaStatus::Ok();
  }

  CudaResult<EventHandle> EventCreate(uint32_t flags) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    CUevent event = nullptr;
    CUresult rc = fn_.EventCreate(&event, flags);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventCreate", rc);
    events_.insert(event);
    return ToHandle<EventHandle>(event);
  }

  CudaStatus EventDestroy(EventHandle event) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuEventDestroy"));
    CUresult rc = fn_.EventDestroy(e);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventDestroy", rc);
    events_.erase(e);
    return CudaStatus::Ok();
  }

  CudaStatus EventRecord(EventHandle event, StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuEventRecord"));
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    CUresult rc = fn_.EventRecord(e, s);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventRecord", rc);
    return CudaStatus::Ok();
  }

  CudaStatus EventSynchronize(EventHandle event) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuEventSynchronize"));
    CUresult rc = fn_.EventSynchronize(e);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventSynchronize", rc);
    return CudaStatus::Ok();
  }

  CudaStatus EventQuery(EventHandle event) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuEventQuery"));
    CUresult rc = fn_.EventQuery(e);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventQuery", rc);
    return CudaStatus::Ok();
  }

  CudaResult<float> EventElapsedMs(EventHandle start, EventHandle end) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUevent a, EventOf(start, "cuEventElapsedTime"));
    FLYT_CUDA_ASSIGN_OR_RETURN(CUevent b, EventOf(end, "cuEventElapsedTime"));
    float ms = 0;
    CUresult rc = fn_.EventElapsedTime(&ms, a, b);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventElapsedTime", rc);
    return ms;
  }

  CudaStatus DeviceSynchronize() override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    CUresult rc = fn_.CtxSynchronize();
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuCtxSynchronize", rc);
    return CudaStatus::Ok();
  }

  CudaStatus Reset() override {
    if (ctx_ != nullptr && ctx_->MakeCurrent().ok()) {
      fn_.CtxSynchronize();  // a sticky error is expected here; the context is replaced anyway
      ReleaseAll();
    }
    ctx_.reset();
    FLYT_CUDA_ASSIGN_OR_RETURN(ctx_, Context::Create(driver_, device_, sm_count_));
    return CudaStatus::Ok();
  }

  // ---- modules and launches -----------------------------------------------------------------
  CudaResult<ModuleHandle> ModuleLoad(std::span<const std::byte> image) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_RETURN_IF_ERROR(CheckImage(image));
    // An 8-byte-aligned copy with zero padding: the driver reads headers as aligned words, and
    // the padding ends any text it might scan for a terminator.
    std::vector<uint64_t> copy(image.size() / sizeof(uint64_t) + 2, 0);
    std::memcpy(copy.data(), image.data(), image.size());
    CUmodule module = nullptr;
    CUresult rc = fn_.ModuleLoadData(&module, copy.data());
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuModuleLoadData", rc);
    modules_.insert(module);
    return ToHandle<ModuleHandle>(module);
  }

  CudaStatus ModuleUnload(ModuleHandle module) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUmodule m, ModuleOf(module, "cuModuleUnload"));
    CUresult rc = fn_.ModuleUnload(m);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuModuleUnload", rc);
    modules_.erase(m);
    std::erase_if(functions_, [m](const auto& entry) { return entry.second.module == m; });
    return CudaStatus::Ok();
  }

  CudaResult<FunctionHandle> ModuleGetFunction(ModuleHandle module,
                                               const std::string& name) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUmodule m, ModuleOf(module, "cuModuleGetFunction"));
    CUfunction function = nullptr;
    CUresult rc = fn_.ModuleGetFunction(&function, m, name.c_str());
    if (rc == CUDA_ERROR_NOT_FOUND) {
      // The runtime reports a kernel it cannot find as an invalid device function.
      return DriverError(*driver_, "cuModuleGetFunction(" + name + ")", rc,
                         ErrorCode::kInvalidDeviceFunction);
    }
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuModuleGetFunction(" + name + ")", rc);
    FunctionInfo& info = functions_[function];
    info.module = m;
    info.name = name;
    info.param_bytes = DriverParamBytes(function);
    return ToHandle<FunctionHandle>(function);
  }

  CudaResult<GlobalSymbol> ModuleGetGlobal(ModuleHandle module, const std::string& name,
                                           uint64_t /*registered_bytes*/) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUmodule m, ModuleOf(module, "cuModuleGetGlobal"));
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    CUresult rc = fn_.ModuleGetGlobal(&ptr, &bytes, m, name.c_str());
    if (rc == CUDA_ERROR_NOT_FOUND) {
      // The runtime reports an unknown __device__/__constant__ variable as an invalid symbol.
      return DriverError(*driver_, "cuModuleGetGlobal(" + name + ")", rc,
                         ErrorCode::kInvalidSymbol);
    }
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuModuleGetGlobal(" + name + ")", rc);
    // The driver knows the real size; the server compares it with the registered one.
    return GlobalSymbol{ptr, bytes};
  }

  CudaResult<int32_t> FuncGetAttribute(FunctionHandle function, FunctionAttribute attr) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUfunction f, FunctionOf(function, "cuFuncGetAttribute"));
    int value = 0;
    CUresult rc = fn_.FuncGetAttribute(&value, static_cast<CUfunction_attribute>(attr), f);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuFuncGetAttribute", rc);
    return int32_t{value};
  }

  CudaStatus FuncSetAttribute(FunctionHandle function, FunctionAttribute attr,
                              int32_t value) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUfunction f, FunctionOf(function, "cuFuncSetAttribute"));
    CUresult rc = fn_.FuncSetAttribute(f, static_cast<CUfunction_attribute>(attr), value);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuFuncSetAttribute", rc);
    return CudaStatus::Ok();
  }

  CudaResult<int32_t> OccupancyMaxActiveBlocksPerSm(FunctionHandle function, int32_t block_size,
                                                    uint64_t dynamic_shared_bytes,
                                                    uint32_t flags) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(CUfunction f,
                               FunctionOf(function, "cuOccupancyMaxActiveBlocksPerMultiprocessor"));
    int blocks = 0;
    CUresult rc = fn_.OccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
        &blocks, f, block_size, dynamic_shared_bytes, flags);
    if (rc != CUDA_SUCCESS) {
      return DriverError(*driver_, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", rc);
    }
    return int32_t{blocks};
  }

  CudaStatus LaunchKernel(FunctionHandle function, const LaunchConfig& config,
                          std::span<const std::byte> params) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    auto it = functions_.find(FromHandle<CUfunction>(function));
    if (it == functions_.end()) return UnknownHandle("cuLaunchKernel", "function");
    FunctionInfo& info = it->second;
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(config.stream));
    FLYT_CUDA_RETURN_IF_ERROR(CheckParamLayout(info, params.size()));

    // The parameter buffer form of cuLaunchKernel: the driver copies `size` bytes from `buffer`.
    // (It is laid out already; the server's layout came from the cubin's .nv.info.)
    const void* buffer = params.data();
    if (reinterpret_cast<uintptr_t>(buffer) % alignof(uint64_t) != 0) {
      scratch_.assign(params.size() / sizeof(uint64_t) + 1, 0);
      std::memcpy(scratch_.data(), params.data(), params.size());
      buffer = scratch_.data();
    }
    size_t size = params.size();
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(buffer),
                     CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    CUresult rc = fn_.LaunchKernel(
        it->first, config.grid.x, config.grid.y, config.grid.z, config.block.x, config.block.y,
        config.block.z, config.dynamic_shared_bytes, s, nullptr, params.empty() ? nullptr : extra);
    if (rc == CUDA_ERROR_INVALID_VALUE) {
      // The parameter buffer was checked above, so what the driver refuses is the shape of the
      // launch: the runtime reports that as an invalid configuration.
      return DriverError(*driver_, "cuLaunchKernel(" + info.name + ")", rc,
                         ErrorCode::kInvalidConfiguration);
    }
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuLaunchKernel(" + info.name + ")", rc);
    return CudaStatus::Ok();
  }

  // [issue 17: graphs] overrides: one-line forwards to the family's helper in driver_<family>.cc
  CudaResult<uint64_t> GraphInstantiate(std::span<const GraphNodeSpec> nodes) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    FLYT_CUDA_ASSIGN_OR_RETURN(std::vector<DriverGraphNode> driver_nodes, DriverNodes(nodes));
    FLYT_CUDA_ASSIGN_OR_RETURN(DriverGraph graph, InstantiateDriverGraph(*driver_, driver_nodes));
    const uint64_t id = next_graph_++;
    graphs_[id] = {graph, std::vector<GraphNodeSpec>(nodes.begin(), nodes.end())};
    return id;
  }
  // Re-captures and re-instantiates (the nodes' parameters live in the new capture).
  CudaStatus GraphUpdate(uint64_t exec, std::span<const GraphNodeSpec> nodes) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    auto it = graphs_.find(exec);
    if (it == graphs_.end()) return UnknownHandle("cuGraphExecUpdate", "graph exec");
    std::vector<GraphNodeSpec> kept(nodes.begin(), nodes.end());
    FLYT_CUDA_ASSIGN_OR_RETURN(std::vector<DriverGraphNode> driver_nodes, DriverNodes(kept));
    FLYT_CUDA_ASSIGN_OR_RETURN(DriverGraph graph, InstantiateDriverGraph(*driver_, driver_nodes));
    DestroyDriverGraph(*driver_, it->second.graph);
    it->second = {graph, std::move(kept)};
    return CudaStatus::Ok();
  }
  CudaStatus GraphLaunch(uint64_t exec, StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    auto it = graphs_.find(exec);
    if (it == graphs_.end()) return UnknownHandle("cuGraphLaunch", "graph exec");
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    return LaunchDriverGraph(*driver_, it->second.graph, s);
  }
  CudaStatus GraphDestroy(uint64_t exec) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    auto it = graphs_.find(exec);
    if (it == graphs_.end()) return UnknownHandle("cuGraphExecDestroy", "graph exec");
    DestroyDriverGraph(*driver_, it->second.graph);
    graphs_.erase(it);
    return CudaStatus::Ok();
  }
  // The nodes with their handles as driver objects; `nodes` must outlive the result (parameter
  // buffers are borrowed).
  CudaResult<std::vector<DriverGraphNode>> DriverNodes(std::span<const GraphNodeSpec> nodes) {
    std::vector<DriverGraphNode> out;
    out.reserve(nodes.size());
    for (const GraphNodeSpec& n : nodes) {
      DriverGraphNode d;
      d.kind = n.kind;
      if (n.kind == GraphNodeKind::kKernel) {
        auto it = functions_.find(FromHandle<CUfunction>(n.function));
        if (it == functions_.end()) return UnknownHandle("cuLaunchKernel (graph)", "function");
        FLYT_CUDA_RETURN_IF_ERROR(CheckParamLayout(it->second, n.params.size()));
        d.function = it->first;
      }
      if (n.kind == GraphNodeKind::kEventRecord || n.kind == GraphNodeKind::kEventWait) {
        FLYT_CUDA_ASSIGN_OR_RETURN(d.event, EventOf(n.event, "graph event node"));
      }
      d.grid = n.grid;
      d.block = n.block;
      d.shared_bytes = n.shared_bytes;
      d.params = n.params;
      d.dst = n.dst;
      d.src = n.src;
      d.bytes = n.bytes;
      d.value = n.value;
      d.element_size = n.element_size;
      d.width = n.width;
      d.height = n.height;
      d.pitch = n.pitch;
      out.push_back(d);
    }
    return out;
  }
  // (end graphs)

  // [issue 17: pools] overrides: one-line forwards to the family's helper in driver_<family>.cc
  // cuLaunchKernelEx with the cooperative, cluster and priority attributes (NOT YET RUN ON A GPU).
  CudaStatus LaunchKernelEx(FunctionHandle function, const LaunchConfig& config,
                            const LaunchAttributes& attributes,
                            std::span<const std::byte> params) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    if (fn_.LaunchKernelEx == nullptr) {
      return CudaStatus(ErrorCode::kNotSupported, "this driver has no cuLaunchKernelEx");
    }
    auto it = functions_.find(FromHandle<CUfunction>(function));
    if (it == functions_.end()) return UnknownHandle("cuLaunchKernelEx", "function");
    FunctionInfo& info = it->second;
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(config.stream));
    FLYT_CUDA_RETURN_IF_ERROR(CheckParamLayout(info, params.size()));
    const void* buffer = params.data();
    if (reinterpret_cast<uintptr_t>(buffer) % alignof(uint64_t) != 0) {
      scratch_.assign(params.size() / sizeof(uint64_t) + 1, 0);
      std::memcpy(scratch_.data(), params.data(), params.size());
      buffer = scratch_.data();
    }
    size_t size = params.size();
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(buffer),
                     CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    namespace cd = cuda_driver;
    cd::CUlaunchAttribute attrs[3] = {};
    unsigned int n = 0;
    if (attributes.cooperative) {
      attrs[n].id = cd::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n++].value.cooperative = 1;
    }
    if (!(attributes.cluster == Dim3{})) {
      attrs[n].id = cd::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n++].value.clusterDim = {attributes.cluster.x, attributes.cluster.y,
                                     attributes.cluster.z};
    }
    if (attributes.priority != 0) {
      attrs[n].id = cd::CU_LAUNCH_ATTRIBUTE_PRIORITY;
      attrs[n++].value.priority = attributes.priority;
    }
    cd::CUlaunchConfig launch{config.grid.x,  config.grid.y,  config.grid.z,
                          config.block.x, config.block.y, config.block.z,
                          config.dynamic_shared_bytes, s, attrs, n};
    CUresult rc = fn_.LaunchKernelEx(&launch, it->first, nullptr,
                                     params.empty() ? nullptr : extra);
    if (rc != CUDA_SUCCESS) {
      return DriverError(*driver_, "cuLaunchKernelEx(" + info.name + ")", rc);
    }
    return CudaStatus::Ok();
  }
  // (end pools)

  // [issue 17: arrays] overrides: one-line forwards to the family's helper in driver_<family>.cc
  // (The helpers live here: DriverSession is local to this file. Arrays, mipmapped arrays and
  // texture/surface objects are the driver's own handles; the server checked them already.)
  CudaResult<uint64_t> ArrayCreate(const ArraySpec& spec) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    if (fn_.Array3DCreate == nullptr) return ArraysMissing("cuArray3DCreate");
    FLYT_CUDA_ASSIGN_OR_RETURN(cuda_driver::CUDA_ARRAY3D_DESCRIPTOR d, ArrayDescriptor(spec));
    cuda_driver::CUarray array = nullptr;
    CUresult rc = fn_.Array3DCreate(&array, &d);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuArray3DCreate", rc);
    arr_arrays_.insert(array);
    return reinterpret_cast<uint64_t>(array);
  }
  CudaStatus ArrayDestroy(uint64_t handle) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    auto array = reinterpret_cast<cuda_driver::CUarray>(handle);
    if (arr_arrays_.erase(array) == 0) return UnknownHandle("cuArrayDestroy", "array");
    CUresult rc = fn_.ArrayDestroy(array);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuArrayDestroy", rc);
    return CudaStatus::Ok();
  }
  CudaResult<uint64_t> MipmappedArrayCreate(const ArraySpec& spec, uint32_t levels) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    if (fn_.MipmappedArrayCreate == nullptr) return ArraysMissing("cuMipmappedArrayCreate");
    FLYT_CUDA_ASSIGN_OR_RETURN(cuda_driver::CUDA_ARRAY3D_DESCRIPTOR d, ArrayDescriptor(spec));
    cuda_driver::CUmipmappedArray mipmap = nullptr;
    CUresult rc = fn_.MipmappedArrayCreate(&mipmap, &d, levels);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMipmappedArrayCreate", rc);
    arr_mipmaps_.insert(mipmap);
    return reinterpret_cast<uint64_t>(mipmap);
  }
  CudaResult<uint64_t> MipmappedArrayLevel(uint64_t handle, uint32_t level) override {
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
  CudaStatus MipmappedArrayDestroy(uint64_t handle) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    auto mipmap = reinterpret_cast<cuda_driver::CUmipmappedArray>(handle);
    if (arr_mipmaps_.erase(mipmap) == 0) {
      return UnknownHandle("cuMipmappedArrayDestroy", "mipmapped array");
    }
    CUresult rc = fn_.MipmappedArrayDestroy(mipmap);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMipmappedArrayDestroy", rc);
    return CudaStatus::Ok();
  }
  CudaStatus Memcpy3D(const Copy3DSpec& copy, StreamHandle stream) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    if (fn_.Memcpy3DAsync == nullptr) return ArraysMissing("cuMemcpy3DAsync");
    FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
    cuda_driver::CUDA_MEMCPY3D c{};
    auto fill = [](const CopyEndSpec& e, size_t& x, size_t& y, size_t& z, int& type,
                   CUdeviceptr& device, cuda_driver::CUarray& array, size_t& pitch,
                   size_t& height) {
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
  CudaResult<uint64_t> TextureCreate(const ResourceSpec& resource, const TextureSpec& texture,
                                     const ViewSpec* view) override {
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
  CudaStatus TextureDestroy(uint64_t value) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    if (arr_textures_.erase(value) == 0) return UnknownHandle("cuTexObjectDestroy", "texture");
    CUresult rc = fn_.TexObjectDestroy(value);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuTexObjectDestroy", rc);
    return CudaStatus::Ok();
  }
  CudaResult<uint64_t> SurfaceCreate(const ResourceSpec& resource) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    if (fn_.SurfObjectCreate == nullptr) return ArraysMissing("cuSurfObjectCreate");
    FLYT_CUDA_ASSIGN_OR_RETURN(cuda_driver::CUDA_RESOURCE_DESC r, ResourceDescriptor(resource));
    cuda_driver::CUsurfObject object = 0;
    CUresult rc = fn_.SurfObjectCreate(&object, &r);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuSurfObjectCreate", rc);
    arr_surfaces_.insert(object);
    return object;
  }
  CudaStatus SurfaceDestroy(uint64_t value) override {
    FLYT_CUDA_RETURN_IF_ERROR(Enter());
    if (arr_surfaces_.erase(value) == 0) return UnknownHandle("cuSurfObjectDestroy", "surface");
    CUresult rc = fn_.SurfObjectDestroy(value);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuSurfObjectDestroy", rc);
    return CudaStatus::Ok();
  }
  static CudaStatus ArraysMissing(const char* call) {
    return CudaStatus(ErrorCode::kNotSupported,
                      std::string("this driver does not export ") + call);
  }
  // The driver's array format for a channel kind (cudaChannelFormatKind) and size.
  static CudaResult<cuda_driver::CUarray_format> ArrayFormat(uint32_t kind, int32_t bits) {
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
  static unsigned int Channels(const int32_t bits[4]) {
    unsigned int n = 0;
    while (n < 4 && bits[n] != 0) ++n;
    return n;
  }
  static CudaResult<cuda_driver::CUDA_ARRAY3D_DESCRIPTOR> ArrayDescriptor(const ArraySpec& spec) {
    cuda_driver::CUDA_ARRAY3D_DESCRIPTOR d{};
    FLYT_CUDA_ASSIGN_OR_RETURN(d.Format, ArrayFormat(spec.format, spec.bits[0]));
    d.NumChannels = Channels(spec.bits);
    d.Width = spec.width;
    d.Height = spec.height;
    d.Depth = spec.depth;
    d.Flags = spec.flags;
    return d;
  }
  static CudaResult<cuda_driver::CUDA_RESOURCE_DESC> ResourceDescriptor(const ResourceSpec& r) {
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
  // (end arrays)

  // [issue 17: managed] overrides: one-line forwards to the family's helper in driver_<family>.cc
  // Managed memory is plain device memory here (the client keeps the host mirror and moves it
  // to the address returned); a __managed__ variable is the module's global where it is.
  CudaResult<DevicePtr> MallocManaged(uint64_t bytes, uint64_t) override { return Malloc(bytes); }
  CudaResult<GlobalSymbol> ModuleGetManagedGlobal(ModuleHandle module, const std::string& name,
                                                  uint64_t registered_bytes, uint64_t) override {
    return ModuleGetGlobal(module, name, registered_bytes);
  }
  // (end managed)


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
  std::optional<size_t> DriverParamBytes(CUfunction function) const {
    if (fn_.FuncGetParamInfo == nullptr) return std::nullopt;
    size_t end = 0;
    // A kernel has at most a few thousand parameters (32 KiB of them); the driver answers
    // CUDA_ERROR_INVALID_VALUE past the last one.
    for (size_t index = 0; index < 32768; ++index) {
      size_t offset = 0, bytes = 0;
      CUresult rc = fn_.FuncGetParamInfo(function, index, &offset, &bytes);
      if (rc == CUDA_ERROR_INVALID_VALUE) return end;
      if (rc != CUDA_SUCCESS) return std::nullopt;
      end = std::max(end, offset + bytes);
    }
    return std::nullopt;
  }

  // Cross-checks the buffer the server built (from the cubin's .nv.info, parsed by flyt) against
  // the driver's own layout. A shorter buffer would make the driver read past it: refused. A
  // longer one (trailing padding) is launched, but logged, once per function, because it means
  // the two disagree.
  CudaStatus CheckParamLayout(FunctionInfo& info, size_t size) {
    if (!info.param_bytes || *info.param_bytes == size) return CudaStatus::Ok();
    if (!info.mismatch_logged) {
      spdlog::error(
          "driver backend [{}]: kernel {}: the launch's parameter buffer is {} bytes, the driver "
          "lays the parameters out in {} (cuFuncGetParamInfo): flyt's parameter layout and the "
          "driver's disagree",
          label_, info.name, size, *info.param_bytes);
      info.mismatch_logged = true;
    }
    if (size < *info.param_bytes) {
      return {ErrorCode::kInvalidValue,
              "cuLaunchKernel(" + info.name + "): parameter buffer of " + std::to_string(size) +
                  " bytes, the kernel's parameters need " + std::to_string(*info.param_bytes)};
    }
    return CudaStatus::Ok();
  }

  // Destroys what the client left behind (the context is current). Errors are ignored: a context
  // with a sticky error refuses most calls, and destroying the context frees everything anyway.
  void ReleaseAll() {
    // [issue 17: graphs] release first
    for (auto& [id, g] : graphs_) DestroyDriverGraph(*driver_, g.graph);
    graphs_.clear();
    // (end graphs)

    // [issue 17: pools] release first
    // (end pools)

    // [issue 17: arrays] release first
    for (cuda_driver::CUtexObject t : arr_textures_) fn_.TexObjectDestroy(t);
    for (cuda_driver::CUsurfObject o : arr_surfaces_) fn_.SurfObjectDestroy(o);
    for (cuda_driver::CUarray a : arr_arrays_) fn_.ArrayDestroy(a);
    for (cuda_driver::CUmipmappedArray m : arr_mipmaps_) fn_.MipmappedArrayDestroy(m);
    arr_textures_.clear();
    arr_surfaces_.clear();
    arr_arrays_.clear();
    arr_levels_.clear();
    arr_mipmaps_.clear();
    // (end arrays)

    // [issue 17: managed] release first
    // (end managed)

    const size_t left = events_.size() + streams_.size() + modules_.size() + allocations_.size();
    if (left > 0) {
      spdlog::debug("driver backend [{}]: releasing {} object(s) the client left", label_, left);
    }
    for (CUevent e : events_) fn_.EventDestroy(e);
    for (CUstream s : streams_) fn_.StreamDestroy(s);
    functions_.clear();
    for (CUmodule m : modules_) fn_.ModuleUnload(m);
    for (CUdeviceptr p : allocations_) fn_.MemFree(p);
    events_.clear();
    streams_.clear();
    modules_.clear();
    allocations_.clear();
  }

  const DriverPtr driver_;
  const FunctionTable& fn_;  // driver_'s table
  const CUdevice device_;
  const std::optional<int> sm_count_;
  const std::string label_;
  std::shared_ptr<Context> ctx_;  // null only after a failed Reset
  std::unordered_set<CUdeviceptr> allocations_;
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

};

}  // namespace

std::unique_ptr<Session> OpenDriverSession(DriverPtr driver, CUdevice device,
                                           std::optional<int> sm_count, std::string label,
                                           std::shared_ptr<Context> ctx) {
  return std::make_unique<DriverSession>(std::move(driver), device, sm_count, std::move(label),
                                         std::move(ctx));
}

}  // namespace flyt::remote::driver_impl
