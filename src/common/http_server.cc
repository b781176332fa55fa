#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"

namespace flyt::http {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr size_t kMaxHeadBytes = 64 * 1024;
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr auto kSweepEvery = std::chrono::milliseconds(100);
constexpr auto kLoopStall = std::chrono::seconds(2);
// A connection refused for its rate is not read for the wait its answer names, up to this long:
// a flooding peer then costs nothing until it may send again.
constexpr auto kMaxLimitedPause = std::chrono::milliseconds(1000);

// One client connection. Owned by the epoll thread while it reads a request, by a worker while
// the request is processed; never by both.
struct Conn {
  int fd = -1;
  std::string peer_ip;
  int peer_port = 0;
  std::string in;  // received, not yet handed to a worker
  // The current request's first byte (request_started), or since when the connection is idle.
  SteadyClock::time_point since;
  bool request_started = false;
  bool continue_sent = false;
  size_t served = 0;
  std::string request;  // the complete request a worker processes
  SteadyClock::time_point dispatched_at;
  // Refused for its rate: not watched (not read) until then.
  bool paused = false;
  SteadyClock::time_point paused_until;
};

// The address of one end of a socket: its peer (getpeername) or its own (getsockname).
void AddressOf(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ip.clear();
  port = 0;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

void PeerOf(int fd, std::string& ip, int& port) { AddressOf(fd, true, ip, port); }

// A complete request in memory for reading; answers go to the socket, each write waiting at
// most the write timeout for progress.
class BufferStream : public httplib::Stream {
 public:
  BufferStream(const Conn& conn, std::chrono::milliseconds write_timeout)
      : conn_(conn), write_timeout_(write_timeout) {}

  bool is_readable() const override { return pos_ < conn_.request.size(); }
  bool is_writable() const override {
    pollfd p{conn_.fd, POLLOUT, 0};
    return !failed_ && poll(&p, 1, static_cast<int>(write_timeout_.count())) > 0 &&
           (p.revents & (POLLERR | POLLHUP)) == 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, conn_.request.size() - pos_);
    std::memcpy(ptr, conn_.request.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  using httplib::Stream::write;
  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size && !failed_) {
      const ssize_t n = ::send(conn_.fd, ptr + done, size - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{conn_.fd, POLLOUT, 0};
        if (poll(&p, 1, static_cast<int>(write_timeout_.count())) > 0) continue;
      }
      failed_ = true;
    }
    return failed_ ? -1 : static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = conn_.peer_ip;
    port = conn_.peer_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    AddressOf(conn_.fd, false, ip, port);
  }
  socket_t socket() const override { return conn_.fd; }
  bool failed() const { return failed_; }

 private:
  const Conn& conn_;
  const std::chrono::milliseconds write_timeout_;
  size_t pos_ = 0;
  bool failed_ = false;
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string TrimSpace(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
  }
}

// A rate for people: "100", "0.5".
std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

constexpr char kOtherLabel[] = "other";

}  // namespace

struct Server::Counters {
  std::atomic<uint64_t> open{0}, accepted{0}, refused_per_peer{0}, refused_total{0},
      timed_out{0}, rejected{0}, idle_closed{0}, dispatched{0}, stalled{0}, loop_stalls{0},
      priority{0};
  // Requests answered 429 rate_limited, by the admission's label: the map is filled before
  // listening (SetAdmissionPolicy) and only its values change after.
  std::map<std::string, std::atomic<uint64_t>> limited;
  std::atomic<uint64_t>& LimitedFor(const std::string& label) {
    auto it = limited.find(label);
    return it != limited.end() ? it->second : limited.find(kOtherLabel)->second;
  }
};

bool IsHealthOrMetrics(const RequestHead& head) {
  if (head.method != "GET" && head.method != "HEAD") return false;
  return head.path == "/healthz" || head.path == "/readyz" || head.path == "/metrics";
}

Admission DefaultAdmission(const RequestHead& head) {
  Admission a;
  a.priority = IsHealthOrMetrics(head);
  return a;
}

