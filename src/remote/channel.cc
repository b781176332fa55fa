#include "remote/channel.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

namespace flyt::remote {
namespace {

bool IsUnixSocket(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  return addr.ss_family == AF_UNIX;
}

}  // namespace

SocketChannel::SocketChannel(int fd) : fd_(fd), unix_(IsUnixSocket(fd)), reader_(fd) {}

Result<bool> SocketChannel::WaitReadable(std::chrono::milliseconds timeout) {
  if (reader_.buffered() > 0) return true;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30)));
    if (n > 0) return true;  // data, or the end of the stream: Read says which
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("poll", errno);
    if (left.count() <= 0) return false;
  }
}

void SocketChannel::Shutdown() { ::shutdown(fd_, SHUT_RDWR); }

}  // namespace flyt::remote
