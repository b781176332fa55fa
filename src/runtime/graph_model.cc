// The client-side graph model (graph_model.h): graph records, flattening, segmenting and the
// wire form an exec is built from.
#include "runtime/graph_model.h"

#include <algorithm>
#include <cstring>

namespace flyt::runtime::graphs {
namespace {

using remote::CudaError;

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

}  // namespace

GraphState& State() {
  static GraphState* state = new GraphState();
  return *state;
}

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
    c.host_fn = n->host_fn;
    c.host_data = n->host_data;
    c.cloned_from = n.get();
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

CudaStatus MakeMemcpyNode(Runtime& rt, std::unique_ptr<Node>& node, void* dst, const void* src,
                          size_t count, cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return Error(CudaError::kInvalidMemcpyDirection, "unknown copy kind");
  }
  const bool dst_device = rt.IsDeviceRange(dst, count);
  const bool src_device = rt.IsDeviceRange(src, count);
  if ((kind == cudaMemcpyDeviceToDevice && !(dst_device && src_device)) ||
      (kind == cudaMemcpyHostToDevice && !dst_device) ||
      (kind == cudaMemcpyDeviceToHost && !src_device)) {
    return Error(CudaError::kInvalidValue, "copy range is not inside a device allocation");
  }
  node = std::make_unique<Node>();
  node->type = cudaGraphNodeTypeMemcpy;
  node->dst = dst;
  node->src = src;
  node->count = count;
  node->device_to_device = dst_device && src_device;
  return CudaStatus::Ok();
}

CudaStatus MakeMemsetNode(Runtime& rt, const cudaMemsetParams* p, std::unique_ptr<Node>& node) {
  if (p == nullptr) return Error(CudaError::kInvalidValue, "null parameters");
  if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) {
    return Error(CudaError::kInvalidValue, "elementSize must be 1, 2 or 4");
  }
  const size_t height = p->height == 0 ? 1 : p->height;
  const size_t row = p->width * p->elementSize;
  if (height > 1 && p->pitch < row) return Error(CudaError::kInvalidValue, "pitch smaller than a row");
  const size_t span = (height > 1 ? p->pitch * (height - 1) : 0) + row;
  if (p->width == 0 || !rt.IsDeviceRange(p->dst, span)) {
    return Error(CudaError::kInvalidValue, "memset range is not inside a device allocation");
  }
  node = std::make_unique<Node>();
  node->type = cudaGraphNodeTypeMemset;
  node->dst = p->dst;
  node->value = p->value;
  node->element_size = p->elementSize;
  node->width = p->width;
  node->height = height;
  node->pitch = height > 1 ? p->pitch : row;
  return CudaStatus::Ok();
}

CudaStatus MakeHostNode(const cudaHostNodeParams* p, std::unique_ptr<Node>& node) {
  if (p == nullptr || p->fn == nullptr) return Error(CudaError::kInvalidValue, "null host function");
  node = std::make_unique<Node>();
  node->type = cudaGraphNodeTypeHost;
  cudaHostFn_t fn = p->fn;
  void* data = p->userData;
  node->host = [fn, data](cudaError_t) { fn(data); };
  node->host_fn = fn;
  node->host_data = data;
  return CudaStatus::Ok();
}

Node* ExecNodeOf(Exec& exec, cudaGraphNode_t node, Step** step) {
  auto pos = exec.position.find(reinterpret_cast<const Node*>(node));
  if (pos == exec.position.end()) return nullptr;
  *step = &exec.steps[pos->second.first];
  return const_cast<Node*>((*step)->nodes[pos->second.second]);
}

CudaStatus Resend(Runtime& rt, Exec& exec, Step& step) {
  if (step.server_id == 0 || exec.generation != rt.generation()) return CudaStatus::Ok();
  FLYT_CUDA_RETURN_IF_ERROR(BuildWire(rt, step));
  FLYT_CUDA_ASSIGN_OR_RETURN(remote::Connection * conn, rt.Connection());
  return conn->GraphExecUpdate({step.server_id, step.wire});
}

}  // namespace flyt::runtime::graphs
