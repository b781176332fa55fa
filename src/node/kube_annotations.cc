#include "node/kube_annotations.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/json.h"
#include "common/strings.h"
#include "profile/json.h"

namespace flyt::node {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr size_t kMaxLabels = 64;
constexpr size_t kMaxAnnotationBytes = 64 << 10;
constexpr const char* kGpuLabelPrefix = "nvidia.com/gpu.";

// "flyt.dev/gpu-<digits>": the keys this publisher owns on the Node.
bool IsGpuAnnotationKey(const std::string& key) {
  if (!StartsWith(key, kAnnotationPrefix)) return false;
  const std::string digits = key.substr(std::string_view(kAnnotationPrefix).size());
  return !digits.empty() && digits.size() <= 4 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<double> Number(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// A reading moved past `threshold` (an absent reading that appears, or the other way, always
// counts; a threshold of 0 means any change).
bool Moved(std::optional<double> before, std::optional<double> after, double threshold) {
  if (before.has_value() != after.has_value()) return true;
  if (!before) return false;
  const double diff = std::fabs(*after - *before);
  return diff > 0 && diff >= threshold;
}

std::set<uint64_t> Pids(const json& annotation) {
  std::set<uint64_t> pids;
  auto it = annotation.find("processes");
  if (it == annotation.end() || !it->is_array()) return pids;
  for (const json& p : *it) {
    if (p.is_object() && p.contains("pid") && p["pid"].is_number_unsigned()) {
      pids.insert(p["pid"].get<uint64_t>());
    }
  }
  return pids;
}

std::string Seconds(milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

std::string AnnotationKey(uint32_t index) { return kAnnotationPrefix + std::to_string(index); }

std::optional<std::string> ProcessEnv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

Result<KubernetesResolution> ResolveKubernetes(const KubernetesConfig& config,
                                               const EnvLookup& env) {
  KubernetesResolution out;
  if (config.mode == KubernetesMode::kOff) {
    out.off_reason = "[kubernetes] enabled = false";
    return out;
  }
  const bool required = config.mode == KubernetesMode::kOn;
  // The first thing missing, in the order a reader would check them.
  std::string problem;
  bool in_cluster = true;
  std::string api_server = config.api_server;
  if (api_server.empty()) {
    auto host = env("KUBERNETES_SERVICE_HOST");
    auto port = env("KUBERNETES_SERVICE_PORT");
    if (!host || !port) {
      in_cluster = false;
      problem =
          "not in a Kubernetes cluster (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
          "are not set, and [kubernetes] api_server is empty)";
    } else {
      auto port_number = ParseInt(*port);
      api_server =
          "https://" + FormatHostPort(*host, port_number ? static_cast<int>(*port_number) : 0);
      if (!port_number || !kube::ParseApiServer(api_server).ok()) {
        problem = "KUBERNETES_SERVICE_HOST/PORT (" + *host + ", " + *port +
                  ") do not make an API server address";
      }
    }
  }
  std::string node_name = config.node_name;
  if (problem.empty() && node_name.empty()) {
    node_name = env("NODE_NAME").value_or("");
    if (node_name.empty()) {
      problem =
          "no node name: set NODE_NAME (the DaemonSet sets it from spec.nodeName) or "
          "[kubernetes] node_name";
    } else if (!kube::ValidNodeName(node_name)) {
      problem = "NODE_NAME \"" + node_name + "\" is not a Kubernetes node name";
    }
  }
  if (problem.empty() && access(config.token_file.c_str(), R_OK) != 0) {
    problem = "no readable service-account token at " + config.token_file;
  }
  if (problem.empty() && access(config.ca_file.c_str(), R_OK) != 0) {
    problem = "no readable cluster CA at " + config.ca_file;
  }
  if (!problem.empty()) {
    if (required) return InvalidArgument("[kubernetes] enabled = true, but " + problem);
    out.off_reason = problem;
    out.misconfigured = in_cluster;
    return out;
  }
  KubeAnnotationOptions o;
  o.node_name = node_name;
  o.client.api_server = api_server;
  o.client.token_file = config.token_file;
  o.client.ca_file = config.ca_file;
  o.client.timeout = config.timeout;
  o.min_interval = config.min_interval;
  o.util_threshold_percent = config.util_threshold_percent;
  o.memory_threshold_percent = config.memory_threshold_percent;
  o.period_threshold_percent = config.period_threshold_percent;
  out.options = std::move(o);
  return out;
}

bool AnnotationMoved(const json& before, const json& after, const KubeAnnotationOptions& o,
                     std::string* why) {
  auto say = [&](std::string text) {
    if (why != nullptr) *why = std::move(text);
    return true;
  };
  if (!before.is_object() || !after.is_object()) return say("unreadable");
  for (const char* key : {"v", "uuid", "state"}) {
    const json b = before.value(key, json()), a = after.value(key, json());
    if (b != a) return say(std::string(key) + " " + b.dump() + " -> " + a.dump());
  }
  if (Pids(before) != Pids(after)) return say("processes");
  if (Moved(Number(before, "util_p95"), Number(after, "util_p95"), o.util_threshold_percent)) {
    return say("util_p95");
  }
  // Memory thresholds are a share of the GPU's memory: peak + headroom.
  auto total = [](const json& j) -> std::optional<double> {
    auto peak = Number(j, "memory_peak_bytes"), headroom = Number(j, "headroom_bytes");
    if (peak && headroom) return *peak + *headroom;
    return std::nullopt;
  };
  std::optional<double> memory = total(after);
  if (!memory) memory = total(before);
  if (!memory) {
    memory = std::max(Number(after, "memory_peak_bytes").value_or(0),
                      Number(before, "memory_peak_bytes").value_or(0));
  }
  const double memory_threshold = *memory * o.memory_threshold_percent / 100.0;
  for (const char* key : {"memory_peak_bytes", "headroom_bytes"}) {
    if (Moved(Number(before, key), Number(after, key), memory_threshold)) return say(key);
  }
  const auto period = Number(before, "period_s");
  if (Moved(period, Number(after, "period_s"),
            period ? std::fabs(*period) * o.period_threshold_percent / 100.0 : 0)) {
    return say("period_s");
  }
  return false;
}

Result<std::unique_ptr<KubeAnnotationPublisher>> KubeAnnotationPublisher::Create(
    KubeAnnotationOptions options, ProfileSource source, Clock& clock) {
  if (!kube::ValidNodeName(options.node_name)) {
    return InvalidArgument("'" + options.node_name + "' is not a Kubernetes node name");
  }
  if (!source) return InvalidArgument("no profile source");
  FLYT_ASSIGN_OR_RETURN(auto client, kube::Client::Create(options.client));
  return std::unique_ptr<KubeAnnotationPublisher>(
      new KubeAnnotationPublisher(std::move(options), std::move(source), clock, std::move(client)));
}

KubeAnnotationPublisher::KubeAnnotationPublisher(KubeAnnotationOptions options,
                                                 ProfileSource source, Clock& clock,
                                                 std::unique_ptr<kube::Client> client)
    : options_(std::move(options)),
      source_(std::move(source)),
      clock_(clock),
      client_(std::move(client)) {}

KubeAnnotationPublisher::~KubeAnnotationPublisher() { Stop(); }

void KubeAnnotationPublisher::Start() {
  if (started_) return;
  started_ = true;
  spdlog::info(
      "Kubernetes: annotating node {} through {} (flyt.dev/gpu-<index>, at most every {} s)",
      options_.node_name, options_.client.api_server, Seconds(options_.min_interval));
  thread_ = std::thread([this] { Loop(); });
}

void KubeAnnotationPublisher::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    cv_.NotifyAll();
  }
  client_->Cancel();
  if (thread_.joinable()) thread_.join();
}

void KubeAnnotationPublisher::Loop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    lock.Unlock();
    RunOnce();
    lock.Lock();
    if (stopping_) break;
    auto wait = std::chrono::duration_cast<milliseconds>(NextWake() - clock_.SteadyNow());
    wait = std::clamp(wait, milliseconds(50), options_.check_interval);
    cv_.WaitFor(mu_, wait);
  }
}

