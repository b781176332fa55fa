// flyt's libcudart.so.13: stream capture (issue 17, graphs). See runtime.h and graph_model.h.
//
// Stream capture records the operations issued on a capturing stream as nodes of the capture's
// graph instead of sending them: Runtime's Capture* hooks (called by the other families' entry
// points while a capture is under way) and the capture API (cudaStreamBeginCapture ...
// cudaStreamGetCaptureInfo, cudaThreadExchangeStreamCaptureMode).
#include <algorithm>
#include <map>
#include <thread>
#include <unordered_set>

#include "runtime/exports.h"
#include "runtime/graph_model.h"
#include "runtime/runtime.h"

namespace flyt::runtime {
namespace {

using remote::CudaError;
using graphs::AddNode;
using graphs::Capture;
using graphs::CapturedEvent;
using graphs::CapturingStream;
using graphs::GraphState;
using graphs::Node;
using graphs::State;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

// Ends the captures (and their streams' and events' records) for which `pred` holds.
template <typename Pred>
void Invalidate(GraphState& s, Pred&& pred) FLYT_REQUIRES(s.mu) {
  for (auto& [id, capture] : s.captures) {
    if (pred(*capture)) capture->invalidated = true;
  }
}

// The legacy stream used while a capture of a blocking stream is under way.
std::optional<CudaStatus> ImplicitCheck(Runtime& rt, GraphState& s, uint64_t stream)
    FLYT_REQUIRES(s.mu) {
  (void)rt;
  if (stream != 0) return std::nullopt;
  bool any = false;
  for (auto& [id, cs] : s.streams) {
    if (cs.blocking) {
      cs.capture->invalidated = true;
      any = true;
    }
  }
  if (!any) return std::nullopt;
  return Error(CudaError::kStreamCaptureImplicit,
               "the legacy stream was used while a blocking stream is being captured");
}

std::optional<CudaStatus> Record(Runtime& rt, uint64_t stream, std::unique_ptr<Node> node) {
  GraphState& s = State();
  MutexLock lock(s.mu);
  auto it = s.streams.find(stream);
  if (it == s.streams.end()) return ImplicitCheck(rt, s, stream);
  CapturingStream& cs = it->second;
  if (cs.capture->invalidated) {
    return Error(CudaError::kStreamCaptureInvalidated, "the stream's capture was invalidated");
  }
  Node* added = AddNode(s, *cs.capture->graph, std::move(node), cs.tail);
  cs.tail = {added};
  return CudaStatus::Ok();
}

}  // namespace

// ---- capture hooks -----------------------------------------------------------------------------

std::optional<CudaStatus> Runtime::CaptureKernel(uint64_t stream, FunctionRecord* function,
                                                 dim3 grid, dim3 block, uint32_t shared_bytes,
                                                 remote::Bytes&& params) {
  if (!CaptureActive()) return std::nullopt;
  auto node = std::make_unique<Node>();
  node->type = cudaGraphNodeTypeKernel;
  node->function = function;
  node->func = function->host_fun;
  node->grid = grid;
  node->block = block;
  node->shared_bytes = shared_bytes;
  node->params = std::move(params);
  return Record(*this, stream, std::move(node));
}

std::optional<CudaStatus> Runtime::CaptureHost(uint64_t stream,
                                               std::function<void(cudaError_t)> call) {
  if (!CaptureActive()) return std::nullopt;
  auto node = std::make_unique<Node>();
  node->type = cudaGraphNodeTypeHost;
  node->host = std::move(call);
  return Record(*this, stream, std::move(node));
}

std::optional<CudaStatus> Runtime::CaptureCopy(uint64_t stream, void* dst, const void* src,
                                               size_t count, bool device_to_device) {
  if (!CaptureActive()) return std::nullopt;
  auto node = std::make_unique<Node>();
  node->type = cudaGraphNodeTypeMemcpy;
  node->dst = dst;
  node->src = src;
  node->count = count;
  node->device_to_device = device_to_device;
  return Record(*this, stream, std::move(node));
}

std::optional<CudaStatus> Runtime::CaptureMemset(uint64_t stream, void* dst, int value,
                                                 size_t count) {
  if (!CaptureActive()) return std::nullopt;
  auto node = std::make_unique<Node>();
  node->type = cudaGraphNodeTypeMemset;
  node->dst = dst;
  node->value = static_cast<unsigned>(value) & 0xFF;
  node->element_size = 1;
  node->width = count;
  node->height = 1;
  node->pitch = count;
  return Record(*this, stream, std::move(node));
}

std::optional<CudaStatus> Runtime::CaptureRecord(uint64_t event, uint64_t stream) {
  if (!CaptureActive()) return std::nullopt;
  GraphState& s = State();
  MutexLock lock(s.mu);
  auto it = s.streams.find(stream);
  if (it == s.streams.end()) {
    s.events.erase(event);
    return ImplicitCheck(*this, s, stream);
  }
  if (it->second.capture->invalidated) {
    return Error(CudaError::kStreamCaptureInvalidated, "the stream's capture was invalidated");
  }
  s.events[event] = {it->second.capture, it->second.tail};
  return CudaStatus::Ok();
}

std::optional<CudaStatus> Runtime::CaptureWait(uint64_t stream, uint64_t event) {
  if (!CaptureActive()) return std::nullopt;
  GraphState& s = State();
  MutexLock lock(s.mu);
  auto ev = s.events.find(event);
  auto st = s.streams.find(stream);
  if (ev == s.events.end()) {
    if (st == s.streams.end()) return ImplicitCheck(*this, s, stream);
    // An event from outside the capture orders nothing inside the graph.
    return CudaStatus::Ok();
  }
  Capture* capture = ev->second.capture;
  if (st == s.streams.end()) {
    if (stream == 0) {
      capture->invalidated = true;
      return Error(CudaError::kStreamCaptureImplicit, "the legacy stream cannot join a capture");
    }
    CapturingStream joined;
    joined.capture = capture;
    joined.tail = ev->second.nodes;
    s.streams[stream] = std::move(joined);
    UpdateActive(*this, s);
    return CudaStatus::Ok();
  }
  if (st->second.capture != capture) {
    capture->invalidated = true;
    st->second.capture->invalidated = true;
    return Error(CudaError::kStreamCaptureMerge, "the event belongs to another capture");
  }
  for (Node* n : ev->second.nodes) {
    if (std::find(st->second.tail.begin(), st->second.tail.end(), n) == st->second.tail.end()) {
      st->second.tail.push_back(n);
    }
  }
  return CudaStatus::Ok();
}

std::optional<CudaStatus> Runtime::CaptureSync(uint64_t stream) {
  if (!CaptureActive()) return std::nullopt;
  GraphState& s = State();
  MutexLock lock(s.mu);
  auto it = s.streams.find(stream);
  if (it == s.streams.end()) return ImplicitCheck(*this, s, stream);
  it->second.capture->invalidated = true;
  return Error(CudaError::kStreamCaptureUnsupported,
               "a capturing stream cannot be synchronised or queried");
}

std::optional<CudaStatus> Runtime::CaptureUnsafe() {
  if (!CaptureActive() || t_mode == cudaStreamCaptureModeRelaxed) return std::nullopt;
  GraphState& s = State();
  MutexLock lock(s.mu);
  bool hit = false;
  const std::thread::id me = std::this_thread::get_id();
  Invalidate(s, [&](const Capture& c) {
    bool forbids = c.mode == cudaStreamCaptureModeGlobal ||
                   (c.mode == cudaStreamCaptureModeThreadLocal && c.thread == me);
    hit = hit || forbids;
    return forbids;
  });
  if (!hit) return std::nullopt;
  return Error(CudaError::kStreamCaptureUnsupported,
               "operation not permitted when a stream is capturing");
}

}  // namespace flyt::runtime

