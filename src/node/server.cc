#include "node/server.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <vector>

#include "common/http.h"
#include "common/strings.h"
#include "gpu/json.h"
#include "node/metrics.h"

namespace flyt::node {
namespace {

using nlohmann::json;

using http::SendError;
using http::SendJson;

// The routes and the methods each allows; checked before routing so that a wrong method gets 405
// and an unknown path 404, both as JSON.
struct Route {
  std::regex pattern;
  std::vector<std::string> methods;
};

const std::vector<Route>& Routes() {
  static const std::vector<Route> kRoutes = {
      {std::regex("/healthz"), {"GET"}},
      {std::regex("/metrics"), {"GET"}},
      {std::regex("/api/v1/node"), {"GET"}},
      {std::regex("/api/v1/gpus"), {"GET"}},
      {std::regex("/api/v1/gpus/[^/]+"), {"GET"}},
      {std::regex("/api/v1/gpus/[^/]+/history"), {"GET"}},
      {std::regex("/api/v1/processes"), {"GET"}},
      {std::regex("/api/v1/events"), {"GET"}},
      {std::regex("/api/v1/monitoring/sessions"), {"GET", "POST"}},
      {std::regex("/api/v1/monitoring/sessions/[^/]+"), {"GET", "DELETE"}},
  };
  return kRoutes;
}

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

int HttpStatus(const Status& s) { return http::HttpStatus(s); }

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

}  // namespace

NodeServer::NodeServer(gpu::Monitor& monitor, NodeConfig config, const Clock& clock,
                       std::string version)
    : monitor_(monitor),
      config_(std::move(config)),
      clock_(clock),
      version_(std::move(version)),
      started_(clock.SteadyNow()),
      server_(std::make_unique<httplib::Server>()) {
  SetUpRoutes();
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

bool NodeServer::Gate(const httplib::Request& req, httplib::Response& res) const {
  if (!config_.bearer_token.empty() && req.path != "/healthz") {
    // Constant-time comparison: the time taken says nothing about how much of a guess was right.
    if (!http::TokenEquals(http::BearerToken(req).value_or(""), config_.bearer_token)) {
      res.set_header("WWW-Authenticate", "Bearer");
      SendError(res, 401, "missing or wrong bearer token");
      return false;
    }
  }
  const Route* route = nullptr;
  for (const Route& r : Routes()) {
    if (std::regex_match(req.path, r.pattern)) route = &r;
  }
  if (route == nullptr) {
    SendError(res, 404, "no such endpoint: " + req.path + " (see docs/api.md)");
    return false;
  }
  bool allowed = false;
  std::string allow;
  for (const std::string& m : route->methods) {
    allowed = allowed || m == req.method || (req.method == "HEAD" && m == "GET");
    allow += (allow.empty() ? "" : ", ") + m;
  }
  if (!allowed) {
    res.set_header("Allow", allow);
    SendError(res, 405, "method " + req.method + " is not allowed on " + req.path +
                            " (allowed: " + allow + ")");
    return false;
  }
  return true;
}

void NodeServer::SetUpRoutes() {
  httplib::Server& s = *server_;
  http::Configure(s, {config_.max_body_bytes, 16});

  // Requests with a body are never answered before the body is read: on a keep-alive connection
  // an unread body would be parsed as the next request. They reach the catch-all handlers below
  // (or their own handler, which calls Gate first).
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (http::HasBody(req)) return httplib::Server::HandlerResponse::Unhandled;
    return Gate(req, res) ? httplib::Server::HandlerResponse::Unhandled
                          : httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    auto snap = monitor_.LastSnapshot();
    if (!snap) {
      SendJson(res, 503, {{"status", "starting"}, {"error", "no sample taken yet"}});
      return;
    }
    SendJson(res, 200, {{"status", "ok"}, {"source", gpu::SourceName(snap->source)}});
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
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
    res.set_content(RenderMetrics(in), "text/plain; version=0.0.4; charset=utf-8");
  });