// The epoll thread and the workers. Start/Stop from the listening thread; Adopt from the accept
// thread (the same one).
class Server::FrontDoor {
 public:
  explicit FrontDoor(Server& server) : server_(server), options_(server.options_) {}
  ~FrontDoor() { Stop(); }

  void Start() {
    options_ = server_.options_;
    {
      MutexLock lock(mu_);
      stopping_ = false;
    }
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    loop_ = std::thread([this] { Loop(); });
    for (int i = 0; i < std::max(1, options_.threads); ++i) {
      workers_.emplace_back([this] { Work(false); });
    }
    for (int i = 0; i < options_.priority_threads; ++i) {
      workers_.emplace_back([this] { Work(true); });
    }
  }

  void Stop() {
    if (!loop_.joinable()) return;
    {
      MutexLock lock(mu_);
      stopping_ = true;
      work_cv_.NotifyAll();
      priority_cv_.NotifyAll();
    }
    Wake();
    loop_.join();
    for (auto& w : workers_) w.join();
    workers_.clear();
    // What was left between the threads.
    MutexLock lock(mu_);
    for (int fd : incoming_) ::close(fd);
    incoming_.clear();
    for (auto& c : work_) Close(std::move(c));
    work_.clear();
    for (auto& c : priority_) Close(std::move(c));
    priority_.clear();
    for (auto& r : returned_) Close(std::move(r.conn));
    returned_.clear();
    ::close(epoll_fd_);
    ::close(wake_fd_);
    epoll_fd_ = wake_fd_ = -1;
  }

  // The accept thread's hand-over: never blocks on a peer.
  void Adopt(int fd) {
    {
      MutexLock lock(mu_);
      if (stopping_) {
        ::close(fd);
        return;
      }
      incoming_.push_back(fd);
    }
    Wake();
  }

 private:
  struct Returned {
    std::unique_ptr<Conn> conn;
    bool keep = false;
  };

  void Wake() {
    const uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
  }

  void Overload() {
    if (server_.overload_listener_) server_.overload_listener_();
  }

  // Closes a connection and forgets it in the per-peer count (any thread; the count is the
  // epoll thread's, so other threads only close after it has stopped).
  void Close(std::unique_ptr<Conn> c) {
    if (!c) return;
    ::close(c->fd);
    server_.counters_->open.fetch_sub(1);
    auto it = per_peer_.find(c->peer_ip);
    if (it != per_peer_.end() && --it->second <= 0) per_peer_.erase(it);
  }

  void CloseInLoop(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    std::unique_ptr<Conn> c = std::move(it->second);
    conns_.erase(it);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    Close(std::move(c));
  }

  // A short answer from the epoll thread (never blocks), then the connection is closed.
  static void SendShort(int fd, int status, const std::string& message, const std::string& code) {
    const std::string body = nlohmann::json{{"error", message}, {"code", code}}.dump() + "\n";
    const std::string text = "HTTP/1.1 " + std::to_string(status) + " " + ReasonPhrase(status) +
                             "\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)!::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
  }

  void RejectInLoop(Conn& c, int status, const std::string& message, const std::string& code) {
    SendShort(c.fd, status, message, code);
    CloseInLoop(c.fd);
  }

  void AdoptInLoop(int fd, SteadyClock::time_point now) {
    std::string ip;
    int port = 0;
    PeerOf(fd, ip, port);
    Counters& n = *server_.counters_;
    if (n.open.load() >= static_cast<uint64_t>(options_.max_connections)) {
      ++n.refused_total;
      Overload();
      SendShort(fd, 503,
                "the server has " + std::to_string(options_.max_connections) +
                    " connections open, its limit; try again later",
                "unavailable");
      ::close(fd);
      return;
    }
    int& from_peer = per_peer_[ip];
    if (from_peer >= options_.max_connections_per_peer) {
      ++n.refused_per_peer;
      Overload();
      SendShort(fd, 429,
                "too many connections from " + ip + " (at most " +
                    std::to_string(options_.max_connections_per_peer) + ")",
                "resource_exhausted");
      ::close(fd);
      return;
    }
    ++from_peer;
    ++n.open;
    ++n.accepted;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer_ip = std::move(ip);
    c->peer_port = port;
    c->since = now;
    Watch(std::move(c));
  }

