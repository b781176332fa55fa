#include "sched/ledger.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

namespace flyt::sched {
namespace {

struct Candidate {
  const std::string* node;  // the ledger's own key: no copy per GPU
  const GpuState* gpu;
  double score;
  uint64_t free_bytes;  // after what shared leases reserve
  uint64_t need_bytes;  // what this request reserves on it
  bool idle;            // its profile state is "idle" (prefer_idle ranks these first)
};

// The order of candidates: with prefer_idle, idle GPUs first; then the better score; then the
// lower index.
bool Better(const Candidate& a, const Candidate& b, bool prefer_idle) {
  if (prefer_idle && a.idle != b.idle) return a.idle;
  return a.score != b.score ? a.score > b.score : a.gpu->index < b.gpu->index;
}

bool Avoided(const std::vector<std::string>& avoid, const std::string& state) {
  return std::find(avoid.begin(), avoid.end(), state) != avoid.end();
}

// "2 avoided: state cyclic, 1 avoided: state bursty" (empty: none).
std::string DescribeAvoided(const std::map<std::string, int>& avoided) {
  std::string out;
  for (const auto& [state, n] : avoided) {
    out += (out.empty() ? "" : ", ") + std::to_string(n) + " avoided: state " + state;
  }
  return out;
}

// The best `n` candidates (sorted by score) whose free memory lies within `spread` of each
// other (SGLang's rule); with no spread rule, simply the first n. Empty when none qualify.
// With prefer_idle, a set with more idle GPUs wins over a better-scored one.
std::vector<Candidate> PickBalanced(const std::vector<Candidate>& sorted, size_t n, double spread,
                                    bool prefer_idle) {
  if (sorted.size() < n) return {};
  if (spread <= 0) return {sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(n)};
  std::vector<Candidate> by_free = sorted;
  std::stable_sort(by_free.begin(), by_free.end(), [](const Candidate& a, const Candidate& b) {
    return a.free_bytes > b.free_bytes;
  });
  std::vector<Candidate> best;
  double best_score = -1;
  size_t best_idle = 0;
  for (size_t i = 0; i + n <= by_free.size(); ++i) {
    const double hi = static_cast<double>(by_free[i].free_bytes);
    const double lo = static_cast<double>(by_free[i + n - 1].free_bytes);
    if (hi - lo > spread * hi) continue;
    double total = 0;
    size_t idle = 0;
    for (size_t k = i; k < i + n; ++k) {
      total += by_free[k].score;
      idle += by_free[k].idle ? 1 : 0;
    }
    if (!prefer_idle) idle = 0;
    if (best.empty() || idle > best_idle || (idle == best_idle && total > best_score)) {
      best_score = total;
      best_idle = idle;
      best.assign(by_free.begin() + static_cast<std::ptrdiff_t>(i),
                  by_free.begin() + static_cast<std::ptrdiff_t>(i + n));
    }
  }
  std::stable_sort(best.begin(), best.end(), [&](const Candidate& a, const Candidate& b) {
    if (prefer_idle && a.idle != b.idle) return a.idle;
    return a.score > b.score;
  });
  return best;
}

struct NodeReasons {
  int leased = 0, low_memory = 0, unbalanced = 0, busy = 0, lost = 0, other_model = 0, unknown = 0,
      cordoned = 0;
  std::map<std::string, int> avoided;  // by profile state
  std::string Describe() const {
    std::string out;
    auto add = [&](int n, const char* what) {
      if (n > 0) out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    };
    add(leased, "leased");
    add(low_memory, "below min_free_memory_mb");
    add(busy, "above max_utilization");
    add(lost, "lost");
    add(cordoned, "on a cordoned (draining) node");
    add(other_model, "of another model");
    add(unknown, "without memory/utilisation readings");
    if (!avoided.empty()) out += (out.empty() ? "" : ", ") + DescribeAvoided(avoided);
    if (unbalanced > 0) add(unbalanced, "GPUs fit but not with free memory within the spread rule");
    return out;
  }
};

// Why the GPUs of one node cannot take a remote request, counted.
struct RemoteReasons {
  int lost = 0, other_model = 0, not_remote = 0, unknown = 0, leased = 0, in_use = 0, no_sms = 0,
      no_memory = 0, cordoned = 0, other_gpu = 0;
  std::map<std::string, int> avoided;  // by profile state
  std::string Describe(const std::string& sms, uint64_t memory_mib) const {
    std::string out;
    auto add = [&](int n, const std::string& what) {
      if (n > 0) out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    };
    add(no_sms, "without room for " + sms);
    add(no_memory, "without " + std::to_string(memory_mib) + " MiB free");
    add(in_use, "not shared and in use");
    add(leased, "leased exclusively");
    add(lost, "lost");
    add(cordoned, "on a cordoned (draining) node");
    add(other_gpu, "not the GPU asked for");
    add(other_model, "of another model");
    add(not_remote, "not serving remote GPUs");
    add(unknown, "without SM count or memory readings");
    if (!avoided.empty()) out += (out.empty() ? "" : ", ") + DescribeAvoided(avoided);
    return out;
  }
};

// What live leases hold on each GPU, for remote placement.
struct RemoteUse {
  bool exclusive = false;
  int remote = 0;
  uint64_t sms = 0;    // of remote leases
  uint64_t bytes = 0;  // reserved by every non-exclusive lease
};

}  // namespace

namespace {

// A refusal's reasons, one line per node; on a large cluster the first kMaxLines nodes and a
// summary of the rest, so that a refusal stays readable (and small).
class RefusalText {
 public:
  explicit RefusalText(std::string message) : message_(std::move(message)) {}
  void Add(const std::string& line, bool reachable) {
    if (listed_ < kMaxLines) {
      message_ += "; " + line;
      ++listed_;
    } else {
      ++more_;
      more_unreachable_ += reachable ? 0 : 1;
    }
  }
  Status Refusal() && {
    if (more_ > 0) {
      message_ += "; and " + std::to_string(more_) + " more node(s)" +
                  (more_unreachable_ > 0
                       ? " (" + std::to_string(more_unreachable_) + " of them unreachable)"
                       : "");
    }
    return Status(StatusCode::kResourceExhausted, std::move(message_));
  }