  s.Get("/api/v1/node", [this](const httplib::Request&, httplib::Response& res) {
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

  s.Get("/api/v1/gpus", [this, with_snapshot](const httplib::Request&, httplib::Response& res) {
    auto snap = with_snapshot(res);
    if (!snap) return;
    std::shared_ptr<const std::string> body;
    {
      std::scoped_lock lock(gpus_mu_);
      if (gpus_body_ && gpus_taken_at_ == snap->taken_at) body = gpus_body_;
    }
    if (!body) {
      json j = gpu::ToJson(*snap);
      j["node"] = config_.name;
      body = std::make_shared<const std::string>(gpu::DumpJson(j) + "\n");
      std::scoped_lock lock(gpus_mu_);
      gpus_taken_at_ = snap->taken_at;
      gpus_body_ = body;
    }
    res.status = 200;
    res.set_content(*body, "application/json");
  });

  s.Get(R"(/api/v1/gpus/([^/]+))",
        [with_snapshot](const httplib::Request& req, httplib::Response& res) {
          auto snap = with_snapshot(res);
          if (!snap) return;
          auto index = GpuIndex(req.matches[1], *snap);
          if (!index.ok()) return SendError(res, HttpStatus(index.status()), index.status().message());
          for (const gpu::GpuInfo& g : snap->gpus) {
            if (g.index == *index) return SendJson(res, 200, gpu::ToJson(g));
          }
        });

  s.Get(R"(/api/v1/gpus/([^/]+)/history)", [this, with_snapshot](const httplib::Request& req,
                                                                  httplib::Response& res) {
    auto snap = with_snapshot(res);
    if (!snap) return;
    auto index = GpuIndex(req.matches[1], *snap);
    if (!index.ok()) return SendError(res, HttpStatus(index.status()), index.status().message());
    // since: Unix seconds, or seconds before now when negative (default -600). step: seconds.
    double since_s = -600, step_s = 0;
    if (req.has_param("since")) {
      auto v = ParseDouble(req.get_param_value("since"));
      if (!v || *v > 1e10 || *v < -1e10) {
        return SendError(res, 400,
                         "since must be Unix seconds, or negative: seconds ago (|since| <= 1e10)");
      }
      since_s = *v;
    }
    if (req.has_param("step")) {
      auto v = ParseDouble(req.get_param_value("step"));
      if (!v || *v < 0 || *v > 86400) return SendError(res, 400, "step must be 0-86400 seconds");
      step_s = *v;
    }
    auto now = clock_.WallNow();
    auto since = since_s < 0 ? now + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                         std::chrono::duration<double>(since_s))
                             : std::chrono::system_clock::time_point(
                                   std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                       std::chrono::duration<double>(since_s)));
    json points = json::array();
    for (const auto& p : monitor_.GetHistory(
             *index, since,
             std::chrono::milliseconds(static_cast<int64_t>(step_s * 1000)))) {
      points.push_back(gpu::ToJson(p));
    }
    SendJson(res, 200, {{"gpu", *index}, {"step_seconds", step_s}, {"points", points}});
  });

  s.Get("/api/v1/processes", [with_snapshot](const httplib::Request&, httplib::Response& res) {
    auto snap = with_snapshot(res);
    if (!snap) return;
    json list = json::array();
    for (const gpu::GpuInfo& g : snap->gpus) {
      for (const gpu::ProcessInfo& p : g.processes) {
        json j = gpu::ToJson(p);
        j["gpu"] = g.index;
        j["gpu_uuid"] = g.uuid;
        list.push_back(std::move(j));
      }
    }
    SendJson(res, 200, {{"processes", list}});
  });

  s.Get("/api/v1/events", [this](const httplib::Request&, httplib::Response& res) {
    json events = json::array();
    for (const gpu::GpuEvent& e : monitor_.RecentEvents()) events.push_back(gpu::ToJson(e));
    SendJson(res, 200, {{"events", events}, {"counts", CountsJson(monitor_.EventCountsByGpu())}});
  });

