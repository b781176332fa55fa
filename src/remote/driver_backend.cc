// The driver backend: every Backend/Session call on a real GPU through libcuda (loaded by
// cuda_driver::Library). Over ~900 lines on purpose: DriverSession is one class that implements the
// whole Session interface call by call, in the order of sim_backend.cc, so a reader compares the
// two backends side by side; the loader and declarations already live in src/cuda_driver.
#include "remote/driver_backend.h"

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

namespace flyt::remote {
namespace {

using ErrorCode = CudaError;

// The driver API (declared in cuda_driver/, never from cuda.h).
using cuda_driver::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
using cuda_driver::CU_EXEC_AFFINITY_TYPE_SM_COUNT;
using cuda_driver::CU_LAUNCH_PARAM_BUFFER_POINTER;
using cuda_driver::CU_LAUNCH_PARAM_BUFFER_SIZE;
using cuda_driver::CU_LAUNCH_PARAM_END;
using cuda_driver::CU_MEMHOSTALLOC_PORTABLE;
using cuda_driver::CUcontext;
using cuda_driver::CUctxCreateParams;
using cuda_driver::CUDA_ERROR_CONTEXT_ALREADY_CURRENT;
using cuda_driver::CUDA_ERROR_INVALID_DEVICE;
using cuda_driver::CUDA_ERROR_INVALID_VALUE;
using cuda_driver::CUDA_ERROR_KEY_ROTATION;
using cuda_driver::CUDA_ERROR_NO_DEVICE;
using cuda_driver::CUDA_ERROR_NOT_FOUND;
using cuda_driver::CUDA_ERROR_NOT_SUPPORTED;
using cuda_driver::CUDA_ERROR_STUB_LIBRARY;
using cuda_driver::CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
using cuda_driver::CUDA_SUCCESS;
using cuda_driver::CUdevice;
using cuda_driver::CUdevice_attribute;
using cuda_driver::CUdeviceptr;
using cuda_driver::CUevent;
using cuda_driver::CUexecAffinityParam;
using cuda_driver::CUfunction;
using cuda_driver::CUfunction_attribute;
using cuda_driver::CUmodule;
using cuda_driver::CUresult;
using cuda_driver::CUstream;
using cuda_driver::CUuuid;
using cuda_driver::FunctionTable;

// libcuda loaded and bound (cuda_driver::Library). Immutable; shared by the backend, its
// sessions, their contexts and pinned buffers, so the library outlives every handle from it.
using Driver = cuda_driver::Library;
using DriverPtr = std::shared_ptr<const Driver>;

constexpr std::string_view kNoDriverHint =
    "the driver backend needs the NVIDIA driver's libcuda.so.1 and a GPU (on a machine without "
    "one, run flyt-gpu-server --backend=sim)";

// The CudaStatus for a failed driver call: the runtime's code for `code` (CudaErrorFromDriver)
// and the driver's own name and text. The one place a CUresult becomes an error.
CudaStatus DriverError(const Driver& driver, std::string_view call, CUresult code) {
  return {CudaErrorFromDriver(code), driver.ErrorMessage(call, code)};
}
// The same, reported as `as` (call sites where the runtime reports another code).
CudaStatus DriverError(const Driver& driver, std::string_view call, CUresult code, ErrorCode as) {
  return {as, driver.ErrorMessage(call, code)};
}

// For start-up failures, which are flyt Status (the server refuses to start), not CUDA codes.
Status DriverStatus(const Driver& driver, std::string_view call, CUresult code) {
  StatusCode status_code = StatusCode::kInternal;
  switch (code) {
    case CUDA_ERROR_INVALID_DEVICE:
      status_code = StatusCode::kInvalidArgument;
      break;
    case CUDA_ERROR_NOT_SUPPORTED:
      status_code = StatusCode::kNotSupported;
      break;
    case CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY:
      status_code = StatusCode::kFailedPrecondition;
      break;
    default:
      switch (CudaErrorFromDriver(code)) {
        case ErrorCode::kMemoryAllocation:
          status_code = StatusCode::kResourceExhausted;
          break;
        case ErrorCode::kNoDevice:
        case ErrorCode::kStubLibrary:
        case ErrorCode::kInsufficientDriver:
        case ErrorCode::kSystemDriverMismatch:
        case ErrorCode::kSystemNotReady:
        case ErrorCode::kDevicesUnavailable:
        case ErrorCode::kInitializationError:
        case ErrorCode::kCompatNotSupportedOnDevice:
        case ErrorCode::kMpsConnectionFailed:
        case ErrorCode::kMpsServerNotReady:
          status_code = StatusCode::kUnavailable;
          break;
        default:
          break;
      }
  }
  return {status_code, driver.ErrorMessage(call, code)};
}

std::string MpsHint(int sm_count) {
  return "--sm-count " + std::to_string(sm_count) +
         " limits each client's context to that many SMs (CUDA execution affinity), which needs "
         "the MPS control daemon running for this GPU with per-context SM partitioning "
         "(CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING=1 nvidia-cuda-mps-control "
         "-d) on a Volta or newer GPU";
}

// ---------------------------------------------------------------------------------------------
// Contexts.

// One CUDA context: cuCtxCreate on creation, cuCtxDestroy on destruction. Shared by a Session and
// the pinned buffers allocated in it (they must be freed while it lives). cuCtxDestroy may run on
// any thread; the driver makes the context non-current everywhere.
class Context {
 public:
  // A new context on `device`, limited to `sm_count` SMs when set. The calling thread's current
  // context is left as it was (cuCtxCreate pushes the new one; it is popped again).
  static CudaResult<std::shared_ptr<Context>> Create(DriverPtr driver, CUdevice device,
                                                     std::optional<int> sm_count) {
    const FunctionTable& fn = driver->api();
    CUcontext ctx = nullptr;
    CUresult rc = CUDA_SUCCESS;
    const unsigned int flags = 0;  // CU_CTX_SCHED_AUTO, as the runtime's default
    if (sm_count) {
      CUexecAffinityParam affinity{};
      affinity.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
      affinity.param.smCount.val = static_cast<unsigned int>(*sm_count);
      if (fn.CtxCreateV4 != nullptr) {
        CUctxCreateParams params{&affinity, 1, nullptr};
        rc = fn.CtxCreateV4(&ctx, &params, flags, device);
      } else if (fn.CtxCreateV3 != nullptr) {
        rc = fn.CtxCreateV3(&ctx, &affinity, 1, flags, device);
      } else {
        return CudaStatus(ErrorCode::kNotSupported,
                          "this driver cannot create contexts with execution affinity "
                          "(cuCtxCreate_v3/v4 missing; CUDA 11.4+ needed); " +
                              MpsHint(*sm_count));
      }
      if (rc == CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY || rc == CUDA_ERROR_NOT_SUPPORTED) {
        return CudaStatus(CudaErrorFromDriver(rc),
                          driver->ErrorMessage("cuCtxCreate", rc) + "; " + MpsHint(*sm_count));
      }
    } else if (fn.CtxCreate != nullptr) {
      rc = fn.CtxCreate(&ctx, flags, device);
    } else {
      CUctxCreateParams params{nullptr, 0, nullptr};
      rc = fn.CtxCreateV4(&ctx, &params, flags, device);
    }
    if (rc != CUDA_SUCCESS) return DriverError(*driver, "cuCtxCreate", rc);
    CUcontext popped = nullptr;
    fn.CtxPopCurrent(&popped);
    return std::shared_ptr<Context>(new Context(std::move(driver), ctx));
  }

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() { driver_->api().CtxDestroy(ctx_); }

