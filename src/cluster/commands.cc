// The commands of Cluster that change the state on a caller's request: the lease ledger
// (allocate, renew, release) and jobs (submit, cancel, complete); node and client heartbeats and
// node removal are inventory.cc. Each checks its request (common/json_fields.h) before it takes the state lock, then
// changes memory and store together in one WriteLocked transaction. See cluster.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <spdlog/spdlog.h>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "cluster/node_address.h"
#include "common/json.h"
#include "common/json_fields.h"
#include "common/strings.h"
#include "gpu/json.h"
#include "profile/profile.h"
#include "sched/estimate.h"

namespace flyt::cluster {

using internal::GpuKeys;
using internal::IsPlaceholderUuid;
using internal::kGpuClaimedReason;
using internal::kMiB;
using internal::CheckIdempotencyKey;
using internal::CheckOwner;
using internal::Idempotency;
using internal::LabelsField;
using internal::LookUpKey;
using internal::PlacementFields;
using internal::RequestHash;
using nlohmann::json;
using store::Durability;
using store::Table;

namespace {

constexpr size_t kMaxExperimentsPerSubmission = 4096;
constexpr size_t kMaxIdempotencyKeyChars = 255;
constexpr int64_t kMaxTtlSeconds = 30 * 86400;  // leases and job timeouts: at most 30 days

// A placement policy; an empty string leaves the default, as an absent field does.
Status PolicyField(const JsonFields& f, std::string_view key, sched::Policy& out) {
  std::string name;
  if (f.Has(key) && f.OptionalString(key, 0, name).ok()) return Status::Ok();
  FLYT_RETURN_IF_ERROR(f.OptionalEnum(key, {"score", "binpack", "spread"}, name));
  if (auto p = ParsePolicy(name)) out = *p;
  return Status::Ok();
}

// Why a job cannot complete: it has ended already, or it has not started.
Status NotRunning(const Job& job) {
  Status s(StatusCode::kFailedPrecondition,
           "job " + job.id + " is " + JobStateName(job.state) + ", not running");
  return Finished(job.state) ? s.WithReason("already_ended") : s;
}

// The message of a job that no node of the cluster could ever hold.
constexpr const char* kCannotRun = "cannot run in this cluster: ";

// The parameter sections of a task, as the estimator expands them.
constexpr const char* kParameterSections[] = {"parameters", "parallel_config"};

// How many bytes a task expands to: its single-valued parameters once, plus every experiment's
// own values (a value of a list of n, among E experiments, is in E / n of them). nullopt when
// the estimator will refuse the task anyway (too many experiments, not objects).
std::optional<uint64_t> ExpandedBytes(const json& spec, uint64_t& shared, uint64_t& experiments) {
  shared = 0;
  experiments = 1;
  if (!spec.is_object()) return std::nullopt;
  std::vector<std::pair<uint64_t, uint64_t>> dims;  // (values, bytes of all values with key)
  for (const char* section : kParameterSections) {
    auto it = spec.find(section);
    if (it == spec.end()) continue;
    if (!it->is_object()) return std::nullopt;
    for (const auto& [key, value] : it->items()) {
      if (!value.is_array() || value.size() <= 1) {
        shared += key.size() + 4 + value.dump().size();
        continue;
      }
      uint64_t bytes = 0;
      for (const json& v : value) bytes += key.size() + 4 + v.dump().size();
      dims.emplace_back(value.size(), bytes);
      experiments *= value.size();
      if (experiments > kMaxExperimentsPerSubmission) return std::nullopt;
    }
  }
  uint64_t total = shared;
  for (const auto& [n, bytes] : dims) total += bytes * (experiments / n);
  return total;
}

}  // namespace

namespace internal {
// What a caller may touch: admins everything, others only what they own.
Status CheckOwner(const Caller& caller, const std::string& owner, const std::string& what) {
  if (caller.role == Role::kAdmin || caller.name == owner) return Status::Ok();
  return PermissionDenied(what + " belongs to " + (owner.empty() ? "nobody" : owner) + ", not to " +
                          caller.name);
}
// The Idempotency-Key of a request: "" for none; else 1-255 printable ASCII characters.
Status CheckIdempotencyKey(const std::string& key) {
  bool ok = key.size() <= kMaxIdempotencyKeyChars;
  for (char c : key) ok = ok && c >= 0x20 && c <= 0x7e;
  if (ok) return Status::Ok();
  return InvalidArgument("Idempotency-Key must be 1-" + std::to_string(kMaxIdempotencyKeyChars) +
                         " printable ASCII characters");
}

// What tells two requests with one key apart: FNV-1a (64 bits) of the body's canonical JSON
// (nlohmann::json keeps object keys sorted), and its length.
std::string RequestHash(const json& body) {
  const std::string text = DumpJson(body);
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string(hex) + ":" + std::to_string(text.size());
}

// Inside the request's transaction: a key seen before (and not expired) with the same body fills
// `replay` with the first answer; with another body it is a 409.
Status LookUpKey(store::Txn& txn, const Idempotency& idem, int64_t now_ms,
                 std::optional<json>& replay) {
  if (idem.key.empty()) return Status::Ok();
  FLYT_ASSIGN_OR_RETURN(std::optional<store::IdempotencyRecord> rec,
                        txn.GetIdempotency(idem.scope, idem.key));
  if (!rec || rec->expires_ms < now_ms) return Status::Ok();
  if (rec->request_hash != idem.hash) {
    return Status(StatusCode::kAlreadyExists,
                  "Idempotency-Key '" + idem.key +
                      "' was used before with a different request; use a new key for a new "
                      "request")
        .WithReason("idempotency_key_reused");
  }
  json answer = json::parse(rec->response, nullptr, false);
  if (!answer.is_object()) return Internal("the stored answer of Idempotency-Key is unreadable");
  replay = std::move(answer);
  return Status::Ok();
}


Status PlacementFields(const JsonFields& f, bool default_prefer_idle,
                       std::vector<std::string>& avoid_states, bool& prefer_idle) {
  prefer_idle = default_prefer_idle;
  FLYT_RETURN_IF_ERROR(f.OptionalBool("prefer_idle", prefer_idle));
  const json* list = nullptr;
  // A few more than there are states: a list that names one twice is still fine.
  FLYT_RETURN_IF_ERROR(f.OptionalArray("avoid_states", 4 * profile::AllStates().size(), list));
  avoid_states.clear();
  if (list == nullptr) return Status::Ok();
  std::string names;
  for (profile::State s : profile::AllStates()) {
    names += (names.empty() ? "" : ", ") + std::string(profile::StateName(s));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    const json& v = (*list)[i];
    const std::string field = f.Name("avoid_states") + "[" + std::to_string(i) + "]";
    if (!v.is_string()) return InvalidArgument(field + " must be a state name (" + names + ")");
    const auto state = profile::StateFromName(v.get_ref<const std::string&>());
    if (!state) {
      return InvalidArgument(field + ": unknown state \"" + SanitizeUtf8(v.get<std::string>().substr(0, 64)) +
                             "\" (expected one of " + names + ")");
    }
    const std::string name = profile::StateName(*state);
    if (std::find(avoid_states.begin(), avoid_states.end(), name) == avoid_states.end()) {
      avoid_states.push_back(name);
    }
  }
  return Status::Ok();
}

Status LabelsField(const JsonFields& f, std::string_view key,
                   std::map<std::string, std::string>& out) {
  return f.OptionalStringMap(key, 64, 128, 1024, out);
}

}  // namespace internal

// ---- the ledger ------------------------------------------------------------------------------

Result<json> Cluster::Allocate(const Caller& caller, const json& body,
                               const std::string& idempotency_key) {
  FLYT_RETURN_IF_ERROR(CheckIdempotencyKey(idempotency_key));
  const Idempotency idem{"allocations:" + caller.name, idempotency_key,
                         idempotency_key.empty() ? "" : RequestHash(body)};
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(
      b.Only({"gpus", "min_free_memory_mb", "max_utilization", "same_node", "gpu_model", "policy",
              "exclusive", "ttl_seconds", "owner", "labels", "avoid_states", "prefer_idle"}));
  sched::AllocationRequest req;
  int64_t gpus = 1, ttl = config_.default_lease_ttl.count(), max_util = 100;
  double min_free_mb = 0;
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("gpus", 1, 64, gpus));
  FLYT_RETURN_IF_ERROR(b.OptionalNumber("min_free_memory_mb", 0, 1e8, min_free_mb));
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("max_utilization", 0, 100, max_util));
  FLYT_RETURN_IF_ERROR(b.OptionalBool("same_node", req.same_node));
  FLYT_RETURN_IF_ERROR(b.OptionalString("gpu_model", 64, req.gpu_model));
  FLYT_RETURN_IF_ERROR(PolicyField(b, "policy", req.policy));
  FLYT_RETURN_IF_ERROR(b.OptionalBool("exclusive", req.exclusive));
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("ttl_seconds", 1, kMaxTtlSeconds, ttl));
  FLYT_RETURN_IF_ERROR(LabelsField(b, "labels", req.labels));
  FLYT_RETURN_IF_ERROR(
      PlacementFields(b, config_.prefer_idle, req.avoid_states, req.prefer_idle));
  req.owner = caller.name;
  FLYT_RETURN_IF_ERROR(b.OptionalString("owner", 128, req.owner));
  if (req.owner != caller.name && caller.role != Role::kAdmin) {
    return PermissionDenied("only an admin may allocate for another owner");
  }
  req.gpus = static_cast<int>(gpus);
  req.max_utilization_percent = static_cast<uint32_t>(max_util);
  req.min_free_memory_bytes = static_cast<uint64_t>(min_free_mb * kMiB);
  req.ttl = std::chrono::seconds(ttl);

  MutexLock lock(mu_);
  req.id = NewId("lease");
  json out;
  std::optional<json> replay;
  const auto now = clock_.WallNow();
  Status refusal;  // a refusal that still commits the expiry run before it
  Status s = WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
    FLYT_RETURN_IF_ERROR(LookUpKey(txn, idem, ToMillis(now), replay));
    if (replay) return Status::Ok();
    // A lease past its expiry no longer holds its GPUs in the ledger, but its claim is still in
    // the store until expiry runs: run it first, so those GPUs can be granted now.
    bool expired = false;
    FLYT_RETURN_IF_ERROR(ExpireLocked(txn, expired));
    Result<sched::Lease> granted = ledger_->Allocate(req);
    if (!granted.ok()) {
      const Status& refused = granted.status();
      if (refused.code() != StatusCode::kResourceExhausted) return refused;
      // Busy GPUs may be released; a request no node could ever hold waits in vain.
      const std::string never = NeverFitsLocked(req);
      refusal = never.empty()
                    ? refused.WithReason("insufficient_gpus")
                    : Status(refused.code(), refused.message() +
                                                 " (it can never be met in this cluster: " +
                                                 never + ")")
                          .WithReason("never_fits");
      // Leases the expiry above dropped from memory are dropped from the store too.
      return expired ? Status::Ok() : refusal;
    }
    sched::Lease& lease = *granted;
    FLYT_RETURN_IF_ERROR(txn.ClaimGpus(lease.id, GpuKeys(lease), lease.exclusive));
    out = ToJson(lease);
    FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, lease.id, DumpJson(out)));
    json event = out;
    event["message"] = "lease " + lease.id + " granted to " + lease.owner + ": " +
                       std::to_string(lease.gpus.size()) + " GPU(s) on " +
                       out["node"].get<std::string>();
    if (!idem.key.empty()) {
      FLYT_RETURN_IF_ERROR(txn.PutIdempotency(
          idem.scope, idem.key,
          {idem.hash, DumpJson(out), ToMillis(now + config_.idempotency_keep_for)}));
    }
    return Event(txn, "lease.granted", event);
  });
  if (s.ok() && !refusal.ok()) s = refusal;
  if (!s.ok()) {
    if (s.code() == StatusCode::kResourceExhausted) ++counters_.allocations_refused;
    return s;
  }
  if (replay) {
    ++counters_.idempotent_replays;
    json again = std::move(*replay);
    again["replayed"] = true;
    const std::string id = again.value("id", std::string());
    if (!ledger_->Find(id)) again["lease_ended"] = true;
    return again;
  }
  ++counters_.allocations_granted;
  return out;
}

