// GpuServers' public side: the spec parser, construction (finding the binary, opening state_dir,
// then probing, re-adoption and the watcher, which live in gpu_server_process.cc), admission
// (room on a GPU, a free port), Put / Drain / Reconcile, and what is read out of the records:
// Get / List, the heartbeat's "gpu_servers", the events and the Prometheus metrics. Everything
// that touches the servers' processes and files (spawning, state files, adoption, probing, the
// MPS check, the watcher) is in gpu_server_process.cc; see gpu_servers.h for the contract.
#include "node/gpu_servers.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <set>
#include <thread>

#include "common/json_fields.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "gpu/json.h"
#include "node/gpu_servers_internal.h"

namespace flyt::node {
namespace {

using internal::Conflict;
using internal::PidfdOpen;
using nlohmann::json;

constexpr size_t kMaxEvents = 256;

bool ValidLeaseId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}


// Whether HOST:PORT can be bound now (nobody else listens there).
bool PortFree(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list) != 0) return false;
  bool ok = false;
  for (addrinfo* a = list; a != nullptr && !ok; a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) continue;
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ok = bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0;
  }
  freeaddrinfo(list);
  return ok;
}

// A process that runs as a GPU server of a state_dir: its command line names the lease's secret
// and ready files there ("--secret-file DIR/ID.secret ... --ready-file DIR/ID.ready"), which only
// GpuServers passes.
struct ServerProcess {
  pid_t pid = 0;
  std::string lease_id;
  std::optional<uint32_t> device;  // its --device
};

std::vector<std::string> CommandLine(pid_t pid) {
  std::vector<std::string> args;
  auto text = ReadFile("/proc/" + std::to_string(pid) + "/cmdline", 64 << 10);
  if (!text.ok()) return args;
  for (std::string_view a : Split(*text, '\0')) args.emplace_back(a);
  return args;
}

// The lease whose files in one of `dirs` (each ending in '/') the arguments name for both
// --secret-file and --ready-file; nullopt when they do not.
std::optional<ServerProcess> AsServerOf(const std::vector<std::string>& args,
                                        const std::vector<std::string>& dirs) {
  auto lease_of = [&dirs](const std::string& path, std::string_view suffix) -> std::string {
    for (const std::string& dir : dirs) {
      if (path.size() <= dir.size() + suffix.size() || path.compare(0, dir.size(), dir) != 0 ||
          path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      std::string id = path.substr(dir.size(), path.size() - dir.size() - suffix.size());
      if (id.find('/') == std::string::npos) return id;
    }
    return {};
  };
  std::string secret_lease, ready_lease;
  ServerProcess p;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--secret-file") secret_lease = lease_of(args[i + 1], ".secret");
    if (args[i] == "--ready-file") ready_lease = lease_of(args[i + 1], ".ready");
    if (args[i] == "--device") {
      if (auto d = ParseUint(args[i + 1]); d && *d <= UINT32_MAX) {
        p.device = static_cast<uint32_t>(*d);
      }
    }
  }
  if (secret_lease.empty() || secret_lease != ready_lease) return std::nullopt;
  p.lease_id = secret_lease;
  return p;
}

// `state_dir` as given and as resolved (a symlink on the way), each ending in '/'.
std::vector<std::string> DirForms(const std::string& state_dir) {
  std::vector<std::string> dirs = {state_dir + "/"};
  if (char* real = realpath(state_dir.c_str(), nullptr); real != nullptr) {
    if (real + std::string("/") != dirs[0]) dirs.push_back(real + std::string("/"));
    free(real);
  }
  return dirs;
}

// Every process of ours (any, for root) that runs as a GPU server of one of `dirs`.
std::vector<ServerProcess> ServerProcessesOf(const std::vector<std::string>& dirs) {
  std::vector<ServerProcess> found;
  DIR* d = opendir("/proc");
  if (d == nullptr) return found;
  const uid_t me = geteuid();
  while (dirent* e = readdir(d)) {
    auto pid = ParseUint(e->d_name);
    if (!pid || *pid == 0 || *pid > INT_MAX || static_cast<pid_t>(*pid) == getpid()) continue;
    struct stat st {};
    const std::string proc = std::string("/proc/") + e->d_name;
    if (stat(proc.c_str(), &st) != 0 || (me != 0 && st.st_uid != me)) continue;
    auto p = AsServerOf(CommandLine(static_cast<pid_t>(*pid)), dirs);
    if (!p) continue;
    p->pid = static_cast<pid_t>(*pid);
    found.push_back(std::move(*p));
  }
  closedir(d);
  return found;
}

int PidfdSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}
bool PidfdExited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

}  // namespace

bool GpuServerSpec::SameServer(const GpuServerSpec& o) const {
  return lease_id == o.lease_id && gpu_uuid == o.gpu_uuid && memory_mb == o.memory_mb &&
         sm_count == o.sm_count && secret == o.secret && owner == o.owner;
}

Result<GpuServerSpec> GpuServerSpecFromJson(const json& body) {
  FLYT_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(body, "the body"));
  FLYT_RETURN_IF_ERROR(
      f.Only({"lease_id", "gpu_uuid", "memory_mb", "sm_count", "secret", "owner", "expires_at"}));
  GpuServerSpec s;
  FLYT_ASSIGN_OR_RETURN(s.lease_id, f.RequiredString("lease_id", 128));
  if (!ValidLeaseId(s.lease_id)) {
    return InvalidArgument(
        "lease_id must be 1-128 characters of [A-Za-z0-9_.-], not starting "
        "with '.'");
  }
  FLYT_ASSIGN_OR_RETURN(s.gpu_uuid, f.RequiredString("gpu_uuid", 128));
  if (s.gpu_uuid.empty()) return InvalidArgument("gpu_uuid must not be empty");
  FLYT_ASSIGN_OR_RETURN(s.memory_mb, f.RequiredInt<uint64_t>("memory_mb", 1, uint64_t{1} << 30));
  FLYT_ASSIGN_OR_RETURN(s.sm_count, f.RequiredInt<uint32_t>("sm_count", 1, 1 << 20));
  // The secret's value never appears in an error.
  if (!body.contains("secret") || !body["secret"].is_string()) {
    return InvalidArgument("secret is required: a string of 32-128 printable ASCII characters");
  }
  s.secret = body["secret"].get<std::string>();
  if (s.secret.size() < 32 || s.secret.size() > 128 ||
      !std::all_of(s.secret.begin(), s.secret.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return InvalidArgument("secret must be 32-128 printable ASCII characters without blanks");
  }
  FLYT_RETURN_IF_ERROR(f.OptionalString("owner", 256, s.owner));
  if (body.contains("expires_at")) {
    const json& e = body["expires_at"];
    if (!e.is_string() && !e.is_number() && !e.is_null()) {
      return InvalidArgument("expires_at must be an RFC 3339 time or a number");
    }
    s.expires_at = e;
  }
  return s;
}

// ---- construction ----

GpuServers::GpuServers(GpuServersConfig config, std::string binary)
    : config_(std::move(config)), binary_(std::move(binary)) {}

Result<std::unique_ptr<GpuServers>> GpuServers::Create(GpuServersConfig config,
                                                       std::vector<GpuDevice> gpus,
                                                       const std::string& self_exe) {
  std::string binary = config.binary;
  if (binary.empty()) {
    const std::string dir = self_exe.substr(0, self_exe.rfind('/') + 1);
    const std::string next_to = dir + "flyt-gpu-server";
    binary = !dir.empty() && access(next_to.c_str(), X_OK) == 0 ? next_to
                                                                : FindOnPath("flyt-gpu-server");
    if (binary.empty()) {
      return NotFound("[gpu-servers] binary: flyt-gpu-server is neither next to " +
                      (self_exe.empty() ? std::string("the node manager") : self_exe) +
                      " nor on PATH; set [gpu-servers] binary");
    }
  } else {
    const std::string found = FindOnPath(binary);
    if (found.empty()) {
      return NotFound("[gpu-servers] binary " + binary + ": not found or not executable");
    }
    binary = found;
  }
  if (binary[0] != '/') {  // a PATH entry may be relative: make it absolute for posix_spawn
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) != nullptr) binary = std::string(cwd) + "/" + binary;
  }
  FLYT_RETURN_IF_ERROR(internal::OpenStateDir(config.state_dir));
  std::unique_ptr<GpuServers> s(new GpuServers(std::move(config), std::move(binary)));
  s->Probe(std::move(gpus));
  s->Adopt();
  s->StopOrphans();
  s->watcher_ = std::thread([p = s.get()] { p->Watch(); });
  s->housekeeper_ = std::thread([p = s.get()] { p->Housekeep(); });
  return s;
}