  void Watch(std::unique_ptr<Conn> c) {
    const int fd = c->fd;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    conns_[fd] = std::move(c);
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) CloseInLoop(fd);
  }

  void ReadInLoop(int fd, SteadyClock::time_point now) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    Conn& c = *it->second;
    char buf[kReadChunkBytes];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) return CloseInLoop(fd);  // the peer closed, or an error
    if (!c.request_started) {
      c.request_started = true;
      c.since = now;
    }
    c.in.append(buf, static_cast<size_t>(n));
    TryDispatch(c, now);
  }

  // Hands the connection to a worker once `in` holds a whole request; refuses what it must. A
  // request over its rate limit is answered here, and the next one in `in` looked at.
  void TryDispatch(Conn& c, SteadyClock::time_point now) {
    // Each turn takes one whole request out of `in`: bounded by what was received.
    while (DispatchOne(c, now)) {
    }
  }

  // True when a request was answered here and the connection is still open for the next one.
  bool DispatchOne(Conn& c, SteadyClock::time_point now) {
    const size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c.in.size() > kMaxHeadBytes) {
        ++server_.counters_->rejected;
        RejectInLoop(c, 431, "the request head is larger than 64 KiB", "invalid_argument");
      }
      return false;
    }
    const size_t head_len = end + 4;
    if (head_len > kMaxHeadBytes) {
      ++server_.counters_->rejected;
      RejectInLoop(c, 431, "the request head is larger than 64 KiB", "invalid_argument");
      return false;
    }
    std::optional<uint64_t> length;
    bool expect_continue = false;
    std::string head;  // without Expect: 100-continue (answered here)
    head.reserve(head_len);
    size_t pos = c.in.find("\r\n") + 2;
    head.append(c.in, 0, pos);
    // The request line: METHOD SP target SP version.
    const std::string line0 = c.in.substr(0, pos - 2);
    const size_t sp1 = line0.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line0.find(' ', sp1 + 1);
    const std::string method = line0.substr(0, sp1);
    const std::string target =
        sp1 == std::string::npos ? "" : line0.substr(sp1 + 1, sp2 == std::string::npos
                                                                  ? std::string::npos
                                                                  : sp2 - sp1 - 1);
    const std::string version = sp2 == std::string::npos ? "" : line0.substr(sp2 + 1);
    std::optional<std::string> bearer;
    bool seen_authorization = false;
    std::string connection;
    while (pos < end) {
      const size_t eol = c.in.find("\r\n", pos);
      const std::string line = c.in.substr(pos, eol - pos);
      const size_t next = eol + 2;
      const size_t colon = line.find(':');
      const std::string name = Lower(TrimSpace(line.substr(0, colon)));
      const std::string value = colon == std::string::npos ? "" : TrimSpace(line.substr(colon + 1));
      if (name == "transfer-encoding") {
        ++server_.counters_->rejected;
        RejectInLoop(c, 411, "request bodies must have a Content-Length (no chunked bodies)",
                     "invalid_argument");
        return false;
      }
      if (name == "authorization") {
        // One credential per request: the handlers read the first header, and the rate limit
        // must charge the token they authenticate, not a second one sent beside it.
        if (seen_authorization) {
          ++server_.counters_->rejected;
          RejectInLoop(c, 400, "more than one Authorization header", "invalid_argument");
          return false;
        }
        seen_authorization = true;
        if (value.size() > 7 && value.compare(0, 7, "Bearer ") == 0) bearer = value.substr(7);
      }
      if (name == "connection") connection = Lower(value);
      if (name == "content-length") {
        const bool digits = !value.empty() && value.size() <= 18 &&
                            std::all_of(value.begin(), value.end(),
                                        [](char ch) { return ch >= '0' && ch <= '9'; });
        const uint64_t v = digits ? std::stoull(value) : 0;
        if (!digits || (length && *length != v)) {
          ++server_.counters_->rejected;
          RejectInLoop(c, 400, "malformed Content-Length", "invalid_argument");
          return false;
        }
        length = v;
      }
      if (name == "expect" && Lower(value) == "100-continue") {
        expect_continue = true;
      } else {
        head.append(c.in, pos, next - pos);
      }
      pos = next;
    }
    head += "\r\n";
    const uint64_t body = length.value_or(0);
    if (body > options_.max_body_bytes) {
      ++server_.counters_->rejected;
      RejectInLoop(c, 413, "request body too large", "payload_too_large");
      return false;
    }
    if (c.in.size() < head_len + body) {
      if (expect_continue && !c.continue_sent) {
        c.continue_sent = true;
        static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        (void)!::send(c.fd, kContinue, sizeof(kContinue) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      return false;
    }
    // Complete: the daemon's admission says in which lane, and under which limit.
    RequestHead request_head;
    request_head.method = method;
    request_head.path = std::string_view(target).substr(0, target.find('?'));
    request_head.peer_ip = c.peer_ip;
    if (bearer) request_head.bearer_token = *bearer;
    const Admission admission =
        server_.admission_ ? server_.admission_(request_head) : DefaultAdmission(request_head);
    if (admission.limit.limited() && !admission.limit_key.empty()) {
      const RateLimiter::Verdict verdict =
          server_.limiter_->Take(admission.limit_key, admission.limit);
      if (!verdict.allowed) {
        server_.counters_->LimitedFor(admission.label)++;
        c.in.erase(0, head_len + body);
        // A refusal does not count toward keep_alive_max_requests: closing would only make the
        // peer reconnect (an accept and a handshake more per hundred refusals).
        const bool keep =
            version == "HTTP/1.1" ? connection != "close" : connection == "keep-alive";
        const bool sent = SendLimited(c.fd, method == "HEAD", admission.limit, verdict, keep);
        if (!sent || !keep) {
          if (sent) ::shutdown(c.fd, SHUT_WR);
          CloseInLoop(c.fd);
          return false;
        }
        c.request_started = !c.in.empty();
        c.since = now;
        c.continue_sent = false;
        // Not read again until it may send again: a flood on this connection costs no more
        // than one answer per wait (what it sent meanwhile waits in the socket).
        c.paused = true;
        c.paused_until = now + std::min<SteadyClock::duration>(verdict.retry_after, kMaxLimitedPause);
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
        paused_.push_back(c.fd);
        return false;
      }
    }
    // To a worker.
    c.request = std::move(head);
    c.request.append(c.in, head_len, body);
    c.in.erase(0, head_len + body);
    c.dispatched_at = now;
    const int fd = c.fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    auto it = conns_.find(fd);
    std::unique_ptr<Conn> owned = std::move(it->second);
    conns_.erase(it);
    ++server_.counters_->dispatched;
    if (admission.priority) ++server_.counters_->priority;
    MutexLock lock(mu_);
    if (admission.priority) {
      priority_.push_back(std::move(owned));
      priority_cv_.NotifyOne();
    } else {
      work_.push_back(std::move(owned));
    }
    work_cv_.NotifyOne();
    return false;
  }

  // The answer to a request over its rate limit, without blocking: false when the socket did not
  // take all of it (a peer that floods without reading its answers loses its connection).
  static bool SendLimited(int fd, bool head_only, const RateLimit& limit,
                          const RateLimiter::Verdict& verdict, bool keep) {
    const int retry_s = RateLimiter::RetryAfterSeconds(verdict.retry_after);
    const std::string body =
        nlohmann::json{{"error", "too many requests: at most " + Number(limit.rate_per_second) +
                                     " per second (burst " + Number(limit.burst) +
                                     ") for this caller; retry after " + std::to_string(retry_s) +
                                     " s"},
                       {"code", "rate_limited"}}
            .dump() +
        "\n";
    std::string text = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                       "Content-Length: " +
                       std::to_string(body.size()) + "\r\nRetry-After: " +
                       std::to_string(retry_s) + "\r\n" +
                       (keep ? "" : "Connection: close\r\n") + "\r\n";
    if (!head_only) text += body;
    const ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return n == static_cast<ssize_t>(text.size());
  }

  // Watches again the connections whose rate-limit pause is over, and looks at what they sent.
  void ResumePaused(SteadyClock::time_point now) {
    std::vector<int> still;
    std::vector<int> due;
    for (int fd : paused_) {
      auto it = conns_.find(fd);
      if (it == conns_.end() || !it->second->paused) continue;  // closed (the fd may be reused)
      (it->second->paused_until <= now ? due : still).push_back(fd);
    }
    paused_.swap(still);
    for (int fd : due) {
      Conn& c = *conns_[fd];
      c.paused = false;
      c.since = now;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        CloseInLoop(fd);
        continue;
      }
      if (!c.in.empty()) TryDispatch(c, now);
    }
  }

  void Sweep(SteadyClock::time_point now) {
    ResumePaused(now);
    std::vector<int> late, idle;
    for (const auto& [fd, c] : conns_) {
      if (c->paused) continue;  // its pause is shorter than any deadline
      if (c->request_started && now - c->since > options_.request_deadline) late.push_back(fd);
      if (!c->request_started && now - c->since > options_.idle_timeout) idle.push_back(fd);
    }
    for (int fd : late) {
      ++server_.counters_->timed_out;
      Conn& c = *conns_[fd];
      RejectInLoop(c,
                   408,
                   "the request was not complete within " +
                       std::to_string(options_.request_deadline.count()) + " ms",
                   "timeout");
    }
    for (int fd : idle) {
      ++server_.counters_->idle_closed;
      CloseInLoop(fd);
    }
  }

  void Loop() {
    std::vector<epoll_event> events(256);
    auto last_turn = SteadyClock::now();
    auto last_sweep = last_turn;
    while (true) {
      const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(kSweepEvery.count()));
      const auto now = SteadyClock::now();
      if (now - last_turn > kLoopStall) {
        ++server_.counters_->loop_stalls;
        Overload();
      }
      last_turn = now;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd_) {
          uint64_t v;
          (void)!::read(wake_fd_, &v, sizeof(v));
          continue;
        }
        ReadInLoop(fd, now);
      }
      std::vector<int> incoming;
      std::vector<Returned> returned;
      bool stopping;
      {
        MutexLock lock(mu_);
        incoming.swap(incoming_);
        returned.swap(returned_);
        stopping = stopping_;
      }
      for (int fd : incoming) AdoptInLoop(fd, now);
      for (Returned& r : returned) {
        if (!r.keep || stopping) {
          Close(std::move(r.conn));
          continue;
        }
        Conn& c = *r.conn;
        c.since = now;
        c.request_started = !c.in.empty();
        c.continue_sent = false;
        const int fd = c.fd;
        Watch(std::move(r.conn));
        auto it = conns_.find(fd);
        if (it != conns_.end() && it->second->request_started) TryDispatch(*it->second, now);
      }
      if (stopping) break;
      if (now - last_sweep >= kSweepEvery) {
        last_sweep = now;
        Sweep(now);
      }
    }
    std::vector<int> fds;
    for (const auto& [fd, c] : conns_) fds.push_back(fd);
    for (int fd : fds) CloseInLoop(fd);
  }

  // A worker of the priority lane takes only priority requests; an ordinary one takes them first.
  void Work(bool priority_lane) {
    CondVar& cv = priority_lane ? priority_cv_ : work_cv_;
    while (true) {
      std::unique_ptr<Conn> c;
      {
        MutexLock lock(mu_);
        while (!stopping_ && priority_.empty() && (priority_lane || work_.empty())) cv.Wait(mu_);
        if (stopping_) return;
        std::deque<std::unique_ptr<Conn>>& queue = priority_.empty() ? work_ : priority_;
        c = std::move(queue.front());
        queue.pop_front();
      }
      if (SteadyClock::now() - c->dispatched_at > options_.stall_threshold) {
        ++server_.counters_->stalled;
        Overload();
      }
      bool keep = false;
      {
        BufferStream stream(*c, options_.write_timeout);
        const bool last = c->served + 1 >= options_.keep_alive_max_requests;
        bool closed = false;
        const bool ok = server_.ProcessBuffered(stream, last, closed);
        keep = ok && !closed && !last && !stream.failed();
      }
      ++c->served;
      c->request.clear();
      c->request.shrink_to_fit();
      {
        MutexLock lock(mu_);
        returned_.push_back({std::move(c), keep});
      }
      Wake();
    }
  }

  Server& server_;
  FrontDoorOptions options_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread loop_;
  std::vector<std::thread> workers_;
  // The epoll thread's own (and Stop's, after it has ended).
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::map<std::string, int> per_peer_;
  std::vector<int> paused_;  // connections paused for their rate (Conn::paused)

  Mutex mu_;
  CondVar work_cv_;      // ordinary workers
  CondVar priority_cv_;  // the priority lane's
  bool stopping_ FLYT_GUARDED_BY(mu_) = false;
  std::vector<int> incoming_ FLYT_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Conn>> work_ FLYT_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Conn>> priority_ FLYT_GUARDED_BY(mu_);
  std::vector<Returned> returned_ FLYT_GUARDED_BY(mu_);
};

