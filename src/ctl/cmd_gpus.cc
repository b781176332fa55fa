// `flytctl gpus` and `flytctl processes`: the GPUs and the processes on them, read from the one
// source ChooseSource() picks — a node manager (--node), the cluster manager (--server or
// $FLYT_CLUSTER_MANAGER), else this machine (NVML, else nvidia-smi). A table's first line names
// the source (after the SIMULATED line when this machine's GPUs are simulated); --json prints the
// API's (or the local snapshot's) JSON and nothing else. `processes --cuda [PID]` shows the CUDA
// tracer's figures, which only a node manager has (this machine's at its default address when no
// source is named) and, summarised, the cluster manager.
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/http.h"
#include "common/json.h"
#include "ctl/commands.h"
#include "ctl/render.h"
#include "gpu/backend.h"
#include "gpu/json.h"
#include "gpu/monitor.h"
#include "gpu/nvml_backend.h"

namespace flyt::ctl {

namespace {

using nlohmann::json;

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// NVML (real or simulated), else nvidia-smi, else none. When FLYT_NVML_LIBRARY names a library
// explicitly, failing to load it is an error, not a reason to fall back silently.
Result<std::unique_ptr<gpu::Backend>> OpenLocalBackend() {
  const char* explicit_lib = std::getenv("FLYT_NVML_LIBRARY");
  if (explicit_lib != nullptr && *explicit_lib != '\0') {
    auto nvml = gpu::OpenNvmlBackend({explicit_lib, "/proc"});
    if (!nvml.ok()) {
      return nvml.status().WithContext(std::string("FLYT_NVML_LIBRARY=") + explicit_lib);
    }
    return std::move(nvml).value();
  }
  return gpu::OpenBackend({});
}

// One machine's GPUs as a snapshot: this machine's, or a node manager's /api/v1/gpus.
class SnapshotSource {
 public:
  static Result<SnapshotSource> Open(const SourceChoice& choice, const std::string& token) {
    SnapshotSource s;
    s.choice_ = choice;
    if (choice.kind == SourceKind::kNodeManager) {
      FLYT_ASSIGN_OR_RETURN(s.client_,
                            http::JsonClient::Connect(choice.url, token, "the node manager"));
      s.choice_.url = s.client_->url();
      return s;
    }
    FLYT_ASSIGN_OR_RETURN(auto backend, OpenLocalBackend());
    s.monitor_ = std::make_unique<gpu::Monitor>(std::move(backend), SystemClock::Instance());
    return s;
  }

  const SourceChoice& choice() const { return choice_; }

  // A fresh snapshot, and (for a node) the JSON exactly as the node sent it.
  Result<gpu::GpuSnapshot> Read(json* raw) {
    if (monitor_) {
      FLYT_ASSIGN_OR_RETURN(auto snap, monitor_->QueryGpus(/*use_cache=*/false));
      if (raw != nullptr) *raw = gpu::ToJson(snap);
      return snap;
    }
    auto j = client_->Get("/api/v1/gpus");
    if (!j.ok()) {
      return Explained(j.status(), "cannot read the GPUs", choice_.url, Peer::kNodeManager);
    }
    if (raw != nullptr) *raw = *j;
    auto snap = gpu::SnapshotFromJson(*j);
    if (!snap.ok()) return snap.status().WithContext("unexpected answer from the node");
    return snap;
  }

  // The lines above a table: which source, and whether its GPUs are simulated. This machine's
  // SIMULATED line comes first: nothing may be read before the warning that the GPUs are not real.
  std::string Header(const gpu::GpuSnapshot& s) const {
    if (choice_.kind != SourceKind::kLocal) return SourceLine(choice_) + SimulatedBanner(s);
    std::string detail = s.simulated_scenario                  ? "simulated NVML"
                         : s.source == gpu::Source::kNvml      ? "NVML"
                         : s.source == gpu::Source::kNvidiaSmi ? "nvidia-smi"
                                                               : "no GPU source";
    return SimulatedBanner(s) + SourceLine(choice_, detail);
  }

