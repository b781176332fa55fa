// flyt's libcudart.so.13: the CUDA runtime's graphs family (issue 17). See runtime.h.
//
// Graphs are client objects: cudaGraph_t / cudaGraphNode_t / cudaGraphExec_t point at records
// here (looked up, never trusted). Stream capture records the operations issued on a capturing
// stream as nodes instead of sending them. cudaGraphInstantiate flattens the graph (child graphs
// inlined) into a topological order and sends it whole once (GraphExecCreate); a launch is one
// posted GraphLaunch. Host nodes and copies to or from host memory run in this process: an exec
// that holds some is split into segments at them, launched in order (a server segment, then the
// host step after its stream has drained, then the next segment).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "runtime/exports.h"
#include "runtime/runtime.h"

namespace flyt::runtime {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

struct Graph;

struct Node {
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  Graph* graph = nullptr;
  std::vector<Node*> deps;
  // kernel
  FunctionRecord* function = nullptr;
  const void* func = nullptr;
  dim3 grid, block;
  uint32_t shared_bytes = 0;
  remote::Bytes params;
  std::vector<void*> args;  // pointers into params, by ordinal (KernelNodeGetParams)
  // memcpy (1D)
  void* dst = nullptr;
  const void* src = nullptr;
  size_t count = 0;
  bool device_to_device = false;
  // memset
  unsigned value = 0;
  unsigned element_size = 1;
  size_t width = 0, height = 1, pitch = 0;
  // host
  std::function<void(cudaError_t)> host;
  // event
  uint64_t event_id = 0;
  cudaEvent_t event = nullptr;
  // child graph
  std::unique_ptr<Graph> child;
};

struct Graph {
  std::vector<std::unique_ptr<Node>> nodes;
};

// A node in the flattened, ordered form an exec is built from.
struct FlatNode {
  const Node* node;
  std::vector<uint32_t> deps;
};

struct Step {
  uint64_t server_id = 0;                   // a server segment, else a client step
  std::vector<const Node*> nodes;           // server segment: its nodes in order; client: one
  std::vector<std::vector<uint32_t>> deps;  // segment-local
  std::vector<remote::GraphNode> wire;
};

struct Exec {
  std::vector<Step> steps;
  std::unique_ptr<Graph> source;  // the instantiated graph (a clone): nodes the steps point at
  std::unordered_map<const Node*, std::pair<size_t, size_t>> position;  // by original node
  uint64_t generation = 0;
  unsigned long long flags = 0;  // NOLINT(runtime/int)
};

struct Capture {
  uint64_t id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  bool invalidated = false;
  uint64_t origin = 0;
  std::unique_ptr<Graph> graph;
};
struct CapturingStream {
  Capture* capture = nullptr;
  std::vector<Node*> tail;
  bool blocking = true;
  std::vector<cudaGraphNode_t> info_deps;  // what GetCaptureInfo last handed out
  std::vector<cudaGraphEdgeData> info_edges;
};
struct CapturedEvent {
  Capture* capture = nullptr;
  std::vector<Node*> nodes;
};

struct GraphState {
  Mutex mu;
  std::unordered_set<Graph*> graphs FLYT_GUARDED_BY(mu);
  std::unordered_map<Node*, Graph*> nodes FLYT_GUARDED_BY(mu);
  std::unordered_map<Exec*, std::unique_ptr<Exec>> execs FLYT_GUARDED_BY(mu);
  std::map<uint64_t, std::unique_ptr<Capture>> captures FLYT_GUARDED_BY(mu);
  std::map<uint64_t, CapturingStream> streams FLYT_GUARDED_BY(mu);
  std::map<uint64_t, CapturedEvent> events FLYT_GUARDED_BY(mu);
  uint64_t next_capture FLYT_GUARDED_BY(mu) = 1;
};

GraphState& State() {
  static GraphState* state = new GraphState();
  return *state;
}

thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

void UpdateActive(Runtime& rt, GraphState& s) FLYT_REQUIRES(s.mu) {
  rt.captures_active_.store(static_cast<int>(s.streams.size()));
}

Node* FindNode(GraphState& s, cudaGraphNode_t handle) FLYT_REQUIRES(s.mu) {
  auto* node = reinterpret_cast<Node*>(handle);
  return s.nodes.contains(node) ? node : nullptr;
}
Graph* FindGraph(GraphState& s, cudaGraph_t handle) FLYT_REQUIRES(s.mu) {
  auto* graph = reinterpret_cast<Graph*>(handle);
  return s.graphs.contains(graph) ? graph : nullptr;
}

Node* AddNode(GraphState& s, Graph& graph, std::unique_ptr<Node> node, std::vector<Node*> deps)
    FLYT_REQUIRES(s.mu) {
  node->graph = &graph;
  node->deps = std::move(deps);
  Node* raw = node.get();
  graph.nodes.push_back(std::move(node));
  s.nodes[raw] = &graph;
  return raw;
}

void ForgetNodes(GraphState& s, Graph& graph) FLYT_REQUIRES(s.mu) {
  for (auto& n : graph.nodes) {
    s.nodes.erase(n.get());
    if (n->child) ForgetNodes(s, *n->child);
  }
}

// A deep copy (child graphs too); `map` receives old node -> new node. Nodes of a copy are not
// registered (they are reachable only through their owner).
std::unique_ptr<Graph> Clone(const Graph& g, std::unordered_map<const Node*, Node*>* map) {
  auto out = std::make_unique<Graph>();
  std::unordered_map<const Node*, Node*> local;
  auto& m = map ? *map : local;
  for (const auto& n : g.nodes) {
    auto copy = std::make_unique<Node>();
    Node& c = *copy;
    c.type = n->type;
    c.function = n->function;
    c.func = n->func;
    c.grid = n->grid;
    c.block = n->block;
    c.shared_bytes = n->shared_bytes;
    c.params = n->params;
    c.dst = n->dst;
    c.src = n->src;
    c.count = n->count;
    c.device_to_device = n->device_to_device;
    c.value = n->value;
    c.element_size = n->element_size;
    c.width = n->width;
    c.height = n->height;
    c.pitch = n->pitch;
    c.host = n->host;
    c.event_id = n->event_id;
    c.event = n->event;
    if (n->child) c.child = Clone(*n->child, nullptr);
    c.graph = out.get();
    m[n.get()] = copy.get();
    out->nodes.push_back(std::move(copy));
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (Node* d : g.nodes[i]->deps) out->nodes[i]->deps.push_back(m.at(d));
  }
  return out;
}

// Appends g's nodes to `out` in a topological order (child graphs inlined); roots depend on
// `entry`. `exits` receives the flat indices that later nodes depending on g must wait for.
// `top` receives, for g's own nodes, where they landed. False when g has a cycle.
bool Flatten(const Graph& g, const std::vector<uint32_t>& entry, std::vector<FlatNode>& out,
             std::vector<uint32_t>& exits, std::unordered_map<const Node*, size_t>* top) {
  std::unordered_map<const Node*, size_t> pending;
  std::unordered_map<const Node*, std::vector<const Node*>> users;
  std::vector<const Node*> ready;
  for (const auto& n : g.nodes) {
    pending[n.get()] = n->deps.size();
    for (const Node* d : n->deps) users[d].push_back(n.get());
    if (n->deps.empty()) ready.push_back(n.get());
  }
  std::unordered_map<const Node*, std::vector<uint32_t>> exit_of;
  size_t done = 0;
  for (size_t r = 0; r < ready.size(); ++r) {
    const Node* n = ready[r];
    ++done;
    std::vector<uint32_t> deps;
    if (n->deps.empty()) {
      deps = entry;
    } else {
      for (const Node* d : n->deps) {
        const auto& e = exit_of[d];
        deps.insert(deps.end(), e.begin(), e.end());
      }
      std::sort(deps.begin(), deps.end());
      deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    }
    if (n->child) {
      std::vector<uint32_t> child_exits;
      if (!Flatten(*n->child, deps, out, child_exits, nullptr)) return false;
      exit_of[n] = child_exits.empty() ? deps : child_exits;
    } else {
      if (top) (*top)[n] = out.size();
      out.push_back({n, deps});
      exit_of[n] = {static_cast<uint32_t>(out.size() - 1)};
    }
    for (const Node* u : users[n]) {
      if (--pending[u] == 0) ready.push_back(u);
    }
  }
  if (done != g.nodes.size()) return false;
  for (const auto& [node, e] : exit_of) exits.insert(exits.end(), e.begin(), e.end());
  std::sort(exits.begin(), exits.end());
  exits.erase(std::unique(exits.begin(), exits.end()), exits.end());
  return true;
}

bool RunsOnClient(const Node& n) {
  return n.type == cudaGraphNodeTypeHost ||
         (n.type == cudaGraphNodeTypeMemcpy && !n.device_to_device);
}

// Splits the flat order into steps at the nodes that run on the client.
std::vector<Step> Split(const std::vector<FlatNode>& flat,
                        std::unordered_map<const Node*, size_t>& top,
                        std::unordered_map<const Node*, std::pair<size_t, size_t>>& position) {
  std::vector<Step> steps;
  std::vector<std::pair<size_t, size_t>> where(flat.size());
  for (size_t i = 0; i < flat.size(); ++i) {
    const Node& n = *flat[i].node;
    if (RunsOnClient(n)) {
      Step step;
      step.nodes.push_back(&n);
      step.deps.emplace_back();
      steps.push_back(std::move(step));
      where[i] = {steps.size() - 1, 0};
      continue;
    }
    if (steps.empty() || RunsOnClient(*steps.back().nodes.front())) steps.emplace_back();
    Step& step = steps.back();
    std::vector<uint32_t> deps;
    for (uint32_t d : flat[i].deps) {
      if (where[d].first == steps.size() - 1)
        deps.push_back(static_cast<uint32_t>(where[d].second));
    }
    where[i] = {steps.size() - 1, step.nodes.size()};
    step.nodes.push_back(&n);
    step.deps.push_back(std::move(deps));
  }
  for (const auto& [node, index] : top) position[node] = where[index];
  return steps;
}

// The wire form of a server segment (resolving kernels and events for this generation).
CudaStatus BuildWire(Runtime& rt, Step& step) {
  step.wire.clear();
  for (size_t i = 0; i < step.nodes.size(); ++i) {
    const Node& n = *step.nodes[i];
    remote::GraphNode w;
    w.deps = step.deps[i];
    switch (n.type) {
      case cudaGraphNodeTypeKernel: {
        FLYT_CUDA_ASSIGN_OR_RETURN(LaunchTarget target, rt.PrepareLaunch(*n.function));
        w.kind = 1;
        w.function = target.function_id;
        w.grid = {n.grid.x, n.grid.y, n.grid.z};
        w.block = {n.block.x, n.block.y, n.block.z};
        w.shared_bytes = n.shared_bytes;
        w.params = n.params;
        break;
      }
      case cudaGraphNodeTypeMemcpy:
        w.kind = 2;
        w.dst = reinterpret_cast<uint64_t>(n.dst);
        w.src = reinterpret_cast<uint64_t>(n.src);
        w.bytes = n.count;
        break;
      case cudaGraphNodeTypeMemset:
        w.kind = 3;
        w.dst = reinterpret_cast<uint64_t>(n.dst);
        w.value = n.value;
        w.element_size = n.element_size;
        w.width = n.width;
        w.height = n.height;
        w.pitch = n.pitch;
        break;
      case cudaGraphNodeTypeEventRecord:
      case cudaGraphNodeTypeWaitEvent: {
        FLYT_CUDA_ASSIGN_OR_RETURN(EventRecord e, rt.FindEvent(n.event));
        w.kind = n.type == cudaGraphNodeTypeEventRecord ? 4 : 5;
        w.event = e.id;
        break;
      }
      default:
        w.kind = 0;
        break;
    }
    step.wire.push_back(std::move(w));
  }
  return CudaStatus::Ok();
}

// Creates (or, after a device reset, re-creates) the exec's server segments.
CudaStatus Upload(Runtime& rt, Exec& exec) {
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, rt.Connection());
  for (Step& step : exec.steps) {
    if (RunsOnClient(*step.nodes.front())) continue;
    FLYT_CUDA_RETURN_IF_ERROR(BuildWire(rt, step));
    step.server_id = rt.NewId();
    FLYT_CUDA_RETURN_IF_ERROR(conn->GraphExecCreate({step.server_id, step.wire}));
  }
  exec.generation = rt.generation();
  return CudaStatus::Ok();
}

