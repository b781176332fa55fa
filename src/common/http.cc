#include "common/http.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cctype>

#include "common/http_server.h"
#include "common/json.h"
#include "common/strings.h"

namespace flyt::http {

using nlohmann::json;

void SendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(DumpJson(body) + "\n", "application/json");
}

void SendError(httplib::Response& res, int status, const std::string& message) {
  SendError(res, status, message, ErrorCodeForHttpStatus(status));
}

void SendError(httplib::Response& res, int status, const std::string& message,
               std::string_view code) {
  SendJson(res, status, json{{"error", message}, {"code", code}});
}

void SendError(httplib::Response& res, int http_status, const Status& status) {
  SendError(res, http_status, status.message(), ErrorCode(status));
}

std::string ErrorCode(const Status& s) {
  if (!s.reason().empty()) return s.reason();
  std::string code(StatusCodeName(s.code()));
  for (char& c : code) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return code;
}

std::string_view ErrorCodeForHttpStatus(int http_status) {
  switch (http_status) {
    case 400: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "permission_denied";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 409: return "conflict";
    case 413: return "payload_too_large";
    case 429: return "resource_exhausted";
    case 501: return "not_supported";
    case 502:
    case 503: return "unavailable";
    case 504: return "timeout";
    default: return http_status >= 400 && http_status < 500 ? "invalid_argument" : "internal";
  }
}

int HttpStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kUnavailable:
    case StatusCode::kTimeout: return 503;
    case StatusCode::kNotSupported: return 501;
    default: return 500;
  }
}

bool HasBody(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding")) return true;
  const std::string length = req.get_header_value("Content-Length");
  return !length.empty() && length != "0";
}

std::optional<std::string> BearerToken(const httplib::Request& req) {
  const std::string value = req.get_header_value("Authorization");
  constexpr std::string_view kPrefix = "Bearer ";
  if (value.size() <= kPrefix.size() || value.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  return value.substr(kPrefix.size());
}

bool TokenEquals(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(expected[i] ^ (i < given.size() ? given[i] : 0));
  }
  return diff == 0 && !expected.empty();
}

Result<json> ParseBody(const httplib::Request& req) {
  if (Trim(req.body).empty()) return json::object();
  FLYT_ASSIGN_OR_RETURN(json body, ParseJson(req.body, "the request body"));
  if (!body.is_object()) return InvalidArgument("the request body must be a JSON object");
  return body;
}

void Configure(httplib::Server& s, const ServerOptions& options) {
  // cpp-httplib's default also sets SO_REUSEPORT, which lets a second daemon bind the same port
  // and share its connections silently; a port in use must be an error.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Answers go out as header + body writes; without TCP_NODELAY a small body on a keep-alive
  // connection waits for the client's delayed ACK (~40 ms per request).
  s.set_tcp_nodelay(true);
  s.set_payload_max_length(options.max_body_bytes);
  if (auto* front = dynamic_cast<Server*>(&s)) {
    FrontDoorOptions door;
    door.max_body_bytes = options.max_body_bytes;
    door.threads = options.threads;
    door.max_connections_per_peer = options.max_connections_per_peer;
    door.max_connections = options.max_connections;
    door.request_deadline = std::chrono::seconds(options.request_deadline_seconds);
    door.idle_timeout = std::chrono::seconds(options.idle_timeout_seconds);
    front->SetFrontDoorOptions(door);
  } else {
    const int threads = options.threads;
    s.new_task_queue = [threads] {
      return new httplib::ThreadPool(static_cast<size_t>(threads));
    };
  }
  s.set_read_timeout(std::chrono::seconds(5));
  s.set_write_timeout(std::chrono::seconds(10));
  s.set_keep_alive_max_count(100);
  s.set_keep_alive_timeout(options.idle_timeout_seconds);
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      std::string text = "HTTP error " + std::to_string(res.status);
      if (res.status == 413) text = "request body too large";
      if (res.status == 400) text = "malformed request";
      SendError(res, res.status, text);
    }
  });
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what += std::string(": ") + e.what();
        } catch (...) {
        }
        SendError(res, 500, what);
      });
}

Result<int> Listen(httplib::Server& server, const std::string& host, int port,
                   std::thread& thread) {
  int bound = port;
  if (port == 0) {
    bound = server.bind_to_any_port(host);
    if (bound <= 0) return Unavailable("cannot listen on " + host + " (any port)");
  } else if (!server.bind_to_port(host, port)) {
    return Unavailable("cannot listen on " + host + ":" + std::to_string(port) +
                       " (address in use, or not an address of this host)");
  }
  thread = std::thread([&server] { server.listen_after_bind(); });
  // cpp-httplib marks itself running inside that thread, and stop() does nothing before then:
  // wait, so that a stop right after start (a SIGTERM during start-up) cannot hang in join().
  for (int i = 0; i < 500 && !server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!server.is_running()) return Internal("the HTTP server did not start");
  return bound;
}

