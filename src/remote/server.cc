// Server: the listener and the supervisor of client processes (see server.h). It binds the
// listen endpoints, accepts connections, reads each one's hello (non-blocking, one deadline for
// the whole hello, bounded in number), answers refusals itself, and serves each client with a ClientConnection
// (connection.h) on a thread of its own (Isolation::kThread) or in a process forked for it
// (kProcess); it reaps ended client threads and processes (a pidfd per process wakes the
// acceptor), hands a client whose process could not reset the device to a fresh process, keeps
// the device-memory account straight when a client departs, and answers Stats from the shared
// client registry. ProbeBackend checks the device from a short-lived process.
#include "remote/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
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
#include <nlohmann/json.hpp>
#include <spdlog/details/console_globals.h>
#include <spdlog/spdlog.h>
#include <utility>

#include "remote/connection.h"

namespace flyt::remote {

namespace {

constexpr size_t kDepartedKept = 64;
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
    : backend_(&backend), options_(std::move(options)), server_pid_(::getpid()) {
  stop_grace_ms_.store(options_.stop_grace.count());
}

Server::Server(BackendFactory factory, ServerOptions options)
    : factory_(std::move(factory)), options_(std::move(options)), server_pid_(::getpid()) {
  stop_grace_ms_.store(options_.stop_grace.count());
  GuardLoggerAcrossFork();
}

Server::~Server() { Stop(); }

Status Server::Start() {
  if (options_.max_clients == 0) return InvalidArgument("max_clients must be at least 1");
  if (options_.max_pending == 0 || options_.max_pending_per_peer == 0) {
    return InvalidArgument("max_pending and max_pending_per_peer must be at least 1");
  }
  if (options_.hello_timeout.count() <= 0) {
    return InvalidArgument("hello_timeout must be positive");
  }
  // A slot is taken only once a hello is accepted, and at most max_clients are served.
  FLYT_ASSIGN_OR_RETURN(registry_, ClientRegistry::Create(options_.max_clients, kDepartedKept,
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
    // The acceptor takes every connection waiting (up to kAcceptsPerTurn) until EAGAIN.
    if (int flags = ::fcntl(fd.get(), F_GETFL); flags < 0 ||
        ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
      return ErrnoError("make the listening socket non-blocking", errno);
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

namespace {

// Connections accepted per listener per turn of the acceptor's loop: a flood of connects cannot
// starve the reading of hellos already pending.
constexpr int kAcceptsPerTurn = 32;

// What max_pending_per_peer counts by: a TCP peer's address (without the port), a Unix-socket
// peer's uid.
std::string PeerOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof text);
    return text;
  }
  if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof text);
    return text;
  }
  if (addr.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t cred_len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0) {
      return "local uid " + std::to_string(cred.uid);
    }
    return "local peer";
  }
  return "unknown peer";
}

// Whether `given` is `expected`, in time that depends on the length of `expected` only (not on
// where the two differ), so that a peer cannot find the secret byte by byte by timing refusals.
bool SecretMatches(const std::string& expected, const std::string& given) {
  volatile unsigned char diff = expected.size() != given.size() ? 1 : 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    unsigned char other = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (static_cast<unsigned char>(expected[i]) ^ other);
  }
  return diff == 0;
}

// Shared memory for a client that asked for it (kCapSharedMemory): only over a Unix socket whose
// peer the kernel names (SO_PEERCRED), since the memfd travels with SCM_RIGHTS. Null, with a
// debug line, when the client cannot have it: it is then served over its socket.
std::shared_ptr<ShmOffer> MakeShmOffer(int fd, const ShmLayout& layout, uint64_t id) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      addr.ss_family != AF_UNIX) {
    return nullptr;  // TCP: descriptors cannot be passed
  }
  ucred cred{};
  socklen_t cred_len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 || cred.pid <= 0) {
    spdlog::warn("client {}: no shared memory: the kernel does not name the peer ({})", id,
                 std::strerror(errno));
    return nullptr;
  }
  Result<ShmFds> fds = CreateShm(layout);
  if (!fds.ok()) {
    spdlog::warn("client {}: no shared memory: {}", id, fds.status().message());
    return nullptr;
  }
  auto offer = std::make_shared<ShmOffer>();
  offer->fds = std::move(fds).value();
  offer->peer_pid = static_cast<uint32_t>(cred.pid);
  offer->peer_uid = static_cast<uint32_t>(cred.uid);
  return offer;
}