 private:
  static constexpr size_t kMaxLines = 20;
  std::string message_;
  size_t listed_ = 0, more_ = 0, more_unreachable_ = 0;
};

}  // namespace

uint32_t GrantedSms(const RemoteRequest& r, uint32_t total, uint32_t granularity) {
  if (total == 0) return 0;
  if (granularity == 0) granularity = 1;
  uint64_t want = 0;
  if (r.sm_count > 0) {
    if (r.sm_count > total) return 0;  // more than the GPU has: it does not fit here
    want = r.sm_count;
  } else {
    want = static_cast<uint64_t>(std::ceil(r.sm_percent / 100.0 * total - 1e-9));
  }
  want = std::max<uint64_t>(want, 1);
  want = (want + granularity - 1) / granularity * granularity;
  return static_cast<uint32_t>(std::min<uint64_t>(want, total));
}

Ledger::Ledger(const Clock& clock, LedgerOptions options) : clock_(clock), options_(options) {}

bool Ledger::ReachableLocked(const Node& n) const {
  return clock_.SteadyNow() - n.last_heartbeat <= options_.unreachable_after;
}

bool Ledger::Reachable(const std::string& node) const {
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  return it != nodes_.end() && ReachableLocked(it->second);
}

std::optional<std::chrono::steady_clock::time_point> Ledger::HeardAt(
    const std::string& node) const {
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.last_heartbeat;
}

void Ledger::UpdateNode(const std::string& node, std::vector<GpuState> gpus,
                        std::optional<std::chrono::steady_clock::time_point> heard_at) {
  MutexLock lock(mu_);
  Node& n = nodes_[node];
  n.gpus = std::move(gpus);
  n.last_heartbeat = heard_at ? *heard_at : clock_.SteadyNow();
}

void Ledger::RemoveNode(const std::string& node) {
  MutexLock lock(mu_);
  nodes_.erase(node);
}

void Ledger::Restore(const Lease& lease) {
  MutexLock lock(mu_);
  leases_[lease.id] = lease;
}

double Ledger::Score(const GpuState& g, uint64_t leased_bytes) const {
  if (g.lost || !g.memory_total_bytes || !g.memory_free_bytes || !g.utilization_percent ||
      *g.memory_total_bytes == 0) {
    return 0;
  }
  const uint64_t free = *g.memory_free_bytes > leased_bytes ? *g.memory_free_bytes - leased_bytes : 0;
  return (options_.memory_weight * static_cast<double>(free) /
              static_cast<double>(*g.memory_total_bytes) +
          options_.utilization_weight * (100.0 - std::min(100u, *g.utilization_percent)) / 100.0) /
         (options_.memory_weight + options_.utilization_weight);
}

std::optional<Lease> Ledger::Find(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return std::nullopt;
  return it->second;
}

Result<Lease> Ledger::Allocate(const AllocationRequest& req) {
  if (req.gpus < 1 || req.gpus > 64) return InvalidArgument("gpus must be 1-64");
  if (req.ttl.count() < 1 || req.ttl > std::chrono::hours(24 * 30)) {
    return InvalidArgument("ttl_seconds must be 1-2592000");
  }
  if (req.max_utilization_percent > 100) return InvalidArgument("max_utilization must be 0-100");
  if (!(req.min_free_fraction >= 0 && req.min_free_fraction <= 1)) {
    return InvalidArgument("min_free_fraction must be 0-1");
  }
  if (!(req.max_free_spread >= 0 && req.max_free_spread <= 1)) {
    return InvalidArgument("max_free_spread must be 0-1");
  }
  MutexLock lock(mu_);
  const auto now = clock_.WallNow();
  const size_t want = static_cast<size_t>(req.gpus);

  // What live leases hold, per node, per GPU UUID (one hash lookup per node below, then one per
  // GPU in a small map). By UUID, not index: indexes are renumbered when a GPU falls off the bus.
  struct Use {
    bool exclusive = false;
    int shared = 0;  // counted, not inferred from bytes: a shared lease may reserve 0 bytes
    uint64_t shared_bytes = 0;
  };
  std::unordered_map<std::string_view, std::unordered_map<std::string_view, Use>> use;
  for (const auto& [id, l] : leases_) {
    if (l.expires_at <= now) continue;  // expired: free, even before Expire() reports it
    for (const LeasedGpu& g : l.gpus) {
      Use& u = use[g.node][g.uuid];
      if (l.exclusive) {
        u.exclusive = true;
      } else {
        ++u.shared;
        u.shared_bytes += g.reserved_bytes;
      }
    }
  }

  struct NodeChoice {
    const std::string* name;
    std::vector<Candidate> ok;  // sorted by score, best first
    double mean_top = 0;        // mean score of its best `want` candidates
    size_t idle_top = 0;        // with prefer_idle: how many of those are idle
    NodeReasons why;
    bool reachable = true;
  };
  std::vector<NodeChoice> nodes;
  nodes.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) {
    NodeChoice& choice = nodes.emplace_back();
    choice.name = &name;
    if (!ReachableLocked(node)) {
      choice.reachable = false;
      continue;
    }
    auto node_use = use.find(name);
    NodeReasons& why = choice.why;
    for (const GpuState& g : node.gpus) {
      if (g.lost) {
        ++why.lost;
        continue;
      }
      if (g.cordoned) {
        ++why.cordoned;
        continue;
      }
      if (!req.gpu_model.empty() && g.name.find(req.gpu_model) == std::string::npos) {
        ++why.other_model;
        continue;
      }
      Use u;
      if (node_use != use.end()) {
        auto it = node_use->second.find(g.uuid);
        if (it != node_use->second.end()) u = it->second;
      }
      if (u.exclusive || (req.exclusive && u.shared > 0)) {
        ++why.leased;
        continue;
      }
      if (Avoided(req.avoid_states, g.profile_state)) {
        ++why.avoided[g.profile_state];
        continue;
      }
      if (!g.memory_total_bytes || !g.memory_free_bytes || !g.utilization_percent ||
          *g.memory_total_bytes == 0) {
        ++why.unknown;  // fail closed: what cannot be read is not offered
        continue;
      }
      const uint64_t free =
          *g.memory_free_bytes > u.shared_bytes ? *g.memory_free_bytes - u.shared_bytes : 0;
      const uint64_t need = std::max<uint64_t>(
          req.min_free_memory_bytes,
          static_cast<uint64_t>(req.min_free_fraction *
                                static_cast<double>(*g.memory_total_bytes)));
      if (free < need) {
        ++why.low_memory;
        continue;
      }
      if (*g.utilization_percent > req.max_utilization_percent) {
        ++why.busy;
        continue;
      }
      choice.ok.push_back({&name, &g, Score(g, u.shared_bytes), free, need,
                           g.profile_state == kIdleState && !g.holds_processes});
    }
    std::sort(choice.ok.begin(), choice.ok.end(), [&](const Candidate& a, const Candidate& b) {
      return Better(a, b, req.prefer_idle);
    });
    if (req.same_node && req.max_free_spread > 0 && choice.ok.size() >= want &&
        PickBalanced(choice.ok, want, req.max_free_spread, req.prefer_idle).empty()) {
      why.unbalanced = static_cast<int>(choice.ok.size());
    }
    const size_t top = std::min(choice.ok.size(), want);
    for (size_t i = 0; i < top; ++i) {
      choice.mean_top += choice.ok[i].score;
      if (req.prefer_idle && choice.ok[i].idle) ++choice.idle_top;
    }
    if (top > 0) choice.mean_top /= static_cast<double>(top);
  }

