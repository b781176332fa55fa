#include "cluster/server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "cluster/admission.h"
#include "common/http.h"
#include "common/json.h"
#include "common/strings.h"

namespace flyt::cluster {

using nlohmann::json;

namespace {

void Send(httplib::Response& res, const Status& s) { http::SendError(res, HttpStatusOf(s), s); }

void Reply(httplib::Response& res, const Result<json>& r, int ok_status = 200) {
  if (!r.ok()) return Send(res, r.status());
  http::SendJson(res, ok_status, *r);
}

Result<json> Body(const httplib::Request& req) { return http::ParseBody(req); }

// The Idempotency-Key header: "" when absent; an empty one is refused (as is a malformed one, by
// the Cluster).
Result<std::string> IdempotencyKey(const httplib::Request& req) {
  if (!req.has_header("Idempotency-Key")) return std::string();
  std::string key = req.get_header_value("Idempotency-Key");
  if (key.empty()) return InvalidArgument("Idempotency-Key is empty");
  return key;
}

}  // namespace

int HttpStatusOf(const Status& s) {
  const std::string& reason = s.reason();
  if (reason == "insufficient_gpus" || reason == "never_fits" || reason == "already_ended") {
    return 409;
  }
  if (reason == "idempotency_key_reused" || reason == "lease_failed") return 409;
  if (reason == "too_many_queued") return 429;
  if (reason == "payload_too_large") return 413;
  if (reason == "store_unavailable") return 503;
  return s.code() == StatusCode::kResourceExhausted ? 409 : http::HttpStatus(s);
}

ClusterServer::ClusterServer(Cluster& cluster, Auth auth, const ClusterConfig& config,
                             std::string version, std::optional<WebAssets> web)
    : cluster_(cluster),
      auth_(std::move(auth)),
      config_(config),
      version_(std::move(version)),
      web_(std::move(web)),
      router_([this](const httplib::Request& req, const Access& access) {
        return Identify(req, access);
      }),
      server_(std::make_unique<http::Server>()) {
  // Each open live stream holds a thread: the pool has room for all of them besides the API's.
  http::ServerOptions limits = config_.http;
  limits.max_body_bytes = config_.max_body_bytes;
  limits.threads = config_.http.threads + config_.max_streams;
  http::Configure(*server_, limits);
  // Node heartbeats, /healthz and /metrics go to the priority lane; each token's requests are
  // rate-limited by its role (admission.h).
  server_->SetAdmissionPolicy(
      [this](const http::RequestHead& head) { return Admit(auth_, config_.rate_limits, head); },
      AdmissionLabels());
  // A refused connection or a request kept waiting may have been a heartbeat: the cluster does
  // not count nodes' silence meanwhile.
  server_->SetOverloadListener([&cluster] { cluster.NoteIngestImpaired(); });
  AddRoutes();
  AddWebRoutes();
  router_.Install(*server_);
}

ClusterServer::~ClusterServer() { Stop(); }

Status ClusterServer::Start() {
  FLYT_ASSIGN_OR_RETURN(port_,
                        http::Listen(*server_, config_.listen_host, config_.listen_port, thread_));
  return Status::Ok();
}

void ClusterServer::Stop() {
  {
    MutexLock lock(closing_mu_);
    closing_ = true;
    closing_cv_.NotifyAll();
  }
  cluster_.CloseStreams();  // open streams end, so their threads are free to join
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

Result<Caller> ClusterServer::Identify(const httplib::Request& req, const Access& access) const {
  if (access == Access::kPublic) return Caller{"anonymous", Role::kViewer};
  auto who = auth_.Identify(http::BearerToken(req));
  if (!who) return http::Unauthenticated("missing or unknown bearer token");
  if (!Allowed(access, who->role)) {
    return PermissionDenied(std::string("a ") + RoleName(who->role) + " token may not " +
                            req.method + " " + req.path);
  }
  who->address = req.remote_addr;
  return *who;
}

void ClusterServer::AddRoutes() {
  auto add = [this](const char* pattern, const char* method, Access access, Handler h) {
    router_.Add(method, pattern, access, std::move(h));
  };
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  using Who = const Caller&;
  using Match = const http::PathParams&;
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
    // 200 either way: the manager serves reads during a store outage; "status" says whether it
    // can also take changes.
    json store = cluster_.StoreHealth();
    const bool ok = store["state"] == "ok";
    http::SendJson(res, 200,
                   {{"status", ok ? "ok" : "degraded"}, {"version", version_}, {"store", store}});
  });
  add("/metrics", "GET", Access::kRead, [this](Req, Res res, Who, Match) {
    res.set_content(cluster_.Metrics() + server_->MetricsText("flyt_cluster"), "text/plain; version=0.0.4; charset=utf-8");
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
  add("/api/v1/nodes/([A-Za-z0-9._-]+)", "DELETE", Access::kAdmin,
      [this](Req req, Res res, Who who, Match m) {
        bool force = false;
        if (req.has_param("force")) {
          const std::string v = req.get_param_value("force");
          if (v != "true" && v != "false") {
            return http::SendError(res, 400, "force must be true or false");
          }
          force = v == "true";
        }
        Reply(res, cluster_.RemoveNode(who, m[1], force));
      });
  // Draining: cordon the node and move its remote leases elsewhere; uncordon lifts the cordon.
  with_body("/api/v1/nodes/([A-Za-z0-9._-]+)/drain", Access::kAdmin, 200,
            [this](Who who, const json& body, Match m) { return cluster_.DrainNode(who, m[1], body); });
  with_body("/api/v1/nodes/([A-Za-z0-9._-]+)/uncordon", Access::kAdmin, 200,
            [this](Who who, const json&, Match m) { return cluster_.UncordonNode(who, m[1]); });
  add("/api/v1/nodes/([A-Za-z0-9._-]+)/gpus/([0-9]{1,4})", "GET", Access::kRead,
      [this](Req, Res res, Who, Match m) {
        Reply(res, cluster_.Gpu(m[1], static_cast<unsigned>(std::stoul(m[2]))));
      });
  add("/api/v1/nodes/([A-Za-z0-9._-]+)/gpus/([0-9]{1,4})/history", "GET", Access::kRead,
      [this](Req req, Res res, Who, Match m) { ProxyHistory(req, res, m[1], m[2]); });
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
    auto key = IdempotencyKey(req);
    if (!key.ok()) return Send(res, key.status());
    auto lease = cluster_.Allocate(who, *body, *key);
    if (lease.ok()) res.set_header("Location", "/api/v1/allocations/" + (*lease)["id"].get<std::string>());
    Reply(res, lease, 201);
  });
  add("/api/v1/allocations/([A-Za-z0-9._-]+)", "GET", Access::kRead,
      [this](Req, Res res, Who, Match m) {
        json all = cluster_.Allocations();
        for (const json& l : all["allocations"]) {
          if (l["id"] == m[1]) return http::SendJson(res, 200, l);
        }
        http::SendError(res, 404, "no lease " + m[1] + " (released, or expired)");
      });
  with_body("/api/v1/allocations/([A-Za-z0-9._-]+)/renew", Access::kClient, 200,
            [this](Who who, const json& body, Match m) { return cluster_.Renew(who, m[1], body); });
  add("/api/v1/allocations/([A-Za-z0-9._-]+)", "DELETE", Access::kClient,
      [this](Req, Res res, Who who, Match m) {
        Status s = cluster_.Release(who, m[1]);
        if (!s.ok()) return Send(res, s);
        http::SendJson(res, 200, {{"released", m[1]}});
      });

