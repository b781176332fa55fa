// Server's client half (see server.h): how each client is served once its hello is accepted — a
// thread of this process (Isolation::kThread) or a process forked for it (kProcess), which keeps
// only its own descriptors — and how ended threads and processes are reaped, a respawn is
// granted, and the client processes are stopped; and ProbeBackend, the short-lived process that
// checks the device. server.cc has the listener, the hellos, the hand-over of a migrated client
// and Stop/Drain.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <spdlog/details/console_globals.h>
#include <spdlog/spdlog.h>
#include <thread>

#include "remote_server/connection.h"
#include "remote_server/server.h"

namespace flyt::remote {

namespace {
constexpr int kRespawnExitCode = ClientConnection::kRespawnExitCode;
}  // namespace

// The console sinks' lock is spdlog's, process-wide: another thread (main, logging "SIGTERM
// received") may hold it while the acceptor forks, and the child would block on its first log
// line for ever. Held across every fork, it is never inherited taken.
void GuardLoggerAcrossFork() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork([] { spdlog::details::console_mutex::mutex().lock(); },
                     [] { spdlog::details::console_mutex::mutex().unlock(); },
                     [] { spdlog::details::console_mutex::mutex().unlock(); });
  });
}

void Server::StartClientThread(ClientEntry& entry) {
  uint64_t id = entry.id;
  int raw = entry.fd;
  ClientSlot* slot = entry.slot;
  auto handoff = std::make_shared<UniqueFd>(std::move(entry.handoff_peer));
  entry.thread = std::thread([this, raw, id, slot, hello = entry.hello, shm = entry.shm,
                              handoff] {
    try {
      ClientConnection session(*this, backend_, nullptr, raw, id, slot, hello, shm,
                               std::nullopt, std::move(*handoff));
      session.Run();
    } catch (const std::exception& e) {
      // Out of host memory for this client's buffers, say: it alone loses its connection.
      spdlog::error("client {}: closing the connection: {}", id, e.what());
      ::shutdown(raw, SHUT_RDWR);
    }
    MutexLock done(mu_);
    auto it = clients_.find(id);
    if (it == clients_.end()) return;
    it->second.finished = true;
    finished_.push_back(id);
  });
}

bool Server::StartClientProcess(ClientEntry& entry) {
  pid_t pid = ::fork();
  if (pid < 0) {
    spdlog::error("client {}: cannot start its process: {}", entry.id, std::strerror(errno));
    return false;
  }
  if (pid == 0) RunClientProcess(entry.id);
  entry.pid = pid;
  entry.handoff_peer.Reset();  // the child's end
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    entry.pidfd.Reset(pidfd);
  } else {
    // Kernels before 5.3: the acceptor's half-second poll timeout reaps it instead.
    spdlog::debug("pidfd_open: {}", std::strerror(errno));
  }
  spdlog::debug("client {}: served by process {}", entry.id, pid);
  return true;
}

namespace {
void CloseAllFdsExcept(std::vector<int> keep);
std::string DescribeExit(int status);
}  // namespace

// In the child, on the acceptor thread (the only thread the child has). It owns nothing of the
// server process but the client's socket and the shared table; it leaves with _exit, so no
// destructor of the parent's objects (listeners, socket files) runs here.
void Server::RunClientProcess(uint64_t id) {
  // Die with the server process: a client process must not outlive it holding the device.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != server_pid_) ::_exit(1);
  std::string name = "flyt-client-" + std::to_string(id);
  ::prctl(PR_SET_NAME, name.c_str());
  int fd = -1;
  ClientSlot* slot = nullptr;
  ReceivedHello hello;
  std::shared_ptr<ShmOffer> shm;
  UniqueFd handoff;
  if (auto it = clients_.find(id); it != clients_.end()) {
    fd = it->second.fd;
    slot = it->second.slot;
    hello = it->second.hello;
    shm = it->second.shm;
    handoff = std::move(it->second.handoff_peer);
  }
  // Everything else this process inherited (listeners, other clients' connections, whatever
  // the program embedding the server holds) is not this client's to keep open: a peer whose
  // socket stayed open in a sibling would never see its connection end.
  std::vector<int> keep = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, fd};
  if (launch_log_) keep.push_back(launch_log_->fd());
  if (handoff.valid()) keep.push_back(handoff.get());
  if (shm) {
    keep.insert(keep.end(),
                {shm->fds.memfd.get(), shm->fds.server_wake.get(), shm->fds.client_wake.get()});
  }
  CloseAllFdsExcept(keep);
  // The termination signals stay blocked, as in the server process: the server ends a client
  // process by shutting its connection down (the process then frees everything and exits), or
  // with SIGKILL. The session opens the device once the client's hello is accepted.
  try {
    ClientConnection session(*this, nullptr, &factory_, fd, id, slot, std::move(hello), shm,
                             ClientRegistry::TakeRespawn(slot), std::move(handoff));
    session.Run();
  } catch (const std::exception& e) {
    spdlog::error("client {}: closing the connection: {}", id, e.what());
    if (std::shared_ptr<spdlog::logger> logger = spdlog::default_logger()) logger->flush();
    ::_exit(1);
  }
  if (std::shared_ptr<spdlog::logger> logger = spdlog::default_logger()) logger->flush();
  ::_exit(0);
}

void Server::Depart(ClientEntry& entry) {
  uint64_t held = registry_->Depart(entry.slot);
  if (held != 0) {
    spdlog::warn("client {}: {} MiB it held went back to the memory account", entry.id,
                 (held + (1 << 20) - 1) >> 20);
  }
  ::close(entry.fd);
  entry.claim_fd.Reset();
}