void GpuServers::StopOrphans() {
  std::set<pid_t> adopted;
  {
    MutexLock lock(mu_);
    for (const auto& [id, s] : servers_) {
      if (s.state == State::kStarting || s.state == State::kRunning ||
          s.state == State::kDraining) {
        adopted.insert(s.pid);
      }
    }
  }
  struct Orphan {
    ServerProcess process;
    UniqueFd pidfd;
    bool killed = false;
  };
  std::vector<Orphan> orphans;
  const std::vector<std::string> dirs = DirForms(config_.state_dir);
  for (ServerProcess& p : ServerProcessesOf(dirs)) {
    if (adopted.count(p.pid) != 0) continue;
    UniqueFd pidfd(PidfdOpen(p.pid));
    // The same process still (its pid not reused since the scan): the pidfd pins it from here on.
    if (!pidfd.valid() || !AsServerOf(CommandLine(p.pid), dirs) ||
        PidfdSignal(pidfd.get(), SIGTERM) != 0) {
      continue;
    }
    spdlog::warn(
        "gpu-servers: pid {} is a GPU server of lease {} from {} that no record there adopts "
        "(record missing or unreadable): stopping it (SIGTERM; SIGKILL in {} s)",
        p.pid, p.lease_id, config_.state_dir, config_.drain_grace.count());
    orphans.push_back({std::move(p), std::move(pidfd), false});
  }
  if (orphans.empty()) return;
  auto wait_until = [&orphans](std::chrono::steady_clock::time_point until) {
    while (std::chrono::steady_clock::now() < until &&
           std::any_of(orphans.begin(), orphans.end(),
                       [](const Orphan& o) { return !PidfdExited(o.pidfd.get()); })) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  wait_until(std::chrono::steady_clock::now() + config_.drain_grace);
  for (Orphan& o : orphans) {
    if (PidfdExited(o.pidfd.get())) continue;
    spdlog::warn("gpu-servers: the orphaned GPU server pid {} (lease {}) is still up {} s after "
                 "SIGTERM: SIGKILL",
                 o.process.pid, o.process.lease_id, config_.drain_grace.count());
    // Its process group (its session: it was started in one of its own) goes with it.
    if (getpgid(o.process.pid) == o.process.pid) kill(-o.process.pid, SIGKILL);
    PidfdSignal(o.pidfd.get(), SIGKILL);
    o.killed = true;
  }
  wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  MutexLock lock(mu_);
  for (const Orphan& o : orphans) {
    const bool gone = PidfdExited(o.pidfd.get());
    const std::string& id = o.process.lease_id;
    std::string how = gone ? (o.killed ? "killed with SIGKILL after the drain grace" : "stopped")
                           : "still running after SIGKILL";
    if (gone && servers_.count(id) == 0) RemoveFiles(id);
    uint32_t index = o.process.device.value_or(0);
    std::string uuid;
    for (const Capacity& c : gpus_) {
      if (o.process.device && c.device.index == *o.process.device) uuid = c.device.uuid;
    }
    const std::string description = "the GPU server of lease " + id + " (pid " +
                                    std::to_string(o.process.pid) +
                                    "), running without a record in state_dir, was " + how;
    if (gone) {
      spdlog::info("gpu-servers: {}", description);
    } else {
      spdlog::error("gpu-servers: {}", description);
    }
    AddEvent(index, uuid, id, "gpu_server_stopped", description);
  }
}

int GpuServers::StopAll(std::chrono::milliseconds kill_wait) {
  MutexLock lock(mu_);
  closing_ = true;
  auto live = [this]() FLYT_REQUIRES(mu_) {
    int n = 0;
    for (const auto& [id, s] : servers_) {
      n += s.state == State::kStarting || s.state == State::kRunning ||
                   s.state == State::kDraining
               ? 1
               : 0;
    }
    return n;
  };
  const int total = live();
  if (total == 0) return 0;
  spdlog::info("gpu-servers: stopping: draining {} GPU server(s) (SIGKILL after {} s)", total,
               config_.drain_grace.count());
  for (auto& [id, s] : servers_) (void)DrainLocked(s);
  changed_.NotifyAll();
  const auto deadline = std::chrono::steady_clock::now() + config_.drain_grace + kill_wait;
  while (!stopping_ && live() > 0 && std::chrono::steady_clock::now() < deadline) {
    changed_.WaitFor(mu_, std::chrono::milliseconds(100));
  }
  const int left = live();
  if (left == 0) {
    spdlog::info("gpu-servers: every GPU server has stopped");
  } else {
    std::string pids;
    for (const auto& [id, s] : servers_) {
      if (s.state == State::kStarting || s.state == State::kRunning ||
          s.state == State::kDraining) {
        pids += (pids.empty() ? "" : ", ") + std::to_string(s.pid) + " (lease " + id + ")";
      }
    }
    spdlog::error("gpu-servers: {} GPU server(s) still up after SIGKILL: {}", left, pids);
  }
  return left;
}

GpuServers::~GpuServers() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    changed_.NotifyAll();
  }
  if (watcher_.joinable()) watcher_.join();
  if (housekeeper_.joinable()) housekeeper_.join();
}