void SetBlocking(int fd, bool blocking) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return;
  ::fcntl(fd, F_SETFL, blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK));
}

}  // namespace

void Server::AcceptLoop() {
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    if (draining_.load() && !listeners_closed_.load()) {
      // Draining: no new connection, and none still in its hello, is served.
      listeners_.clear();
      pending_.clear();
      registry_->SetGauge(ServerCounter::kPending, 0);
      {
        MutexLock lock(mu_);
        handed_over_.clear();
      }
      listeners_closed_.store(true);
    }
    fds.clear();
    for (const UniqueFd& fd : listeners_) fds.push_back({fd.get(), POLLIN, 0});
    const size_t wake_at = fds.size();
    fds.push_back({wake_read_.get(), POLLIN, 0});
    const size_t pending_at = fds.size();
    for (const PendingHello& p : pending_) fds.push_back({p.fd.get(), POLLIN, 0});
    {
      MutexLock lock(mu_);
      for (const auto& [id, entry] : clients_) {
        if (entry.pidfd.valid()) fds.push_back({entry.pidfd.get(), POLLIN, 0});
      }
    }
    // Wake for the earliest hello deadline too (pending_ is in accept order, so it is the
    // first's: every connection gets the same timeout).
    int timeout_ms = 500;
    if (!pending_.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          pending_.front().deadline - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, timeout_ms));
    }
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    ReapFinished();
    ReapProcesses();
    if (n < 0 && errno != EINTR) {
      spdlog::error("poll: {}", std::strerror(errno));
      break;
    }
    // Hellos first (before pending_ changes), then hellos past their deadline, then new
    // connections.
    if (n > 0) {
      for (size_t i = 0; i < pending_.size(); ++i) {
        if (fds[pending_at + i].revents == 0) continue;
        PendingHello& p = pending_[i];
        switch (ReadHello(p)) {
          case HelloProgress::kMore:
            break;
          case HelloProgress::kClosed:
            p.fd.Reset();
            break;
          case HelloProgress::kComplete:
            StartClient(std::move(p.fd), p.peer, std::move(p.hello));
            p.fd.Reset();
            break;
        }
      }
    }
    Clock::time_point now = Clock::now();
    for (PendingHello& p : pending_) {
      if (p.fd.valid() && now >= p.deadline) {
        NoteTurnedAway(ServerCounter::kHelloTimeout, p.peer,
                       "no complete hello within " +
                           std::to_string(options_.hello_timeout.count()) + " ms of connecting (" +
                           std::to_string(p.header_bytes + p.payload_bytes) +
                           " bytes arrived); closed");
        p.fd.Reset();
      }
    }
    std::erase_if(pending_, [](const PendingHello& p) { return !p.fd.valid(); });
    if (fds[wake_at].revents & POLLIN) {
      char drain[64];
      while (::read(wake_read_.get(), drain, sizeof drain) > 0) {
      }
      std::vector<UniqueFd> handed;
      {
        MutexLock lock(mu_);
        handed.swap(handed_over_);
      }
      if (!draining_.load()) {
        for (UniqueFd& fd : handed) AdoptConnection(std::move(fd));
      }
    }
    for (size_t i = 0; n > 0 && i < listeners_.size(); ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      for (int k = 0; k < kAcceptsPerTurn; ++k) {
        int client = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (client < 0) {
          if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK &&
              errno != ECONNABORTED) {
            spdlog::warn("accept on {}: {}", bound_[i].ToString(), std::strerror(errno));
          }
          break;
        }
        TuneStreamSocket(client);
        AdoptConnection(UniqueFd(client));
      }
    }
    registry_->SetGauge(ServerCounter::kPending, pending_.size());
  }
  // Stopping. Client processes die with this thread (PR_SET_PDEATHSIG follows the thread that
  // forked them), so it outlives them: it shuts their connections down and waits for each to
  // free what it holds and exit.
  pending_.clear();
  registry_->SetGauge(ServerCounter::kPending, 0);
  listeners_.clear();
  if (isolation() == Isolation::kProcess) {
    {
      MutexLock lock(mu_);
      handed_over_.clear();
      for (auto& [id, entry] : clients_) {
        ::shutdown(entry.fd, SHUT_RDWR);
        if (entry.claim_fd.valid()) ::shutdown(entry.claim_fd.get(), SHUT_RDWR);
      }
    }
    StopProcesses();
  }
}

