// ClusterClient: the client manager's calls to flyt-cluster-manager's remote-lease API
// (docs/api.md, "Remote leases"): create, renew and release a lease with a `client` token.
//
// Each call opens its own connection (common/http.h JsonClient) with the timeout it is given, so
// that calls may run on several threads at once and none outlives its bound. Errors keep the
// cluster manager's machine-readable code as the Status reason ("insufficient_gpus",
// "never_fits", "lease_failed", "already_ended", ...); an unreachable manager is kUnavailable with
// the reason "unavailable". Thread-safe; holds only its URL and token.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace flyt::client_manager {

class ClusterClient {
 public:
  ClusterClient(std::string url, std::string token) : url_(std::move(url)), token_(std::move(token)) {}

  // POST /api/v1/remote-leases: the lease as the manager answered it (201). A non-empty
  // `idempotency_key` goes as the Idempotency-Key header: a retry with it gets the same lease.
  // `answered` (when given) tells whether the manager answered at all: false for a request that
  // may or may not have reached it (refused, reset, timed out), which is worth a retry with the
  // same key.
  Result<nlohmann::json> Create(const nlohmann::json& body, std::chrono::milliseconds timeout,
                                const std::string& idempotency_key = "",
                                bool* answered = nullptr) const;
  // POST /api/v1/remote-leases/{id}/renew.
  Result<nlohmann::json> Renew(const std::string& id, int ttl_seconds,
                               std::chrono::milliseconds timeout) const;
  // DELETE /api/v1/remote-leases/{id}.
  Status Release(const std::string& id, std::chrono::milliseconds timeout) const;

  const std::string& url() const { return url_; }

 private:
  std::string url_;
  std::string token_;
};

// The machine-readable code of a failed call, as the program is told it: the cluster manager's
// own code when it sent one, else one from the vocabulary for the kind of failure.
std::string ErrorCodeOf(const Status& status);

}  // namespace flyt::client_manager