Result<std::unique_ptr<JsonClient>> JsonClient::Connect(const std::string& url, std::string token,
                                                        std::string what) {
  std::string full = url.find("://") == std::string::npos ? "http://" + url : url;
  if (full.rfind("http://", 0) != 0) {
    return InvalidArgument("URL '" + url + "': only http:// is supported");
  }
  while (!full.empty() && full.back() == '/') full.pop_back();
  std::unique_ptr<JsonClient> c(new JsonClient());
  c->url_ = full;
  c->what_ = std::move(what);
  c->client_ = std::make_unique<httplib::Client>(full);
  if (!c->client_->is_valid()) return InvalidArgument("URL '" + url + "' is not valid");
  c->SetTimeouts(std::chrono::seconds(5), std::chrono::seconds(30));
  c->client_->set_tcp_nodelay(true);
  c->client_->set_follow_location(false);  // the default; stated, since the token depends on it
  if (!token.empty()) c->client_->set_bearer_token_auth(token);
  return c;
}

JsonClient::~JsonClient() = default;

void JsonClient::SetTimeouts(std::chrono::milliseconds connect, std::chrono::milliseconds read) {
  client_->set_connection_timeout(connect);
  client_->set_read_timeout(read);
  client_->set_write_timeout(read);
}

Result<json> JsonClient::Finish(const std::string& path, int status, const std::string& body,
                                const std::string& location) {
  if (status >= 300 && status < 400) {
    // Never followed: the token would go wherever the answer points.
    return Unavailable(what_ + " at " + url_ + path + " answered with a redirect (HTTP " +
                       std::to_string(status) +
                       (location.empty() ? "" : " to " + SanitizeUtf8(location.substr(0, 200))) +
                       "); flyt does not follow redirects");
  }
  auto parsed = ParseJson(body, url_ + path + ": the answer");
  if (status >= 400) {
    std::string message = parsed.ok() && parsed->is_object() && parsed->contains("error") &&
                                  (*parsed)["error"].is_string()
                              ? (*parsed)["error"].get<std::string>()
                              : SanitizeUtf8(body.substr(0, 200));
    StatusCode code = status == 404                   ? StatusCode::kNotFound
                      : status == 400                 ? StatusCode::kInvalidArgument
                      : status == 409 || status == 429 ? StatusCode::kResourceExhausted
                      : status == 403                 ? StatusCode::kPermissionDenied
                      : status == 401                 ? StatusCode::kFailedPrecondition
                                                       : StatusCode::kUnavailable;
    Status error(code, url_ + path + ": HTTP " + std::to_string(status) + ": " + message);
    // The server's machine-readable code travels on as the reason (flytctl's exit code).
    const bool has_code = parsed.ok() && parsed->is_object() && parsed->contains("code") &&
                          (*parsed)["code"].is_string();
    return has_code ? error.WithReason((*parsed)["code"].get<std::string>()) : error;
  }
  if (!parsed.ok()) return Internal(parsed.status().message());
  return std::move(*parsed);
}

Result<json> JsonClient::Send(const std::string& method, const std::string& path,
                              const std::string* body, const Headers& headers) {
  httplib::Request req;
  req.method = method;
  req.path = path;
  for (const auto& [name, value] : headers) req.set_header(name.c_str(), value);
  if (body != nullptr) {
    req.body = *body;
    req.set_header("Content-Type", "application/json");
  }
  std::string received;
  bool too_long = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (received.size() + n > max_response_bytes_) {
      too_long = true;
      return false;
    }
    received.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool ok = client_->send(req, res, error);
  if (too_long) {
    return Unavailable(what_ + " at " + url_ + path + " answered with more than " +
                       std::to_string(max_response_bytes_) + " bytes; refused");
  }
  if (!ok) {
    return Unavailable("cannot reach " + what_ + " at " + url_ + " (" + httplib::to_string(error) +
                       " error: is it running, and is the address right?)");
  }
  return Finish(path, res.status, received, res.get_header_value("Location"));
}

Result<json> JsonClient::Get(const std::string& path) { return Send("GET", path, nullptr); }

Result<json> JsonClient::Post(const std::string& path, const json& body) {
  const std::string text = DumpJson(body);
  return Send("POST", path, &text);
}

Result<json> JsonClient::Post(const std::string& path, const json& body,
                              const Headers& headers) {
  const std::string text = DumpJson(body);
  return Send("POST", path, &text, headers);
}

Result<json> JsonClient::Put(const std::string& path, const json& body) {
  const std::string text = DumpJson(body);
  return Send("PUT", path, &text);
}

Result<json> JsonClient::Delete(const std::string& path) { return Send("DELETE", path, nullptr); }

}  // namespace flyt::http
