// The client-side graph model of flyt's libcudart.so.13 (issue 17, graphs): the records that
// cudaGraph_t / cudaGraphNode_t / cudaGraphExec_t point at, the state of stream captures, and what
// instantiation does with a graph: clone it, flatten it (child graphs inlined) into a topological
// order, split it into server segments and client steps at the nodes that run in this process
// (host nodes, copies to or from host memory), and build and send each segment's wire form.
// Used by api_graphs.cc (graph building and exec API) and api_graph_capture.cc (stream capture).
//
// Ownership: GraphState (State(), one per process, never freed) owns every graph the program
// holds (registered in `graphs`; a Graph owns its Nodes, a Node its child graph), every exec
// (`execs`; an Exec owns a clone of its source graph, which its steps point into) and every
// capture under way (`captures`, each owning the graph it records into). Handles the program
// passes in are looked up in GraphState (FindGraph, FindNode), never trusted.
// Thread safety: everything in GraphState is guarded by its `mu`; the functions marked
// FLYT_REQUIRES(s.mu) are called with it held. Clone, BuildWire, Upload and Instantiate work on
// objects reachable only from GraphState, so their callers hold `mu` as well.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "runtime/runtime.h"

namespace flyt::runtime::graphs {

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
  cudaHostFn_t host_fn = nullptr;  // what the program passed (cudaGraphHostNodeGetParams)
  void* host_data = nullptr;
  // event
  uint64_t event_id = 0;
  cudaEvent_t event = nullptr;
  // child graph
  std::unique_ptr<Graph> child;
  // The node this one was cloned from (cudaGraphNodeFindInClone); null for an original.
  const Node* cloned_from = nullptr;
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
// The process's graph state (created on first use, never freed).
GraphState& State();

// Publishes the number of capturing streams (Runtime::CaptureActive).
void UpdateActive(Runtime& rt, GraphState& s) FLYT_REQUIRES(s.mu);

// The registered node / graph a handle names, or null.
Node* FindNode(GraphState& s, cudaGraphNode_t handle) FLYT_REQUIRES(s.mu);
Graph* FindGraph(GraphState& s, cudaGraph_t handle) FLYT_REQUIRES(s.mu);

// Appends `node` to `graph` after `deps` and registers it; returns it.
Node* AddNode(GraphState& s, Graph& graph, std::unique_ptr<Node> node, std::vector<Node*> deps)
    FLYT_REQUIRES(s.mu);

// Unregisters the graph's nodes (child graphs' too).
void ForgetNodes(GraphState& s, Graph& graph) FLYT_REQUIRES(s.mu);

// A deep copy (child graphs too); `map` receives old node -> new node. Nodes of a copy are not
// registered (they are reachable only through their owner).
std::unique_ptr<Graph> Clone(const Graph& g, std::unordered_map<const Node*, Node*>* map);

// Appends g's nodes to `out` in a topological order (child graphs inlined); roots depend on
// `entry`. `exits` receives the flat indices that later nodes depending on g must wait for.
// `top` receives, for g's own nodes, where they landed. False when g has a cycle.
bool Flatten(const Graph& g, const std::vector<uint32_t>& entry, std::vector<FlatNode>& out,
             std::vector<uint32_t>& exits, std::unordered_map<const Node*, size_t>* top);

// Whether the node runs in this process (a host node, a copy to or from host memory).
bool RunsOnClient(const Node& n);

// Splits the flat order into steps at the nodes that run on the client; `position` receives,
// for each node in `top`, its step and index there.
std::vector<Step> Split(const std::vector<FlatNode>& flat,
                        std::unordered_map<const Node*, size_t>& top,
                        std::unordered_map<const Node*, std::pair<size_t, size_t>>& position);

// The wire form of a server segment (resolving kernels and events for this generation).
CudaStatus BuildWire(Runtime& rt, Step& step);

// Creates (or, after a device reset, re-creates) the exec's server segments.
CudaStatus Upload(Runtime& rt, Exec& exec);

// An exec of `graph`: cloned, flattened, split and uploaded. Refuses a graph with a cycle.
CudaResult<std::unique_ptr<Exec>> Instantiate(Runtime& rt, const Graph& graph,
                                              unsigned long long flags);  // NOLINT

// A 1D copy node (`kind` checked against where dst and src are), into `node`.
CudaStatus MakeMemcpyNode(Runtime& rt, std::unique_ptr<Node>& node, void* dst, const void* src,
                          size_t count, cudaMemcpyKind kind);
// A memset node from the program's parameters, into `node`.
CudaStatus MakeMemsetNode(Runtime& rt, const cudaMemsetParams* p, std::unique_ptr<Node>& node);
// A host node calling fn(data), into `node`.
CudaStatus MakeHostNode(const cudaHostNodeParams* p, std::unique_ptr<Node>& node);

// The exec's own copy of `node` (a node of the graph it was instantiated or last updated from)
// and its step, or null when the exec has no such node.
Node* ExecNodeOf(Exec& exec, cudaGraphNode_t node, Step** step);
// After a node of `step` changed (cudaGraphExec*NodeSetParams): a server segment is sent again
// (one posted message); a client step needs nothing, nor does an exec not yet re-uploaded.
CudaStatus Resend(Runtime& rt, Exec& exec, Step& step);

// A kernel node from the program's parameters (copied into the node's parameter buffer), into
// `node`; returns it.
CudaResult<Node*> MakeKernelNode(Runtime& rt, const cudaKernelNodeParams* p,
                                 std::unique_ptr<Node>& node);

}  // namespace flyt::runtime::graphs