steady_clock::time_point KubeAnnotationPublisher::NextWake() const {
  auto wake = clock_.SteadyNow() + options_.check_interval;
  if (backoff_.count() > 0) wake = std::min(wake, next_attempt_);
  if (!pending_.empty() && last_patch_) wake = std::min(wake, *last_patch_ + options_.min_interval);
  return wake;
}

void KubeAnnotationPublisher::RunOnce() {
  const auto now = clock_.SteadyNow();
  bool read_due = false;
  {
    MutexLock lock(mu_);
    if (backoff_.count() > 0 && now < next_attempt_) return;
    read_due = !node_read_ || now >= next_node_read_;
  }
  if (read_due && !ReadNode()) return;

  std::map<std::string, json> desired;
  for (const profile::GpuProfile& p : source_()) {
    if (p.index >= kMaxAnnotatedGpus) continue;
    desired[AnnotationKey(p.index)] = profile::AnnotationJson(p);
  }
  json changes = json::object();
  {
    MutexLock lock(mu_);
    for (const auto& [key, annotation] : desired) {
      auto it = published_.find(key);
      std::string why = "new";
      if (it == published_.end() || AnnotationMoved(it->second, annotation, options_, &why)) {
        changes[key] = DumpJson(annotation);
        spdlog::debug("Kubernetes: {} changed ({})", key, why);
      }
    }
    for (const auto& [key, annotation] : published_) {
      if (desired.count(key) == 0) changes[key] = nullptr;  // a GPU this node no longer has
    }
    pending_.clear();
    for (const auto& [key, value] : changes.items()) pending_.push_back(key);
    if (changes.empty()) return;
    if (last_patch_ && now - *last_patch_ < options_.min_interval) return;
  }
  auto answer =
      client_->MergePatchNode(options_.node_name, {{"metadata", {{"annotations", changes}}}});
  MutexLock lock(mu_);
  if (!answer.ok()) {
    RecordFailure("patch", answer.status());
    return;
  }
  RecordSuccess();
  ++patches_;
  last_patch_ = now;
  last_patch_wall_ = clock_.WallNow();
  for (const auto& [key, value] : changes.items()) {
    if (value.is_null()) {
      published_.erase(key);
    } else {
      published_[key] = desired[key];
    }
  }
  pending_.clear();
}

