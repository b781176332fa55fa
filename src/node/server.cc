#include "node/server.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "common/http.h"
#include "common/json_fields.h"
#include "common/strings.h"
#include "gpu/json.h"
#include "profile/json.h"
#include "trace/json.h"
#include "node/kube_annotations.h"
#include "node/metrics.h"

namespace flyt::node {
namespace {

using nlohmann::json;

using http::SendError;
using http::SendJson;

// A GPU index from a path segment: digits only, and a GPU this node has.
Result<uint32_t> GpuIndex(const std::string& segment, const gpu::GpuSnapshot& snap) {
  auto v = ParseUint(segment);
  if (!v || segment.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("GPU index '" + segment + "' is not a non-negative integer");
  }
  for (const gpu::GpuInfo& g : snap.gpus) {
    if (g.index == *v) return static_cast<uint32_t>(*v);
  }
  return NotFound("no GPU " + segment + " on this node (it has " +
                  std::to_string(snap.gpus.size()) + ")");
}

// An error from the Monitor, with its usual HTTP status.
void SendStatus(httplib::Response& res, const Status& s) {
  http::SendError(res, http::HttpStatus(s), s);
}

// An error of a call into a GPU server (migrate, resize): 502 when the server answered that it
// cannot do it (an older server), otherwise the usual status (503: it cannot be reached).
void SendServerCallError(httplib::Response& res, const Status& s) {
  if (s.code() == StatusCode::kNotSupported) {
    return http::SendError(res, 502, s.message(), "unavailable");
  }
  SendStatus(res, s);
}

// The request body as JSON, or nothing after answering 400 "malformed JSON body: ..." (parse
// errors, and numbers beyond double's range). What the body must hold is for the caller to check.
std::optional<json> JsonBody(const httplib::Request& req, httplib::Response& res) {
  try {
    return json::parse(req.body);
  } catch (const json::exception& e) {
    SendError(res, 400, std::string("malformed JSON body: ") + e.what());
    return std::nullopt;
  }
}

// The fields of POST /api/v1/monitoring/sessions into `options`: gpus (distinct indexes of this
// node's GPUs) and interval_seconds. Errors name the field; 503 before the first sample when gpus
// are given (they cannot be checked yet).
Status SessionFields(const JsonFields& f, gpu::Monitor& monitor, gpu::SessionOptions& options) {
  FLYT_RETURN_IF_ERROR(f.Only({"gpus", "interval_seconds"}));
  if (f.Has("gpus")) {
    auto snap = monitor.LastSnapshot();
    if (!snap) return Unavailable("no sample taken yet; try again in a moment");
    const size_t count = snap->gpus.size();
    const json* gpus = nullptr;
    const Status s = f.OptionalArray("gpus", count, gpus);
    if (!s.ok() || gpus->empty()) {
      return InvalidArgument("gpus must be a non-empty array of this node's GPU indexes (it has " +
                             std::to_string(count) + ")");
    }
    std::vector<uint32_t> list;
    for (size_t i = 0; i < gpus->size(); ++i) {
      const std::string name = "gpus[" + std::to_string(i) + "]";
      const json one = {{name, (*gpus)[i]}};
      FLYT_ASSIGN_OR_RETURN(
          const uint32_t index,
          JsonFields(one).RequiredInt<uint32_t>(name, 0, std::numeric_limits<uint32_t>::max()));
      bool known = false;
      for (const gpu::GpuInfo& info : snap->gpus) known = known || info.index == index;
      if (!known) return InvalidArgument("no GPU " + std::to_string(index) + " on this node");
      if (std::find(list.begin(), list.end(), index) != list.end()) {
        return InvalidArgument("GPU " + std::to_string(index) + " is listed twice");
      }
      list.push_back(index);
    }
    options.gpus = list;
  }
  double interval_s = 0;
  if (f.Has("interval_seconds")) {
    const Status s = f.OptionalNumber("interval_seconds", 0, 86400, interval_s);
    if (!s.ok() || !(interval_s > 0)) {
      return InvalidArgument("interval_seconds must be a number in (0, 86400]");
    }
    options.interval = std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000));
  }
  return Status::Ok();
}

