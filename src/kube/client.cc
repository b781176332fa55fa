#include "kube/client.h"

#include <httplib.h>

#include <algorithm>

#include "common/json.h"
#include "common/strings.h"

namespace flyt::kube {
namespace {

using nlohmann::json;

constexpr size_t kMaxTokenBytes = 64 << 10;
constexpr size_t kMaxMessageChars = 512;

Status Failure(StatusCode code, std::string_view reason, std::string message) {
  return Status(code, std::move(message)).WithReason(std::string(reason));
}

std::string Shorten(std::string text) {
  if (text.size() > kMaxMessageChars) {
    text.resize(kMaxMessageChars);
    text += "...";
  }
  return text;
}

StatusCode CodeForHttpStatus(int status) {
  switch (status) {
    case 401:
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 409:
      return StatusCode::kFailedPrecondition;
    case 422:
      return StatusCode::kInvalidArgument;
    case 429:
      return StatusCode::kResourceExhausted;
    default:
      return status >= 500 ? StatusCode::kUnavailable : StatusCode::kInvalidArgument;
  }
}

// The bearer token: the file's content without surrounding whitespace; refused when empty or when
// it holds a character that could not be sent in a header.
Result<std::string> ReadToken(const std::string& path) {
  auto text = ReadFile(path, kMaxTokenBytes);
  if (!text.ok()) {
    return Failure(StatusCode::kUnavailable, "token",
                   "cannot read the service-account token: " + text.status().message());
  }
  std::string token(Trim(*text));
  if (token.empty()) {
    return Failure(StatusCode::kUnavailable, "token", "the token file " + path + " is empty");
  }
  if (std::any_of(token.begin(), token.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; })) {
    return Failure(StatusCode::kUnavailable, "token",
                   "the token file " + path + " holds a space or control character");
  }
  return token;
}

}  // namespace

const std::vector<std::string>& FailureReasons() {
  static const std::vector<std::string> kReasons = {
      "unauthorized", "forbidden",    "not_found",    "conflict", "invalid",
      "throttled",    "server_error", "http_error",   "timeout",  "tls",
      "connection",   "token",        "bad_response", "cancelled"};
  return kReasons;
}

std::string_view FailureReasonForHttpStatus(int http_status) {
  switch (http_status) {
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 409:
      return "conflict";
    case 422:
      return "invalid";
    case 429:
      return "throttled";
    default:
      return http_status >= 500 && http_status <= 599 ? "server_error" : "http_error";
  }
}

bool ValidNodeName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '.'; });
}

Result<ApiServer> ParseApiServer(std::string_view url) {
  const std::string text(url);
  constexpr std::string_view kScheme = "https://";
  if (!StartsWith(text, std::string(kScheme))) {
    return InvalidArgument("API server '" + text +
                           "' must start with https:// (the token is never sent in clear text)");
  }
  std::string rest = text.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty() || rest.find_first_of("/?#@ ") != std::string::npos) {
    return InvalidArgument("API server '" + text +
                           "' must be https://HOST[:PORT] and nothing more");
  }
  ApiServer server;
  const size_t bracket = rest.find(']');
  const size_t colon = rest.rfind(':');
  const bool has_port = colon != std::string::npos &&
                        (rest.front() != '[' || (bracket != std::string::npos && colon > bracket));
  if (rest.front() != '[' && has_port && rest.find(':') != colon) {
    return InvalidArgument("API server '" + text + "': an IPv6 address needs brackets");
  }
  std::string host = has_port ? rest.substr(0, colon) : rest;
  if (has_port) {
    auto port = ParseInt(rest.substr(colon + 1));
    if (!port || *port < 1 || *port > 65535) {
      return InvalidArgument("API server '" + text + "': port must be 1-65535");
    }
    server.port = static_cast<int>(*port);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host.find_first_of("[]") != std::string::npos) {
    return InvalidArgument("API server '" + text + "': no host");
  }
  server.host = std::move(host);
  return server;
}

Result<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  FLYT_ASSIGN_OR_RETURN(ApiServer server, ParseApiServer(options.api_server));
  if (options.token_file.empty()) return InvalidArgument("no token file given");
  if (options.ca_file.empty()) return InvalidArgument("no CA file given");
  if (options.timeout.count() <= 0) return InvalidArgument("the timeout must be positive");
  return std::unique_ptr<Client>(new Client(std::move(options), std::move(server)));
}

Client::~Client() = default;

void Client::Cancel() {
  MutexLock lock(mu_);
  cancelled_ = true;
  if (in_flight_ != nullptr) in_flight_->stop();
}

Result<json> Client::Get(const std::string& path) { return Send("GET", path, nullptr, ""); }

Result<json> Client::Patch(const std::string& path, const json& body,
                           const std::string& content_type) {
  const std::string text = DumpJson(body);
  return Send("PATCH", path, &text, content_type);
}

Result<json> Client::GetNode(const std::string& name) {
  if (!ValidNodeName(name)) return InvalidArgument("'" + name + "' is not a valid node name");
  return Get("/api/v1/nodes/" + name);
}