  CudaStatus MakeCurrent() const {
    CUresult rc = driver_->api().CtxSetCurrent(ctx_);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuCtxSetCurrent", rc);
    return CudaStatus::Ok();
  }

  // The SM count the driver granted (it rounds up to what the hardware partitions), when the
  // driver can say.
  std::optional<int> GrantedSmCount() const {
    if (driver_->api().CtxGetExecAffinity == nullptr || !MakeCurrent().ok()) return std::nullopt;
    CUexecAffinityParam affinity{};
    if (driver_->api().CtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT) !=
        CUDA_SUCCESS) {
      return std::nullopt;
    }
    return static_cast<int>(affinity.param.smCount.val);
  }

  const Driver& driver() const { return *driver_; }

 private:
  Context(DriverPtr driver, CUcontext ctx) : driver_(std::move(driver)), ctx_(ctx) {}
  DriverPtr driver_;
  CUcontext ctx_;
};

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
};

// ---------------------------------------------------------------------------------------------
// The backend.

// Immutable after construction; the driver's device queries are thread-safe, so every method may
// be called from any thread.
class DriverBackend final : public Backend {
 public:
  DriverBackend(DriverPtr driver, CUdevice device, int ordinal, std::optional<int> sm_count,
                std::optional<int> granted_sm_count, int device_sm_count, DeviceIdentity identity)
      : driver_(std::move(driver)),
        device_(device),
        ordinal_(ordinal),
        sm_count_(sm_count),
        granted_sm_count_(granted_sm_count),
        device_sm_count_(device_sm_count),
        identity_(std::move(identity)) {}

