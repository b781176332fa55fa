#include "sched/ledger.h"

#include <algorithm>

namespace flyt::sched {
namespace {

struct Candidate {
  std::string node;
  const GpuState* gpu;
  double score;
};

struct NodeReasons {
  int leased = 0, low_memory = 0, busy = 0, lost = 0, other_model = 0, unknown = 0;
  std::string Describe() const {
    std::string out;
    auto add = [&](int n, const char* what) {
      if (n > 0) out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + what;
    };
    add(leased, "leased");
    add(low_memory, "below min_free_memory_mb");
    add(busy, "above max_utilization");
    add(lost, "lost");
    add(other_model, "of another model");
    add(unknown, "without memory/utilisation readings");
    return out;
  }
};

}  // namespace

Ledger::Ledger(const Clock& clock, LedgerOptions options) : clock_(clock), options_(options) {}

bool Ledger::ReachableLocked(const Node& n) const {
  return clock_.SteadyNow() - n.last_heartbeat <= options_.unreachable_after;
}

bool Ledger::Reachable(const std::string& node) const {
  std::scoped_lock lock(mu_);
  auto it = nodes_.find(node);
  return it != nodes_.end() && ReachableLocked(it->second);
}

void Ledger::UpdateNode(const std::string& node, std::vector<GpuState> gpus) {
  std::scoped_lock lock(mu_);
  Node& n = nodes_[node];
  n.gpus = std::move(gpus);
  n.last_heartbeat = clock_.SteadyNow();
}

Result<Lease> Ledger::Allocate(const AllocationRequest& req) {
  if (req.gpus < 1 || req.gpus > 64) return InvalidArgument("gpus must be 1-64");
  if (req.ttl.count() < 1 || req.ttl > std::chrono::hours(24 * 30)) {
    return InvalidArgument("ttl_seconds must be 1-2592000");
  }
  if (req.max_utilization_percent > 100) return InvalidArgument("max_utilization must be 0-100");
  std::scoped_lock lock(mu_);
  const auto now = clock_.WallNow();

  // What live leases hold, per (node, GPU index).
  struct Use {
    bool exclusive = false;
    int shared = 0;  // counted, not inferred from bytes: a shared lease may reserve 0 bytes
    uint64_t shared_bytes = 0;
  };
  std::map<std::pair<std::string, uint32_t>, Use> use;
  for (const auto& [id, l] : leases_) {
    if (l.expires_at <= now) continue;  // expired: free, even before Expire() reports it
    for (const LeasedGpu& g : l.gpus) {
      Use& u = use[{g.node, g.index}];
      if (l.exclusive) {
        u.exclusive = true;
      } else {
        ++u.shared;
        u.shared_bytes += l.memory_per_gpu_bytes;
      }
    }
  }

  std::map<std::string, std::vector<Candidate>> by_node;
  std::vector<std::string> reasons;
  for (const auto& [name, node] : nodes_) {
    if (!ReachableLocked(node)) {
      reasons.push_back(name + ": unreachable");
      continue;
    }
    NodeReasons why;
    std::vector<Candidate>& ok = by_node[name];
    for (const GpuState& g : node.gpus) {
      if (g.lost) {
        ++why.lost;
        continue;
      }
      if (!req.gpu_model.empty() && g.name.find(req.gpu_model) == std::string::npos) {
        ++why.other_model;
        continue;
      }
      const Use u = use.count({name, g.index}) ? use[{name, g.index}] : Use{};
      if (u.exclusive || (req.exclusive && u.shared > 0)) {
        ++why.leased;
        continue;
      }
      if (!g.memory_total_bytes || !g.memory_free_bytes || !g.utilization_percent ||
          *g.memory_total_bytes == 0) {
        ++why.unknown;  // fail closed: what cannot be read is not offered
        continue;
      }
      const uint64_t free =
          *g.memory_free_bytes > u.shared_bytes ? *g.memory_free_bytes - u.shared_bytes : 0;
      if (free < req.min_free_memory_bytes) {
        ++why.low_memory;
        continue;
      }
      if (*g.utilization_percent > req.max_utilization_percent) {
        ++why.busy;
        continue;
      }
      double score = (options_.memory_weight * static_cast<double>(free) /
                          static_cast<double>(*g.memory_total_bytes) +
                      options_.utilization_weight * (100.0 - *g.utilization_percent) / 100.0) /
                     (options_.memory_weight + options_.utilization_weight);
      ok.push_back({name, &g, score});
    }
    std::sort(ok.begin(), ok.end(), [](const Candidate& a, const Candidate& b) {
      return a.score != b.score ? a.score > b.score : a.gpu->index < b.gpu->index;
    });
    std::string described = why.Describe();
    if (static_cast<int>(ok.size()) < req.gpus || !described.empty()) {
      reasons.push_back(name + ": " + std::to_string(ok.size()) + " available" +
                        (described.empty() ? "" : ", " + described));
    }
  }

  // Node order by policy: score (best top-n mean score), binpack (fewest available first: fill
  // the busiest node that fits), spread (most available first).
  std::vector<std::string> order;
  for (const auto& [name, ok] : by_node) {
    if (!ok.empty()) order.push_back(name);
  }
  auto mean_top = [&](const std::string& name) {
    const auto& ok = by_node[name];
    size_t n = std::min<size_t>(ok.size(), static_cast<size_t>(req.gpus));
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += ok[i].score;
    return n == 0 ? 0.0 : s / static_cast<double>(n);
  };
  std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    size_t na = by_node[a].size(), nb = by_node[b].size();
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
    return mean_top(a) > mean_top(b);
  });

  std::vector<Candidate> chosen;
  if (req.same_node) {
    for (const std::string& name : order) {
      if (static_cast<int>(by_node[name].size()) >= req.gpus) {
        chosen.assign(by_node[name].begin(), by_node[name].begin() + req.gpus);
        break;
      }
    }
  } else if (req.policy == Policy::kScore) {
    for (const std::string& name : order)
      chosen.insert(chosen.end(), by_node[name].begin(), by_node[name].end());
    std::stable_sort(chosen.begin(), chosen.end(),
                     [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
    if (static_cast<int>(chosen.size()) >= req.gpus) {
      chosen.resize(static_cast<size_t>(req.gpus));
    } else {
      chosen.clear();
    }
  } else {
    // binpack: fill node after node in order; spread: one GPU per node in turn.
    std::vector<Candidate> picked;
    if (req.policy == Policy::kBinpack) {
      for (const std::string& name : order) {
        for (const Candidate& c : by_node[name]) {
          if (static_cast<int>(picked.size()) < req.gpus) picked.push_back(c);
        }
      }
    } else {
      for (size_t round = 0; static_cast<int>(picked.size()) < req.gpus; ++round) {
        bool any = false;
        for (const std::string& name : order) {
          if (round < by_node[name].size() && static_cast<int>(picked.size()) < req.gpus) {
            picked.push_back(by_node[name][round]);
            any = true;
          }
        }
        if (!any) break;
      }
    }
    if (static_cast<int>(picked.size()) == req.gpus) chosen = std::move(picked);
  }

  if (chosen.empty()) {
    std::string message = "no " + std::to_string(req.gpus) + " GPU(s)" +
                          (req.same_node ? " on one node" : "") + " meet the request";
    if (nodes_.empty()) message += ": no node has reported";
    for (const std::string& r : reasons) message += "; " + r;
    return Status(StatusCode::kResourceExhausted, message);
  }

  Lease lease;
  lease.id = "lease-" + std::to_string(next_id_++);
  lease.owner = req.owner;
  lease.exclusive = req.exclusive;
  lease.memory_per_gpu_bytes = req.min_free_memory_bytes;
  lease.granted_at = now;
  lease.ttl = req.ttl;
  lease.expires_at = now + req.ttl;
  for (const Candidate& c : chosen) {
    lease.gpus.push_back({c.node, c.gpu->index, c.gpu->uuid, c.gpu->name, c.score});
  }
  leases_[lease.id] = lease;
  return lease;
}

Result<Lease> Ledger::Renew(const std::string& id, std::optional<std::chrono::seconds> ttl) {
  if (ttl && (ttl->count() < 1 || *ttl > std::chrono::hours(24 * 30))) {
    return InvalidArgument("ttl_seconds must be 1-2592000");
  }
  std::scoped_lock lock(mu_);
  auto it = leases_.find(id);
  const auto now = clock_.WallNow();
  if (it == leases_.end() || it->second.expires_at <= now) {
    return NotFound("no lease " + id + " (released, or expired)");
  }
  if (ttl) it->second.ttl = *ttl;
  it->second.expires_at = now + it->second.ttl;
  return it->second;
}

Status Ledger::Release(const std::string& id) {
  std::scoped_lock lock(mu_);
  if (leases_.erase(id) == 0) return NotFound("no lease " + id);
  return Status::Ok();
}

std::vector<Lease> Ledger::Expire() {
  std::scoped_lock lock(mu_);
  const auto now = clock_.WallNow();
  const auto steady = clock_.SteadyNow();
  std::vector<Lease> gone;
  for (auto it = leases_.begin(); it != leases_.end();) {
    bool drop = it->second.expires_at <= now;
    for (const LeasedGpu& g : it->second.gpus) {
      auto n = nodes_.find(g.node);
      if (n == nodes_.end() ||
          steady - n->second.last_heartbeat > options_.unreachable_after + options_.lease_grace) {
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
  std::scoped_lock lock(mu_);
  std::vector<Lease> out;
  for (const auto& [id, l] : leases_) out.push_back(l);
  return out;
}

}  // namespace flyt::sched
