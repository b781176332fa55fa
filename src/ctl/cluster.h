// What flytctl's cluster commands do besides printing: turn flags into the cluster manager's
// request bodies, turn its errors into one line a person can act on, and wait for a submission's
// jobs to leave the queue. The HTTP calls themselves go through flyt::http::JsonClient; waiting
// takes the fetch, the clock and the sleep as arguments, so tests drive it without a manager and
// without sleeping. Pure functions apart from what the caller passes in; thread-safe.
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

// A job or lease id as the manager issues them ([A-Za-z0-9._-], not "." or ".."): anything else
// would change the path it is put into.
Status CheckId(std::string_view id, std::string_view what);

// One line for a failed call to the manager at `url`, saying what was being done ("cannot
// allocate 2 GPU(s)"), what went wrong and, where it helps, what to do about it.
std::string ExplainError(const Status& status, std::string_view doing, std::string_view url);

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