  std::string Name() const override { return "driver"; }

  std::string Describe() const override {
    char line[512];
    const int v = identity_.driver_version;
    std::snprintf(line, sizeof line, "%s (device %d), %d SMs, %.1f GiB, CUDA driver %d.%d (%s)",
                  identity_.name.c_str(), ordinal_, device_sm_count_,
                  static_cast<double>(identity_.total_memory_bytes) / (1 << 30), v / 1000,
                  (v % 1000) / 10, driver_->path().c_str());
    std::string text = line;
    if (sm_count_) {
      text += "; each client limited to " + std::to_string(granted_sm_count_.value_or(*sm_count_)) +
              " SMs (asked " + std::to_string(*sm_count_) + ", MPS execution affinity)";
    }
    return text;
  }

  DeviceIdentity Identity() const override { return identity_; }

  CudaResult<int32_t> DeviceAttribute(uint32_t attr) const override {
    int value = 0;
    CUresult rc =
        driver_->api().DeviceGetAttribute(&value, static_cast<CUdevice_attribute>(attr), device_);
    if (rc != CUDA_SUCCESS) return DriverError(*driver_, "cuDeviceGetAttribute", rc);
    return int32_t{value};
  }

  CudaResult<std::unique_ptr<Session>> OpenSession(const std::string& client_label) override {
    FLYT_CUDA_ASSIGN_OR_RETURN(std::shared_ptr<Context> ctx,
                               Context::Create(driver_, device_, sm_count_));
    return std::unique_ptr<Session>(
        std::make_unique<DriverSession>(driver_, device_, sm_count_, client_label, std::move(ctx)));
  }

 private:
  const DriverPtr driver_;
  const CUdevice device_;
  const int ordinal_;
  const std::optional<int> sm_count_;
  const std::optional<int> granted_sm_count_;
  const int device_sm_count_;
  const DeviceIdentity identity_;
};

Status FailedPrecondition(std::string message) {
  return {StatusCode::kFailedPrecondition, std::move(message)};
}

Status FromCudaStatus(const CudaStatus& status, StatusCode code) {
  return {code, status.message()};
}

}  // namespace

CudaError CudaErrorFromDriver(int cu_result) {
  switch (cu_result) {
    // Codes without a runtime number. CONTEXT_ALREADY_CURRENT has not been returned since CUDA
    // 3.2; KEY_ROTATION (confidential computing) has no cudaError_t in CUDA 13's driver_types.h.
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT:
    case CUDA_ERROR_KEY_ROTATION:
      return ErrorCode::kUnknown;
      // Every other CUresult has the cudaError_t of the same number, where the runtime has one
      // (CUDA_ERROR_OUT_OF_MEMORY 2 = cudaErrorMemoryAllocation, CUDA_ERROR_INVALID_CONTEXT 201 =
      // cudaErrorDeviceUninitialized, CUDA_ERROR_INVALID_HANDLE 400 =
      // cudaErrorInvalidResourceHandle, CUDA_ERROR_NOT_FOUND 500 = cudaErrorSymbolNotFound, ...).
#define FLYT_CUDA_ERROR(name, value, sticky, text) \
  case value:                                      \
    return ErrorCode::k##name;
#include "cuda/cuda_errors.def"
#undef FLYT_CUDA_ERROR
    default:
      return ErrorCode::kUnknown;
  }
}

