// ClientConnection's handlers of the graphs calls (see connection.h); the runtime's side of the
// same calls: runtime/api_graphs.cc.
//
// A graph arrives whole once (GraphExecCreate): every node is checked here (kind, dependencies
// pointing only at earlier nodes, functions and events this client holds, copy and memset ranges
// inside its allocations) and handed to the backend with the handles resolved. A launch is one
// posted message; the nodes are checked again against what the client still holds (a kernel's
// module or an event may have gone since), then the backend runs the whole graph.
#include <algorithm>

#include "remote_server/connection.h"
#include "remote_server/launch_log.h"

namespace flyt::remote {

using Kind = Session::GraphNodeKind;

namespace {

// The bytes a memset node's rows span, pitch × (height − 1) + width × element size; nullopt when
// that overflows.
std::optional<uint64_t> MemsetNodeSpan(const GraphNode& n) {
  uint64_t row_bytes = 0, rows = 0, span = 0;
  if (__builtin_mul_overflow(n.width, uint64_t{n.element_size}, &row_bytes) ||
      __builtin_mul_overflow(n.pitch, n.height > 0 ? n.height - 1 : 0, &rows) ||
      __builtin_add_overflow(rows, row_bytes, &span)) {
    return std::nullopt;
  }
  return span;
}

}  // namespace

CudaResult<std::vector<Session::GraphNodeSpec>> ClientConnection::ResolveGraph(
    const std::vector<GraphNode>& nodes) {
  if (nodes.size() > kMaxGraphNodes) {
    return Error(CudaError::kInvalidValue,
                 "graph has more than " + std::to_string(kMaxGraphNodes) + " nodes");
  }
  std::vector<Session::GraphNodeSpec> specs;
  specs.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    Session::GraphNodeSpec spec;
    if (n.kind > static_cast<uint8_t>(Kind::kEventWait)) {
      return Error(CudaError::kInvalidValue, "unknown graph node kind " + std::to_string(n.kind));
    }
    spec.kind = static_cast<Kind>(n.kind);
    for (uint32_t d : n.deps) {
      if (d >= i) {
        return Error(CudaError::kInvalidValue,
                     "graph node " + std::to_string(i) + " depends on a later node");
      }
    }
    spec.deps = n.deps;
    switch (spec.kind) {
      case Kind::kEmpty:
        break;
      case Kind::kKernel: {
        const Function* function = functions_.Find(n.function);
        if (!function) {
          return Error(CudaError::kInvalidDeviceFunction,
                       "no function " + std::to_string(n.function));
        }
        if (n.grid.x == 0 || n.grid.y == 0 || n.grid.z == 0 || n.block.x == 0 || n.block.y == 0 ||
            n.block.z == 0) {
          return Error(CudaError::kInvalidConfiguration, "zero grid or block dimension");
        }
        spec.function = function->handle;
        spec.grid = n.grid;
        spec.block = n.block;
        spec.shared_bytes = n.shared_bytes;
        spec.params = n.params;
        break;
      }
      case Kind::kCopy:
        if (n.bytes == 0) break;
        FLYT_CUDA_RETURN_IF_ERROR(CheckRange(n.dst, n.bytes, "graph copy destination"));
        FLYT_CUDA_RETURN_IF_ERROR(CheckRange(n.src, n.bytes, "graph copy source"));
        spec.dst = n.dst;
        spec.src = n.src;
        spec.bytes = n.bytes;
        break;
      case Kind::kMemset: {
        if (n.element_size != 1 && n.element_size != 2 && n.element_size != 4) {
          return Error(CudaError::kInvalidValue, "memset element size must be 1, 2 or 4");
        }
        if (n.width == 0 || n.height == 0) break;
        const uint64_t row_bytes = n.width * n.element_size;
        std::optional<uint64_t> span = MemsetNodeSpan(n);
        if (n.width > (uint64_t{1} << 48) || n.height > (uint64_t{1} << 32) ||
            (n.height > 1 && n.pitch < row_bytes) || n.pitch > (uint64_t{1} << 48) || !span) {
          return Error(CudaError::kInvalidValue, "memset node's width, height or pitch");
        }
        FLYT_CUDA_RETURN_IF_ERROR(CheckRange(n.dst, *span, "graph memset"));
        spec.dst = n.dst;
        spec.value = n.value;
        spec.element_size = n.element_size;
        spec.width = n.width;
        spec.height = n.height;
        spec.pitch = n.height > 1 ? n.pitch : row_bytes;
        break;
      }
      case Kind::kEventRecord:
      case Kind::kEventWait: {
        FLYT_CUDA_ASSIGN_OR_RETURN(spec.event, ResolveEvent(n.event));
        break;
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

uint64_t ClientConnection::GraphFootprint(const std::vector<GraphNode>& nodes) {
  uint64_t bytes = 0;
  for (const GraphNode& n : nodes) {
    bytes += sizeof(GraphNode) + n.params.size() + n.deps.size() * sizeof(n.deps[0]);
  }
  return bytes;
}

void ClientConnection::IndexGraph(GraphExec& exec) const {
  exec.kernels = 0;
  exec.functions.clear();
  exec.events.clear();
  exec.ranges.clear();
  for (const GraphNode& n : exec.nodes) {
    switch (static_cast<Kind>(n.kind)) {
      case Kind::kKernel:
        ++exec.kernels;
        if (const Function* f = functions_.Find(n.function)) {
          exec.functions.emplace_back(n.function, f->handle);
        }
        break;
      case Kind::kCopy:
        if (n.bytes == 0) break;
        exec.ranges.emplace_back(n.dst, n.bytes);
        exec.ranges.emplace_back(n.src, n.bytes);
        break;
      case Kind::kMemset:
        if (n.width == 0 || n.height == 0) break;
        // BuildSpecs refused a node whose span overflows.
        exec.ranges.emplace_back(n.dst, MemsetNodeSpan(n).value_or(0));
        break;
      case Kind::kEventRecord:
      case Kind::kEventWait:
        if (const EventHandle* e = events_.Find(n.event)) exec.events.emplace_back(n.event, *e);
        break;
      case Kind::kEmpty:
        break;
    }
  }
  auto dedup = [](auto& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  dedup(exec.functions);
  dedup(exec.events);
  dedup(exec.ranges);
}

CudaResult<GraphExecCreateReply> ClientConnection::Handle(const GraphExecCreateRequest& r, Io&) {
  if (r.exec == 0 || graph_execs_.Find(r.exec) != nullptr) {
    return InsertError(r.exec == 0 ? HandleInsert::kZero : HandleInsert::kTaken, "graph exec",
                       r.exec);
  }
  const uint64_t footprint = GraphFootprint(r.nodes);
  if (footprint > kMaxGraphBytes - graph_bytes_) {
    return Error(CudaError::kMemoryAllocation,
                 "this client's graphs would take more than " +
                     std::to_string(kMaxGraphBytes >> 20) + " MiB of server memory");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(std::vector<Session::GraphNodeSpec> specs, ResolveGraph(r.nodes));
  GraphExec exec;
  FLYT_CUDA_ASSIGN_OR_RETURN(exec.backend, session_->GraphInstantiate(specs));
  exec.nodes = r.nodes;
  exec.footprint_bytes = footprint;
  IndexGraph(exec);
  const uint64_t backend = exec.backend;
  if (CudaStatus s =
          InsertError(graph_execs_.Insert(r.exec, std::move(exec)), "graph exec", r.exec);
      !s.ok()) {
    (void)session_->GraphDestroy(backend);
    return s;
  }
  graph_bytes_ += footprint;
  return GraphExecCreateReply{};
}

CudaResult<GraphExecUpdateReply> ClientConnection::Handle(const GraphExecUpdateRequest& r, Io&) {
  GraphExec* exec = graph_execs_.Find(r.exec);
  if (!exec) {
    return Error(CudaError::kInvalidValue, "no graph exec " + std::to_string(r.exec));
  }
  if (r.nodes.size() != exec->nodes.size()) {
    return Error(CudaError::kGraphExecUpdateFailure, "the graph's node count changed");
  }
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    if (r.nodes[i].kind != exec->nodes[i].kind || r.nodes[i].deps != exec->nodes[i].deps) {
      return Error(CudaError::kGraphExecUpdateFailure,
                   "the graph's topology changed at node " + std::to_string(i));
    }
  }
  const uint64_t footprint = GraphFootprint(r.nodes);
  if (footprint > exec->footprint_bytes &&
      footprint - exec->footprint_bytes > kMaxGraphBytes - graph_bytes_) {
    return Error(CudaError::kMemoryAllocation,
                 "this client's graphs would take more than " +
                     std::to_string(kMaxGraphBytes >> 20) + " MiB of server memory");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(std::vector<Session::GraphNodeSpec> specs, ResolveGraph(r.nodes));
  FLYT_CUDA_RETURN_IF_ERROR(session_->GraphUpdate(exec->backend, specs));
  exec->nodes = r.nodes;
  graph_bytes_ = graph_bytes_ - exec->footprint_bytes + footprint;
  exec->footprint_bytes = footprint;
  IndexGraph(*exec);
  return GraphExecUpdateReply{};
}

CudaResult<GraphLaunchReply> ClientConnection::Handle(const GraphLaunchRequest& r, Io& io) {
  GraphExec* exec = graph_execs_.Find(r.exec);
  if (!exec) {
    return Error(CudaError::kInvalidValue, "no graph exec " + std::to_string(r.exec));
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(StreamHandle stream, ResolveStream(r.stream));
  // What the graph names must still be this client's (each object once).
  for (const auto& [f, handle] : exec->functions) {
    const Function* now = functions_.Find(f);
    if (!now || now->handle != handle) {
      return Error(CudaError::kInvalidDeviceFunction,
                   "the graph's function " + std::to_string(f) + " is gone");
    }
  }
  for (const auto& [e, handle] : exec->events) {
    const EventHandle* now = events_.Find(e);
    if (!now || *now != handle) {
      return Error(CudaError::kInvalidResourceHandle,
                   "the graph's event " + std::to_string(e) + " is gone");
    }
  }
  for (const auto& [ptr, bytes] : exec->ranges) {
    FLYT_CUDA_RETURN_IF_ERROR(CheckRange(ptr, bytes, "graph node"));
  }
  FLYT_CUDA_RETURN_IF_ERROR(session_->GraphLaunch(exec->backend, stream));
  counters_->launches += exec->kernels;
  if (server_.launch_log_ && exec->kernels != 0) {
    for (const GraphNode& n : exec->nodes) {
      if (n.kind != static_cast<uint8_t>(Kind::kKernel)) continue;
      // Checked above: the graph's functions are still this client's.
      LogLaunch(io.header.seq, *functions_.Find(n.function), n.grid, n.block, n.shared_bytes,
                r.stream, n.params);
    }
  }
  return GraphLaunchReply{};
}

CudaResult<GraphExecDestroyReply> ClientConnection::Handle(const GraphExecDestroyRequest& r, Io&) {
  std::optional<GraphExec> exec = graph_execs_.Erase(r.exec);
  if (!exec) return Error(CudaError::kInvalidValue, "no graph exec " + std::to_string(r.exec));
  graph_bytes_ -= exec->footprint_bytes;
  FLYT_CUDA_RETURN_IF_ERROR(session_->GraphDestroy(exec->backend));
  return GraphExecDestroyReply{};
}

}  // namespace flyt::remote
