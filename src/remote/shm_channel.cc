#include "remote/shm_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

namespace flyt::remote {
namespace {

using shm_internal::RingControl;

// Atomics that two processes share must not hide a lock in either process.
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(std::is_standard_layout_v<RingControl>);

constexpr uint64_t Magic(const char (&text)[9]) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(text[i]);
  return value;
}

constexpr uint64_t kMagic = Magic("FLYTSHM1");  // the bytes "FLYTSHM1" in memory order
constexpr uint32_t kVersion = 1;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kHeaderBytes = kPage;
constexpr uint64_t kControlBytes = kPage;
constexpr uint64_t kArenaAlign = 2ull << 20;
constexpr uint64_t kMinRing = 64ull << 10;
constexpr uint64_t kMaxRing = 256ull << 20;
constexpr uint64_t kMaxArena = 64ull << 30;
// The `closed` flags live in the header page, past the fixed fields, a cache line each.
constexpr uint64_t kClosedOffset[2] = {256, 320};

// The fixed fields at the start of the header page, as written by CreateShm and read (by pread,
// into a private copy) by MapClient.
struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint64_t ring_bytes;
  uint64_t arena_bytes;
  uint64_t control_offset[2];
  uint64_t data_offset[2];
  uint64_t arena_offset;
  uint64_t total_bytes;
};
static_assert(std::is_trivially_copyable_v<Header>);
static_assert(sizeof(Header) <= kClosedOffset[0]);
static_assert(sizeof(RingControl) <= kControlBytes);

constexpr uint64_t AlignUp(uint64_t value, uint64_t align) {
  return (value + align - 1) & ~(align - 1);
}