using flyt::MutexLock;
using flyt::remote::CudaError;
using flyt::runtime::CudaResult;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
namespace g = flyt::runtime::graphs;

namespace {

CudaStatus Err(CudaError code, std::string message) { return {code, std::move(message)}; }

cudaError_t BeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed) {
    return rt.Finish(Err(CudaError::kInvalidValue, "unknown capture mode"));
  }
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  if (*id == 0) {
    return rt.Finish(
        Err(CudaError::kStreamCaptureUnsupported, "the legacy default stream cannot be captured"));
  }
  bool blocking = true;
  if (reinterpret_cast<uintptr_t>(stream) > 2) {
    CudaResult<flyt::runtime::StreamRecord> record = rt.FindStream(stream);
    if (record.ok()) blocking = (record->flags & cudaStreamNonBlocking) == 0;
  }
  g::GraphState& s = g::State();
  MutexLock lock(s.mu);
  if (s.streams.contains(*id)) {
    return rt.Finish(Err(CudaError::kIllegalState, "the stream is already capturing"));
  }
  auto capture = std::make_unique<g::Capture>();
  capture->id = s.next_capture++;
  capture->mode = mode;
  capture->thread = std::this_thread::get_id();
  capture->origin = *id;
  capture->graph = std::make_unique<g::Graph>();
  g::CapturingStream cs;
  cs.capture = capture.get();
  cs.blocking = blocking;
  s.streams[*id] = std::move(cs);
  s.captures[capture->id] = std::move(capture);
  g::UpdateActive(rt, s);
  return rt.Finish(CudaStatus::Ok());
}

