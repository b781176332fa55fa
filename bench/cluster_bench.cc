// Cluster-manager benchmark (issue 4), the pure-logic half: how long placement decisions take on a
// large cluster, and how well flyt's ledger + queue place jobs compared with the LLM autotuner's
// way (score the GPUs as they read now, no ledger, poll until a timeout). Prints Markdown tables
// for docs/benchmarks.md. The HTTP half is bench/cluster_http_bench.sh.
//
//   build/bin/flyt-bench-cluster [--calls N] [--passes N] [--seeds N] [--hours H]
//                                [--part latency|sim|remote]
//
// Part 1, decision latency: a sched::Ledger with 1,000 nodes × 8 GPUs (600 nodes of H100 80GB, 400
// of A100 40GB; readings from idle to busy; about 75% of the GPUs already in exclusive leases) and a
// sched::JobQueue of 1,000 waiting jobs (1/2/4/8 GPUs, 8-75 GiB per GPU, some asking for a model or
// an idle GPU). It times single Ledger::Allocate calls (a granted lease is released again, untimed,
// so every call sees the same ledger) and whole JobQueue::Schedule passes (on a copy of the queue;
// the leases a pass granted are released again, untimed). Wall time and the thread's CPU time, on a
// FakeClock-driven ledger; nothing else runs in the process.
//
// Part 3, remote-lease decisions (issue 15): the same 1,000 nodes × 8 GPUs, every node serving
// remote GPUs (132 SMs in steps of 8 on the H100s, 108 on the A100s; two nodes in three under
// MPS), about 25% of the GPUs in exclusive leases and about half of the rest carrying 1-4
// fractional remote shares. It times single Ledger::AllocateRemote calls (8-64 SMs or 10-50%,
// 2-30 GiB, some asking for a model or pinned to a node; a granted lease is released again,
// untimed) beside exclusive Ledger::Allocate calls on the same ledger.
//
// Part 2, placement quality: a deterministic discrete-event simulation (fixed seeds) of one
// synthetic arrival sequence played once per policy (the autotuner's; flyt with the score and the
// binpack policy) on 16 nodes × 8 H100 80GB. The model, the same for all, is described above
// SimulateAutotuner() and in docs/benchmarks.md.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "sched/ledger.h"
#include "sched/queue.h"

namespace {

using flyt::FakeClock;
using flyt::sched::AllocationRequest;
using flyt::sched::GpuState;
using flyt::sched::JobQueue;
using flyt::sched::Lease;
using flyt::sched::LeasedGpu;
using flyt::sched::Ledger;
using flyt::sched::Policy;
using flyt::sched::QueuedJob;
using flyt::sched::QueueOptions;
using flyt::sched::RemoteRequest;
using flyt::sched::SchedulePass;
using SteadyClock = std::chrono::steady_clock;

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kGiB = 1ULL << 30;

// splitmix64, with its own uniform/exponential helpers so that the sequence is the same with any
// standard library (std:: distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  int Int(int lo, int hi) { return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1)); }
  double Exponential(double mean) { return -mean * std::log(1.0 - Uniform()); }
  // 1/2/4/8 GPUs with probabilities 40/30/20/10 %.
  int GpuCount() {
    const double u = Uniform();
    return u < 0.4 ? 1 : u < 0.7 ? 2 : u < 0.9 ? 4 : 8;
  }

