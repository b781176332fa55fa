// Text rendering for flytctl. GPU snapshots (`flytctl gpus`): a gpustat-like table, one line per
// GPU and one indented line per process; absent readings print as "-", lost GPUs as "LOST". The
// cluster manager's answers (`flytctl nodes`, `jobs`, `job`, ...): tables built straight from the
// API's JSON, so that what a script reads with --json and what a person reads are the same data;
// a field that is missing or of an unexpected type prints as "-" rather than failing. All text
// that came from elsewhere passes through Printable(). Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/monitor.h"
#include "gpu/score.h"
#include "gpu/types.h"
#include "sched/estimate.h"

namespace flyt::ctl {

struct RenderOptions {
  bool color = false;    // ANSI colours by load, like nvitop's thresholds
  std::string hostname;  // shown in the header line
  bool show_processes = true;
  // The SIMULATED GPUs line above the table; off where the caller prints it itself.
  bool simulated_banner = true;
  // A STATE column (usage profiles, from a node manager): each GPU's ProfileStateText by index,
  // "-" for a GPU not in it. Off: no column (this machine's GPUs have no profile).
  bool show_state = false;
  std::map<uint32_t, std::string> states;
};

std::string RenderSnapshot(const gpu::GpuSnapshot& snapshot, const RenderOptions& options);
std::string RenderAvailable(const std::vector<gpu::ScoredGpu>& ranked,
                            const RenderOptions& options);
// One line per process on any GPU: GPU, PID, user, memory, SM %, command.
std::string RenderProcesses(const gpu::GpuSnapshot& snapshot, const RenderOptions& options);
// `flytctl estimate`: one line per experiment with its GPU count and memory per GPU.
std::string RenderEstimate(const sched::TaskEstimate& estimate);
// A monitoring session's statistics: per GPU, mean (min-max) of each metric.
std::string RenderSession(const gpu::SessionStats& stats);

// Text from elsewhere (a process title, a remote node's message) with control characters shown
// as "?", so that no escape sequence reaches the reader's terminal.
std::string Printable(std::string_view s);

// The one-line notice printed above every table of simulated GPUs.
std::string SimulatedBanner(const gpu::GpuSnapshot& snapshot);

// ---- the cluster manager's answers ----------------------------------------------------------

// "NVIDIA H100 80GB HBM3" → "H100", "Tesla V100-SXM2-16GB" → "V100", "NVIDIA GeForce RTX 4090" →
// "RTX 4090": the model without vendor, form factor and memory size, for narrow columns.
std::string ShortGpuModel(std::string_view name);
// Seconds as a person reads a wait: "42s", "1m05s", "2h03m", "3d04h"; "-" for negative or NaN.
std::string HumanDuration(double seconds);

// GET /api/v1/nodes.
std::string RenderNodes(const nlohmann::json& answer);
// GET /api/v1/nodes/{name}: the node's state and its GPUs as of its last heartbeat, in the table
// of `flytctl gpus`.
std::string RenderNode(const nlohmann::json& node);
// GET /api/v1/gpus; `nodes` (GET /api/v1/nodes, may be null) says which nodes are simulated.
std::string RenderClusterGpus(const nlohmann::json& answer, const nlohmann::json& nodes);
// `flytctl processes` on the cluster: one line per process on any GPU of any node, from each
// node's last snapshot (GET /api/v1/nodes/{name}); `nodes` as above.
struct NodeSnapshot {
  std::string node;
  gpu::GpuSnapshot snapshot;
};
std::string RenderClusterProcesses(const std::vector<NodeSnapshot>& snapshots,
                                   const nlohmann::json& nodes);
// One lease (POST /api/v1/allocations, renew): its id, node, GPUs and expiry.
// `flytctl processes --cuda`: one line per traced process × GPU — PID, GPU, launches, launches/s,
// device memory now/peak, leaked (exited), H2D/D2H/D2D bytes, busy seconds (enqueue→sync spans),
// top kernel. `processes` is GET /api/v1/processes' list (entries without "cuda" are skipped);
// with `with_node`, each entry's "node" leads. A column the source does not carry shows "-".
std::string RenderCudaProcesses(const nlohmann::json& processes, bool with_node);
// `flytctl processes --cuda PID`: GET /api/v1/processes/{pid}/cuda — per GPU, the figures, top
// kernels with their launch shapes, streams and failed calls.
std::string RenderCudaDetail(const nlohmann::json& detail);
// Bytes as "512 B", "4.0 KiB", "3.0 MiB", "1.2 GiB".
std::string HumanBytes(double bytes);

std::string RenderLease(const nlohmann::json& lease);
// GET /api/v1/allocations.
std::string RenderAllocations(const nlohmann::json& answer);
// POST /api/v1/jobs: the submission and one line per experiment.
std::string RenderSubmission(const nlohmann::json& answer);
// GET /api/v1/jobs. `status_filter` is the --status asked for ("" for all).
std::string RenderJobs(const nlohmann::json& answer, std::string_view status_filter);
// GET /api/v1/jobs/{id}: status, requirement and estimate, placement with per-GPU details, the
// monitoring summary and any other metrics. `now` measures the wait and run of unfinished jobs.
std::string RenderJob(const nlohmann::json& job, std::chrono::system_clock::time_point now);
// One line for a job that left the queue (`flytctl submit --wait`): id, experiment, status, why.
std::string RenderJobOutcome(const nlohmann::json& job);
// GET /api/v1/queue.
std::string RenderQueue(const nlohmann::json& answer);
// GET /api/v1/events.
std::string RenderEvents(const nlohmann::json& answer);
// GET /api/v1/whoami, and where it was asked.
std::string RenderWhoami(const nlohmann::json& answer, std::string_view url);

// ---- GPU usage profiles (render_profile.cc) ----------------------------------------------------

// The STATE cell of `flytctl gpus` from a profile, full (profile/json.h ToJson) or summary
// (SummaryJson): "idle", "cyclic 12.0s", "allocated-idle 12m05s"; "-" without a state.
std::string ProfileStateText(const nlohmann::json& profile);
// `flytctl profile`: GET /api/v1/profiles ({"profiles": [...]}) — one line per GPU: state, how
// long, utilisation p95 (15 min), memory peak and headroom, and why (insufficient data, who holds
// an allocated-idle GPU).
std::string RenderProfiles(const nlohmann::json& answer);
// `flytctl profile INDEX`: one profile in full — state and how long, insufficient-data reason,
// cycle (period, confidence, method, phase offsets, next trough), allocated-idle processes, the
// windows' quantiles, memory peak and headroom, the last phase changes.
std::string RenderProfile(const nlohmann::json& profile);

// ---- remote GPUs (render_remote.cc) -----------------------------------------------------------

// One remote lease (POST /api/v1/remote-leases, renew, GET one): its share (SMs granted, and
// asked when that differs; memory) of which GPU on which node, its state and why, its server's
// address, its expiry. With `show_secret` (`remote alloc` only) also its secret and the
// environment a program needs to use the server; never otherwise, whatever the answer holds.
std::string RenderRemoteLease(const nlohmann::json& lease, bool show_secret);
// The answers of `remote migrate` (the lease, with "migration"), `remote resize` (with
// "resize") and `nodes drain`.
std::string RenderRemoteMigration(const nlohmann::json& lease);
std::string RenderRemoteResize(const nlohmann::json& lease);
std::string RenderDrain(const nlohmann::json& answer);
// GET /api/v1/remote-leases: ID CLIENT NODE GPU SMS MEMORY STATE SERVER EXPIRES, then why each
// failed or ended lease did, and a count by state.
std::string RenderRemoteLeases(const nlohmann::json& answer);
// GET /api/v1/clients: NAME ADDRESS LEASES REMOTE LEASES LAST SEEN LABELS; `now` measures how long
// ago each was last seen.
std::string RenderClients(const nlohmann::json& answer, std::chrono::system_clock::time_point now);
// GET /api/v1/gpu-servers: NODE LEASE GPU STATE ADDRESS PID SMS MEMORY STARTED REASON (SMS as
// granted by the device where the server reported it), then a count by state.
std::string RenderGpuServers(const nlohmann::json& answer);

}  // namespace flyt::ctl
