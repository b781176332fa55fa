#include "ctl/api_client.h"

#include <algorithm>
#include <map>
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

// JsonClient's words when the request never got an answer.
bool Unreachable(const Status& s) {
  return s.code() == StatusCode::kUnavailable &&
         s.message().find("cannot reach ") != std::string::npos;
}

std::string ReasonForHttpStatus(int code) {
  switch (code) {
    case 400:
      return "invalid_argument";
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 409:
      return "conflict";
    case 413:
      return "payload_too_large";
    case 429:
      return "too_many_queued";
    case 503:
      return "unavailable";
    default:
      return code >= 500 ? "internal" : "";
  }
}

std::optional<double> JsonNumber(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

}  // namespace

Result<SourceChoice> ChooseSource(const std::string& node_flag, const std::string& server_flag,
                                  const char* cluster_env) {
  if (!node_flag.empty() && !server_flag.empty()) {
    return InvalidArgument(
        "--node (one node manager) and --server (the cluster manager) exclude each other");
  }
  if (!node_flag.empty()) return SourceChoice{SourceKind::kNodeManager, node_flag};
  if (!server_flag.empty()) return SourceChoice{SourceKind::kClusterManager, server_flag};
  if (cluster_env != nullptr && *cluster_env != '\0') {
    return SourceChoice{SourceKind::kClusterManager, cluster_env};
  }
  return SourceChoice{};
}

std::string SourceLine(const SourceChoice& source, std::string_view local_detail) {
  switch (source.kind) {
    case SourceKind::kClusterManager:
      return "Source: cluster manager " + Printable(source.url) + "\n";
    case SourceKind::kNodeManager:
      return "Source: node manager " + Printable(source.url) + "\n";
    case SourceKind::kLocal:
      break;
  }
  return "Source: local machine" +
         (local_detail.empty() ? std::string() : " (" + std::string(local_detail) + ")") + "\n";
}

std::string ExitCodesHelp() {
  return "Exit status: 0 ok, 1 any other error, 2 usage error or invalid request, 3 cannot reach "
         "the server, 4 not found, 5 unauthenticated or permission denied, 6 not enough GPUs free "
         "now (insufficient_gpus), 7 the job or lease already ended (or a remote lease's GPU "
         "server failed: lease_failed), 8 the request can never fit "
         "this cluster (never_fits), 9 the server or its store is unavailable, 10 too many jobs "
         "queued.";
}

std::string ApiReason(const Status& status) {
  if (status.ok()) return "";
  if (auto http = ParseHttpError(status.message())) {
    const std::string& reason = status.reason();
    // Codes without an exit status of their own share that of the code they stand in for
    // (docs/api.md, Errors): a generic limit is "not now" at 409 and "too many" at 429.
    if (reason == "resource_exhausted") {
      return http->code == 429 ? "too_many_queued" : "insufficient_gpus";
    }
    if (reason == "timeout") return "unavailable";
    if (!reason.empty()) return reason;
    return ReasonForHttpStatus(http->code);
  }
  if (Unreachable(status)) return "unreachable";
  return status.reason();
}

std::string ApiMessage(const Status& status) {
  if (auto http = ParseHttpError(status.message())) return http->message;
  return status.message();
}

int ExitCodeForReason(std::string_view reason) {
  static const std::map<std::string_view, int> kCodes = {
      {"invalid_argument", kExitUsage},
      {"payload_too_large", kExitUsage},
      {"unreachable", kExitUnreachable},
      {"not_found", kExitNotFound},
      {"unauthenticated", kExitDenied},
      {"permission_denied", kExitDenied},
      {"insufficient_gpus", kExitInsufficientGpus},
      {"already_ended", kExitAlreadyEnded},
      // A remote lease whose GPU server failed is as over as an ended one: get a new lease.
      {"lease_failed", kExitAlreadyEnded},
      {"never_fits", kExitNeverFits},
      {"unavailable", kExitUnavailable},
      {"store_unavailable", kExitUnavailable},
      {"too_many_queued", kExitTooManyQueued},
      // Over the token's request rate: retry after Retry-After, like any "not now" answer.
      {"rate_limited", kExitUnavailable},
  };
  auto it = kCodes.find(reason);
  return it == kCodes.end() ? kExitError : it->second;
}

int ExitCode(const Status& status) {
  if (status.ok()) return kExitOk;
  return ExitCodeForReason(ApiReason(status));
}

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

