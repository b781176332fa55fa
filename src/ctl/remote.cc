#include "ctl/remote.h"

#include <httplib.h>

#include <algorithm>

#include "ctl/render.h"

namespace flyt::ctl {

Result<std::unique_ptr<NodeClient>> NodeClient::Connect(const std::string& url,
                                                        std::string token) {
  std::string full = url.find("://") == std::string::npos ? "http://" + url : url;
  if (full.rfind("http://", 0) != 0) {
    return InvalidArgument("node URL '" + url + "': only http:// is supported");
  }
  while (!full.empty() && full.back() == '/') full.pop_back();
  std::unique_ptr<NodeClient> c(new NodeClient());
  c->url_ = full;
  c->client_ = std::make_unique<httplib::Client>(full);
  if (!c->client_->is_valid()) return InvalidArgument("node URL '" + url + "' is not valid");
  c->client_->set_connection_timeout(std::chrono::seconds(5));
  c->client_->set_read_timeout(std::chrono::seconds(30));
  if (!token.empty()) c->client_->set_bearer_token_auth(token.c_str());
  return c;
}

NodeClient::~NodeClient() = default;

Result<nlohmann::json> NodeClient::Finish(const std::string& what, int status,
                                          const std::string& body, bool transport_ok,
                                          const std::string& transport_error) {
  if (!transport_ok) {
    return Unavailable("cannot reach the node manager at " + url_ + " (" + transport_error +
                       " error: is it running, and is the address right?)");
  }
  // A node's answer is bounded before it is parsed: nlohmann parses iteratively, but copying or
  // printing a value recurses, so nesting deeper than flyt ever sends is refused.
  if (body.size() > (64u << 20)) return Internal(url_ + what + ": the answer is larger than 64 MiB");
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
  }
  if (deepest > 64) return Internal(url_ + what + ": the answer is nested too deeply to be flyt's");
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status >= 400) {
    std::string message = j.is_object() && j.contains("error") && j["error"].is_string()
                              ? j["error"].get<std::string>()
                              : body.substr(0, 200);
    StatusCode code = status == 404   ? StatusCode::kNotFound
                      : status == 400 ? StatusCode::kInvalidArgument
                      : status == 401 ? StatusCode::kFailedPrecondition
                                      : StatusCode::kUnavailable;
    return Status(code, url_ + what + ": HTTP " + std::to_string(status) + ": " + Printable(message));
  }
  if (j.is_discarded()) return Internal(url_ + what + ": the answer is not JSON");
  return j;
}

Result<nlohmann::json> NodeClient::Get(const std::string& path) {
  auto res = client_->Get(path);
  return Finish(path, res ? res->status : 0, res ? res->body : "", static_cast<bool>(res),
                httplib::to_string(res.error()));
}

Result<nlohmann::json> NodeClient::Post(const std::string& path, const nlohmann::json& body) {
  auto res = client_->Post(path, body.dump(), "application/json");
  return Finish(path, res ? res->status : 0, res ? res->body : "", static_cast<bool>(res),
                httplib::to_string(res.error()));
}

Result<nlohmann::json> NodeClient::Delete(const std::string& path) {
  auto res = client_->Delete(path);
  return Finish(path, res ? res->status : 0, res ? res->body : "", static_cast<bool>(res),
                httplib::to_string(res.error()));
}

}  // namespace flyt::ctl
