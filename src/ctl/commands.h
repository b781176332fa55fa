// flytctl's commands: one Run* function per command, in files by family — cmd_common.cc: error
// lines, --watch and the cluster manager's connection, shared by the others; cmd_gpus.cc: what
// `gpus` and `processes` read from this machine, a node manager or the cluster manager;
// cmd_monitor.cc: a node's monitoring sessions; cmd_cluster.cc: `nodes`, `events`, `whoami`;
// cmd_alloc.cc: leases; cmd_remote.cc: remote GPUs (remote leases, clients, GPU servers);
// cmd_jobs.cc: the job queue; cmd_local.cc: `estimate`, `sim check`,
// `cuda inspect`. main.cc parses the flags and calls one of them. Each prints its result on
// stdout, or one "flytctl: ..." line on stderr, and returns the process's exit status (kExit* in
// api_client.h). They run on main's thread; the only process-wide state they touch is the
// SIGINT/SIGTERM flag of a --watch loop.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/http.h"
#include "common/status.h"
#include "ctl/api_client.h"

namespace flyt::ctl {

// The options every command takes, before or after its name (`flytctl --json jobs` and
// `flytctl jobs --json` are the same).
struct GlobalFlags {
  std::string server;  // --server as given; empty when not
  std::string node;    // --node as given; empty when not
  std::string token;   // --token, else $FLYT_TOKEN
  bool json = false;
};

// Prints "flytctl: <line>" on stderr (control characters shown as '?') and returns `exit_code`.
int Fail(const std::string& line, int exit_code = kExitError);
// The status's message, and ExitCode(status).
int Fail(const Status& status);

// Prints `frame()` once, or every `watch_s` seconds until SIGINT/SIGTERM (clearing a terminal
// between frames unless `json`). A frame that fails ends it with the error.
int Repeat(std::optional<double> watch_s, bool json,
           const std::function<Result<std::string>()>& frame);

// ---- the cluster manager ---------------------------------------------------------------------

// A connection to the cluster manager, and how its answers and errors reach the user.
class Manager {
 public:
  // `server`: the URL, already resolved (--server, $FLYT_CLUSTER_MANAGER, the default).
  static Result<Manager> Open(const std::string& server, const std::string& token, bool json);

  http::JsonClient& client() { return *client_; }
  const std::string& url() const { return url_; }
  bool json() const { return json_; }

  // One line for a failed call, "<doing>: <why>", and the exit status for it.
  int Fail(const Status& s, std::string_view doing) const;
  // The answer as the API gave it (--json), or as `render` words it. `list` names the array a
  // well-formed answer holds, so that a stranger's answer is an error rather than an empty table.
  int Print(const Result<nlohmann::json>& answer, std::string_view doing, const char* list,
            const std::function<std::string(const nlohmann::json&)>& render) const;