 private:
  uint64_t state_;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double MicrosSince(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::micro>(SteadyClock::now() - start).count();
}

// ---- part 1: decision latency ---------------------------------------------------------------

struct GpuModel {
  const char* name;
  uint64_t total_mib;
};
constexpr GpuModel kH100{"NVIDIA H100 80GB HBM3", 81559};
constexpr GpuModel kA100{"NVIDIA A100-SXM4-40GB", 40960};
constexpr uint64_t kReservedMib = 529;

// One GPU's readings: 35% idle, 25% partly used, 40% busy.
GpuState RandomGpu(Rng& rng, const GpuModel& model, uint32_t index, const std::string& node) {
  GpuState g;
  g.index = index;
  g.uuid = "GPU-" + node + "-" + std::to_string(index);
  g.name = model.name;
  g.memory_total_bytes = model.total_mib * kMiB;
  const uint64_t usable = (model.total_mib - kReservedMib) * kMiB;
  const double u = rng.Uniform();
  double free_fraction = 0;
  uint32_t util = 0;
  if (u < 0.35) {
    free_fraction = rng.Uniform(0.97, 1.0);
    util = static_cast<uint32_t>(rng.Int(0, 5));
  } else if (u < 0.6) {
    free_fraction = rng.Uniform(0.4, 0.9);
    util = static_cast<uint32_t>(rng.Int(10, 50));
  } else {
    free_fraction = rng.Uniform(0.05, 0.4);
    util = static_cast<uint32_t>(rng.Int(50, 100));
  }
  g.memory_free_bytes = static_cast<uint64_t>(free_fraction * static_cast<double>(usable));
  g.utilization_percent = util;
  return g;
}

AllocationRequest RandomRequest(Rng& rng) {
  AllocationRequest r;
  r.gpus = rng.GpuCount();
  r.min_free_memory_bytes = static_cast<uint64_t>(rng.Int(8, 75)) * kGiB;
  r.max_utilization_percent = rng.Uniform() < 0.5 ? 100 : 60;
  const double m = rng.Uniform();
  r.gpu_model = m < 0.6 ? "" : m < 0.9 ? "H100" : "A100";
  r.policy = Policy::kScore;
  r.exclusive = true;
  r.ttl = std::chrono::hours(1);
  r.owner = "bench";
  return r;
}

struct LoadedCluster {
  size_t gpus = 0;
  size_t leased_gpus = 0;
  size_t leases = 0;
};

// 1,000 nodes × 8 GPUs, about 75% of the GPUs in exclusive leases of 1/2/4/8 GPUs.
// With `with_leases` false the same nodes and readings, and no lease.
LoadedCluster LoadLedger(Ledger& ledger, const FakeClock& clock, Rng& rng, int nodes,
                         bool with_leases = true) {
  LoadedCluster out;
  for (int n = 0; n < nodes; ++n) {
    char name[32];
    std::snprintf(name, sizeof(name), "node-%04d", n);
    const GpuModel& model = n % 5 < 3 ? kH100 : kA100;
    std::vector<GpuState> gpus;
    for (uint32_t i = 0; i < 8; ++i) gpus.push_back(RandomGpu(rng, model, i, name));
    // Leases in chunks along the node's GPUs.
    uint32_t i = 0;
    while (i < 8) {
      uint32_t size = static_cast<uint32_t>(rng.GpuCount());
      while (i + size > 8) size /= 2;
      if (rng.Uniform() < 0.75 && with_leases) {
        Lease l;
        l.id = "pre-" + std::to_string(out.leases++);
        l.owner = "someone";
        l.exclusive = true;
        l.granted_at = clock.WallNow();
        l.ttl = std::chrono::hours(24);
        l.expires_at = l.granted_at + l.ttl;
        for (uint32_t k = i; k < i + size; ++k) {
          l.gpus.push_back(LeasedGpu{name, k, gpus[k].uuid, gpus[k].name, 0.5, 0});
        }
        ledger.Restore(l);
        out.leased_gpus += size;
      }
      i += size;
    }
    out.gpus += gpus.size();
    ledger.UpdateNode(name, std::move(gpus));
  }
  return out;
}

// Wall time and this thread's CPU time of one call: on a shared machine the CPU time is the
// steadier figure (the wall time includes waiting for a core).
class Timer {
 public:
  Timer() : wall_(SteadyClock::now()), cpu_(ThreadCpu()) {}
  double WallMicros() const { return MicrosSince(wall_); }
  double CpuMicros() const { return (ThreadCpu() - cpu_) / 1e3; }

 private:
  static double ThreadCpu() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
  }
  SteadyClock::time_point wall_;
  double cpu_;
};

struct Samples {
  std::vector<double> wall_us, cpu_us;
  void Add(const Timer& t) {
    wall_us.push_back(t.WallMicros());
    cpu_us.push_back(t.CpuMicros());
  }
};

// Single Allocate calls with random requests; a granted lease is released again (untimed).
Samples TimeAllocate(Ledger& ledger, Rng& rng, int calls, Samples* granted, Samples* refused,
                     size_t* refusal_bytes) {
  Samples all;
  for (int c = 0; c < calls; ++c) {
    const AllocationRequest req = RandomRequest(rng);
    Timer t;
    auto lease = ledger.Allocate(req);
    all.Add(t);
    if (lease.ok()) {
      if (granted) granted->Add(t);
      (void)ledger.Release(lease->id);
    } else {
      if (refused) refused->Add(t);
      if (refusal_bytes) *refusal_bytes += lease.status().message().size();
    }
  }
  return all;
}

