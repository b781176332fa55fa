// The driver backend's graphs family (see driver_internal.h): an instantiated graph is captured
// once on a private stream of the session's context (relaxed mode: kernels by their parameter
// buffers, device copies, memsets, external event records and waits, in the topological order
// the server checked) into a real CUgraph, instantiated with cuGraphInstantiateWithFlags; a
// launch is one cuGraphLaunch, so replay costs what it costs locally.
#include "remote_driver/driver_internal.h"
#include "remote_driver/driver_session.h"

namespace flyt::remote::driver_impl {
namespace {

using cuda_driver::CU_EVENT_RECORD_EXTERNAL;
using cuda_driver::CU_EVENT_WAIT_EXTERNAL;
using cuda_driver::CU_STREAM_CAPTURE_MODE_RELAXED;
using cuda_driver::CU_STREAM_NON_BLOCKING;
using cuda_driver::CUgraph;
using Kind = Session::GraphNodeKind;

// Records one node into the capture on `s`.
CudaStatus Capture(const Driver& driver, const DriverGraphNode& n, CUstream s) {
  const FunctionTable& fn = driver.api();
  switch (n.kind) {
    case Kind::kEmpty:
      return CudaStatus::Ok();
    case Kind::kKernel: {
      size_t size = n.params.size();
      void* buffer = const_cast<std::byte*>(n.params.data());
      void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                       CU_LAUNCH_PARAM_END};
      CUresult rc =
          fn.LaunchKernel(n.function, n.grid.x, n.grid.y, n.grid.z, n.block.x, n.block.y, n.block.z,
                          n.shared_bytes, s, nullptr, n.params.empty() ? nullptr : extra);
      if (rc == CUDA_ERROR_INVALID_VALUE) {
        return DriverError(driver, "cuLaunchKernel (graph node)", rc,
                           ErrorCode::kInvalidConfiguration);
      }
      if (rc != CUDA_SUCCESS) return DriverError(driver, "cuLaunchKernel (graph node)", rc);
      return CudaStatus::Ok();
    }
    case Kind::kCopy: {
      CUresult rc = fn.MemcpyDtoDAsync(n.dst, n.src, n.bytes, s);
      if (rc != CUDA_SUCCESS) return DriverError(driver, "cuMemcpyDtoDAsync (graph node)", rc);
      return CudaStatus::Ok();
    }
    case Kind::kMemset: {
      CUresult rc = CUDA_SUCCESS;
      const size_t pitch = n.height > 1 ? n.pitch : n.width * n.element_size;
      if (n.element_size == 1) {
        rc = fn.MemsetD2D8Async(n.dst, pitch, static_cast<unsigned char>(n.value), n.width,
                                n.height, s);
      } else if (n.element_size == 2) {
        rc =
            fn.MemsetD2D16Async(n.dst, pitch, static_cast<uint16_t>(n.value), n.width, n.height, s);
      } else {
        rc = fn.MemsetD2D32Async(n.dst, pitch, n.value, n.width, n.height, s);
      }
      if (rc != CUDA_SUCCESS) return DriverError(driver, "cuMemsetD2DAsync (graph node)", rc);
      return CudaStatus::Ok();
    }
    case Kind::kEventRecord: {
      CUresult rc = fn.EventRecordWithFlags(n.event, s, CU_EVENT_RECORD_EXTERNAL);
      if (rc != CUDA_SUCCESS) return DriverError(driver, "cuEventRecordWithFlags (graph)", rc);
      return CudaStatus::Ok();
    }
    case Kind::kEventWait: {
      CUresult rc = fn.StreamWaitEvent(s, n.event, CU_EVENT_WAIT_EXTERNAL);
      if (rc != CUDA_SUCCESS) return DriverError(driver, "cuStreamWaitEvent (graph)", rc);
      return CudaStatus::Ok();
    }
  }
  return CudaStatus(ErrorCode::kInvalidValue, "unknown graph node kind");
}

}  // namespace