Status Cluster::LeaseGoneLocked(const std::string& id) const {
  Status gone = NotFound("no lease " + id + " (released, or expired)");
  bool ended = ended_leases_.count(id) > 0;
  // A job's lease ends with its job (kept for as long as the job is).
  if (auto jl = job_of_lease_.find(id); !ended && jl != job_of_lease_.end()) {
    auto job = jobs_.find(jl->second);
    ended = job != jobs_.end() && Finished(job->second.state);
  }
  return ended ? gone.WithReason("already_ended") : gone;
}

Result<json> Cluster::Renew(const Caller& caller, const std::string& id, const json& body) {
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"ttl_seconds"}));
  std::optional<std::chrono::seconds> ttl;
  if (b.Has("ttl_seconds")) {
    FLYT_ASSIGN_OR_RETURN(int64_t v, b.RequiredInt<int64_t>("ttl_seconds", 1, kMaxTtlSeconds));
    ttl = std::chrono::seconds(v);
  }
  MutexLock lock(mu_);
  json out;
  FLYT_RETURN_IF_ERROR(
      WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
        auto existing = ledger_->Find(id);
        if (!existing) return LeaseGoneLocked(id);
        FLYT_RETURN_IF_ERROR(CheckOwner(caller, existing->owner, "lease " + id));
        if (existing->remote) {
          // Its state (a failed server) and TTL bounds are the remote lease API's.
          return InvalidArgument("lease " + id + " is a remote lease: renew it with POST "
                                 "/api/v1/remote-leases/" + id + "/renew");
        }
        Result<sched::Lease> renewed = ledger_->Renew(id, ttl);
        if (!renewed.ok()) {
          // The ledger still held it, so it existed: NotFound here means its TTL ran out.
          const Status& s = renewed.status();
          return s.code() == StatusCode::kNotFound ? s.WithReason("already_ended") : s;
        }
        const sched::Lease& lease = *renewed;
        out = ToJson(lease);
        FLYT_RETURN_IF_ERROR(txn.Put(Table::kLeases, lease.id, DumpJson(out)));
        return Event(txn, "lease.renewed",
                     {{"lease_id", id},
                      {"expires_at", out["expires_at"]},
                      {"message",
                       "lease " + id + " renewed until " + out["expires_at"].get<std::string>()}});
      }));
  return out;
}