void RunLatency(int calls, int passes) {
  FakeClock clock;
  Ledger ledger(clock);
  Rng rng(20261122);
  const LoadedCluster cluster = LoadLedger(ledger, clock, rng, 1000);

  // (i) single Allocate calls on the loaded ledger, and on the same nodes without leases.
  Samples granted, refused;
  size_t refusal_bytes = 0;
  const Samples all = TimeAllocate(ledger, rng, calls, &granted, &refused, &refusal_bytes);
  Ledger empty_ledger(clock);
  Rng same_nodes(20261122);
  LoadLedger(empty_ledger, clock, same_nodes, 1000, /*with_leases=*/false);
  Rng requests(7);
  const Samples no_leases = TimeAllocate(empty_ledger, requests, calls, nullptr, nullptr, nullptr);

  // (ii) whole scheduling passes over 1,000 waiting jobs, submitted within the last 110 s (under
  // the 120 s backfill hold, so every job is tried: the worst case) with far deadlines.
  JobQueue queue(QueueOptions{});
  const auto now = clock.WallNow();
  for (int j = 0; j < 1000; ++j) {
    QueuedJob q;
    q.id = "job-" + std::to_string(j);
    q.priority = rng.Uniform() < 0.1 ? 1 : 0;
    q.order = j;
    q.request = RandomRequest(rng);
    q.submitted_at = now - std::chrono::milliseconds(110000 - j * 110);
    q.deadline = now + std::chrono::hours(1);
    queue.Add(std::move(q));
  }
  Samples pass_us;
  size_t tried = 0, started = 0;
  for (int p = 0; p < passes; ++p) {
    JobQueue copy = queue;
    Timer t;
    SchedulePass pass = copy.Schedule(ledger, now);
    pass_us.Add(t);
    tried = pass.tried;
    started = pass.started.size();
    for (const auto& s : pass.started) (void)ledger.Release(s.lease.id);
  }

  std::printf("### Decision latency: 1,000 nodes × 8 GPUs, 1,000 queued jobs\n\n");
  std::printf("Ledger: %zu GPUs on 1,000 nodes (600 × H100 80GB, 400 × A100 40GB), %zu of them in %zu "
              "exclusive leases.\n\n",
              cluster.gpus, cluster.leased_gpus, cluster.leases);
  std::printf("| measure | calls | wall p50 | wall p99 | CPU p50 | CPU p99 |\n|---|---|---|---|---|---|\n");
  auto row = [](const char* what, const Samples& v, const char* unit, double div) {
    std::printf("| %s | %zu | %.2f %s | %.2f %s | %.2f %s | %.2f %s |\n", what, v.wall_us.size(),
                Percentile(v.wall_us, 50) / div, unit, Percentile(v.wall_us, 99) / div, unit,
                Percentile(v.cpu_us, 50) / div, unit, Percentile(v.cpu_us, 99) / div, unit);
  };
  row("`Ledger::Allocate`, all requests", all, "ms", 1000);
  row("`Ledger::Allocate`, granted", granted, "ms", 1000);
  row("`Ledger::Allocate`, refused", refused, "ms", 1000);
  row("`Ledger::Allocate`, same nodes, no leases", no_leases, "ms", 1000);
  row("`JobQueue::Schedule`, one pass over 1,000 jobs", pass_us, "ms", 1000);
  std::printf("\nA refusal's message averages %.0f bytes (the reasons of at most 20 nodes and a "
              "count of the rest). One pass made %zu Allocate calls (requests at least as hard as "
              "one already refused in the pass are not tried) and started %zu jobs.\n\n",
              refused.wall_us.empty() ? 0.0
                                      : static_cast<double>(refusal_bytes) / refused.wall_us.size(),
              tried, started);
  std::fflush(stdout);
}

// ---- part 2: placement quality --------------------------------------------------------------
//
// The model, the same for both policies:
// - 16 nodes × 8 H100 80GB (81,559 MiB, 529 reserved). A GPU's readings are what NVML would show:
//   free memory = total − reserved − 0-768 MiB (fixed per GPU: driver, agents) − the memory of jobs
//   on it *that have finished loading*; utilisation = 0-5% idle (changes every second) + the
//   utilisation of those jobs (capped at 100).
// - Jobs arrive as a Poisson process. Each needs 1/2/4/8 GPUs on one node (40/30/20/10 %), 16-72
//   GiB per GPU (uniform), uses that memory and 60-95% utilisation once loaded, takes 60-120 s
//   to load its model (during which the GPUs read as before: the loading delay) and then runs
//   5-25 min. Every job asks for GPUs with at least its memory free and at most 50% busy, and
//   gives up after 300 s without GPUs (timed out).
// - A job placed on a GPU already held by another job (double-booking) runs alongside it if both
//   fit in memory; if, when it finishes loading, the memory of the loaded jobs on any of its GPUs
//   would exceed the GPU's, it fails (out of memory) and gives its GPUs back. No slowdown is
//   modelled for shared GPUs (in the autotuner's favour).
//
// "autotuner": no ledger. At arrival and every 30 s after (the last check at 300 s), the job reads
// every GPU as it reads *now* (fresh readings, in its favour) and takes the same-node GPUs with
// the best score 0.6·free/total + 0.4·(100−util)/100 among those meeting its memory and
// utilisation limits (the node whose best n score highest, as the ledger's score policy).
// "flyt": sched::Ledger + sched::JobQueue with their defaults (score policy, exclusive leases,
// 120 s backfill hold). Nodes heartbeat every 5 s (staggered), so the ledger's readings are up to
// 5 s old; a pass runs at every arrival, every job end (the lease is released), every heartbeat
// while jobs wait (as the manager's soft wake) and at the next deadline.