CudaResult<DriverGraph> InstantiateDriverGraph(const Driver& driver,
                                               std::span<const DriverGraphNode> nodes) {
  const FunctionTable& fn = driver.api();
  if (fn.StreamBeginCapture == nullptr || fn.StreamEndCapture == nullptr ||
      fn.GraphInstantiateWithFlags == nullptr || fn.GraphLaunch == nullptr ||
      fn.GraphExecDestroy == nullptr || fn.GraphDestroy == nullptr ||
      fn.EventRecordWithFlags == nullptr || fn.MemsetD2D8Async == nullptr ||
      fn.MemsetD2D16Async == nullptr || fn.MemsetD2D32Async == nullptr) {
    return CudaStatus(ErrorCode::kNotSupported,
                      "this driver lacks the graph entry points (CUDA 11.4+ needed)");
  }
  CUstream s = nullptr;
  CUresult rc = fn.StreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0);
  if (rc != CUDA_SUCCESS) return DriverError(driver, "cuStreamCreateWithPriority (graph)", rc);
  DriverGraph out;
  CudaStatus status;
  rc = fn.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (rc != CUDA_SUCCESS) {
    status = DriverError(driver, "cuStreamBeginCapture", rc);
  } else {
    for (const DriverGraphNode& n : nodes) {
      status = Capture(driver, n, s);
      if (!status.ok()) break;
    }
    // Ends the capture whatever happened (a failed node leaves it invalidated).
    CUgraph graph = nullptr;
    rc = fn.StreamEndCapture(s, &graph);
    if (status.ok() && rc != CUDA_SUCCESS) status = DriverError(driver, "cuStreamEndCapture", rc);
    out.graph = graph;
  }
  fn.StreamDestroy(s);
  if (status.ok()) {
    rc = fn.GraphInstantiateWithFlags(&out.exec, out.graph, 0);
    if (rc != CUDA_SUCCESS) status = DriverError(driver, "cuGraphInstantiateWithFlags", rc);
  }
  if (!status.ok()) {
    DestroyDriverGraph(driver, out);
    return status;
  }
  return out;
}

CudaStatus LaunchDriverGraph(const Driver& driver, const DriverGraph& graph, CUstream stream) {
  CUresult rc = driver.api().GraphLaunch(graph.exec, stream);
  if (rc != CUDA_SUCCESS) return DriverError(driver, "cuGraphLaunch", rc);
  return CudaStatus::Ok();
}

void DestroyDriverGraph(const Driver& driver, DriverGraph& graph) {
  const FunctionTable& fn = driver.api();
  if (graph.exec != nullptr && fn.GraphExecDestroy != nullptr) fn.GraphExecDestroy(graph.exec);
  if (graph.graph != nullptr && fn.GraphDestroy != nullptr) fn.GraphDestroy(graph.graph);
  graph = DriverGraph{};
}

// ---------------------------------------------------------------------------------------------
// DriverSession's graph calls (driver_session.h).

CudaResult<uint64_t> DriverSession::GraphInstantiate(std::span<const GraphNodeSpec> nodes) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  FLYT_CUDA_ASSIGN_OR_RETURN(std::vector<DriverGraphNode> driver_nodes, DriverNodes(nodes));
  FLYT_CUDA_ASSIGN_OR_RETURN(DriverGraph graph, InstantiateDriverGraph(*driver_, driver_nodes));
  const uint64_t id = next_graph_++;
  graphs_[id] = {graph, std::vector<GraphNodeSpec>(nodes.begin(), nodes.end())};
  return id;
}

// Re-captures and re-instantiates (the nodes' parameters live in the new capture).
CudaStatus DriverSession::GraphUpdate(uint64_t exec, std::span<const GraphNodeSpec> nodes) {
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

CudaStatus DriverSession::GraphLaunch(uint64_t exec, StreamHandle stream) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  auto it = graphs_.find(exec);
  if (it == graphs_.end()) return UnknownHandle("cuGraphLaunch", "graph exec");
  FLYT_CUDA_ASSIGN_OR_RETURN(CUstream s, StreamOf(stream));
  return LaunchDriverGraph(*driver_, it->second.graph, s);
}

CudaStatus DriverSession::GraphDestroy(uint64_t exec) {
  FLYT_CUDA_RETURN_IF_ERROR(Enter());
  auto it = graphs_.find(exec);
  if (it == graphs_.end()) return UnknownHandle("cuGraphExecDestroy", "graph exec");
  DestroyDriverGraph(*driver_, it->second.graph);
  graphs_.erase(it);
  return CudaStatus::Ok();
}

// The nodes with their handles as driver objects; `nodes` must outlive the result (parameter
// buffers are borrowed).
CudaResult<std::vector<DriverGraphNode>> DriverSession::DriverNodes(
    std::span<const GraphNodeSpec> nodes) {
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
void DriverSession::ReleaseGraphs() {
  for (auto& [id, g] : graphs_) DestroyDriverGraph(*driver_, g.graph);
  graphs_.clear();
}

}  // namespace flyt::remote::driver_impl