Status Cluster::FinishJobOfLeaseLocked(store::Txn& txn, const std::string& lease_id, JobState state,
                                       const std::string& message) {
  auto jl = job_of_lease_.find(lease_id);
  if (jl == job_of_lease_.end()) return Status::Ok();
  auto it = jobs_.find(jl->second);
  if (it == jobs_.end() || it->second.state != JobState::kRunning) return Status::Ok();
  Job& job = it->second;
  job.state = state;
  job.message = message;
  job.finished_at = clock_.WallNow();
  FLYT_RETURN_IF_ERROR(PutJob(txn, job));
  FLYT_RETURN_IF_ERROR(
      Event(txn, std::string("job.") + JobStateName(state),
            {{"job_id", job.id},
             {"task_name", job.task_name},
             {"message", "job " + job.id + " " + JobStateName(state) + ": " + message}}));
  if (!job.monitoring_session.empty()) worker_.CloseSession(job.id);
  return Status::Ok();
}

Status Cluster::Release(const Caller& caller, const std::string& id) {
  {
    // A remote lease released here is released as DELETE /api/v1/remote-leases/{id} does it
    // (its node drains the server).
    MutexLock lock(mu_);
    auto existing = ledger_->Find(id);
    if (existing && existing->remote) {
      lock.Unlock();
      return ReleaseRemoteLease(caller, id).status();
    }
  }
  MutexLock lock(mu_);
  FLYT_RETURN_IF_ERROR(
      WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
        auto existing = ledger_->Find(id);
        if (!existing) return LeaseGoneLocked(id);
        FLYT_RETURN_IF_ERROR(CheckOwner(caller, existing->owner, "lease " + id));
        FLYT_RETURN_IF_ERROR(ledger_->Release(id));
        FLYT_RETURN_IF_ERROR(txn.Delete(Table::kLeases, id));
        FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(id));
        FLYT_RETURN_IF_ERROR(Event(txn, "lease.released",
                                   {{"lease_id", id},
                                    {"owner", existing->owner},
                                    {"message", "lease " + id + " released by " + caller.name}}));
        return FinishJobOfLeaseLocked(txn, id, JobState::kCompleted, "its lease was released");
      }));
  Wake(/*strong=*/true);
  return Status::Ok();
}