std::string ExplainError(const Status& status, std::string_view doing, std::string_view url,
                         Peer peer) {
  const std::string prefix = doing.empty() ? "" : std::string(doing) + ": ";
  const std::string who = peer == Peer::kNodeManager ? "the node manager" : "the cluster manager";
  const std::string& text = status.message();
  if (Unreachable(status) && StartsWith(text, "cannot reach")) {
    // JsonClient names the URL and asks whether it runs; add where the address comes from.
    return Printable(text) + (peer == Peer::kNodeManager
                                  ? "; give its address with --node URL"
                                  : "; give its address with --server URL or FLYT_CLUSTER_MANAGER");
  }
  auto http = ParseHttpError(text);
  if (!http) return prefix + Printable(text);
  const std::string said = Printable(http->message);
  const std::string at = who + " at " + std::string(url);
  switch (http->code) {
    case 401:
      return prefix + at + " does not accept the token (" + said +
             "); give one with --token or FLYT_TOKEN";
    case 403:
      return prefix + "not allowed: " + said;
    case 404:
      if (StartsWith(http->message, "no such endpoint")) {
        return prefix + said + " (is " + std::string(url) + " a flyt " +
               (peer == Peer::kNodeManager ? "node" : "cluster") + " manager?)";
      }
      return prefix + said;
    case 400:
    case 409:
    case 413:
    case 429:
      return prefix + said;
    case 503:
      return prefix + at + " is unavailable: " + said;
    default:
      return prefix + at + " failed: " + said;
  }
}

Status Explained(const Status& status, std::string_view doing, std::string_view url, Peer peer) {
  if (status.ok()) return status;
  return Status(status.code(), ExplainError(status, doing, url, peer))
      .WithReason(ApiReason(status));
}

json AvailableClusterGpus(const json& answer, double min_free_mib, double max_util_percent) {
  json out = json::array();
  if (answer.is_object() && answer.contains("gpus") && answer["gpus"].is_array()) {
    for (const json& g : answer["gpus"]) {
      if (!g.is_object() || !g.contains("allocation_state") || g["allocation_state"] != "free") {
        continue;
      }
      auto score = JsonNumber(g, "score");
      auto free_bytes = JsonNumber(g, "memory_free_bytes");
      auto util = JsonNumber(g, "gpu_util_percent");
      // A GPU that cannot say how free it is cannot be promised to a job.
      if (!score || !free_bytes || !util) continue;
      const double free_mib =
          *free_bytes / (1024.0 * 1024.0) - JsonNumber(g, "reserved_memory_mb").value_or(0);
      if (free_mib < min_free_mib || *util > max_util_percent) continue;
      out.push_back(g);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const json& a, const json& b) {
    return a["score"].get<double>() > b["score"].get<double>();
  });
  return json{{"gpus", out}};
}

namespace {

Result<json> Labels(const std::vector<std::string>& labels) {
  json out = json::object();
  for (const std::string& l : labels) {
    size_t eq = l.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("--label '" + Printable(l) + "': expected KEY=VALUE");
    }
    out[l.substr(0, eq)] = l.substr(eq + 1);
  }
  return out;
}

}  // namespace

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
    FLYT_ASSIGN_OR_RETURN(body["labels"], Labels(f.labels));
  }
  return body;
}

Result<json> RemoteLeaseBody(const RemoteLeaseFlags& f) {
  if (f.sm_count && f.sm_percent) {
    return InvalidArgument("--sm-count and --sm-percent exclude each other: give one");
  }
  if (f.memory_mb <= 0) return InvalidArgument("--memory-mb: give the MiB of GPU memory, > 0");
  json body = {{"memory_mb", f.memory_mb}};
  if (f.sm_count) body["sm_count"] = *f.sm_count;
  if (f.sm_percent) body["sm_percent"] = *f.sm_percent;
  if (!f.gpu_model.empty()) body["gpu_model"] = f.gpu_model;
  if (!f.node.empty()) body["node"] = f.node;
  if (!f.client.empty()) body["client"] = f.client;
  if (f.ttl_seconds) body["ttl_seconds"] = *f.ttl_seconds;
  if (!f.labels.empty()) {
    FLYT_ASSIGN_OR_RETURN(body["labels"], Labels(f.labels));
  }
  return body;
}

std::string WithQuery(std::string path,
                      const std::vector<std::pair<std::string, std::string>>& params) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  char sep = '?';
  for (const auto& [key, value] : params) {
    if (value.empty()) continue;
    path += sep + key + "=";
    sep = '&';
    for (unsigned char c : value) {
      const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
      if (plain) {
        path += static_cast<char>(c);
      } else {
        path += '%';
        path += kHex[c >> 4];
        path += kHex[c & 15];
      }
    }
  }
  return path;
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
