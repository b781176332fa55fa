// kube::Client: a small in-cluster client of the Kubernetes API — HTTPS (cpp-httplib over
// OpenSSL) to one API server, the server verified against one CA file only (never the system's
// trust store), a bearer token read from a file again on every request (the kubelet rotates
// projected service-account tokens, about hourly), JSON in and out with bounded answers. It knows
// nothing of flyt's profiles: the node helpers below are the only Kubernetes paths it names.
//
// A failed request is a Status whose reason() says what kind of failure it was, from a fixed set
// (FailureReasons()) that callers log once per kind and count by: "unauthorized" (401),
// "forbidden" (403), "not_found" (404), "conflict" (409), "invalid" (422), "throttled" (429),
// "server_error" (5xx), "http_error" (any other non-2xx), "timeout", "tls" (handshake or
// verification failed, CA file unreadable), "connection" (refused, reset, unreachable), "token"
// (token file missing, unreadable or empty), "bad_response" (a 2xx that is not JSON, or too
// long), "cancelled" (Cancel() was called). The message carries the HTTP status and the API's own
// message from its Status object ({"kind":"Status","message","reason","code"}).
//
// Each request opens its own connection (one request every few seconds at most: a handshake is
// cheap next to the interval, and the CA file is read again too). Thread-safety: requests may be
// made from one thread at a time; Cancel() may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace httplib {
class SSLClient;
}

namespace flyt::kube {

inline constexpr const char* kDefaultTokenFile =
    "/var/run/secrets/kubernetes.io/serviceaccount/token";
inline constexpr const char* kDefaultCaFile =
    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
inline constexpr const char* kMergePatchContentType = "application/merge-patch+json";

struct ClientOptions {
  std::string api_server;  // "https://host:port" (IPv6 bracketed); port 443 when absent
  std::string token_file = kDefaultTokenFile;
  std::string ca_file = kDefaultCaFile;
  std::chrono::milliseconds timeout{10000};     // connect, and each read and write
  size_t max_response_bytes = size_t{8} << 20;  // a Node object is tens of KiB
};

// Every reason a failed request can carry, in a fixed order (for metrics that list them all).
const std::vector<std::string>& FailureReasons();

// The reason for an HTTP status that is not 2xx ("forbidden" for 403, ...).
std::string_view FailureReasonForHttpStatus(int http_status);

// A Kubernetes object name that is a DNS subdomain (RFC 1123: lower-case alphanumerics, '-' and
// '.', starting and ending alphanumeric, at most 253 characters) — what a Node's name is. Such a
// name needs no escaping in a path.
bool ValidNodeName(std::string_view name);

struct ApiServer {
  std::string host;  // without brackets
  int port = 443;
};
// "https://host[:port]" with nothing after it but an optional "/"; anything else (http://, a
// path, a user) is an error naming the problem.
Result<ApiServer> ParseApiServer(std::string_view url);

class Client {
 public:
  // Checks the options (URL, files named, timeout > 0); the files are read per request.
  static Result<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // GET `path` (e.g. "/api/v1/nodes/n1"): the answer's JSON on a 2xx.
  Result<nlohmann::json> Get(const std::string& path);
  // PATCH `path` with `body` sent as `content_type`: the answer's JSON on a 2xx.
  Result<nlohmann::json> Patch(const std::string& path, const nlohmann::json& body,
                               const std::string& content_type);

  // GET /api/v1/nodes/{name}.
  Result<nlohmann::json> GetNode(const std::string& name);
  // PATCH /api/v1/nodes/{name} with a JSON merge patch (RFC 7386).
  Result<nlohmann::json> MergePatchNode(const std::string& name, const nlohmann::json& patch);

  // Fails the request in flight (its connection is shut down) and every later one with
  // "cancelled". For a prompt shutdown.
  void Cancel();

  const ClientOptions& options() const { return options_; }

 private:
  Client(ClientOptions options, ApiServer server)
      : options_(std::move(options)), server_(std::move(server)) {}
  Result<nlohmann::json> Send(const std::string& method, const std::string& path,
                              const std::string* body, const std::string& content_type);

  const ClientOptions options_;
  const ApiServer server_;
  Mutex mu_;
  bool cancelled_ FLYT_GUARDED_BY(mu_) = false;
  httplib::SSLClient* in_flight_ FLYT_GUARDED_BY(mu_) = nullptr;
};

}  // namespace flyt::kube
