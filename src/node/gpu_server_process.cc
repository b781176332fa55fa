// GpuServers' process side: everything that touches the flyt-gpu-server processes and their
// files. Probing the GPUs (`binary probe`) and the MPS check at Create; the state files in
// state_dir (<lease>.json record, .secret, .ready, .log and its rotated .log.N) and re-adopting
// the servers a previous node manager left running; Begin, which writes the secret and spawns a
// server (posix_spawn in its own session, a scrubbed environment); the watcher thread (Watch /
// Tick / CheckReady / Ended), which follows each server through its pidfd, reaps it, and enforces
// start_timeout_s and drain_grace_s; and the housekeeping thread (Housekeep), which watches the
// MPS control daemon and rotates the logs. The public API (Put, Drain, Reconcile, the records)
// is in gpu_servers.cc.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "common/strings.h"
#include "common/subprocess.h"
#include "node/gpu_servers.h"
#include "node/gpu_servers_internal.h"
#include "node/log_rotation.h"

extern char** environ;

namespace flyt::node {
namespace internal {

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

}  // namespace internal

namespace {

using internal::PidfdOpen;
using nlohmann::json;

// Ended records stay listed (and in heartbeats) this long, at most kMaxEnded of them.
constexpr auto kEndedKeep = std::chrono::minutes(10);
constexpr size_t kMaxEnded = 256;
constexpr auto kTick = std::chrono::milliseconds(50);
// How often the housekeeping thread looks at the logs' sizes.
constexpr auto kLogCheck = std::chrono::seconds(1);

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

std::string JoinComma(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

// `control -d` with the pipe directory, then a wait (at most 2 s) for it to answer.
Status StartMpsDaemon(const std::string& control, const std::string& dir) {
  auto out = RunCommand({"/usr/bin/env", "CUDA_MPS_PIPE_DIRECTORY=" + dir, control, "-d"});
  if (!out.ok()) return out.status();
  if (out->exit_code != 0) {
    return Unavailable(control + " -d exited with code " + std::to_string(out->exit_code) +
                       (Trim(out->stderr_text).empty()
                            ? std::string()
                            : ": " + std::string(Trim(SanitizeUtf8(out->stderr_text.substr(
                                         0, std::min<size_t>(out->stderr_text.size(), 512)))))));
  }
  for (int i = 0; i < 40 && !ProbeMpsControl(dir).answers; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  spdlog::info("gpu-servers: started the MPS control daemon ({} -d, pipes in {})", control, dir);
  return Status::Ok();
}

}  // namespace

// ---- probing ----

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
  // One control daemon serves every GPU: one watch for all the shared ones that need it, asked
  // once now (starting the daemon with mps_start) and then by the housekeeping thread.
  if (std::any_of(gpus_.begin(), gpus_.end(),
                  [](const Capacity& c) { return c.mps == "checking"; })) {
    const std::string dir = MpsPipeDir(config_);
    const std::string control = FindOnPath("nvidia-cuda-mps-control");
    std::function<Status()> start;
    if (config_.mps_start) start = [control, dir] { return StartMpsDaemon(control, dir); };
    MutexLock watch_lock(mps_mu_);
    mps_watch_ = std::make_unique<MpsWatch>([dir] { return ProbeMpsControl(dir); },
                                            std::move(start), SystemClock::Instance());
    const MpsStatus status = mps_watch_->Check();
    MutexLock lock(mu_);
    ApplyMps(status);
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
  if (FindOnPath("nvidia-cuda-mps-control").empty()) {
    cap.mps = "unavailable";
    cap.mps_reason = "nvidia-cuda-mps-control is not installed (not on PATH); GPU " +
                     std::to_string(cap.device.index) + " takes one server at a time";
    spdlog::warn("gpu-servers: {}", cap.mps_reason);
    return;
  }
  cap.mps = "checking";  // until the MPS watch's first answer, at the end of Probe
}

// ---- the MPS watch, the logs' rotation ----

void GpuServers::ApplyMps(const MpsStatus& status) {
  std::vector<std::string> affected;  // "lease (GPU n)" of the live servers on watched GPUs
  for (Capacity& cap : gpus_) {
    if (!cap.shared_configured || cap.mps == "simulated" || cap.mps == "unavailable" ||
        cap.mps == "off") {
      continue;
    }
    const std::string was = cap.mps;
    const std::string gpu = "GPU " + std::to_string(cap.device.index);
    cap.mps = status.state;
    cap.mps_reason = status.state == "running"
                         ? std::string()
                         : status.reason + "; " + gpu + " takes one server at a time";
    std::vector<std::string> leases;
    for (const auto& [id, s] : servers_) {
      if (s.spec.gpu_uuid == cap.device.uuid &&
          (s.state == State::kStarting || s.state == State::kRunning)) {
        leases.push_back(id);
        affected.push_back(id + " (" + gpu + ")");
      }
    }
    if (was == cap.mps || was == "checking") continue;  // no change, or the first answer
    if (cap.mps == "down") {
      AddEvent(cap.device.index, cap.device.uuid, "", "gpu_mps_down",
               status.reason + "; " + gpu + " takes no new shared lease until it answers" +
                   (leases.empty() ? std::string()
                                   : "; its running GPU servers (leases " + JoinComma(leases) +
                                         ") are left running"));
      events_.back()["lease_id"] = nullptr;
    } else if (cap.mps == "running") {
      AddEvent(cap.device.index, cap.device.uuid, "", "gpu_mps_up",
               "the MPS control daemon answers again; " + gpu + " takes shared leases again");
      events_.back()["lease_id"] = nullptr;
    }
  }
  if (!status.changed) return;
  if (status.state == "running") {
    spdlog::info("gpu-servers: the MPS control daemon answers (pipes in {})", MpsPipeDir(config_));
  } else {
    spdlog::warn("gpu-servers: {}; the shared GPUs take one server at a time{}", status.reason,
                 affected.empty()
                     ? std::string()
                     : "; GPU servers still running there: leases " + JoinComma(affected));
  }
}

void GpuServers::CheckMpsNow() {
  MutexLock watch_lock(mps_mu_);
  if (!mps_watch_) return;
  const MpsStatus status = mps_watch_->Check();  // without mu_: it may start the daemon
  MutexLock lock(mu_);
  ApplyMps(status);
}

void GpuServers::RotateLogsNow() {
  std::vector<std::string> ids;
  {
    MutexLock lock(mu_);
    for (const auto& [id, s] : servers_) {
      if (s.state == State::kStarting || s.state == State::kRunning ||
          s.state == State::kDraining) {
        ids.push_back(id);
      }
    }
  }
  // Without mu_: a copy of up to log_max_bytes per log.
  for (const std::string& id : ids) {
    auto rotated = RotateLog(Path(id, ".log"), config_.log_max_bytes, config_.log_files);
    if (!rotated.ok()) {
      spdlog::warn("gpu-servers: cannot rotate the log of lease {}: {}", id,
                   rotated.status().message());
    }
  }
}

void GpuServers::Housekeep() {
  auto next_mps = std::chrono::steady_clock::now() + config_.mps_check_interval;
  MutexLock lock(mu_);
  while (!stopping_) {
    const auto now = std::chrono::steady_clock::now();
    lock.Unlock();
    RotateLogsNow();
    if (now >= next_mps) {
      CheckMpsNow();
      next_mps = now + config_.mps_check_interval;
    }
    lock.Lock();
    const auto until = std::min(now + kLogCheck, next_mps);
    while (!stopping_ && std::chrono::steady_clock::now() < until) changed_.WaitUntil(mu_, until);
  }
}

// ---- state files, re-adoption ----

std::string GpuServers::Path(const std::string& lease_id, const char* suffix) const {
  return config_.state_dir + "/" + lease_id + suffix;
}

void GpuServers::RemoveFiles(const std::string& lease_id) const {
  for (const char* suffix :
       {".json", ".json.tmp", ".secret", ".ready", ".log", ".log.1.tmp", ".sock"}) {
    unlink(Path(lease_id, suffix).c_str());
  }
  for (int i = 1; i <= config_.log_files; ++i) {
    unlink((Path(lease_id, ".log.") + std::to_string(i)).c_str());
  }
}

std::string GpuServers::LogTail(const std::string& lease_id, size_t max_bytes) const {
  // Only the end is read: a server that logged for days has a large file.
  auto tail_of = [](const std::string& path, size_t bytes) -> std::string {
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    struct stat st {};
    if (!fd.valid() || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
    const off_t size = st.st_size;
    const off_t from = size > static_cast<off_t>(bytes) ? size - static_cast<off_t>(bytes) : 0;
    std::string tail(static_cast<size_t>(size - from), '\0');
    const ssize_t n = pread(fd.get(), tail.data(), tail.size(), from);
    tail.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return tail;
  };
  std::string tail = tail_of(Path(lease_id, ".log"), max_bytes);
  // Just rotated: the rest from the newest old file.
  if (tail.size() < max_bytes && config_.log_files > 0) {
    tail = tail_of(Path(lease_id, ".log.1"), max_bytes - tail.size()) + tail;
  }
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
    s.address = j.value("address", FormatHostPort(config_.listen_host, s.port));
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
                                   FormatHostPort(config_.listen_host, port),
                                   "--memory-limit-mb",
                                   std::to_string(spec.memory_mb),
                                   "--secret-file",
                                   Path(id, ".secret"),
                                   "--ready-file",
                                   Path(id, ".ready"),
                                   // The server's own drain ends before the node's SIGKILL.
                                   "--stop-grace",
                                   std::to_string(std::max<int64_t>(0, config_.drain_grace.count() - 2))};
  // A Unix socket beside the TCP one: a program on this host that reaches the server over TCP is
  // told of it (LocalEndpoint) and moves there, onto shared memory. Only where the path fits in a
  // socket address (108 bytes).
  if (const std::string sock = Path(id, ".sock"); sock.size() < 100) {
    argv.insert(argv.end(), {"--listen", "unix:" + sock});
  }
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
  s.address = FormatHostPort(config_.listen_host, port);
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

}  // namespace flyt::node