bool KubeAnnotationPublisher::ReadNode() {
  auto node = client_->GetNode(options_.node_name);
  MutexLock lock(mu_);
  if (!node.ok()) {
    RecordFailure("get", node.status());
    return false;
  }
  const json* meta =
      node->is_object() && node->contains("metadata") ? &(*node)["metadata"] : nullptr;
  if (meta == nullptr || !meta->is_object()) {
    RecordFailure("get", Unavailable("GET /api/v1/nodes/" + options_.node_name +
                                     ": the answer is not a Node (no metadata)")
                             .WithReason("bad_response"));
    return false;
  }
  RecordSuccess();
  ++node_reads_;
  node_read_ = true;
  next_node_read_ = clock_.SteadyNow() + options_.node_refresh;
  labels_.clear();
  if (auto it = meta->find("labels"); it != meta->end() && it->is_object()) {
    for (const auto& [key, value] : it->items()) {
      if (StartsWith(key, kGpuLabelPrefix) && value.is_string() && labels_.size() < kMaxLabels) {
        labels_[key] = value.get<std::string>();
      }
    }
  }
  labels_read_at_ = clock_.WallNow();
  published_.clear();
  if (auto it = meta->find("annotations"); it != meta->end() && it->is_object()) {
    for (const auto& [key, value] : it->items()) {
      if (!IsGpuAnnotationKey(key)) continue;
      auto parsed = value.is_string()
                        ? ParseJson(value.get<std::string>(), key, kMaxAnnotationBytes, 8)
                        : Result<json>(InvalidArgument("not a string"));
      published_[key] = parsed.ok() ? *parsed : json();
    }
  }
  return true;
}

void KubeAnnotationPublisher::RecordSuccess() {
  if (consecutive_failures_ > 0) {
    spdlog::info("Kubernetes: the API answers node {} again, after {} failed request{}",
                 options_.node_name, consecutive_failures_, consecutive_failures_ == 1 ? "" : "s");
  }
  consecutive_failures_ = 0;
  backoff_ = milliseconds(0);
  logged_reasons_.clear();
  ever_succeeded_ = true;
}

void KubeAnnotationPublisher::RecordFailure(const std::string& op, const Status& status) {
  const std::string reason = status.reason().empty() ? "http_error" : status.reason();
  if (reason == "cancelled") return;  // Stop(): not a failure of the API
  (op == "patch" ? patch_failures_ : read_failures_)[reason]++;
  ++consecutive_failures_;
  backoff_ = backoff_.count() == 0 ? options_.backoff_initial
                                   : std::min(backoff_ * 2, options_.backoff_max);
  next_attempt_ = clock_.SteadyNow() + backoff_;
  last_error_ = LastError{op, reason, status.message(), clock_.WallNow()};
  if (logged_reasons_.insert(reason).second) {
    spdlog::warn(
        "Kubernetes: {} node {} failed ({}): {} — retrying with backoff up to {} s; "
        "logged once until a request succeeds",
        op == "patch" ? "annotating" : "reading", options_.node_name, reason, status.message(),
        Seconds(options_.backoff_max));
  } else {
    spdlog::debug("Kubernetes: {} failed again ({}): {}", op, reason, status.message());
  }
}

