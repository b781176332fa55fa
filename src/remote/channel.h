// Channel: the byte stream one end of a remote CUDA connection reads frames from and writes
// frames to (protocol.h). Two kinds:
//   SocketChannel  a connected TCP or Unix stream socket (socket.h's WriteAll and SocketReader);
//   ShmChannel     two single-producer/single-consumer rings in a memfd shared by a client and
//                  the server on one host (shm_channel.h), set up over a Unix socket.
// The frames are the same on both; only the bytes' way differs.
//
// Thread safety: a Channel is used by one thread at a time (the client's Connection serialises
// its calls; a server connection has one thread). Shutdown() may be called from any thread.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <span>
#include <string_view>

#include "common/status.h"
#include "remote/socket.h"

namespace flyt::remote {

class Channel {
 public:
  virtual ~Channel() = default;

  // Writes every byte of every buffer, waiting for room as long as the peer lives.
  // A gone peer is kUnavailable.
  [[nodiscard]] virtual Status Write(std::span<const iovec> buffers) = 0;
  [[nodiscard]] Status Write(std::span<const std::byte> bytes) {
    iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
    return Write(std::span<const iovec>(&iov, 1));
  }
  // Fills exactly `out`. A closed peer is kUnavailable ("connection closed"), also mid-message.
  [[nodiscard]] virtual Status Read(std::span<std::byte> out) = 0;
  // Reads and throws away `bytes` bytes.
  [[nodiscard]] virtual Status Skip(size_t bytes) = 0;
  // Bytes that can be read now without waiting.
  virtual size_t buffered() const = 0;
  // Waits until a byte can be read or the peer is gone (then true: Read says which), or until
  // `timeout` passes (false). Not past the first byte: a frame may still be partial.
  [[nodiscard]] virtual Result<bool> WaitReadable(std::chrono::milliseconds timeout) = 0;
  // Ends the stream both ways: blocked and later reads and writes of either end fail.
  virtual void Shutdown() = 0;
  // "tcp", "unix" or "shm": how this channel's bytes travel.
  virtual std::string_view Kind() const = 0;
};

// A connected stream socket. Does not own `fd`.
class SocketChannel final : public Channel {
 public:
  explicit SocketChannel(int fd);
  Status Write(std::span<const iovec> buffers) override { return WriteAll(fd_, buffers); }
  using Channel::Write;
  Status Read(std::span<std::byte> out) override { return reader_.Read(out); }
  Status Skip(size_t bytes) override { return reader_.Skip(bytes); }
  size_t buffered() const override { return reader_.buffered(); }
  Result<bool> WaitReadable(std::chrono::milliseconds timeout) override;
  void Shutdown() override;
  std::string_view Kind() const override { return unix_ ? "unix" : "tcp"; }

 private:
  int fd_;
  bool unix_;
  SocketReader reader_;
};

}  // namespace flyt::remote