  // Remote leases: shares of one GPU served by a GPU server on its node.
  add("/api/v1/remote-leases", "POST", Access::kClient, [this](Req req, Res res, Who who, Match) {
    auto body = Body(req);
    if (!body.ok()) return Send(res, body.status());
    auto key = IdempotencyKey(req);
    if (!key.ok()) return Send(res, key.status());
    auto lease = cluster_.CreateRemoteLease(who, *body, *key);
    if (lease.ok()) {
      res.set_header("Location", "/api/v1/remote-leases/" + (*lease)["id"].get<std::string>());
    }
    res.set_header("Cache-Control", "no-store");  // the answer holds the server's secret
    Reply(res, lease, 201);
  });
  add("/api/v1/remote-leases", "GET", Access::kRead, [this](Req req, Res res, Who, Match) {
    http::SendJson(res, 200,
                   cluster_.RemoteLeases(req.get_param_value("node"),
                                         req.get_param_value("client")));
  });
  add("/api/v1/remote-leases/([A-Za-z0-9._-]+)", "GET", Access::kClient,
      [this](Req, Res res, Who who, Match m) {
        res.set_header("Cache-Control", "no-store");
        Reply(res, cluster_.RemoteLease(who, m[1]));
      });
  with_body("/api/v1/remote-leases/([A-Za-z0-9._-]+)/renew", Access::kClient, 200,
            [this](Who who, const json& body, Match m) {
              return cluster_.RenewRemoteLease(who, m[1], body);
            });
  with_body("/api/v1/remote-leases/([A-Za-z0-9._-]+)/migrate", Access::kClient, 200,
            [this](Who who, const json& body, Match m) {
              return cluster_.MigrateRemoteLease(who, m[1], body);
            });
  with_body("/api/v1/remote-leases/([A-Za-z0-9._-]+)/resize", Access::kClient, 200,
            [this](Who who, const json& body, Match m) {
              return cluster_.ResizeRemoteLease(who, m[1], body);
            });
  add("/api/v1/remote-leases/([A-Za-z0-9._-]+)", "DELETE", Access::kClient,
      [this](Req, Res res, Who who, Match m) { Reply(res, cluster_.ReleaseRemoteLease(who, m[1])); });
  add("/api/v1/gpu-servers", "GET", Access::kRead, [this](Req req, Res res, Who, Match) {
    http::SendJson(res, 200, cluster_.GpuServers(req.get_param_value("node")));
  });