  s.Get("/api/v1/monitoring/sessions", [this](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, {{"sessions", monitor_.SessionIds()}});
  });

  s.Post("/api/v1/monitoring/sessions", [this](const httplib::Request& req,
                                               httplib::Response& res) {
    if (!Gate(req, res)) return;
    gpu::SessionOptions options;
    if (!Trim(req.body).empty()) {
      json body;
      try {
        body = json::parse(req.body);
      } catch (const json::exception& e) {  // parse errors, and numbers beyond double's range
        return SendError(res, 400, std::string("malformed JSON body: ") + e.what());
      }
      if (!body.is_object()) return SendError(res, 400, "the body must be a JSON object");
      for (const auto& [key, value] : body.items()) {
        if (key != "gpus" && key != "interval_seconds") {
          return SendError(res, 400, "unknown field '" + key + "' (expected gpus, interval_seconds)");
        }
      }
      auto snap = monitor_.LastSnapshot();
      if (body.contains("gpus")) {
        if (!snap) return SendError(res, 503, "no sample taken yet; try again in a moment");
        const json& gpus = body["gpus"];
        if (!gpus.is_array() || gpus.empty() || gpus.size() > snap->gpus.size()) {
          return SendError(res, 400,
                           "gpus must be a non-empty array of this node's GPU indexes (it has " +
                               std::to_string(snap->gpus.size()) + ")");
        }
        std::vector<uint32_t> list;
        for (const json& g : gpus) {
          if (!g.is_number_unsigned()) {
            return SendError(res, 400, "gpus must hold non-negative integers");
          }
          auto v = g.get<uint64_t>();
          bool known = false;
          for (const gpu::GpuInfo& info : snap->gpus) known = known || info.index == v;
          if (!known) return SendError(res, 400, "no GPU " + std::to_string(v) + " on this node");
          if (std::find(list.begin(), list.end(), v) != list.end()) {
            return SendError(res, 400, "GPU " + std::to_string(v) + " is listed twice");
          }
          list.push_back(static_cast<uint32_t>(v));
        }
        options.gpus = list;
      }
      if (body.contains("interval_seconds")) {
        const json& iv = body["interval_seconds"];
        if (!iv.is_number() || !(iv.get<double>() > 0) || iv.get<double>() > 86400) {
          return SendError(res, 400, "interval_seconds must be a number in (0, 86400]");
        }
        options.interval = std::chrono::milliseconds(static_cast<int64_t>(iv.get<double>() * 1000));
      }
    }
    auto id = monitor_.StartSession(options);
    if (!id.ok()) return SendError(res, HttpStatus(id.status()), id.status().message());
    res.set_header("Location", "/api/v1/monitoring/sessions/" + *id);
    SendJson(res, 201, {{"id", *id}});
  });

  s.Get(R"(/api/v1/monitoring/sessions/([^/]+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto stats = monitor_.GetSession(req.matches[1]);
          if (!stats.ok()) return SendError(res, HttpStatus(stats.status()), stats.status().message());
          SendJson(res, 200, gpu::ToJson(*stats));
        });

  s.Delete(R"(/api/v1/monitoring/sessions/([^/]+))",
           [this](const httplib::Request& req, httplib::Response& res) {
             if (!Gate(req, res)) return;
             auto stats = monitor_.StopSession(req.matches[1]);
             if (!stats.ok()) {
               return SendError(res, HttpStatus(stats.status()), stats.status().message());
             }
             SendJson(res, 200, gpu::ToJson(*stats));
           });

  // Every other method/path pair (after the body, if any, was read): 401, 404 or 405 as JSON.
  auto rest = [this](const httplib::Request& req, httplib::Response& res) {
    if (Gate(req, res)) SendError(res, 404, "no such endpoint: " + req.method + " " + req.path);
  };
  s.Get(".*", rest);
  s.Post(".*", rest);
  s.Put(".*", rest);
  s.Patch(".*", rest);
  s.Delete(".*", rest);
  s.Options(".*", rest);
}

}  // namespace flyt::node