constexpr int kSimNodes = 16;
constexpr int kGpusPerNode = 8;
constexpr int kSimGpus = kSimNodes * kGpusPerNode;
constexpr int64_t kTimeoutMs = 300000;
constexpr int64_t kPollMs = 30000;
constexpr int64_t kHeartbeatMs = 5000;
constexpr uint32_t kMaxUtil = 50;
constexpr uint64_t kTotalMib = 81559;
constexpr uint64_t kUsableBytes = (kTotalMib - kReservedMib) * kMiB;

struct SimJob {
  int id = 0;
  int64_t arrival_ms = 0;
  int gpus = 1;
  uint64_t memory_bytes = 0;  // per GPU
  uint32_t util = 0;          // per GPU, once loaded
  int64_t load_ms = 0;
  int64_t run_ms = 0;
};

struct Scenario {
  const char* name;
  double offered_load;  // GPU-seconds asked per GPU-second of capacity
  double load_min_s, load_max_s;
  double hours;
};

std::vector<SimJob> Arrivals(const Scenario& sc, uint64_t seed) {
  Rng rng(seed);
  // Mean GPU-seconds per job: E[gpus] = 2.6 times E[load + run] = mean load + 900 s.
  const double mean_hold_s = (sc.load_min_s + sc.load_max_s) / 2 + 15 * 60;
  const double rate = sc.offered_load * kSimGpus / (2.6 * mean_hold_s);  // jobs per second
  std::vector<SimJob> jobs;
  double t = 0;
  while (true) {
    t += rng.Exponential(1.0 / rate);
    if (t >= sc.hours * 3600) break;
    SimJob j;
    j.id = static_cast<int>(jobs.size());
    j.arrival_ms = static_cast<int64_t>(t * 1000);
    j.gpus = rng.GpuCount();
    j.memory_bytes = static_cast<uint64_t>(rng.Int(16, 72)) * kGiB;
    j.util = static_cast<uint32_t>(rng.Int(60, 95));
    j.load_ms = static_cast<int64_t>(rng.Uniform(sc.load_min_s, sc.load_max_s) * 1000);
    j.run_ms = static_cast<int64_t>(rng.Uniform(5 * 60, 25 * 60) * 1000);
    jobs.push_back(j);
  }
  return jobs;
}

struct SimResult {
  int jobs = 0;
  int completed = 0;
  int timed_out = 0;
  int timed_out_by_size[4] = {};  // 1, 2, 4, 8 GPUs
  int oom = 0;
  int double_booked_gpus = 0;  // placements of a job on a GPU another job held (per GPU)
  int double_booked_jobs = 0;  // jobs placed on at least one held GPU
  double double_booked_gpu_s = 0;  // GPU-seconds with two or more holders
  std::vector<double> waits_s;     // jobs that got GPUs
  double useful_gpu_s = 0;         // held by jobs that completed
  double wasted_gpu_s = 0;         // held by jobs that failed out of memory
};

// The physical cluster: who holds each GPU, and what NVML reads.
class World {
 public:
  explicit World(const std::vector<SimJob>& jobs)
      : jobs_(jobs), placed_(jobs.size()), start_ms_(jobs.size(), -1) {}

  // Readings of one GPU at `now_ms`: only jobs that finished loading show. An idle GPU is not
  // perfectly still: each GPU has its own few hundred MiB in use (driver, agents) and idle
  // utilisation moves between 0 and 5% from second to second, so equal GPUs do not tie.
  GpuState Read(int gpu, int64_t now_ms) const {
    GpuState g;
    g.index = static_cast<uint32_t>(gpu % kGpusPerNode);
    g.uuid = "GPU-" + std::to_string(gpu);
    g.name = kH100.name;
    g.memory_total_bytes = kTotalMib * kMiB;
    uint64_t used = (Rng(0x1000 + static_cast<uint64_t>(gpu)).Next() % 768) * kMiB;
    uint32_t util = static_cast<uint32_t>(
        Rng((static_cast<uint64_t>(gpu) << 40) ^ static_cast<uint64_t>(now_ms / 1000)).Next() % 6);
    for (int j : loaded_[gpu]) {
      used += jobs_[j].memory_bytes;
      util += jobs_[j].util;
    }
    g.memory_free_bytes = used >= kUsableBytes ? 0 : kUsableBytes - used;
    g.utilization_percent = std::min<uint32_t>(100, util);
    return g;
  }
  std::vector<GpuState> ReadNode(int node, int64_t now_ms) const {
    std::vector<GpuState> out;
    for (int i = 0; i < kGpusPerNode; ++i) out.push_back(Read(node * kGpusPerNode + i, now_ms));
    return out;
  }