// ---- jobs ------------------------------------------------------------------------------------

std::string Cluster::NeverFitsLocked(const sched::AllocationRequest& r) const {
  if (nodes_.empty()) return "";  // nothing known yet: the job waits for nodes to register
  uint64_t largest_gpu = 0;
  size_t most_on_node = 0, total = 0;
  for (const auto& [name, node] : nodes_) {
    size_t fitting = 0;
    for (const gpu::GpuInfo& g : node.snapshot.gpus) {
      if (!r.gpu_model.empty() && g.name.find(r.gpu_model) == std::string::npos) continue;
      const uint64_t mem = g.memory_total_bytes.value_or(0);
      const uint64_t need =
          std::max<uint64_t>(r.min_free_memory_bytes,
                             static_cast<uint64_t>(r.min_free_fraction * static_cast<double>(mem)));
      largest_gpu = std::max(largest_gpu, mem);
      if (mem >= need && mem > 0) ++fitting;
    }
    most_on_node = std::max(most_on_node, fitting);
    total += fitting;
  }
  const size_t want = static_cast<size_t>(r.gpus);
  const std::string model = r.gpu_model.empty() ? "" : " " + r.gpu_model;
  if (total == 0) {
    return "needs " + std::to_string(r.min_free_memory_bytes / kMiB) + " MiB free per GPU; the" +
           " largest" + model + " GPU in the cluster has " + std::to_string(largest_gpu / kMiB) +
           " MiB";
  }
  if (r.same_node && most_on_node < want) {
    return "needs " + std::to_string(want) + model + " GPU(s) on one node that can hold it; the" +
           " most on any node is " + std::to_string(most_on_node);
  }
  if (total < want) {
    return "needs " + std::to_string(want) + model + " GPU(s) that can hold it; the cluster has " +
           std::to_string(total);
  }
  return "";
}