namespace {

// cpp-httplib's task queue for a flyt Server: each accepted socket goes straight to the front
// door on the accept thread; the end of the accept loop stops the front door.
class InlineQueue : public httplib::TaskQueue {
 public:
  explicit InlineQueue(std::function<void()> on_shutdown) : on_shutdown_(std::move(on_shutdown)) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { on_shutdown_(); }

 private:
  std::function<void()> on_shutdown_;
};

}  // namespace

Server::Server()
    : limiter_(std::make_unique<RateLimiter>(SystemClock::Instance())),
      counters_(std::make_unique<Counters>()) {
  counters_->limited[kOtherLabel];
  front_door_ = std::make_unique<FrontDoor>(*this);
  new_task_queue = [this] {
    // cpp-httplib listens with a backlog of 5: a burst of connections then drops SYNs, and a
    // well-behaved client's connect waits a second for its retransmission. The accept thread
    // only hands sockets over, so a deep backlog is cheap. (listen() again resizes it.)
    const socket_t sock = svr_sock_;
    if (sock != INVALID_SOCKET) ::listen(sock, SOMAXCONN);
    front_door_->Start();
    return new InlineQueue([this] { front_door_->Stop(); });
  };
}

Server::~Server() {
  stop();
  front_door_.reset();
}

void Server::SetFrontDoorOptions(const FrontDoorOptions& options) { options_ = options; }

