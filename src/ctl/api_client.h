// What flytctl's commands do with the flyt APIs besides printing: decide which API (or the local
// machine) a command reads, turn flags into the cluster manager's request bodies, turn an API's
// errors into one line a person can act on and an exit status a script can act on, and wait for
// a submission's jobs to leave the queue. The HTTP calls themselves go through
// flyt::http::JsonClient; waiting takes the fetch, the clock and the sleep as arguments, so tests
// drive it without a manager and without sleeping. Pure functions apart from what the caller
// passes in; thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace flyt::ctl {

// Where the cluster manager is: --server, else $FLYT_CLUSTER_MANAGER, else the default address.
inline constexpr const char* kDefaultClusterManager = "http://127.0.0.1:12400";
std::string ClusterManagerUrl(const std::string& flag, const char* env);

// Where a command that reads GPUs or processes reads them: --node URL names a node manager;
// else --server URL, else $FLYT_CLUSTER_MANAGER, names the cluster manager; else this machine.
enum class SourceKind { kLocal, kNodeManager, kClusterManager };
struct SourceChoice {
  SourceKind kind = SourceKind::kLocal;
  std::string url;  // empty for kLocal
};
// --node and --server together are a usage error (InvalidArgument).
Result<SourceChoice> ChooseSource(const std::string& node_flag, const std::string& server_flag,
                                  const char* cluster_env);
// The first line of a table: "Source: cluster manager http://...", "Source: node manager ...".
std::string SourceLine(const SourceChoice& source, std::string_view local_detail = "");

// ---- errors and exit statuses ------------------------------------------------------------------

// flytctl's exit statuses (documented in `flytctl --help`).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // any other error
inline constexpr int kExitUsage = 2;  // usage error, or the API refused the request as invalid
inline constexpr int kExitUnreachable = 3;  // cannot reach the server
inline constexpr int kExitNotFound = 4;
inline constexpr int kExitDenied = 5;  // unauthenticated or permission denied
inline constexpr int kExitInsufficientGpus = 6;
inline constexpr int kExitAlreadyEnded = 7;  // also a remote lease whose server failed
inline constexpr int kExitNeverFits = 8;
inline constexpr int kExitUnavailable = 9;     // the server (or its store) is unavailable: 503
inline constexpr int kExitTooManyQueued = 10;  // 429
// The text of `flytctl --help`'s footer that lists them.
std::string ExitCodesHelp();

// The reason of a failed API call as a word: the error body's "code" where the server sent one
// (carried as Status::reason()), else one derived from the HTTP status in JsonClient's message
// (400 invalid_argument, 401 unauthenticated, 403 permission_denied, 404 not_found, 409 conflict,
// 413 payload_too_large, 429 too_many_queued, 503 unavailable, other 5xx internal), "unreachable"
// when the server could not be reached at all, else the status's own reason (often empty).
std::string ApiReason(const Status& status);
// The server's own words for a failed HTTP call (the error body's "error", without the URL and
// HTTP status JsonClient puts before it); the status's message when there was no HTTP answer.
std::string ApiMessage(const Status& status);
// The exit status for a reason (see the constants above); 1 for an empty or unknown one.
int ExitCodeForReason(std::string_view reason);
int ExitCode(const Status& status);

// Who a failed call went to, for the advice in an error line.
enum class Peer { kClusterManager, kNodeManager };

// A job or lease id as the manager issues them ([A-Za-z0-9._-], not "." or ".."): anything else
// would change the path it is put into.
Status CheckId(std::string_view id, std::string_view what);

// One line for a failed call to the manager at `url`, saying what was being done ("cannot
// allocate 2 GPU(s)"), what went wrong and, where it helps, what to do about it. The HTTP status
// is not part of it (the exit status carries the kind of error).
std::string ExplainError(const Status& status, std::string_view doing, std::string_view url,
                         Peer peer = Peer::kClusterManager);
// The same line as a Status that keeps the code and carries ApiReason(status) as its reason, so
// that ExitCode() of the result is ExitCode() of the original.
Status Explained(const Status& status, std::string_view doing, std::string_view url,
                 Peer peer = Peer::kClusterManager);

