// The driver backend's sessions, the core calls: memory, streams and events, modules and launches,
// and cleanup (DriverSession, declared in driver_session.h; the families' calls are in
// driver_<family>.cc). The backend itself (loading, the device, contexts) is driver_backend.cc.
#include "remote_driver/driver_session.h"

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
#include "remote_driver/driver_internal.h"

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

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sessions.

DriverSession::~DriverSession() {
  if (ctx_ == nullptr) return;
  if (ctx_->MakeCurrent().ok()) {
    // Only this session's own work: the context is the session's.
    fn_.CtxSynchronize();
    ReleaseAll();
  }
}

CudaResult<DevicePtr> DriverSession::Malloc(uint64_t bytes) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  CUdeviceptr ptr = 0;
  CUresult rc = fn_.MemAlloc(&ptr, bytes);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemAlloc", rc);
  allocations_.insert(ptr);
  return DevicePtr{ptr};
}

CudaStatus DriverSession::Free(DevicePtr ptr) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  bool placed = false;
  CudaStatus released = FreePlaced(ptr, placed);  // MallocAt's
  if (placed) return released;
  auto it = allocations_.find(ptr);
  if (it == allocations_.end()) {
    return {ErrorCode::kInvalidValue, "cuMemFree: not an allocation of this session"};
  }
  CUresult rc = fn_.MemFree(ptr);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemFree", rc);
  allocations_.erase(it);
  return CudaStatus::Ok();
}

CudaResult<MemoryInfo> DriverSession::MemGetInfo() {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  size_t free_bytes = 0, total_bytes = 0;
  CUresult rc = fn_.MemGetInfo(&free_bytes, &total_bytes);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemGetInfo", rc);
  return MemoryInfo{free_bytes, total_bytes};
}

// The async form for every stream: from pageable memory it returns once the source has been
// staged, which is what the contract asks (`src` is only valid during the call).
CudaStatus DriverSession::MemcpyHtoD(DevicePtr dst, std::span<const std::byte> src,
                                     StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  CUresult rc = fn_.MemcpyHtoDAsync(dst, src.data(), src.size(), s);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemcpyHtoDAsync", rc);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::MemcpyDtoH(std::span<std::byte> dst, DevicePtr src, StreamHandle stream) {
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

CudaStatus DriverSession::MemcpyDtoHAsync(std::byte* dst, DevicePtr src, uint64_t bytes,
                                          StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  CUresult rc = fn_.MemcpyDtoHAsync(dst, src, bytes, s);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemcpyDtoHAsync", rc);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::MemcpyDtoD(DevicePtr dst, DevicePtr src, uint64_t bytes,
                                     StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  CUresult rc = fn_.MemcpyDtoDAsync(dst, src, bytes, s);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemcpyDtoDAsync", rc);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::Memset(DevicePtr dst, uint8_t value, uint64_t bytes,
                                 StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  CUresult rc = fn_.MemsetD8Async(dst, value, bytes, s);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemsetD8Async", rc);
  return CudaStatus::Ok();
}

// Page-locked when the driver can give it; ordinary heap memory otherwise (the copy into it is
// then synchronous, but still correct).
std::unique_ptr<HostBuffer> DriverSession::NewHostBuffer(size_t bytes) {
  if (bytes > 0 && Enter().ok()) {
    void* data = nullptr;
    CUresult rc = fn_.MemHostAlloc(&data, bytes, CU_MEMHOSTALLOC_PORTABLE);
    if (rc == CUDA_SUCCESS) return std::make_unique<PinnedBuffer>(ctx_, data, bytes);
    spdlog::warn("driver backend [{}]: {}; using pageable memory", label_,
                 driver_->ErrorMessage("cuMemHostAlloc", rc));
  }
  return Session::NewHostBuffer(bytes);
}

// Page-locks the range (a client's shared arena) for every context, once: copies from and into it
// are then DMA straight from the shared pages, and cuMemcpyHtoDAsync from it stays asynchronous.
CudaStatus DriverSession::RegisterHostMemory(std::byte* ptr, uint64_t bytes) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  if (fn_.MemHostRegister == nullptr) {
    return CudaStatus(CudaError::kNotSupported, "the driver has no cuMemHostRegister");
  }
  CUresult rc = fn_.MemHostRegister(ptr, bytes, CU_MEMHOSTREGISTER_PORTABLE);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuMemHostRegister", rc);
  return CudaStatus::Ok();
}

void DriverSession::UnregisterHostMemory(std::byte* ptr) {
  if (fn_.MemHostUnregister == nullptr || !Enter().ok()) return;
  CUresult rc = fn_.MemHostUnregister(ptr);
  if (rc != CUDA_SUCCESS) {
    spdlog::warn("driver backend [{}]: {}", label_, driver_->ErrorMessage("cuMemHostUnregister", rc));
  }
}

