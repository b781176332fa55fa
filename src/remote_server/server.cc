// Server: the listener and the supervisor of client processes (see server.h). It binds the
// listen endpoints, accepts connections, reads each one's hello (non-blocking, one deadline for
// the whole hello, bounded in number), answers refusals itself, and serves each client with a ClientConnection
// (connection.h) on a thread of its own (Isolation::kThread) or in a process forked for it
// (kProcess); it reaps ended client threads and processes (a pidfd per process wakes the
// acceptor), hands a client whose process could not reset the device to a fresh process, keeps
// the device-memory account straight when a client departs, and answers Stats from the shared
// client registry. How a client is served (its thread or process), reaped and stopped, and
// ProbeBackend, are in server_clients.cc.
#include "remote_server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <spdlog/spdlog.h>
#include <utility>

#include "common/strings.h"
#include "remote_server/connection.h"

namespace flyt::remote {

namespace {

constexpr size_t kDepartedKept = 64;

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

void SetBlocking(int fd, bool blocking) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return;
  ::fcntl(fd, F_SETFL, blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK));
}

}  // namespace

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
  offer->layout = layout;
  offer->peer_pid = static_cast<uint32_t>(cred.pid);
  offer->peer_uid = static_cast<uint32_t>(cred.uid);
  return offer;
}

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

}  // namespace flyt::remote