cudaError_t EndCapture(cudaStream_t stream, cudaGraph_t* graph, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (graph == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null pGraph"));
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  g::GraphState& s = g::State();
  MutexLock lock(s.mu);
  auto it = s.streams.find(*id);
  if (it == s.streams.end()) {
    return rt.Finish(Err(CudaError::kIllegalState, "the stream is not capturing"));
  }
  g::Capture* capture = it->second.capture;
  if (capture->origin != *id) {
    capture->invalidated = true;
    return rt.Finish(Err(CudaError::kStreamCaptureUnmatched,
                         "the capture must be ended on the stream that began it"));
  }
  if (capture->mode != cudaStreamCaptureModeRelaxed &&
      capture->thread != std::this_thread::get_id()) {
    return rt.Finish(Err(CudaError::kStreamCaptureWrongThread,
                         "the capture must be ended by the thread that began it"));
  }
  // Every other stream of the capture must have joined back: its tail is an ancestor of the
  // origin's tail.
  std::unordered_set<const g::Node*> ancestors;
  std::vector<const g::Node*> todo(it->second.tail.begin(), it->second.tail.end());
  while (!todo.empty()) {
    const g::Node* n = todo.back();
    todo.pop_back();
    if (!ancestors.insert(n).second) continue;
    todo.insert(todo.end(), n->deps.begin(), n->deps.end());
  }
  bool unjoined = false;
  for (auto& [sid, cs] : s.streams) {
    if (cs.capture != capture || sid == *id) continue;
    for (const g::Node* n : cs.tail) unjoined = unjoined || !ancestors.contains(n);
  }
  std::unique_ptr<g::Graph> captured = std::move(capture->graph);
  const bool invalidated = capture->invalidated;
  std::erase_if(s.streams, [&](const auto& e) { return e.second.capture == capture; });
  std::erase_if(s.events, [&](const auto& e) { return e.second.capture == capture; });
  s.captures.erase(capture->id);
  g::UpdateActive(rt, s);
  *graph = nullptr;
  if (invalidated || unjoined) {
    g::ForgetNodes(s, *captured);
    if (invalidated) {
      return rt.Finish(Err(CudaError::kStreamCaptureInvalidated, "the capture was invalidated"));
    }
    return rt.Finish(Err(CudaError::kStreamCaptureUnjoined,
                         "a stream forked into the capture did not join back"));
  }
  g::Graph* raw = captured.release();
  s.graphs.insert(raw);
  *graph = reinterpret_cast<cudaGraph_t>(raw);
  return rt.Finish(CudaStatus::Ok());
}

cudaError_t IsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (status == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null status"));
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  *status = cudaStreamCaptureStatusNone;
  if (!rt.CaptureActive()) return cudaSuccess;
  g::GraphState& s = g::State();
  MutexLock lock(s.mu);
  auto it = s.streams.find(*id);
  if (it == s.streams.end()) {
    if (*id == 0) {
      for (auto& [sid, cs] : s.streams) {
        if (cs.blocking) {
          return rt.Finish(Err(CudaError::kStreamCaptureImplicit,
                               "the legacy stream is implicitly part of a capture"));
        }
      }
    }
    return cudaSuccess;
  }
  *status = it->second.capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                            : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t GetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                           unsigned long long* id_out, cudaGraph_t* graph_out,  // NOLINT
                           const cudaGraphNode_t** deps_out, const cudaGraphEdgeData** edges_out,
                           size_t* num_deps_out, bool per_thread) {
  Runtime& rt = Runtime::Get();
  if (status == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null status"));
  CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
  if (!id.ok()) return rt.Finish(id.status());
  g::GraphState& s = g::State();
  MutexLock lock(s.mu);
  auto it = s.streams.find(*id);
  if (it == s.streams.end()) {
    *status = cudaStreamCaptureStatusNone;
    if (num_deps_out) *num_deps_out = 0;
    return cudaSuccess;
  }
  g::CapturingStream& cs = it->second;
  *status =
      cs.capture->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  if (id_out) *id_out = cs.capture->id;
  // The graph under construction is not yet the program's to destroy: not registered.
  if (graph_out) *graph_out = reinterpret_cast<cudaGraph_t>(cs.capture->graph.get());
  cs.info_deps.clear();
  for (g::Node* n : cs.tail) cs.info_deps.push_back(reinterpret_cast<cudaGraphNode_t>(n));
  cs.info_edges.assign(cs.tail.size(), cudaGraphEdgeData{});
  if (deps_out) *deps_out = cs.info_deps.data();
  if (edges_out) *edges_out = cs.info_edges.data();
  if (num_deps_out) *num_deps_out = cs.tail.size();
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) noexcept {
  if (mode == nullptr) return cudaErrorInvalidValue;
  if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
      *mode != cudaStreamCaptureModeRelaxed) {
    return cudaErrorInvalidValue;
  }
  std::swap(flyt::runtime::t_mode, *mode);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) noexcept {
  return Guard("cudaStreamBeginCapture", [&] { return BeginCapture(stream, mode, false); });
}
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                        enum cudaStreamCaptureMode mode) noexcept {
  return Guard("cudaStreamBeginCapture_ptsz", [&] { return BeginCapture(stream, mode, true); });
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) noexcept {
  return Guard("cudaStreamEndCapture", [&] { return EndCapture(stream, pGraph, false); });
}
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* pGraph) noexcept {
  return Guard("cudaStreamEndCapture_ptsz", [&] { return EndCapture(stream, pGraph, true); });
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                  enum cudaStreamCaptureStatus* pCaptureStatus) noexcept {
  return Guard("cudaStreamIsCapturing", [&] { return IsCapturing(stream, pCaptureStatus, false); });
}
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                       enum cudaStreamCaptureStatus* pCaptureStatus) noexcept {
  return Guard("cudaStreamIsCapturing_ptsz",
               [&] { return IsCapturing(stream, pCaptureStatus, true); });
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                     enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out,  // NOLINT
                                     cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) noexcept {
  return Guard("cudaStreamGetCaptureInfo", [&] {
    return GetCaptureInfo(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                          edgeData_out, numDependencies_out, false);
  });
}
cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
                                          enum cudaStreamCaptureStatus* captureStatus_out,
                                          unsigned long long* id_out,  // NOLINT
                                          cudaGraph_t* graph_out,
                                          const cudaGraphNode_t** dependencies_out,
                                          const cudaGraphEdgeData** edgeData_out,
                                          size_t* numDependencies_out) noexcept {
  return Guard("cudaStreamGetCaptureInfo_ptsz", [&] {
    return GetCaptureInfo(stream, captureStatus_out, id_out, graph_out, dependencies_out,
                          edgeData_out, numDependencies_out, true);
  });
}

}  // extern "C"