json CountsJson(const std::map<uint32_t, gpu::EventCounts>& counts) {
  json out = json::object();
  for (const auto& [index, c] : counts) {
    json by_xid = json::object();
    for (const auto& [xid, n] : c.by_xid) by_xid[std::to_string(xid)] = n;
    out[std::to_string(index)] = {{"total", c.total},
                                  {"by_xid", by_xid},
                                  {"last_xid", c.last_xid ? json(*c.last_xid) : json(nullptr)},
                                  {"single_bit_ecc", c.single_bit_ecc},
                                  {"double_bit_ecc", c.double_bit_ecc}};
  }
  return out;
}

// A traced process as an entry of GET /api/v1/processes shows it: the detail's fields but its
// streams and kernels, with the name of its busiest kernel ("other" never counts as one).
json CudaListJson(const trace::ProcessCuda& p) {
  json j = ToJson(p);
  j.erase("streams");
  j.erase("top_kernels");
  json top = nullptr;
  for (const trace::KernelStats& k : p.top_kernels) {
    if (k.name != "other") {
      top = SanitizeUtf8(k.name);
      break;
    }
  }
  j["top_kernel"] = top;
  return j;
}

// GET /api/v1/processes: NVML's processes (source "nvml"), each with the traced figures of the
// same pid on the same GPU under "cuda" (null when not traced), then the processes only the
// tracer sees (source "trace": a remote runtime's, or ones NVML has not listed yet).
json ProcessesJson(const gpu::GpuSnapshot& snap, const std::vector<trace::ProcessCuda>& traced,
                   bool tracing) {
  std::vector<bool> used(traced.size(), false);
  json list = json::array();
  for (const gpu::GpuInfo& g : snap.gpus) {
    for (const gpu::ProcessInfo& p : g.processes) {
      json j = gpu::ToJson(p);
      j["gpu"] = g.index;
      j["gpu_uuid"] = g.uuid;
      j["source"] = "nvml";
      json cuda = nullptr;
      for (size_t i = 0; i < traced.size(); ++i) {
        if (!used[i] && traced[i].pid == p.pid && traced[i].gpu_uuid == g.uuid) {
          cuda = CudaListJson(traced[i]);
          used[i] = true;
          break;
        }
      }
      j["cuda"] = std::move(cuda);
      list.push_back(std::move(j));
    }
  }
  for (size_t i = 0; i < traced.size(); ++i) {
    if (used[i]) continue;
    const trace::ProcessCuda& t = traced[i];
    json index = nullptr;
    for (const gpu::GpuInfo& g : snap.gpus) {
      if (!t.gpu_uuid.empty() && g.uuid == t.gpu_uuid) index = g.index;
    }
    list.push_back({{"pid", t.pid},
                    {"name", SanitizeUtf8(t.comm)},
                    {"container_id", t.container_id.empty() ? json(nullptr) : json(t.container_id)},
                    {"gpu", index},
                    {"gpu_uuid", t.gpu_uuid.empty() ? json(nullptr) : json(t.gpu_uuid)},
                    {"source", "trace"},
                    {"cuda", CudaListJson(t)}});
  }
  return {{"processes", list}, {"tracing", tracing}};
}

constexpr const char* kProfilesOff = "profiles are off ([profile] enabled = false)";

// The short profile of the GPU `uuid`/`index` among `profiles`, or null.
json SummaryOf(const std::vector<profile::GpuProfile>& profiles, const gpu::GpuInfo& g) {
  for (const profile::GpuProfile& p : profiles) {
    if (p.index == g.index && p.uuid == ProfileKey(g)) return profile::SummaryJson(p);
  }
  return nullptr;
}

}  // namespace

NodeServer::NodeServer(gpu::Monitor& monitor, NodeConfig config, const Clock& clock,
                       std::string version, const trace::StatsSource* cuda,
                       GpuServers* gpu_servers, const ProfileSource* profiles)
    : monitor_(monitor),
      cuda_(cuda),
      gpu_servers_(gpu_servers),
      profiles_(profiles),
      config_(std::move(config)),
      clock_(clock),
      version_(std::move(version)),
      started_(clock.SteadyNow()),
      router_([this](const httplib::Request& req,
                     const Access& access) { return Identify(req, access); },
              Access::kToken),
      server_(std::make_unique<http::Server>()) {
  SetUpRoutes();
}

void NodeServer::SetKubernetes(const KubeAnnotationPublisher* publisher,
                               nlohmann::json off_status) {
  kube_ = publisher;
  kube_off_ = std::move(off_status);
}

NodeServer::~NodeServer() { Stop(); }

Status NodeServer::Start() {
  FLYT_ASSIGN_OR_RETURN(port_,
                        http::Listen(*server_, config_.listen_host, config_.listen_port, thread_));
  return Status::Ok();
}

void NodeServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

Result<std::monostate> NodeServer::Identify(const httplib::Request& req,
                                            const Access& access) const {
  if (access == Access::kPublic || config_.bearer_token.empty()) return std::monostate{};
  // Constant-time comparison: the time taken says nothing about how much of a guess was right.
  if (!http::TokenEquals(http::BearerToken(req).value_or(""), config_.bearer_token)) {
    return http::Unauthenticated("missing or wrong bearer token");
  }
  return std::monostate{};
}

void NodeServer::SetUpRoutes() {
  http::ServerOptions limits = config_.http;
  limits.max_body_bytes = config_.max_body_bytes;
  http::Configure(*server_, limits);
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  using Params = const http::PathParams&;
  auto get = [this](const char* pattern, Access access, Router::Handler h) {
    router_.Add("GET", pattern, access, std::move(h));
  };

  get("/healthz", Access::kPublic, [this](Req, Res res, const Caller&, Params) {
    auto snap = monitor_.LastSnapshot();
    if (!snap) {
      SendJson(res, 503,
               {{"status", "starting"}, {"error", "no sample taken yet"}, {"code", "unavailable"}});
      return;
    }
    SendJson(res, 200, {{"status", "ok"}, {"source", gpu::SourceName(snap->source)}});
  });

  get("/metrics", Access::kToken, [this](Req, Res res, const Caller&, Params) {
    auto snap = monitor_.LastSnapshot();
    MetricsInput in;
    in.snapshot = snap ? &*snap : nullptr;
    in.events = monitor_.EventCountsByGpu();
    in.events_supported = monitor_.SupportsEvents();
    in.stats = monitor_.Stats();
    in.hostname = config_.name;
    in.node_name = config_.name;
    in.version = version_;
    in.scrapes = ++scrapes_;
    trace::TracerHealth health;
    std::vector<trace::ProcessCuda> traced;
    if (cuda_ != nullptr) {
      health = cuda_->Health();
      traced = cuda_->Processes();
      in.cuda_health = &health;
      in.cuda_processes = &traced;
    }
    std::vector<profile::GpuProfile> profiles;
    std::map<std::string, uint64_t> phase_changes;
    if (profiles_ != nullptr) {
      profiles = profiles_->Profiles();
      phase_changes = profiles_->PhaseChangeCounts();
      in.profiles = &profiles;
      in.phase_changes = &phase_changes;
    }
    // The HTTP server's own: connections refused, requests timed out (a flood shows here).
    res.set_content(RenderMetrics(in) + server_->MetricsText("flyt_node") +
                        (gpu_servers_ != nullptr ? gpu_servers_->MetricsText() : std::string()) +
                        (kube_ != nullptr ? kube_->MetricsText() : std::string()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });

  get("/api/v1/kubernetes", Access::kToken, [this](Req, Res res, const Caller&, Params) {
    SendJson(res, 200, kube_ != nullptr ? kube_->StatusJson() : kube_off_);
  });

  get("/api/v1/node", Access::kToken, [this](Req, Res res, const Caller&, Params) {
    auto snap = monitor_.LastSnapshot();
    json labels = json::object();
    for (const auto& [k, v] : config_.labels) labels[k] = v;
    json body = {
        {"name", config_.name},
        {"labels", labels},
        {"version", version_},
        {"uptime_seconds",
         std::chrono::duration<double>(clock_.SteadyNow() - started_).count()},
        {"cluster_manager", config_.cluster_manager.empty() ? json(nullptr)
                                                            : json(config_.cluster_manager)},
        {"source", gpu::SourceName(monitor_.source())},
        {"gpu_count", snap ? json(snap->gpus.size()) : json(nullptr)},
        {"driver_version", snap && snap->driver_version ? json(*snap->driver_version) : json(nullptr)},
        {"cuda_driver_version",
         snap && snap->cuda_driver_version ? json(*snap->cuda_driver_version) : json(nullptr)},
        {"simulated_scenario",
         snap && snap->simulated_scenario ? json(*snap->simulated_scenario) : json(nullptr)},
        {"reason", snap && !snap->reason.empty() ? json(snap->reason) : json(nullptr)},
    };
    SendJson(res, 200, body);
  });

  auto with_snapshot = [this](httplib::Response& res) -> std::optional<gpu::GpuSnapshot> {
    auto snap = monitor_.LastSnapshot();
    if (!snap) SendError(res, 503, "no sample taken yet; try again in a moment");
    return snap;
  };

  get("/api/v1/gpus", Access::kToken, [this, with_snapshot](Req, Res res, const Caller&, Params) {
    auto snap = with_snapshot(res);
    if (!snap) return;
    std::vector<profile::GpuProfile> profiles;
    std::chrono::system_clock::time_point profiled_at{};
    if (profiles_ != nullptr) {
      profiles = profiles_->Profiles();
      for (const profile::GpuProfile& p : profiles) profiled_at = std::max(profiled_at, p.computed_at);
    }
    std::shared_ptr<const std::string> body;
    {
      MutexLock lock(gpus_mu_);
      if (gpus_body_ && gpus_taken_at_ == snap->taken_at && gpus_profiled_at_ == profiled_at) {
        body = gpus_body_;
      }
    }
    if (!body) {
      json j = gpu::ToJson(*snap);
      j["node"] = config_.name;
      if (j.contains("gpus") && j["gpus"].is_array()) {
        for (size_t i = 0; i < j["gpus"].size() && i < snap->gpus.size(); ++i) {
          j["gpus"][i]["profile"] = SummaryOf(profiles, snap->gpus[i]);
        }
      }
      body = std::make_shared<const std::string>(gpu::DumpJson(j) + "\n");
      MutexLock lock(gpus_mu_);
      gpus_taken_at_ = snap->taken_at;
      gpus_profiled_at_ = profiled_at;
      gpus_body_ = body;
    }
    res.status = 200;
    res.set_content(*body, "application/json");
  });

  get(R"(/api/v1/gpus/([^/]+))", Access::kToken,
      [this, with_snapshot](Req, Res res, const Caller&, Params path) {
        auto snap = with_snapshot(res);
        if (!snap) return;
        auto index = GpuIndex(path[1], *snap);
        if (!index.ok()) return SendStatus(res, index.status());
        for (const gpu::GpuInfo& g : snap->gpus) {
          if (g.index != *index) continue;
          json j = gpu::ToJson(g);
          j["profile"] = profiles_ != nullptr ? SummaryOf(profiles_->Profiles(), g) : json(nullptr);
          return SendJson(res, 200, j);
        }
      });

  get(R"(/api/v1/gpus/([^/]+)/history)", Access::kToken,
      [this, with_snapshot](Req req, Res res, const Caller&, Params path) {
        auto snap = with_snapshot(res);
        if (!snap) return;
        auto index = GpuIndex(path[1], *snap);
        if (!index.ok()) return SendStatus(res, index.status());
        // since: Unix seconds, or seconds before now when negative (default -600). step: seconds.
        double since_s = -600, step_s = 0;
        if (req.has_param("since")) {
          auto v = ParseDouble(req.get_param_value("since"));
          if (!v || *v > 1e10 || *v < -1e10) {
            return SendError(
                res, 400, "since must be Unix seconds, or negative: seconds ago (|since| <= 1e10)");
          }
          since_s = *v;
        }
        if (req.has_param("step")) {
          auto v = ParseDouble(req.get_param_value("step"));
          if (!v || *v < 0 || *v > 86400) {
            return SendError(res, 400, "step must be 0-86400 seconds");
          }
          step_s = *v;
        }
        auto now = clock_.WallNow();
        auto since = since_s < 0
                         ? now + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                     std::chrono::duration<double>(since_s))
                         : std::chrono::system_clock::time_point(
                               std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                   std::chrono::duration<double>(since_s)));
        json points = json::array();
        for (const auto& p : monitor_.GetHistory(
                 *index, since, std::chrono::milliseconds(static_cast<int64_t>(step_s * 1000)))) {
          points.push_back(gpu::ToJson(p));
        }
        SendJson(res, 200, {{"gpu", *index}, {"step_seconds", step_s}, {"points", points}});
      });

  get("/api/v1/processes", Access::kToken,
      [this, with_snapshot](Req, Res res, const Caller&, Params) {
        auto snap = with_snapshot(res);
        if (!snap) return;
        std::vector<trace::ProcessCuda> traced;
        bool tracing = false;
        if (cuda_ != nullptr) {
          tracing = cuda_->Health().enabled;
          traced = cuda_->Processes();
        }
        SendJson(res, 200, ProcessesJson(*snap, traced, tracing));
      });

  get(R"(/api/v1/processes/([^/]+)/cuda)", Access::kToken,
      [this](Req, Res res, const Caller&, Params path) {
        auto pid = ParseUint(path[1]);
        if (!pid || path[1].find_first_not_of("0123456789") != std::string::npos ||
            *pid > std::numeric_limits<uint32_t>::max()) {
          return SendError(res, 400, "pid '" + path[1] + "' is not a process id");
        }
        json list = json::array();
        if (cuda_ != nullptr) {
          for (const trace::ProcessCuda& p : cuda_->Processes()) {
            if (p.pid == *pid) list.push_back(ToJson(p));
          }
        }
        if (list.empty()) {
          return SendStatus(res, NotFound("no traced CUDA process " + path[1] + " on this node" +
                                          (cuda_ == nullptr || !cuda_->Health().enabled
                                               ? " (CUDA tracing is off: GET /api/v1/trace)"
                                               : "")));
        }
        SendJson(res, 200, {{"pid", *pid}, {"processes", list}});
      });

  get("/api/v1/trace", Access::kToken, [this](Req, Res res, const Caller&, Params) {
    trace::TracerHealth h;
    if (cuda_ != nullptr) {
      h = cuda_->Health();
    } else {
      h.disabled_reason = "this node manager runs without a CUDA tracer";
    }
    SendJson(res, 200, ToJson(h));
  });

  get("/api/v1/events", Access::kToken, [this](Req, Res res, const Caller&, Params) {
    json events = json::array();
    for (const gpu::GpuEvent& e : monitor_.RecentEvents()) events.push_back(gpu::ToJson(e));
    if (gpu_servers_ != nullptr) {  // the GPU servers' events among the GPUs', by time
      for (json& e : gpu_servers_->Events()) events.push_back(std::move(e));
      std::stable_sort(events.begin(), events.end(), [](const json& a, const json& b) {
        return a.value("at", std::string()) < b.value("at", std::string());
      });
    }
    SendJson(res, 200, {{"events", events}, {"counts", CountsJson(monitor_.EventCountsByGpu())}});
  });

  get("/api/v1/monitoring/sessions", Access::kToken, [this](Req, Res res, const Caller&, Params) {
    SendJson(res, 200, {{"sessions", monitor_.SessionIds()}});
  });

  router_.Add(
      "POST", "/api/v1/monitoring/sessions", Access::kToken,
      [this](Req req, Res res, const Caller&, Params) {
        gpu::SessionOptions options;
        if (!Trim(req.body).empty()) {
          const std::optional<json> body = JsonBody(req, res);
          if (!body) return;
          auto fields = JsonFields::Of(*body, "the body");
          if (!fields.ok()) return SendStatus(res, fields.status());
          auto parsed = SessionFields(*fields, monitor_, options);
          if (!parsed.ok()) return SendStatus(res, parsed);
        }
        auto id = monitor_.StartSession(options);
        if (!id.ok()) return SendStatus(res, id.status());
        res.set_header("Location", "/api/v1/monitoring/sessions/" + *id);
        SendJson(res, 201, {{"id", *id}});
      });

  get(R"(/api/v1/monitoring/sessions/([^/]+))", Access::kToken,
      [this](Req, Res res, const Caller&, Params path) {
        auto stats = monitor_.GetSession(path[1]);
        if (!stats.ok()) return SendStatus(res, stats.status());
        SendJson(res, 200, gpu::ToJson(*stats));
      });

  router_.Add("DELETE", R"(/api/v1/monitoring/sessions/([^/]+))", Access::kToken,
              [this](Req, Res res, const Caller&, Params path) {
                auto stats = monitor_.StopSession(path[1]);
                if (!stats.ok()) return SendStatus(res, stats.status());
                SendJson(res, 200, gpu::ToJson(*stats));
              });

  SetUpGpuServerRoutes();
  SetUpProfileRoutes();
  router_.Install(*server_);
}