const GpuServers::Capacity* GpuServers::FindGpu(const std::string& uuid) const {
  for (const Capacity& c : gpus_) {
    if (c.device.uuid == uuid) return &c;
  }
  return nullptr;
}

// ---- admission, starting ----

Status GpuServers::CheckRoom(const GpuServerSpec& spec, const Capacity& cap) const {
  const std::string gpu = "GPU " + std::to_string(cap.device.index) + " (" + cap.device.uuid + ")";
  if (spec.sm_count > cap.sm_count) {
    return InvalidArgument("sm_count " + std::to_string(spec.sm_count) + " is more than the " +
                           std::to_string(cap.sm_count) + " SMs of " + gpu);
  }
  if (spec.memory_mb > cap.memory_total_mb) {
    return InvalidArgument("memory_mb " + std::to_string(spec.memory_mb) + " is more than the " +
                           std::to_string(cap.memory_total_mb) + " MiB of " + gpu);
  }
  uint64_t sms = spec.sm_count, memory = spec.memory_mb;
  for (const auto& [id, s] : servers_) {
    // The lease's own server (a resize) gives way to the new share.
    if (id == spec.lease_id || s.spec.gpu_uuid != cap.device.uuid ||
        (s.state != State::kStarting && s.state != State::kRunning &&
         s.state != State::kDraining)) {
      continue;
    }
    if (!cap.shared()) {
      return Conflict(gpu + " is not shared" +
                      (cap.shared_configured ? " (MPS is " + cap.mps + ")" : std::string()) +
                      " and already serves lease " + id);
    }
    sms += std::max(s.spec.sm_count, s.resizing ? s.resizing->sm_count : 0u);
    memory += std::max(s.spec.memory_mb, s.resizing ? s.resizing->memory_mb : uint64_t{0});
  }
  if (sms > cap.sm_count) {
    return Conflict(gpu + " has no room for " + std::to_string(spec.sm_count) + " more SMs (" +
                    std::to_string(sms - spec.sm_count) + " of " + std::to_string(cap.sm_count) +
                    " held)");
  }
  if (memory > cap.memory_total_mb) {
    return Conflict(gpu + " has no room for " + std::to_string(spec.memory_mb) + " MiB more (" +
                    std::to_string(memory - spec.memory_mb) + " of " +
                    std::to_string(cap.memory_total_mb) + " MiB held)");
  }
  return Status::Ok();
}

