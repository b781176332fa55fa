// Server: the listener and the supervisor of client processes (see server.h). It binds the
// listen endpoints, accepts connections, and serves each client with a ClientConnection
// (connection.h) on a thread of its own (Isolation::kThread) or in a process forked for it
// (kProcess); it reaps ended client threads and processes (a pidfd per process wakes the
// acceptor), hands a client whose process could not reset the device to a fresh process, keeps
// the device-memory account straight when a client departs, and answers Stats from the shared
// client registry. ProbeBackend checks the device from a short-lived process.
#include "remote/server.h"

#include <fcntl.h>
#include <poll.h>
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
#include <spdlog/details/console_globals.h>
#include <spdlog/spdlog.h>
#include <utility>

#include "remote/connection.h"

namespace flyt::remote {

namespace {

constexpr size_t kDepartedKept = 64;
// Connections beyond max_clients that may be open at once, to be refused by their hello.
constexpr size_t kConnectSlack = 16;
constexpr int kRespawnExitCode = ClientConnection::kRespawnExitCode;

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

}  // namespace

Server::Server(Backend& backend, ServerOptions options)
    : backend_(&backend), options_(std::move(options)), server_pid_(::getpid()) {}

Server::Server(BackendFactory factory, ServerOptions options)
    : factory_(std::move(factory)), options_(std::move(options)), server_pid_(::getpid()) {
  GuardLoggerAcrossFork();
}

Server::~Server() { Stop(); }

Status Server::Start() {
  FLYT_ASSIGN_OR_RETURN(registry_, ClientRegistry::Create(options_.max_clients + kConnectSlack,
                                                          kDepartedKept,
                                                          options_.memory_limit_bytes));
  if (!options_.launch_log_path.empty()) {
    FLYT_ASSIGN_OR_RETURN(launch_log_, LaunchLog::Open(options_.launch_log_path));
  }
  for (const Endpoint& endpoint : options_.listen) {
    FLYT_ASSIGN_OR_RETURN(UniqueFd fd, Listen(endpoint));
    Endpoint bound = endpoint;
    if (bound.kind == Endpoint::Kind::kTcp && bound.port == 0) {
      FLYT_ASSIGN_OR_RETURN(bound.port, BoundPort(fd.get()));
    }
    listeners_.push_back(std::move(fd));
    bound_.push_back(bound);
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoError("pipe", errno);
  wake_read_.Reset(pipe_fds[0]);
  wake_write_.Reset(pipe_fds[1]);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void Server::Wake() {
  char byte = 1;
  (void)!::write(wake_write_.get(), &byte, 1);
}

void Server::AcceptLoop() {
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    fds.clear();
    for (const UniqueFd& fd : listeners_) fds.push_back({fd.get(), POLLIN, 0});
    fds.push_back({wake_read_.get(), POLLIN, 0});
    {
      MutexLock lock(mu_);
      for (const auto& [id, entry] : clients_) {
        if (entry.pidfd.valid()) fds.push_back({entry.pidfd.get(), POLLIN, 0});
      }
    }
    int n = ::poll(fds.data(), fds.size(), 500);
    ReapFinished();
    ReapProcesses();
    if (n < 0 && errno != EINTR) {
      spdlog::error("poll: {}", std::strerror(errno));
      break;
    }
    if (fds[listeners_.size()].revents & POLLIN) {
      char drain[64];
      while (::read(wake_read_.get(), drain, sizeof drain) > 0) {
      }
      std::vector<UniqueFd> handed;
      {
        MutexLock lock(mu_);
        handed.swap(handed_over_);
      }
      for (UniqueFd& fd : handed) StartClient(std::move(fd));
    }
    if (n <= 0) continue;
    for (size_t i = 0; i < listeners_.size(); ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      int client = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) {
        if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
          spdlog::warn("accept on {}: {}", bound_[i].ToString(), std::strerror(errno));
        }
        continue;
      }
      TuneStreamSocket(client);
      StartClient(UniqueFd(client));
    }
  }
  // Stopping. Client processes die with this thread (PR_SET_PDEATHSIG follows the thread that
  // forked them), so it outlives them: it shuts their connections down and waits for each to
  // free what it holds and exit.
  listeners_.clear();
  if (isolation() == Isolation::kProcess) {
    {
      MutexLock lock(mu_);
      handed_over_.clear();
      for (auto& [id, entry] : clients_) ::shutdown(entry.fd, SHUT_RDWR);
    }
    StopProcesses();
  }
}

