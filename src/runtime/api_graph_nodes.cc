// Graph node parameters and topology after a node is made (see graph_model.h): the getters and
// setters of host, memset, memcpy and event nodes, their cudaGraphExec*NodeSetParams forms, the
// edges (dependent nodes, all edges, removal, node destruction), cudaGraphNodeFindInClone,
// cudaGraphExecGetFlags, cudaGraphUpload and cudaGraphDebugDotPrint. Everything is answered from
// the client's graph model; an exec's changed server segment is sent again as one message.
#include <cstdio>
#include <string>

#include "runtime/exports.h"
#include "runtime/graph_model.h"

using flyt::MutexLock;
using flyt::remote::CudaError;
using flyt::runtime::CudaResult;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
namespace g = flyt::runtime::graphs;

namespace {

CudaStatus Err(CudaError code, std::string message) { return {code, std::move(message)}; }

// Runs fn(rt, node) on the registered node `handle` of type `type` (any type when
// cudaGraphNodeTypeCount), under the graph state's lock.
template <typename Fn>
cudaError_t WithNode(const char* name, cudaGraphNode_t handle, cudaGraphNodeType type, Fn&& fn) {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Node* n = g::FindNode(s, handle);
    if (n == nullptr || (type != cudaGraphNodeTypeCount && n->type != type)) {
      return rt.Finish(Err(CudaError::kInvalidValue, std::string("not a graph node of that type")));
    }
    return rt.Finish(fn(rt, *n));
  });
}

// Runs fn(rt, node) on the exec's own copy of `handle` (of type `type`), then sends its server
// segment again.
template <typename Fn>
cudaError_t WithExecNode(const char* name, cudaGraphExec_t exec_handle, cudaGraphNode_t handle,
                         cudaGraphNodeType type, Fn&& fn) {
  return Guard(name, [&] {
    Runtime& rt = Runtime::Get();
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    auto it = s.execs.find(reinterpret_cast<g::Exec*>(exec_handle));
    if (it == s.execs.end()) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph exec"));
    g::Step* step = nullptr;
    g::Node* target = g::ExecNodeOf(*it->second, handle, &step);
    if (target == nullptr || target->type != type) {
      return rt.Finish(
          Err(CudaError::kInvalidValue, "not a node of that type in the exec's graph"));
    }
    if (CudaStatus changed = fn(rt, *target); !changed.ok()) return rt.Finish(changed);
    return rt.Finish(g::Resend(rt, *it->second, *step));
  });
}

// Copies the parameters of `fresh` (made by g::Make*Node) into `node`, keeping its place.
void TakeParams(g::Node& node, const g::Node& fresh) {
  node.dst = fresh.dst;
  node.src = fresh.src;
  node.count = fresh.count;
  node.device_to_device = fresh.device_to_device;
  node.value = fresh.value;
  node.element_size = fresh.element_size;
  node.width = fresh.width;
  node.height = fresh.height;
  node.pitch = fresh.pitch;
  node.host = fresh.host;
  node.host_fn = fresh.host_fn;
  node.host_data = fresh.host_data;
}

// A memcpy node's new 1D parameters; in an exec the copy must stay on the same side (a copy
// between device ranges runs on the server, one with host memory in this process).
CudaStatus SetMemcpy(Runtime& rt, g::Node& n, void* dst, const void* src, size_t count,
                     cudaMemcpyKind kind, bool in_exec) {
  std::unique_ptr<g::Node> fresh;
  FLYT_CUDA_RETURN_IF_ERROR(g::MakeMemcpyNode(rt, fresh, dst, src, count, kind));
  if (in_exec && fresh->device_to_device != n.device_to_device) {
    return Err(CudaError::kInvalidValue, "an exec's copy cannot change between device and host");
  }
  TakeParams(n, *fresh);
  return CudaStatus::Ok();
}

CudaStatus SetEvent(Runtime& rt, g::Node& n, cudaEvent_t event) {
  CudaResult<flyt::runtime::EventRecord> e = rt.FindEvent(event);
  if (!e.ok()) return e.status();
  n.event = event;
  n.event_id = e->id;
  return CudaStatus::Ok();
}

cudaError_t GetEvent(const char* name, cudaGraphNode_t node, cudaGraphNodeType type,
                     cudaEvent_t* out) {
  return WithNode(name, node, type, [&](Runtime&, g::Node& n) {
    if (out == nullptr) return Err(CudaError::kInvalidValue, "null event_out");
    *out = n.event;
    return CudaStatus::Ok();
  });
}

