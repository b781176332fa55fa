// flytctl: the command line for flyt. This file parses the flags and calls the command, which
// lives in one of the cmd_*.cc files (see commands.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "ctl/api_client.h"
#include "ctl/commands.h"

namespace {

namespace ctl = flyt::ctl;

constexpr const char* kGlobalOptionsNote =
    "Global options (--server URL, --node URL, --token TOKEN, --json or -o json) may come "
    "before or after the command; see flytctl --help.";

std::string RootFooter() {
  return std::string(
             "Global options may come before or after the command: `flytctl --server URL gpus` "
             "is `flytctl gpus --server URL`.\n"
             "Where gpus and processes read: --node URL: that node manager; else --server URL or "
             "$FLYT_CLUSTER_MANAGER: the cluster manager; else this machine (NVML, else "
             "nvidia-smi). The other cluster commands use --server, else $FLYT_CLUSTER_MANAGER, "
             "else ") +
         ctl::kDefaultClusterManager + ".\n" + ctl::ExitCodesHelp();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flytctl — see and hand out the GPUs of a flyt cluster"};
  app.set_version_flag("--version", std::string("flytctl ") + FLYT_VERSION);
  app.require_subcommand(1);
  // A command's options that it does not know itself are tried as the global ones, so that
  // `flytctl jobs --json` and `flytctl --json jobs` are the same. Commands inherit this.
  app.fallthrough();
  app.footer(kGlobalOptionsNote);  // inherited by the commands; the root's own is set below

  ctl::GlobalFlags global;
  const std::string global_group = "Global options (before or after the command)";
  app.add_option("--server", global.server,
                 "The cluster manager, http://HOST:PORT (default: $FLYT_CLUSTER_MANAGER, else " +
                     std::string(ctl::kDefaultClusterManager) + ")")
      ->group(global_group);
  app.add_option("--node", global.node,
                 "A node manager, http://HOST:PORT (gpus, processes, monitor)")
      ->group(global_group);
  app.add_option("--token", global.token,
                 "Bearer token for the node or cluster manager (default: $FLYT_TOKEN)")
      ->group(global_group);
  app.add_flag("--json", global.json, "Print JSON for scripts")->group(global_group);
  std::string output;
  app.add_option("-o,--output", output, "json (the same as --json) or table (the default)")
      ->check(CLI::IsMember({"json", "table"}))
      ->group(global_group);

  // ---- GPUs and processes: this machine, a node manager or the cluster manager -------------
  auto add_watch = [](CLI::App* cmd, ctl::GpusArgs& args) {
    cmd->add_option("--watch", args.watch_s, "Refresh every SECONDS (default 2) until interrupted")
        ->expected(0, 1)
        ->default_str("2")
        ->check(CLI::Range(0.1, 86400.0));
  };
  ctl::GpusArgs gpus_args;
  auto* gpus = app.add_subcommand(
      "gpus",
      "The GPUs and their processes: of a node manager (--node URL), of the cluster (--server URL "
      "or $FLYT_CLUSTER_MANAGER), else of this machine");
  add_watch(gpus, gpus_args);
  gpus->add_flag("--available", gpus_args.available,
                 "List GPUs a job could use, best availability score first");
  gpus->add_option("--min-free-memory", gpus_args.min_free_mib,
                   "With --available: MiB that must be free")
      ->check(CLI::Range(0.0, 1e9));
  gpus->add_option("--max-util", gpus_args.max_util,
                   "With --available: highest utilisation %, 0-100")
      ->check(CLI::Range(0.0, 100.0));

  ctl::GpusArgs procs_args;
  procs_args.processes_only = true;
  auto* processes =
      app.add_subcommand("processes", "The processes using GPUs (same sources as gpus)");
  add_watch(processes, procs_args);
  processes->add_flag("--cuda", procs_args.cuda,
                      "The CUDA tracer's figures per process (launches, memory now/peak/leaked, "
                      "copies, busy time, top kernel); from a node manager (--node URL, default "
                      "this machine's " + std::string(ctl::kDefaultNodeManager) +
                          ") or the cluster manager");
  processes->add_option("pid", procs_args.cuda_pid,
                        "With --cuda: one process's detail (top kernels with launch shapes, "
                        "streams, failed calls); from a node manager");

  // ---- GPU usage profiles ------------------------------------------------------------------
  ctl::ProfileArgs profile_args;
  auto* profile = app.add_subcommand(
      "profile",
      "GPU usage profiles (state, cycle period, allocated-idle holders, windows, headroom): of a "
      "node manager (--node URL, default this machine's " +
          std::string(ctl::kDefaultNodeManager) +
          "), or of a node as the cluster manager has it (--server URL --node-name NAME)");
  profile->add_option("index", profile_args.index, "One GPU's profile in full (default: every GPU)");
  profile->add_option("--node-name", profile_args.node_name,
                      "With --server: the node whose GPUs to show");
  profile
      ->add_option("--watch", profile_args.watch_s,
                   "Refresh every SECONDS (default 2) until interrupted")
      ->expected(0, 1)
      ->default_str("2")
      ->check(CLI::Range(0.1, 86400.0));

  // ---- a node's monitoring sessions --------------------------------------------------------
  auto* monitor = app.add_subcommand("monitor", "Monitoring sessions on a node manager (--node)");
  monitor->require_subcommand(1);
  ctl::MonitorArgs mon;
  auto* mon_start = monitor->add_subcommand("start", "Start a session; prints its id");
  mon_start->add_option("--gpus", mon.gpus, "GPU indexes (default: all)")->delimiter(',');
  mon_start
      ->add_option("--interval", mon.interval_s, "Seconds between samples (default: every sample)")
      ->check(CLI::Range(0.1, 86400.0));
  auto* mon_show = monitor->add_subcommand("show", "Statistics so far");
  mon_show->add_option("id", mon.id, "Session id")->required();
  auto* mon_stop = monitor->add_subcommand("stop", "End a session; prints its final statistics");
  mon_stop->add_option("id", mon.id, "Session id")->required();
  auto* mon_list = monitor->add_subcommand("list", "Session ids open on the node");

  // ---- this machine's files ----------------------------------------------------------------
  auto* estimate = app.add_subcommand(
      "estimate", "GPUs and memory per GPU for each experiment of a task (a dry run)");
  std::string task_file;
  double reserve_mib = 1536;
  estimate->add_option("task", task_file, "The autotuner's task JSON")
      ->required()
      ->check(CLI::ExistingFile);
  estimate
      ->add_option("--reserve-mib", reserve_mib,
                   "Per-GPU runtime reserve (CUDA context, activations), MiB")
      ->check(CLI::Range(0.0, 1e6));

  auto* sim = app.add_subcommand("sim", "Work with simulated GPU scenarios");
  sim->require_subcommand(1);
  auto* check = sim->add_subcommand("check", "Validate scenario files");
  std::vector<std::string> files;
  check->add_option("files", files, "Scenario files")->required()->check(CLI::ExistingFile);

  auto* cuda = app.add_subcommand("cuda", "Look into CUDA binaries");
  cuda->require_subcommand(1);
  auto* cuda_inspect = cuda->add_subcommand(
      "inspect", "Fatbin entries and kernels (parameter layout, registers, shared memory)");
  std::string cuda_path;
  cuda_inspect
      ->add_option("file", cuda_path, "A program or library built by nvcc, a .fatbin or a cubin")
      ->required()
      ->check(CLI::ExistingFile);

  // ---- the cluster manager -----------------------------------------------------------------
  std::vector<CLI::App*> cluster_commands;
  auto add_cluster = [&](const std::string& name, const std::string& description) {
    CLI::App* cmd = app.add_subcommand(name, description);
    cmd->group("Cluster manager");
    cluster_commands.push_back(cmd);
    return cmd;
  };
  const std::vector<std::string> policies = {"score", "binpack", "spread"};

  std::string node_name;
  auto* nodes = add_cluster(
      "nodes",
      "The nodes of the cluster; `nodes remove|drain|uncordon NAME` (admin) remove one, move its "
      "remote leases off it, or let leases land on it again");
  nodes->add_option("name", node_name, "One node: its GPUs as of its last heartbeat");
  bool remove_force = false;
  auto* nodes_remove = nodes->add_subcommand(
      "remove", "Remove a node from the cluster (admin token); its next heartbeat registers it again");
  nodes_remove->add_option("name", node_name, "The node")->required();
  nodes_remove->add_flag("--force", remove_force,
                         "Also when it holds leases: they are released and their jobs fail");

  int64_t drain_timeout = 60;
  auto* nodes_drain = nodes->add_subcommand(
      "drain", "Cordon a node and move its remote leases to other nodes (admin token)");
  nodes_drain->add_option("name", node_name, "The node")->required();
  nodes_drain
      ->add_option("--timeout", drain_timeout, "Seconds each lease's clients may take to move")
      ->check(CLI::Range(int64_t{1}, int64_t{600}));
  auto* nodes_uncordon = nodes->add_subcommand(
      "uncordon", "Let new leases land on a drained node again (admin token)");
  nodes_uncordon->add_option("name", node_name, "The node")->required();

  ctl::AllocationFlags alloc_flags;
  bool alloc_quiet = false;
  auto* alloc = add_cluster("alloc", "Lease GPUs from the cluster");
  alloc->add_option("--gpus", alloc_flags.gpus, "How many GPUs")
      ->required()
      ->check(CLI::Range(1, 4096));
  alloc->add_option("--min-mem", alloc_flags.min_free_memory_mb, "MiB that must be free on each")
      ->check(CLI::Range(0.0, 1e9));
  alloc
      ->add_option("--max-util", alloc_flags.max_utilization_percent,
                   "Highest utilisation % a GPU may have, 0-100")
      ->check(CLI::Range(0, 100));
  alloc->add_option("--model", alloc_flags.gpu_model, "GPU model, e.g. H100");
  alloc->add_option("--policy", alloc_flags.policy, "score (default), binpack or spread")
      ->check(CLI::IsMember(policies));
  alloc->add_option("--ttl", alloc_flags.ttl_seconds, "Lease lifetime in seconds (renewable)")
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 86400));
  alloc->add_flag("--shared", alloc_flags.shared, "Share the GPUs with other shared leases");
  alloc->add_flag("--any-node", alloc_flags.any_node, "The GPUs may be on different nodes");
  alloc->add_option("--owner", alloc_flags.owner, "Lease for someone else (admin tokens)");
  alloc->add_option("--label", alloc_flags.labels, "KEY=VALUE, repeatable");
  alloc->add_flag("-q,--quiet", alloc_quiet, "Print only the lease id");

  std::string lease_id;
  auto* release = add_cluster("release", "Give leased GPUs back");
  release->add_option("id", lease_id, "Lease id")->required();
  std::optional<int64_t> renew_ttl;
  auto* renew = add_cluster("renew", "Extend a lease");
  renew->add_option("id", lease_id, "Lease id")->required();
  renew->add_option("--ttl", renew_ttl, "New lifetime in seconds from now (default: its TTL)")
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 86400));
  auto* allocations = add_cluster("allocations", "List the active leases");

  ctl::SubmitArgs submit_args;
  auto* submit = add_cluster("submit", "Queue a task: one job per experiment of its search space");
  submit->add_option("task", submit_args.file, "The autotuner's task JSON")
      ->required()
      ->check(CLI::ExistingFile);
  submit->add_option("--priority", submit_args.flags.priority, "Higher runs first, -1000 to 1000")
      ->check(CLI::Range(-1000, 1000));
  submit
      ->add_option("--timeout", submit_args.flags.timeout_seconds,
                   "Seconds a job may wait for GPUs before it fails")
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 86400));
  submit->add_option("--model", submit_args.flags.gpu_model, "GPU model, e.g. H100");
  submit->add_option("--policy", submit_args.flags.policy, "score (default), binpack or spread")
      ->check(CLI::IsMember(policies));
  submit->add_option("--owner", submit_args.flags.owner, "Submit for someone else (admin tokens)");
  auto* wait_flag = submit->add_flag(
      "--wait", submit_args.wait,
      "Wait until every job has left the queue; exit 1 if any failed or was cancelled");
  submit
      ->add_option("--wait-timeout", submit_args.wait_timeout_s,
                   "With --wait: give up after SECONDS (the jobs stay queued)")
      ->needs(wait_flag)
      ->check(CLI::Range(0.1, 30.0 * 86400));

  std::string jobs_status;
  std::optional<int64_t> jobs_limit;
  auto* jobs = add_cluster("jobs", "List jobs, newest first");
  jobs->add_option("--status", jobs_status, "queued, running, completed, failed or cancelled")
      ->check(CLI::IsMember({"queued", "running", "completed", "failed", "cancelled"}));
  bool jobs_all = false;
  jobs->add_option("--limit", jobs_limit, "At most N jobs (default 500; fetched in pages)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  jobs->add_flag("--all", jobs_all, "Every job (all pages)");

  std::string job_id;
  auto* job =
      add_cluster("job", "One job: status, requirement, placement, GPU monitoring and metrics");
  job->add_option("id", job_id, "Job id")->required();
  auto* cancel = add_cluster("cancel", "Cancel a queued or running job");
  cancel->add_option("id", job_id, "Job id")->required();
  bool complete_failed = false;
  std::string complete_message;
  auto* complete = add_cluster("complete", "Report a running job finished; frees its GPUs");
  complete->add_option("id", job_id, "Job id")->required();
  complete->add_flag("--failed", complete_failed, "It failed (default: completed)");
  complete->add_option("--message", complete_message, "What happened");

  auto* queue = add_cluster("queue", "Jobs waiting for GPUs, and why");
  std::optional<int64_t> events_after, events_limit;
  auto* events =
      add_cluster("events", "The cluster's event log: the newest 50, or those after --after");
  events->add_option("--after", events_after, "Only events after this id")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  events
      ->add_option("--limit", events_limit,
                   "At most N events, 1-1000 (default: 50 newest; 200 with --after)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  auto* whoami = add_cluster("whoami", "The name and role of your token");

  // ---- remote GPUs: a share of one GPU, used through a GPU server on its node -------------
  // Here --node after the command is a node's NAME (the manager's word for it), not a node
  // manager's URL.
  auto* remote =
      add_cluster("remote",
                  "Remote GPUs: a share (SMs and memory) of one GPU, used over the network "
                  "through a GPU server the cluster starts for the lease");
  remote->require_subcommand(1);
  ctl::RemoteLeaseFlags remote_flags;
  auto* remote_alloc = remote->add_subcommand(
      "alloc",
      "Lease a share of one GPU; prints the server's address and the lease's secret "
      "(once)");
  auto* sm_count = remote_alloc
                       ->add_option("--sm-count", remote_flags.sm_count,
                                    "SMs (rounded up to what the GPU grants, e.g. 8 on "
                                    "Hopper)")
                       ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  remote_alloc
      ->add_option("--sm-percent", remote_flags.sm_percent, "Percent of the GPU's SMs, 1-100")
      ->check(CLI::Range(int64_t{1}, int64_t{100}))
      ->excludes(sm_count);
  remote_alloc->add_option("--memory-mb", remote_flags.memory_mb, "MiB of GPU memory")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}));
  remote_alloc->add_option("--gpu-model", remote_flags.gpu_model, "GPU model, e.g. H100");
  remote_alloc->add_option("--node", remote_flags.node, "Place it on this node (its name)");
  remote_alloc->add_option("--client", remote_flags.client,
                           "The client node it is for (default: your token's name)");
  remote_alloc
      ->add_option("--ttl", remote_flags.ttl_seconds,
                   "Lease lifetime in seconds, renewable (the manager's default: 60)")
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 86400));
  remote_alloc->add_option("--label", remote_flags.labels, "KEY=VALUE, repeatable");
  std::string remote_id;
  std::optional<int64_t> remote_ttl;
  auto* remote_renew = remote->add_subcommand("renew", "Extend a remote lease");
  remote_renew->add_option("id", remote_id, "Remote lease id")->required();
  remote_renew
      ->add_option("--ttl", remote_ttl, "New lifetime in seconds from now (default: its TTL)")
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 86400));
  auto* remote_release =
      remote->add_subcommand("release", "Give a remote lease back; its GPU server drains");
  remote_release->add_option("id", remote_id, "Remote lease id")->required();
  bool remote_secret = false;
  auto* remote_show = remote->add_subcommand("show", "One remote lease");
  remote_show->add_option("id", remote_id, "Remote lease id")->required();
  remote_show->add_flag("--secret", remote_secret,
                        "Also print its secret (the lease's owner or an admin)");
  std::string remote_node, remote_client;
  auto* remote_list = remote->add_subcommand("list", "The remote leases (never their secrets)");
  remote_list->add_option("--node", remote_node, "Only those on this node (its name)");
  remote_list->add_option("--client", remote_client, "Only those of this client node");
  std::string migrate_to;
  int64_t move_timeout = 60;
  auto* remote_migrate = remote->add_subcommand(
      "migrate", "Move a remote lease to another GPU (its programs keep running; a pause)");
  remote_migrate->add_option("id", remote_id, "Remote lease id")->required();
  remote_migrate->add_option("--to", migrate_to, "NODE or NODE:GPU (the GPU's index there)")
      ->required();
  remote_migrate
      ->add_option("--timeout", move_timeout,
                   "Seconds each client may take to reach a clean point (default 60)")
      ->check(CLI::Range(int64_t{1}, int64_t{600}));
  std::optional<uint32_t> resize_sm;
  std::optional<double> resize_percent;
  std::optional<int64_t> resize_memory;
  auto* remote_resize = remote->add_subcommand(
      "resize", "Give a remote lease a new SM share and/or memory limit while its programs run");
  remote_resize->add_option("id", remote_id, "Remote lease id")->required();
  auto* resize_sm_option = remote_resize->add_option("--sm", resize_sm, "SMs")
                               ->check(CLI::Range(1u, 1u << 20));
  remote_resize->add_option("--sm-percent", resize_percent, "Percent of the GPU's SMs, 1-100")
      ->check(CLI::Range(0.001, 100.0))
      ->excludes(resize_sm_option);
  remote_resize->add_option("--memory", resize_memory, "MiB of GPU memory")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  remote_resize
      ->add_option("--timeout", move_timeout,
                   "Seconds the clients may take to apply it (default 60)")
      ->check(CLI::Range(int64_t{1}, int64_t{600}));
  for (CLI::App* sub : remote->get_subcommands([](CLI::App*) { return true; })) {
    sub->group("Commands");  // not the "Cluster manager" group they inherit from `remote`
  }
  auto* clients = add_cluster("clients", "The client nodes and the leases they hold");
  std::string servers_node;
  auto* servers = add_cluster("servers", "The GPU servers the nodes run for remote leases");
  servers->add_option("--node", servers_node, "Only those of this node (its name)");

  app.footer(RootFooter());

  // Usage errors: one line, "flytctl: ...", and exit status 2 (help and --version: 0).
  app.failure_message([](const CLI::App* root, const CLI::Error& e) {
    std::string command = "flytctl";
    for (const CLI::App* sub = root; sub != nullptr;) {
      auto parsed = sub->get_subcommands();
      sub = parsed.empty() ? nullptr : parsed.front();
      if (sub != nullptr) command += " " + sub->get_name();
    }
    return "flytctl: " + std::string(e.what()) + " (see " + command + " --help)\n";
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? ctl::kExitOk : ctl::kExitUsage;
  }

  try {
    if (global.token.empty() && std::getenv("FLYT_TOKEN") != nullptr) {
      global.token = std::getenv("FLYT_TOKEN");
    }
    for (CLI::App* cmd : {gpus, processes}) {
      if (!cmd->parsed()) continue;
      ctl::GpusArgs& args = cmd == gpus ? gpus_args : procs_args;
      // `--watch` with no value yields the default.
      if (cmd->count("--watch") > 0 && !args.watch_s) args.watch_s = 2.0;
      if (args.cuda_pid && !args.cuda) {
        return ctl::Fail("a PID goes with --cuda: flytctl processes --cuda PID", ctl::kExitUsage);
      }
      return ctl::RunGpus(global, args);
    }
    for (CLI::App* sub : {mon_start, mon_show, mon_stop, mon_list}) {
      if (!sub->parsed()) continue;
      mon.action = sub->get_name();
      return ctl::RunMonitor(global, mon);
    }
    if (output == "json") global.json = true;
    if (profile->parsed()) {
      if (profile->count("--watch") > 0 && !profile_args.watch_s) profile_args.watch_s = 2.0;
      return ctl::RunProfile(global, profile_args);
    }
    for (CLI::App* cmd : cluster_commands) {
      if (cmd->parsed() && !global.node.empty() && (cmd == remote || cmd == servers)) {
        return ctl::Fail(
            "--node before the command is a node manager's URL; to name a node, "
            "put --node NAME after it (flytctl " +
                cmd->get_name() + (cmd == remote ? " list" : "") + " --node NAME)",
            ctl::kExitUsage);
      }
      if (cmd->parsed() && !global.node.empty()) {
        return ctl::Fail("--node reads one node manager (gpus, processes, monitor); " +
                             cmd->get_name() + " asks the cluster manager (--server URL)",
                         ctl::kExitUsage);
      }
    }
    if (nodes_remove->parsed()) return ctl::RunNodesRemove(global, node_name, remove_force);
    if (nodes_drain->parsed()) return ctl::RunNodesDrain(global, node_name, drain_timeout);
    if (nodes_uncordon->parsed()) return ctl::RunNodesUncordon(global, node_name);
    if (nodes->parsed()) return ctl::RunNodes(global, node_name);
    if (alloc->parsed()) return ctl::RunAlloc(global, alloc_flags, alloc_quiet);
    if (release->parsed()) return ctl::RunRelease(global, lease_id);
    if (renew->parsed()) return ctl::RunRenew(global, lease_id, renew_ttl);
    if (allocations->parsed()) return ctl::RunAllocations(global);
    if (submit->parsed()) return ctl::RunSubmit(global, submit_args);
    if (jobs->parsed()) return ctl::RunJobs(global, jobs_status, jobs_limit, jobs_all);
    if (job->parsed()) return ctl::RunJob(global, job_id);
    if (cancel->parsed()) return ctl::RunCancel(global, job_id);
    if (complete->parsed()) {
      return ctl::RunComplete(global, job_id, complete_failed, complete_message);
    }
    if (queue->parsed()) return ctl::RunQueue(global);
    if (events->parsed()) return ctl::RunEvents(global, events_after, events_limit);
    if (whoami->parsed()) return ctl::RunWhoami(global);
    if (remote_alloc->parsed()) return ctl::RunRemoteAlloc(global, remote_flags);
    if (remote_renew->parsed()) return ctl::RunRemoteRenew(global, remote_id, remote_ttl);
    if (remote_release->parsed()) return ctl::RunRemoteRelease(global, remote_id);
    if (remote_show->parsed()) return ctl::RunRemoteShow(global, remote_id, remote_secret);
    if (remote_list->parsed()) return ctl::RunRemoteList(global, remote_node, remote_client);
    if (remote_migrate->parsed()) {
      return ctl::RunRemoteMigrate(global, remote_id, migrate_to, move_timeout);
    }
    if (remote_resize->parsed()) {
      return ctl::RunRemoteResize(global, remote_id, resize_sm, resize_percent, resize_memory,
                                  move_timeout);
    }
    if (clients->parsed()) return ctl::RunClients(global);
    if (servers->parsed()) return ctl::RunServers(global, servers_node);
    if (check->parsed()) return ctl::RunSimCheck(files);
    if (cuda_inspect->parsed()) return ctl::RunCudaInspect(cuda_path, global.json);
    if (estimate->parsed()) return ctl::RunEstimate(task_file, global.json, reserve_mib);
  } catch (const std::exception& e) {
    // flyt reports errors as Status; this is the last line of defence, not a code path.
    std::fprintf(stderr, "flytctl: internal error: %s\n", e.what());
    return 70;
  }
  return ctl::kExitOk;
}