Result<json> Client::MergePatchNode(const std::string& name, const json& patch) {
  if (!ValidNodeName(name)) return InvalidArgument("'" + name + "' is not a valid node name");
  return Patch("/api/v1/nodes/" + name, patch, kMergePatchContentType);
}

Result<json> Client::Send(const std::string& method, const std::string& path,
                          const std::string* body, const std::string& content_type) {
  const std::string what = method + " " + options_.api_server + path;
  FLYT_ASSIGN_OR_RETURN(std::string token, ReadToken(options_.token_file));

  httplib::SSLClient client(server_.host, server_.port);
  client.set_ca_cert_path(options_.ca_file.c_str());
  client.enable_server_certificate_verification(true);
  client.set_follow_location(false);
  client.set_keep_alive(false);
  const auto timeout_us =
      std::chrono::duration_cast<std::chrono::microseconds>(options_.timeout).count();
  client.set_connection_timeout(timeout_us / 1000000, timeout_us % 1000000);
  client.set_read_timeout(timeout_us / 1000000, timeout_us % 1000000);
  client.set_write_timeout(timeout_us / 1000000, timeout_us % 1000000);

  httplib::Request req;
  req.method = method;
  req.path = path;
  req.set_header("Authorization", "Bearer " + token);
  req.set_header("Accept", "application/json");
  req.set_header("User-Agent", "flyt-node-manager");
  if (body != nullptr) {
    req.body = *body;
    req.set_header("Content-Type", content_type);
  }
  std::string received;
  bool too_long = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (received.size() + n > options_.max_response_bytes) {
      too_long = true;
      return false;
    }
    received.append(data, n);
    return true;
  };

  {
    MutexLock lock(mu_);
    if (cancelled_) return Failure(StatusCode::kUnavailable, "cancelled", what + ": cancelled");
    in_flight_ = &client;
  }
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const auto started = std::chrono::steady_clock::now();
  const bool sent = client.send(req, res, error);
  const auto elapsed = std::chrono::steady_clock::now() - started;
  bool cancelled = false;
  {
    MutexLock lock(mu_);
    in_flight_ = nullptr;
    cancelled = cancelled_;
  }

  if (too_long) {
    return Failure(StatusCode::kUnavailable, "bad_response",
                   what + ": the answer is longer than " +
                       std::to_string(options_.max_response_bytes) + " bytes; refused");
  }
  if (!sent) {
    if (cancelled) return Failure(StatusCode::kUnavailable, "cancelled", what + ": cancelled");
    const std::string detail = what + ": " + httplib::to_string(error);
    switch (error) {
      case httplib::Error::SSLConnection:
      case httplib::Error::SSLLoadingCerts:
      case httplib::Error::SSLServerVerification:
        return Failure(StatusCode::kUnavailable, "tls",
                       detail + " (TLS: is " + options_.ca_file +
                           " the cluster's CA, and is the server's certificate valid for " +
                           server_.host + "?)");
      case httplib::Error::ConnectionTimeout:
        return Failure(
            StatusCode::kTimeout, "timeout",
            detail + " (no connection within " + std::to_string(options_.timeout.count()) + " ms)");
      case httplib::Error::Read:
      case httplib::Error::Write:
        // httplib says "Read" for a read that timed out and for a connection the peer closed; the
        // time it took tells them apart.
        if (elapsed >= options_.timeout * 9 / 10) {
          return Failure(
              StatusCode::kTimeout, "timeout",
              detail + " (no answer within " + std::to_string(options_.timeout.count()) + " ms)");
        }
        return Failure(StatusCode::kUnavailable, "connection", detail + " (connection lost)");
      default:
        return Failure(StatusCode::kUnavailable, "connection",
                       detail + " (is the API server reachable at " + options_.api_server + "?)");
    }
  }
  if (res.status < 200 || res.status > 299) {
    std::string message = what + ": HTTP " + std::to_string(res.status);
    // The API answers errors with a Status object: its message says what was refused and why.
    auto status = ParseJson(received, "the API's answer", options_.max_response_bytes, 16);
    if (status.ok() && status->is_object()) {
      if (auto it = status->find("reason"); it != status->end() && it->is_string()) {
        message += " " + it->get<std::string>();
      }
      if (auto it = status->find("message"); it != status->end() && it->is_string()) {
        message += ": " + Shorten(it->get<std::string>());
      }
    } else if (!received.empty()) {
      message += ": " + Shorten(received);
    }
    return Failure(CodeForHttpStatus(res.status), FailureReasonForHttpStatus(res.status),
                   std::move(message));
  }
  auto parsed = ParseJson(received, "the API's answer", options_.max_response_bytes);
  if (!parsed.ok()) {
    return Failure(
        StatusCode::kUnavailable, "bad_response",
        what + ": HTTP " + std::to_string(res.status) + " but " + parsed.status().message());
  }
  return std::move(parsed).value();
}

}  // namespace flyt::kube