json KubeAnnotationPublisher::DisabledStatusJson(const std::string& reason) {
  return {{"enabled", false}, {"reason", reason}};
}

json KubeAnnotationPublisher::StatusJson() const {
  MutexLock lock(mu_);
  const auto now = clock_.SteadyNow();
  json annotations = json::object();
  for (const auto& [key, value] : published_) annotations[key] = value;
  json labels = json();
  if (labels_read_at_) {
    labels = json::object();
    for (const auto& [key, value] : labels_) labels[key] = value;
  }
  json failures = json::object();
  for (const auto* m : {&patch_failures_, &read_failures_}) {
    for (const auto& [reason, n] : *m) failures[reason] = failures.value(reason, uint64_t{0}) + n;
  }
  json last_error = json();
  if (last_error_) {
    last_error = {{"op", last_error_->op},
                  {"reason", last_error_->reason},
                  {"message", last_error_->message},
                  {"at", FormatTimeRfc3339(last_error_->at)}};
  }
  const char* state = consecutive_failures_ > 0 ? "failing" : ever_succeeded_ ? "ok" : "starting";
  const double next_attempt_s = backoff_.count() > 0 && next_attempt_ > now
                                    ? std::chrono::duration<double>(next_attempt_ - now).count()
                                    : 0.0;
  return {{"enabled", true},
          {"node", options_.node_name},
          {"api_server", options_.client.api_server},
          {"state", state},
          {"labels", labels},
          {"labels_read_at", labels_read_at_ ? json(FormatTimeRfc3339(*labels_read_at_)) : json()},
          {"annotations", annotations},
          {"pending", pending_},
          {"last_patch_at", last_patch_wall_ ? json(FormatTimeRfc3339(*last_patch_wall_)) : json()},
          {"patches_total", patches_},
          {"node_reads_total", node_reads_},
          {"failures_total", failures},
          {"last_error", last_error},
          {"backoff_s", static_cast<double>(backoff_.count()) / 1000.0},
          {"next_attempt_in_s", next_attempt_s},
          {"min_interval_s", static_cast<double>(options_.min_interval.count()) / 1000.0},
          {"thresholds",
           {{"util_percent", options_.util_threshold_percent},
            {"memory_percent", options_.memory_threshold_percent},
            {"period_percent", options_.period_threshold_percent}}}};
}

std::string KubeAnnotationPublisher::MetricsText() const {
  MutexLock lock(mu_);
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  family("flyt_kubernetes_patches_total", "counter",
         "Node annotation patches the Kubernetes API accepted.");
  out += "flyt_kubernetes_patches_total " + std::to_string(patches_) + "\n";
  auto by_reason = [&](const char* name, const std::map<std::string, uint64_t>& counts) {
    for (const std::string& reason : kube::FailureReasons()) {
      if (reason == "cancelled") continue;
      auto it = counts.find(reason);
      out += std::string(name) + "{reason=\"" + reason + "\"} " +
             std::to_string(it == counts.end() ? 0 : it->second) + "\n";
    }
  };
  family("flyt_kubernetes_patch_failures_total", "counter",
         "Node annotation patches that failed, by reason.");
  by_reason("flyt_kubernetes_patch_failures_total", patch_failures_);
  family("flyt_kubernetes_node_read_failures_total", "counter",
         "Reads of this node's Node object that failed, by reason.");
  by_reason("flyt_kubernetes_node_read_failures_total", read_failures_);
  family("flyt_kubernetes_annotations", "gauge",
         "flyt.dev/gpu-* annotations the Node holds, as last read or written.");
  out += "flyt_kubernetes_annotations " + std::to_string(published_.size()) + "\n";
  family("flyt_kubernetes_up", "gauge",
         "1 when the last request to the Kubernetes API succeeded, else 0.");
  out += std::string("flyt_kubernetes_up ") +
         (ever_succeeded_ && consecutive_failures_ == 0 ? "1" : "0") + "\n";
  return out;
}

KubeAnnotationPublisher::Stats KubeAnnotationPublisher::stats() const {
  MutexLock lock(mu_);
  Stats s;
  s.patches = patches_;
  s.node_reads = node_reads_;
  s.patch_failures = patch_failures_;
  s.read_failures = read_failures_;
  s.backoff = backoff_;
  return s;
}

}  // namespace flyt::node