  void Place(int job, const std::vector<int>& gpus, int64_t now_ms) {
    bool any = false;
    for (int g : gpus) {
      if (!holders_[g].empty()) {
        ++result_.double_booked_gpus;
        any = true;
      }
      Account(g, now_ms);
      holders_[g].insert(job);
    }
    if (any) ++result_.double_booked_jobs;
    placed_[job] = gpus;
    start_ms_[job] = now_ms;
    result_.waits_s.push_back(static_cast<double>(now_ms - jobs_[job].arrival_ms) / 1000);
  }
  // The job's model is in memory: true if it fits, false if it fails out of memory (and leaves).
  bool Loaded(int job, int64_t now_ms) {
    for (int g : placed_[job]) {
      uint64_t used = jobs_[job].memory_bytes;
      for (int other : loaded_[g]) used += jobs_[other].memory_bytes;
      if (used > kUsableBytes) {
        ++result_.oom;
        result_.wasted_gpu_s += Held(job, now_ms);
        Leave(job, now_ms);
        return false;
      }
    }
    for (int g : placed_[job]) loaded_[g].insert(job);
    return true;
  }
  void Finish(int job, int64_t now_ms) {
    ++result_.completed;
    result_.useful_gpu_s += Held(job, now_ms);
    Leave(job, now_ms);
  }
  void TimeOut(int job) {
    ++result_.timed_out;
    const int g = jobs_[job].gpus;
    ++result_.timed_out_by_size[g == 1 ? 0 : g == 2 ? 1 : g == 4 ? 2 : 3];
  }
  SimResult Done(int64_t end_ms) {
    for (int g = 0; g < kSimGpus; ++g) Account(g, end_ms);
    result_.jobs = static_cast<int>(jobs_.size());
    return result_;
  }
  const SimJob& job(int j) const { return jobs_[j]; }

 private:
  double Held(int job, int64_t now_ms) const {
    return static_cast<double>(placed_[job].size()) * static_cast<double>(now_ms - start_ms_[job]) / 1000;
  }
  void Leave(int job, int64_t now_ms) {
    for (int g : placed_[job]) {
      Account(g, now_ms);
      holders_[g].erase(job);
      loaded_[g].erase(job);
    }
  }
  // Integrates the time a GPU spends with two or more holders.
  void Account(int g, int64_t now_ms) {
    if (holders_[g].size() >= 2) {
      result_.double_booked_gpu_s += static_cast<double>(now_ms - since_ms_[g]) / 1000;
    }
    since_ms_[g] = now_ms;
  }

  const std::vector<SimJob>& jobs_;
  std::vector<std::vector<int>> placed_;
  std::vector<int64_t> start_ms_;
  std::set<int> holders_[kSimGpus];
  std::set<int> loaded_[kSimGpus];
  int64_t since_ms_[kSimGpus] = {};
  SimResult result_;
};

// A min-heap of timed events; ties in the order they were pushed.
class Events {
 public:
  void Push(int64_t at_ms, std::function<void()> fn) { heap_.push({at_ms, seq_++, std::move(fn)}); }
  bool Empty() const { return heap_.empty(); }
  int64_t NextAt() const { return heap_.top().at_ms; }
  // Runs the next event; returns its time.
  int64_t RunNext() {
    Event e = heap_.top();
    heap_.pop();
    e.fn();
    return e.at_ms;
  }

 private:
  struct Event {
    int64_t at_ms;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Event& o) const { return std::tie(at_ms, seq) > std::tie(o.at_ms, o.seq); }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> heap_;
  uint64_t seq_ = 0;
};

// The autotuner's choice on current readings: same-node GPUs meeting the limits, the node whose
// best n score highest, its best n GPUs. Empty when none fits.
std::vector<int> AutotunerPick(const World& world, const SimJob& job, int64_t now_ms) {
  std::vector<int> best;
  double best_score = -1;
  for (int n = 0; n < kSimNodes; ++n) {
    std::vector<std::pair<double, int>> ok;  // (-score, gpu)
    for (int i = 0; i < kGpusPerNode; ++i) {
      const int gpu = n * kGpusPerNode + i;
      const GpuState g = world.Read(gpu, now_ms);
      if (*g.memory_free_bytes < job.memory_bytes || *g.utilization_percent > kMaxUtil) continue;
      const double score = 0.6 * static_cast<double>(*g.memory_free_bytes) /
                               static_cast<double>(*g.memory_total_bytes) +
                           0.4 * (100.0 - *g.utilization_percent) / 100.0;
      ok.push_back({-score, gpu});
    }
    if (static_cast<int>(ok.size()) < job.gpus) continue;
    std::sort(ok.begin(), ok.end());
    double total = 0;
    for (int k = 0; k < job.gpus; ++k) total -= ok[k].first;
    const double mean = total / job.gpus;
    if (mean > best_score) {
      best_score = mean;
      best.clear();
      for (int k = 0; k < job.gpus; ++k) best.push_back(ok[k].second);
      std::sort(best.begin(), best.end());
    }
  }
  return best;
}