Result<int> GpuServers::FreePort() const {
  std::set<int> ours;
  for (const auto& [id, s] : servers_) {
    if (s.state == State::kStarting || s.state == State::kRunning || s.state == State::kDraining) {
      ours.insert(s.port);
    }
  }
  int foreign = 0;
  for (int p = config_.port_min; p <= config_.port_max; ++p) {
    if (ours.count(p) != 0) continue;
    if (PortFree(config_.listen_host, p)) return p;
    ++foreign;
  }
  return Unavailable("no free port in [gpu-servers] port_min-port_max (" +
                     std::to_string(config_.port_min) + "-" + std::to_string(config_.port_max) +
                     " on " + config_.listen_host + "): " + std::to_string(ours.size()) +
                     " held by this node's GPU servers, " + std::to_string(foreign) +
                     " in use by other programs");
}

bool GpuServers::DrainingOn(const std::string& gpu_uuid) const {
  for (const auto& [id, s] : servers_) {
    if (s.spec.gpu_uuid == gpu_uuid && s.state == State::kDraining) return true;
  }
  return false;
}

Result<GpuServers::PutResult> GpuServers::Put(const GpuServerSpec& spec) {
  MutexLock lock(mu_);
  const auto closing = [] {
    return Unavailable("the node manager is stopping: it starts no GPU server")
        .WithReason("unavailable");
  };
  if (closing_) return closing();
  auto it = servers_.find(spec.lease_id);
  bool created = false;
  if (it != servers_.end() && it->second.state != State::kStopped &&
      it->second.state != State::kFailed) {
    Server& s = it->second;
    if (s.state == State::kDraining) {
      return Conflict("the server of lease " + spec.lease_id + " is draining");
    }
    if (!s.spec.SameServer(spec)) {
      return Conflict("lease " + spec.lease_id +
                      " already has a server with a different GPU, share, secret or owner");
    }
    if (s.spec.expires_at != spec.expires_at) {
      s.spec.expires_at = spec.expires_at;
      (void)WriteState(s);
    }
  } else {
    // A draining server's share is already free in the cluster's ledger, which may place the
    // next lease on the same GPU at once: wait for the drain (at most its grace and a second)
    // rather than refuse the lease that replaces it.
    const auto until = std::chrono::steady_clock::now() + config_.drain_grace +
                       std::chrono::seconds(1);
    while (!stopping_ && !closing_ && std::chrono::steady_clock::now() < until &&
           DrainingOn(spec.gpu_uuid)) {
      const Capacity* cap = FindGpu(spec.gpu_uuid);
      if (cap == nullptr || CheckRoom(spec, *cap).ok()) break;
      changed_.WaitFor(mu_, std::chrono::milliseconds(50));
    }
    if (closing_) return closing();
    FLYT_RETURN_IF_ERROR(Begin(spec));
    created = true;
  }
  // Wait for the watcher to see it ready, exited or past its start deadline.
  while (true) {
    it = servers_.find(spec.lease_id);
    if (it == servers_.end())
      return Unavailable("the server of lease " + spec.lease_id + " is gone");
    if (it->second.state != State::kStarting || stopping_) break;
    changed_.WaitFor(mu_, std::chrono::milliseconds(200));
  }
  const Server& s = it->second;
  if (s.state == State::kRunning) return PutResult{created, RecordJson(s)};
  return Unavailable("the GPU server of lease " + spec.lease_id + " did not come up: " +
                     (s.reason.empty() ? std::string(StateName(s.state)) : s.reason))
      .WithReason("unavailable");
}

// ---- draining, reconciling ----

Status GpuServers::DrainLocked(Server& s) {
  if (s.state == State::kDraining || s.state == State::kStopped || s.state == State::kFailed) {
    return Status::Ok();
  }
  s.state = State::kDraining;
  s.kill_at = std::chrono::steady_clock::now() + config_.drain_grace;
  s.reason = "drained";
  kill(s.pid, SIGTERM);
  (void)WriteState(s);
  spdlog::info("gpu-servers: draining the server of lease {} (pid {}; SIGKILL in {} s)",
               s.spec.lease_id, s.pid, config_.drain_grace.count());
  return Status::Ok();
}

Status GpuServers::Drain(const std::string& lease_id) {
  MutexLock lock(mu_);
  auto it = servers_.find(lease_id);
  if (it == servers_.end())
    return NotFound("no GPU server for lease " + lease_id + " on this node");
  return DrainLocked(it->second);
}