void Server::SetOverloadListener(std::function<void()> listener) {
  overload_listener_ = std::move(listener);
}

void Server::SetAdmissionPolicy(AdmissionPolicy policy, const std::vector<std::string>& labels) {
  admission_ = std::move(policy);
  for (const std::string& label : labels) counters_->limited[label];
}

void Server::SetClock(Clock& clock) { limiter_ = std::make_unique<RateLimiter>(clock); }

bool Server::process_and_close_socket(socket_t sock) {
  front_door_->Adopt(sock);
  return true;
}

bool Server::ProcessBuffered(httplib::Stream& stream, bool close_connection,
                             bool& connection_closed) {
  try {
    return process_request(stream, close_connection, connection_closed, nullptr);
  } catch (...) {
    return false;
  }
}

Status ReadServerOptions(const TomlReader& r, const toml::table& t, const std::string& section,
                         ServerOptions& o) {
  auto get = [&](const char* key, int64_t min, int64_t max, int& out) -> Status {
    int64_t v = out;
    FLYT_RETURN_IF_ERROR(r.GetInt(t, section, key, min, max, v));
    out = static_cast<int>(v);
    return Status::Ok();
  };
  FLYT_RETURN_IF_ERROR(get("threads", 1, 1024, o.threads));
  FLYT_RETURN_IF_ERROR(get("max_connections_per_peer", 1, 100000, o.max_connections_per_peer));
  FLYT_RETURN_IF_ERROR(get("max_connections", 1, 100000, o.max_connections));
  FLYT_RETURN_IF_ERROR(get("request_deadline_seconds", 1, 3600, o.request_deadline_seconds));
  FLYT_RETURN_IF_ERROR(get("idle_timeout_seconds", 1, 3600, o.idle_timeout_seconds));
  if (o.max_connections_per_peer > o.max_connections) {
    const char* key = t.get("max_connections_per_peer") ? "max_connections_per_peer"
                                                         : "max_connections";
    return r.Error(t.get(key), section + "." + key,
                   "max_connections_per_peer (" + std::to_string(o.max_connections_per_peer) +
                       ") must not be above max_connections (" +
                       std::to_string(o.max_connections) + ")");
  }
  return Status::Ok();
}