  // Node order: with prefer_idle, the node whose best candidates hold more idle GPUs first; then
  // by policy: score (best top-n mean score), binpack (fewest available first: fill the busiest
  // node that fits), spread (most available first).
  std::vector<const NodeChoice*> order;
  for (const NodeChoice& n : nodes) {
    if (!n.ok.empty()) order.push_back(&n);
  }
  std::stable_sort(order.begin(), order.end(), [&](const NodeChoice* a, const NodeChoice* b) {
    if (a->idle_top != b->idle_top) return a->idle_top > b->idle_top;
    const size_t na = a->ok.size(), nb = b->ok.size();
    switch (req.policy) {
      case Policy::kBinpack:
        if (na != nb) return na < nb;
        break;
      case Policy::kSpread:
        if (na != nb) return na > nb;
        break;
      case Policy::kScore:
        break;
    }
    return a->mean_top > b->mean_top;
  });

  std::vector<Candidate> chosen;
  if (req.same_node) {
    for (const NodeChoice* n : order) {
      chosen = PickBalanced(n->ok, want, req.max_free_spread, req.prefer_idle);
      if (!chosen.empty()) break;
    }
  } else if (req.policy == Policy::kScore) {
    for (const NodeChoice* n : order) chosen.insert(chosen.end(), n->ok.begin(), n->ok.end());
    std::stable_sort(chosen.begin(), chosen.end(), [&](const Candidate& a, const Candidate& b) {
      if (req.prefer_idle && a.idle != b.idle) return a.idle;
      return a.score > b.score;
    });
    chosen = PickBalanced(chosen, want, req.max_free_spread, req.prefer_idle);
  } else {
    // binpack: fill node after node in order; spread: one GPU per node in turn.
    std::vector<Candidate> picked;
    if (req.policy == Policy::kBinpack) {
      for (const NodeChoice* n : order) {
        for (const Candidate& c : n->ok) {
          if (picked.size() < want) picked.push_back(c);
        }
      }
    } else {
      for (size_t round = 0; picked.size() < want; ++round) {
        bool any = false;
        for (const NodeChoice* n : order) {
          if (round < n->ok.size() && picked.size() < want) {
            picked.push_back(n->ok[round]);
            any = true;
          }
        }
        if (!any) break;
      }
    }
    if (picked.size() == want) {
      chosen = PickBalanced(picked, picked.size(), req.max_free_spread, req.prefer_idle);
    }
  }