bool IsPowerOfTwo(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

Status CheckLayout(uint64_t ring_bytes, uint64_t arena_bytes) {
  if (!IsPowerOfTwo(ring_bytes) || ring_bytes < kMinRing || ring_bytes > kMaxRing) {
    return InvalidArgument("shared-memory ring size " + std::to_string(ring_bytes) +
                           " is not a power of two between " + std::to_string(kMinRing) + " and " +
                           std::to_string(kMaxRing) + " bytes");
  }
  if (arena_bytes > kMaxArena) {
    return InvalidArgument("shared-memory arena size " + std::to_string(arena_bytes) +
                           " is over the limit of " + std::to_string(kMaxArena) + " bytes");
  }
  return Status::Ok();
}

// The canonical header for sizes that passed CheckLayout (no sum can overflow: every part is
// bounded far below 2^64).
Header MakeHeader(uint64_t ring_bytes, uint64_t arena_bytes) {
  Header h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.header_bytes = static_cast<uint32_t>(kHeaderBytes);
  h.ring_bytes = ring_bytes;
  h.arena_bytes = arena_bytes;
  uint64_t at = kHeaderBytes;
  for (int ring = 0; ring < 2; ++ring) {
    h.control_offset[ring] = at;
    at += kControlBytes;
    h.data_offset[ring] = at;
    at += ring_bytes;
  }
  if (arena_bytes > 0) at = AlignUp(at, kArenaAlign);
  h.arena_offset = at;
  h.total_bytes = at + arena_bytes;
  return h;
}

// Whether [offset, offset + bytes) lies inside [0, size), for any inputs.
bool Fits(uint64_t offset, uint64_t bytes, uint64_t size) {
  return offset <= size && bytes <= size - offset;
}

// Whether two parts that each Fit overlap.
bool Overlap(uint64_t a, uint64_t a_bytes, uint64_t b, uint64_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

// Checks a header read from a file of `file_size` bytes.
Status CheckHeader(const Header& h, uint64_t file_size) {
  if (h.magic != kMagic) {
    return InvalidArgument("the server's shared memory has no flyt header (bad magic)");
  }
  if (h.version != kVersion) {
    return InvalidArgument("the server's shared memory has layout version " +
                           std::to_string(h.version) + ", this client knows version " +
                           std::to_string(kVersion));
  }
  if (h.header_bytes != kHeaderBytes) {
    return InvalidArgument("the server's shared memory has a header of " +
                           std::to_string(h.header_bytes) + " bytes, not " +
                           std::to_string(kHeaderBytes));
  }
  FLYT_RETURN_IF_ERROR(CheckLayout(h.ring_bytes, h.arena_bytes).WithContext("the server's header"));
  struct Part {
    const char* name;
    uint64_t offset;
    uint64_t bytes;
    uint64_t align;
  };
  const Part parts[] = {
      {"header", 0, kHeaderBytes, kPage},
      {"client->server control", h.control_offset[0], kControlBytes, kPage},
      {"client->server ring", h.data_offset[0], h.ring_bytes, kPage},
      {"server->client control", h.control_offset[1], kControlBytes, kPage},
      {"server->client ring", h.data_offset[1], h.ring_bytes, kPage},
      {"arena", h.arena_offset, h.arena_bytes, kPage},
  };
  for (const Part& part : parts) {
    if (!Fits(part.offset, part.bytes, file_size)) {
      return InvalidArgument(std::string("the server's shared memory is too small: its ") +
                             part.name + " (offset " + std::to_string(part.offset) + ", " +
                             std::to_string(part.bytes) + " bytes) ends past the file's " +
                             std::to_string(file_size) + " bytes");
    }
    if (part.offset % part.align != 0) {
      return InvalidArgument(std::string("the server's shared memory has a misaligned ") +
                             part.name + " (offset " + std::to_string(part.offset) + ")");
    }
  }
  for (size_t i = 0; i < std::size(parts); ++i) {
    for (size_t j = i + 1; j < std::size(parts); ++j) {
      if (parts[i].bytes == 0 || parts[j].bytes == 0) continue;
      if (Overlap(parts[i].offset, parts[i].bytes, parts[j].offset, parts[j].bytes)) {
        return InvalidArgument(std::string("the server's shared memory has overlapping parts (") +
                               parts[i].name + " and " + parts[j].name + ")");
      }
    }
  }
  return Status::Ok();
}

Result<std::byte*> MapWhole(int memfd, uint64_t size) {
  if (size > static_cast<uint64_t>(std::numeric_limits<size_t>::max())) {
    return InvalidArgument("shared memory too large to map");
  }
  void* base =
      ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (base == MAP_FAILED) return ErrnoError("mmap of the shared memory", errno);
  return static_cast<std::byte*>(base);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Copies `bytes` bytes into a ring at index `at` (wrapping).
void CopyIn(std::byte* ring, uint64_t mask, uint64_t at, const std::byte* from, size_t bytes) {
  uint64_t offset = at & mask;
  size_t first = static_cast<size_t>(std::min<uint64_t>(bytes, mask + 1 - offset));
  std::memcpy(ring + offset, from, first);
  if (first < bytes) std::memcpy(ring, from + first, bytes - first);
}

// Copies `bytes` bytes out of a ring at index `at` (wrapping).
void CopyOut(const std::byte* ring, uint64_t mask, uint64_t at, std::byte* to, size_t bytes) {
  uint64_t offset = at & mask;
  size_t first = static_cast<size_t>(std::min<uint64_t>(bytes, mask + 1 - offset));
  std::memcpy(to, ring + offset, first);
  if (first < bytes) std::memcpy(to + first, ring, bytes - first);
}

Status ConnectionClosed() { return Unavailable("connection closed"); }

}  // namespace

// ---- Region -------------------------------------------------------------------------------

Result<ShmFds> CreateShm(const ShmLayout& layout) {
  FLYT_RETURN_IF_ERROR(CheckLayout(layout.ring_bytes, layout.arena_bytes));
  const Header header = MakeHeader(layout.ring_bytes, layout.arena_bytes);
  ShmFds fds;
  fds.memfd = UniqueFd(::memfd_create("flyt-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fds.memfd.valid()) return ErrnoError("memfd_create", errno);
  if (::ftruncate(fds.memfd.get(), static_cast<off_t>(header.total_bytes)) != 0) {
    return ErrnoError("ftruncate of the shared memory", errno);
  }
  ssize_t n;
  do {
    n = ::pwrite(fds.memfd.get(), &header, sizeof header, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoError("writing the shared-memory header", errno);
  if (static_cast<size_t>(n) != sizeof header) {
    return Internal("short write of the shared-memory header");
  }
  if (::fcntl(fds.memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return ErrnoError("sealing the shared memory", errno);
  }
  fds.server_wake = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fds.server_wake.valid()) return ErrnoError("eventfd", errno);
  fds.client_wake = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fds.client_wake.valid()) return ErrnoError("eventfd", errno);
  return fds;
}

ShmRegion::~ShmRegion() {
  if (base_ != nullptr) ::munmap(base_, static_cast<size_t>(size_));
}

template <typename Header>
Result<std::unique_ptr<ShmRegion>> ShmRegion::MapWith(int memfd, uint64_t size,
                                                      const Header& h) {
  std::unique_ptr<ShmRegion> region(new ShmRegion());
  FLYT_ASSIGN_OR_RETURN(region->base_, MapWhole(memfd, size));
  region->size_ = size;
  region->ring_bytes_ = h.ring_bytes;
  region->arena_bytes_ = h.arena_bytes;
  region->arena_offset_ = h.arena_offset;
  for (int ring = 0; ring < 2; ++ring) {
    region->control_offset_[ring] = h.control_offset[ring];
    region->data_offset_[ring] = h.data_offset[ring];
  }
  return region;
}

Result<std::unique_ptr<ShmRegion>> ShmRegion::MapServer(int memfd, const ShmLayout& layout) {
  FLYT_RETURN_IF_ERROR(CheckLayout(layout.ring_bytes, layout.arena_bytes));
  const Header h = MakeHeader(layout.ring_bytes, layout.arena_bytes);
  struct stat st {};
  if (::fstat(memfd, &st) != 0) return ErrnoError("fstat of the shared memory", errno);
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) != h.total_bytes) {
    return InvalidArgument("the shared memory has " + std::to_string(st.st_size) +
                           " bytes, its layout needs " + std::to_string(h.total_bytes));
  }
  return MapWith(memfd, h.total_bytes, h);
}

Result<std::unique_ptr<ShmRegion>> ShmRegion::MapClient(int memfd) {
  int seals = ::fcntl(memfd, F_GET_SEALS);
  if (seals < 0) {
    if (errno == EINVAL) {
      return InvalidArgument("the server's shared memory is not a sealable memfd");
    }
    return ErrnoError("F_GET_SEALS of the server's shared memory", errno);
  }
  if ((seals & F_SEAL_SHRINK) == 0 || (seals & F_SEAL_GROW) == 0) {
    return InvalidArgument(
        "the server's shared memory is not sealed against shrinking and growing");
  }
  struct stat st {};
  if (::fstat(memfd, &st) != 0) return ErrnoError("fstat of the server's shared memory", errno);
  if (!S_ISREG(st.st_mode) || st.st_size < 0) {
    return InvalidArgument("the server's shared memory is not a regular memfd");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kHeaderBytes) {
    return InvalidArgument("the server's shared memory is too small for a header (" +
                           std::to_string(file_size) + " bytes)");
  }
  Header h{};
  ssize_t n;
  do {
    n = ::pread(memfd, &h, sizeof h, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoError("reading the server's shared-memory header", errno);
  if (static_cast<size_t>(n) != sizeof h) {
    return InvalidArgument("short read of the server's shared-memory header");
  }
  FLYT_RETURN_IF_ERROR(CheckHeader(h, file_size));
  return MapWith(memfd, file_size, h);
}

RingControl* ShmRegion::control(int ring) {
  // The memory is zero-filled by the memfd; zero is a valid value of each lock-free atomic.
  return reinterpret_cast<RingControl*>(base_ + control_offset_[ring]);
}

std::atomic<uint32_t>* ShmRegion::closed_flag(int side) {
  return reinterpret_cast<std::atomic<uint32_t>*>(base_ + kClosedOffset[side]);
}

// ---- Descriptor passing -------------------------------------------------------------------

Status SendWithFds(int sock, std::span<const std::byte> bytes, std::span<const int> fds) {
  if (bytes.empty()) return InvalidArgument("SendWithFds needs at least one byte to send");
  if (fds.size() > 253) return InvalidArgument("too many descriptors to send at once");
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EPIPE || errno == ECONNRESET) return Unavailable("connection closed by peer");
    return ErrnoError("sendmsg", errno);
  }
  size_t done = static_cast<size_t>(n);
  while (done < bytes.size()) {
    n = ::send(sock, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET) return Unavailable("connection closed by peer");
      return ErrnoError("send", errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status ReadWithFds(int sock, std::span<std::byte> out, std::vector<UniqueFd>* fds, size_t max_fds) {
  std::vector<UniqueFd> received;
  // Room for one descriptor more than allowed, so that "too many" is seen as such rather than
  // only as truncation (the kernel closes what does not fit).
  std::vector<char> control(CMSG_SPACE(sizeof(int) * (max_fds + 1)));
  size_t done = 0;
  while (done < out.size()) {
    iovec iov{out.data() + done, out.size() - done};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ECONNRESET) return Unavailable("connection reset by peer");
      return ErrnoError("recvmsg", errno);
    }
    // Take ownership of every descriptor first, so that each is closed on any refusal below.
    for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
      if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
      if (cmsg->cmsg_len < CMSG_LEN(0)) continue;
      size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const unsigned char* data = CMSG_DATA(cmsg);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, data + i * sizeof(int), sizeof fd);
        received.emplace_back(fd);
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      return InvalidArgument("the peer sent more descriptors than expected (control data cut)");
    }
    if (received.size() > max_fds) {
      return InvalidArgument("the peer sent " + std::to_string(received.size()) +
                             " descriptors, at most " + std::to_string(max_fds) + " expected");
    }
    if (n == 0) return ConnectionClosed();
    done += static_cast<size_t>(n);
  }
  for (UniqueFd& fd : received) fds->push_back(std::move(fd));
  return Status::Ok();
}

// ---- Channel ------------------------------------------------------------------------------

ShmChannel::ShmChannel(Side side, std::shared_ptr<ShmRegion> region, UniqueFd own_wake,
                       UniqueFd peer_wake, int socket, Options options)
    : side_(side),
      region_(std::move(region)),
      own_wake_(std::move(own_wake)),
      peer_wake_(std::move(peer_wake)),
      socket_(socket),
      options_(options),
      ring_bytes_(region_->ring_bytes()),
      mask_(ring_bytes_ - 1) {
  const bool server = side_ == Side::kServer;
  const int out = server ? shm_internal::kServerToClient : shm_internal::kClientToServer;
  const int in = server ? shm_internal::kClientToServer : shm_internal::kServerToClient;
  out_ctl_ = region_->control(out);
  out_data_ = region_->ring_data(out);
  in_ctl_ = region_->control(in);
  in_data_ = region_->ring_data(in);
  own_closed_ =
      region_->closed_flag(server ? shm_internal::kServerSide : shm_internal::kClientSide);
  peer_closed_ =
      region_->closed_flag(server ? shm_internal::kClientSide : shm_internal::kServerSide);
  // Take up the rings where they stand. Our own indices come from shared memory here, once, and
  // are checked like the peer's: a peer that scribbled on them only ends the connection.
  out_head_ = out_ctl_->head.load(std::memory_order_seq_cst);
  out_tail_ = out_ctl_->tail.load(std::memory_order_seq_cst);
  in_tail_ = in_ctl_->tail.load(std::memory_order_seq_cst);
  in_head_ = in_tail_;
  if (out_tail_ > out_head_ || out_head_ - out_tail_ > ring_bytes_) {
    corrupt_ = "shared-memory ring corrupt: the outgoing ring's head " + std::to_string(out_head_) +
               " and tail " + std::to_string(out_tail_) + " are inconsistent";
  }
}

Status ShmChannel::Corrupt(std::string what) {
  if (corrupt_.empty()) corrupt_ = "shared-memory ring corrupt: " + std::move(what);
  return InvalidArgument(corrupt_);
}

Result<uint64_t> ShmChannel::RefreshReadable() {
  if (!corrupt_.empty()) return InvalidArgument(corrupt_);
  const uint64_t head = in_ctl_->head.load(std::memory_order_seq_cst);
  if (head < in_head_) {
    return Corrupt("the peer's head went back from " + std::to_string(in_head_) + " to " +
                   std::to_string(head));
  }
  if (head - in_tail_ > ring_bytes_) {
    return Corrupt("the peer's head " + std::to_string(head) + " is " +
                   std::to_string(head - in_tail_) + " bytes past the tail, the ring holds " +
                   std::to_string(ring_bytes_));
  }
  in_head_ = head;
  return head - in_tail_;
}

Result<uint64_t> ShmChannel::RefreshRoom() {
  if (!corrupt_.empty()) return InvalidArgument(corrupt_);
  const uint64_t tail = out_ctl_->tail.load(std::memory_order_seq_cst);
  if (tail > out_head_) {
    return Corrupt("the peer's tail " + std::to_string(tail) + " is ahead of the head " +
                   std::to_string(out_head_));
  }
  if (tail < out_tail_) {
    return Corrupt("the peer's tail went back from " + std::to_string(out_tail_) + " to " +
                   std::to_string(tail));
  }
  out_tail_ = tail;
  return ring_bytes_ - (out_head_ - tail);
}

void ShmChannel::Wake(int fd) {
  const uint64_t one = 1;
  ssize_t n;
  // A full counter (EAGAIN) already wakes the sleeper; nothing else is worth reporting here.
  do {
    n = ::write(fd, &one, sizeof one);
  } while (n < 0 && errno == EINTR);
}

void ShmChannel::DrainOwnWake() {
  uint64_t count;
  ssize_t n;
  do {
    n = ::read(own_wake_.get(), &count, sizeof count);
  } while (n < 0 && errno == EINTR);
}

void ShmChannel::PublishHead() {
  out_ctl_->head.store(out_head_, std::memory_order_seq_cst);
  if (out_ctl_->consumer_sleeping.load(std::memory_order_seq_cst) != 0) Wake(peer_wake_.get());
}

void ShmChannel::PublishTail() {
  in_ctl_->tail.store(in_tail_, std::memory_order_seq_cst);
  if (in_ctl_->producer_sleeping.load(std::memory_order_seq_cst) != 0) Wake(peer_wake_.get());
}

bool ShmChannel::Closed() const {
  return own_closed_->load(std::memory_order_seq_cst) != 0 ||
         peer_closed_->load(std::memory_order_seq_cst) != 0 ||
         peer_gone_.load(std::memory_order_acquire);
}

void ShmChannel::CheckSocket() {
  pollfd pfd{socket_, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, 0);
  } while (rc < 0 && errno == EINTR);
  if (rc != 0) peer_gone_.store(true, std::memory_order_release);
}

template <typename Ready>
Result<ShmChannel::Wait> ShmChannel::Await(Ready ready, std::atomic<uint32_t>* sleeping,
                                           std::optional<Clock::time_point> deadline) {
  // Once the peer is known to be gone, one last look: what it published before it went is
  // still there to take.
  auto gone = [&]() -> Result<Wait> {
    if (own_closed_->load(std::memory_order_seq_cst) != 0) return Wait::kGone;
    FLYT_ASSIGN_OR_RETURN(uint64_t count, ready());
    return count > 0 ? Wait::kReady : Wait::kGone;
  };

  // Spin first: a peer that answers within microseconds is caught without a system call.
  if (options_.spin.count() > 0) {
    Clock::time_point spin_end = Clock::now() + options_.spin;
    if (deadline && *deadline < spin_end) spin_end = *deadline;
    for (uint32_t i = 1;; ++i) {
      FLYT_ASSIGN_OR_RETURN(uint64_t count, ready());
      if (count > 0) return Wait::kReady;
      if (Closed()) return gone();
      if (i % 4096 == 0) CheckSocket();
      if (i % 64 == 0 && Clock::now() >= spin_end) break;
      CpuRelax();
    }
  }

  // Then sleep: announce it, look again (the peer may have published before it saw the flag),
  // and sleep on the eventfd and the socket.
  for (;;) {
    sleeping->store(1, std::memory_order_seq_cst);
    Result<uint64_t> count = ready();
    if (!count.ok() || *count > 0) {
      sleeping->store(0, std::memory_order_seq_cst);
      if (!count.ok()) return count.status();
      return Wait::kReady;
    }
    if (Closed()) {
      sleeping->store(0, std::memory_order_seq_cst);
      return gone();
    }
    int timeout_ms = -1;
    if (deadline) {
      Clock::time_point now = Clock::now();
      if (now >= *deadline) {
        sleeping->store(0, std::memory_order_seq_cst);
        return Wait::kTimedOut;
      }
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - now).count();
      timeout_ms = static_cast<int>(std::min<int64_t>(left, std::numeric_limits<int>::max()));
    }
    pollfd pfds[2] = {{own_wake_.get(), POLLIN, 0}, {socket_, POLLIN, 0}};
    int rc = ::poll(pfds, 2, timeout_ms);
    sleeping->store(0, std::memory_order_seq_cst);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("poll", errno);
    }
    if (pfds[1].revents != 0) peer_gone_.store(true, std::memory_order_release);
    if (pfds[0].revents != 0) DrainOwnWake();
  }
}