Result<json> Cluster::Submit(const Caller& caller, const json& task,
                             const std::string& idempotency_key) {
  FLYT_RETURN_IF_ERROR(CheckIdempotencyKey(idempotency_key));
  const Idempotency idem{"jobs:" + caller.name, idempotency_key,
                         idempotency_key.empty() ? "" : RequestHash(task)};
  // The scheduling section is the manager's; the rest of the task is the estimator's.
  FLYT_ASSIGN_OR_RETURN(const JsonFields b, JsonFields(task).OptionalFields("scheduling"));
  json spec = task;
  if (spec.is_object()) spec.erase("scheduling");
  FLYT_RETURN_IF_ERROR(b.Only({"priority", "timeout_seconds", "gpu_model", "policy",
                               "lease_ttl_seconds", "max_utilization", "owner", "avoid_states",
                               "prefer_idle"}));
  int64_t priority = 0, timeout = config_.job_timeout.count(),
          lease_ttl = config_.job_lease_ttl.count(), max_util = 100;
  std::string gpu_model, owner = caller.name;
  // Jobs pack by default: spreading them leaves no whole node free for the next 8-GPU experiment
  // (docs/benchmarks.md measures the difference).
  sched::Policy policy = sched::Policy::kBinpack;
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("priority", -1000, 1000, priority));
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("timeout_seconds", 1, kMaxTtlSeconds, timeout));
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("lease_ttl_seconds", 1, kMaxTtlSeconds, lease_ttl));
  FLYT_RETURN_IF_ERROR(b.OptionalInt<int64_t>("max_utilization", 0, 100, max_util));
  FLYT_RETURN_IF_ERROR(b.OptionalString("gpu_model", 64, gpu_model));
  FLYT_RETURN_IF_ERROR(PolicyField(b, "policy", policy));
  FLYT_RETURN_IF_ERROR(b.OptionalString("owner", 128, owner));
  // Resolved now and stored with each job: a restart, another replica or a changed [ledger]
  // prefer_idle places it as it was submitted.
  std::vector<std::string> avoid_states;
  bool prefer_idle = config_.prefer_idle;
  FLYT_RETURN_IF_ERROR(PlacementFields(b, config_.prefer_idle, avoid_states, prefer_idle));
  if (owner != caller.name && caller.role != Role::kAdmin) {
    return PermissionDenied("only an admin may submit for another owner");
  }
  // The expansion is bounded before it is made: experiments × their own bytes, shared once.
  uint64_t shared_bytes = 0, experiments = 1;
  if (auto expanded = ExpandedBytes(spec, shared_bytes, experiments);
      expanded && *expanded > config_.max_expanded_bytes) {
    {
      MutexLock lock(mu_);
      ++counters_.submissions_too_large;
    }
    return Status(StatusCode::kInvalidArgument,
                  "the task expands to " + std::to_string(experiments) + " experiment(s) and " +
                      std::to_string(*expanded) + " bytes of parameters (" +
                      std::to_string(shared_bytes) + " shared, " +
                      std::to_string(*expanded - shared_bytes) +
                      " of the experiments' own values), over the limit of " +
                      std::to_string(config_.max_expanded_bytes) +
                      " bytes ([jobs] max_expanded_bytes); make the lists shorter or their "
                      "values smaller")
        .WithReason("payload_too_large");
  }
  sched::EstimateOptions options;
  options.allow_local_files = false;
  options.max_experiments = kMaxExperimentsPerSubmission;
  options.experiments_hold_shared = false;
  FLYT_ASSIGN_OR_RETURN(sched::TaskEstimate estimate, sched::EstimateTask(spec, options));
  json estimate_json = sched::ToJson(estimate);

  MutexLock lock(mu_);
  const std::string submission = NewId("sub");
  const auto now = clock_.WallNow();
  TaskRecord task_record;
  task_record.id = submission;
  task_record.task_name = estimate.task_name;
  task_record.owner = owner;
  task_record.experiments = estimate.experiments.size();
  task_record.shared_parameters = estimate.shared_parameters;
  task_record.submitted_at = now;
  task_record.shared_bytes = task_record.shared_parameters.dump().size();
  std::vector<Job> created;
  created.reserve(estimate.experiments.size());
  for (sched::Experiment& e : estimate.experiments) {
    Job job;
    job.id = NewId("job");
    job.submission = submission;
    job.task_id = submission;
    job.task_name = estimate.task_name;
    job.model = estimate.model;
    job.runtime = estimate.runtime;
    job.experiment = e.index;
    job.experiments = estimate.experiments.size();
    job.parameters = std::move(e.parameters);
    job.estimate = std::move(estimate_json["experiments"][e.index]);
    job.estimate.erase("parameters");  // the job's own (and its task's): not a third copy
    job.estimate["model_source"] = estimate.model_source;
    job.owner = owner;
    job.priority = static_cast<int>(priority);
    job.timeout = std::chrono::seconds(timeout);
    job.submitted_at = now;
    job.request.gpus = e.gpus;
    job.request.min_free_memory_bytes =
        static_cast<uint64_t>(std::ceil(e.min_free_memory_mib)) * kMiB;
    job.request.max_utilization_percent = static_cast<uint32_t>(max_util);
    job.request.gpu_model = gpu_model;
    job.request.policy = policy;
    job.request.avoid_states = avoid_states;
    job.request.prefer_idle = prefer_idle;
    job.request.exclusive = true;
    job.request.ttl = std::chrono::seconds(lease_ttl);
    job.request.owner = owner;
    job.request.id = NewId("lease");
    if (estimate.runtime == "vllm") job.request.min_free_fraction = e.free_fraction;
    if (estimate.runtime == "sglang") job.request.max_free_spread = 0.10;
    job.message = "waiting for the scheduler";
    created.push_back(std::move(job));
  }
  json out;
  std::optional<json> replay;
  FLYT_RETURN_IF_ERROR(
      WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
        FLYT_RETURN_IF_ERROR(LookUpKey(txn, idem, ToMillis(now), replay));
        if (replay) return Status::Ok();
        // An experiment no node of the cluster could ever hold fails now, not after its timeout.
        size_t adding = 0;
        for (Job& job : created) {
          const std::string why = NeverFitsLocked(job.request);
          if (why.empty()) {
            ++adding;
            continue;
          }
          job.state = JobState::kFailed;
          job.finished_at = now;
          job.message = std::string(kCannotRun) + why;
        }
        // One owner may have only so many experiments waiting; the whole submission or nothing.
        if (config_.max_queued_per_owner > 0 && adding > 0) {
          size_t queued = 0;
          for (const auto& [id, job] : jobs_) {
            if (job.state == JobState::kQueued && job.owner == owner) ++queued;
          }
          if (queued + adding > config_.max_queued_per_owner) {
            return Status(StatusCode::kResourceExhausted,
                          owner + " has " + std::to_string(queued) +
                              " experiment(s) queued and this submission adds " +
                              std::to_string(adding) + ", over the limit of " +
                              std::to_string(config_.max_queued_per_owner) +
                              " per owner ([jobs] max_queued_per_owner); wait for some to "
                              "start or cancel some")
                .WithReason("too_many_queued");
          }
        }
        // Every row first, memory after: a write that fails leaves memory as it was (and
        // WriteLocked reloads it should anything have run ahead).
        FLYT_RETURN_IF_ERROR(txn.Put(Table::kTasks, submission, DumpJson(ToJson(task_record))));
        // FIFO across replicas: the revision this transaction commits orders the submission.
        const int64_t base = (txn.Revision() + 1) << 20;
        for (Job& job : created) {
          job.order = base + static_cast<int64_t>(job.experiment);
          FLYT_RETURN_IF_ERROR(PutJob(txn, job));
        }
        FLYT_RETURN_IF_ERROR(
            Event(txn, "job.submitted",
                  {{"submission", submission},
                   {"task_name", estimate.task_name},
                   {"jobs", created.size()},
                   {"message", "task " + estimate.task_name + " submitted by " + owner + ": " +
                                   std::to_string(created.size()) + " experiment(s)"}}));
        json jobs = json::array();
        size_t failed = 0;
        for (const Job& job : created) {
          json entry = {{"id", job.id},
                        {"experiment", job.experiment},
                        {"parameters", job.parameters},
                        {"gpus", job.request.gpus},
                        {"min_free_memory_mb", job.request.min_free_memory_bytes / kMiB},
                        {"status", JobStateName(job.state)}};
          if (job.state == JobState::kFailed) {
            ++failed;
            entry["message"] = job.message;
            if (StartsWith(job.message, kCannotRun)) entry["code"] = "never_fits";
            FLYT_RETURN_IF_ERROR(
                Event(txn, "job.failed",
                      {{"job_id", job.id}, {"message", "job " + job.id + " " + job.message}}));
          }
          jobs.push_back(std::move(entry));
        }
        out = {{"submission", submission},
               {"task_id", submission},
               {"task_name", estimate.task_name},
               {"model_source", estimate.model_source},
               {"experiments", created.size()},
               {"queued", created.size() - failed},
               {"failed", failed},
               {"parameters", task_record.shared_parameters},
               {"jobs", std::move(jobs)}};
        if (!idem.key.empty()) {
          FLYT_RETURN_IF_ERROR(txn.PutIdempotency(
              idem.scope, idem.key,
              {idem.hash, DumpJson(out), ToMillis(now + config_.idempotency_keep_for)}));
        }
        tasks_[submission] = task_record;
        for (Job& job : created) ApplyJobLocked(std::move(job));
        return Status::Ok();
      }));
  if (replay) {
    ++counters_.idempotent_replays;
    (*replay)["replayed"] = true;
    return std::move(*replay);
  }
  Wake(/*strong=*/true);
  return out;
}