CudaResult<std::unique_ptr<Exec>> Instantiate(Runtime& rt, const Graph& graph,
                                              unsigned long long flags) {  // NOLINT
  auto exec = std::make_unique<Exec>();
  std::unordered_map<const Node*, Node*> map;
  exec->source = Clone(graph, &map);
  std::vector<FlatNode> flat;
  std::vector<uint32_t> exits;
  std::unordered_map<const Node*, size_t> top;
  if (!Flatten(*exec->source, {}, flat, exits, &top)) {
    return Error(CudaError::kInvalidValue, "the graph has a cycle");
  }
  std::unordered_map<const Node*, std::pair<size_t, size_t>> position;
  exec->steps = Split(flat, top, position);
  for (const auto& [orig, copy] : map) {
    if (auto it = position.find(copy); it != position.end()) exec->position[orig] = it->second;
  }
  exec->flags = flags;
  FLYT_CUDA_RETURN_IF_ERROR(Upload(rt, *exec));
  return exec;
}

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

CudaResult<Node*> MakeKernelNode(Runtime& rt, const cudaKernelNodeParams* p,
                                 std::unique_ptr<Node>& node) {
  if (p == nullptr) return Error(CudaError::kInvalidValue, "null kernel node parameters");
  FunctionRecord* f = rt.FindFunction(p->func);
  if (f == nullptr) f = rt.FromKernelHandle(p->func);
  if (f == nullptr) {
    return Error(CudaError::kInvalidDeviceFunction, "not a kernel this program registered");
  }
  if (p->gridDim.x == 0 || p->gridDim.y == 0 || p->gridDim.z == 0 || p->blockDim.x == 0 ||
      p->blockDim.y == 0 || p->blockDim.z == 0) {
    return Error(CudaError::kInvalidConfiguration, "a grid or block dimension is 0");
  }
  if (p->extra != nullptr) {
    return Error(CudaError::kNotSupported, "kernel node parameters through `extra`");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(LaunchTarget target, rt.PrepareLaunch(*f));
  const cuda::KernelInfo& layout = *target.layout;
  node = std::make_unique<Node>();
  node->type = cudaGraphNodeTypeKernel;
  node->function = f;
  node->func = p->func;
  node->grid = p->gridDim;
  node->block = p->blockDim;
  node->shared_bytes = p->sharedMemBytes;
  node->params.resize(layout.param_bytes);
  if (!layout.params.empty() && p->kernelParams == nullptr) {
    return Error(CudaError::kInvalidValue, "kernel " + target.name + " takes arguments");
  }
  node->args.assign(layout.params.size(), nullptr);
  for (const cuda::KernelParam& param : layout.params) {
    if (uint64_t{param.offset} + param.size_bytes > node->params.size() ||
        param.ordinal >= node->args.size()) {
      return Error(CudaError::kInvalidKernelImage, "parameter layout overruns its buffer");
    }
    if (param.size_bytes != 0) {
      std::memcpy(node->params.data() + param.offset, p->kernelParams[param.ordinal],
                  param.size_bytes);
    }
  }
  for (const cuda::KernelParam& param : layout.params) {
    node->args[param.ordinal] = node->params.data() + param.offset;
  }
  return node.get();
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
namespace g = flyt::runtime;

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
    CudaResult<g::StreamRecord> record = rt.FindStream(stream);
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

// Adds a node built by `make` (which returns its status) after `deps`.
template <typename Make>
cudaError_t AddNode(const char* name, cudaGraphNode_t* out, cudaGraph_t graph,
                    const cudaGraphNode_t* deps, size_t num_deps, Make&& make) {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    if (out == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null pGraphNode"));
    if (num_deps != 0 && deps == nullptr) {
      return rt.Finish(Err(CudaError::kInvalidValue, "null pDependencies"));
    }
    std::unique_ptr<g::Node> node;
    CudaStatus made = make(rt, node);
    if (!made.ok()) return rt.Finish(made);
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, graph);
    if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
    std::vector<g::Node*> resolved;
    for (size_t i = 0; i < num_deps; ++i) {
      g::Node* d = g::FindNode(s, deps[i]);
      if (d == nullptr || d->graph != gr) {
        return rt.Finish(Err(CudaError::kInvalidValue, "a dependency is not a node of the graph"));
      }
      if (std::find(resolved.begin(), resolved.end(), d) != resolved.end()) {
        return rt.Finish(Err(CudaError::kInvalidValue, "a dependency is listed twice"));
      }
      resolved.push_back(d);
    }
    *out = reinterpret_cast<cudaGraphNode_t>(g::AddNode(s, *gr, std::move(node), resolved));
    return rt.Finish(CudaStatus::Ok());
  });
}

