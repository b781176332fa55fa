#include "common/http_router.h"

#include <httplib.h>

#include <algorithm>

#include "common/http.h"

namespace flyt::http {

namespace {
constexpr std::string_view kUnauthenticated = "unauthenticated";
}  // namespace

const std::string& PathParams::operator[](size_t i) const {
  static const std::string kNone;
  return i < groups_.size() ? groups_[i] : kNone;
}

Status Unauthenticated(std::string message) {
  return PermissionDenied(std::move(message)).WithReason(std::string(kUnauthenticated));
}

bool IsUnauthenticated(const Status& status) { return status.reason() == kUnauthenticated; }

void RouteTable::AddEntry(std::string method, const std::string& pattern) {
  entries_.push_back({std::regex(pattern), std::move(method)});
}

RouteTable::Lookup RouteTable::Find(std::string_view method, const std::string& path) const {
  if (method == "HEAD") method = "GET";
  Lookup out;
  std::vector<std::string_view> allowed;  // each method once, in the order the routes were added
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    std::smatch m;
    if (!std::regex_match(path, m, e.pattern)) continue;
    if (std::find(allowed.begin(), allowed.end(), e.method) == allowed.end()) {
      allowed.push_back(e.method);
    }
    if (!out.route && e.method == method) {
      out.route = i;
      std::vector<std::string> groups;
      groups.reserve(m.size());
      for (const auto& g : m) groups.push_back(g.str());
      out.params = PathParams(std::move(groups));
    }
  }
  for (std::string_view a : allowed) {
    if (!out.allow.empty()) out.allow += ", ";
    out.allow += a;
  }
  return out;
}

RouteTable::Lookup RouteTable::Find(const httplib::Request& req) const {
  return Find(req.method, req.path);
}

void RouteTable::SendMiss(const httplib::Request& req, httplib::Response& res,
                          const Lookup& lookup) {
  if (lookup.allow.empty()) {
    return SendError(res, 404, "no such endpoint: " + req.path + " (see docs/api.md)", "not_found");
  }
  res.set_header("Allow", lookup.allow);
  SendError(res, 405,
            "method " + req.method + " is not allowed on " + req.path +
                " (allowed: " + lookup.allow + ")",
            "method_not_allowed");
}

void RouteTable::SendRefusal(httplib::Response& res, const Status& refusal) {
  if (IsUnauthenticated(refusal)) {
    res.set_header("WWW-Authenticate", "Bearer");
    return SendError(res, 401, refusal);
  }
  SendError(res, HttpStatus(refusal), refusal);
}

void RouteTable::InstallCatchAll(
    httplib::Server& server,
    std::function<void(const httplib::Request&, httplib::Response&)> dispatch) {
  // A request without a body is served before cpp-httplib's routing: it has nothing to read
  // (RFC 9112 §6.3), but cpp-httplib would wait for a POST or PUT without Content-Length to
  // end — until its read timeout, then answer 400. One with a body reaches the handlers below
  // once the body is read: answered earlier, an unread body on a keep-alive connection would be
  // parsed as the next request.
  server.set_pre_routing_handler([dispatch](const httplib::Request& req, httplib::Response& res) {
    if (HasBody(req)) return httplib::Server::HandlerResponse::Unhandled;
    dispatch(req, res);
    return httplib::Server::HandlerResponse::Handled;
  });
  server.Get(".*", dispatch);  // HEAD too
  server.Post(".*", dispatch);
  server.Put(".*", dispatch);
  server.Patch(".*", dispatch);
  server.Delete(".*", dispatch);
  server.Options(".*", dispatch);
}

}  // namespace flyt::http
