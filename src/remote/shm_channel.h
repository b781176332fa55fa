// ShmChannel: the protocol's byte stream between a client and the server on one host, carried by
// two single-producer/single-consumer rings in a memfd that both map, instead of by a socket.
//
// Set-up: the server makes the region (CreateShm) and maps it (ShmRegion::MapServer); it sends
// the memfd and two eventfds to the client over the Unix socket they are connected by
// (SendWithFds); the client receives them (ReadWithFds) and maps the region after checking it
// (ShmRegion::MapClient). The socket stays open: its end is how each side learns that the other
// is gone (a process that dies closes it), so a ShmChannel polls it while it sleeps.
//
// The region (one memfd, sealed against shrinking and growing, so that no mapping of it can
// fault with SIGBUS):
//   [0, 4 KiB)        header: magic "FLYTSHM1", layout version, sizes and offsets of the parts,
//                     and one `closed` flag per side (set by Shutdown);
//   control + data    the client->server ring: a control page (head, tail, consumer_sleeping,
//                     producer_sleeping, each on its own cache line) and ring_bytes of data;
//   control + data    the server->client ring, the same;
//   arena             arena_bytes for bulk data (2 MiB aligned offset), which the channel
//                     itself does not use.
// head is written only by the ring's producer (bytes written in all), tail only by its consumer
// (bytes consumed in all); both grow without bound and are taken modulo ring_bytes.
//
// Trust: each side can scribble on all of the shared memory. The server never reads sizes or
// offsets back from it (MapServer takes them from the layout it made); the client reads them
// once, checks them, and keeps its own copy. A channel checks every index the peer writes (a
// corrupt one is kInvalidArgument, "shared-memory ring corrupt: ...") and copies each byte out
// of shared memory once, so a hostile peer can garble its own messages but cannot make the other
// side read out of bounds or use a value other than the one it checked.
//
// Waking: a side that waits spins for Options::spin, then announces that it sleeps
// (consumer_sleeping or producer_sleeping), re-checks the ring and sleeps in poll() on its own
// eventfd and the socket. The other side writes the peer's eventfd after it publishes an index
// and finds the flag set. Flag and index are seq_cst on both sides (Dekker), so no wake-up is lost.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "remote/channel.h"

namespace flyt::remote {

// Sizes of a region. ring_bytes: a power of two in [64 KiB, 256 MiB]; arena_bytes: at most
// 64 GiB, may be 0.
struct ShmLayout {
  uint64_t ring_bytes = 4 << 20;
  uint64_t arena_bytes = 256ull << 20;
};

// What CreateShm makes: the region and the eventfds each side sleeps on. They are passed to the
// client in this order (memfd, server_wake, client_wake; protocol.h's kShmFdCount).
struct ShmFds {
  UniqueFd memfd;
  UniqueFd server_wake;
  UniqueFd client_wake;
};

// Server side: a sealed memfd holding a fresh region of `layout` (header written, rings empty),
// and two non-blocking eventfds. A layout out of range is kInvalidArgument.
[[nodiscard]] Result<ShmFds> CreateShm(const ShmLayout& layout);

namespace shm_internal {

// The control block of one ring, in shared memory. Each index and flag has its own cache line,
// so that the producer's and the consumer's stores do not contend.
struct RingControl {
  alignas(64) std::atomic<uint64_t> head;  // written by the producer: bytes written in all
  alignas(64) std::atomic<uint64_t> tail;  // written by the consumer: bytes consumed in all
  alignas(64) std::atomic<uint32_t> consumer_sleeping;
  alignas(64) std::atomic<uint32_t> producer_sleeping;
};

// The rings, by direction.
inline constexpr int kClientToServer = 0;
inline constexpr int kServerToClient = 1;
// The `closed` flags, by side.
inline constexpr int kServerSide = 0;
inline constexpr int kClientSide = 1;

}  // namespace shm_internal

// A MAP_SHARED mapping of a whole region, unmapped on destruction. The sizes and offsets it
// reports are its own trusted copy, never re-read from the shared header. Thread-safe (immutable
// after construction; the memory it maps is shared by design).
class ShmRegion {
 public:
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  // Maps the server's own memfd, as made by CreateShm with `layout`.
  [[nodiscard]] static Result<std::unique_ptr<ShmRegion>> MapServer(int memfd,
                                                                    const ShmLayout& layout);
  // Checks a memfd received from the server (sealed against shrinking and growing, a header
  // with the right magic and version, sizes in range, every part inside the file) and maps it.
  // Each refusal is kInvalidArgument saying why. `memfd` may be closed after this returns.
  [[nodiscard]] static Result<std::unique_ptr<ShmRegion>> MapClient(int memfd);

  std::byte* base() { return base_; }
  uint64_t size() const { return size_; }
  uint64_t ring_bytes() const { return ring_bytes_; }
  std::byte* arena() { return base_ + arena_offset_; }
  uint64_t arena_bytes() const { return arena_bytes_; }
  // Whether [offset, offset + bytes) lies inside the arena (no overflow for any inputs).
  bool InArena(uint64_t offset, uint64_t bytes) const {
    return offset <= arena_bytes_ && bytes <= arena_bytes_ - offset;
  }

  // The parts the channel uses: a ring's control block and data (ring: shm_internal::
  // kClientToServer or kServerToClient) and a side's `closed` flag (shm_internal::kServerSide or
  // kClientSide).
  shm_internal::RingControl* control(int ring);
  std::byte* ring_data(int ring) { return base_ + data_offset_[ring]; }
  std::atomic<uint32_t>* closed_flag(int side);