  // Jobs.
  add("/api/v1/jobs", "POST", Access::kClient, [this](Req req, Res res, Who who, Match) {
    auto body = Body(req);
    if (!body.ok()) return Send(res, body.status());
    auto key = IdempotencyKey(req);
    if (!key.ok()) return Send(res, key.status());
    Reply(res, cluster_.Submit(who, *body, *key), 201);
  });
  // One page of jobs: ?limit (1-1000, default 500) and ?continue (the previous page's cursor).
  add("/api/v1/jobs", "GET", Access::kRead, [this](Req req, Res res, Who, Match) {
    size_t limit = 500;
    if (req.has_param("limit")) {
      auto v = ParseUint(req.get_param_value("limit"));
      if (!v || *v < 1 || *v > 1000) return http::SendError(res, 400, "limit must be 1-1000");
      limit = static_cast<size_t>(*v);
    }
    Reply(res, cluster_.Jobs(req.get_param_value("status"), limit,
                             req.get_param_value("continue")));
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
    size_t limit = 200;  // at most 1000 (and about 4 MiB) per page; "more" says whether more wait
    if (req.has_param("after")) {
      auto v = ParseInt(req.get_param_value("after"));
      if (!v || *v < 0) return http::SendError(res, 400, "after must be an event id (>= 0)");
      after = *v;
    }
    if (req.has_param("limit")) {
      auto v = ParseUint(req.get_param_value("limit"));
      if (!v || *v < 1 || *v > 1000) return http::SendError(res, 400, "limit must be 1-1000");
      limit = static_cast<size_t>(*v);
    }
    bool latest = false;
    if (req.has_param("latest")) {
      if (req.has_param("after")) return http::SendError(res, 400, "give after or latest, not both");
      auto v = ParseUint(req.get_param_value("latest"));
      if (!v || *v < 1 || *v > 1000) return http::SendError(res, 400, "latest must be 1-1000");
      limit = static_cast<size_t>(*v);
      latest = true;
    }
    Reply(res, cluster_.Events(after, limit, latest));
  });
  add("/api/v1/stream", "GET", Access::kRead, [this](Req, Res res, Who, Match) { Stream(res); });
}

// ---- the live stream ---------------------------------------------------------------------

bool ClusterServer::Pause(std::chrono::milliseconds d) {
  const auto deadline = std::chrono::steady_clock::now() + d;
  MutexLock lock(closing_mu_);
  while (!closing_ && closing_cv_.WaitUntil(closing_mu_, deadline)) {
  }
  return !closing_;
}