void Server::AdoptConnection(UniqueFd fd) {
  registry_->Count(ServerCounter::kAccepted);
  SetBlocking(fd.get(), false);
  std::string peer = PeerOf(fd.get());
  // Over a bound, the OLDEST pending connection goes, not the new one. An honest client sends
  // its hello as soon as it has connected, so it is pending for about a round trip; the oldest
  // pending connection is the one most likely silent or dripping. Refusing the newcomer instead
  // would let a peer that keeps the table full lock every new client out for a whole
  // hello_timeout. The per-peer bound is applied first, so that one peer's flood evicts its own
  // connections before anyone else's.
  //
  // Before a connection is closed for a bound, what has arrived of its hello is read: a burst of
  // honest clients connecting at once from one host (the ranks of a job) has its hellos in the
  // socket buffers already, and they are served rather than evicted.
  auto settle = [this](std::vector<PendingHello>::iterator it) {
    switch (ReadHello(*it)) {
      case HelloProgress::kMore:
        return false;
      case HelloProgress::kComplete:
        StartClient(std::move(it->fd), it->peer, std::move(it->hello));
        break;
      case HelloProgress::kClosed:
        break;
    }
    pending_.erase(it);
    return true;
  };
  while (true) {
    auto oldest_of_peer = pending_.end();
    size_t from_peer = 0;
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->peer != peer) continue;
      if (from_peer++ == 0) oldest_of_peer = it;
    }
    if (from_peer >= options_.max_pending_per_peer) {
      if (settle(oldest_of_peer)) continue;
      NoteTurnedAway(ServerCounter::kEvictedPeer, peer,
                     std::to_string(options_.max_pending_per_peer) +
                         " connections from it were still in their hello "
                         "(max_pending_per_peer); closed the oldest");
      pending_.erase(oldest_of_peer);
    } else if (pending_.size() >= options_.max_pending) {
      if (settle(pending_.begin())) continue;
      NoteTurnedAway(ServerCounter::kEvictedPending, pending_.front().peer,
                     std::to_string(options_.max_pending) +
                         " connections were still in their hello (max_pending); closed the "
                         "oldest");
      pending_.erase(pending_.begin());
    }
    break;
  }
  PendingHello p;
  p.fd = std::move(fd);
  p.peer = std::move(peer);
  p.deadline = Clock::now() + options_.hello_timeout;
  pending_.push_back(std::move(p));
  (void)settle(std::prev(pending_.end()));  // its hello may be here already
}