SimResult SimulateAutotuner(const std::vector<SimJob>& jobs) {
  World world(jobs);
  Events events;
  int64_t now = 0;
  std::function<void(int)> check = [&](int j) {
    const SimJob& job = world.job(j);
    std::vector<int> gpus = AutotunerPick(world, job, now);
    if (!gpus.empty()) {
      world.Place(j, gpus, now);
      events.Push(now + job.load_ms, [&, j] {
        if (world.Loaded(j, now)) events.Push(now + world.job(j).run_ms, [&, j] { world.Finish(j, now); });
      });
      return;
    }
    if (now + kPollMs - job.arrival_ms <= kTimeoutMs) {
      events.Push(now + kPollMs, [&, j] { check(j); });
    } else {
      world.TimeOut(j);
    }
  };
  for (const SimJob& job : jobs) events.Push(job.arrival_ms, [&, id = job.id] { check(id); });
  while (!events.Empty()) {
    now = events.NextAt();
    events.RunNext();
  }
  return world.Done(now);
}

SimResult SimulateFlyt(const std::vector<SimJob>& jobs, Policy policy) {
  World world(jobs);
  Events events;
  FakeClock clock;
  Ledger ledger(clock);
  JobQueue queue{QueueOptions{}};
  int64_t now = 0;
  int64_t clock_ms = 0;
  auto advance = [&](int64_t to_ms) {
    clock.Advance(std::chrono::milliseconds(to_ms - clock_ms));
    clock_ms = to_ms;
  };
  std::set<int64_t> deadline_passes;
  std::map<std::string, int> lease_job;
  auto node_name = [](int n) {
    char name[16];
    std::snprintf(name, sizeof(name), "node-%02d", n);
    return std::string(name);
  };
  std::map<std::string, int> node_index;
  for (int n = 0; n < kSimNodes; ++n) node_index[node_name(n)] = n;

  std::function<void()> pass = [&] {
    SchedulePass p = queue.Schedule(ledger, clock.WallNow());
    for (const auto& s : p.started) {
      const int j = std::stoi(s.job_id);
      std::vector<int> gpus;
      for (const LeasedGpu& g : s.lease.gpus) {
        gpus.push_back(node_index.at(g.node) * kGpusPerNode + static_cast<int>(g.index));
      }
      world.Place(j, gpus, now);
      const std::string lease = s.lease.id;
      auto release = [&, j, lease](bool completed) {
        if (completed) world.Finish(j, now);
        (void)ledger.Release(lease);
        pass();
      };
      events.Push(now + world.job(j).load_ms, [&, j, release] {
        if (world.Loaded(j, now)) {
          events.Push(now + world.job(j).run_ms, [release] { release(true); });
        } else {
          release(false);
        }
      });
    }
    for (const auto& t : p.timed_out) world.TimeOut(std::stoi(t.job_id));
    if (auto next = queue.NextDeadline()) {
      const int64_t at_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(*next - clock.WallNow()).count() + now;
      if (deadline_passes.insert(at_ms).second) {
        events.Push(at_ms, [&, at_ms] {
          deadline_passes.erase(at_ms);
          pass();
        });
      }
    }
  };

  // Heartbeats, staggered over the 5 s interval; they stop once nothing is left to happen.
  int64_t last_arrival = jobs.empty() ? 0 : jobs.back().arrival_ms;
  for (int n = 0; n < kSimNodes; ++n) ledger.UpdateNode(node_name(n), world.ReadNode(n, now));
  std::function<void(int)> heartbeat = [&](int n) {
    ledger.UpdateNode(node_name(n), world.ReadNode(n, now));
    if (queue.size() > 0) pass();
    if (now < last_arrival + 2 * 3600 * 1000) {
      events.Push(now + kHeartbeatMs, [&, n] { heartbeat(n); });
    }
  };
  for (int n = 0; n < kSimNodes; ++n) {
    events.Push(n * kHeartbeatMs / kSimNodes, [&, n] { heartbeat(n); });
  }
  for (const SimJob& job : jobs) {
    events.Push(job.arrival_ms, [&, id = job.id] {
      QueuedJob q;
      q.id = std::to_string(id);
      q.order = id;
      q.request.gpus = world.job(id).gpus;
      q.request.min_free_memory_bytes = world.job(id).memory_bytes;
      q.request.max_utilization_percent = kMaxUtil;
      q.request.policy = policy;
      q.request.exclusive = true;
      q.request.same_node = true;
      q.request.ttl = std::chrono::hours(24);  // a running job renews; not what is measured here
      q.request.owner = "bench";
      q.submitted_at = clock.WallNow();
      q.deadline = q.submitted_at + std::chrono::milliseconds(kTimeoutMs);
      queue.Add(std::move(q));
      pass();
    });
  }
  int64_t end = 0;
  while (!events.Empty()) {
    now = events.NextAt();
    advance(now);
    events.RunNext();
    end = std::max(end, now);
  }
  return world.Done(end);
}