void GpuServers::Reconcile(const std::vector<GpuServerSpec>& desired,
                           const std::vector<std::string>& keep,
                           std::chrono::system_clock::time_point decided_before) {
  MutexLock lock(mu_);
  if (closing_) return;  // StopAll: the node is going down; the cluster sees its servers stop
  std::set<std::string> wanted(keep.begin(), keep.end());
  int started = 0, drained = 0;
  for (const GpuServerSpec& spec : desired) {
    wanted.insert(spec.lease_id);
    if (servers_.count(spec.lease_id) != 0) continue;  // running, starting, or ended: as it is
    Status s = Begin(spec);
    if (!s.ok()) {
      // Recorded as failed, so that the next heartbeat tells the cluster why.
      Server f;
      f.spec = spec;
      const Capacity* cap = FindGpu(spec.gpu_uuid);
      f.gpu_index = cap != nullptr ? cap->device.index : 0;
      f.state = State::kFailed;
      f.reason = "could not be started: " + s.message();
      f.started_at = std::chrono::system_clock::now();
      f.ended_at = f.started_at;
      f.ended_steady = std::chrono::steady_clock::now();
      ++start_failures_;
      spdlog::warn("gpu-servers: the server of desired lease {} {}", spec.lease_id, f.reason);
      AddEvent(f, "gpu_server_failed", "the GPU server of lease " + spec.lease_id + " " + f.reason);
      servers_.emplace(spec.lease_id, std::move(f));
      continue;
    }
    ++started;
  }
  for (auto& [id, s] : servers_) {
    if (wanted.count(id) == 0 && (s.state == State::kStarting || s.state == State::kRunning) &&
        s.started_at < decided_before) {
      (void)DrainLocked(s);
      ++drained;
    }
  }
  if (started > 0 || drained > 0) {
    spdlog::info("gpu-servers: the cluster manager's desired set: starting {}, draining {}",
                 started, drained);
  }
}

// ---- reading ----

const char* GpuServers::StateName(State state) {
  switch (state) {
    case State::kStarting:
      return "starting";
    case State::kRunning:
      return "running";
    case State::kDraining:
      return "draining";
    case State::kStopped:
      return "stopped";
    case State::kFailed:
      return "failed";
  }
  return "failed";
}

void GpuServers::AddEvent(const Server& s, const std::string& type,
                          const std::string& description) {
  AddEvent(s.gpu_index, s.spec.gpu_uuid, s.spec.lease_id, type, description);
}

void GpuServers::AddEvent(uint32_t gpu_index, const std::string& gpu_uuid,
                          const std::string& lease_id, const std::string& type,
                          const std::string& description) {
  events_.push_back({{"at", gpu::FormatTime(std::chrono::system_clock::now())},
                     {"gpu", gpu_index},
                     {"uuid", gpu_uuid},
                     {"type", type},
                     {"xid", nullptr},
                     {"description", description},
                     {"lease_id", lease_id}});
  if (events_.size() > kMaxEvents) events_.erase(events_.begin());
}

json GpuServers::RecordJson(const Server& s) const {
  json j = {{"lease_id", s.spec.lease_id},
            {"gpu_uuid", s.spec.gpu_uuid},
            {"gpu_index", s.gpu_index},
            {"state", StateName(s.state)},
            {"address", s.address.empty() ? json(nullptr) : json(s.address)},
            {"pid", s.pid > 0 ? json(s.pid) : json(nullptr)},
            {"sm_count", s.spec.sm_count},
            {"sm_count_granted", s.sm_count_granted ? json(*s.sm_count_granted) : json(nullptr)},
            {"memory_mb", s.spec.memory_mb},
            {"started_at", gpu::FormatTime(s.started_at)}};
  if (s.ended_at) j["ended_at"] = gpu::FormatTime(*s.ended_at);
  if (!s.reason.empty() && s.state != State::kRunning && s.state != State::kStarting) {
    j["reason"] = s.reason;
  }
  return j;
}