 private:
  SourceChoice choice_;
  std::unique_ptr<gpu::Monitor> monitor_;
  std::unique_ptr<http::JsonClient> client_;
};

int RunSnapshotGpus(const GlobalFlags& g, const SourceChoice& choice, const GpusArgs& a) {
  auto source = SnapshotSource::Open(choice, g.token);
  if (!source.ok()) {
    // A --node URL JsonClient cannot use is the user's to fix.
    const bool bad_url = choice.kind == SourceKind::kNodeManager &&
                         source.status().code() == StatusCode::kInvalidArgument;
    return bad_url ? Fail(source.status().message(), kExitUsage) : Fail(source.status());
  }
  RenderOptions render;
  render.hostname = choice.kind == SourceKind::kLocal ? Hostname() : source->choice().url;
  render.color = !g.json && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
  render.simulated_banner = false;  // Header() prints it
  return Repeat(a.watch_s, g.json, [&]() -> Result<std::string> {
    json raw;
    FLYT_ASSIGN_OR_RETURN(auto snap, source->Read(&raw));
    if (a.available) {
      auto ranked =
          gpu::RankAvailableGpus(snap.gpus, static_cast<uint64_t>(a.min_free_mib * 1024 * 1024),
                                 static_cast<uint32_t>(a.max_util));
      if (g.json) {
        json arr = json::array();
        for (const auto& r : ranked) arr.push_back(gpu::ToJson(r));
        return gpu::DumpJson(arr) + "\n";
      }
      return source->Header(snap) + RenderAvailable(ranked, render);
    }
    if (a.processes_only) {
      if (!g.json) return source->Header(snap) + RenderProcesses(snap, render);
      json list = json::array();
      for (const auto& dev : snap.gpus) {
        for (const auto& p : dev.processes) {
          json j = gpu::ToJson(p);
          j["gpu"] = dev.index;
          j["gpu_uuid"] = dev.uuid;
          list.push_back(std::move(j));
        }
      }
      return gpu::DumpJson({{"processes", list}}, a.watch_s ? -1 : 2) + "\n";
    }
    if (g.json) return gpu::DumpJson(raw, a.watch_s ? -1 : 2) + "\n";
    // A node manager's GPUs carry their usage profile's summary ("profile"; null when its
    // profiles are off): the STATE column. This machine's have none: no column.
    RenderOptions frame = render;
    if (choice.kind == SourceKind::kNodeManager) {
      frame.show_state = true;
      if (raw.is_object() && raw.contains("gpus") && raw["gpus"].is_array()) {
        for (const json& dev : raw["gpus"]) {
          if (!dev.is_object() || !dev.contains("index") || !dev["index"].is_number_unsigned() ||
              !dev.contains("profile") || !dev["profile"].is_object()) {
            continue;
          }
          frame.states[dev["index"].get<uint32_t>()] = ProfileStateText(dev["profile"]);
        }
      }
    }
    return source->Header(snap) + RenderSnapshot(snap, frame);
  });
}

// Every process of every reachable node, from each node's last heartbeat.
Result<std::string> ClusterProcessesFrame(Manager& m, const SourceChoice& choice, bool json_out,
                                          bool one_line) {
  auto nodes = m.client().Get("/api/v1/nodes");
  if (!nodes.ok()) return Explained(nodes.status(), "cannot list the nodes", m.url());
  if (!nodes->is_object() || !nodes->contains("nodes") || !(*nodes)["nodes"].is_array()) {
    return Internal("unexpected answer from " + m.url() +
                    " (no \"nodes\" list); is it a flyt cluster manager?");
  }
  std::vector<NodeSnapshot> snapshots;
  json list = json::array();
  for (const json& n : (*nodes)["nodes"]) {
    if (!n.is_object() || !n.contains("name") || !n["name"].is_string()) continue;
    const std::string name = n["name"].get<std::string>();
    // A silent node's last processes may be long gone; and a name must be fit for a path.
    if (n.value("state", "") != "reachable" || !CheckId(name, "node").ok()) continue;
    auto node = m.client().Get("/api/v1/nodes/" + name);
    if (!node.ok()) {
      if (node.status().code() == StatusCode::kNotFound) continue;  // gone since the list
      return Explained(node.status(), "cannot show node " + name, m.url());
    }
    if (!node->is_object() || !node->contains("snapshot")) continue;
    auto snap = gpu::SnapshotFromJson((*node)["snapshot"]);
    if (!snap.ok()) continue;
    for (const auto& dev : snap->gpus) {
      for (const auto& p : dev.processes) {
        json j = gpu::ToJson(p);
        j["node"] = name;
        j["gpu"] = dev.index;
        j["gpu_uuid"] = dev.uuid;
        list.push_back(std::move(j));
      }
    }
    snapshots.push_back({name, std::move(*snap)});
  }
  if (json_out) return DumpJson({{"processes", list}}, one_line ? -1 : 2) + "\n";
  return SourceLine(choice) + RenderClusterProcesses(snapshots, *nodes);
}

int RunClusterGpus(const GlobalFlags& g, const SourceChoice& choice, const GpusArgs& a) {
  GlobalFlags at = g;
  at.server = choice.url;
  return WithManager(at, [&](Manager& m) {
    SourceChoice shown = choice;
    shown.url = m.url();
    return Repeat(a.watch_s, g.json, [&]() -> Result<std::string> {
      if (a.processes_only) return ClusterProcessesFrame(m, shown, g.json, a.watch_s.has_value());
      auto gpus = m.client().Get("/api/v1/gpus");
      if (!gpus.ok()) return Explained(gpus.status(), "cannot list the GPUs", m.url());
      if (!gpus->is_object() || !gpus->contains("gpus") || !(*gpus)["gpus"].is_array()) {
        return Internal("unexpected answer from " + m.url() +
                        " (no \"gpus\" list); is it a flyt cluster manager?");
      }
      json shown_gpus =
          a.available ? AvailableClusterGpus(*gpus, a.min_free_mib, a.max_util) : *gpus;
      if (g.json) {
        // --available: the ranked list, as for one machine; else the API's answer.
        return DumpJson(a.available ? shown_gpus["gpus"] : shown_gpus, a.watch_s ? -1 : 2) + "\n";
      }
      if (a.available && shown_gpus["gpus"].empty()) {
        return SourceLine(shown) + "No GPU meets the request.\n";
      }
      // Nodes say which GPUs are simulated; without them the table is still worth showing.
      auto nodes = m.client().Get("/api/v1/nodes");
      return SourceLine(shown) + RenderClusterGpus(shown_gpus, nodes.ok() ? *nodes : json());
    });
  });
}

// `flytctl processes --cuda [PID]` from a node manager: its /api/v1/processes (the traced ones)
// or /api/v1/processes/{pid}/cuda.
int RunNodeCuda(const GlobalFlags& g, SourceChoice choice, const GpusArgs& a) {
  if (choice.kind == SourceKind::kLocal) {
    choice.kind = SourceKind::kNodeManager;
    choice.url = kDefaultNodeManager;
  }
  auto client = http::JsonClient::Connect(choice.url, g.token, "the node manager");
  if (!client.ok()) return Fail(client.status().message(), kExitUsage);
  choice.url = (*client)->url();
  return Repeat(a.watch_s, g.json, [&]() -> Result<std::string> {
    if (a.cuda_pid) {
      const std::string pid = std::to_string(*a.cuda_pid);
      auto detail = (*client)->Get("/api/v1/processes/" + pid + "/cuda");
      if (!detail.ok()) {
        return Explained(detail.status(), "cannot show the CUDA figures of process " + pid,
                         choice.url, Peer::kNodeManager);
      }
      if (g.json) return DumpJson(*detail, a.watch_s ? -1 : 2) + "\n";
      return SourceLine(choice) + RenderCudaDetail(*detail);
    }
    auto list = (*client)->Get("/api/v1/processes");
    if (!list.ok()) {
      return Explained(list.status(), "cannot list the processes", choice.url, Peer::kNodeManager);
    }
    json traced = json::array();
    if (list->is_object() && list->contains("processes") && (*list)["processes"].is_array()) {
      for (const json& p : (*list)["processes"]) {
        if (p.is_object() && p.contains("cuda") && p["cuda"].is_object()) traced.push_back(p);
      }
    }
    if (g.json) return DumpJson({{"processes", traced}}, a.watch_s ? -1 : 2) + "\n";
    std::string out = SourceLine(choice) + RenderCudaProcesses(traced, /*with_node=*/false);
    if (list->is_object() && list->value("tracing", true) == false) {
      out += "CUDA tracing is off on this node manager (why: GET /api/v1/trace, or its log).\n";
    }
    return out;
  });
}

// `flytctl processes --cuda` on the cluster: each reachable node's traced processes, as its last
// heartbeat summarised them (no copy bytes or kernels: ask the node with --node for those).
int RunClusterCuda(const GlobalFlags& g, const SourceChoice& choice, const GpusArgs& a) {
  if (a.cuda_pid) {
    return Fail("the CUDA detail of one process comes from its node manager: flytctl --node URL "
                "processes --cuda PID",
                kExitUsage);
  }
  GlobalFlags at = g;
  at.server = choice.url;
  return WithManager(at, [&](Manager& m) {
    SourceChoice shown = choice;
    shown.url = m.url();
    return Repeat(a.watch_s, g.json, [&]() -> Result<std::string> {
      auto nodes = m.client().Get("/api/v1/nodes");
      if (!nodes.ok()) return Explained(nodes.status(), "cannot list the nodes", m.url());
      if (!nodes->is_object() || !nodes->contains("nodes") || !(*nodes)["nodes"].is_array()) {
        return Internal("unexpected answer from " + m.url() +
                        " (no \"nodes\" list); is it a flyt cluster manager?");
      }
      json list = json::array();
      for (const json& n : (*nodes)["nodes"]) {
        if (!n.is_object() || !n.contains("name") || !n["name"].is_string()) continue;
        const std::string name = n["name"].get<std::string>();
        if (n.value("state", "") != "reachable" || !CheckId(name, "node").ok()) continue;
        auto node = m.client().Get("/api/v1/nodes/" + name);
        if (!node.ok()) {
          if (node.status().code() == StatusCode::kNotFound) continue;
          return Explained(node.status(), "cannot show node " + name, m.url());
        }
        if (!node->is_object() || !node->contains("cuda") || !(*node)["cuda"].is_array()) continue;
        std::map<std::string, uint32_t> index_of;
        if (node->contains("snapshot")) {
          auto snap = gpu::SnapshotFromJson((*node)["snapshot"]);
          if (snap.ok()) {
            for (const auto& dev : snap->gpus) index_of[dev.uuid] = dev.index;
          }
        }
        for (const json& c : (*node)["cuda"]) {
          if (!c.is_object()) continue;
          const std::string uuid = c.value("gpu_uuid", std::string());
          auto it = index_of.find(uuid);
          list.push_back({{"node", name},
                          {"pid", c.value("pid", 0)},
                          {"name", c.value("comm", std::string())},
                          {"gpu", it != index_of.end() ? json(it->second) : json(nullptr)},
                          {"gpu_uuid", uuid},
                          {"cuda", c}});
        }
      }
      if (g.json) return DumpJson({{"processes", list}}, a.watch_s ? -1 : 2) + "\n";
      return SourceLine(shown) + RenderCudaProcesses(list, /*with_node=*/true);
    });
  });
}

}  // namespace

int RunGpus(const GlobalFlags& g, const GpusArgs& a) {
  auto choice = ChooseSource(g.node, g.server, std::getenv("FLYT_CLUSTER_MANAGER"));
  if (!choice.ok()) return Fail(choice.status().message(), kExitUsage);
  if (a.cuda) {
    if (choice->kind == SourceKind::kClusterManager) return RunClusterCuda(g, *choice, a);
    return RunNodeCuda(g, *choice, a);
  }
  if (choice->kind == SourceKind::kClusterManager) return RunClusterGpus(g, *choice, a);
  return RunSnapshotGpus(g, *choice, a);
}

}  // namespace flyt::ctl
