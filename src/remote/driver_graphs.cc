// The driver backend's graphs family (see driver_internal.h): an instantiated graph is captured
// once on a private stream of the session's context (relaxed mode: kernels by their parameter
// buffers, device copies, memsets, external event records and waits, in the topological order
// the server checked) into a real CUgraph, instantiated with cuGraphInstantiateWithFlags; a
// launch is one cuGraphLaunch, so replay costs what it costs locally.
#include "remote/driver_internal.h"

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

}  // namespace flyt::remote::driver_impl