void NodeServer::SetUpProfileRoutes() {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  using Params = const http::PathParams&;
  router_.Add("GET", "/api/v1/profiles", Access::kToken,
              [this](Req, Res res, const Caller&, Params) {
                if (profiles_ == nullptr) {
                  return SendStatus(res, Unavailable(kProfilesOff));
                }
                json list = json::array();
                for (const profile::GpuProfile& p : profiles_->Profiles()) {
                  list.push_back(profile::ToJson(p));
                }
                SendJson(res, 200,
                         {{"profiles", list},
                          {"footprint_bytes_per_gpu", profiles_->BytesPerGpu()},
                          {"options", profiles_->OptionsJson()}});
              });
  router_.Add("GET", R"(/api/v1/gpus/([^/]+)/profile)", Access::kToken,
              [this](Req, Res res, const Caller&, Params path) {
                if (profiles_ == nullptr) {
                  return SendStatus(res, Unavailable(kProfilesOff));
                }
                auto snap = monitor_.LastSnapshot();
                if (!snap) {
                  return SendStatus(res, Unavailable("no sample taken yet; try again in a moment"));
                }
                auto index = GpuIndex(path[1], *snap);
                if (!index.ok()) return SendStatus(res, index.status());
                auto p = profiles_->Profile(*index);
                if (!p) {
                  return SendStatus(res, Unavailable("GPU " + path[1] +
                                                     " has no profile yet; try again in a moment"));
                }
                SendJson(res, 200, profile::ToJson(*p));
              });
}

