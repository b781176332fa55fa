// The cluster manager's admission policy for its HTTP server (common/http_server.h, "Fair
// service"): which requests the priority lane serves, and which rate limit holds for each.
//
//   - Priority: GET/HEAD /healthz, /readyz, /metrics, and node heartbeats (POST
//     /api/v1/nodes/heartbeat), so that a busy API never makes a node look lost.
//   - Limits (ClusterConfig::RateLimits): a known token's requests share its holder's bucket,
//     keyed "<role>:<name>" (never the token itself); node tokens are never limited; a request
//     without a token, or with one the manager does not know, counts against its source
//     address ("anonymous").
//
// Pure functions over an immutable Auth and config; thread-safe. Admit runs on the server's epoll
// thread for every request: it only compares the token against the configured ones.
#pragma once

#include <string>
#include <vector>

#include "cluster/auth.h"
#include "cluster/config.h"
#include "common/http_server.h"

namespace flyt::cluster {

http::Admission Admit(const Auth& auth, const ClusterConfig::RateLimits& limits,
                      const http::RequestHead& head);
// The labels Admit gives (the metric's "role"): viewer, client, admin, anonymous.
std::vector<std::string> AdmissionLabels();

}  // namespace flyt::cluster
