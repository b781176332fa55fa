// Router: one route table per daemon over cpp-httplib — (method, path pattern, access, handler)
// — and the one place where a request that no handler may serve is answered: an unknown path 404
// (not_found), a known path with another method 405 with Allow (method_not_allowed), a request
// the daemon's access check refuses 401 with WWW-Authenticate (unauthenticated) or 403
// (permission_denied), all as common/http.h's JSON error bodies.
//
// The router knows nothing of tokens or roles: a route's access is a value of the daemon's own
// type, and the daemon's AccessCheck turns (request, access) into the caller the handler gets —
// or a refusal: a Status made by Unauthenticated() (401), or any other Status (PermissionDenied:
// 403; anything else: its HttpStatus, e.g. 503 when the check could not be made). The path and
// method are decided first (404/405 whoever asks), then access, unless the daemon asks for
// unmatched requests to be checked too (the Router's constructor).
//
// Patterns are ECMAScript regular expressions matched against the whole path; their groups are
// the handler's PathParams. HEAD is served by a GET route. Routes are added before the server
// starts and never after; Install registers the router as the server's handler for every method,
// so it must outlive the server's serving. Dispatch is const and runs on the server's pool
// threads concurrently; the handlers and the AccessCheck must be thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace flyt::http {

// The capture groups of a route's pattern in the request's path, as std::smatch numbers them:
// [0] the whole path, [1] the first group. Past the last group: "".
class PathParams {
 public:
  PathParams() = default;
  explicit PathParams(std::vector<std::string> groups) : groups_(std::move(groups)) {}
  const std::string& operator[](size_t i) const;
  size_t size() const { return groups_.size(); }

 private:
  std::vector<std::string> groups_;
};

// The refusal an AccessCheck returns for a request without valid credentials: answered 401.
Status Unauthenticated(std::string message);
bool IsUnauthenticated(const Status& status);

// The part of a Router that does not depend on the daemon's types: matching and the answers.
class RouteTable {
 public:
  struct Lookup {
    std::optional<size_t> route;  // the index of the route that serves the request, if any
    std::string allow;            // the methods of the routes whose pattern matches the path
    PathParams params;
  };

  // The route for `method` (HEAD looks for GET) on `path`: the first added that matches.
  Lookup Find(std::string_view method, const std::string& path) const;
  Lookup Find(const httplib::Request& req) const;

  // Answers a request that no route serves: 404 when no pattern matches, else 405 with Allow.
  static void SendMiss(const httplib::Request& req, httplib::Response& res, const Lookup& lookup);
  // Answers a request the access check refused (see the file comment).
  static void SendRefusal(httplib::Response& res, const Status& refusal);
  // Sends every GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS request to `dispatch`: one
  // without a body at once, one with a body after the server has read it (so that a keep-alive
  // connection stays in step). Takes the server's pre-routing handler.
  static void InstallCatchAll(
      httplib::Server& server,
      std::function<void(const httplib::Request&, httplib::Response&)> dispatch);

 protected:
  void AddEntry(std::string method, const std::string& pattern);

 private:
  struct Entry {
    std::regex pattern;
    std::string method;
  };
  std::vector<Entry> entries_;
};

template <typename Access, typename Caller>
class Router : public RouteTable {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&, const Caller&,
                                     const PathParams&)>;
  // The caller of a request for a route of `access`, or a refusal (see the file comment).
  using AccessCheck = std::function<Result<Caller>(const httplib::Request&, const Access&)>;

  // `unmatched_access`: when set, a request for a path or method that no route serves is checked
  // as if for a route of this access first, and is 401 rather than 404/405 when the check says
  // unauthenticated — a caller without credentials learns nothing of which paths exist.
  explicit Router(AccessCheck check, std::optional<Access> unmatched_access = std::nullopt)
      : check_(std::move(check)), unmatched_access_(std::move(unmatched_access)) {}

  void Add(std::string method, const std::string& pattern, Access access, Handler handler) {
    AddEntry(std::move(method), pattern);
    routes_.push_back({std::move(access), std::move(handler)});
  }

  void Dispatch(const httplib::Request& req, httplib::Response& res) const;

  // Makes this router the server's handler for every method and path.
  void Install(httplib::Server& server) const {
    InstallCatchAll(server, [this](const httplib::Request& req, httplib::Response& res) {
      Dispatch(req, res);
    });
  }

 private:
  struct Route {
    Access access;
    Handler handler;
  };
  const AccessCheck check_;
  const std::optional<Access> unmatched_access_;
  std::vector<Route> routes_;
};

// ---- implementation -------------------------------------------------------------------------

template <typename Access, typename Caller>
void Router<Access, Caller>::Dispatch(const httplib::Request& req, httplib::Response& res) const {
  Lookup lookup = Find(req);
  if (!lookup.route) {
    if (unmatched_access_) {
      Result<Caller> who = check_(req, *unmatched_access_);
      if (!who.ok() && IsUnauthenticated(who.status())) return SendRefusal(res, who.status());
    }
    return SendMiss(req, res, lookup);
  }
  const Route& route = routes_[*lookup.route];
  Result<Caller> who = check_(req, route.access);
  if (!who.ok()) return SendRefusal(res, who.status());
  route.handler(req, res, *who, lookup.params);
}

}  // namespace flyt::http
