#include "node/gpu_servers.h"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "common/json_fields.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "gpu/json.h"

extern char** environ;

namespace flyt::node {
namespace {

using nlohmann::json;

// Ended records stay listed (and in heartbeats) this long, at most kMaxEnded of them.
constexpr auto kEndedKeep = std::chrono::minutes(10);
constexpr size_t kMaxEnded = 256;
constexpr size_t kMaxEvents = 256;
constexpr auto kTick = std::chrono::milliseconds(50);

Status Conflict(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message)).WithReason("conflict");
}

bool ValidLeaseId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

// /proc/PID/stat field 22 (start time in clock ticks since boot); nullopt when the process is
// gone. The comm field may hold spaces and parentheses: fields are counted after the last ')'.
std::optional<uint64_t> StartTicks(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto text = ReadFile("/proc/" + std::to_string(pid) + "/stat", 64 << 10);
  if (!text.ok()) return std::nullopt;
  const size_t close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string_view> fields;
  for (std::string_view f : Split(std::string_view(*text).substr(close + 1), ' ')) {
    if (!f.empty()) fields.push_back(f);
  }
  // fields[0] is field 3 (state); field 22 is fields[19]. A zombie has exited.
  if (fields.size() < 20 || fields[0] == "Z" || fields[0] == "X") return std::nullopt;
  auto v = ParseUint(fields[19]);
  if (!v) return std::nullopt;
  return *v;
}

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// "exited with code 3" / "killed by signal 9 (SIGKILL)" from waitid's siginfo.
std::string HowEnded(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return "exited with code " + std::to_string(info.si_status);
  const char* name = sigabbrev_np(info.si_status);
  return "killed by signal " + std::to_string(info.si_status) +
         (name != nullptr ? std::string(" (SIG") + name + ")" : std::string());
}

// Reaps `pid` when it is this process's child (and has exited): how it ended; nullopt when it is
// not our child (a server adopted from an earlier node manager: its exit status is lost).
std::optional<std::string> Reap(pid_t pid, bool block) {
  siginfo_t info{};
  int flags = WEXITED | (block ? 0 : WNOHANG);
  while (true) {
    int rc = waitid(P_PID, static_cast<id_t>(pid), &info, flags);
    if (rc == 0 && info.si_pid == pid) return HowEnded(info);
    if (rc == 0) return "exited";  // WNOHANG and not yet: treat as gone (pidfd said so)
    if (errno == EINTR) continue;
    return std::nullopt;
  }
}

Status WriteFile0600(const std::string& path, const std::string& content) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoError("cannot create " + path, errno);
  if (fchmod(fd.get(), 0600) != 0) return ErrnoError("cannot chmod " + path, errno);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write " + path, errno);
    done += static_cast<size_t>(n);
  }
  if (fsync(fd.get()) != 0) return ErrnoError("cannot sync " + path, errno);
  return Status::Ok();
}

// Creates `dir` (and its parents, 0755) with mode 0700 when missing; refuses one that is not a
// directory of ours, is group- or world-writable, or cannot be written.
Status OpenStateDir(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      const std::string part = dir.substr(0, i);
      if (mkdir(part.c_str(), i == dir.size() ? 0700 : 0755) != 0 && errno != EEXIST) {
        return ErrnoError("[gpu-servers] state_dir: cannot create " + part, errno);
      }
    }
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return ErrnoError("[gpu-servers] state_dir " + dir, errno);
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument("[gpu-servers] state_dir " + dir + " is not a directory");
  }
  if (st.st_uid != geteuid()) {
    return InvalidArgument("[gpu-servers] state_dir " + dir + " belongs to another user (uid " +
                           std::to_string(st.st_uid) + ")");
  }
  if ((st.st_mode & 022) != 0) {
    return InvalidArgument(
        "[gpu-servers] state_dir " + dir +
        " is group- or world-writable: it holds the leases' secrets (chmod 0700)");
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return ErrnoError("[gpu-servers] state_dir " + dir + " is not writable", errno);
  }
  return Status::Ok();
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