  if (chosen.empty()) {
    // The reasons, counted per node.
    std::string message = "no " + std::to_string(req.gpus) + " GPU(s)" +
                          (req.same_node ? " on one node" : "") + " meet the request";
    if (nodes_.empty()) message += ": no node has reported";
    RefusalText reasons(std::move(message));
    for (const NodeChoice& n : nodes) {
      std::string line;
      if (!n.reachable) {
        line = *n.name + ": unreachable";
      } else {
        std::string described = n.why.Describe();
        if (n.ok.size() >= want && described.empty()) continue;
        line = *n.name + ": " + std::to_string(n.ok.size()) + " available" +
               (described.empty() ? "" : ", " + described);
      }
      reasons.Add(line, n.reachable);
    }
    return std::move(reasons).Refusal();
  }

  Lease lease;
  lease.id = req.id.empty() ? "lease-" + std::to_string(next_id_++) : req.id;
  if (leases_.count(lease.id)) return AlreadyExists("lease " + lease.id + " exists");
  lease.owner = req.owner;
  lease.labels = req.labels;
  lease.exclusive = req.exclusive;
  lease.granted_at = now;
  lease.ttl = req.ttl;
  lease.expires_at = now + req.ttl;
  lease.avoid_states = req.avoid_states;
  lease.prefer_idle = req.prefer_idle;
  for (const Candidate& c : chosen) {
    lease.gpus.push_back({*c.node, c.gpu->index, c.gpu->uuid, c.gpu->name, c.score, c.need_bytes});
  }
  leases_[lease.id] = lease;
  return lease;
}

