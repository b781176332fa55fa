// KubeAnnotationPublisher: writes each GPU's usage profile onto this node's Kubernetes Node object
// as one annotation per GPU, `flyt.dev/gpu-<index>` = the compact JSON of
// profile::AnnotationJson, so that schedulers and people (`kubectl describe node`) see what each
// GPU is doing without reaching the node manager.
//
// Writes are JSON merge patches ({"metadata":{"annotations":{...}}}) on the node's own Node
// (PATCH /api/v1/nodes/{node}) and carry only the keys that changed: a GPU whose state (or UUID,
// or set of processes) changed, or one of whose values moved past its threshold — util p95 by
// util_threshold_percent points, the memory peak or headroom by memory_threshold_percent of the
// GPU's memory, the cycle period by period_threshold_percent of itself; the key of a GPU that is
// gone is set to null (removed). At most one patch per min_interval, so a state change waits at
// most that long. Small moves are not written at all (a value that creeps is written once its
// total move passes the threshold, compared with what the node holds).
//
// The Node is read (GET) before the first patch and every 10 minutes: NVIDIA GPU feature
// discovery's labels (nvidia.com/gpu.*: product, memory, count, ...) are kept for the status, not
// written again, and what the Node holds of flyt.dev/gpu-* is the base of the diff — so stale keys
// of GPUs this node no longer has are removed, and an annotation someone deleted is restored.
//
// A failed request (kube::Client's reasons: unauthorized, forbidden, conflict, invalid,
// server_error, timeout, tls, connection, ...) is logged once per reason until a request
// succeeds again, counted by reason, and retried with exponential backoff (1 s doubling to 5 min).
// Nothing else waits for it: it runs on its own thread, reads profiles through the given source,
// and Stop() cancels a request in flight and joins.
//
// Thread-safety: Start/Stop from one thread; StatusJson, MetricsText and stats from any thread;
// RunOnce (the loop's step, public for tests with a FakeClock) only from one thread at a time and
// not while started.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "kube/client.h"
#include "node/config.h"
#include "profile/profile.h"

namespace flyt::node {

inline constexpr const char* kAnnotationPrefix = "flyt.dev/gpu-";
// The GPUs a node annotates at most (a key per GPU; profiles of higher indexes are not written).
inline constexpr size_t kMaxAnnotatedGpus = 64;

// "flyt.dev/gpu-<index>".
std::string AnnotationKey(uint32_t index);

// The settings the publisher runs with ([kubernetes] resolved against the environment).
struct KubeAnnotationOptions {
  std::string node_name;
  kube::ClientOptions client;
  std::chrono::milliseconds min_interval{30000};
  double util_threshold_percent = 10;
  double memory_threshold_percent = 5;
  double period_threshold_percent = 10;
  // Not in the config file:
  std::chrono::milliseconds check_interval{5000};   // how often profiles are compared
  std::chrono::milliseconds node_refresh{600000};   // how often the Node is read again
  std::chrono::milliseconds backoff_initial{1000};  // after the first failure; doubles
  std::chrono::milliseconds backoff_max{300000};
};

// Reads an environment variable; std::nullopt when unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
std::optional<std::string> ProcessEnv(const std::string& name);

struct KubernetesResolution {
  std::optional<KubeAnnotationOptions> options;  // set: publish with these
  std::string off_reason;                        // otherwise, why not (for one log line)
  // The node looks like part of a cluster but something is missing (e.g. no node name): worth a
  // warning rather than an info line.
  bool misconfigured = false;
};

// Resolves [kubernetes]: node_name defaults to $NODE_NAME, api_server to
// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, and the token and CA files must
// exist. enabled = "auto": off (with the reason) when any of that is missing — outside a cluster,
// quietly; enabled = true: the same is a start-up error naming what is missing; false: off.
Result<KubernetesResolution> ResolveKubernetes(const KubernetesConfig& config,
                                               const EnvLookup& env = ProcessEnv);

// Whether the node's annotation `before` should be rewritten as `after` (both AnnotationJson
// forms): a different state, UUID, schema or set of process ids, or a value past its threshold.
// `why` (optional) says what moved.
bool AnnotationMoved(const nlohmann::json& before, const nlohmann::json& after,
                     const KubeAnnotationOptions& options, std::string* why = nullptr);

class KubeAnnotationPublisher {
 public:
  using ProfileSource = std::function<std::vector<profile::GpuProfile>()>;

  // `source` is called on the publisher's thread every check_interval. `clock` must outlive it.
  static Result<std::unique_ptr<KubeAnnotationPublisher>> Create(
      KubeAnnotationOptions options, ProfileSource source, Clock& clock = SystemClock::Instance());
  ~KubeAnnotationPublisher();  // Stop()
  KubeAnnotationPublisher(const KubeAnnotationPublisher&) = delete;
  KubeAnnotationPublisher& operator=(const KubeAnnotationPublisher&) = delete;