void Server::ReapFinished() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(mu_);
    for (uint64_t id : finished_) {
      auto it = clients_.find(id);
      if (it == clients_.end()) continue;
      Depart(it->second);
      threads.push_back(std::move(it->second.thread));
      clients_.erase(it);
    }
    finished_.clear();
  }
  for (std::thread& t : threads) t.join();
}

namespace {

void CloseAllFdsExcept(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned int from = 0;
  bool ok = true;
  for (int fd : keep) {
    if (fd < 0) continue;
    if (static_cast<unsigned int>(fd) > from) {
      ok = ok && ::close_range(from, static_cast<unsigned int>(fd) - 1, 0) == 0;
    }
    from = static_cast<unsigned int>(fd) + 1;
  }
  ok = ok && ::close_range(from, ~0u, 0) == 0;
  if (ok) return;
  // Kernels before 5.9 have no close_range: close one by one, up to the descriptor limit.
  long limit = ::sysconf(_SC_OPEN_MAX);
  for (long fd = 0; fd < (limit > 0 ? limit : 65536); ++fd) {
    if (!std::binary_search(keep.begin(), keep.end(), static_cast<int>(fd))) {
      ::close(static_cast<int>(fd));
    }
  }
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  return "ended (status " + std::to_string(status) + ")";
}

}  // namespace

void Server::ReapProcesses() {
  if (isolation() != Isolation::kProcess) return;
  MutexLock lock(mu_);
  for (auto it = clients_.begin(); it != clients_.end();) {
    ClientEntry& entry = it->second;
    int status = 0;
    pid_t got = ::waitpid(entry.pid, &status, WNOHANG);
    if (got == 0 || (got < 0 && errno == EINTR)) {
      ++it;
      continue;
    }
    if (got == entry.pid && WIFEXITED(status) && WEXITSTATUS(status) == kRespawnExitCode &&
        ClientRegistry::RespawnRequested(entry.slot) && !stopping_.load()) {
      if (StartClientProcess(entry)) {
        ++it;
        continue;
      }
    }
    if (got == entry.pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      spdlog::warn("client {}: its process {} {}; the driver takes back its device memory",
                   entry.id, entry.pid, DescribeExit(status));
    }
    Depart(entry);
    it = clients_.erase(it);
  }
}

void Server::StopProcesses() {
  const std::chrono::milliseconds grace(stop_grace_ms_.load());
  Clock::time_point deadline = Clock::now() + grace;
  while (true) {
    ReapProcesses();
    {
      MutexLock lock(mu_);
      if (clients_.empty()) return;
      if (Clock::now() >= deadline) {
        for (auto& [id, entry] : clients_) {
          spdlog::warn("client {}: its process {} did not exit within {} ms of the stop; killing it",
                       id, entry.pid, grace.count());
          ::kill(entry.pid, SIGKILL);
        }
        deadline = Clock::time_point::max();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<BackendProbe> ProbeBackend(const BackendFactory& factory) {
  GuardLoggerAcrossFork();
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return ErrnoError("socketpair", errno);
  }
  UniqueFd read_end(pair[0]), write_end(pair[1]);
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork the backend probe", errno);
  if (pid == 0) {
    read_end.Reset();
    std::string report;
    {
      Result<std::unique_ptr<Backend>> made = factory();
      if (made.ok()) {
        DeviceIdentity id = (*made)->Identity();
        nlohmann::json j = {{"name", (*made)->Name()},
                            {"description", (*made)->Describe()},
                            {"device_name", id.name},
                            {"simulated", id.simulated},
                            {"total_memory_bytes", id.total_memory_bytes},
                            {"driver_version", id.driver_version},
                            {"sm_count_total", id.sm_count_total},
                            {"sm_count_granted", id.sm_count_granted},
                            {"sm_granularity", id.sm_granularity},
                            {"sm_granularity_measured", id.sm_granularity_measured},
                            {"mps", id.mps}};
        report = "ok\n" + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      } else {
        report = "error\n" + made.status().message();
      }
    }
    Status written = WriteAll(write_end.get(), std::as_bytes(std::span(report)));
    ::_exit(written.ok() ? 0 : 1);
  }
  write_end.Reset();
  std::string report;
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    report.append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto line = [&report](size_t& at) {
    size_t end = report.find('\n', at);
    std::string out = report.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? report.size() : end + 1;
    return out;
  };
  size_t at = 0;
  std::string verdict = line(at);
  if (verdict == "error") return Unavailable(report.substr(at));
  if (verdict != "ok") {
    return Internal("the backend probe process " + DescribeExit(status) +
                    " without a report");
  }
  nlohmann::json j = nlohmann::json::parse(report.substr(at), nullptr, false);
  if (!j.is_object()) return Internal("the backend probe process sent an unreadable report");
  BackendProbe probe;
  probe.name = j.value("name", "");
  probe.simulated = j.value("simulated", false);
  probe.description = j.value("description", "");
  probe.identity.name = j.value("device_name", "");
  probe.identity.simulated = probe.simulated;
  probe.identity.total_memory_bytes = j.value("total_memory_bytes", uint64_t{0});
  probe.identity.driver_version = j.value("driver_version", 0);
  probe.identity.sm_count_total = j.value("sm_count_total", 0);
  probe.identity.sm_count_granted = j.value("sm_count_granted", 0);
  probe.identity.sm_granularity = j.value("sm_granularity", 0);
  probe.identity.sm_granularity_measured = j.value("sm_granularity_measured", false);
  probe.identity.mps = j.value("mps", false);
  return probe;
}

}  // namespace flyt::remote