void ClusterServer::Stream(httplib::Response& res) {
  // Count first, then check: two requests racing for the last slot cannot both get it.
  if (streams_.fetch_add(1) >= config_.max_streams) {
    --streams_;
    return http::SendError(res, 503,
                           "too many live streams open (web.max_streams = " +
                               std::to_string(config_.max_streams) +
                               "); poll the API instead");
  }
  struct State {
    ChangeMark sent;
    bool greeted = false;
    std::chrono::steady_clock::time_point last_change{};
  };
  auto state = std::make_shared<State>();
  state->sent = cluster_.Changes();
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // a proxy in front must not buffer the stream
  // Without a change for this long the stream sends a comment: proxies keep it open and the page
  // knows the manager is alive.
  constexpr auto kKeepAlive = std::chrono::seconds(15);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state, kKeepAlive](size_t, httplib::DataSink& sink) {
        auto write = [&sink](const std::string& text) { return sink.write(text.data(), text.size()); };
        auto topics = [](const ChangeMark& m) {
          json t = json::object();
          for (size_t i = 0; i < kTopicCount; ++i) t[TopicName(static_cast<Topic>(i))] = m.topics[i];
          return t;
        };
        if (!state->greeted) {
          state->greeted = true;
          // retry: how long a browser's EventSource waits before it reconnects.
          return write("retry: 3000\nevent: hello\ndata: " +
                       DumpJson({{"seq", state->sent.seq}, {"topics", topics(state->sent)}}) +
                       "\n\n");
        }
        ChangeMark mark = cluster_.WaitForChange(
            state->sent.seq, std::chrono::duration_cast<std::chrono::milliseconds>(kKeepAlive));
        if (cluster_.StreamsClosed()) return false;
        if (mark.seq == state->sent.seq) return write(": keep-alive\n\n");
        // Heartbeats change the state every few seconds per node: tell at most once per gap,
        // with everything that changed meanwhile.
        const auto now = std::chrono::steady_clock::now();
        const auto next = state->last_change + config_.stream_min_gap;
        if (now < next) {
          if (!Pause(std::chrono::duration_cast<std::chrono::milliseconds>(next - now))) {
            return false;
          }
          mark = cluster_.Changes();
        }
        json changed = json::array();
        for (size_t i = 0; i < kTopicCount; ++i) {
          if (mark.topics[i] != state->sent.topics[i]) {
            changed.push_back(TopicName(static_cast<Topic>(i)));
          }
        }
        state->sent = mark;
        state->last_change = std::chrono::steady_clock::now();
        return write("id: " + std::to_string(mark.seq) + "\nevent: change\ndata: " +
                     DumpJson({{"seq", mark.seq}, {"changed", changed}, {"topics", topics(mark)}}) +
                     "\n\n");
      },
      [this](bool) { --streams_; });
}

// ---- GPU history, from the node that keeps it ---------------------------------------------

namespace {

// A node's answers are relayed only in the node API's shape, so a node cannot make the manager
// serve what it likes under its name; and only up to this size.
constexpr size_t kMaxHistoryBytes = 8 << 20;

bool NumberOrNull(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() || it->is_number();
}

// The history the node API answers ({"gpu", "step_seconds", "points": [...]}), rebuilt from its
// known fields; an error naming what is wrong otherwise.
Result<json> CheckedHistory(const json& answer, unsigned index) {
  if (!answer.is_object()) return Internal("the answer is not a JSON object");
  auto gpu = answer.find("gpu");
  if (gpu == answer.end() || !gpu->is_number_unsigned() || gpu->get<uint64_t>() != index) {
    return Internal("the answer is not the history of GPU " + std::to_string(index));
  }
  auto step = answer.find("step_seconds");
  auto points = answer.find("points");
  if (step == answer.end() || !step->is_number() || points == answer.end() ||
      !points->is_array()) {
    return Internal("the answer has no step_seconds and points");
  }
  static constexpr const char* kFields[] = {"gpu_util_percent", "memory_util_percent",
                                            "memory_used_mib",  "temperature_c",
                                            "power_draw_w",     "sm_clock_mhz"};
  json out_points = json::array();
  for (const json& p : *points) {
    if (!p.is_object() || !p.contains("t_ms") || !p["t_ms"].is_number_integer()) {
      return Internal("a point of the answer has no t_ms");
    }
    json q = {{"t_ms", p["t_ms"]}};
    for (const char* key : kFields) {
      if (!NumberOrNull(p, key)) return Internal(std::string("a point's ") + key + " is not a number");
      q[key] = p.value(key, json(nullptr));
    }
    out_points.push_back(std::move(q));
  }
  return json{{"gpu", index}, {"step_seconds", *step}, {"points", std::move(out_points)}};
}

std::string Clip(const std::string& text, size_t max) {
  return text.size() <= max ? text : SanitizeUtf8(text.substr(0, max)) + "...";
}

}  // namespace