std::string HostPort(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
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

// Starts `argv` (argv[0] an absolute path) in a session of its own with `env`, stdin /dev/null
// and stdout/stderr into `log_fd`, no descriptor of ours but those, no signal blocked and default
// handlers (the node manager blocks SIGTERM for sigwait: a server must still get it).
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    int log_fd) {
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig = 1; sig < 32; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaddset(&defaults, sig);
  }
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return ErrnoError("cannot start " + argv[0], rc);
  return pid;
}

// The environment of a server: ours without what it must not inherit (the node's token, a
// client's secret, a GPU mask), with CUDA ordinals in NVML's order.
std::vector<std::string> ServerEnv(const std::string& mps_pipe_dir) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view v(*e);
    const std::string_view name = v.substr(0, v.find('='));
    if (name == "FLYT_TOKEN" || name == "FLYT_SERVER_SECRET" || name == "FLYT_SERVER_SECRET_FILE" ||
        name == "CUDA_VISIBLE_DEVICES" || name == "CUDA_DEVICE_ORDER" ||
        (!mps_pipe_dir.empty() && name == "CUDA_MPS_PIPE_DIRECTORY")) {
      continue;
    }
    env.emplace_back(v);
  }
  env.push_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
  if (!mps_pipe_dir.empty()) env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + mps_pipe_dir);
  return env;
}

std::string MpsPipeDir(const GpuServersConfig& c) {
  if (!c.mps_pipe_dir.empty()) return c.mps_pipe_dir;
  const char* env = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  return env != nullptr && *env != '\0' ? env : "/tmp/nvidia-mps";
}

bool MpsPipePresent(const std::string& dir) {
  struct stat st {};
  return stat((dir + "/control").c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
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

// ---- construction, probing, adoption ----

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
  FLYT_RETURN_IF_ERROR(OpenStateDir(config.state_dir));
  std::unique_ptr<GpuServers> s(new GpuServers(std::move(config), std::move(binary)));
  s->Probe(std::move(gpus));
  s->Adopt();
  s->watcher_ = std::thread([p = s.get()] { p->Watch(); });
  return s;
}

GpuServers::~GpuServers() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    changed_.NotifyAll();
  }
  if (watcher_.joinable()) watcher_.join();
}

void GpuServers::Probe(std::vector<GpuDevice> gpus) {
  for (const GpuDevice& d : gpus) {
    Capacity cap;
    cap.device = d;
    cap.shared_configured =
        config_.shared_all ||
        std::find(config_.shared.begin(), config_.shared.end(), d.uuid) != config_.shared.end();
    CommandOptions options;
    options.timeout = std::chrono::seconds(60);
    options.max_output_bytes = 1 << 20;
    auto out = RunCommand(
        {"/usr/bin/env", "-u", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER=PCI_BUS_ID", binary_,
         "probe", "--backend", config_.backend, "--device", std::to_string(d.index)},
        options);
    if (!out.ok()) {
      cap.probe_error = out.status().message();
    } else if (out->exit_code != 0) {
      cap.probe_error = "exited with code " + std::to_string(out->exit_code) + ": " +
                        std::string(Trim(SanitizeUtf8(out->stderr_text.substr(
                            out->stderr_text.size() > 1024 ? out->stderr_text.size() - 1024 : 0))));
    } else {
      try {
        json j = json::parse(out->stdout_text);
        cap.sm_count = j.at("sm_count_total").get<uint32_t>();
        cap.memory_total_mb = j.at("memory_total_mb").get<uint64_t>();
        cap.sm_granularity = j.value("sm_granularity", 1u);
        cap.name = j.value("name", std::string());
        cap.probed = cap.sm_count > 0 && cap.memory_total_mb > 0;
        if (!cap.probed) cap.probe_error = "the probe reported no SMs or no memory";
      } catch (const json::exception& e) {
        cap.probe_error = std::string("unreadable probe output: ") + e.what();
      }
    }
    if (!cap.probed) {
      spdlog::warn("gpu-servers: GPU {} ({}) cannot take GPU servers: `{} probe` failed: {}",
                   d.index, d.uuid, binary_, cap.probe_error);
    } else {
      spdlog::info("gpu-servers: GPU {} ({}): {} SMs (granularity {}), {} MiB", d.index, d.uuid,
                   cap.sm_count, cap.sm_granularity, cap.memory_total_mb);
    }
    if (cap.shared_configured) CheckMps(cap);
    gpus_.push_back(std::move(cap));
  }
  for (const std::string& uuid : config_.shared) {
    if (FindGpu(uuid) == nullptr) {
      spdlog::warn("gpu-servers: [gpu-servers] shared names {}, which this node does not have",
                   uuid);
    }
  }
}

