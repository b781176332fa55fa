// The driver backend's pools family (see driver_internal.h): DriverSession's launch with
// attributes (driver_session.h).
#include <cstdint>
#include <cstring>

#include "remote_driver/driver_internal.h"
#include "remote_driver/driver_session.h"

namespace flyt::remote::driver_impl {

// cuLaunchKernelEx with the cooperative, cluster and priority attributes (NOT YET RUN ON A GPU).
CudaStatus DriverSession::LaunchKernelEx(FunctionHandle function, const LaunchConfig& config,
                                         const LaunchAttributes& attributes,
                                         std::span<const std::byte> params) {
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
  cd::CUlaunchConfig launch{config.grid.x,
                            config.grid.y,
                            config.grid.z,
                            config.block.x,
                            config.block.y,
                            config.block.z,
                            config.dynamic_shared_bytes,
                            s,
                            attrs,
                            n};
  CUresult rc = fn_.LaunchKernelEx(&launch, it->first, nullptr, params.empty() ? nullptr : extra);
  if (rc != CUDA_SUCCESS) {
    return DriverError(*driver_, "cuLaunchKernelEx(" + info.name + ")", rc);
  }
  return CudaStatus::Ok();
}

}  // namespace flyt::remote::driver_impl