namespace {

Status CheckRemoteRequest(const RemoteRequest& r) {
  if ((r.sm_count > 0) == (r.sm_percent > 0)) {
    return InvalidArgument("give one of sm_count and sm_percent");
  }
  if (!(r.sm_percent >= 0 && r.sm_percent <= 100)) return InvalidArgument("sm_percent must be 0-100");
  if (r.memory_bytes == 0) return InvalidArgument("memory_mb must be at least 1");
  if (r.ttl.count() < 1 || r.ttl > std::chrono::hours(24 * 30)) {
    return InvalidArgument("ttl_seconds must be 1-2592000");
  }
  return Status::Ok();
}

std::string SmsText(const RemoteRequest& r) {
  if (r.sm_count > 0) return std::to_string(r.sm_count) + " SMs";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%% of its SMs", r.sm_percent);
  return buf;
}

}  // namespace

Result<Lease> Ledger::AllocateRemote(const RemoteRequest& req) {
  FLYT_RETURN_IF_ERROR(CheckRemoteRequest(req));
  MutexLock lock(mu_);
  const auto now = clock_.WallNow();
  std::unordered_map<std::string_view, std::unordered_map<std::string_view, RemoteUse>> use;
  for (const auto& [id, l] : leases_) {
    if (l.expires_at <= now) continue;  // expired: free, even before Expire() reports it
    for (const LeasedGpu& g : l.gpus) {
      if (!req.node.empty() && g.node != req.node) continue;
      RemoteUse& u = use[g.node][g.uuid];
      if (l.exclusive) {
        u.exclusive = true;
        continue;
      }
      u.bytes += g.reserved_bytes;
      if (l.remote) {
        ++u.remote;
        u.sms += g.sm_count;
      }
    }
  }
  struct Best {
    const std::string* node = nullptr;
    const GpuState* gpu = nullptr;
    uint32_t sms = 0;
    uint64_t sms_left = 0, bytes_left = 0;
    bool idle = false;
  } best;
  struct Refused {
    const std::string* node;
    bool reachable;
    RemoteReasons why;
  };
  std::vector<Refused> refused;
  auto consider = [&](const std::string& name, const Node& node) FLYT_REQUIRES(mu_) {
    Refused r{&name, ReachableLocked(node), {}};
    if (!r.reachable) {
      refused.push_back(r);
      return;
    }
    auto node_use = use.find(name);
    bool any = false;
    for (const GpuState& g : node.gpus) {
      RemoteReasons& why = r.why;
      if (g.lost) {
        ++why.lost;
        continue;
      }
      if (req.gpu_index && g.index != *req.gpu_index) {
        ++why.other_gpu;
        continue;
      }
      if (g.cordoned) {
        ++why.cordoned;
        continue;
      }
      if (!req.gpu_model.empty() && g.name.find(req.gpu_model) == std::string::npos) {
        ++why.other_model;
        continue;
      }
      if (!g.remote_capable) {
        ++why.not_remote;
        continue;
      }
      if (Avoided(req.avoid_states, g.profile_state)) {
        ++why.avoided[g.profile_state];
        continue;
      }
      if (!g.sm_count || *g.sm_count == 0 || !g.memory_total_bytes) {
        ++why.unknown;  // fail closed
        continue;
      }
      RemoteUse u;
      if (node_use != use.end()) {
        auto it = node_use->second.find(g.uuid);
        if (it != node_use->second.end()) u = it->second;
      }
      if (u.exclusive) {
        ++why.leased;
        continue;
      }
      if (!g.shared && u.remote > 0) {
        ++why.in_use;
        continue;
      }
      uint32_t sms = GrantedSms(req, *g.sm_count, g.sm_granularity.value_or(1));
      // A GPU that is not shared (no MPS) cannot hold a client to part of its SMs: its one
      // remote lease gets all of them, and says so.
      if (sms != 0 && !g.shared) sms = *g.sm_count;
      if (sms == 0 || u.sms + sms > *g.sm_count) {
        ++why.no_sms;
        continue;
      }
      if (u.bytes + req.memory_bytes > *g.memory_total_bytes) {
        ++why.no_memory;
        continue;
      }
      any = true;
      const uint64_t sms_left = *g.sm_count - u.sms - sms;
      const uint64_t bytes_left = *g.memory_total_bytes - u.bytes - req.memory_bytes;
      // With prefer_idle an idle GPU first; then binpack: the GPU left with the fewest SMs
      // (then bytes) free first.
      const bool idle = req.prefer_idle && g.profile_state == kIdleState && !g.holds_processes;
      if (best.gpu == nullptr || (idle && !best.idle) ||
          (idle == best.idle &&
           (sms_left < best.sms_left ||
            (sms_left == best.sms_left && bytes_left < best.bytes_left)))) {
        best = {&name, &g, sms, sms_left, bytes_left, idle};
      }
    }
    if (!any) refused.push_back(r);
  };
  auto excluded = [&](const std::string& name) {
    return std::find(req.exclude_nodes.begin(), req.exclude_nodes.end(), name) !=
           req.exclude_nodes.end();
  };
  if (req.node.empty()) {
    for (const auto& [name, node] : nodes_) {
      if (!excluded(name)) consider(name, node);
    }
  } else if (excluded(req.node)) {
    // asked for the one node it may not use: nothing to consider
  } else if (auto it = nodes_.find(req.node); it != nodes_.end()) {
    consider(it->first, it->second);
  }

  const uint64_t memory_mib = (req.memory_bytes + (1 << 20) - 1) >> 20;
  if (best.gpu == nullptr) {
    std::string message = "no GPU can hold a remote share of " + SmsText(req) + " and " +
                          std::to_string(memory_mib) + " MiB" +
                          (req.gpu_model.empty() ? "" : " on a " + req.gpu_model) +
                          (req.node.empty() ? "" : " on node " + req.node);
    if (!req.node.empty() && !nodes_.count(req.node)) {
      message += ": node " + req.node + " has not reported";
    } else if (nodes_.empty()) {
      message += ": no node has reported";
    }
    RefusalText reasons(std::move(message));
    for (const Refused& r : refused) {
      std::string line = *r.node + ": ";
      if (!r.reachable) {
        line += "unreachable";
      } else {
        const std::string described = r.why.Describe(SmsText(req), memory_mib);
        line += described.empty() ? "no GPUs" : described;
      }
      reasons.Add(line, r.reachable);
    }
    return std::move(reasons).Refusal();
  }

  Lease lease;
  lease.id = req.id.empty() ? "rlease-" + std::to_string(next_id_++) : req.id;
  if (leases_.count(lease.id)) return AlreadyExists("lease " + lease.id + " exists");
  lease.owner = req.owner;
  lease.labels = req.labels;
  lease.exclusive = false;
  lease.remote = true;
  lease.avoid_states = req.avoid_states;
  lease.prefer_idle = req.prefer_idle;
  lease.granted_at = now;
  lease.ttl = req.ttl;
  lease.expires_at = now + req.ttl;
  lease.gpus.push_back({*best.node, best.gpu->index, best.gpu->uuid, best.gpu->name,
                        Score(*best.gpu, 0), req.memory_bytes, best.sms});
  leases_[lease.id] = lease;
  return lease;
}