Result<std::unique_ptr<Backend>> MakeDriverBackend(const DriverOptions& options) {
  Result<std::unique_ptr<Driver>> loaded = Driver::Load(options.library);
  if (!loaded.ok()) {
    return Status(loaded.status().code(),
                  loaded.status().message() + "; " + std::string(kNoDriverHint));
  }
  DriverPtr driver = std::move(loaded).value();
  const FunctionTable& fn = driver->api();

  CUresult rc = fn.Init(0);
  if (rc == CUDA_ERROR_STUB_LIBRARY) {
    return Unavailable(options.library +
                       " is NVIDIA's stub libcuda.so (for linking only), not a driver; " +
                       std::string(kNoDriverHint));
  }
  if (rc == CUDA_ERROR_NO_DEVICE) {
    return Unavailable(driver->ErrorMessage("cuInit", rc) + "; " + std::string(kNoDriverHint));
  }
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuInit", rc);

  int driver_version = 0;
  rc = fn.DriverGetVersion(&driver_version);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDriverGetVersion", rc);

  int count = 0;
  rc = fn.DeviceGetCount(&count);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGetCount", rc);
  if (options.device < 0 || options.device >= count) {
    return InvalidArgument("device " + std::to_string(options.device) +
                           " does not exist: the driver sees " + std::to_string(count) +
                           " CUDA device(s)" +
                           (count > 0 ? " (0.." + std::to_string(count - 1) + ")" : ""));
  }
  CUdevice device = 0;
  rc = fn.DeviceGet(&device, options.device);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGet", rc);

  DeviceIdentity identity;
  identity.driver_version = driver_version;
  char name[256] = {};
  rc = fn.DeviceGetName(name, sizeof name - 1, device);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGetName", rc);
  identity.name = name;
  size_t total_bytes = 0;
  rc = fn.DeviceTotalMem(&total_bytes, device);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceTotalMem", rc);
  identity.total_memory_bytes = total_bytes;
  if (fn.DeviceGetUuid != nullptr) {
    CUuuid uuid{};
    if (fn.DeviceGetUuid(&uuid, device) == CUDA_SUCCESS) {
      std::memcpy(identity.uuid.data(), uuid.bytes, identity.uuid.size());
    }
  }
  int device_sm_count = 0;
  rc = fn.DeviceGetAttribute(&device_sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGetAttribute(SM count)", rc);

  if (options.sm_count) {
    const int asked = *options.sm_count;
    if (asked < 1 || asked > device_sm_count) {
      return InvalidArgument("--sm-count " + std::to_string(asked) + " is outside 1.." +
                             std::to_string(device_sm_count) + " (the SMs of " + identity.name +
                             ")");
    }
    if (fn.DeviceGetExecAffinitySupport == nullptr) {
      return NotSupported("this driver (" + std::to_string(driver_version) +
                          ") has no execution affinity (CUDA 11.4+ needed); " + MpsHint(asked));
    }
    int supported = 0;
    rc = fn.DeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, device);
    if (rc != CUDA_SUCCESS) return DriverStatus(*driver, "cuDeviceGetExecAffinitySupport", rc);
    if (supported == 0) {
      return FailedPrecondition(identity.name + " cannot limit a context's SMs here (MPS is not " +
                                "running?): " + MpsHint(asked));
    }
  }

  // A probe context: the device can host clients (not exclusive-process and taken, not out of
  // memory, the SM limit accepted), and the SM count the driver really grants.
  std::optional<int> granted;
  {
    CudaResult<std::shared_ptr<Context>> probe = Context::Create(driver, device, options.sm_count);
    if (!probe.ok()) {
      const ErrorCode error = probe.status().code();
      const bool affinity_refused =
          options.sm_count &&
          (error == ErrorCode::kUnsupportedExecAffinity || error == ErrorCode::kNotSupported);
      const StatusCode code =
          affinity_refused ? StatusCode::kFailedPrecondition : StatusCode::kUnavailable;
      return FromCudaStatus(probe.status(), code)
          .WithContext("cannot create a CUDA context on device " + std::to_string(options.device));
    }
    if (options.sm_count) {
      granted = (*probe)->GrantedSmCount();
      spdlog::info("driver backend: clients' contexts get {} SMs of {} (asked {})",
                   granted ? std::to_string(*granted) : std::string("an unknown number of"),
                   device_sm_count, *options.sm_count);
    }
  }
  return std::unique_ptr<Backend>(
      std::make_unique<DriverBackend>(std::move(driver), device, options.device, options.sm_count,
                                      granted, device_sm_count, std::move(identity)));
}

}  // namespace flyt::remote