Status ShmChannel::Write(std::span<const iovec> buffers) {
  if (Closed()) return ConnectionClosed();
  FLYT_ASSIGN_OR_RETURN(uint64_t room, RefreshRoom());
  for (const iovec& buffer : buffers) {
    const std::byte* from = static_cast<const std::byte*>(buffer.iov_base);
    size_t left = buffer.iov_len;
    while (left > 0) {
      if (room == 0) {
        // Let the consumer see what is there, then wait for it to make room.
        PublishHead();
        FLYT_ASSIGN_OR_RETURN(Wait wait, Await([this] { return RefreshRoom(); },
                                               &out_ctl_->producer_sleeping, std::nullopt));
        if (wait != Wait::kReady) return ConnectionClosed();
        FLYT_ASSIGN_OR_RETURN(room, RefreshRoom());
        continue;
      }
      size_t n = static_cast<size_t>(std::min<uint64_t>(room, left));
      CopyIn(out_data_, mask_, out_head_, from, n);
      out_head_ += n;
      from += n;
      left -= n;
      room -= n;
      // Streams larger than the ring are published chunk by chunk, so that the consumer starts
      // while the producer still copies.
      if (room == 0) PublishHead();
    }
  }
  PublishHead();
  return Status::Ok();
}

Status ShmChannel::Consume(std::byte* out, size_t bytes) {
  if (own_closed_->load(std::memory_order_seq_cst) != 0) return ConnectionClosed();
  size_t done = 0;
  while (done < bytes) {
    uint64_t available = in_head_ - in_tail_;
    if (available == 0) {
      FLYT_ASSIGN_OR_RETURN(available, RefreshReadable());
    }
    if (available == 0) {
      FLYT_ASSIGN_OR_RETURN(Wait wait, Await([this] { return RefreshReadable(); },
                                             &in_ctl_->consumer_sleeping, std::nullopt));
      if (wait != Wait::kReady) return ConnectionClosed();
      continue;
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(available, bytes - done));
    if (out != nullptr) CopyOut(in_data_, mask_, in_tail_, out + done, n);
    in_tail_ += n;
    done += n;
    PublishTail();
  }
  return Status::Ok();
}

