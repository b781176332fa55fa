#include "client_manager/cluster_client.h"

#include <algorithm>
#include <cctype>
#include <memory>

#include "common/http.h"

namespace flyt::client_manager {
namespace {

using std::chrono::milliseconds;

Result<std::unique_ptr<http::JsonClient>> Open(const std::string& url, const std::string& token,
                                               milliseconds timeout) {
  FLYT_ASSIGN_OR_RETURN(std::unique_ptr<http::JsonClient> client,
                        http::JsonClient::Connect(url, token, "the cluster manager"));
  // The connect and the answer share the bound: a manager that accepts and never answers
  // costs the caller `timeout`, no more.
  client->SetTimeouts(std::min(timeout, milliseconds(5000)), timeout);
  client->SetMaxResponseBytes(1 << 20);
  return client;
}

// An unreachable manager gets the reason "unavailable" so every failure carries a code.
Status WithCode(Status status) {
  if (status.ok() || !status.reason().empty()) return status;
  return status.WithReason(status.code() == StatusCode::kUnavailable ? "unavailable"
                                                                      : "internal");
}

// A path segment from a lease id the manager gave us (never trusted to be URL-safe).
std::string Escape(const std::string& id) {
  std::string out;
  for (unsigned char ch : id) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.') {
      out += static_cast<char>(ch);
    } else {
      static const char* kHex = "0123456789ABCDEF";
      out += '%';
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out;
}

}  // namespace

Result<nlohmann::json> ClusterClient::Create(const nlohmann::json& body, milliseconds timeout,
                                             const std::string& idempotency_key,
                                             bool* answered) const {
  if (answered != nullptr) *answered = false;
  auto client = Open(url_, token_, timeout);
  if (!client.ok()) return WithCode(client.status());
  http::JsonClient::Headers headers;
  if (!idempotency_key.empty()) headers.emplace_back("Idempotency-Key", idempotency_key);
  auto answer = (*client)->Post("/api/v1/remote-leases", body, headers);
  // An HTTP answer carries the manager's code as the reason; a request that got none has none.
  if (answered != nullptr) *answered = answer.ok() || !answer.status().reason().empty();
  if (!answer.ok()) return WithCode(answer.status());
  if (!answer->is_object()) {
    return Status(Internal("the cluster manager answered a lease request with " +
                           std::string(answer->type_name()) + ", not an object"))
        .WithReason("internal");
  }
  return answer;
}

Result<nlohmann::json> ClusterClient::Renew(const std::string& id, int ttl_seconds,
                                            milliseconds timeout) const {
  auto client = Open(url_, token_, timeout);
  if (!client.ok()) return WithCode(client.status());
  auto answer = (*client)->Post("/api/v1/remote-leases/" + Escape(id) + "/renew",
                                nlohmann::json{{"ttl_seconds", ttl_seconds}});
  if (!answer.ok()) return WithCode(answer.status());
  return answer;
}

Status ClusterClient::Release(const std::string& id, milliseconds timeout) const {
  auto client = Open(url_, token_, timeout);
  if (!client.ok()) return WithCode(client.status());
  auto answer = (*client)->Delete("/api/v1/remote-leases/" + Escape(id));
  return answer.ok() ? Status::Ok() : WithCode(answer.status());
}

std::string ErrorCodeOf(const Status& status) {
  if (!status.reason().empty()) return status.reason();
  switch (status.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kTimeout:
      return "unavailable";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kPermissionDenied:
      return "permission_denied";
    case StatusCode::kResourceExhausted:
      return "resource_exhausted";
    default:
      return "internal";
  }
}

}  // namespace flyt::client_manager