// Every edge of `graph` (from, to), in node order.
std::vector<std::pair<g::Node*, g::Node*>> Edges(const g::Graph& graph) {
  std::vector<std::pair<g::Node*, g::Node*>> edges;
  for (const auto& n : graph.nodes) {
    for (g::Node* d : n->deps) edges.emplace_back(d, n.get());
  }
  return edges;
}

const char* TypeName(cudaGraphNodeType t) {
  switch (t) {
    case cudaGraphNodeTypeKernel:
      return "kernel";
    case cudaGraphNodeTypeMemcpy:
      return "memcpy";
    case cudaGraphNodeTypeMemset:
      return "memset";
    case cudaGraphNodeTypeHost:
      return "host";
    case cudaGraphNodeTypeGraph:
      return "graph";
    case cudaGraphNodeTypeEmpty:
      return "empty";
    case cudaGraphNodeTypeWaitEvent:
      return "event wait";
    case cudaGraphNodeTypeEventRecord:
      return "event record";
    default:
      return "node";
  }
}

// The DOT form of `graph` (child graphs as clusters), node names prefixed with `prefix`.
void Dot(const g::Graph& graph, const std::string& prefix, std::string& out) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const g::Node& n = *graph.nodes[i];
    const std::string id = prefix + std::to_string(i);
    char line[512];
    if (n.type == cudaGraphNodeTypeGraph && n.child) {
      out += "subgraph cluster_" + id + " {\nlabel=\"child graph " + id + "\";\n";
      Dot(*n.child, id + "_", out);
      out += "}\n";
    }
    std::string detail;
    if (n.type == cudaGraphNodeTypeKernel) {
      std::snprintf(line, sizeof line, "\\n<<<(%u,%u,%u), (%u,%u,%u), %u>>>", n.grid.x, n.grid.y,
                    n.grid.z, n.block.x, n.block.y, n.block.z, n.shared_bytes);
      detail = line;
    } else if (n.type == cudaGraphNodeTypeMemcpy) {
      std::snprintf(line, sizeof line, "\\n%zu bytes %p <- %p", n.count, n.dst, n.src);
      detail = line;
    } else if (n.type == cudaGraphNodeTypeMemset) {
      std::snprintf(line, sizeof line, "\\n%p = 0x%x, %zu x %zu of %u bytes", n.dst, n.value,
                    n.width, n.height, n.element_size);
      detail = line;
    }
    out += "\"" + id + "\" [shape=box, label=\"" + TypeName(n.type) + " " + id + detail + "\"];\n";
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const g::Node* d : graph.nodes[i]->deps) {
      for (size_t j = 0; j < graph.nodes.size(); ++j) {
        if (graph.nodes[j].get() == d) {
          out +=
              "\"" + prefix + std::to_string(j) + "\" -> \"" + prefix + std::to_string(i) + "\";\n";
        }
      }
    }
  }
}

cudaError_t Upload(cudaGraphExec_t handle, cudaStream_t stream, bool per_thread) {
  return Guard("cudaGraphUpload", [&] {
    Runtime& rt = Runtime::Get();
    if (CudaStatus st = rt.StickyStatus(); !st.ok()) return rt.Finish(st);
    CudaResult<uint64_t> id = rt.ResolveStream(stream, per_thread);
    if (!id.ok()) return rt.Finish(id.status());
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    auto it = s.execs.find(reinterpret_cast<g::Exec*>(handle));
    if (it == s.execs.end()) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph exec"));
    // The exec's server segments were sent when it was instantiated; only an exec from before a
    // device reset has to be sent again.
    if (it->second->generation != rt.generation()) return rt.Finish(g::Upload(rt, *it->second));
    return rt.Finish(CudaStatus::Ok());
  });
}

}  // namespace

extern "C" {

cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node,
                                       struct cudaHostNodeParams* pNodeParams) noexcept {
  return WithNode("cudaGraphHostNodeGetParams", node, cudaGraphNodeTypeHost,
                  [&](Runtime&, g::Node& n) {
                    if (pNodeParams == nullptr) return Err(CudaError::kInvalidValue, "null params");
                    pNodeParams->fn = n.host_fn;
                    pNodeParams->userData = n.host_data;
                    return CudaStatus::Ok();
                  });
}

cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node,
                                       const struct cudaHostNodeParams* pNodeParams) noexcept {
  return WithNode("cudaGraphHostNodeSetParams", node, cudaGraphNodeTypeHost,
                  [&](Runtime&, g::Node& n) {
                    std::unique_ptr<g::Node> fresh;
                    FLYT_CUDA_RETURN_IF_ERROR(g::MakeHostNode(pNodeParams, fresh));
                    TakeParams(n, *fresh);
                    return CudaStatus::Ok();
                  });
}

cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node,
                                         struct cudaMemsetParams* pNodeParams) noexcept {
  return WithNode("cudaGraphMemsetNodeGetParams", node, cudaGraphNodeTypeMemset,
                  [&](Runtime&, g::Node& n) {
                    if (pNodeParams == nullptr) return Err(CudaError::kInvalidValue, "null params");
                    *pNodeParams = cudaMemsetParams{};
                    pNodeParams->dst = n.dst;
                    pNodeParams->value = n.value;
                    pNodeParams->elementSize = n.element_size;
                    pNodeParams->width = n.width;
                    pNodeParams->height = n.height;
                    pNodeParams->pitch = n.pitch;
                    return CudaStatus::Ok();
                  });
}

cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node,
                                         const struct cudaMemsetParams* pNodeParams) noexcept {
  return WithNode("cudaGraphMemsetNodeSetParams", node, cudaGraphNodeTypeMemset,
                  [&](Runtime& rt, g::Node& n) {
                    std::unique_ptr<g::Node> fresh;
                    FLYT_CUDA_RETURN_IF_ERROR(g::MakeMemsetNode(rt, pNodeParams, fresh));
                    TakeParams(n, *fresh);
                    return CudaStatus::Ok();
                  });
}

cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node,
                                         struct cudaMemcpy3DParms* pNodeParams) noexcept {
  return WithNode(
      "cudaGraphMemcpyNodeGetParams", node, cudaGraphNodeTypeMemcpy, [&](Runtime&, g::Node& n) {
        if (pNodeParams == nullptr) return Err(CudaError::kInvalidValue, "null params");
        *pNodeParams = cudaMemcpy3DParms{};
        pNodeParams->srcPtr = cudaPitchedPtr{const_cast<void*>(n.src), n.count, n.count, 1};
        pNodeParams->dstPtr = cudaPitchedPtr{n.dst, n.count, n.count, 1};
        pNodeParams->extent = cudaExtent{n.count, 1, 1};
        pNodeParams->kind = cudaMemcpyDefault;
        return CudaStatus::Ok();
      });
}

cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node,
                                         const struct cudaMemcpy3DParms* p) noexcept {
  return WithNode(
      "cudaGraphMemcpyNodeSetParams", node, cudaGraphNodeTypeMemcpy, [&](Runtime& rt, g::Node& n) {
        if (p == nullptr) return Err(CudaError::kInvalidValue, "null params");
        if (p->srcArray || p->dstArray || p->extent.height > 1 || p->extent.depth > 1 ||
            p->srcPos.x || p->srcPos.y || p->srcPos.z || p->dstPos.x || p->dstPos.y ||
            p->dstPos.z) {
          return Err(CudaError::kNotSupported, "memcpy nodes other than a linear copy");
        }
        return SetMemcpy(rt, n, p->dstPtr.ptr, p->srcPtr.ptr, p->extent.width, p->kind, false);
      });
}

cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void* dst, const void* src,
                                           size_t count, enum cudaMemcpyKind kind) noexcept {
  return WithNode(
      "cudaGraphMemcpyNodeSetParams1D", node, cudaGraphNodeTypeMemcpy,
      [&](Runtime& rt, g::Node& n) { return SetMemcpy(rt, n, dst, src, count, kind, false); });
}

cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node,
                                             cudaEvent_t* event_out) noexcept {
  return GetEvent("cudaGraphEventRecordNodeGetEvent", node, cudaGraphNodeTypeEventRecord,
                  event_out);
}
cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t* event_out) noexcept {
  return GetEvent("cudaGraphEventWaitNodeGetEvent", node, cudaGraphNodeTypeWaitEvent, event_out);
}
cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) noexcept {
  return WithNode("cudaGraphEventRecordNodeSetEvent", node, cudaGraphNodeTypeEventRecord,
                  [&](Runtime& rt, g::Node& n) { return SetEvent(rt, n, event); });
}
cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event) noexcept {
  return WithNode("cudaGraphEventWaitNodeSetEvent", node, cudaGraphNodeTypeWaitEvent,
                  [&](Runtime& rt, g::Node& n) { return SetEvent(rt, n, event); });
}

cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t* pDependentNodes,
                                           cudaGraphEdgeData* edgeData,
                                           size_t* pNumDependentNodes) noexcept {
  return WithNode(
      "cudaGraphNodeGetDependentNodes", node, cudaGraphNodeTypeCount, [&](Runtime&, g::Node& n) {
        if (pNumDependentNodes == nullptr) {
          return Err(CudaError::kInvalidValue, "null count");
        }
        size_t found = 0;
        for (const auto& other : n.graph->nodes) {
          if (std::find(other->deps.begin(), other->deps.end(), &n) == other->deps.end()) {
            continue;
          }
          if (pDependentNodes != nullptr && found < *pNumDependentNodes) {
            pDependentNodes[found] = reinterpret_cast<cudaGraphNode_t>(other.get());
            if (edgeData) edgeData[found] = cudaGraphEdgeData{};
          }
          ++found;
        }
        *pNumDependentNodes = found;
        return CudaStatus::Ok();
      });
}

cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from, cudaGraphNode_t* to,
                              cudaGraphEdgeData* edgeData, size_t* numEdges) noexcept {
  return Guard("cudaGraphGetEdges", [&] {
    Runtime& rt = Runtime::Get();
    if (numEdges == nullptr || ((from == nullptr) != (to == nullptr))) {
      return rt.Finish(Err(CudaError::kInvalidValue, "null numEdges, or one of from/to"));
    }
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, graph);
    if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
    auto edges = Edges(*gr);
    for (size_t i = 0; from != nullptr && i < std::min(*numEdges, edges.size()); ++i) {
      from[i] = reinterpret_cast<cudaGraphNode_t>(edges[i].first);
      to[i] = reinterpret_cast<cudaGraphNode_t>(edges[i].second);
      if (edgeData) edgeData[i] = cudaGraphEdgeData{};
    }
    *numEdges = edges.size();
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t* from,
                                        const cudaGraphNode_t* to,
                                        const cudaGraphEdgeData* edgeData,
                                        size_t numDependencies) noexcept {
  return Guard("cudaGraphRemoveDependencies", [&] {
    Runtime& rt = Runtime::Get();
    if (numDependencies != 0 && (from == nullptr || to == nullptr)) {
      return rt.Finish(Err(CudaError::kInvalidValue, "null from/to"));
    }
    for (size_t i = 0; edgeData != nullptr && i < numDependencies; ++i) {
      if (edgeData[i].type != 0 || edgeData[i].from_port != 0 || edgeData[i].to_port != 0) {
        return rt.Finish(Err(CudaError::kInvalidValue, "no such programmatic edge"));
      }
    }
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, graph);
    if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
    // All of them exist, or nothing is removed.
    for (size_t i = 0; i < numDependencies; ++i) {
      g::Node* f = g::FindNode(s, from[i]);
      g::Node* t = g::FindNode(s, to[i]);
      if (f == nullptr || t == nullptr || f->graph != gr || t->graph != gr ||
          std::find(t->deps.begin(), t->deps.end(), f) == t->deps.end()) {
        return rt.Finish(Err(CudaError::kInvalidValue, "no such edge in the graph"));
      }
    }
    for (size_t i = 0; i < numDependencies; ++i) {
      auto& deps = g::FindNode(s, to[i])->deps;
      deps.erase(std::find(deps.begin(), deps.end(), g::FindNode(s, from[i])));
    }
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node) noexcept {
  return Guard("cudaGraphDestroyNode", [&] {
    Runtime& rt = Runtime::Get();
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Node* n = g::FindNode(s, node);
    if (n == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph node"));
    g::Graph& graph = *n->graph;
    for (auto& other : graph.nodes) {
      auto& deps = other->deps;
      deps.erase(std::remove(deps.begin(), deps.end(), n), deps.end());
    }
    if (n->child) g::ForgetNodes(s, *n->child);
    s.nodes.erase(n);
    graph.nodes.erase(std::find_if(graph.nodes.begin(), graph.nodes.end(),
                                   [&](const auto& p) { return p.get() == n; }));
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t* pNode, cudaGraphNode_t originalNode,
                                     cudaGraph_t clonedGraph) noexcept {
  return Guard("cudaGraphNodeFindInClone", [&] {
    Runtime& rt = Runtime::Get();
    if (pNode == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null pNode"));
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    g::Graph* gr = g::FindGraph(s, clonedGraph);
    g::Node* original = g::FindNode(s, originalNode);
    if (gr == nullptr || original == nullptr) {
      return rt.Finish(Err(CudaError::kInvalidValue, "not a graph, or not a node"));
    }
    for (auto& n : gr->nodes) {
      if (n->cloned_from == original) {
        *pNode = reinterpret_cast<cudaGraphNode_t>(n.get());
        return rt.Finish(CudaStatus::Ok());
      }
    }
    return rt.Finish(Err(CudaError::kInvalidValue, "the graph is not a clone holding that node"));
  });
}

cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec,
                                  unsigned long long* flags) noexcept {  // NOLINT
  return Guard("cudaGraphExecGetFlags", [&] {
    Runtime& rt = Runtime::Get();
    if (flags == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null flags"));
    g::GraphState& s = g::State();
    MutexLock lock(s.mu);
    auto it = s.execs.find(reinterpret_cast<g::Exec*>(graphExec));
    if (it == s.execs.end()) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph exec"));
    *flags = it->second->flags;
    return rt.Finish(CudaStatus::Ok());
  });
}

cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream) noexcept {
  return Upload(graphExec, stream, false);
}
cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) noexcept {
  return Upload(graphExec, stream, true);
}

cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                           const struct cudaHostNodeParams* pNodeParams) noexcept {
  return WithExecNode("cudaGraphExecHostNodeSetParams", hGraphExec, node, cudaGraphNodeTypeHost,
                      [&](Runtime&, g::Node& n) {
                        std::unique_ptr<g::Node> fresh;
                        FLYT_CUDA_RETURN_IF_ERROR(g::MakeHostNode(pNodeParams, fresh));
                        TakeParams(n, *fresh);
                        return CudaStatus::Ok();
                      });
}

cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                             const struct cudaMemsetParams* pNodeParams) noexcept {
  return WithExecNode("cudaGraphExecMemsetNodeSetParams", hGraphExec, node, cudaGraphNodeTypeMemset,
                      [&](Runtime& rt, g::Node& n) {
                        std::unique_ptr<g::Node> fresh;
                        FLYT_CUDA_RETURN_IF_ERROR(g::MakeMemsetNode(rt, pNodeParams, fresh));
                        TakeParams(n, *fresh);
                        return CudaStatus::Ok();
                      });
}

cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                               void* dst, const void* src, size_t count,
                                               enum cudaMemcpyKind kind) noexcept {
  return WithExecNode(
      "cudaGraphExecMemcpyNodeSetParams1D", hGraphExec, node, cudaGraphNodeTypeMemcpy,
      [&](Runtime& rt, g::Node& n) { return SetMemcpy(rt, n, dst, src, count, kind, true); });
}

cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                                 cudaEvent_t event) noexcept {
  return WithExecNode("cudaGraphExecEventRecordNodeSetEvent", hGraphExec, hNode,
                      cudaGraphNodeTypeEventRecord,
                      [&](Runtime& rt, g::Node& n) { return SetEvent(rt, n, event); });
}

cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                               cudaEvent_t event) noexcept {
  return WithExecNode("cudaGraphExecEventWaitNodeSetEvent", hGraphExec, hNode,
                      cudaGraphNodeTypeWaitEvent,
                      [&](Runtime& rt, g::Node& n) { return SetEvent(rt, n, event); });
}

cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char* path,
                                   unsigned int /*flags*/) noexcept {
  return Guard("cudaGraphDebugDotPrint", [&] {
    Runtime& rt = Runtime::Get();
    if (path == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "null path"));
    std::string dot = "digraph flyt_graph {\n";
    {
      g::GraphState& s = g::State();
      MutexLock lock(s.mu);
      g::Graph* gr = g::FindGraph(s, graph);
      if (gr == nullptr) return rt.Finish(Err(CudaError::kInvalidValue, "not a graph"));
      Dot(*gr, "n", dot);
    }
    dot += "}\n";
    FILE* f = std::fopen(path, "w");
    if (f == nullptr) {
      return rt.Finish(Err(CudaError::kOperatingSystem, std::string("cannot write ") + path));
    }
    const bool written = std::fwrite(dot.data(), 1, dot.size(), f) == dot.size();
    if (std::fclose(f) != 0 || !written) {
      return rt.Finish(Err(CudaError::kOperatingSystem, std::string("cannot write ") + path));
    }
    return rt.Finish(CudaStatus::Ok());
  });
}

}  // extern "C"