Status ShmChannel::Read(std::span<std::byte> out) { return Consume(out.data(), out.size()); }

Status ShmChannel::Skip(size_t bytes) { return Consume(nullptr, bytes); }

size_t ShmChannel::buffered() const {
  if (!corrupt_.empty()) return 0;
  const uint64_t head = in_ctl_->head.load(std::memory_order_seq_cst);
  // A corrupt head counts as nothing here; the next Read reports it.
  if (head < in_head_ || head - in_tail_ > ring_bytes_) return 0;
  return static_cast<size_t>(head - in_tail_);
}

Result<bool> ShmChannel::WaitReadable(std::chrono::milliseconds timeout) {
  if (own_closed_->load(std::memory_order_seq_cst) != 0) return true;
  FLYT_ASSIGN_OR_RETURN(uint64_t available, RefreshReadable());
  if (available > 0 || Closed()) return true;
  FLYT_ASSIGN_OR_RETURN(Wait wait, Await([this] { return RefreshReadable(); },
                                         &in_ctl_->consumer_sleeping, Clock::now() + timeout));
  return wait != Wait::kTimedOut;
}

void ShmChannel::Shutdown() {
  own_closed_->store(1, std::memory_order_seq_cst);
  Wake(peer_wake_.get());
  // Our own thread may sleep in Await too: the shut socket and the eventfd both wake it.
  Wake(own_wake_.get());
  ::shutdown(socket_, SHUT_RDWR);
}

}  // namespace flyt::remote
