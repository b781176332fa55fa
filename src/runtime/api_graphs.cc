// flyt's libcudart.so.13: the CUDA runtime's graphs family (issue 17): the graph building API
// (cudaGraphCreate, cudaGraphAdd*Node, queries, node parameters) and the exec API
// (instantiate, launch, update, destroy). See runtime.h.
//
// Graphs are client objects: cudaGraph_t / cudaGraphNode_t / cudaGraphExec_t point at records
// (graph_model.h; looked up, never trusted). cudaGraphInstantiate flattens the graph (child graphs
// inlined) into a topological order and sends it whole once (GraphExecCreate); a launch is one
// posted GraphLaunch. Host nodes and copies to or from host memory run in this process: an exec
// that holds some is split into segments at them, launched in order (a server segment, then the
// host step after its stream has drained, then the next segment). Stream capture is
// api_graph_capture.cc.
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "runtime/exports.h"
#include "runtime/graph_model.h"
#include "runtime/runtime.h"

using flyt::MutexLock;
using flyt::remote::CudaError;
using flyt::runtime::CudaResult;
using flyt::runtime::CudaStatus;
using flyt::runtime::Guard;
using flyt::runtime::Runtime;
namespace g = flyt::runtime::graphs;

namespace {

CudaStatus Err(CudaError code, std::string message) { return {code, std::move(message)}; }

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
                   CudaResult<flyt::runtime::EventRecord> e = rt.FindEvent(event);
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
                   return g::MakeMemcpyNode(rt, node, dst, src, count, kind);
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
                   return g::MakeMemcpyNode(rt, node, p->dstPtr.ptr, p->srcPtr.ptr,
                                            p->extent.width, p->kind);
                 });
}

cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                   const struct cudaMemsetParams* p) noexcept {
  return AddNode("cudaGraphAddMemsetNode", pGraphNode, graph, pDependencies, numDependencies,
                 [&](Runtime& rt, std::unique_ptr<g::Node>& node) {
                   return g::MakeMemsetNode(rt, p, node);
                 });
}

cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                 const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                 const struct cudaHostNodeParams* p) noexcept {
  return AddNode("cudaGraphAddHostNode", pGraphNode, graph, pDependencies, numDependencies,
                 [&](Runtime&, std::unique_ptr<g::Node>& node) {
                   return g::MakeHostNode(p, node);
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
    g::Step* step = nullptr;
    g::Node* target = g::ExecNodeOf(exec, node, &step);
    if (target == nullptr || target->type != cudaGraphNodeTypeKernel) {
      return rt.Finish(Err(CudaError::kInvalidValue, "not a kernel node of the exec's graph"));
    }
    target->function = fresh->function;
    target->func = fresh->func;
    target->grid = fresh->grid;
    target->block = fresh->block;
    target->shared_bytes = fresh->shared_bytes;
    target->params = std::move(fresh->params);
    target->args = std::move(fresh->args);
    return rt.Finish(g::Resend(rt, exec, *step));
  });
}

}  // extern "C"