Server::Stats Server::stats() const {
  const Counters& n = *counters_;
  Stats s;
  s.connections_open = n.open.load();
  s.connections_accepted = n.accepted.load();
  s.refused_per_peer = n.refused_per_peer.load();
  s.refused_total = n.refused_total.load();
  s.requests_timed_out = n.timed_out.load();
  s.requests_rejected = n.rejected.load();
  s.idle_closed = n.idle_closed.load();
  s.requests_dispatched = n.dispatched.load();
  s.requests_stalled = n.stalled.load();
  s.loop_stalls = n.loop_stalls.load();
  s.requests_priority = n.priority.load();
  for (const auto& [label, count] : n.limited) {
    s.limited_by_label[label] = count.load();
    s.requests_limited += count.load();
  }
  s.rate_limit_buckets = limiter_->size();
  return s;
}

std::string Server::MetricsText(const std::string& prefix) const {
  const Stats s = stats();
  const std::string p = prefix + "_http_";
  std::string out;
  auto metric = [&](const std::string& name, const char* type, const char* help,
                    const std::string& labels, uint64_t value, bool header = true) {
    if (header) {
      out += "# HELP " + p + name + " " + help + "\n";
      out += "# TYPE " + p + name + " " + type + "\n";
    }
    out += p + name + labels + " " + std::to_string(value) + "\n";
  };
  metric("connections_open", "gauge", "Connections open to the HTTP server.", "",
         s.connections_open);
  metric("connections_accepted_total", "counter", "Connections accepted and kept.", "",
         s.connections_accepted);
  metric("connections_refused_total", "counter",
         "Connections refused at accept: over the per-peer or the total connection cap.",
         "{reason=\"per_peer\"}", s.refused_per_peer);
  metric("connections_refused_total", "counter", "", "{reason=\"total\"}", s.refused_total, false);
  metric("connections_idle_closed_total", "counter",
         "Keep-alive connections closed after the idle timeout.", "", s.idle_closed);
  metric("requests_timed_out_total", "counter",
         "Requests not complete within the request deadline (408).", "", s.requests_timed_out);
  metric("requests_rejected_total", "counter",
         "Requests refused before a handler: chunked body, body or head too large.", "",
         s.requests_rejected);
  metric("requests_total", "counter", "Complete requests handed to a worker.", "",
         s.requests_dispatched);
  metric("requests_stalled_total", "counter",
         "Complete requests that waited longer than the stall threshold for a worker.", "",
         s.requests_stalled);
  metric("loop_stalls_total", "counter", "Times the connection loop itself ran seconds late.", "",
         s.loop_stalls);
  metric("requests_priority_total", "counter",
         "Requests served by the priority lane (health, metrics, the daemon's control plane).", "",
         s.requests_priority);
  bool first = true;
  for (const auto& [label, count] : s.limited_by_label) {
    metric("requests_limited_total", "counter",
           "Requests answered 429 rate_limited: over their token's (or address's) rate.",
           "{role=\"" + label + "\"}", count, first);
    first = false;
  }
  metric("rate_limit_buckets", "gauge", "Token buckets of the rate limit held now.", "",
         s.rate_limit_buckets);
  return out;
}

}  // namespace flyt::http
