// The simulated device's CUDA graphs (see sim_internal.h): an instantiated graph is its node
// list; a launch runs the nodes in their (topological) order on the stream: kernels are recorded
// as launches, copies and memsets are byte-exact, event nodes record and wait as on a stream.
#include <algorithm>
#include <cstring>

#include "remote_sim/sim_internal.h"

namespace flyt::remote::sim_internal {

// The checks a launch of each kernel node would make (sim_backend.cc's LaunchKernel), made once:
// a launch of the graph then only counts its kernels.
CudaResult<SimSession::SimGraph> SimSession::CheckGraph(std::span<const GraphNodeSpec> nodes) {
  if (CudaStatus sticky = Sticky(); !sticky.ok()) return sticky;
  SimGraph graph;
  graph.nodes.assign(nodes.begin(), nodes.end());
  for (const GraphNodeSpec& n : nodes) {
    if (n.kind != GraphNodeKind::kKernel) continue;
    FLYT_CUDA_ASSIGN_OR_RETURN(Function * f, FindFunction(n.function));
    const Dim3& b = n.block;
    const Dim3& g = n.grid;
    const uint64_t threads = uint64_t{b.x} * b.y * b.z;
    if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0 || b.x > 1024 ||
        b.y > 1024 || b.z > 64 || threads > 1024 || g.x > 2147483647u || g.y > 65535 ||
        g.z > 65535) {
      return Error(CudaError::kInvalidConfiguration, "grid or block out of the device's limits");
    }
    if (threads > std::min<uint32_t>(f->info.max_threads_per_block.value_or(1024), 1024)) {
      return Error(CudaError::kLaunchOutOfResources, "more threads than the kernel allows");
    }
    if (n.shared_bytes > static_cast<uint32_t>(f->max_dynamic_shared)) {
      return Error(CudaError::kInvalidValue, "dynamic shared memory above the kernel's limit");
    }
    if (n.params.size() != f->info.param_bytes) {
      return Error(CudaError::kInvalidValue,
                   "parameter buffer of " + std::to_string(n.params.size()) + " bytes for " +
                       f->info.name + ", which takes " + std::to_string(f->info.param_bytes));
    }
    ++graph.kernels;
    graph.faults = graph.faults || f->info.name.find(kFaultKernelMarker) != std::string::npos;
    graph.functions.push_back(static_cast<uint64_t>(n.function));
  }
  std::sort(graph.functions.begin(), graph.functions.end());
  graph.functions.erase(std::unique(graph.functions.begin(), graph.functions.end()),
                        graph.functions.end());
  return graph;
}

CudaResult<uint64_t> SimSession::GraphInstantiate(std::span<const GraphNodeSpec> nodes) {
  FLYT_CUDA_ASSIGN_OR_RETURN(SimGraph graph, CheckGraph(nodes));
  const uint64_t id = next_handle_++;
  graph_execs_.emplace(id, std::move(graph));
  return id;
}

CudaStatus SimSession::GraphUpdate(uint64_t exec, std::span<const GraphNodeSpec> nodes) {
  auto it = graph_execs_.find(exec);
  if (it == graph_execs_.end()) return Error(CudaError::kInvalidValue, "unknown graph exec");
  if (it->second.nodes.size() != nodes.size()) {
    return Error(CudaError::kGraphExecUpdateFailure, "node count changed");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(it->second, CheckGraph(nodes));
  return CudaStatus::Ok();
}

CudaStatus SimSession::GraphLaunch(uint64_t exec, StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(CheckStream(stream));
  auto it = graph_execs_.find(exec);
  if (it == graph_execs_.end()) return Error(CudaError::kInvalidValue, "unknown graph exec");
  const SimGraph& graph = it->second;
  for (uint64_t f : graph.functions) {
    FLYT_CUDA_RETURN_IF_ERROR(FindFunction(static_cast<FunctionHandle>(f)).status());
  }
  for (const GraphNodeSpec& n : graph.nodes) {
    switch (n.kind) {
      case GraphNodeKind::kEmpty:
      case GraphNodeKind::kKernel:  // checked at instantiation; recorded below
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
  launches_ += graph.kernels;
  if (graph.faults) {
    sticky_ = Error(CudaError::kIllegalAddress,
                    "simulated fault: a kernel of the graph made an illegal memory access");
    backend_.Poison(sticky_);
  }
  return CudaStatus::Ok();
}

CudaStatus SimSession::GraphDestroy(uint64_t exec) {
  if (graph_execs_.erase(exec) == 0) return Error(CudaError::kInvalidValue, "unknown graph exec");
  return CudaStatus::Ok();
}

}  // namespace flyt::remote::sim_internal
