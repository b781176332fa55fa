#include "cluster/server.h"

#include <httplib.h>

#include "common/http.h"
#include "common/strings.h"

namespace flyt::cluster {

using nlohmann::json;

namespace {

// The manager's mapping: a request the cluster cannot meet now is a conflict with its state
// (409), not a rate limit.
void Send(httplib::Response& res, const Status& s) {
  http::SendError(res, s.code() == StatusCode::kResourceExhausted ? 409 : http::HttpStatus(s),
                  s.message());
}

void Reply(httplib::Response& res, const Result<json>& r, int ok_status = 200) {
  if (!r.ok()) return Send(res, r.status());
  http::SendJson(res, ok_status, *r);
}

Result<json> Body(const httplib::Request& req) { return http::ParseBody(req); }

}  // namespace

ClusterServer::ClusterServer(Cluster& cluster, Auth auth, const ClusterConfig& config,
                             std::string version)
    : cluster_(cluster),
      auth_(std::move(auth)),
      config_(config),
      version_(std::move(version)),
      server_(std::make_unique<httplib::Server>()) {
  http::Configure(*server_, {config_.max_body_bytes, 32});
  AddRoutes();
  auto dispatch = [this](const httplib::Request& req, httplib::Response& res) {
    Dispatch(req, res);
  };
  server_->Get(".*", dispatch);
  server_->Post(".*", dispatch);
  server_->Put(".*", dispatch);
  server_->Patch(".*", dispatch);
  server_->Delete(".*", dispatch);
  server_->Options(".*", dispatch);
}

ClusterServer::~ClusterServer() { Stop(); }

Status ClusterServer::Start() {
  FLYT_ASSIGN_OR_RETURN(port_,
                        http::Listen(*server_, config_.listen_host, config_.listen_port, thread_));
  return Status::Ok();
}

void ClusterServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

bool ClusterServer::Allowed(Access access, Role role) {
  switch (access) {
    case Access::kPublic:
    case Access::kAny: return true;
    case Access::kRead: return role != Role::kNode;
    case Access::kClient: return role == Role::kClient || role == Role::kAdmin;
    case Access::kNode: return role == Role::kNode || role == Role::kAdmin;
    case Access::kAdmin: return role == Role::kAdmin;
  }
  return false;
}

void ClusterServer::Dispatch(const httplib::Request& req, httplib::Response& res) {
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  std::smatch match;
  const Route* route = nullptr;
  std::string allow;
  for (const Route& r : routes_) {
    std::smatch m;
    if (!std::regex_match(req.path, m, r.pattern)) continue;
    if (allow.find(r.method) == std::string::npos) allow += (allow.empty() ? "" : ", ") + r.method;
    if (r.method == method && route == nullptr) {
      route = &r;
      match = m;
    }
  }
  if (allow.empty()) {
    return http::SendError(res, 404, "no such endpoint: " + req.path + " (see docs/api.md)");
  }
  if (route == nullptr) {
    res.set_header("Allow", allow);
    return http::SendError(res, 405, "method " + req.method + " is not allowed on " + req.path +
                                         " (allowed: " + allow + ")");
  }
  Caller caller{"anonymous", Role::kViewer};
  if (route->access != Access::kPublic) {
    auto who = auth_.Identify(http::BearerToken(req));
    if (!who) {
      res.set_header("WWW-Authenticate", "Bearer");
      return http::SendError(res, 401, "missing or unknown bearer token");
    }
    caller = *who;
    if (!Allowed(route->access, caller.role)) {
      return http::SendError(res, 403, std::string("a ") + RoleName(caller.role) +
                                           " token may not " + req.method + " " + req.path);
    }
  }
  route->handler(req, res, caller, match);
}

void ClusterServer::AddRoutes() {
  auto add = [this](const char* pattern, const char* method, Access access, Handler h) {
    routes_.push_back({std::regex(pattern), method, access, std::move(h)});
  };
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  using Who = const Caller&;
  using Match = const std::smatch&;
  // A route whose handler takes the parsed JSON body and answers with a Result.
  using BodyHandler = std::function<Result<json>(Who, const json&, Match)>;
  auto with_body = [&add](const char* pattern, Access access, int ok_status, BodyHandler h) {
    add(pattern, "POST", access, [h, ok_status](Req req, Res res, Who who, Match m) {
      auto body = Body(req);
      if (!body.ok()) return Send(res, body.status());
      Reply(res, h(who, *body, m), ok_status);
    });
  };

  add("/healthz", "GET", Access::kPublic, [this](Req, Res res, Who, Match) {
    http::SendJson(res, 200, {{"status", "ok"}, {"version", version_}});
  });
  add("/metrics", "GET", Access::kRead, [this](Req, Res res, Who, Match) {
    res.set_content(cluster_.Metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  add("/api/v1/whoami", "GET", Access::kAny, [](Req, Res res, Who who, Match) {
    http::SendJson(res, 200, {{"name", who.name}, {"role", RoleName(who.role)}});
  });

  // Inventory.
  with_body("/api/v1/nodes/heartbeat", Access::kNode, 200,
            [this](Who who, const json& body, Match) { return cluster_.Heartbeat(who, body); });
  add("/api/v1/nodes", "GET", Access::kRead,
      [this](Req, Res res, Who, Match) { http::SendJson(res, 200, cluster_.Nodes()); });
  add("/api/v1/nodes/([A-Za-z0-9._-]+)", "GET", Access::kRead,
      [this](Req, Res res, Who, Match m) { Reply(res, cluster_.Node(m[1])); });
  add("/api/v1/gpus", "GET", Access::kRead, [this](Req, Res res, Who, Match) {
    res.status = 200;
    res.set_content(*cluster_.GpusBody(), "application/json");
  });
  add("/api/v1/clients", "GET", Access::kRead,
      [this](Req, Res res, Who, Match) { http::SendJson(res, 200, cluster_.Clients()); });
  with_body("/api/v1/clients", Access::kClient, 200, [this](Who who, const json& body, Match) {
    return cluster_.ClientHeartbeat(who, body);
  });

  // The ledger.
  add("/api/v1/allocations", "GET", Access::kRead,
      [this](Req, Res res, Who, Match) { http::SendJson(res, 200, cluster_.Allocations()); });
  add("/api/v1/allocations", "POST", Access::kClient, [this](Req req, Res res, Who who, Match) {
    auto body = Body(req);
    if (!body.ok()) return Send(res, body.status());
    auto lease = cluster_.Allocate(who, *body);
    if (lease.ok()) res.set_header("Location", "/api/v1/allocations/" + (*lease)["id"].get<std::string>());
    Reply(res, lease, 201);
  });
  add("/api/v1/allocations/([A-Za-z0-9._-]+)", "GET", Access::kRead,
      [this](Req, Res res, Who, Match m) {
        json all = cluster_.Allocations();
        for (const json& l : all["allocations"]) {
          if (l["id"] == m[1].str()) return http::SendJson(res, 200, l);
        }
        http::SendError(res, 404, "no lease " + m[1].str() + " (released, or expired)");
      });
  with_body("/api/v1/allocations/([A-Za-z0-9._-]+)/renew", Access::kClient, 200,
            [this](Who who, const json& body, Match m) { return cluster_.Renew(who, m[1], body); });
  add("/api/v1/allocations/([A-Za-z0-9._-]+)", "DELETE", Access::kClient,
      [this](Req, Res res, Who who, Match m) {
        Status s = cluster_.Release(who, m[1]);
        if (!s.ok()) return Send(res, s);
        http::SendJson(res, 200, {{"released", m[1].str()}});
      });

  // Jobs.
  with_body("/api/v1/jobs", Access::kClient, 201,
            [this](Who who, const json& body, Match) { return cluster_.Submit(who, body); });
  add("/api/v1/jobs", "GET", Access::kRead, [this](Req req, Res res, Who, Match) {
    size_t limit = 1000;
    if (req.has_param("limit")) {
      auto v = ParseUint(req.get_param_value("limit"));
      if (!v || *v < 1 || *v > 100000) return http::SendError(res, 400, "limit must be 1-100000");
      limit = static_cast<size_t>(*v);
    }
    Reply(res, cluster_.Jobs(req.get_param_value("status"), limit));
  });
  add("/api/v1/jobs/([A-Za-z0-9._-]+)", "GET", Access::kRead,
      [this](Req, Res res, Who, Match m) { Reply(res, cluster_.GetJob(m[1])); });
  add("/api/v1/jobs/([A-Za-z0-9._-]+)", "DELETE", Access::kClient,
      [this](Req, Res res, Who who, Match m) { Reply(res, cluster_.Cancel(who, m[1])); });
  with_body("/api/v1/jobs/([A-Za-z0-9._-]+)/complete", Access::kClient, 200,
            [this](Who who, const json& body, Match m) {
              return cluster_.Complete(who, m[1], body);
            });
  add("/api/v1/queue", "GET", Access::kRead,
      [this](Req, Res res, Who, Match) { http::SendJson(res, 200, cluster_.Queue()); });
  add("/api/v1/events", "GET", Access::kRead, [this](Req req, Res res, Who, Match) {
    int64_t after = 0;
    size_t limit = 1000;
    if (req.has_param("after")) {
      auto v = ParseInt(req.get_param_value("after"));
      if (!v || *v < 0) return http::SendError(res, 400, "after must be an event id (>= 0)");
      after = *v;
    }
    if (req.has_param("limit")) {
      auto v = ParseUint(req.get_param_value("limit"));
      if (!v || *v < 1 || *v > 10000) return http::SendError(res, 400, "limit must be 1-10000");
      limit = static_cast<size_t>(*v);
    }
    bool latest = false;
    if (req.has_param("latest")) {
      if (req.has_param("after")) return http::SendError(res, 400, "give after or latest, not both");
      auto v = ParseUint(req.get_param_value("latest"));
      if (!v || *v < 1 || *v > 10000) return http::SendError(res, 400, "latest must be 1-10000");
      limit = static_cast<size_t>(*v);
      latest = true;
    }
    Reply(res, cluster_.Events(after, limit, latest));
  });
}

}  // namespace flyt::cluster
