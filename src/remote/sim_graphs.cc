// The simulated device's CUDA graphs (see sim_internal.h): an instantiated graph is its node
// list; a launch runs the nodes in their (topological) order on the stream: kernels are recorded
// as launches, copies and memsets are byte-exact, event nodes record and wait as on a stream.
#include <cstring>

#include "remote/sim_internal.h"

namespace flyt::remote::sim_internal {

CudaResult<uint64_t> SimSession::GraphInstantiate(std::span<const GraphNodeSpec> nodes) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  for (const GraphNodeSpec& n : nodes) {
    if (n.kind == GraphNodeKind::kKernel) {
      FLYT_CUDA_RETURN_IF_ERROR(FindFunction(n.function).status());
    }
  }
  uint64_t id = next_handle_++;
  graph_execs_.emplace(id, std::vector<GraphNodeSpec>(nodes.begin(), nodes.end()));
  return id;
}

CudaStatus SimSession::GraphUpdate(uint64_t exec, std::span<const GraphNodeSpec> nodes) {
  auto it = graph_execs_.find(exec);
  if (it == graph_execs_.end()) return Error(CudaError::kInvalidValue, "unknown graph exec");
  if (it->second.size() != nodes.size()) {
    return Error(CudaError::kGraphExecUpdateFailure, "node count changed");
  }
  it->second.assign(nodes.begin(), nodes.end());
  return CudaStatus::Ok();
}

CudaStatus SimSession::GraphLaunch(uint64_t exec, StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(CheckStream(stream));
  auto it = graph_execs_.find(exec);
  if (it == graph_execs_.end()) return Error(CudaError::kInvalidValue, "unknown graph exec");
  for (const GraphNodeSpec& n : it->second) {
    switch (n.kind) {
      case GraphNodeKind::kEmpty:
        break;
      case GraphNodeKind::kKernel:
        FLYT_CUDA_RETURN_IF_ERROR(
            LaunchKernel(n.function, LaunchConfig{n.grid, n.block, n.shared_bytes, stream},
                         n.params));
        break;
      case GraphNodeKind::kCopy:
        if (n.bytes != 0) FLYT_CUDA_RETURN_IF_ERROR(MemcpyDtoD(n.dst, n.src, n.bytes, stream));
        break;
      case GraphNodeKind::kMemset: {
        if (n.width == 0 || n.height == 0) break;
        const uint64_t row_bytes = n.width * n.element_size;
        for (uint64_t row = 0; row < n.height; ++row) {
          FLYT_CUDA_ASSIGN_OR_RETURN(std::byte * p, Translate(n.dst + row * n.pitch, row_bytes));
          if (n.element_size == 1) {
            std::memset(p, static_cast<int>(n.value & 0xFF), row_bytes);
            continue;
          }
          for (uint64_t e = 0; e < n.width; ++e) {
            if (n.element_size == 2) {
              const auto v = static_cast<uint16_t>(n.value);
              std::memcpy(p + e * 2, &v, 2);
            } else {
              std::memcpy(p + e * 4, &n.value, 4);
            }
          }
        }
        break;
      }
      case GraphNodeKind::kEventRecord:
        FLYT_CUDA_RETURN_IF_ERROR(EventRecord(n.event, stream));
        break;
      case GraphNodeKind::kEventWait:
        FLYT_CUDA_RETURN_IF_ERROR(StreamWaitEvent(stream, n.event, 0));
        break;
    }
  }
  return CudaStatus::Ok();
}

CudaStatus SimSession::GraphDestroy(uint64_t exec) {
  if (graph_execs_.erase(exec) == 0) return Error(CudaError::kInvalidValue, "unknown graph exec");
  return CudaStatus::Ok();
}

}  // namespace flyt::remote::sim_internal
