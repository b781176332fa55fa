// The simulated device's pools-family methods (see sim_internal.h): launches with attributes.
// (Memory pools need nothing of the backend: the server builds them on Malloc/Free and events.)
#include "remote_sim/sim_internal.h"

namespace flyt::remote::sim_internal {

CudaStatus SimSession::LaunchKernelEx(FunctionHandle function, const LaunchConfig& config,
                                      const LaunchAttributes& attributes,
                                      std::span<const std::byte> params) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  const Dim3& g = config.grid;
  const Dim3& c = attributes.cluster;
  uint64_t cluster_blocks = uint64_t{c.x} * c.y * c.z;
  if (cluster_blocks == 0 || g.x % c.x != 0 || g.y % c.y != 0 || g.z % c.z != 0) {
    return Error(CudaError::kInvalidClusterSize,
                 "the grid is not a whole number of clusters of the given dimensions");
  }
  if (cluster_blocks > 8) {  // the portable maximum (an H100 allows 16 with an opt-in)
    return Error(CudaError::kInvalidClusterSize,
                 "a cluster of " + std::to_string(cluster_blocks) + " blocks exceeds 8");
  }
  if (attributes.cooperative) {
    int32_t threads = static_cast<int32_t>(config.block.x * config.block.y * config.block.z);
    FLYT_CUDA_ASSIGN_OR_RETURN(
        int32_t per_sm,
        OccupancyMaxActiveBlocksPerSm(function, threads, config.dynamic_shared_bytes, 0));
    uint64_t fit = uint64_t(std::max(per_sm, 0)) * uint64_t(backend_.Attr(16));
    uint64_t blocks = uint64_t{g.x} * g.y * g.z;
    if (blocks > fit) {
      return Error(CudaError::kCooperativeLaunchTooLarge,
                   "a cooperative grid of " + std::to_string(blocks) + " blocks exceeds the " +
                       std::to_string(fit) + " the device holds at once");
    }
  }
  return LaunchKernel(function, config, params);
}

}  // namespace flyt::remote::sim_internal