CudaStatus MemcpyNode(Runtime& rt, std::unique_ptr<g::Node>& node, void* dst, const void* src,
                      size_t count, cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return Err(CudaError::kInvalidMemcpyDirection, "unknown copy kind");
  }
  const bool dst_device = rt.IsDeviceRange(dst, count);
  const bool src_device = rt.IsDeviceRange(src, count);
  if ((kind == cudaMemcpyDeviceToDevice && !(dst_device && src_device)) ||
      (kind == cudaMemcpyHostToDevice && !dst_device) ||
      (kind == cudaMemcpyDeviceToHost && !src_device)) {
    return Err(CudaError::kInvalidValue, "copy range is not inside a device allocation");
  }
  node = std::make_unique<g::Node>();
  node->type = cudaGraphNodeTypeMemcpy;
  node->dst = dst;
  node->src = src;
  node->count = count;
  node->device_to_device = dst_device && src_device;
  return CudaStatus::Ok();
}

cudaError_t Launch(cudaGraphExec_t handle, cudaStream_t stream, bool per_thread) {
  return Guard("cudaGraphLaunch", [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus st = rt.StickyStatus(); !st.ok()) return rt.Finish(st);
    CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
    if (!id.ok()) return rt.Finish(id.status());
    CudaResult<flyt::remote::Connection*> conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    g::GraphState& s = g::State();
    std::vector<std::pair<uint64_t, std::function<void()>>> steps;
    {
      MutexLock lock(s.mu);
      auto it = s.execs.find(reinterpret_cast<g::Exec*>(handle));
      if (it == s.execs.end()) {
        return rt.Finish(Err(CudaError::kInvalidValue, "not a graph exec"));
      }
      g::Exec& exec = *it->second;
      if (rt.CaptureActive() && s.streams.contains(*id)) {
        // Launched into a capture: the exec's graph becomes a child graph node.
        g::CapturingStream& cs = s.streams[*id];
        auto node = std::make_unique<g::Node>();
        node->type = cudaGraphNodeTypeGraph;
        node->child = g::Clone(*exec.source, nullptr);
        g::Node* added = g::AddNode(s, *cs.capture->graph, std::move(node), cs.tail);
        cs.tail = {added};
        return rt.Finish(CudaStatus::Ok());
      }
      if (exec.generation != rt.generation()) {
        if (CudaStatus up = g::Upload(rt, exec); !up.ok()) return rt.Finish(up);
      }
      for (g::Step& step : exec.steps) {
        if (step.server_id != 0) {
          steps.push_back({step.server_id, nullptr});
          continue;
        }
        const g::Node* n = step.nodes.front();
        if (n->type == cudaGraphNodeTypeHost) {
          auto fn = n->host;
          steps.push_back({0, [fn] { fn(cudaSuccess); }});
        } else {
          void* dst = n->dst;
          const void* src = n->src;
          size_t count = n->count;
          steps.push_back({0, [=] {
                             if (per_thread) {
                               (void)cudaMemcpyAsync_ptsz(dst, src, count, cudaMemcpyDefault,
                                                          stream);
                             } else {
                               (void)cudaMemcpyAsync(dst, src, count, cudaMemcpyDefault, stream);
                             }
                           }});
        }
      }
    }
    // Managed memory the graph's kernels may read is pushed first, and the host mirror is
    // marked stale, as before a single launch.
    if (CudaStatus m = rt.ManagedBeforeLaunch(*id); !m.ok()) return rt.Finish(m);
    for (auto& [server_id, fn] : steps) {
      if (server_id != 0) {
        if (CudaStatus posted = (*conn)->GraphLaunch({server_id, *id}); !posted.ok()) {
          return rt.Finish(posted);
        }
        continue;
      }
      // A host step runs once the stream has drained (as cudaLaunchHostFunc does).
      cudaError_t synced = rt.FinishSync((*conn)->StreamSynchronize({*id}).status());
      if (synced != cudaSuccess) return synced;
      fn();
    }
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t InstantiateInto(cudaGraphExec_t* out, cudaGraph_t graph,
                            unsigned long long flags) {  // NOLINT
  return Guard("cudaGraphInstantiate", [&] {
    Runtime& rt = Runtime::Get();
    if (out == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null pGraphExec"));
    constexpr unsigned long long kKnown =  // NOLINT
        cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
        cudaGraphInstantiateFlagUseNodePriority;
    if ((flags & ~kKnown) != 0) {
      return rt.Finish(Err(CudaError::kInvalidValue, "unsupported instantiate flags"));
    }
    if (CudaStatus st = rt.StickyStatus(); !st.ok()) return rt.Finish(st);
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, graph);
    if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
    CudaResult<std::unique_ptr<g::Exec>> exec = g::Instantiate(rt, *gr, flags);
    if (!exec.ok()) return rt.Finish(exec.status());
    g::Exec* raw = exec->get();
    s.execs[raw] = std::move(exec).value();
    *out = reinterpret_cast<cudaGraphExec_t>(raw);
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t AddEventNode(const char* name, cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                         const cudaGraphNode_t* deps, size_t num, cudaEvent_t event,
                         cudaGraphNodeType type) {
  return AddNode(name, pGraphNode, graph, deps, num,
                 [&](Runtime& rt, std::unique_ptr<g::Node>& node) {
                   CudaResult<g::EventRecord> e = rt.FindEvent(event);
                   if (!e.ok()) return e.status();
                   node = std::make_unique<g::Node>();
                   node->type = type;
                   node->event = event;
                   node->event_id = e->id;
                   return CudaStatus::Ok();
                 });
}

}  // namespace

extern "C" {

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) noexcept {
  if (mode == nullptr) return cudaErrorInvalidValue;
  if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
      *mode != cudaStreamCaptureModeRelaxed) {
    return cudaErrorInvalidValue;
  }
  std::swap(g::t_mode, *mode);
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

cudaError_t cudaGraphCreate(cudaGraph_t* pGraph, unsigned int flags) noexcept {
  return Guard("cudaGraphCreate", [&] {
    Runtime& rt = Runtime::Get();
    if (pGraph == nullptr || flags != 0) {
      return rt.Finish(Err(CudaError::kInvalidValue, "null pGraph or nonzero flags"));
    }
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    auto* graph = new g::Graph();
    s.graphs.insert(graph);
    *pGraph = reinterpret_cast<cudaGraph_t>(graph);
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) noexcept {
  return Guard("cudaGraphDestroy", [&] {
    Runtime& rt = Runtime::Get();
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, graph);
    if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
    g::ForgetNodes(s, *gr);
    s.graphs.erase(gr);
    delete gr;
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphClone(cudaGraph_t* pGraphClone, cudaGraph_t originalGraph) noexcept {
  return Guard("cudaGraphClone", [&] {
    Runtime& rt = Runtime::Get();
    if (pGraphClone == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null pGraphClone"));
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, originalGraph);
    if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
    g::Graph* copy = g::Clone(*gr, nullptr).release();
    for (auto& n : copy->nodes) s.nodes[n.get()] = copy;
    s.graphs.insert(copy);
    *pGraphClone = reinterpret_cast<cudaGraph_t>(copy);
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                   const struct cudaKernelNodeParams* pNodeParams) noexcept {
  return AddNode("cudaGraphAddKernelNode", pGraphNode, graph, pDependencies, numDependencies,
                 [&](Runtime& rt, std::unique_ptr<g::Node>& node) {
                   return g::MakeKernelNode(rt, pNodeParams, node).status();
                 });
}

cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                     const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                     void* dst, const void* src, size_t count,
                                     enum cudaMemcpyKind kind) noexcept {
  return AddNode("cudaGraphAddMemcpyNode1D", pGraphNode, graph, pDependencies, numDependencies,
                 [&](Runtime& rt, std::unique_ptr<g::Node>& node) {
                   return MemcpyNode(rt, node, dst, src, count, kind);
                 });
}

cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                   const struct cudaMemcpy3DParms* p) noexcept {
  return AddNode("cudaGraphAddMemcpyNode", pGraphNode, graph, pDependencies, numDependencies,
                 [&](Runtime& rt, std::unique_ptr<g::Node>& node) {
                   if (p == nullptr) return Err(CudaError::kInvalidValue, "null parameters");
                   // A linear copy only: no arrays, one row, no offsets.
                   if (p->srcArray || p->dstArray || p->extent.height > 1 || p->extent.depth > 1 ||
                       p->srcPos.x || p->srcPos.y || p->srcPos.z || p->dstPos.x || p->dstPos.y ||
                       p->dstPos.z) {
                     return Err(CudaError::kNotSupported,
                                "memcpy nodes other than a linear copy (use "
                                "cudaGraphAddMemcpyNode1D)");
                   }
                   return MemcpyNode(rt, node, p->dstPtr.ptr, p->srcPtr.ptr, p->extent.width,
                                     p->kind);
                 });
}

cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                   const struct cudaMemsetParams* p) noexcept {
  return AddNode("cudaGraphAddMemsetNode", pGraphNode, graph, pDependencies, numDependencies,
                 [&](Runtime& rt, std::unique_ptr<g::Node>& node) {
                   if (p == nullptr) return Err(CudaError::kInvalidValue, "null parameters");
                   if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) {
                     return Err(CudaError::kInvalidValue, "elementSize must be 1, 2 or 4");
                   }
                   const size_t height = p->height == 0 ? 1 : p->height;
                   const size_t row = p->width * p->elementSize;
                   if (height > 1 && p->pitch < row) {
                     return Err(CudaError::kInvalidValue, "pitch smaller than a row");
                   }
                   const size_t span = (height > 1 ? p->pitch * (height - 1) : 0) + row;
                   if (p->width == 0 || !rt.IsDeviceRange(p->dst, span)) {
                     return Err(CudaError::kInvalidValue,
                                "memset range is not inside a device allocation");
                   }
                   node = std::make_unique<g::Node>();
                   node->type = cudaGraphNodeTypeMemset;
                   node->dst = p->dst;
                   node->value = p->value;
                   node->element_size = p->elementSize;
                   node->width = p->width;
                   node->height = height;
                   node->pitch = height > 1 ? p->pitch : row;
                   return CudaStatus::Ok();
                 });
}

cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                 const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                 const struct cudaHostNodeParams* p) noexcept {
  return AddNode("cudaGraphAddHostNode", pGraphNode, graph, pDependencies, numDependencies,
                 [&](Runtime&, std::unique_ptr<g::Node>& node) {
                   if (p == nullptr || p->fn == nullptr) {
                     return Err(CudaError::kInvalidValue, "null host function");
                   }
                   node = std::make_unique<g::Node>();
                   node->type = cudaGraphNodeTypeHost;
                   cudaHostFn_t fn = p->fn;
                   void* data = p->userData;
                   node->host = [fn, data](cudaError_t) { fn(data); };
                   return CudaStatus::Ok();
                 });
}

cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                  const cudaGraphNode_t* pDependencies,
                                  size_t numDependencies) noexcept {
  return AddNode("cudaGraphAddEmptyNode", pGraphNode, graph, pDependencies, numDependencies,
                 [&](Runtime&, std::unique_ptr<g::Node>& node) {
                   node = std::make_unique<g::Node>();
                   return CudaStatus::Ok();
                 });
}

cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                        const cudaGraphNode_t* pDependencies,
                                        size_t numDependencies, cudaEvent_t event) noexcept {
  return AddEventNode("cudaGraphAddEventRecordNode", pGraphNode, graph, pDependencies,
                      numDependencies, event, cudaGraphNodeTypeEventRecord);
}

cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                      const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                      cudaEvent_t event) noexcept {
  return AddEventNode("cudaGraphAddEventWaitNode", pGraphNode, graph, pDependencies,
                      numDependencies, event, cudaGraphNodeTypeWaitEvent);
}

cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                       const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                       cudaGraph_t childGraph) noexcept {
  return Guard("cudaGraphAddChildGraphNode", [&] {
    std::unique_ptr<g::Graph> copy;
    {
      g::GraphState& s = g::State();
      MutexLock lock(s.mu);
      g::Graph* child = g::FindGraph(s, childGraph);
      if (child == nullptr) {
        return Runtime::Get().Finish(Err(CudaError::kInvalidValue, "not a graph"));
      }
      copy = g::Clone(*child, nullptr);
    }
    return AddNode("cudaGraphAddChildGraphNode", pGraphNode, graph, pDependencies, numDependencies,
                   [&](Runtime&, std::unique_ptr<g::Node>& node) {
                     node = std::make_unique<g::Node>();
                     node->type = cudaGraphNodeTypeGraph;
                     node->child = std::move(copy);
                     return CudaStatus::Ok();
                   });
  });
}

cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                     const cudaGraphNode_t* to, const cudaGraphEdgeData* edgeData,
                                     size_t numDependencies) noexcept {
  return Guard("cudaGraphAddDependencies", [&] {
    Runtime& rt = Runtime::Get();
    if (numDependencies != 0 && (from == nullptr || to == nullptr)) {
      return rt.Finish(Err(CudaError::kInvalidValue, "null from/to"));
    }
    if (edgeData != nullptr) {
      for (size_t i = 0; i < numDependencies; ++i) {
        if (edgeData[i].type != 0 || edgeData[i].from_port != 0 || edgeData[i].to_port != 0) {
          return rt.Finish(Err(CudaError::kNotSupported, "programmatic edges"));
        }
      }
    }
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, graph);
    if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
    for (size_t i = 0; i < numDependencies; ++i) {
      g::Node* f = g::FindNode(s, from[i]);
      g::Node* t = g::FindNode(s, to[i]);
      if (f == nullptr || t == nullptr || f->graph != gr || t->graph != gr || f == t) {
        return rt.Finish(Err(CudaError::kInvalidValue, "an edge's nodes are not of the graph"));
      }
      if (std::find(t->deps.begin(), t->deps.end(), f) != t->deps.end()) {
        return rt.Finish(Err(CudaError::kInvalidValue, "the edge exists already"));
      }
    }
    for (size_t i = 0; i < numDependencies; ++i) {
      g::FindNode(s, to[i])->deps.push_back(g::FindNode(s, from[i]));
    }
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes,
                              size_t* numNodes) noexcept {
  return Guard("cudaGraphGetNodes", [&] {
    Runtime& rt = Runtime::Get();
    if (numNodes == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null numNodes"));
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, graph);
    if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
    if (nodes != nullptr) {
      for (size_t i = 0; i < std::min(*numNodes, gr->nodes.size()); ++i) {
        nodes[i] = reinterpret_cast<cudaGraphNode_t>(gr->nodes[i].get());
      }
    }
    *numNodes = gr->nodes.size();
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t* roots,
                                  size_t* numRoots) noexcept {
  return Guard("cudaGraphGetRootNodes", [&] {
    Runtime& rt = Runtime::Get();
    if (numRoots == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null numRoots"));
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, graph);
    if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
    size_t n = 0;
    for (auto& node : gr->nodes) {
      if (!node->deps.empty()) continue;
      if (roots != nullptr && n < *numRoots)
        roots[n] = reinterpret_cast<cudaGraphNode_t>(node.get());
      ++n;
    }
    *numRoots = n;
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType* pType) noexcept {
  return Guard("cudaGraphNodeGetType", [&] {
    Runtime& rt = Runtime::Get();
    if (pType == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null pType"));
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Node* n = g::FindNode(s, node);
    if (n == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph node"));
    *pType = n->type;
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t* pDependencies,
                                         cudaGraphEdgeData* edgeData,
                                         size_t* pNumDependencies) noexcept {
  return Guard("cudaGraphNodeGetDependencies", [&] {
    Runtime& rt = Runtime::Get();
    if (pNumDependencies == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null count"));
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Node* n = g::FindNode(s, node);
    if (n == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph node"));
    for (size_t i = 0; pDependencies != nullptr && i < std::min(*pNumDependencies, n->deps.size());
         ++i) {
      pDependencies[i] = reinterpret_cast<cudaGraphNode_t>(n->deps[i]);
      if (edgeData) edgeData[i] = cudaGraphEdgeData{};
    }
    *pNumDependencies = n->deps.size();
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node,
                                         struct cudaKernelNodeParams* p) noexcept {
  return Guard("cudaGraphKernelNodeGetParams", [&] {
    Runtime& rt = Runtime::Get();
    if (p == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null parameters"));
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Node* n = g::FindNode(s, node);
    if (n == nullptr || n->type != cudaGraphNodeTypeKernel) {
      return rt.Finish(Err(CudaError::kInvalidValue, "not a kernel node"));
    }
    *p = cudaKernelNodeParams{};
    p->func = const_cast<void*>(n->func);
    p->gridDim = n->grid;
    p->blockDim = n->block;
    p->sharedMemBytes = n->shared_bytes;
    p->kernelParams = n->args.empty() ? nullptr : n->args.data();
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node,
                                         const struct cudaKernelNodeParams* p) noexcept {
  return Guard("cudaGraphKernelNodeSetParams", [&] {
    Runtime& rt = Runtime::Get();
    std::unique_ptr<g::Node> fresh;
    CudaResult<g::Node*> made = g::MakeKernelNode(rt, p, fresh);
    if (!made.ok()) return rt.Finish(made.status());
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Node* n = g::FindNode(s, node);
    if (n == nullptr || n->type != cudaGraphNodeTypeKernel) {
      return rt.Finish(Err(CudaError::kInvalidValue, "not a kernel node"));
    }
    n->function = fresh->function;
    n->func = fresh->func;
    n->grid = fresh->grid;
    n->block = fresh->block;
    n->shared_bytes = fresh->shared_bytes;
    n->params = std::move(fresh->params);
    n->args = std::move(fresh->args);
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) noexcept {  // NOLINT
  return InstantiateInto(pGraphExec, graph, flags);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags) noexcept {  // NOLINT
  return InstantiateInto(pGraphExec, graph, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) noexcept {
  return Launch(graphExec, stream, false);
}
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) noexcept {
  return Launch(graphExec, stream, true);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) noexcept {
  return Guard("cudaGraphExecDestroy", [&] {
    Runtime& rt = Runtime::Get();
    g::GraphState& s = g::State();
    std::unique_ptr<g::Exec> exec;
    {
      MutexLock lock(s.mu);
      auto it = s.execs.find(reinterpret_cast<g::Exec*>(graphExec));
      if (it == s.execs.end()) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph exec"));
      exec = std::move(it->second);
      s.execs.erase(it);
    }
    if (exec->generation != rt.generation()) return rt.Finish(CudaStatus::Ok());
    CudaResult<flyt::remote::Connection*> conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    for (const g::Step& step : exec->steps) {
      if (step.server_id == 0) continue;
      if (CudaStatus st = (*conn)->GraphExecDestroy({step.server_id}); !st.ok()) {
        return rt.Finish(st);
      }
    }
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                cudaGraphExecUpdateResultInfo* resultInfo) noexcept {
  return Guard("cudaGraphExecUpdate", [&] {
    Runtime& rt = Runtime::Get();
    if (resultInfo) *resultInfo = cudaGraphExecUpdateResultInfo{};
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    auto it = s.execs.find(reinterpret_cast<g::Exec*>(hGraphExec));
    g::Graph* gr = g::FindGraph(s, hGraph);
    if (it == s.execs.end() || gr == nullptr) {
      return rt.Finish(Err(CudaError::kInvalidValue, "not a graph exec or not a graph"));
    }
    g::Exec& exec = *it->second;
    auto fail = [&](cudaGraphExecUpdateResult why, const char* what) {
      if (resultInfo) resultInfo->result = why;
      return rt.Finish(Err(CudaError::kGraphExecUpdateFailure, what));
    };
    // The new graph must flatten to the same steps: same node types, same dependencies.
    std::unordered_map<const g::Node*, g::Node*> map;
    std::unique_ptr<g::Graph> source = g::Clone(*gr, &map);
    std::vector<g::FlatNode> flat;
    std::vector<uint32_t> exits;
    std::unordered_map<const g::Node*, size_t> top;
    if (!g::Flatten(*source, {}, flat, exits, &top)) {
      return fail(cudaGraphExecUpdateErrorTopologyChanged, "the graph has a cycle");
    }
    std::unordered_map<const g::Node*, std::pair<size_t, size_t>> position;
    std::vector<g::Step> steps = g::Split(flat, top, position);
    if (steps.size() != exec.steps.size()) {
      return fail(cudaGraphExecUpdateErrorTopologyChanged, "the graph's topology changed");
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      const g::Step& a = steps[i];
      const g::Step& b = exec.steps[i];
      if (a.nodes.size() != b.nodes.size() || a.deps != b.deps) {
        return fail(cudaGraphExecUpdateErrorTopologyChanged, "the graph's topology changed");
      }
      for (size_t j = 0; j < a.nodes.size(); ++j) {
        if (a.nodes[j]->type != b.nodes[j]->type) {
          return fail(cudaGraphExecUpdateErrorNodeTypeChanged, "a node's type changed");
        }
      }
    }
    CudaResult<flyt::remote::Connection*> conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    for (size_t i = 0; i < steps.size(); ++i) {
      steps[i].server_id = exec.steps[i].server_id;
      if (steps[i].server_id == 0) continue;
      if (CudaStatus b = g::BuildWire(rt, steps[i]); !b.ok()) return rt.Finish(b);
      if (exec.generation == rt.generation()) {
        if (CudaStatus st = (*conn)->GraphExecUpdate({steps[i].server_id, steps[i].wire});
            !st.ok()) {
          return rt.Finish(st);
        }
      }
    }
    // Nodes of the first graph keep naming their positions (cudaGraphExec*NodeSetParams).
    exec.steps = std::move(steps);
    exec.source = std::move(source);
    if (resultInfo) resultInfo->result = cudaGraphExecUpdateSuccess;
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                             const struct cudaKernelNodeParams* p) noexcept {
  return Guard("cudaGraphExecKernelNodeSetParams", [&] {
    Runtime& rt = Runtime::Get();
    std::unique_ptr<g::Node> fresh;
    CudaResult<g::Node*> made = g::MakeKernelNode(rt, p, fresh);
    if (!made.ok()) return rt.Finish(made.status());
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    auto it = s.execs.find(reinterpret_cast<g::Exec*>(hGraphExec));
    if (it == s.execs.end()) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph exec"));
    g::Exec& exec = *it->second;
    auto pos = exec.position.find(reinterpret_cast<g::Node*>(node));
    if (pos == exec.position.end()) {
      return rt.Finish(Err(CudaError::kInvalidValue, "the node is not in the exec's graph"));
    }
    g::Step& step = exec.steps[pos->second.first];
    auto* target = const_cast<g::Node*>(step.nodes[pos->second.second]);
    if (target->type != cudaGraphNodeTypeKernel) {
      return rt.Finish(Err(CudaError::kInvalidValue, "not a kernel node"));
    }
    target->function = fresh->function;
    target->func = fresh->func;
    target->grid = fresh->grid;
    target->block = fresh->block;
    target->shared_bytes = fresh->shared_bytes;
    target->params = std::move(fresh->params);
    target->args = std::move(fresh->args);
    if (exec.generation != rt.generation()) return rt.Finish(CudaStatus::Ok());
    if (CudaStatus b = g::BuildWire(rt, step); !b.ok()) return rt.Finish(b);
    CudaResult<flyt::remote::Connection*> conn = rt.Connection();
    if (!conn.ok()) return rt.Finish(conn.status());
    return rt.Finish((*conn)->GraphExecUpdate({step.server_id, step.wire}));
  });
}

}  // extern "C"