// Results of several seeds pooled: counts summed, waits over all jobs that got GPUs.
struct Pooled {
  SimResult total;
  double capacity_gpu_s = 0;
  void Add(const SimResult& r, double hours) {
    total.jobs += r.jobs;
    total.completed += r.completed;
    total.timed_out += r.timed_out;
    for (int i = 0; i < 4; ++i) total.timed_out_by_size[i] += r.timed_out_by_size[i];
    total.oom += r.oom;
    total.double_booked_gpus += r.double_booked_gpus;
    total.double_booked_jobs += r.double_booked_jobs;
    total.double_booked_gpu_s += r.double_booked_gpu_s;
    total.waits_s.insert(total.waits_s.end(), r.waits_s.begin(), r.waits_s.end());
    total.useful_gpu_s += r.useful_gpu_s;
    total.wasted_gpu_s += r.wasted_gpu_s;
    capacity_gpu_s += kSimGpus * hours * 3600;
  }
};

void RunSimulation(int seeds, double hours) {
  const Scenario scenarios[] = {
      {"load 0.8, loading 60-120 s", 0.8, 60, 120, hours},
      {"load 0.6, loading 60-120 s", 0.6, 60, 120, hours},
      {"load 0.8, loading 15-30 s", 0.8, 15, 30, hours},
  };
  std::printf("### Placement quality: 16 nodes × 8 H100, %.0f h of Poisson arrivals per seed, seeds "
              "1-%d pooled\n\n",
              hours, seeds);
  std::printf("| scenario | policy | jobs | completed | failed: timeout (1/2/4/8 GPUs) | failed: OOM "
              "on a double-booked GPU | double-bookings: GPU placements / jobs | GPU-h "
              "double-booked | wait mean | wait p95 | GPU time in completed jobs | GPU time lost "
              "to OOM |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Scenario& sc : scenarios) {
    Pooled autotuner, flyt_score, flyt_binpack;
    for (int seed = 1; seed <= seeds; ++seed) {
      const std::vector<SimJob> jobs = Arrivals(sc, static_cast<uint64_t>(seed));
      autotuner.Add(SimulateAutotuner(jobs), hours);
      flyt_score.Add(SimulateFlyt(jobs, Policy::kScore), hours);
      flyt_binpack.Add(SimulateFlyt(jobs, Policy::kBinpack), hours);
    }
    auto row = [&](const char* policy, const Pooled& p) {
      const SimResult& r = p.total;
      std::printf("| %s | %s | %d | %d | %d (%d/%d/%d/%d) | %d | %d / %d | %.1f | %.0f s | %.0f s | "
                  "%.1f %% | %.1f %% |\n",
                  sc.name, policy, r.jobs, r.completed, r.timed_out, r.timed_out_by_size[0],
                  r.timed_out_by_size[1], r.timed_out_by_size[2], r.timed_out_by_size[3], r.oom,
                  r.double_booked_gpus, r.double_booked_jobs, r.double_booked_gpu_s / 3600,
                  Mean(r.waits_s), Percentile(r.waits_s, 95), 100 * r.useful_gpu_s / p.capacity_gpu_s,
                  100 * r.wasted_gpu_s / p.capacity_gpu_s);
    };
    row("autotuner: score, no ledger, 30 s polling", autotuner);
    row("flyt: ledger + queue, `score` policy", flyt_score);
    row("flyt: ledger + queue, `binpack` policy", flyt_binpack);
    std::fflush(stdout);
  }
  std::printf("\nWait: arrival to placement, over jobs that got GPUs. GPU time: GPU-seconds held, as a "
              "share of the cluster's capacity over the arrival windows (jobs still running at the end "
              "of a window count in full).\n");
}

}  // namespace

// ---- part 3: remote-lease decisions ----------------------------------------------------------

