// NodeClient: flytctl's client for a flyt-node-manager's JSON API.
//
// Every failure becomes a Status that says what the user can act on: the node cannot be reached
// (with the URL), the node answered an error (its {"error": ...} text and the HTTP code), or the
// answer was not the JSON expected. One client per command; not shared between threads.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace httplib {
class Client;
}

namespace flyt::ctl {

class NodeClient {
 public:
  // `url`: "http://host:port" or "host:port". `token`: bearer token, empty for none.
  static Result<std::unique_ptr<NodeClient>> Connect(const std::string& url, std::string token);
  ~NodeClient();

  Result<nlohmann::json> Get(const std::string& path);
  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body);
  Result<nlohmann::json> Delete(const std::string& path);

 private:
  NodeClient() = default;
  Result<nlohmann::json> Finish(const std::string& what, int status, const std::string& body,
                                bool transport_ok, const std::string& transport_error);

  std::string url_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace flyt::ctl
