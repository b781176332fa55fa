// http::Server: cpp-httplib's server with a "front door" that keeps idle and slow peers from
// holding a worker thread. cpp-httplib keeps a thread per connection for as long as each read
// arrives within its timeout and has no deadline for a whole request, so a few dozen peers that
// drip their headers stop a daemon. Here the accept thread hands every socket at once to one
// epoll thread, which reads each request's head and body (Content-Length only; a chunked request
// body is refused with 411) without blocking and enforces:
//   - a deadline for the whole head and body, counted from the request's first byte (408);
//   - an idle timeout for a connection between requests (closed quietly);
//   - a cap on open connections per peer address (429) and in all (503), checked at accept;
//   - the body limit (413) and a head limit of 64 KiB (431).
// Only a complete, buffered request goes to the worker pool, which runs cpp-httplib's own
// request processing (routing, handlers, answers) over a Stream that reads from the buffer and
// writes to the socket with a write timeout; a keep-alive connection then goes back to the epoll
// thread. An idle or slow peer holds a buffer, never a worker.
//
// Fair service (docs/design.md, "The HTTP front door"): before a complete request goes to a
// worker, the daemon's admission policy (SetAdmissionPolicy) says which lane serves it and which
// rate limit holds for it. A token bucket per key (common/rate_limit.h: a token's holder, or the
// address of a caller without one) keeps one caller's flood of fast, complete requests from
// taking every worker: a request over its limit is answered here, on the epoll thread, 429 with
// Retry-After and {"code": "rate_limited"}, and the connection stays open for the next one. The
// control plane — /healthz, /readyz, /metrics and what the daemon adds (the cluster manager: node
// heartbeats) — goes to a small priority lane of its own workers (ordinary workers also take it
// first), so it is answered when every ordinary worker is busy.
//
// The server notices when it could not receive in time: a refused connection, a complete request
// that waited longer than `stall_threshold` for a worker, or its own loop stalled for seconds.
// Each calls the overload listener (the cluster manager then does not count nodes' silence:
// cluster.h), and each is counted (Stats, MetricsText).
//
// Ownership: the Server owns its epoll thread, its workers and every connection it adopted; they
// start when listening starts and stop (in-flight requests finish, idle connections close) when
// httplib::Server::stop() ends the accept loop, before the listening thread returns. Configure
// (common/http.h) sets the limits before listening, SetAdmissionPolicy and SetClock too; the policy
// runs on the epoll thread and must be cheap and must not block. Stats/MetricsText are
// thread-safe.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/http.h"
#include "common/rate_limit.h"
#include "common/status.h"
#include "common/toml_reader.h"

namespace flyt::http {

struct FrontDoorOptions {
  size_t max_body_bytes = 1 << 20;
  int threads = 16;                        // workers: requests processed at once
  int max_connections_per_peer = 64;       // open connections from one address
  int max_connections = 512;               // open connections in all
  std::chrono::milliseconds request_deadline{10000};  // whole head and body, from its first byte
  std::chrono::milliseconds idle_timeout{5000};        // keep-alive connection without a request
  std::chrono::milliseconds write_timeout{10000};      // a write of the answer that makes no progress
  std::chrono::milliseconds stall_threshold{1000};     // a request waiting longer for a worker
  size_t keep_alive_max_requests = 100;
  // Workers of the priority lane (admission's `priority`), besides `threads`; 0: no lane of its
  // own (priority requests are still taken first).
  int priority_threads = 2;
};

// What the front door knows of a complete request before a worker takes it.
struct RequestHead {
  std::string_view method;
  std::string_view path;  // the target without its query, as sent (not percent-decoded)
  std::string_view peer_ip;
  std::optional<std::string_view> bearer_token;  // of "Authorization: Bearer <token>"
};

// How the server treats one request (the daemon's policy decides).
struct Admission {
  bool priority = false;  // served by the priority lane
  // The request's bucket: the holder of its token, or its address; never the token itself (the
  // key may be shown). Empty, or a limit that is not limited: the request is not limited.
  std::string limit_key;
  RateLimit limit;
  std::string label;  // requests_limited_total's "role" label; one of the policy's labels
};
using AdmissionPolicy = std::function<Admission(const RequestHead&)>;

// The control plane every daemon has: GET or HEAD /healthz, /readyz, /metrics.
bool IsHealthOrMetrics(const RequestHead& head);
// The policy of a Server without one of its own: those to the priority lane, nothing limited.
Admission DefaultAdmission(const RequestHead& head);

// Reads the connection limits of `section` (threads, max_connections_per_peer, max_connections,
// request_deadline_seconds, idle_timeout_seconds) into `options`, leaving absent keys as they
// are; a value out of range, or a per-peer cap above the total, is an error naming the key.
// The caller checks the section's keys (it allows these five).
Status ReadServerOptions(const TomlReader& reader, const toml::table& table,
                         const std::string& section, ServerOptions& options);

class Server : public httplib::Server {
 public:
  struct Stats {
    uint64_t connections_open = 0;
    uint64_t connections_accepted = 0;
    uint64_t refused_per_peer = 0;  // over max_connections_per_peer
    uint64_t refused_total = 0;     // over max_connections
    uint64_t requests_timed_out = 0;  // not complete within request_deadline (408)
    uint64_t requests_rejected = 0;   // 411, 413, 431 before reaching a handler
    uint64_t idle_closed = 0;         // closed after idle_timeout without a request
    uint64_t requests_dispatched = 0;
    uint64_t requests_stalled = 0;  // waited longer than stall_threshold for a worker
    uint64_t loop_stalls = 0;       // the epoll loop itself ran seconds late
    uint64_t requests_priority = 0;  // handed to the priority lane
    uint64_t requests_limited = 0;   // answered 429 rate_limited (all labels)
    std::map<std::string, uint64_t> limited_by_label;
    uint64_t rate_limit_buckets = 0;  // token buckets held now
  };

  Server();
  ~Server() override;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Before listening.
  void SetFrontDoorOptions(const FrontDoorOptions& options);
  const FrontDoorOptions& front_door_options() const { return options_; }
  // Called from the server's threads each time it could not receive in time (see above). Must be
  // cheap and must not block. Before listening.
  void SetOverloadListener(std::function<void()> listener);
  // The admission policy and every label it gives (the metric shows each, 0 until counted; a
  // label not listed is counted as "other"). Before listening.
  void SetAdmissionPolicy(AdmissionPolicy policy, const std::vector<std::string>& labels);
  // The rate limiter's clock (default: the system clock). Before listening.
  void SetClock(Clock& clock);

  Stats stats() const;
  // Prometheus text for the stats, each metric named `prefix` + "_http_...".
  std::string MetricsText(const std::string& prefix) const;

  class FrontDoor;  // the epoll thread and the workers (http_server.cc)

 private:
  // cpp-httplib calls this for each accepted socket (on the accept thread, through the inline
  // task queue): the front door adopts it.
  bool process_and_close_socket(socket_t sock) override;

  friend class FrontDoor;
  // What a worker runs for one complete request: cpp-httplib's request processing.
  bool ProcessBuffered(httplib::Stream& stream, bool close_connection, bool& connection_closed);

  FrontDoorOptions options_;
  std::function<void()> overload_listener_;
  AdmissionPolicy admission_;
  std::unique_ptr<RateLimiter> limiter_;
  std::unique_ptr<FrontDoor> front_door_;
  struct Counters;
  std::unique_ptr<Counters> counters_;
};

}  // namespace flyt::http