void ClusterServer::ProxyHistory(const httplib::Request& req, httplib::Response& res,
                                 const std::string& node, const std::string& index) {
  std::string query;
  for (const char* key : {"since", "step"}) {
    if (!req.has_param(key)) continue;
    const std::string v = req.get_param_value(key);
    if (!ParseDouble(v)) return http::SendError(res, 400, std::string(key) + " must be a number");
    query += (query.empty() ? "?" : "&") + std::string(key) + "=" + v;
  }
  // Only the node's trusted API address (Cluster::Heartbeat, node_address.h): the node-API token
  // goes nowhere else.
  auto url = cluster_.NodeApiUrl(node);
  if (!url.ok()) return Send(res, url.status());
  // The node keeps the history; this call waits on the network, never under the cluster's lock.
  auto client = http::JsonClient::Connect(*url, config_.node_api_token,
                                          "node " + node + "'s manager");
  if (!client.ok()) return Send(res, client.status());
  (*client)->SetTimeouts(std::chrono::seconds(2), std::chrono::seconds(5));
  (*client)->SetMaxResponseBytes(kMaxHistoryBytes);
  const unsigned gpu = static_cast<unsigned>(std::stoul(index));
  auto history = (*client)->Get("/api/v1/gpus/" + index + "/history" + query);
  if (!history.ok()) {
    const Status& s = history.status();
    // The node refused the request (a GPU it lacks, a bad parameter): that much goes on, in
    // short. Anything else — no answer, a redirect, an error of its own, garbage — is the
    // gateway's problem, not the request's.
    if (s.code() == StatusCode::kNotFound || s.code() == StatusCode::kInvalidArgument) {
      return http::SendError(res, http::HttpStatus(s), "node " + node + ": " + Clip(s.message(), 300),
                             s.code() == StatusCode::kNotFound ? "not_found" : "invalid_argument");
    }
    spdlog::warn("GPU history from node {}: {}", node, Clip(s.message(), 500));
    return http::SendError(res, 502,
                           "node " + node + " did not give GPU history: " + Clip(s.message(), 300),
                           "unavailable");
  }
  auto checked = CheckedHistory(*history, gpu);
  if (!checked.ok()) {
    spdlog::warn("GPU history from node {}: not the node API's answer: {}", node,
                 checked.status().message());
    return http::SendError(res, 502,
                           "node " + node + " answered with something that is not GPU history (" +
                               checked.status().message() + ")",
                           "unavailable");
  }
  (*checked)["node"] = node;
  http::SendJson(res, 200, *checked);
}

// ---- the dashboard -------------------------------------------------------------------------

void ClusterServer::AddWebRoutes() {
  if (!config_.web_enabled) return;
  auto add = [this](const char* pattern) {
    router_.Add("GET", pattern, Access::kPublic,
                [this](const httplib::Request& req, httplib::Response& res, const Caller&,
                       const http::PathParams& m) { ServeFile(req, res, m[1]); });
  };
  add("/()");
  // Flat names only: nothing from the request reaches the file system.
  add("/([A-Za-z0-9_-][A-Za-z0-9._-]*\\.(?:html|js|css|map|svg|png|ico|woff2|txt))");
}

void ClusterServer::ServeFile(const httplib::Request& req, httplib::Response& res,
                              const std::string& name) {
  res.set_header("X-Content-Type-Options", "nosniff");
  // A token given as ?token= must not leak to other sites through the Referer header.
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("X-Frame-Options", "DENY");
  if (!web_) {
    if (!name.empty()) return http::SendError(res, 404, "no such file: /" + name);
    res.status = 503;
    res.set_content(
        "flyt-cluster-manager: the dashboard is not built here. Run scripts/install-deps.sh (it\n"
        "installs the npm packages of web/) and scripts/build.sh, or point web.dir at a built\n"
        "dashboard. The API is at /api/v1 (docs/api.md).\n",
        "text/plain; charset=utf-8");
    return;
  }
  const WebAssets::File* f = web_->Find(name);
  if (f == nullptr) return http::SendError(res, 404, "no such file: /" + name);
  res.set_header("ETag", f->etag);
  // Revalidate every time: a new build is seen at once, an unchanged file costs a 304.
  res.set_header("Cache-Control", "no-cache");
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                 "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'");
  if (req.get_header_value("If-None-Match") == f->etag) {
    res.status = 304;
    return;
  }
  res.status = 200;
  res.set_content(f->body, f->content_type);
}

}  // namespace flyt::cluster