CudaResult<StreamHandle> DriverSession::StreamCreate(uint32_t flags, int32_t priority) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  CUstream stream = nullptr;
  CUresult rc = fn_.StreamCreateWithPriority(&stream, flags, priority);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamCreateWithPriority", rc);
  streams_.insert(stream);
  return ToHandle<StreamHandle>(stream);
}

CudaStatus DriverSession::StreamDestroy(StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  auto it = streams_.find(FromHandle<CUstream>(stream));
  if (it == streams_.end()) return UnknownHandle("cuStreamDestroy", "stream");
  CUresult rc = fn_.StreamDestroy(*it);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamDestroy", rc);
  streams_.erase(it);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::StreamSynchronize(StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  CUresult rc = fn_.StreamSynchronize(s);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamSynchronize", rc);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::StreamQuery(StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  CUresult rc = fn_.StreamQuery(s);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamQuery", rc);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::StreamWaitEvent(StreamHandle stream, EventHandle event, uint32_t flags) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuStreamWaitEvent"));
  CUresult rc = fn_.StreamWaitEvent(s, e, flags);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuStreamWaitEvent", rc);
  return CudaStatus::Ok();
}

CudaResult<EventHandle> DriverSession::EventCreate(uint32_t flags) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  CUevent event = nullptr;
  CUresult rc = fn_.EventCreate(&event, flags);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventCreate", rc);
  events_.insert(event);
  return ToHandle<EventHandle>(event);
}

CudaStatus DriverSession::EventDestroy(EventHandle event) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuEventDestroy"));
  CUresult rc = fn_.EventDestroy(e);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventDestroy", rc);
  events_.erase(e);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::EventRecord(EventHandle event, StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuEventRecord"));
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  CUresult rc = fn_.EventRecord(e, s);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventRecord", rc);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::EventSynchronize(EventHandle event) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuEventSynchronize"));
  CUresult rc = fn_.EventSynchronize(e);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventSynchronize", rc);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::EventQuery(EventHandle event) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUevent e, EventOf(event, "cuEventQuery"));
  CUresult rc = fn_.EventQuery(e);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventQuery", rc);
  return CudaStatus::Ok();
}

CudaResult<float> DriverSession::EventElapsedMs(EventHandle start, EventHandle end) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUevent a, EventOf(start, "cuEventElapsedTime"));
  FLYT_CUDA_ASSIGN_OR_RETURN(CUevent b, EventOf(end, "cuEventElapsedTime"));
  float ms = 0;
  CUresult rc = fn_.EventElapsedTime(&ms, a, b);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuEventElapsedTime", rc);
  return ms;
}

CudaStatus DriverSession::DeviceSynchronize() {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  CUresult rc = fn_.CtxSynchronize();
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuCtxSynchronize", rc);
  return CudaStatus::Ok();
}

CudaStatus DriverSession::Reset() {
  if (ctx_ != nullptr && ctx_->MakeCurrent().ok()) {
    fn_.CtxSynchronize();  // a sticky error is expected here; the context is replaced anyway
    ReleaseAll();
  }
  ctx_.reset();
  FLYT_CUDA_ASSIGN_OR_RETURN(ctx_, Context::Create(driver_, device_, sm_count_));
  return CudaStatus::Ok();
}

CudaStatus DriverSession::ApplySmShare(int sm_count, int* granted) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  // The clean point: what the client posted has run.
  CUresult rc = fn_.CtxSynchronize();
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuCtxSynchronize", rc);
  const bool holds = !allocations_.empty() || !ipc_imports_.empty() || !streams_.empty() ||
                     !events_.empty() || !modules_.empty() || !graphs_.empty() ||
                     !arr_arrays_.empty() || !arr_mipmaps_.empty() || !arr_textures_.empty() ||
                     !arr_surfaces_.empty() || (placed_ && !placed_->empty());
  if (holds) {
    return {ErrorCode::kNotSupported,
            "its memory, modules, streams and events belong to its CUDA context, whose SM limit "
            "is fixed when it is made; the new share applies to clients that connect after the "
            "resize"};
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(std::shared_ptr<Context> fresh,
                             Context::Create(driver_, device_, sm_count));
  const std::optional<int> got = fresh->GrantedSmCount();
  ctx_ = std::move(fresh);  // the old context goes with the last pinned buffer made in it
  sm_count_ = sm_count;     // a later cudaDeviceReset keeps the share
  *granted = got.value_or(sm_count);
  return CudaStatus::Ok();
}

CudaResult<ModuleHandle> DriverSession::ModuleLoad(std::span<const std::byte> image) {
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

CudaStatus DriverSession::ModuleUnload(ModuleHandle module) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUmodule m, ModuleOf(module, "cuModuleUnload"));
  CUresult rc = fn_.ModuleUnload(m);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuModuleUnload", rc);
  modules_.erase(m);
  std::erase_if(functions_, [m](const auto& entry) { return entry.second.module == m; });
  return CudaStatus::Ok();
}