 private:
  ShmRegion() = default;
  // Maps `size` bytes of `memfd` and takes the parts' offsets from `header` (a checked Header
  // of shm_channel.cc, where this is defined and used).
  template <typename Header>
  static Result<std::unique_ptr<ShmRegion>> MapWith(int memfd, uint64_t size, const Header& header);

  std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t ring_bytes_ = 0;
  uint64_t arena_bytes_ = 0;
  uint64_t arena_offset_ = 0;
  uint64_t control_offset_[2] = {0, 0};
  uint64_t data_offset_[2] = {0, 0};
};

// Sends `bytes` (non-empty) over a stream socket with `fds` attached (SCM_RIGHTS) to the first
// byte; the rest of the bytes follow if the first send was short. Never raises SIGPIPE; a closed
// peer is kUnavailable.
[[nodiscard]] Status SendWithFds(int sock, std::span<const std::byte> bytes,
                                 std::span<const int> fds);

// Reads exactly out.size() bytes from a stream socket, unbuffered (nothing past `out` is taken
// from the socket), and appends the descriptors that came with them to `fds` (close-on-exec).
// More than `max_fds` descriptors, or truncated control data, is kInvalidArgument (every received
// descriptor is closed, none is appended); EOF is kUnavailable ("connection closed").
[[nodiscard]] Status ReadWithFds(int sock, std::span<std::byte> out, std::vector<UniqueFd>* fds,
                                 size_t max_fds);

// Tuning of a ShmChannel (ShmChannel::Options).
struct ShmChannelOptions {
  // How long a waiting side spins before it sleeps (0: sleep at once).
  std::chrono::microseconds spin{20};
};

// One end of a shared-memory byte stream (see the file comment). Used by one thread at a time,
// except Shutdown(), which any thread may call.
class ShmChannel final : public Channel {
 public:
  enum class Side { kServer, kClient };
  using Options = ShmChannelOptions;

  // own_wake: the eventfd this side sleeps on; peer_wake: the peer's (written to wake it).
  // socket: the Unix socket to the peer (not owned), polled while sleeping: any event on it
  // (data, EOF, hang-up, error) means that the peer is gone or misbehaving (kUnavailable).
  // The channel takes up the rings where they stand (both at 0 in a fresh region), so that a
  // process that replaces one which died can go on from the same region. Indices it finds
  // inconsistent make every call fail as corrupt.
  ShmChannel(Side side, std::shared_ptr<ShmRegion> region, UniqueFd own_wake, UniqueFd peer_wake,
             int socket, Options options = {});
  ~ShmChannel() override = default;

  Status Write(std::span<const iovec> buffers) override;
  using Channel::Write;
  // Bytes the peer wrote before it closed are still read; after them, kUnavailable.
  Status Read(std::span<std::byte> out) override;
  Status Skip(size_t bytes) override;
  size_t buffered() const override;
  Result<bool> WaitReadable(std::chrono::milliseconds timeout) override;
  // Sets this side's `closed` flag, wakes the peer and shuts the socket down (both ways), so that
  // both ends' blocked and later calls fail.
  void Shutdown() override;
  std::string_view Kind() const override { return "shm"; }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Wait { kReady, kGone, kTimedOut };

  // Loads the peer's head of the incoming ring, checks it, and returns the bytes readable now.
  Result<uint64_t> RefreshReadable();
  // Loads the peer's tail of the outgoing ring, checks it, and returns the free bytes now.
  Result<uint64_t> RefreshRoom();
  // Publishes the outgoing head and wakes the consumer if it sleeps.
  void PublishHead();
  // Publishes the incoming tail and wakes the producer if it sleeps.
  void PublishTail();
  // Reads (copying into `out` unless it is null) or skips `bytes` incoming bytes.
  Status Consume(std::byte* out, size_t bytes);
  // Waits until `ready` gives a non-zero count, the peer is gone, or `deadline` passes.
  // `sleeping` is the flag this side sets before it sleeps.
  template <typename Ready>
  Result<Wait> Await(Ready ready, std::atomic<uint32_t>* sleeping,
                     std::optional<Clock::time_point> deadline);
  // Whether this side was shut down or the peer is known to be gone (flag or socket event).
  bool Closed() const;
  // Polls the socket without waiting; an event on it marks the peer as gone.
  void CheckSocket();
  void DrainOwnWake();
  static void Wake(int fd);
  Status Corrupt(std::string what);

  Side side_;
  std::shared_ptr<ShmRegion> region_;
  UniqueFd own_wake_;
  UniqueFd peer_wake_;
  int socket_;
  Options options_;

  // Trusted copies of the region's geometry.
  uint64_t ring_bytes_;
  uint64_t mask_;
  shm_internal::RingControl* out_ctl_;
  std::byte* out_data_;
  shm_internal::RingControl* in_ctl_;
  std::byte* in_data_;
  std::atomic<uint32_t>* own_closed_;
  std::atomic<uint32_t>* peer_closed_;

  // Local indices. out_head_ is ours (the shared head only mirrors it); out_tail_ is the peer's
  // tail as last checked. in_tail_ is ours; in_head_ is the peer's head as last checked.
  uint64_t out_head_ = 0;
  uint64_t out_tail_ = 0;
  uint64_t in_tail_ = 0;
  uint64_t in_head_ = 0;

  std::atomic<bool> peer_gone_{false};
  // Set once a corrupt index was seen: every later call fails with it.
  std::string corrupt_;
};

}  // namespace flyt::remote