json GpuServers::GpusJson() const {
  json list = json::array();
  for (const Capacity& c : gpus_) {
    if (!c.probed) continue;
    json g = {{"uuid", c.device.uuid},
              {"index", c.device.index},
              {"sm_count", c.sm_count},
              {"sm_granularity", c.sm_granularity},
              {"memory_total_mb", c.memory_total_mb},
              {"shared", c.shared()},
              {"mps", c.mps}};
    if (!c.mps_reason.empty()) g["mps_reason"] = c.mps_reason;
    if (c.mps == "down") {  // the leases whose servers run there without their control daemon
      json leases = json::array();
      for (const auto& [id, s] : servers_) {
        if (s.spec.gpu_uuid == c.device.uuid &&
            (s.state == State::kStarting || s.state == State::kRunning)) {
          leases.push_back(id);
        }
      }
      g["mps_servers"] = std::move(leases);
    }
    list.push_back(std::move(g));
  }
  return list;
}

Result<json> GpuServers::Get(const std::string& lease_id) const {
  MutexLock lock(mu_);
  auto it = servers_.find(lease_id);
  if (it == servers_.end())
    return NotFound("no GPU server for lease " + lease_id + " on this node");
  return RecordJson(it->second);
}

json GpuServers::List() const {
  MutexLock lock(mu_);
  json servers = json::array();
  for (const auto& [id, s] : servers_) servers.push_back(RecordJson(s));
  json gpus = GpusJson();
  // The node's own answer also names the GPUs that cannot take servers, and why (the heartbeat
  // leaves them out: the cluster places nothing there).
  for (const Capacity& c : gpus_) {
    if (c.probed) continue;
    gpus.push_back({{"uuid", c.device.uuid},
                    {"index", c.device.index},
                    {"sm_count", nullptr},
                    {"sm_granularity", nullptr},
                    {"memory_total_mb", nullptr},
                    {"shared", false},
                    {"mps", c.mps},
                    {"probe_error", c.probe_error}});
  }
  return {{"servers", servers}, {"gpus", gpus}};
}

json GpuServers::HeartbeatJson() const {
  MutexLock lock(mu_);
  json servers = json::array();
  for (const auto& [id, s] : servers_) servers.push_back(RecordJson(s));
  return {{"enabled", true}, {"servers", servers}, {"gpus", GpusJson()}};
}

json GpuServers::Events() const {
  MutexLock lock(mu_);
  return events_;
}

std::string GpuServers::MetricsText() const {
  MutexLock lock(mu_);
  std::map<std::string, int> by_state = {
      {"starting", 0}, {"running", 0}, {"draining", 0}, {"stopped", 0}, {"failed", 0}};
  for (const auto& [id, s] : servers_) ++by_state[StateName(s.state)];
  std::string out =
      "# HELP flyt_node_gpu_servers GPU servers (flyt-gpu-server, one per remote lease) by state; "
      "ended ones stay counted for 10 minutes.\n# TYPE flyt_node_gpu_servers gauge\n";
  for (const auto& [state, n] : by_state) {
    out += "flyt_node_gpu_servers{state=\"" + state + "\"} " + std::to_string(n) + "\n";
  }
  auto counter = [&out](const char* name, const char* help, uint64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
           " " + std::to_string(v) + "\n";
  };
  counter("flyt_node_gpu_server_starts_total", "GPU servers that became ready.", starts_);
  counter("flyt_node_gpu_server_start_failures_total",
          "GPU servers that did not come up (exited, timed out, could not be spawned).",
          start_failures_);
  counter("flyt_node_gpu_server_failures_total", "Running GPU servers that exited on their own.",
          failures_);
  counter("flyt_node_gpu_server_drain_kills_total",
          "Draining GPU servers killed with SIGKILL after the drain grace.", kills_);
  counter("flyt_node_gpu_server_adoptions_total", "GPU servers re-adopted from state_dir at start.",
          adopted_);
  out +=
      "# HELP flyt_node_gpu_mps MPS state of the GPUs listed in [gpu-servers] shared (1 for "
      "the current state).\n# TYPE flyt_node_gpu_mps gauge\n";
  for (const Capacity& c : gpus_) {
    if (!c.shared_configured) continue;
    out += "flyt_node_gpu_mps{gpu=\"" + std::to_string(c.device.index) + "\",uuid=\"" +
           EscapeLabel(c.device.uuid) + "\",state=\"" + c.mps + "\"} 1\n";
  }
  return out;
}

}  // namespace flyt::node