Result<Lease> Ledger::MoveRemote(const std::string& id, const std::string& target) {
  MutexLock lock(mu_);
  auto from = leases_.find(id);
  auto to = leases_.find(target);
  if (from == leases_.end()) return NotFound("no lease " + id);
  if (to == leases_.end()) return NotFound("no lease " + target + " (the move's target)");
  if (!from->second.remote || !to->second.remote || to->second.gpus.size() != 1) {
    return InvalidArgument("only a remote lease moves, onto a remote share");
  }
  from->second.gpus = to->second.gpus;
  leases_.erase(to);
  return from->second;
}

Result<Lease> Ledger::ResizeRemote(const std::string& id, const RemoteRequest& share) {
  if ((share.sm_count > 0) == (share.sm_percent > 0) || !(share.sm_percent <= 100)) {
    return InvalidArgument("give one of sm_count and sm_percent (0-100)");
  }
  if (share.memory_bytes == 0) return InvalidArgument("memory_mb must be at least 1");
  const uint64_t memory_bytes = share.memory_bytes;
  MutexLock lock(mu_);
  auto it = leases_.find(id);
  const auto now = clock_.WallNow();
  if (it == leases_.end() || it->second.expires_at <= now) {
    return NotFound("no lease " + id + " (released, or expired)");
  }
  if (!it->second.remote || it->second.gpus.size() != 1) {
    return InvalidArgument("lease " + id + " is not a remote lease");
  }
  LeasedGpu& mine = it->second.gpus.front();
  auto node = nodes_.find(mine.node);
  const GpuState* gpu = nullptr;
  if (node != nodes_.end()) {
    for (const GpuState& g : node->second.gpus) {
      if (g.uuid == mine.uuid) gpu = &g;
    }
  }
  if (gpu == nullptr || !gpu->sm_count || !gpu->memory_total_bytes) {
    return Unavailable("the GPU of lease " + id + " (" + mine.uuid + " on " + mine.node +
                       ") has no SM count or memory reading now");
  }
  uint32_t sms = GrantedSms(share, *gpu->sm_count, gpu->sm_granularity.value_or(1));
  if (sms == 0) {
    return InvalidArgument("GPU " + std::to_string(mine.index) + " on " + mine.node + " has " +
                           std::to_string(*gpu->sm_count) + " SMs; " +
                           std::to_string(share.sm_count) + " cannot be granted");
  }
  if (!gpu->shared) sms = *gpu->sm_count;  // not shared: the one lease holds every SM
  uint64_t others_sms = 0, others_bytes = 0;
  for (const auto& [other_id, l] : leases_) {
    if (other_id == id || l.expires_at <= now) continue;
    for (const LeasedGpu& g : l.gpus) {
      if (g.uuid != mine.uuid) continue;
      if (l.exclusive) return Status(StatusCode::kResourceExhausted, "GPU " + mine.uuid + " is leased exclusively");
      others_bytes += g.reserved_bytes;
      if (l.remote) others_sms += g.sm_count;
    }
  }
  if (others_sms + sms > *gpu->sm_count) {
    return Status(StatusCode::kResourceExhausted, "GPU " + std::to_string(mine.index) + " on " + mine.node +
                             " has " + std::to_string(*gpu->sm_count - others_sms) +
                             " SMs beside its other remote leases; " + std::to_string(sms) +
                             " asked");
  }
  if (others_bytes + memory_bytes > *gpu->memory_total_bytes) {
    return Status(StatusCode::kResourceExhausted, "GPU " + std::to_string(mine.index) + " on " + mine.node + " has " +
                             std::to_string((*gpu->memory_total_bytes - others_bytes) >> 20) +
                             " MiB beside its other leases; " +
                             std::to_string(memory_bytes >> 20) + " MiB asked");
  }
  mine.sm_count = sms;
  mine.reserved_bytes = memory_bytes;
  return it->second;
}

