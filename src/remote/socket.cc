#include "remote/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <memory>

#include "common/strings.h"

namespace flyt::remote {
namespace {

Result<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty()) return InvalidArgument("empty Unix socket path");
  if (path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument("Unix socket path too long (" + std::to_string(path.size()) +
                           " bytes, at most " + std::to_string(sizeof(addr.sun_path) - 1) + ")");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

Result<UniqueFd> ConnectUnix(const std::string& path) {
  FLYT_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket(AF_UNIX)", errno);
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return ErrnoError("connect to unix:" + path, errno);
  return fd;
}

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { ::freeaddrinfo(info); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

Result<AddrInfoPtr> Resolve(const Endpoint& endpoint, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* out = nullptr;
  std::string port = std::to_string(endpoint.port);
  const char* host = endpoint.host.empty() ? nullptr : endpoint.host.c_str();
  int rc = ::getaddrinfo(host, port.c_str(), &hints, &out);
  if (rc != 0) {
    return Unavailable("cannot resolve " + endpoint.host + ": " + ::gai_strerror(rc));
  }
  return AddrInfoPtr(out);
}

}  // namespace

std::string Endpoint::ToString() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  return FormatHostPort(host, port);
}

std::string HostBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

Result<Endpoint> ParseEndpoint(std::string_view text) {
  Endpoint endpoint;
  if (text.starts_with("unix:")) {
    endpoint.kind = Endpoint::Kind::kUnix;
    endpoint.path = std::string(text.substr(5));
    FLYT_RETURN_IF_ERROR(UnixAddress(endpoint.path).status());
    return endpoint;
  }
  std::string_view host, port;
  if (text.starts_with("[")) {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return InvalidArgument("bad endpoint '" + std::string(text) + "': want [ADDR]:PORT");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || text.find(':') != colon) {
      return InvalidArgument("bad endpoint '" + std::string(text) +
                             "': want HOST:PORT, [ADDR]:PORT or unix:PATH");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) return InvalidArgument("bad endpoint '" + std::string(text) + "': no host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return InvalidArgument("bad port '" + std::string(port) + "' in endpoint '" +
                           std::string(text) + "'");
  }
  endpoint.host = std::string(host);
  endpoint.port = static_cast<uint16_t>(value);
  return endpoint;
}

void TuneStreamSocket(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
  if (addr.ss_family == AF_UNIX) {
    // A Unix socket's send buffer is all the data in flight (208 KiB by default): a batch of
    // posted launches or a bulk copy then blocks the writer and wakes it once per chunk the
    // reader drains. A larger one (the kernel caps it at net.core.wmem_max) lets the writer run on.
    int bytes = 4 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    return;
  }
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  // A dead peer is noticed within about a minute instead of the default two hours.
  int idle_s = 30, interval_s = 10, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

Result<UniqueFd> Connect(const Endpoint& endpoint) {
  if (endpoint.kind == Endpoint::Kind::kUnix) {
    FLYT_ASSIGN_OR_RETURN(UniqueFd fd, ConnectUnix(endpoint.path));
    TuneStreamSocket(fd.get());
    return fd;
  }
  FLYT_ASSIGN_OR_RETURN(AddrInfoPtr infos, Resolve(endpoint, false));
  Status last = Unavailable("no address for " + endpoint.ToString());
  for (addrinfo* ai = infos.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = ErrnoError("socket", errno);
      continue;
    }
    int rc;
    do {
      rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      TuneStreamSocket(fd.get());
      return fd;
    }
    last = ErrnoError("connect to " + endpoint.ToString(), errno);
  }
  return last;
}

Result<UniqueFd> Listen(const Endpoint& endpoint) {
  if (endpoint.kind == Endpoint::Kind::kUnix) {
    FLYT_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(endpoint.path));
    struct stat st{};
    if (::lstat(endpoint.path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        return AlreadyExists(endpoint.path + " exists and is not a socket");
      }
      if (ConnectUnix(endpoint.path).ok()) {
        return AlreadyExists("a server already listens on unix:" + endpoint.path);
      }
      ::unlink(endpoint.path.c_str());  // left behind by a server that died
    }
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return ErrnoError("socket(AF_UNIX)", errno);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      return ErrnoError("bind unix:" + endpoint.path, errno);
    }
    if (::listen(fd.get(), 128) != 0) return ErrnoError("listen", errno);
    return fd;
  }
  FLYT_ASSIGN_OR_RETURN(AddrInfoPtr infos, Resolve(endpoint, true));
  Status last = Unavailable("no address for " + endpoint.ToString());
  for (addrinfo* ai = infos.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = ErrnoError("socket", errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = ErrnoError("bind " + endpoint.ToString(), errno);
      continue;
    }
    if (::listen(fd.get(), 128) != 0) {
      last = ErrnoError("listen " + endpoint.ToString(), errno);
      continue;
    }
    return fd;
  }
  return last;
}

Result<uint16_t> BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoError("getsockname", errno);
  }
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return InvalidArgument("not a TCP socket");
}

Status WriteAll(int fd, std::span<const iovec> buffers) {
  std::vector<iovec> rest(buffers.begin(), buffers.end());
  size_t first = 0;
  while (first < rest.size()) {
    if (rest[first].iov_len == 0) {
      ++first;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = rest.data() + first;
    msg.msg_iovlen = std::min<size_t>(rest.size() - first, IOV_MAX);
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET) return Unavailable("connection closed by peer");
      return ErrnoError("send", errno);
    }
    size_t left = static_cast<size_t>(n);
    while (left > 0 && first < rest.size()) {
      if (left >= rest[first].iov_len) {
        left -= rest[first].iov_len;
        ++first;
      } else {
        rest[first].iov_base = static_cast<char*>(rest[first].iov_base) + left;
        rest[first].iov_len -= left;
        left = 0;
      }
    }
  }
  return Status::Ok();
}

Status WriteAll(int fd, std::span<const std::byte> bytes) {
  iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
  return WriteAll(fd, std::span<const iovec>(&iov, 1));
}

SocketReader::SocketReader(int fd, size_t buffer_bytes) : fd_(fd), buffer_(buffer_bytes) {}

Status SocketReader::Read(std::span<std::byte> out) {
  size_t done = 0;
  while (done < out.size()) {
    if (begin_ < end_) {
      size_t n = std::min(end_ - begin_, out.size() - done);
      std::memcpy(out.data() + done, buffer_.data() + begin_, n);
      begin_ += n;
      done += n;
      continue;
    }
    // Large reads go straight to the destination; small ones refill the buffer.
    bool direct = out.size() - done >= buffer_.size() / 2;
    std::byte* dst = direct ? out.data() + done : buffer_.data();
    size_t want = direct ? out.size() - done : buffer_.size();
    ssize_t n = ::recv(fd_, dst, want, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNRESET) return Unavailable("connection reset by peer");
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return Status(StatusCode::kTimeout, "timed out waiting for data");
      }
      return ErrnoError("recv", errno);
    }
    if (n == 0) {
      return Unavailable(done == 0 ? "connection closed" : "connection closed mid-message");
    }
    if (direct) {
      done += static_cast<size_t>(n);
    } else {
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
  }
  return Status::Ok();
}

Status SocketReader::Skip(size_t bytes) {
  std::byte scratch[4096];
  while (bytes > 0) {
    size_t n = std::min(bytes, sizeof scratch);
    FLYT_RETURN_IF_ERROR(Read(std::span<std::byte>(scratch, n)));
    bytes -= n;
  }
  return Status::Ok();
}

}  // namespace flyt::remote
