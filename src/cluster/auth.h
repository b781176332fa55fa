// Auth: who a bearer token belongs to and what role it has, for flyt-cluster-manager.
//
// Tokens come from the config ([[auth.tokens]]) and from FLYT_ADMIN_TOKEN (an admin). When no
// token is configured at all, the manager does not run open: it generates an admin token at
// first start, keeps it in <var_dir>/admin.token (mode 0600) and reuses it afterwards. Lookups
// compare in constant time. Immutable after Build; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cluster/config.h"
#include "common/status.h"

namespace flyt::cluster {

struct Caller;

class Auth {
 public:
  struct Built;
  // `env_admin_token`: the value of FLYT_ADMIN_TOKEN (empty when unset).
  static Result<Built> Build(const ClusterConfig& config, const std::string& env_admin_token);

  // The caller for a token; nullopt when the token is unknown. No token: an anonymous viewer
  // when anonymous_read is on, else nullopt.
  std::optional<Caller> Identify(const std::optional<std::string>& token) const;
  bool anonymous_read() const { return anonymous_read_; }
  size_t size() const { return tokens_.size(); }

 private:
  std::vector<TokenEntry> tokens_;
  bool anonymous_read_ = false;
};

struct Auth::Built {
  Auth auth;
  std::string generated_token_path;  // set when the admin token was generated or read from var/
  bool generated_now = false;
};

}  // namespace flyt::cluster