std::string Ledger::RemoteNeverFits(const RemoteRequest& req) const {
  if (!CheckRemoteRequest(req).ok()) return "";
  MutexLock lock(mu_);
  if (nodes_.empty()) return "";
  if (!req.node.empty() && !nodes_.count(req.node)) {
    return "no node " + req.node + " has reported";
  }
  bool any_remote = false, any_model = false;
  uint32_t most_sms = 0;
  uint64_t most_bytes = 0;
  for (const auto& [name, node] : nodes_) {
    if (!req.node.empty() && name != req.node) continue;
    for (const GpuState& g : node.gpus) {
      if (g.lost || !g.remote_capable) continue;
      any_remote = true;
      if (!req.gpu_model.empty() && g.name.find(req.gpu_model) == std::string::npos) continue;
      any_model = true;
      if (!g.sm_count || !g.memory_total_bytes) continue;
      most_sms = std::max(most_sms, *g.sm_count);
      most_bytes = std::max(most_bytes, *g.memory_total_bytes);
      if (GrantedSms(req, *g.sm_count, g.sm_granularity.value_or(1)) > 0 &&
          req.memory_bytes <= *g.memory_total_bytes) {
        return "";
      }
    }
  }
  const std::string where = req.node.empty() ? "in the cluster" : "on node " + req.node;
  if (!any_remote) return "no GPU " + where + " is served remotely (no node has gpu_servers enabled)";
  if (!any_model) return "no " + req.gpu_model + " GPU " + where + " is served remotely";
  return "needs " + SmsText(req) + " and " + std::to_string(req.memory_bytes >> 20) +
         " MiB on one GPU; the largest GPU served remotely " + where + " has " +
         std::to_string(most_sms) + " SMs and " + std::to_string(most_bytes >> 20) + " MiB";
}