void RunRemote(int calls) {
  FakeClock clock;
  Ledger ledger(clock);
  Rng rng(20261501);
  size_t gpus_total = 0, exclusive_gpus = 0, shares = 0, shared_gpus = 0;
  for (int n = 0; n < 1000; ++n) {
    char name[32];
    std::snprintf(name, sizeof(name), "node-%04d", n);
    const bool h100 = n % 5 < 3;
    const GpuModel& model = h100 ? kH100 : kA100;
    const uint32_t sms = h100 ? 132 : 108;
    const bool mps = n % 3 != 0;
    std::vector<GpuState> gpus;
    for (uint32_t i = 0; i < 8; ++i) {
      GpuState g = RandomGpu(rng, model, i, name);
      g.sm_count = sms;
      g.sm_granularity = 8;
      g.remote_capable = true;
      g.shared = mps;
      const double u = rng.Uniform();
      Lease l;
      l.owner = "someone";
      l.granted_at = clock.WallNow();
      l.ttl = std::chrono::hours(24);
      l.expires_at = l.granted_at + l.ttl;
      if (u < 0.25) {
        l.id = "pre-x-" + std::string(name) + "-" + std::to_string(i);
        l.exclusive = true;
        l.gpus.push_back(LeasedGpu{name, i, g.uuid, g.name, 0.5, 0, 0});
        ledger.Restore(l);
        ++exclusive_gpus;
      } else if (u < 0.625) {
        const int count = mps ? rng.Int(1, 4) : 1;
        uint32_t used_sms = 0;
        uint64_t used_mib = 0;
        for (int k = 0; k < count; ++k) {
          const uint32_t share = static_cast<uint32_t>(rng.Int(1, 4)) * 8;
          const uint64_t mib = static_cast<uint64_t>(rng.Int(2, 16)) * 1024;
          if (used_sms + share > sms || used_mib + mib > model.total_mib) break;
          used_sms += share;
          used_mib += mib;
          Lease r = l;
          r.id = "pre-r-" + std::string(name) + "-" + std::to_string(i) + "-" + std::to_string(k);
          r.exclusive = false;
          r.remote = true;
          r.gpus.push_back(LeasedGpu{name, i, g.uuid, g.name, 0.5, mib * kMiB, share});
          ledger.Restore(r);
          ++shares;
        }
        ++shared_gpus;
      }
      gpus.push_back(std::move(g));
    }
    gpus_total += gpus.size();
    ledger.UpdateNode(name, std::move(gpus));
  }

  Samples remote_all, remote_granted, remote_refused, exclusive;
  for (int c = 0; c < calls; ++c) {
    RemoteRequest req;
    if (rng.Uniform() < 0.5) {
      req.sm_count = static_cast<uint32_t>(rng.Int(8, 64));
    } else {
      req.sm_percent = rng.Int(10, 50);
    }
    req.memory_bytes = static_cast<uint64_t>(rng.Int(2, 30)) * kGiB;
    const double m = rng.Uniform();
    req.gpu_model = m < 0.7 ? "" : m < 0.9 ? "H100" : "A100";
    if (rng.Uniform() < 0.1) {
      char node[32];
      std::snprintf(node, sizeof(node), "node-%04d", rng.Int(0, 999));
      req.node = node;
    }
    req.ttl = std::chrono::seconds(60);
    req.owner = "bench";
    Timer t;
    auto lease = ledger.AllocateRemote(req);
    remote_all.Add(t);
    if (lease.ok()) {
      remote_granted.Add(t);
      (void)ledger.Release(lease->id);
    } else {
      remote_refused.Add(t);
    }
    const AllocationRequest ex = RandomRequest(rng);
    Timer te;
    auto granted = ledger.Allocate(ex);
    exclusive.Add(te);
    if (granted.ok()) (void)ledger.Release(granted->id);
  }
  std::printf("### Remote-lease decisions: 1,000 nodes × 8 GPUs with fractional shares\n\n");
  std::printf("Ledger: %zu GPUs on 1,000 nodes (every node serving remote GPUs, two in three under "
              "MPS), %zu in exclusive leases, %zu carrying %zu remote shares.\n\n",
              gpus_total, exclusive_gpus, shared_gpus, shares);
  std::printf("| measure | calls | wall p50 | wall p99 | CPU p50 | CPU p99 |\n|---|---|---|---|---|---|\n");
  auto row = [](const char* what, const Samples& v) {
    std::printf("| %s | %zu | %.3f ms | %.3f ms | %.3f ms | %.3f ms |\n", what, v.wall_us.size(),
                Percentile(v.wall_us, 50) / 1000, Percentile(v.wall_us, 99) / 1000,
                Percentile(v.cpu_us, 50) / 1000, Percentile(v.cpu_us, 99) / 1000);
  };
  row("`Ledger::AllocateRemote`, all requests", remote_all);
  row("`Ledger::AllocateRemote`, granted", remote_granted);
  row("`Ledger::AllocateRemote`, refused", remote_refused);
  row("`Ledger::Allocate` (exclusive), same ledger", exclusive);
  std::printf("\n");
}

int main(int argc, char** argv) {
  int calls = 3000, passes = 10, seeds = 10;
  double hours = 8;
  std::string part;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "flyt-bench-cluster: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--calls") {
      calls = std::atoi(value());
    } else if (a == "--passes") {
      passes = std::atoi(value());
    } else if (a == "--seeds") {
      seeds = std::atoi(value());
    } else if (a == "--hours") {
      hours = std::atof(value());
    } else if (a == "--part") {
      part = value();
    } else {
      std::fprintf(stderr,
                   "usage: flyt-bench-cluster [--calls N] [--passes N] [--seeds N] [--hours H] "
                   "[--part latency|sim|remote]\n");
      return 2;
    }
  }
  if (calls < 1 || passes < 1 || seeds < 1 || !(hours > 0)) {
    std::fprintf(stderr, "flyt-bench-cluster: counts must be positive\n");
    return 2;
  }
  if (part.empty() || part == "latency") RunLatency(calls, passes);
  if (part.empty() || part == "sim") RunSimulation(seeds, hours);
  if (part.empty() || part == "remote") RunRemote(calls);
  return 0;
}