void Server::ServeConnection(UniqueFd fd) {
  if (isolation() == Isolation::kThread) {
    StartClient(std::move(fd));
    return;
  }
  // Every fork happens on the acceptor thread, so no other thread of this process can be
  // holding a lock (the logger's, this server's) that the child would inherit held.
  {
    MutexLock lock(mu_);
    if (stopping_.load()) return;
    handed_over_.push_back(std::move(fd));
  }
  Wake();
}

void Server::StartClient(UniqueFd fd) {
  ReapFinished();
  MutexLock lock(mu_);
  if (stopping_.load()) return;
  uint64_t id = NextClientId();
  ClientSlot* slot = registry_->Acquire(id);
  if (slot == nullptr) {
    // More connections than max_clients + kConnectSlack are open (most of them not yet past
    // the hello, or the hello would have refused them): drop this one unheard.
    spdlog::warn("client {}: refused: {} connections open", id, registry_->LiveCount());
    return;
  }
  ClientEntry& entry = clients_[id];
  entry.id = id;
  entry.slot = slot;
  entry.fd = fd.Release();
  if (isolation() == Isolation::kThread) {
    StartClientThread(entry);
  } else if (!StartClientProcess(entry)) {
    Depart(entry);
    clients_.erase(id);
  }
}

void Server::StartClientThread(ClientEntry& entry) {
  uint64_t id = entry.id;
  int raw = entry.fd;
  ClientSlot* slot = entry.slot;
  entry.thread = std::thread([this, raw, id, slot] {
    try {
      ClientConnection session(*this, backend_, nullptr, raw, id, slot);
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
  if (auto it = clients_.find(id); it != clients_.end()) {
    fd = it->second.fd;
    slot = it->second.slot;
  }
  // Everything else this process inherited (listeners, other clients' connections, whatever
  // the program embedding the server holds) is not this client's to keep open: a peer whose
  // socket stayed open in a sibling would never see its connection end.
  std::vector<int> keep = {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, fd};
  if (launch_log_) keep.push_back(launch_log_->fd());
  CloseAllFdsExcept(keep);
  // The termination signals stay blocked, as in the server process: the server ends a client
  // process by shutting its connection down (the process then frees everything and exits), or
  // with SIGKILL. The session opens the device once the client's hello is accepted.
  try {
    ClientConnection session(*this, nullptr, &factory_, fd, id, slot,
                          ClientRegistry::TakeRespawn(slot));
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
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::now() + options_.stop_grace;
  while (true) {
    ReapProcesses();
    {
      MutexLock lock(mu_);
      if (clients_.empty()) return;
      if (Clock::now() >= deadline) {
        for (auto& [id, entry] : clients_) {
          spdlog::warn("client {}: its process {} did not exit within {} ms of the stop; killing it",
                       id, entry.pid, options_.stop_grace.count());
          ::kill(entry.pid, SIGKILL);
        }
        deadline = Clock::time_point::max();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Server::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_write_.valid()) Wake();
  if (acceptor_.joinable()) acceptor_.join();
  listeners_.clear();
  for (const Endpoint& endpoint : bound_) {
    if (endpoint.kind == Endpoint::Kind::kUnix) ::unlink(endpoint.path.c_str());
  }
  if (isolation() == Isolation::kProcess) return;  // the acceptor ended every client process
  {
    MutexLock lock(mu_);
    for (auto& [id, entry] : clients_) ::shutdown(entry.fd, SHUT_RDWR);
  }
  // Join without holding the lock: finishing threads take it.
  while (true) {
    std::thread t;
    {
      MutexLock lock(mu_);
      for (auto& [id, entry] : clients_) {
        if (entry.thread.joinable()) {
          t = std::move(entry.thread);
          break;
        }
      }
    }
    if (!t.joinable()) break;
    t.join();
  }
  MutexLock lock(mu_);
  for (auto& [id, entry] : clients_) Depart(entry);
  clients_.clear();
  finished_.clear();
}

pid_t Server::ClientProcess(uint64_t client_id) const {
  MutexLock lock(mu_);
  auto it = clients_.find(client_id);
  return it == clients_.end() ? 0 : it->second.pid;
}

size_t Server::client_count() const { return registry_ ? registry_->LiveCount() : 0; }

DebugStatsReply Server::Stats() const { return registry_ ? registry_->Snapshot() : DebugStatsReply{}; }

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
        report = "ok\n" + (*made)->Name() + "\n" + ((*made)->Identity().simulated ? "1" : "0") +
                 "\n" + (*made)->Describe();
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
  BackendProbe probe;
  probe.name = line(at);
  probe.simulated = line(at) == "1";
  probe.description = report.substr(at);
  return probe;
}

}  // namespace flyt::remote