Result<json> Cluster::Cancel(const Caller& caller, const std::string& id) {
  MutexLock lock(mu_);
  json out;
  FLYT_RETURN_IF_ERROR(
      WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
        auto it = jobs_.find(id);
        if (it == jobs_.end()) return NotFound("no job " + id);
        Job& job = it->second;
        FLYT_RETURN_IF_ERROR(CheckOwner(caller, job.owner, "job " + id));
        if (Finished(job.state)) {
          return Status(StatusCode::kFailedPrecondition,
                        "job " + id + " has already ended (" + JobStateName(job.state) + ")")
              .WithReason("already_ended");
        }
        if (job.state == JobState::kQueued) {
          queue_.Remove(id);
          job.state = JobState::kCancelled;
          job.message = "cancelled by " + caller.name + " while queued";
          job.finished_at = clock_.WallNow();
          FLYT_RETURN_IF_ERROR(PutJob(txn, job));
          FLYT_RETURN_IF_ERROR(
              Event(txn, "job.cancelled",
                    {{"job_id", id}, {"message", "job " + id + " " + job.message}}));
        } else {
          const std::string lease = job.lease_id;
          if (ledger_->Release(lease).ok()) {
            FLYT_RETURN_IF_ERROR(txn.Delete(Table::kLeases, lease));
            FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(lease));
          }
          FLYT_RETURN_IF_ERROR(FinishJobOfLeaseLocked(txn, lease, JobState::kCancelled,
                                                      "cancelled by " + caller.name));
        }
        out = ToJson(job);
        return Status::Ok();
      }));
  Wake(/*strong=*/true);
  return out;
}