 private:
  Manager() = default;
  std::unique_ptr<http::JsonClient> client_;
  std::string url_;
  bool json_ = false;
};

// Opens the manager (--server, else $FLYT_CLUSTER_MANAGER, else the default) or reports why not;
// `run` does the rest.
int WithManager(const GlobalFlags& g, const std::function<int(Manager&)>& run);

// POST with an Idempotency-Key of this invocation's own (random): when the connection is lost
// (no answer at all), the request is sent once more with the same key, so a lease or jobs the
// manager granted before the answer was lost come back instead of being granted twice.
Result<nlohmann::json> PostIdempotent(Manager& m, const std::string& path,
                                      const nlohmann::json& body);

// Ids go into URL paths: a malformed one is a usage error, caught before any request. Prints it
// and returns true when `id` is not one.
bool BadId(const std::string& id, std::string_view what);

// cmd_cluster.cc
int RunNodes(const GlobalFlags& g, const std::string& name);
int RunNodesRemove(const GlobalFlags& g, const std::string& name, bool force);
int RunEvents(const GlobalFlags& g, std::optional<int64_t> after, std::optional<int64_t> limit);
int RunWhoami(const GlobalFlags& g);

// cmd_alloc.cc
int RunAlloc(const GlobalFlags& g, const AllocationFlags& flags, bool quiet);
int RunRelease(const GlobalFlags& g, const std::string& id);
int RunRenew(const GlobalFlags& g, const std::string& id, std::optional<int64_t> ttl_s);
int RunAllocations(const GlobalFlags& g);

// cmd_remote.cc. `remote show --secret` prints the secret (the manager sends it to the lease's
// owner and admins only); `remote alloc` always does, once.
int RunRemoteAlloc(const GlobalFlags& g, const RemoteLeaseFlags& flags);
int RunRemoteRenew(const GlobalFlags& g, const std::string& id, std::optional<int64_t> ttl_s);
int RunRemoteRelease(const GlobalFlags& g, const std::string& id);
int RunRemoteShow(const GlobalFlags& g, const std::string& id, bool secret);
// `remote migrate ID --to NODE[:GPU]`, `remote resize ID --sm N --memory MB`.
int RunRemoteMigrate(const GlobalFlags& g, const std::string& id, const std::string& to,
                     int64_t timeout_s);
int RunRemoteResize(const GlobalFlags& g, const std::string& id, std::optional<uint32_t> sm_count,
                    std::optional<double> sm_percent, std::optional<int64_t> memory_mb,
                    int64_t timeout_s);
// `nodes drain NAME`, `nodes uncordon NAME` (admin).
int RunNodesDrain(const GlobalFlags& g, const std::string& name, int64_t timeout_s);
int RunNodesUncordon(const GlobalFlags& g, const std::string& name);
int RunRemoteList(const GlobalFlags& g, const std::string& node, const std::string& client);
int RunClients(const GlobalFlags& g);
int RunServers(const GlobalFlags& g, const std::string& node);

// cmd_jobs.cc
struct SubmitArgs {
  std::string file;
  SubmitFlags flags;
  bool wait = false;
  std::optional<double> wait_timeout_s;
};
int RunSubmit(const GlobalFlags& g, const SubmitArgs& s);
int RunJobs(const GlobalFlags& g, const std::string& status, std::optional<int64_t> limit,
            bool all);
int RunJob(const GlobalFlags& g, const std::string& id);
int RunCancel(const GlobalFlags& g, const std::string& id);
int RunComplete(const GlobalFlags& g, const std::string& id, bool failed,
                const std::string& message);
int RunQueue(const GlobalFlags& g);

// ---- GPUs and processes (cmd_gpus.cc) ----------------------------------------------------------

struct GpusArgs {
  std::optional<double> watch_s;
  bool available = false;
  double min_free_mib = 0;
  double max_util = 100;
  bool processes_only = false;  // `flytctl processes`
  bool cuda = false;             // `flytctl processes --cuda`: the CUDA tracer's figures
  std::optional<uint32_t> cuda_pid;  // `flytctl processes --cuda PID`: one process's detail
};
// Where `flytctl processes --cuda` reads when no --node or --server is given: this machine's
// node manager at its default address (the tracer runs there, not in flytctl).
inline constexpr const char* kDefaultNodeManager = "http://127.0.0.1:12401";
// Reads the source ChooseSource() picks from --node, --server and $FLYT_CLUSTER_MANAGER.
int RunGpus(const GlobalFlags& g, const GpusArgs& a);

// ---- GPU usage profiles (cmd_profile.cc) -------------------------------------------------------

struct ProfileArgs {
  std::optional<uint32_t> index;  // one GPU's detail; none: every GPU
  std::string node_name;          // with --server: whose GPUs
  std::optional<double> watch_s;
};
// `flytctl profile [INDEX]`: from --node URL (default: this machine's node manager at
// kDefaultNodeManager), or --server URL --node-name NAME (the node's last heartbeat).
int RunProfile(const GlobalFlags& g, const ProfileArgs& a);

// ---- a node's monitoring sessions (cmd_monitor.cc) ---------------------------------------------

struct MonitorArgs {
  std::string action;  // start, show, stop, list
  std::string id;
  std::vector<uint32_t> gpus;
  std::optional<double> interval_s;
};
int RunMonitor(const GlobalFlags& g, const MonitorArgs& a);

// ---- this machine only (cmd_local.cc) -------------------------------------------------------

int RunEstimate(const std::string& file, bool json, double reserve_mib);
int RunSimCheck(const std::vector<std::string>& files);
int RunCudaInspect(const std::string& file, bool json);

}  // namespace flyt::ctl