Server::HelloProgress Server::ReadHello(PendingHello& p) {
  auto malformed = [&](const std::string& why) {
    NoteTurnedAway(ServerCounter::kHelloMalformed, p.peer, why + "; closed");
    return HelloProgress::kClosed;
  };
  // Reads exactly the hello and nothing after it: what follows is the serving side's to read.
  while (true) {
    std::byte* into;
    size_t want;
    if (p.header_bytes < kFrameHeaderBytes) {
      into = p.header + p.header_bytes;
      want = kFrameHeaderBytes - p.header_bytes;
    } else if (p.payload_bytes < p.payload.size()) {
      into = p.payload.data() + p.payload_bytes;
      want = p.payload.size() - p.payload_bytes;
    } else {
      break;
    }
    ssize_t got = ::recv(p.fd.get(), into, want, MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return HelloProgress::kMore;
    if (got <= 0) {
      spdlog::debug("connection from {}: went away before its hello ({})", p.peer,
                    got == 0 ? "closed" : std::strerror(errno));
      return HelloProgress::kClosed;
    }
    if (p.header_bytes < kFrameHeaderBytes) {
      p.header_bytes += static_cast<size_t>(got);
      if (p.header_bytes < kFrameHeaderBytes) continue;
      Result<FrameHeader> header = DecodeFrameHeader(p.header);
      if (!header.ok()) return malformed("not the flyt protocol: " + header.status().message());
      if (header->kind != FrameKind::kHello) return malformed("first frame is not a hello");
      if (header->payload_bytes > ClientConnection::kMaxHelloBytes) {
        return malformed("oversized hello");
      }
      p.frame = *header;
      p.payload.resize(header->payload_bytes);
    } else {
      p.payload_bytes += static_cast<size_t>(got);
    }
  }
  if (!DecodeExactly(p.payload, p.hello.request) || p.hello.request.magic != kHelloMagic) {
    return malformed("malformed hello");
  }
  p.hello.seq = p.frame.seq;
  return HelloProgress::kComplete;
}

void Server::NoteTurnedAway(ServerCounter reason, const std::string& peer,
                            const std::string& why) {
  registry_->Count(reason);
  TurnedAwayLog& log = turned_away_log_[static_cast<size_t>(reason)];
  Clock::time_point now = Clock::now();
  if (log.last != Clock::time_point{} && now - log.last < kTurnedAwayLogEvery) {
    ++log.unlogged;
    spdlog::debug("connection from {}: {}", peer, why);
    return;
  }
  std::string more;
  if (log.unlogged != 0) {
    more = " (and " + std::to_string(log.unlogged) + " more for this reason since the last line)";
  }
  spdlog::warn("connection from {}: {}{}", peer, why, more);
  log.last = now;
  log.unlogged = 0;
}

void Server::ServeConnection(UniqueFd fd) {
  // The acceptor reads its hello; in kProcess every fork happens on the acceptor thread, so no
  // other thread of this process can be holding a lock (the logger's, this server's) that the
  // child would inherit held.
  {
    MutexLock lock(mu_);
    if (stopping_.load()) return;
    handed_over_.push_back(std::move(fd));
  }
  Wake();
}

void Server::StartClient(UniqueFd fd, const std::string& peer, ReceivedHello hello) {
  ReapFinished();
  MutexLock lock(mu_);
  if (stopping_.load()) return;
  // Refusals are answered here, without a thread or a process.
  std::string refusal;
  ServerCounter reason = ServerCounter::kRefusedVersion;
  if (!hello.request.resume.empty()) {
    // A migrated client: the token, not the secret, is what lets it in (checked by the side
    // that holds its state).
    SetBlocking(fd.get(), true);
    refusal = HandOver(fd, hello);
    if (refusal.empty()) return;
    reason = ServerCounter::kRefusedAuth;
  } else if (!options_.secret.empty() &&
             !SecretMatches(options_.secret, hello.request.secret)) {
    refusal = std::string(kAuthRefusedPrefix) + ": wrong or missing secret (" +
              (hello.request.secret.empty() ? "the hello carried none" : "the hello's differs") +
              "; this server serves only the holder of its lease's secret)";
    reason = ServerCounter::kRefusedAuth;
  } else if (std::string version = ClientConnection::VersionError(hello.request);
             !version.empty()) {
    refusal = version;
  } else if (clients_.size() >= options_.max_clients) {
    refusal = std::string(kServerBusyPrefix) + ": " + std::to_string(options_.max_clients) +
              " clients connected, as many as it serves (--max-clients); try again later";
    reason = ServerCounter::kRefusedBusy;
  }
  uint64_t id = 0;
  ClientSlot* slot = nullptr;
  if (refusal.empty()) {
    id = NextClientId();
    slot = registry_->Acquire(id);
    if (slot == nullptr) {  // cannot happen: a slot per served client
      refusal = std::string(kServerBusyPrefix) + ": no free client slot";
      reason = ServerCounter::kRefusedBusy;
    }
  }
  if (!refusal.empty()) {
    NoteTurnedAway(reason, peer, "refused: " + refusal);
    Bytes reply = ClientConnection::RefusalFrame(hello.seq, options_.label, refusal);
    // A fresh socket's send buffer takes this small reply whole; if not, the peer is not
    // reading and loses it. Only the hello was read, so the close sends a FIN after it.
    (void)!::send(fd.get(), reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(fd.get(), SHUT_WR);
    return;
  }
  // Checked: the secret is not kept with the client (nor copied into its process).
  hello.request.secret.clear();
  SetBlocking(fd.get(), true);
  ClientEntry& entry = clients_[id];
  entry.id = id;
  entry.slot = slot;
  if (options_.shared_memory && (hello.request.capabilities & kCapSharedMemory) != 0) {
    entry.shm = MakeShmOffer(fd.get(), options_.shm_layout, id);
  }
  if ((hello.request.capabilities & kCapMigrationImport) != 0) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      spdlog::error("client {}: cannot make its hand-over pair: {}", id, std::strerror(errno));
      Depart(entry);  // closes nothing yet: entry.fd is -1
      clients_.erase(id);
      return;
    }
    entry.handoff.Reset(pair[0]);
    entry.handoff_peer.Reset(pair[1]);
  }
  entry.fd = fd.Release();
  entry.hello = std::move(hello);
  if (isolation() == Isolation::kThread) {
    StartClientThread(entry);
  } else if (!StartClientProcess(entry)) {
    Depart(entry);
    clients_.erase(id);
  }
}

