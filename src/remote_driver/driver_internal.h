// The driver backend's shared parts (driver_backend.cc, driver_session.cc): the driver API's names,
// the error conversions, one CUDA context, and the session factory. Internal to
// flyt_driver_backend; the public face is driver_backend.h.
#pragma once

#include <memory>
#include <optional>
#include <span>  // [issue 17: graphs]
#include <string>
#include <string_view>

#include "cuda_driver/cuda_driver_types.h"
#include "cuda_driver/library.h"
#include "remote_server/backend.h"
#include "remote_driver/driver_backend.h"

namespace flyt::remote::driver_impl {

using ErrorCode = CudaError;

// The driver API (declared in cuda_driver/, never from cuda.h).
using cuda_driver::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
using cuda_driver::CU_EXEC_AFFINITY_TYPE_SM_COUNT;
using cuda_driver::CU_LAUNCH_PARAM_BUFFER_POINTER;
using cuda_driver::CU_LAUNCH_PARAM_BUFFER_SIZE;
using cuda_driver::CU_LAUNCH_PARAM_END;
using cuda_driver::CU_MEMHOSTALLOC_PORTABLE;
using cuda_driver::CU_MEMHOSTREGISTER_PORTABLE;
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

// The CudaStatus for a failed driver call: the runtime's code for `code` (CudaErrorFromDriver)
// and the driver's own name and text. The one place a CUresult becomes an error.
CudaStatus DriverError(const Driver& driver, std::string_view call, CUresult code);
// The same, reported as `as` (call sites where the runtime reports another code).
CudaStatus DriverError(const Driver& driver, std::string_view call, CUresult code, ErrorCode as);

// What --sm-count needs of the machine, for the errors that say it is missing.
std::string MpsHint(int sm_count);

// [issue 17: graphs] a graph's nodes as driver objects, and its CUDA graph (driver_graphs.cc)
struct DriverGraphNode {
  Session::GraphNodeKind kind = Session::GraphNodeKind::kEmpty;
  cuda_driver::CUfunction function = nullptr;
  Dim3 grid, block;
  uint32_t shared_bytes = 0;
  std::span<const std::byte> params;  // the parameter buffer, suitably aligned
  cuda_driver::CUdeviceptr dst = 0, src = 0;
  uint64_t bytes = 0;
  uint32_t value = 0, element_size = 1;
  uint64_t width = 0, height = 1, pitch = 0;
  cuda_driver::CUevent event = nullptr;
};
struct DriverGraph {
  cuda_driver::CUgraph graph = nullptr;
  cuda_driver::CUgraphExec exec = nullptr;
};
CudaResult<DriverGraph> InstantiateDriverGraph(const Driver& driver,
                                               std::span<const DriverGraphNode> nodes);
CudaStatus LaunchDriverGraph(const Driver& driver, const DriverGraph& graph,
                             cuda_driver::CUstream stream);
void DestroyDriverGraph(const Driver& driver, DriverGraph& graph);
// (end graphs)

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

// A session on `device` in the context `ctx` (Context::Create), for the client `label`.
std::unique_ptr<Session> OpenDriverSession(DriverPtr driver, CUdevice device,
                                           std::optional<int> sm_count, std::string label,
                                           std::shared_ptr<Context> ctx);

}  // namespace flyt::remote::driver_impl