void GpuServers::CheckMps(Capacity& cap) {
  if (config_.backend == "sim") {
    // The simulated device has no MPS: its servers share it by the server's own accounting.
    cap.mps = "simulated";
    return;
  }
  const std::string dir = MpsPipeDir(config_);
  const std::string control = FindOnPath("nvidia-cuda-mps-control");
  if (control.empty()) {
    cap.mps = "unavailable";
    cap.mps_reason = "nvidia-cuda-mps-control is not installed (not on PATH); GPU " +
                     std::to_string(cap.device.index) + " takes one server at a time";
    return;
  }
  if (!MpsPipePresent(dir) && config_.mps_start) {
    auto out = RunCommand({"/usr/bin/env", "CUDA_MPS_PIPE_DIRECTORY=" + dir, control, "-d"});
    if (!out.ok() || out->exit_code != 0) {
      spdlog::warn("gpu-servers: cannot start the MPS control daemon ({} -d): {}", control,
                   out.ok() ? Trim(out->stderr_text) : out.status().message());
    } else {
      for (int i = 0; i < 40 && !MpsPipePresent(dir); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      spdlog::info("gpu-servers: started the MPS control daemon (pipes in {})", dir);
    }
  }
  if (MpsPipePresent(dir)) {
    cap.mps = "running";
  } else {
    cap.mps = "not_running";
    cap.mps_reason = "no MPS control daemon: no pipe " + dir + "/control (start it with " +
                     "nvidia-cuda-mps-control -d, or set [gpu-servers] mps_start = true); GPU " +
                     std::to_string(cap.device.index) + " takes one server at a time";
  }
  if (cap.mps != "running") spdlog::warn("gpu-servers: {}", cap.mps_reason);
}

const GpuServers::Capacity* GpuServers::FindGpu(const std::string& uuid) const {
  for (const Capacity& c : gpus_) {
    if (c.device.uuid == uuid) return &c;
  }
  return nullptr;
}

std::string GpuServers::Path(const std::string& lease_id, const char* suffix) const {
  return config_.state_dir + "/" + lease_id + suffix;
}

void GpuServers::RemoveFiles(const std::string& lease_id) const {
  for (const char* suffix : {".json", ".json.tmp", ".secret", ".ready", ".log"}) {
    unlink(Path(lease_id, suffix).c_str());
  }
}

std::string GpuServers::LogTail(const std::string& lease_id, size_t max_bytes) const {
  // Only the end is read: a server that logged for days has a large file.
  UniqueFd fd(open(Path(lease_id, ".log").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  if (!fd.valid() || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  const off_t size = st.st_size;
  const off_t from =
      size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
  std::string tail(static_cast<size_t>(size - from), '\0');
  const ssize_t n = pread(fd.get(), tail.data(), tail.size(), from);
  tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return std::string(Trim(SanitizeUtf8(tail)));
}

Result<std::string> GpuServers::ReadState(const std::string& id, Server& s) const {
  FLYT_ASSIGN_OR_RETURN(const std::string text, ReadFile(Path(id, ".json"), 1 << 20));
  try {
    const json j = json::parse(text);
    FLYT_ASSIGN_OR_RETURN(
        s.spec, GpuServerSpecFromJson(json{{"lease_id", j.at("lease_id")},
                                           {"gpu_uuid", j.at("gpu_uuid")},
                                           {"memory_mb", j.at("memory_mb")},
                                           {"sm_count", j.at("sm_count")},
                                           {"secret", j.at("secret")},
                                           {"owner", j.value("owner", std::string())},
                                           {"expires_at", j.value("expires_at", json())}}));
    if (s.spec.lease_id != id) return InvalidArgument("its lease_id differs from the file name");
    s.gpu_index = j.at("gpu_index").get<uint32_t>();
    s.pid = j.at("pid").get<pid_t>();
    s.start_ticks = j.at("start_ticks").get<uint64_t>();
    s.port = j.at("port").get<int>();
    s.address = j.value("address", HostPort(config_.listen_host, s.port));
    if (j.contains("sm_count_granted") && j["sm_count_granted"].is_number()) {
      s.sm_count_granted = j["sm_count_granted"].get<uint32_t>();
    }
    s.started_at = std::chrono::system_clock::time_point(
        std::chrono::milliseconds(j.value("started_at_ms", int64_t{0})));
    return j.value("state", std::string("running"));
  } catch (const json::exception& e) {
    return InvalidArgument(e.what());
  }
}

void GpuServers::Adopt() {
  DIR* d = opendir(config_.state_dir.c_str());
  if (d == nullptr) return;
  std::set<std::string> records, others;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const size_t dot = name.find('.', 1);
    const std::string stem = name.substr(0, dot);
    if (dot != std::string::npos && name.substr(dot) == ".json") {
      records.insert(stem);
    } else {
      others.insert(stem);
    }
  }
  closedir(d);
  MutexLock lock(mu_);
  for (const std::string& id : records) {
    Server s;
    auto read = ReadState(id, s);
    if (!read.ok()) {
      spdlog::warn("gpu-servers: {} is unreadable ({}); removed", Path(id, ".json"),
                   read.status().message());
      RemoveFiles(id);
      continue;
    }
    const std::string state = *read;
    const bool alive = s.pid > 0 && StartTicks(s.pid) == s.start_ticks;
    if (alive && state == "starting" && access(Path(id, ".ready").c_str(), F_OK) != 0) {
      kill(-s.pid, SIGKILL);
      kill(s.pid, SIGKILL);
      Reap(s.pid, /*block=*/false);
      s.state = State::kFailed;
      s.reason = "was still starting when the node manager stopped; killed";
    } else if (alive) {
      s.pidfd.Reset(PidfdOpen(s.pid));
      s.state = state == "draining" ? State::kDraining : State::kRunning;
      if (state == "starting") {  // ready meanwhile: read its ready file on the next tick
        s.state = State::kStarting;
        s.ready_deadline = std::chrono::steady_clock::now();
      }
      ++adopted_;
      spdlog::info("gpu-servers: re-adopted the server of lease {} (pid {}, {})", id, s.pid,
                   s.address);
      AddEvent(s, "gpu_server_adopted",
               "the GPU server of lease " + id + " (pid " + std::to_string(s.pid) +
                   ") was re-adopted after a node manager restart");
      if (s.state == State::kDraining) {
        s.state = State::kRunning;
        (void)DrainLocked(s);
      }
      servers_.emplace(id, std::move(s));
      continue;
    } else {
      s.state = state == "draining" ? State::kStopped : State::kFailed;
      s.reason = state == "draining" ? "drained" : "exited while the node manager was not running";
    }
    s.ended_at = std::chrono::system_clock::now();
    s.ended_steady = std::chrono::steady_clock::now();
    if (s.state == State::kFailed) {
      ++failures_;
      spdlog::warn("gpu-servers: the server of lease {} (pid {}) {}", id, s.pid, s.reason);
      AddEvent(s, "gpu_server_failed", "the GPU server of lease " + id + " " + s.reason);
    }
    RemoveFiles(id);
    servers_.emplace(id, std::move(s));
  }
  for (const std::string& id : others) {
    if (records.count(id) == 0) RemoveFiles(id);
  }
}

// ---- starting ----

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
    if (s.spec.gpu_uuid != cap.device.uuid ||
        (s.state != State::kStarting && s.state != State::kRunning &&
         s.state != State::kDraining)) {
      continue;
    }
    if (!cap.shared()) {
      return Conflict(gpu + " is not shared" +
                      (cap.shared_configured ? " (MPS is " + cap.mps + ")" : std::string()) +
                      " and already serves lease " + id);
    }
    sms += s.spec.sm_count;
    memory += s.spec.memory_mb;
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

Status GpuServers::Begin(const GpuServerSpec& spec) {
  const Capacity* cap = FindGpu(spec.gpu_uuid);
  if (cap == nullptr) {
    return InvalidArgument("no GPU " + spec.gpu_uuid + " on this node");
  }
  if (!cap->probed) {
    return Unavailable("GPU " + std::to_string(cap->device.index) + " (" + cap->device.uuid +
                       ") cannot take GPU servers: its probe failed: " + cap->probe_error);
  }
  FLYT_RETURN_IF_ERROR(CheckRoom(spec, *cap));
  FLYT_ASSIGN_OR_RETURN(const int port, FreePort());
  const std::string& id = spec.lease_id;
  RemoveFiles(id);
  FLYT_RETURN_IF_ERROR(WriteFile0600(Path(id, ".secret"), spec.secret + "\n"));
  UniqueFd log(open(Path(id, ".log").c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!log.valid()) {
    Status s = ErrnoError("cannot create " + Path(id, ".log"), errno);
    RemoveFiles(id);
    return s;
  }
  std::vector<std::string> argv = {binary_,
                                   "--backend",
                                   config_.backend,
                                   "--device",
                                   std::to_string(cap->device.index),
                                   "--listen",
                                   HostPort(config_.listen_host, port),
                                   "--memory-limit-mb",
                                   std::to_string(spec.memory_mb),
                                   "--secret-file",
                                   Path(id, ".secret"),
                                   "--ready-file",
                                   Path(id, ".ready"),
                                   // The server's own drain ends before the node's SIGKILL.
                                   "--stop-grace",
                                   std::to_string(std::max<int64_t>(0, config_.drain_grace.count() - 2))};
  // An SM share needs MPS (or the simulated device); a GPU that is not shared serves its one
  // lease with all of its SMs, and a driver server given --sm-count without MPS would refuse
  // to start.
  if (cap->shared()) {
    argv.insert(argv.end(), {"--sm-count", std::to_string(spec.sm_count)});
  }
  argv.insert(argv.end(), config_.extra_args.begin(), config_.extra_args.end());
  auto pid = Spawn(argv, ServerEnv(cap->shared() ? MpsPipeDir(config_) : std::string()), log.get());
  if (!pid.ok()) {
    RemoveFiles(id);
    return Unavailable(pid.status().message());
  }
  Server s;
  s.spec = spec;
  s.gpu_index = cap->device.index;
  s.port = port;
  s.address = HostPort(config_.listen_host, port);
  s.pid = *pid;
  s.pidfd.Reset(PidfdOpen(*pid));
  s.start_ticks = StartTicks(*pid).value_or(0);
  s.started_at = std::chrono::system_clock::now();
  s.ready_deadline = std::chrono::steady_clock::now() + config_.start_timeout;
  // Recorded before it can be reported running: a node manager that dies now re-adopts or
  // kills it, never forgets it.
  if (Status w = WriteState(s); !w.ok()) {
    kill(-s.pid, SIGKILL);
    Reap(s.pid, /*block=*/true);
    RemoveFiles(id);
    return w;
  }
  spdlog::info(
      "gpu-servers: starting the server of lease {} on GPU {} at {} (pid {}, {} SMs, {} "
      "MiB)",
      id, s.gpu_index, s.address, s.pid, spec.sm_count, spec.memory_mb);
  servers_.erase(id);
  servers_.emplace(id, std::move(s));
  return Status::Ok();
}

Status GpuServers::WriteState(const Server& s) const {
  json j = {{"lease_id", s.spec.lease_id},
            {"gpu_uuid", s.spec.gpu_uuid},
            {"gpu_index", s.gpu_index},
            {"memory_mb", s.spec.memory_mb},
            {"sm_count", s.spec.sm_count},
            {"secret", s.spec.secret},
            {"owner", s.spec.owner},
            {"expires_at", s.spec.expires_at},
            {"state", StateName(s.state)},
            {"pid", s.pid},
            {"start_ticks", s.start_ticks},
            {"port", s.port},
            {"address", s.address},
            {"sm_count_granted", s.sm_count_granted ? json(*s.sm_count_granted) : json(nullptr)},
            {"started_at_ms",
             std::chrono::duration_cast<std::chrono::milliseconds>(s.started_at.time_since_epoch())
                 .count()}};
  const std::string tmp = Path(s.spec.lease_id, ".json.tmp");
  FLYT_RETURN_IF_ERROR(WriteFile0600(tmp, j.dump() + "\n"));
  if (rename(tmp.c_str(), Path(s.spec.lease_id, ".json").c_str()) != 0) {
    Status st = ErrnoError("cannot rename " + tmp, errno);
    unlink(tmp.c_str());
    return st;
  }
  return Status::Ok();
}

Result<GpuServers::PutResult> GpuServers::Put(const GpuServerSpec& spec) {
  MutexLock lock(mu_);
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
    while (!stopping_ && std::chrono::steady_clock::now() < until && DrainingOn(spec.gpu_uuid)) {
      const Capacity* cap = FindGpu(spec.gpu_uuid);
      if (cap == nullptr || CheckRoom(spec, *cap).ok()) break;
      changed_.WaitFor(mu_, std::chrono::milliseconds(50));
    }
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

// ---- watching ----

void GpuServers::Watch() {
  MutexLock lock(mu_);
  while (!stopping_) {
    Tick();
    changed_.WaitFor(mu_, kTick);
  }
}

void GpuServers::CheckReady(Server& s) {
  auto text = ReadFile(Path(s.spec.lease_id, ".ready"), 64 << 10);
  if (!text.ok()) return;
  json j;
  try {
    j = json::parse(*text);
  } catch (const json::exception&) {
    return;  // written with tmp + rename: a torn file is not ours to fix; the deadline decides
  }
  if (j.is_object()) {
    if (j.contains("address") && j["address"].is_string()) s.address = j["address"];
    if (j.contains("sm_count_granted") && j["sm_count_granted"].is_number_unsigned()) {
      s.sm_count_granted = j["sm_count_granted"].get<uint32_t>();
    }
  }
  s.state = State::kRunning;
  if (Status w = WriteState(s); !w.ok()) {
    spdlog::error("gpu-servers: cannot record the server of lease {}: {}", s.spec.lease_id,
                  w.message());
  }
  ++starts_;
  spdlog::info("gpu-servers: the server of lease {} is ready at {} (pid {})", s.spec.lease_id,
               s.address, s.pid);
  AddEvent(s, "gpu_server_started",
           "the GPU server of lease " + s.spec.lease_id + " is ready at " + s.address);
  changed_.NotifyAll();
}

void GpuServers::Ended(Server& s, const std::optional<std::string>& reaped) {
  const std::string& id = s.spec.lease_id;
  const State was = s.state;
  if (was == State::kDraining) {
    s.state = State::kStopped;
    s.reason = s.killed ? "drained: killed with SIGKILL after the " +
                              std::to_string(config_.drain_grace.count()) + " s drain grace"
               : reaped ? "drained (" + *reaped + ")"
                        : "drained";
    spdlog::info("gpu-servers: the server of lease {} stopped: {}", id, s.reason);
    AddEvent(s, "gpu_server_stopped", "the GPU server of lease " + id + " stopped: " + s.reason);
  } else {
    const std::string tail = LogTail(id, 2048);
    const std::string how =
        reaped.value_or("exited (exit status unknown: started by an earlier node manager)");
    s.state = State::kFailed;
    if (was == State::kStarting) {
      ++start_failures_;
      s.reason =
          how + " before it was ready" + (tail.empty() ? std::string() : "; its output: " + tail);
    } else {
      ++failures_;
      std::string last =
          tail.substr(tail.rfind('\n') == std::string::npos ? 0 : tail.rfind('\n') + 1);
      if (last.size() > 200) last = last.substr(last.size() - 200);
      s.reason = how + (last.empty() ? std::string() : " (last output: " + last + ")");
    }
    spdlog::warn("gpu-servers: the server of lease {} (pid {}) {}{}", id, s.pid, s.reason,
                 was == State::kStarting || tail.empty() ? std::string()
                                                         : "; its output ends with:\n" + tail);
    AddEvent(s, "gpu_server_failed", "the GPU server of lease " + id + " " + s.reason);
  }
  s.ended_at = std::chrono::system_clock::now();
  s.ended_steady = std::chrono::steady_clock::now();
  s.pidfd.Reset();
  RemoveFiles(id);
  changed_.NotifyAll();
}

void GpuServers::Tick() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [id, s] : servers_) {
    if (s.state != State::kStarting && s.state != State::kRunning && s.state != State::kDraining) {
      continue;
    }
    bool exited;
    if (s.pidfd.valid()) {
      pollfd p{s.pidfd.get(), POLLIN, 0};
      exited = poll(&p, 1, 0) > 0;
    } else {
      exited = StartTicks(s.pid) != s.start_ticks;
    }
    if (exited) {
      // Its process group may hold its children still: they go with it (the pid cannot be
      // reused before the reap below; for an adopted server it might be, so not then).
      siginfo_t peek{};
      const bool child =
          waitid(P_PID, static_cast<id_t>(s.pid), &peek, WEXITED | WNOHANG | WNOWAIT) == 0;
      if (child) kill(-s.pid, SIGKILL);
      Ended(s, Reap(s.pid, /*block=*/false));
      continue;
    }
    if (s.state == State::kStarting) {
      if (access(Path(id, ".ready").c_str(), F_OK) == 0) CheckReady(s);
      if (s.state == State::kStarting && now >= s.ready_deadline) {
        kill(-s.pid, SIGKILL);
        kill(s.pid, SIGKILL);
        (void)Reap(s.pid, /*block=*/true);
        const std::string tail = LogTail(id, 2048);
        ++start_failures_;
        s.state = State::kFailed;
        s.reason = "did not write its ready file within " +
                   std::to_string(config_.start_timeout.count()) + " s ([gpu-servers] " +
                   "start_timeout_s); killed" +
                   (tail.empty() ? std::string("; it printed nothing") : "; its output: " + tail);
        spdlog::warn("gpu-servers: the server of lease {} (pid {}) {}", id, s.pid, s.reason);
        AddEvent(s, "gpu_server_failed", "the GPU server of lease " + id + " " + s.reason);
        s.ended_at = std::chrono::system_clock::now();
        s.ended_steady = now;
        s.pidfd.Reset();
        RemoveFiles(id);
        changed_.NotifyAll();
      }
    } else if (s.state == State::kDraining && !s.killed && now >= s.kill_at) {
      spdlog::warn(
          "gpu-servers: the server of lease {} (pid {}) is still up {} s after SIGTERM: "
          "SIGKILL",
          id, s.pid, config_.drain_grace.count());
      kill(-s.pid, SIGKILL);
      kill(s.pid, SIGKILL);
      s.killed = true;
      ++kills_;
    }
  }
  // Ended records: kept a while for the heartbeat and the API, then forgotten.
  size_t ended = 0;
  for (auto it = servers_.begin(); it != servers_.end();) {
    const bool done = it->second.state == State::kStopped || it->second.state == State::kFailed;
    if (done && now - it->second.ended_steady > kEndedKeep) {
      it = servers_.erase(it);
      continue;
    }
    ended += done ? 1 : 0;
    ++it;
  }
  while (ended > kMaxEnded) {
    auto oldest = servers_.end();
    for (auto it = servers_.begin(); it != servers_.end(); ++it) {
      const bool done = it->second.state == State::kStopped || it->second.state == State::kFailed;
      if (done &&
          (oldest == servers_.end() || it->second.ended_steady < oldest->second.ended_steady)) {
        oldest = it;
      }
    }
    servers_.erase(oldest);
    --ended;
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
  events_.push_back({{"at", gpu::FormatTime(std::chrono::system_clock::now())},
                     {"gpu", s.gpu_index},
                     {"uuid", s.spec.gpu_uuid},
                     {"type", type},
                     {"xid", nullptr},
                     {"description", description},
                     {"lease_id", s.spec.lease_id}});
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