void NodeServer::SetUpGpuServerRoutes() {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  using Params = const http::PathParams&;
  // Without [gpu-servers] the routes exist but say why there is nothing.
  auto enabled = [this](Res res) {
    if (gpu_servers_ != nullptr) return true;
    SendError(res, 404, "GPU servers are not enabled on this node ([gpu-servers] enabled = false)",
              "not_found");
    return false;
  };
  router_.Add("GET", "/api/v1/gpu-servers", Access::kToken,
              [this, enabled](Req, Res res, const Caller&, Params) {
                if (enabled(res)) SendJson(res, 200, gpu_servers_->List());
              });
  router_.Add("GET", R"(/api/v1/gpu-servers/([^/]+))", Access::kToken,
              [this, enabled](Req, Res res, const Caller&, Params path) {
                if (!enabled(res)) return;
                auto record = gpu_servers_->GetWithClients(path[1]);
                if (!record.ok()) return SendStatus(res, record.status());
                SendJson(res, 200, *record);
              });
  router_.Add("PUT", R"(/api/v1/gpu-servers/([^/]+))", Access::kToken,
              [this, enabled](Req req, Res res, const Caller&, Params path) {
                if (!enabled(res)) return;
                const std::optional<json> body = JsonBody(req, res);
                if (!body) return;
                auto spec = GpuServerSpecFromJson(*body);
                if (!spec.ok()) return SendStatus(res, spec.status());
                if (spec->lease_id != path[1]) {
                  return SendError(res, 400,
                                   "lease_id '" + spec->lease_id + "' differs from the path's '" +
                                       path[1] + "'");
                }
                auto put = gpu_servers_->Put(*spec);
                if (!put.ok()) return SendStatus(res, put.status());
                if (put->created) {
                  res.set_header("Location", "/api/v1/gpu-servers/" + spec->lease_id);
                }
                SendJson(res, put->created ? 201 : 200, put->record);
              });
  // POST .../{lease}/<action>: the body parsed and checked by `parse`, then `act` on the server.
  auto action = [this, enabled](const char* pattern, auto parse, auto act) {
    router_.Add("POST", pattern, Access::kToken,
                [enabled, parse, act](Req req, Res res, const Caller&, Params path) {
                  if (!enabled(res)) return;
                  const std::optional<json> body = JsonBody(req, res);
                  if (!body) return;
                  auto request = parse(*body);
                  if (!request.ok()) return SendStatus(res, request.status());
                  auto done = act(path[1], *request);
                  if (!done.ok()) return SendServerCallError(res, done.status());
                  SendJson(res, 200, *done);
                });
  };
  action(R"(/api/v1/gpu-servers/([^/]+)/migrate)", MigrateRequestFromJson,
         [this](const std::string& lease, const auto& request) {
           return gpu_servers_->Migrate(lease, request);
         });
  action(R"(/api/v1/gpu-servers/([^/]+)/resize)", ResizeRequestFromJson,
         [this](const std::string& lease, const auto& request) {
           return gpu_servers_->Resize(lease, request);
         });
  router_.Add("DELETE", R"(/api/v1/gpu-servers/([^/]+))", Access::kToken,
              [this, enabled](Req, Res res, const Caller&, Params path) {
                if (!enabled(res)) return;
                Status s = gpu_servers_->Drain(path[1]);
                if (!s.ok()) return SendStatus(res, s);
                SendJson(res, 202, {{"draining", path[1]}});
              });
}

}  // namespace flyt::node
