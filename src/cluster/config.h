// ClusterConfig: flyt-cluster-manager's configuration, from a TOML file
// (configs/cluster-manager.toml documents every key) with command-line overrides on top. With no
// file at all the manager runs on the defaults: 127.0.0.1:12400 and sqlite:var/flyt.db.
//
// Loading refuses a broken file with the file, line, key and problem, and unknown keys. Plain
// values; copy freely.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/http.h"
#include "common/rate_limit.h"
#include "cluster/node_address.h"
#include "common/status.h"
#include "sched/ledger.h"
#include "sched/queue.h"

namespace flyt::cluster {

// What a bearer token may do. Ordered: each role can do what the ones before it can, except that
// a node may only register and send heartbeats.
enum class Role { kViewer, kClient, kNode, kAdmin };
const char* RoleName(Role role);

struct TokenEntry {
  std::string name;  // who holds it: the owner of a client's leases and jobs
  std::string token;
  Role role = Role::kViewer;
};

struct ClusterConfig {
  // [manager]
  std::string listen_host = "127.0.0.1";
  int listen_port = 12400;
  std::string store = "sqlite:var/flyt.db";
  std::string var_dir = "var";  // the generated admin token lives here
  size_t max_body_bytes = 4 << 20;
  // [http]: connection limits of the HTTP server (common/http.h). `threads` are the API's
  // workers; each live stream (web.max_streams) has one more.
  http::ServerOptions http = [] {
    http::ServerOptions o;
    o.threads = 32;
    return o;
  }();
  // [http] rate limits (common/rate_limit.h): each token's requests over its role's rate get 429
  // rate_limited with Retry-After. "anonymous": requests without a known token, one bucket per
  // source address. rate_per_second and rate_burst set viewer, client and anonymous; role_rates
  // overrides one role. Admin tokens are not limited unless role_rates.admin says so; node tokens
  // never are (their heartbeats must arrive). A rate of 0: not limited.
  struct RateLimits {
    RateLimit viewer{100, 200};
    RateLimit client{100, 200};
    RateLimit admin{0, 200};
    RateLimit anonymous{100, 200};
  } rate_limits;
  // How often a replica that shares its database re-reads what others changed (it also does so
  // before every write). 0: never between writes (one manager on its own store).
  std::chrono::milliseconds sync_interval{1000};
  // How long an Idempotency-Key of POST /allocations or POST /jobs is remembered (with the answer
  // it got): a retry within it gets that answer again. "idempotency_keep_for", e.g. "24h".
  std::chrono::seconds idempotency_keep_for{24 * 3600};
  // How often the store's consistency check (SQLite's quick_check, on a connection of its own)
  // runs while the manager does; it also runs at every start. 0: only at start.
  std::chrono::seconds store_check_interval{300};
  // [ledger]
  sched::LedgerOptions ledger;
  std::chrono::seconds default_lease_ttl{3600};
  // The default of a request's "prefer_idle": among the GPUs that fit, those whose usage
  // profile says idle are chosen first.
  bool prefer_idle = true;
  // [queue]
  std::chrono::seconds job_timeout{300};
  std::chrono::seconds job_lease_ttl{6 * 3600};
  sched::QueueOptions queue;
  // [jobs]
  // Finished jobs (completed, failed, cancelled) are kept in memory and in the store for this
  // long after they ended, and at most this many of them (the newest); 0: no limit of that kind.
  std::chrono::seconds keep_finished_for{7 * 86400};
  size_t keep_finished_max = 10000;
  // Queued experiments one owner may have at once; a submission that would go past it is refused
  // whole (429, too_many_queued). 0: no cap.
  size_t max_queued_per_owner = 10000;
  // The most bytes one submission may expand to: its shared parameters once plus every
  // experiment's own values (experiments × their bytes); more is refused whole, before anything
  // is written (413, payload_too_large).
  size_t max_expanded_bytes = 16 << 20;
  // [auth]
  std::vector<TokenEntry> tokens;
  bool anonymous_read = false;  // requests without a token may read (role viewer)
  // [nodes]
  std::string node_api_token;  // sent to node managers' APIs (monitoring sessions)
  // Networks in which a node's advertised API host is taken as it is (node_address.h); outside
  // them the manager calls the heartbeat's source address. Empty: always the source address.
  std::vector<IpNetwork> node_api_networks;
  // [events]
  size_t event_retention = 100000;  // "retention": events kept, by count
  uint64_t event_max_bytes = 64ULL << 20;  // "max_bytes": and by their total size (body and kind)
  size_t max_events_per_heartbeat = 20;   // further events of one heartbeat are dropped (counted)
  size_t max_event_bytes = 4096;  // a node event larger than this (as JSON) is truncated, marked so
  // [remote]: remote leases (POST /api/v1/remote-leases), shares of one GPU served by a GPU
  // server on its node.
  bool remote_enabled = true;
  std::chrono::seconds remote_default_ttl{60};   // "default_ttl_s"
  std::chrono::seconds remote_max_ttl{86400};    // "max_ttl_s" (at most 30 days)
  // How long a POST waits for the node to start the lease's GPU server ("server_start_timeout_s").
  std::chrono::seconds remote_server_start_timeout{15};
  // [web]
  bool web_enabled = true;  // serve the dashboard at /
  // Where the built dashboard is (index.html, app.js, app.css); "" finds it next to the program:
  // <bin>/../share/flyt/web (installed, and in the build tree).
  std::string web_dir;
  int max_streams = 32;  // live streams (GET /api/v1/stream) open at once; each holds a thread
  // A stream tells of changes at most this often (heartbeats alone change the state every few
  // seconds per node).
  std::chrono::milliseconds stream_min_gap{1000};
  // [log]
  std::string log_level = "info";
};

Result<ClusterConfig> ParseClusterConfig(std::string_view text, const std::string& source);
// "<N><unit>" with unit s, m, h, d or w ("90s", "12h", "7d"), or "0": a span of time. Refuses
// anything else, and spans over `max`.
Result<std::chrono::seconds> ParseDuration(std::string_view text, std::chrono::seconds max);
Result<ClusterConfig> LoadClusterConfig(const std::string& path);

}  // namespace flyt::cluster