CudaResult<FunctionHandle> DriverSession::ModuleGetFunction(ModuleHandle module,
                                                            const std::string& name) {
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

CudaResult<GlobalSymbol> DriverSession::ModuleGetGlobal(ModuleHandle module,
                                                        const std::string& name,
                                                        uint64_t /*registered_bytes*/) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUmodule m, ModuleOf(module, "cuModuleGetGlobal"));
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  CUresult rc = fn_.ModuleGetGlobal(&ptr, &bytes, m, name.c_str());
  if (rc == CUDA_ERROR_NOT_FOUND) {
    // The runtime reports an unknown __device__/__constant__ variable as an invalid symbol.
    return DriverError(*driver_, "cuModuleGetGlobal(" + name + ")", rc, ErrorCode::kInvalidSymbol);
  }
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuModuleGetGlobal(" + name + ")", rc);
  // The driver knows the real size; the server compares it with the registered one.
  return GlobalSymbol{ptr, bytes};
}

CudaResult<int32_t> DriverSession::FuncGetAttribute(FunctionHandle function,
                                                    FunctionAttribute attr) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUfunction f, FunctionOf(function, "cuFuncGetAttribute"));
  int value = 0;
  CUresult rc = fn_.FuncGetAttribute(&value, static_cast<CUfunction_attribute>(attr), f);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuFuncGetAttribute", rc);
  return int32_t{value};
}

CudaStatus DriverSession::FuncSetAttribute(FunctionHandle function, FunctionAttribute attr,
                                           int32_t value) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUfunction f, FunctionOf(function, "cuFuncSetAttribute"));
  CUresult rc = fn_.FuncSetAttribute(f, static_cast<CUfunction_attribute>(attr), value);
  if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuFuncSetAttribute", rc);
  return CudaStatus::Ok();
}

CudaResult<int32_t> DriverSession::OccupancyMaxActiveBlocksPerSm(FunctionHandle function,
                                                                 int32_t block_size,
                                                                 uint64_t dynamic_shared_bytes,
                                                                 uint32_t flags) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(CUfunction f,
                             FunctionOf(function, "cuOccupancyMaxActiveBlocksPerMultiprocessor"));
  int blocks = 0;
  CUresult rc = fn_.OccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, block_size,
                                                                       dynamic_shared_bytes, flags);
  if (rc != CUDA_SUCCESS) {
    return DriverError(*driver_, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", rc);
  }
  return int32_t{blocks};
}

CudaStatus DriverSession::LaunchKernel(FunctionHandle function, const LaunchConfig& config,
                                       std::span<const std::byte> params) {
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

// The size of the kernel's parameter buffer as the driver lays it out: the end of its last
// parameter. Absent when the driver cannot say (no cuFuncGetParamInfo).
std::optional<size_t> DriverSession::DriverParamBytes(CUfunction function) const {
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
CudaStatus DriverSession::CheckParamLayout(FunctionInfo& info, size_t size) {
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
void DriverSession::ReleaseAll() {
  // [issue 17: graphs] release first
  ReleaseGraphs();
  // (end graphs)

  // [issue 17: pools] release first
  // (end pools)

  // [issue 17: arrays] release first
  ReleaseArrays();
  // (end arrays)

  // [issue 17: managed] release first
  // (end managed)

  const size_t left = events_.size() + streams_.size() + modules_.size() + allocations_.size() +
                      ipc_imports_.size() + (placed_ ? placed_->allocations() : 0);
  if (left > 0) {
    spdlog::debug("driver backend [{}]: releasing {} object(s) the client left", label_, left);
  }
  for (CUevent e : events_) fn_.EventDestroy(e);
  for (CUstream s : streams_) fn_.StreamDestroy(s);
  functions_.clear();
  for (CUmodule m : modules_) fn_.ModuleUnload(m);
  for (auto [p, references] : ipc_imports_) {
    for (int i = 0; i < references; ++i) fn_.IpcCloseMemHandle(p);
  }
  for (CUdeviceptr p : allocations_) fn_.MemFree(p);
  ReleaseAllPlaced();
  ipc_imports_.clear();
  events_.clear();
  streams_.clear();
  modules_.clear();
  allocations_.clear();
}

std::unique_ptr<Session> OpenDriverSession(DriverPtr driver, CUdevice device,
                                           std::optional<int> sm_count, std::string label,
                                           std::shared_ptr<Context> ctx) {
  return std::make_unique<DriverSession>(std::move(driver), device, sm_count, std::move(label),
                                         std::move(ctx));
}

}  // namespace flyt::remote::driver_impl
