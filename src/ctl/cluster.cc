#include "ctl/cluster.h"

#include <set>

#include "common/strings.h"
#include "ctl/render.h"

namespace flyt::ctl {

using nlohmann::json;

namespace {

// JsonClient words an HTTP error as "<url><path>: HTTP <code>: <the manager's message>".
struct HttpError {
  int code = 0;
  std::string message;
};

std::optional<HttpError> ParseHttpError(const std::string& text) {
  constexpr std::string_view kMarker = ": HTTP ";
  size_t at = text.find(kMarker);
  if (at == std::string::npos) return std::nullopt;
  size_t digits = at + kMarker.size();
  if (digits + 5 > text.size() || text.compare(digits + 3, 2, ": ") != 0) return std::nullopt;
  auto code = ParseInt(std::string_view(text).substr(digits, 3));
  if (!code) return std::nullopt;
  return HttpError{static_cast<int>(*code), text.substr(digits + 5)};
}

}  // namespace

std::string ClusterManagerUrl(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  if (env != nullptr && *env != '\0') return env;
  return kDefaultClusterManager;
}

Status CheckId(std::string_view id, std::string_view what) {
  bool ok = !id.empty() && id.size() <= 128 && id != "." && id != "..";
  for (char c : id) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.');
  }
  if (ok) return Status::Ok();
  return InvalidArgument("'" + Printable(id) + "' is not a " + std::string(what) +
                         " id (letters, digits, '.', '_' and '-', as flytctl prints them)");
}

std::string ExplainError(const Status& status, std::string_view doing, std::string_view url) {
  const std::string prefix = doing.empty() ? "" : std::string(doing) + ": ";
  const std::string& text = status.message();
  if (StartsWith(text, "cannot reach")) {
    // JsonClient names the URL and asks whether it runs; add where the address comes from.
    return Printable(text) + "; give its address with --server URL or FLYT_CLUSTER_MANAGER";
  }
  auto http = ParseHttpError(text);
  if (!http) return prefix + Printable(text);
  const std::string said = Printable(http->message);
  switch (http->code) {
    case 401:
      return prefix + "the cluster manager at " + std::string(url) +
             " does not accept the token (" + said + "); give one with --token or FLYT_TOKEN";
    case 403:
      return prefix + "not allowed: " + said;
    case 404:
      if (StartsWith(http->message, "no such endpoint")) {
        return prefix + said + " (is " + std::string(url) + " a flyt cluster manager?)";
      }
      return prefix + said;
    case 400:
    case 409:
      return prefix + said;
    default:
      return prefix + "the cluster manager answered HTTP " + std::to_string(http->code) + ": " +
             said;
  }
}

Result<json> AllocationBody(const AllocationFlags& f) {
  json body = {{"gpus", f.gpus}};
  if (f.min_free_memory_mb) body["min_free_memory_mb"] = *f.min_free_memory_mb;
  if (f.max_utilization_percent) body["max_utilization"] = *f.max_utilization_percent;
  if (!f.gpu_model.empty()) body["gpu_model"] = f.gpu_model;
  if (!f.policy.empty()) body["policy"] = f.policy;
  if (f.ttl_seconds) body["ttl_seconds"] = *f.ttl_seconds;
  if (f.shared) body["exclusive"] = false;
  if (f.any_node) body["same_node"] = false;
  if (!f.owner.empty()) body["owner"] = f.owner;
  if (!f.labels.empty()) {
    json labels = json::object();
    for (const std::string& l : f.labels) {
      size_t eq = l.find('=');
      if (eq == std::string::npos || eq == 0) {
        return InvalidArgument("--label '" + Printable(l) + "': expected KEY=VALUE");
      }
      labels[l.substr(0, eq)] = l.substr(eq + 1);
    }
    body["labels"] = labels;
  }
  return body;
}

Result<json> SubmissionBody(const json& task, const SubmitFlags& f) {
  if (!task.is_object()) return InvalidArgument("the task must be a JSON object");
  json body = task;
  json scheduling = json::object();
  if (body.contains("scheduling") && !body["scheduling"].is_null()) {
    if (!body["scheduling"].is_object()) {
      return InvalidArgument("the task's \"scheduling\" must be an object");
    }
    scheduling = body["scheduling"];
  }
  if (f.priority) scheduling["priority"] = *f.priority;
  if (f.timeout_seconds) scheduling["timeout_seconds"] = *f.timeout_seconds;
  if (!f.gpu_model.empty()) scheduling["gpu_model"] = f.gpu_model;
  if (!f.policy.empty()) scheduling["policy"] = f.policy;
  if (!f.owner.empty()) scheduling["owner"] = f.owner;
  if (!scheduling.empty()) body["scheduling"] = scheduling;
  return body;
}

std::string JobStatus(const json& job) {
  if (!job.is_object() || !job.contains("status") || !job["status"].is_string()) return "?";
  return job["status"].get<std::string>();
}

bool JobSucceeded(const json& job) {
  const std::string status = JobStatus(job);
  return status == "running" || status == "completed";
}

Result<WaitResult> WaitUntilPlaced(const std::vector<std::string>& ids, const JobSource& source,
                                   const Clock& clock, const Sleeper& sleep,
                                   const WaitOptions& options,
                                   const std::function<void(const json&)>& on_left_queue) {
  WaitResult result;
  for (const std::string& id : ids) result.jobs.push_back({{"id", id}, {"status", "queued"}});
  std::set<size_t> pending;
  for (size_t i = 0; i < ids.size(); ++i) pending.insert(i);
  const auto start = clock.SteadyNow();
  bool unreachable = false;
  auto unreachable_since = start;
  // The manager down for a moment (a restart) is not a reason to stop waiting.
  auto transient = [&](const Status& s) -> Status {
    if (s.code() != StatusCode::kUnavailable) return s;
    const auto now = clock.SteadyNow();
    if (!unreachable) unreachable_since = now;
    unreachable = true;
    if (now - unreachable_since > options.unreachable_grace) return s;
    return Status::Ok();
  };
  while (!pending.empty()) {
    bool failed_call = false;
    auto queued = source.queued_ids();
    if (!queued.ok()) {
      FLYT_RETURN_IF_ERROR(transient(queued.status()));
      failed_call = true;
    } else {
      const std::set<std::string> still(queued->begin(), queued->end());
      for (auto it = pending.begin(); it != pending.end();) {
        if (still.count(ids[*it]) > 0) {
          ++it;
          continue;
        }
        auto job = source.job(ids[*it]);
        if (!job.ok()) {
          FLYT_RETURN_IF_ERROR(transient(job.status()));
          failed_call = true;
          break;
        }
        if (JobStatus(*job) == "queued") {  // not yet in the queue's answer, or put back
          ++it;
          continue;
        }
        result.jobs[*it] = *job;
        on_left_queue(*job);
        it = pending.erase(it);
      }
    }
    if (!failed_call) unreachable = false;
    if (pending.empty()) break;
    if (options.timeout && clock.SteadyNow() - start >= *options.timeout) {
      result.timed_out = true;
      break;
    }
    sleep(options.poll);
  }
  return result;
}

}  // namespace flyt::ctl