// `flytctl gpus --available` on the cluster: from GET /api/v1/gpus, the free GPUs with at least
// `min_free_mib` free (after leased memory) and at most `max_util_percent` busy, best score first.
// Returns {"gpus": [...]}, so that it renders as the cluster's GPU table.
nlohmann::json AvailableClusterGpus(const nlohmann::json& answer, double min_free_mib,
                                    double max_util_percent);

struct AllocationFlags {
  int gpus = 1;
  std::optional<double> min_free_memory_mb;
  std::optional<int> max_utilization_percent;
  std::string gpu_model;
  std::string policy;  // "" for the manager's default
  std::optional<int64_t> ttl_seconds;
  bool shared = false;
  bool any_node = false;
  std::string owner;
  std::vector<std::string> labels;  // "key=value"
};
// The body of POST /api/v1/allocations; a label without "=" is an error naming it.
Result<nlohmann::json> AllocationBody(const AllocationFlags& flags);

// `flytctl remote alloc`: a share of one GPU for a client node (POST /api/v1/remote-leases).
struct RemoteLeaseFlags {
  std::optional<int64_t> sm_count;    // SMs; excludes sm_percent
  std::optional<int64_t> sm_percent;  // 1-100 of the GPU's SMs
  int64_t memory_mb = 0;              // required, > 0
  std::string gpu_model;
  std::string node;    // pins a node ("" for the manager's choice)
  std::string client;  // the client node's name ("" for the token's name)
  std::optional<int64_t> ttl_seconds;
  std::vector<std::string> labels;  // "key=value"
};
// The body of POST /api/v1/remote-leases: only what was given, so the manager's defaults hold.
// Both SM flags, a memory of 0 or a label without "=" are errors naming the flag.
Result<nlohmann::json> RemoteLeaseBody(const RemoteLeaseFlags& flags);

// "path?k=v&k2=v2" with the values percent-encoded; empty values are left out, and so is the "?"
// when none is left.
std::string WithQuery(std::string path,
                      const std::vector<std::pair<std::string, std::string>>& params);

struct SubmitFlags {
  std::optional<int> priority;
  std::optional<int64_t> timeout_seconds;
  std::string gpu_model;
  std::string policy;
  std::string owner;
};
// The body of POST /api/v1/jobs: the task with the flags merged into its "scheduling" object
// (flags win over what the file says).
Result<nlohmann::json> SubmissionBody(const nlohmann::json& task, const SubmitFlags& flags);

struct WaitOptions {
  std::chrono::milliseconds poll{500};
  std::optional<std::chrono::milliseconds> timeout;  // none: until the manager decides
  // How long the manager may stay unreachable (a restart) before waiting fails.
  std::chrono::milliseconds unreachable_grace{30000};
};

struct WaitResult {
  std::vector<nlohmann::json> jobs;  // in the order asked; still-queued ones as {"id", "status"}
  bool timed_out = false;            // some were still queued when options.timeout ran out
};

// How waiting reads the manager: the ids of every queued job (GET /api/v1/queue, one call per
// poll however many jobs are awaited) and one job (GET /api/v1/jobs/{id}, once it has left).
struct JobSource {
  std::function<Result<std::vector<std::string>>()> queued_ids;
  std::function<Result<nlohmann::json>(const std::string& id)> job;
};
using Sleeper = std::function<void(std::chrono::milliseconds)>;

// Polls until each of `ids` is running or has ended. `on_left_queue` sees each job once, when it
// is seen to have left the queue. Fails on the first error other than the manager being
// unreachable for less than the grace.
Result<WaitResult> WaitUntilPlaced(const std::vector<std::string>& ids, const JobSource& source,
                                   const Clock& clock, const Sleeper& sleep,
                                   const WaitOptions& options,
                                   const std::function<void(const nlohmann::json&)>& on_left_queue);

// A job's "status" ("queued", "running", ...), "?" when the answer has none.
std::string JobStatus(const nlohmann::json& job);
// Whether a job in this state counts as a success for `submit --wait`: running or completed.
bool JobSucceeded(const nlohmann::json& job);

}  // namespace flyt::ctl
