// Transports for the remote CUDA protocol: TCP and Unix domain stream sockets, behind one
// Endpoint type ("HOST:PORT", "[v6addr]:PORT" or "unix:PATH"), plus the blocking byte I/O both
// ends use (whole writes, exact reads, a read buffer that keeps small frames to few syscalls).
//
// TCP sockets get TCP_NODELAY (the protocol batches on its own; Nagle would only add latency to
// each synchronising call) and keep-alive (a peer that vanishes without a FIN is noticed).
// Every descriptor is a UniqueFd. Functions are thread-safe; a SocketReader belongs to one thread.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace flyt::remote {

struct Endpoint {
  enum class Kind { kTcp, kUnix };
  Kind kind = Kind::kTcp;
  std::string host;  // kTcp: a name or an address (without brackets)
  uint16_t port = 0;  // kTcp; 0 when listening means "any free port"
  std::string path;  // kUnix

  // "127.0.0.1:12500", "[::1]:12500" or "unix:/run/flyt/x.sock".
  std::string ToString() const;
};

[[nodiscard]] Result<Endpoint> ParseEndpoint(std::string_view text);
// This host's boot id (/proc/sys/kernel/random/boot_id): the same for every container and
// VM-less namespace of one running kernel, so equal ids mean one host ("" when unreadable).
std::string HostBootId();

// Connects (blocking). TCP tries every address the name resolves to.
[[nodiscard]] Result<UniqueFd> Connect(const Endpoint& endpoint);

// Binds and listens. A Unix socket path left behind by a dead server is replaced; one a live
// server listens on is an error (kAlreadyExists).
[[nodiscard]] Result<UniqueFd> Listen(const Endpoint& endpoint);

// The port a TCP socket is bound to (after Listen with port 0).
[[nodiscard]] Result<uint16_t> BoundPort(int fd);

// Sets TCP_NODELAY and keep-alive on a connected TCP socket; a no-op for Unix sockets.
void TuneStreamSocket(int fd);

// Writes every byte of every buffer (handles short writes and EINTR; never raises SIGPIPE).
[[nodiscard]] Status WriteAll(int fd, std::span<const iovec> buffers);
[[nodiscard]] Status WriteAll(int fd, std::span<const std::byte> bytes);

// Buffered reads from a stream socket. Read() fills exactly `out`; a closed peer is kUnavailable
// ("connection closed"), a partial message before the close is kUnavailable too.
class SocketReader {
 public:
  explicit SocketReader(int fd, size_t buffer_bytes = 32 << 10);

  [[nodiscard]] Status Read(std::span<std::byte> out);
  // Reads and throws away `bytes` bytes.
  [[nodiscard]] Status Skip(size_t bytes);
  // Bytes already buffered (read from the socket, not yet consumed).
  size_t buffered() const { return end_ - begin_; }

 private:
  int fd_;
  std::vector<std::byte> buffer_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace flyt::remote
