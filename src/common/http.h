// HTTP plumbing shared by flyt's daemons and clients, over cpp-httplib: one way to configure and
// start a server (JSON errors, body limits, no SO_REUSEPORT, a wait until it really listens), one
// way to answer in JSON, constant-time bearer-token checks, and JsonClient — the client flytctl,
// the node manager (heartbeats) and the cluster manager (node sessions) use to call a flyt API.
// (Routing — path patterns, methods, access — is common/http_router.h.)
//
// Every error body is {"error": "<message for people>", "code": "<snake_case for programs>"}
// (docs/api.md, "Errors"): the code is a Status's reason when it has one, else derived from its
// StatusCode, or from the HTTP status where no Status is behind the error.
//
// Server helpers are free functions over an httplib::Server the caller owns. A JsonClient is one
// connection's worth of state: use it from one thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <string_view>
#include <thread>

#include "common/status.h"

namespace httplib {
class Server;
class Client;
struct Request;
struct Response;
}  // namespace httplib

namespace flyt::http {

void SendJson(httplib::Response& res, int status, const nlohmann::json& body);
// {"error": message, "code": code}; without a code, the one of the HTTP status.
void SendError(httplib::Response& res, int status, const std::string& message);
void SendError(httplib::Response& res, int status, const std::string& message,
               std::string_view code);
// {"error": status.message(), "code": ErrorCode(status)} with the HTTP status the daemon chose.
void SendError(httplib::Response& res, int http_status, const Status& status);

// The "code" of an error body for a Status: its reason when set, else its StatusCode in
// snake_case ("not_found", "invalid_argument", ...).
std::string ErrorCode(const Status& status);
// The "code" for an error that only has an HTTP status: 400 invalid_argument, 401
// unauthenticated, 403 permission_denied, 404 not_found, 405 method_not_allowed, 409 conflict,
// 413 payload_too_large, 429 resource_exhausted, 501 not_supported, 502/503 unavailable, 504
// timeout; any other 4xx invalid_argument, anything else internal.
std::string_view ErrorCodeForHttpStatus(int http_status);
// The usual HTTP code for a Status by its StatusCode: 400, 403, 404, 409 (already exists /
// precondition), 429, 501, 503, 500. A daemon with reasons of its own maps those first.
int HttpStatus(const Status& status);

// True when the request carries a body (it must be read before the request is answered).
bool HasBody(const httplib::Request& req);
// The token of an "Authorization: Bearer <token>" header, if any.
std::optional<std::string> BearerToken(const httplib::Request& req);
// Compares in time that depends only on the expected length.
bool TokenEquals(std::string_view given, std::string_view expected);
// The body as a JSON object ({} when empty); a clear 400-worthy error otherwise.
Result<nlohmann::json> ParseBody(const httplib::Request& req);

// The limits a daemon's [http] section sets (ReadServerOptions in http_server.h; docs/design.md,
// "The HTTP front door"). The
// connection limits and the deadline hold for an http::Server (common/http_server.h), whose
// front door keeps slow and idle peers off the workers; a plain httplib::Server (tests) only
// gets the body limit and `threads`, and there a keep-alive connection holds a worker.
struct ServerOptions {
  size_t max_body_bytes = 1 << 20;
  int threads = 16;                    // requests processed at once
  int max_connections_per_peer = 64;   // open connections from one address; more get 429
  int max_connections = 512;           // open connections in all; more get 503
  int request_deadline_seconds = 10;   // a whole request head and body, from its first byte: 408
  int idle_timeout_seconds = 5;        // a keep-alive connection without a request is closed
};

// Socket options (SO_REUSEADDR only: a port in use is an error), limits, timeouts, and handlers
// that turn httplib's own errors and handler exceptions into JSON.
void Configure(httplib::Server& server, const ServerOptions& options);

// Binds host:port (port 0: any free port), starts serving on `thread`, and returns once the
// server is running, with the port it listens on.
Result<int> Listen(httplib::Server& server, const std::string& host, int port,
                   std::thread& thread);

// A JsonClient never follows a redirect: a 3xx answer is an error (kUnavailable), so the bearer
// token goes to the one host it was given for. An answer body longer than the limit
// (SetMaxResponseBytes, 256 MiB by default) is cut off and refused (kUnavailable).
class JsonClient {
 public:
  static constexpr size_t kDefaultMaxResponseBytes = size_t{256} << 20;

  // `url`: "http://host:port" or "host:port". `token`: bearer token, empty for none. `what`:
  // the peer's name in errors ("the cluster manager").
  static Result<std::unique_ptr<JsonClient>> Connect(const std::string& url, std::string token,
                                                     std::string what = "the server");
  ~JsonClient();

  void SetTimeouts(std::chrono::milliseconds connect, std::chrono::milliseconds read);
  void SetMaxResponseBytes(size_t bytes) { max_response_bytes_ = bytes; }
  Result<nlohmann::json> Get(const std::string& path);
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body);
  using Headers = std::vector<std::pair<std::string, std::string>>;
  // Post with extra request headers (e.g. Idempotency-Key).
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body,
                              const Headers& headers);
  Result<nlohmann::json> Put(const std::string& path, const nlohmann::json& body);
  Result<nlohmann::json> Delete(const std::string& path);
  const std::string& url() const { return url_; }

 private:
  JsonClient() = default;
  // One request, its body read up to max_response_bytes_.
  Result<nlohmann::json> Send(const std::string& method, const std::string& path,
                              const std::string* body, const Headers& headers = {});
  Result<nlohmann::json> Finish(const std::string& path, int status, const std::string& body,
                                const std::string& location);

  std::string url_;
  std::string what_;
  size_t max_response_bytes_ = kDefaultMaxResponseBytes;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace flyt::http