std::string Server::HandOver(UniqueFd& fd, const ReceivedHello& hello) {
  const std::string& token = hello.request.resume;
  uint64_t id = 0;
  auto dash = token.find('-');
  if (dash == std::string::npos || dash == 0 || dash > 20) return "malformed resume token";
  for (char c : token.substr(0, dash)) {
    if (c < '0' || c > '9') return "malformed resume token";
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  auto it = clients_.find(id);
  if (it == clients_.end() || !it->second.handoff.valid()) {
    return std::string(kAuthRefusedPrefix) + ": no migrated client waits here for this token";
  }
  ClientEntry& entry = it->second;
  Bytes message;
  AppendFrame(message, FrameKind::kHello, CallId::kNone, hello.seq, hello.request);
  const int passed[1] = {fd.get()};
  // The token is checked by the state's holder, which refuses a wrong one itself and closes its
  // end of the pair once it has taken the right one (a later hand-over then fails here).
  if (Status sent = SendWithFds(entry.handoff.get(), message, passed); !sent.ok()) {
    entry.handoff.Reset();
    return std::string(kAuthRefusedPrefix) + ": no migrated client waits here for this token";
  }
  entry.claim_fd = std::move(fd);
  return "";
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

void Server::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_write_.valid()) Wake();
  if (acceptor_.joinable()) acceptor_.join();
  listeners_.clear();
  UnlinkSockets();
  if (isolation() == Isolation::kProcess) return;  // the acceptor ended every client process
  {
    MutexLock lock(mu_);
    for (auto& [id, entry] : clients_) {
      ::shutdown(entry.fd, SHUT_RDWR);
      if (entry.claim_fd.valid()) ::shutdown(entry.claim_fd.get(), SHUT_RDWR);
    }
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

void Server::UnlinkSockets() {
  if (sockets_unlinked_.exchange(true)) return;
  for (const Endpoint& endpoint : bound_) {
    if (endpoint.kind == Endpoint::Kind::kUnix) ::unlink(endpoint.path.c_str());
  }
}

void Server::Drain(std::chrono::milliseconds grace) {
  if (stopping_.load() || !acceptor_.joinable()) {
    Stop();
    return;
  }
  const Clock::time_point deadline = Clock::now() + grace;
  draining_.store(true);
  Wake();
  while (!listeners_closed_.load() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  UnlinkSockets();
  size_t left = client_count();
  if (left != 0) {
    spdlog::info("draining: no new clients; waiting at most {} ms for the {} connected to finish",
                 grace.count(), left);
  }
  while ((left = client_count()) != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (left != 0) {
    spdlog::warn("draining: {} client(s) still connected after {} ms; disconnecting them", left,
                 grace.count());
  }
  // What is left gets its connection shut down, and a second to free what it holds and exit.
  stop_grace_ms_.store(std::min<int64_t>(stop_grace_ms_.load(), 1000));
  Stop();
}

pid_t Server::ClientProcess(uint64_t client_id) const {
  MutexLock lock(mu_);
  auto it = clients_.find(client_id);
  return it == clients_.end() ? 0 : it->second.pid;
}

uint64_t Server::Counter(ServerCounter counter) const {
  return registry_ ? registry_->Counter(counter) : 0;
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