Result<Lease> Ledger::Renew(const std::string& id, std::optional<std::chrono::seconds> ttl) {
  if (ttl && (ttl->count() < 1 || *ttl > std::chrono::hours(24 * 30))) {
    return InvalidArgument("ttl_seconds must be 1-2592000");
  }
  MutexLock lock(mu_);
  auto it = leases_.find(id);
  const auto now = clock_.WallNow();
  if (it == leases_.end() || it->second.expires_at <= now) {
    return NotFound("no lease " + id + " (released, or expired)");
  }
  if (ttl) it->second.ttl = *ttl;
  it->second.expires_at = now + it->second.ttl;
  it->second.grace_extended = false;
  return it->second;
}

Status Ledger::Release(const std::string& id) {
  MutexLock lock(mu_);
  if (leases_.erase(id) == 0) return NotFound("no lease " + id);
  return Status::Ok();
}

std::vector<Lease> Ledger::Expire(
    std::optional<std::chrono::steady_clock::time_point> silence_from) {
  MutexLock lock(mu_);
  const auto now = clock_.WallNow();
  const auto steady = clock_.SteadyNow();
  std::vector<Lease> gone;
  for (auto it = leases_.begin(); it != leases_.end();) {
    bool drop = it->second.expires_at <= now;
    for (const LeasedGpu& g : it->second.gpus) {
      auto n = nodes_.find(g.node);
      if (n == nodes_.end()) {
        drop = true;
        continue;
      }
      auto heard = n->second.last_heartbeat;
      if (silence_from && *silence_from > heard) heard = *silence_from;
      if (steady - heard > options_.unreachable_after + options_.lease_grace) {
        drop = true;
      }
    }
    if (drop) {
      gone.push_back(it->second);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

std::vector<Lease> Ledger::Leases() const {
  MutexLock lock(mu_);
  std::vector<Lease> out;
  for (const auto& [id, l] : leases_) out.push_back(l);
  return out;
}

}  // namespace flyt::sched