  void Start();
  // Cancels a request in flight and joins the thread; idempotent. The publisher cannot be
  // started again.
  void Stop();

  // One round: reads the Node when due, compares the profiles with what the Node holds, patches
  // when something moved and min_interval has passed; nothing while backing off.
  void RunOnce();

  // For GET /api/v1/kubernetes:
  // {"enabled": true, "node", "api_server", "state": "starting"|"ok"|"failing",
  //  "labels": {"nvidia.com/gpu.product": ...} | null (Node not read yet), "labels_read_at",
  //  "annotations": {key: parsed annotation, as the Node holds them}, "pending": [keys waiting],
  //  "last_patch_at": null|time, "patches_total", "node_reads_total",
  //  "failures_total": {reason: n} (GET and PATCH), "last_error": null | {"op", "reason",
  //  "message", "at"}, "backoff_s", "next_attempt_in_s",
  //  "min_interval_s", "thresholds": {"util_percent", "memory_percent", "period_percent"}}
  nlohmann::json StatusJson() const;
  // {"enabled": false, "reason": reason} for a node manager without a publisher.
  static nlohmann::json DisabledStatusJson(const std::string& reason);

  // Prometheus text (HELP/TYPE and samples) for /metrics: flyt_kubernetes_patches_total,
  // flyt_kubernetes_patch_failures_total{reason} and
  // flyt_kubernetes_node_read_failures_total{reason} (every reason, 0 until seen),
  // flyt_kubernetes_annotations (keys the Node holds), flyt_kubernetes_up (1 while the last request
  // succeeded).
  std::string MetricsText() const;

  struct Stats {
    uint64_t patches = 0;
    uint64_t node_reads = 0;
    std::map<std::string, uint64_t> patch_failures;  // by reason
    std::map<std::string, uint64_t> read_failures;
    std::chrono::milliseconds backoff{0};  // the current one; 0 when not failing
  };
  Stats stats() const;

 private:
  KubeAnnotationPublisher(KubeAnnotationOptions options, ProfileSource source, Clock& clock,
                          std::unique_ptr<kube::Client> client);
  void Loop();
  // Reads the Node; false when it failed (recorded).
  bool ReadNode();
  void RecordSuccess() FLYT_REQUIRES(mu_);
  void RecordFailure(const std::string& op, const Status& status) FLYT_REQUIRES(mu_);
  std::chrono::steady_clock::time_point NextWake() const FLYT_REQUIRES(mu_);

  const KubeAnnotationOptions options_;
  const ProfileSource source_;
  Clock& clock_;
  const std::unique_ptr<kube::Client> client_;

  mutable Mutex mu_;
  CondVar cv_;
  bool started_ = false;
  bool stopping_ FLYT_GUARDED_BY(mu_) = false;
  std::thread thread_;

  bool node_read_ FLYT_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point next_node_read_ FLYT_GUARDED_BY(mu_);
  // What the Node holds of flyt.dev/gpu-*: key -> the annotation parsed (null when it is not
  // valid JSON: then it is rewritten).
  std::map<std::string, nlohmann::json> published_ FLYT_GUARDED_BY(mu_);
  std::map<std::string, std::string> labels_ FLYT_GUARDED_BY(mu_);
  std::optional<std::chrono::system_clock::time_point> labels_read_at_ FLYT_GUARDED_BY(mu_);
  std::optional<std::chrono::steady_clock::time_point> last_patch_ FLYT_GUARDED_BY(mu_);
  std::optional<std::chrono::system_clock::time_point> last_patch_wall_ FLYT_GUARDED_BY(mu_);
  std::vector<std::string> pending_ FLYT_GUARDED_BY(mu_);
  std::chrono::milliseconds backoff_ FLYT_GUARDED_BY(mu_){0};
  std::chrono::steady_clock::time_point next_attempt_ FLYT_GUARDED_BY(mu_);
  std::set<std::string> logged_reasons_ FLYT_GUARDED_BY(mu_);  // since the last success
  uint64_t consecutive_failures_ FLYT_GUARDED_BY(mu_) = 0;
  struct LastError {
    std::string op, reason, message;
    std::chrono::system_clock::time_point at;
  };
  std::optional<LastError> last_error_ FLYT_GUARDED_BY(mu_);
  bool ever_succeeded_ FLYT_GUARDED_BY(mu_) = false;
  uint64_t patches_ FLYT_GUARDED_BY(mu_) = 0;
  uint64_t node_reads_ FLYT_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> patch_failures_ FLYT_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> read_failures_ FLYT_GUARDED_BY(mu_);
};

}  // namespace flyt::node