Result<json> Cluster::Complete(const Caller& caller, const std::string& id, const json& body) {
  JsonFields b(body);
  FLYT_RETURN_IF_ERROR(b.Only({"status", "message", "metrics"}));
  std::string status = "completed", message;
  FLYT_RETURN_IF_ERROR(b.OptionalEnum("status", {"completed", "failed"}, status));
  FLYT_RETURN_IF_ERROR(b.OptionalString("message", 4096, message));
  json extra = json::object();
  const json* metrics = nullptr;
  FLYT_RETURN_IF_ERROR(b.OptionalObject("metrics", metrics));
  if (metrics) {
    extra = *metrics;
    extra.erase("gpu_monitoring");  // flyt's own measurement; not the caller's to set
  }
  // Close the node's monitoring session first, without holding the lock across the call.
  std::string url, session;
  {
    MutexLock lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job " + id);
    FLYT_RETURN_IF_ERROR(CheckOwner(caller, it->second.owner, "job " + id));
    if (it->second.state != JobState::kRunning) return NotRunning(it->second);
    session = it->second.monitoring_session;
    const std::string node = it->second.gpu_info.value("node", std::string());
    if (nodes_.count(node)) url = nodes_.at(node).api_url;
  }
  json monitoring = nullptr;
  std::string monitoring_error;
  if (!session.empty() && !url.empty()) {
    Result<json> stats = worker_.DeleteSession(url, session);
    if (stats.ok()) {
      monitoring = std::move(*stats);
    } else {
      monitoring_error = stats.status().message();
    }
  }
  std::function<void()> hook;
  {
    MutexLock lock(mu_);
    hook = complete_hook_;
  }
  if (hook) hook();
  MutexLock lock(mu_);
  json out;
  FLYT_RETURN_IF_ERROR(
      WriteLocked(Durability::kDurable, [&](store::Txn& txn) FLYT_REQUIRES(mu_) -> Status {
        auto it = jobs_.find(id);
        if (it == jobs_.end()) return NotFound("no job " + id);
        Job& job = it->second;
        if (job.state != JobState::kRunning) return NotRunning(job);
        for (const auto& [k, v] : extra.items()) job.metrics[k] = v;
        if (monitoring.is_object()) {
          monitoring.erase("id");
          job.metrics["gpu_monitoring"] = monitoring;
        } else if (!monitoring.is_null()) {
          job.metrics["gpu_monitoring_error"] =
              "the node answered with something other than session stats";
        }
        if (!monitoring_error.empty()) job.metrics["gpu_monitoring_error"] = monitoring_error;
        // A session the node worker recorded after the one closed above (it was being opened
        // meanwhile) stays, so that ending the job closes it too; otherwise it would stay open
        // on the node.
        if (job.monitoring_session == session) job.monitoring_session.clear();
        const std::string lease = job.lease_id;
        if (ledger_->Release(lease).ok()) {
          FLYT_RETURN_IF_ERROR(txn.Delete(Table::kLeases, lease));
          FLYT_RETURN_IF_ERROR(txn.ReleaseGpus(lease));
        }
        FLYT_RETURN_IF_ERROR(FinishJobOfLeaseLocked(
            txn, lease, status == "completed" ? JobState::kCompleted : JobState::kFailed,
            message.empty() ? "reported " + status + " by " + caller.name : message));
        out = ToJson(job);
        out.erase("lease_id_planned");
        return Status::Ok();
      }));
  Wake(/*strong=*/true);
  return out;
}

}  // namespace flyt::cluster
