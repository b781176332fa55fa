// Tests of the shared-memory channel: set-up over a socketpair (descriptor passing, the client's
// checks of what it receives), streaming through rings smaller than the data, sleeping and
// waking, a peer that closes or dies, and a peer that corrupts the shared indices.
#include "remote/shm_channel.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace flyt::remote {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using shm_internal::kClientToServer;
using shm_internal::kServerToClient;

std::span<const std::byte> Bytes(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

std::string ReadString(Channel& channel, size_t bytes) {
  std::string out(bytes, '\0');
  Status status = channel.Read(std::as_writable_bytes(std::span<char>(out.data(), out.size())));
  EXPECT_TRUE(status.ok()) << status.ToString();
  return out;
}

Status ReadU64(Channel& channel, uint64_t* value) {
  return channel.Read(std::as_writable_bytes(std::span<uint64_t>(value, 1)));
}

Status WriteU64(Channel& channel, uint64_t value) {
  return channel.Write(std::as_bytes(std::span<const uint64_t>(&value, 1)));
}

std::array<UniqueFd, 2> SocketPair() {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

int CountOpenFds() {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

// The server's half of the handshake: makes and maps the region, sends the memfd and both
// eventfds (with one byte) over `sock`, and returns its channel.
struct ServerEnd {
  std::shared_ptr<ShmRegion> region;
  std::unique_ptr<ShmChannel> channel;
};
Result<ServerEnd> ServerHandshake(int sock, const ShmLayout& layout, ShmChannel::Options options) {
  FLYT_ASSIGN_OR_RETURN(ShmFds fds, CreateShm(layout));
  ServerEnd end;
  FLYT_ASSIGN_OR_RETURN(end.region, ShmRegion::MapServer(fds.memfd.get(), layout));
  const std::byte hello[1] = {std::byte{'S'}};
  const int send[3] = {fds.memfd.get(), fds.server_wake.get(), fds.client_wake.get()};
  FLYT_RETURN_IF_ERROR(SendWithFds(sock, hello, send));
  end.channel = std::make_unique<ShmChannel>(ShmChannel::Side::kServer, end.region,
                                             std::move(fds.server_wake), std::move(fds.client_wake),
                                             sock, options);
  return end;
}

// The client's half: receives the descriptors, checks and maps the region, returns its channel.
struct ClientEnd {
  std::shared_ptr<ShmRegion> region;
  std::unique_ptr<ShmChannel> channel;
};
Result<ClientEnd> ClientHandshake(int sock, ShmChannel::Options options) {
  std::byte hello[1];
  std::vector<UniqueFd> fds;
  FLYT_RETURN_IF_ERROR(ReadWithFds(sock, hello, &fds, 3));
  if (fds.size() != 3) return InvalidArgument("expected 3 descriptors");
  ClientEnd end;
  FLYT_ASSIGN_OR_RETURN(end.region, ShmRegion::MapClient(fds[0].get()));
  end.channel = std::make_unique<ShmChannel>(ShmChannel::Side::kClient, end.region,
                                             std::move(fds[2]), std::move(fds[1]), sock, options);
  return end;
}

// Both ends in one process, connected by a socketpair.
struct Pair {
  UniqueFd server_sock;
  UniqueFd client_sock;
  ServerEnd server;
  ClientEnd client;
  ShmChannel& s() { return *server.channel; }
  ShmChannel& c() { return *client.channel; }
};

std::unique_ptr<Pair> MakePair(ShmLayout layout = {256 << 10, 4 << 20},
                               ShmChannel::Options options = {}) {
  auto pair = std::make_unique<Pair>();
  auto socks = SocketPair();
  pair->server_sock = std::move(socks[0]);
  pair->client_sock = std::move(socks[1]);
  auto server = ServerHandshake(pair->server_sock.get(), layout, options);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  if (!server.ok()) return nullptr;
  pair->server = std::move(*server);
  auto client = ClientHandshake(pair->client_sock.get(), options);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  if (!client.ok()) return nullptr;
  pair->client = std::move(*client);
  return pair;
}

// The byte at stream position `i` of the test pattern.
std::byte PatternByte(uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<std::byte>(x);
}

// ---- Layout and region ----------------------------------------------------------------------

TEST(ShmLayoutTest, CreateRefusesBadLayouts) {
  EXPECT_EQ(CreateShm({100000, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateShm({32 << 10, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateShm({512ull << 20, 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateShm({64 << 10, (64ull << 30) + 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CreateShm({64 << 10, 0}).ok());
}

TEST(ShmLayoutTest, ArenaIsSharedAndBoundsAreOverflowSafe) {
  auto pair = MakePair({64 << 10, 4 << 20});
  ASSERT_NE(pair, nullptr);
  ShmRegion& server = *pair->server.region;
  ShmRegion& client = *pair->client.region;
  EXPECT_EQ(server.arena_bytes(), 4u << 20);
  EXPECT_EQ(client.arena_bytes(), 4u << 20);
  EXPECT_EQ(server.size(), client.size());
  EXPECT_EQ((server.arena() - server.base()) % (2 << 20), 0);
  std::memcpy(server.arena() + 1000, "arena", 5);
  EXPECT_EQ(std::memcmp(client.arena() + 1000, "arena", 5), 0);

  EXPECT_TRUE(client.InArena(0, 4 << 20));
  EXPECT_TRUE(client.InArena(4 << 20, 0));
  EXPECT_FALSE(client.InArena(1, 4 << 20));
  EXPECT_FALSE(client.InArena((4 << 20) + 1, 0));
  EXPECT_FALSE(client.InArena(16, UINT64_MAX));
  EXPECT_FALSE(client.InArena(UINT64_MAX, 16));
  EXPECT_EQ(pair->s().Kind(), "shm");
}

TEST(ShmLayoutTest, ZeroArena) {
  auto pair = MakePair({64 << 10, 0});
  ASSERT_NE(pair, nullptr);
  EXPECT_EQ(pair->client.region->arena_bytes(), 0u);
  EXPECT_FALSE(pair->client.region->InArena(0, 1));
  ASSERT_TRUE(pair->c().Write(Bytes("ok")).ok());
  EXPECT_EQ(ReadString(pair->s(), 2), "ok");
}

// ---- Streaming ------------------------------------------------------------------------------

TEST(ShmChannelTest, SmallMessagesBothWays) {
  auto pair = MakePair();
  ASSERT_NE(pair, nullptr);
  for (int i = 0; i < 100; ++i) {
    std::string ping = "ping " + std::to_string(i);
    ASSERT_TRUE(pair->c().Write(Bytes(ping)).ok());
    EXPECT_EQ(pair->s().buffered(), ping.size());
    EXPECT_EQ(ReadString(pair->s(), ping.size()), ping);
    EXPECT_EQ(pair->s().buffered(), 0u);
    std::string pong = "pong " + std::to_string(i);
    ASSERT_TRUE(pair->s().Write(Bytes(pong)).ok());
    EXPECT_EQ(ReadString(pair->c(), pong.size()), pong);
  }
  // Several buffers in one write; a skip.
  std::string a = "head:", b = "skipped", c = "tail";
  iovec iov[3] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  ASSERT_TRUE(pair->s().Write(std::span<const iovec>(iov, 3)).ok());
  EXPECT_EQ(ReadString(pair->c(), a.size()), a);
  ASSERT_TRUE(pair->c().Skip(b.size()).ok());
  EXPECT_EQ(ReadString(pair->c(), c.size()), c);
}

TEST(ShmChannelTest, StreamFarLargerThanTheRing) {
  auto pair = MakePair({256 << 10, 0});
  ASSERT_NE(pair, nullptr);
  constexpr uint64_t kTotal = 64ull << 20;
  std::vector<std::byte> source(kTotal);
  for (uint64_t i = 0; i < kTotal; ++i) source[i] = PatternByte(i);

  std::thread writer([&] {
    // Odd-sized writes, then one write of most of the stream (far larger than the ring).
    uint64_t at = 0;
    const size_t sizes[] = {1, 7, 4093, 65536, 300000, 1};
    for (size_t n : sizes) {
      ASSERT_TRUE(pair->c().Write(std::span<const std::byte>(source.data() + at, n)).ok());
      at += n;
    }
    ASSERT_TRUE(pair->c().Write(std::span<const std::byte>(source.data() + at, kTotal - at)).ok());
  });
  std::vector<std::byte> sink(kTotal);
  uint64_t at = 0;
  size_t chunk = 3;
  while (at < kTotal) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, kTotal - at));
    ASSERT_TRUE(pair->s().Read(std::span<std::byte>(sink.data() + at, n)).ok());
    at += n;
    chunk = chunk * 7 % 5000011 + 1;  // from bytes to megabytes, never aligned to the ring
  }
  writer.join();
  uint64_t mismatches = 0;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < kTotal; ++i) {
    mismatches += sink[i] != source[i];
    sum = sum * 31 + static_cast<uint64_t>(sink[i]);
  }
  EXPECT_EQ(mismatches, 0u) << "checksum " << sum;
  EXPECT_EQ(pair->s().buffered(), 0u);
}

TEST(ShmChannelTest, WriterFarAheadFillsBlocksAndDrains) {
  auto pair = MakePair({64 << 10, 0});
  ASSERT_NE(pair, nullptr);
  constexpr size_t kTotal = 1 << 20;
  std::vector<std::byte> source(kTotal);
  for (size_t i = 0; i < kTotal; ++i) source[i] = PatternByte(i);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    EXPECT_TRUE(pair->s().Write(source).ok());
    done = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  // The writer filled the ring and sleeps on it.
  EXPECT_FALSE(done.load());
  EXPECT_EQ(pair->c().buffered(), 64u << 10);
  std::vector<std::byte> sink(kTotal);
  ASSERT_TRUE(pair->c().Read(sink).ok());
  writer.join();
  EXPECT_TRUE(done.load());
  EXPECT_EQ(sink, source);
}

// ---- Sleeping and waking --------------------------------------------------------------------

TEST(ShmChannelTest, SleepingReaderIsWoken) {
  auto pair = MakePair();
  ASSERT_NE(pair, nullptr);
  for (int round = 0; round < 3; ++round) {
    std::string got;
    std::thread reader([&] { got = ReadString(pair->s(), 5); });
    std::this_thread::sleep_for(milliseconds(50));  // far past the spin: the reader sleeps
    ASSERT_TRUE(pair->c().Write(Bytes("hello")).ok());
    reader.join();
    EXPECT_EQ(got, "hello");
  }
}

TEST(ShmChannelTest, PingPong) {
  auto pair = MakePair();
  ASSERT_NE(pair, nullptr);
  constexpr uint64_t kRounds = 20000;
  std::thread server([&] {
    for (uint64_t i = 0; i < kRounds; ++i) {
      uint64_t value = 0;
      ASSERT_TRUE(ReadU64(pair->s(), &value).ok());
      ASSERT_EQ(value, i);
      ASSERT_TRUE(WriteU64(pair->s(), value + 1).ok());
    }
  });
  for (uint64_t i = 0; i < kRounds; ++i) {
    ASSERT_TRUE(WriteU64(pair->c(), i).ok());
    uint64_t value = 0;
    ASSERT_TRUE(ReadU64(pair->c(), &value).ok());
    ASSERT_EQ(value, i + 1);
  }
  server.join();
}

TEST(ShmChannelTest, PingPongWithoutSpinning) {
  // Every wait sleeps at once: the wake-up path alone must carry the exchange.
  auto pair = MakePair({64 << 10, 0}, ShmChannel::Options{std::chrono::microseconds(0)});
  ASSERT_NE(pair, nullptr);
  constexpr uint64_t kRounds = 2000;
  std::thread server([&] {
    for (uint64_t i = 0; i < kRounds; ++i) {
      uint64_t value = 0;
      ASSERT_TRUE(ReadU64(pair->s(), &value).ok());
      ASSERT_TRUE(WriteU64(pair->s(), value + 1).ok());
    }
  });
  for (uint64_t i = 0; i < kRounds; ++i) {
    ASSERT_TRUE(WriteU64(pair->c(), i).ok());
    uint64_t value = 0;
    ASSERT_TRUE(ReadU64(pair->c(), &value).ok());
    ASSERT_EQ(value, i + 1);
  }
  server.join();
}

TEST(ShmChannelTest, WaitReadable) {
  auto pair = MakePair();
  ASSERT_NE(pair, nullptr);
  Clock::time_point start = Clock::now();
  auto ready = pair->s().WaitReadable(milliseconds(50));
  ASSERT_TRUE(ready.ok());
  EXPECT_FALSE(*ready);
  EXPECT_GE(Clock::now() - start, milliseconds(45));

  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_TRUE(pair->c().Write(Bytes("x")).ok());
  });
  start = Clock::now();
  ready = pair->s().WaitReadable(milliseconds(2000));
  writer.join();
  ASSERT_TRUE(ready.ok());
  EXPECT_TRUE(*ready);
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  EXPECT_EQ(pair->s().buffered(), 1u);
  // Readable now: true at once.
  ready = pair->s().WaitReadable(milliseconds(0));
  ASSERT_TRUE(ready.ok());
  EXPECT_TRUE(*ready);
  EXPECT_EQ(ReadString(pair->s(), 1), "x");
}

// ---- Closing --------------------------------------------------------------------------------

TEST(ShmChannelTest, PeerClosingTheSocketFailsABlockedRead) {
  auto pair = MakePair();
  ASSERT_NE(pair, nullptr);
  Status status;
  Clock::duration waited{};
  std::thread reader([&] {
    std::byte buffer[8];
    Clock::time_point start = Clock::now();
    status = pair->s().Read(buffer);
    waited = Clock::now() - start;
  });
  std::this_thread::sleep_for(milliseconds(50));
  Clock::time_point closed = Clock::now();
  pair->client_sock.Reset();  // as a dying client process would
  reader.join();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
  EXPECT_LT(Clock::now() - closed, milliseconds(500));
  // Later calls fail at once too.
  EXPECT_EQ(WriteU64(pair->s(), 1).code(), StatusCode::kUnavailable);
  auto ready = pair->s().WaitReadable(milliseconds(1000));
  ASSERT_TRUE(ready.ok());
  EXPECT_TRUE(*ready);
}

TEST(ShmChannelTest, BytesWrittenBeforeShutdownArrive) {
  auto pair = MakePair();
  ASSERT_NE(pair, nullptr);
  ASSERT_TRUE(pair->c().Write(Bytes("last words")).ok());
  pair->c().Shutdown();
  EXPECT_EQ(ReadString(pair->s(), 10), "last words");
  std::byte more[1];
  EXPECT_EQ(pair->s().Read(more).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pair->s().Write(Bytes("reply")).code(), StatusCode::kUnavailable);
  // The side that shut down fails too.
  EXPECT_EQ(pair->c().Write(Bytes("more")).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pair->c().Read(more).code(), StatusCode::kUnavailable);
}

TEST(ShmChannelTest, PeerShutdownWakesABlockedReadAndAPartialMessageFails) {
  auto pair = MakePair();
  ASSERT_NE(pair, nullptr);
  Status status;
  std::thread reader([&] {
    std::byte buffer[8];
    status = pair->s().Read(buffer);
  });
  ASSERT_TRUE(pair->c().Write(Bytes("half")).ok());
  std::this_thread::sleep_for(milliseconds(30));
  pair->c().Shutdown();
  reader.join();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "connection closed");
}

TEST(ShmChannelTest, OwnShutdownFromAnotherThreadWakesBlockedCalls) {
  // A read blocked on an empty ring.
  {
    auto pair = MakePair({64 << 10, 0});
    ASSERT_NE(pair, nullptr);
    Status status;
    std::thread reader([&] {
      std::byte buffer[8];
      status = pair->s().Read(buffer);
    });
    std::this_thread::sleep_for(milliseconds(50));
    pair->s().Shutdown();
    reader.join();
    EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  }
  // A write blocked on a full ring (the client does not read).
  {
    auto pair = MakePair({64 << 10, 0});
    ASSERT_NE(pair, nullptr);
    Status status;
    std::thread writer([&] {
      std::vector<std::byte> big(1 << 20);
      status = pair->s().Write(big);
    });
    std::this_thread::sleep_for(milliseconds(50));
    pair->s().Shutdown();
    writer.join();
    EXPECT_EQ(status.code(), StatusCode::kUnavailable);
    // The client still reads what was written, then learns of the end.
    std::vector<std::byte> ring(64 << 10);
    EXPECT_TRUE(pair->c().Read(ring).ok());
    std::byte more[1];
    EXPECT_EQ(pair->c().Read(more).code(), StatusCode::kUnavailable);
  }
}

TEST(ShmChannelTest, BlockedWriteFailsWhenThePeerGoes) {
  auto pair = MakePair({64 << 10, 0});
  ASSERT_NE(pair, nullptr);
  Status status;
  std::thread writer([&] {
    std::vector<std::byte> big(1 << 20);
    status = pair->s().Write(big);
  });
  std::this_thread::sleep_for(milliseconds(50));
  pair->client_sock.Reset();
  writer.join();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
}

TEST(ShmChannelTest, DataOnTheSocketCountsAsAGonePeer) {
  auto pair = MakePair();
  ASSERT_NE(pair, nullptr);
  ASSERT_EQ(::send(pair->client_sock.get(), "?", 1, MSG_NOSIGNAL), 1);
  std::byte buffer[1];
  EXPECT_EQ(pair->s().Read(buffer).code(), StatusCode::kUnavailable);
}

// ---- A hostile peer -------------------------------------------------------------------------

TEST(ShmHostileTest, HeadTooFarAheadIsCorrupt) {
  auto pair = MakePair({64 << 10, 0});
  ASSERT_NE(pair, nullptr);
  // The client forges its head: more bytes than the ring holds.
  pair->client.region->control(kClientToServer)->head.store((64 << 10) + 1);
  EXPECT_EQ(pair->s().buffered(), 0u);
  std::byte buffer[16];
  Status status = pair->s().Read(buffer);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("shared-memory ring corrupt"), std::string::npos)
      << status.message();
  // It stays corrupt.
  EXPECT_EQ(pair->s().Read(buffer).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pair->s().WaitReadable(milliseconds(10)).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShmHostileTest, HeadGoingBackIsCorrupt) {
  auto pair = MakePair({64 << 10, 0});
  ASSERT_NE(pair, nullptr);
  ASSERT_TRUE(pair->c().Write(Bytes("0123456789")).ok());
  EXPECT_EQ(ReadString(pair->s(), 4), "0123");
  pair->client.region->control(kClientToServer)->head.store(2);
  std::byte buffer[10];
  EXPECT_EQ(pair->s().Read(buffer).code(), StatusCode::kInvalidArgument);
}

TEST(ShmHostileTest, ServerCorruptingTheClientsRingIsCaughtToo) {
  auto pair = MakePair({64 << 10, 0});
  ASSERT_NE(pair, nullptr);
  pair->server.region->control(kServerToClient)->head.store(UINT64_MAX);
  std::byte buffer[1];
  EXPECT_EQ(pair->c().Read(buffer).code(), StatusCode::kInvalidArgument);
}

TEST(ShmHostileTest, TailAheadOfHeadIsCorrupt) {
  auto pair = MakePair({64 << 10, 0});
  ASSERT_NE(pair, nullptr);
  ASSERT_TRUE(pair->s().Write(Bytes("0123456789")).ok());
  // The client claims to have consumed more than the server wrote.
  pair->client.region->control(kServerToClient)->tail.store(11);
  Status status = pair->s().Write(Bytes("x"));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("ahead of the head"), std::string::npos) << status.message();
}

TEST(ShmHostileTest, TailGoingBackIsCorrupt) {
  auto pair = MakePair({64 << 10, 0});
  ASSERT_NE(pair, nullptr);
  ASSERT_TRUE(pair->s().Write(Bytes("0123456789")).ok());
  EXPECT_EQ(ReadString(pair->c(), 10), "0123456789");
  ASSERT_TRUE(pair->s().Write(Bytes("a")).ok());  // the server has seen tail 10
  pair->client.region->control(kServerToClient)->tail.store(5);
  EXPECT_EQ(pair->s().Write(Bytes("b")).code(), StatusCode::kInvalidArgument);
}

TEST(ShmHostileTest, ForgedHeaderDoesNotChangeTheServersView) {
  auto pair = MakePair({64 << 10, 4 << 20});
  ASSERT_NE(pair, nullptr);
  // The client scribbles over the whole header page; the server never reads it back.
  std::memset(pair->client.region->base(), 0xff, 256);
  ASSERT_TRUE(pair->c().Write(Bytes("still fine")).ok());
  EXPECT_EQ(ReadString(pair->s(), 10), "still fine");
  EXPECT_EQ(pair->server.region->arena_bytes(), 4u << 20);
  EXPECT_EQ(pair->server.region->ring_bytes(), 64u << 10);
}

TEST(ShmHostileTest, ClientCannotResizeOrUnsealTheMemfd) {
  auto fds = CreateShm({64 << 10, 0});
  ASSERT_TRUE(fds.ok());
  auto socks = SocketPair();
  const std::byte one[1] = {std::byte{1}};
  const int send[1] = {fds->memfd.get()};
  ASSERT_TRUE(SendWithFds(socks[0].get(), one, send).ok());
  std::byte got[1];
  std::vector<UniqueFd> received;
  ASSERT_TRUE(ReadWithFds(socks[1].get(), got, &received, 1).ok());
  ASSERT_EQ(received.size(), 1u);
  int memfd = received[0].get();
  EXPECT_NE(::fcntl(memfd, F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_EQ(::ftruncate(memfd, 4096), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::ftruncate(memfd, 1ll << 30), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::fcntl(memfd, F_ADD_SEALS, F_SEAL_WRITE), -1);
  EXPECT_EQ(errno, EPERM);
  int seals = ::fcntl(memfd, F_GET_SEALS);
  EXPECT_EQ(seals, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_TRUE(ShmRegion::MapClient(memfd).ok());
}

// Builds a memfd from a valid header, edited by `edit`, of `size` bytes, sealed with `seals`.
// The offsets edited below follow the header's field order in shm_channel.cc: magic (0),
// version (8), header size (12), ring_bytes (16), arena_bytes (24), control offsets (32, 40),
// data offsets (48, 56), arena offset (64), total (72).
template <typename Edit>
UniqueFd ForgedMemfd(Edit edit, int64_t size = -1,
                     int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) {
  auto good = CreateShm({64 << 10, 4 << 20});
  EXPECT_TRUE(good.ok());
  std::vector<std::byte> header(4096);
  EXPECT_EQ(::pread(good->memfd.get(), header.data(), header.size(), 0), 4096);
  off_t good_size = ::lseek(good->memfd.get(), 0, SEEK_END);
  edit(header.data());
  UniqueFd fd(::memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::ftruncate(fd.get(), size >= 0 ? size : good_size), 0);
  EXPECT_EQ(::pwrite(fd.get(), header.data(),
                     std::min<size_t>(header.size(), size >= 0 ? size : 4096), 0),
            static_cast<ssize_t>(std::min<size_t>(header.size(), size >= 0 ? size : 4096)));
  if (seals != 0) {
    EXPECT_EQ(::fcntl(fd.get(), F_ADD_SEALS, seals), 0);
  }
  return fd;
}

template <typename T>
void Put(std::byte* header, size_t offset, T value) {
  std::memcpy(header + offset, &value, sizeof value);
}

void ExpectRefused(int fd, const std::string& words) {
  auto region = ShmRegion::MapClient(fd);
  ASSERT_FALSE(region.ok());
  EXPECT_EQ(region.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(region.status().message().find(words), std::string::npos) << region.status().message();
}

TEST(ShmHostileTest, MapClientRefusesBadRegions) {
  auto unchanged = [](std::byte*) {};
  // The forged copy itself is fine: the refusals below come from the one change each makes.
  {
    UniqueFd fd = ForgedMemfd(unchanged);
    EXPECT_TRUE(ShmRegion::MapClient(fd.get()).ok());
  }
  ExpectRefused(ForgedMemfd(unchanged, -1, 0).get(), "not sealed against shrinking and growing");
  ExpectRefused(ForgedMemfd(unchanged, -1, F_SEAL_SHRINK).get(),
                "not sealed against shrinking and growing");
  ExpectRefused(ForgedMemfd(unchanged, -1, F_SEAL_GROW | F_SEAL_SEAL).get(),
                "not sealed against shrinking and growing");
  // Sizes in the header that exceed the file (sealed, so mapping it would fault).
  ExpectRefused(ForgedMemfd(unchanged, 128 << 10).get(), "too small");
  ExpectRefused(ForgedMemfd(unchanged, 100).get(), "too small");
  ExpectRefused(ForgedMemfd([](std::byte* h) { Put<uint64_t>(h, 0, 0x1234); }).get(), "bad magic");
  ExpectRefused(ForgedMemfd([](std::byte* h) { Put<uint32_t>(h, 8, 2); }).get(),
                "layout version 2");
  ExpectRefused(ForgedMemfd([](std::byte* h) { Put<uint64_t>(h, 16, 100000); }).get(),
                "not a power of two");
  ExpectRefused(ForgedMemfd([](std::byte* h) { Put<uint64_t>(h, 16, 16 << 10); }).get(),
                "not a power of two between");
  ExpectRefused(ForgedMemfd([](std::byte* h) { Put<uint64_t>(h, 24, 1ull << 40); }).get(),
                "arena size");
  // Offsets that overflow when added to a size, or point past the end.
  ExpectRefused(ForgedMemfd([](std::byte* h) { Put<uint64_t>(h, 64, UINT64_MAX - 4095); }).get(),
                "too small");
  ExpectRefused(ForgedMemfd([](std::byte* h) { Put<uint64_t>(h, 56, UINT64_MAX - 4095); }).get(),
                "too small");
  // Parts that overlap (the two rings on top of each other) or a control block in the header.
  ExpectRefused(ForgedMemfd([](std::byte* h) {
                  uint64_t first;
                  std::memcpy(&first, h + 48, sizeof first);
                  Put<uint64_t>(h, 56, first);
                }).get(),
                "overlapping");
  ExpectRefused(ForgedMemfd([](std::byte* h) { Put<uint64_t>(h, 32, 0); }).get(), "overlapping");
  ExpectRefused(ForgedMemfd([](std::byte* h) { Put<uint64_t>(h, 40, 4096 + 64); }).get(),
                "misaligned");
}

TEST(ShmHostileTest, MapClientRefusesFilesAndPipes) {
  FILE* file = ::tmpfile();
  ASSERT_NE(file, nullptr);
  ExpectRefused(::fileno(file), "not a sealable memfd");
  ::fclose(file);
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  ExpectRefused(read_end.get(), "not a sealable memfd");
  auto socks = SocketPair();
  ExpectRefused(socks[0].get(), "not a sealable memfd");
}

// ---- Descriptor passing ---------------------------------------------------------------------

TEST(ShmFdPassingTest, TooManyDescriptorsAreRefusedAndClosed) {
  auto socks = SocketPair();
  int before = CountOpenFds();
  std::vector<UniqueFd> extra;
  std::vector<int> raw;
  for (int i = 0; i < 4; ++i) {
    extra.emplace_back(::dup(0));
    raw.push_back(extra.back().get());
  }
  const std::byte one[1] = {std::byte{1}};
  ASSERT_TRUE(SendWithFds(socks[0].get(), one, raw).ok());
  extra.clear();
  std::byte got[1];
  std::vector<UniqueFd> received;
  Status status = ReadWithFds(socks[1].get(), got, &received, 3);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_TRUE(received.empty());
  EXPECT_EQ(CountOpenFds(), before);

  // Far more than the control buffer holds: truncated, refused, none leaked.
  for (int i = 0; i < 40; ++i) {
    extra.emplace_back(::dup(0));
    raw.push_back(extra.back().get());
  }
  raw.erase(raw.begin(), raw.begin() + 4);
  ASSERT_TRUE(SendWithFds(socks[0].get(), one, raw).ok());
  extra.clear();
  status = ReadWithFds(socks[1].get(), got, &received, 3);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_TRUE(received.empty());
  EXPECT_EQ(CountOpenFds(), before);
}

TEST(ShmFdPassingTest, ReadsExactlyAndReportsEof) {
  auto socks = SocketPair();
  std::string message = "12345678";
  UniqueFd dup_fd(::dup(0));
  const int send[1] = {dup_fd.get()};
  ASSERT_TRUE(SendWithFds(socks[0].get(), Bytes(message), send).ok());
  ASSERT_EQ(::send(socks[0].get(), "rest", 4, MSG_NOSIGNAL), 4);
  std::vector<std::byte> got(8);
  std::vector<UniqueFd> received;
  ASSERT_TRUE(ReadWithFds(socks[1].get(), got, &received, 1).ok());
  EXPECT_EQ(std::memcmp(got.data(), message.data(), 8), 0);
  EXPECT_EQ(received.size(), 1u);
  // Nothing past the 8 bytes was taken.
  char rest[8];
  EXPECT_EQ(::recv(socks[1].get(), rest, sizeof rest, 0), 4);
  EXPECT_EQ(std::string(rest, 4), "rest");
  // No byte, no send; EOF is Unavailable.
  EXPECT_EQ(SendWithFds(socks[0].get(), {}, send).code(), StatusCode::kInvalidArgument);
  socks[0].Reset();
  EXPECT_EQ(ReadWithFds(socks[1].get(), got, &received, 1).code(), StatusCode::kUnavailable);
}

// ---- A client in another process ------------------------------------------------------------

// Forks a client process that answers each u64 with the u64 plus one, `rounds` times (forever
// when 0), then exits. Returns its pid; `server_sock` is the parent's end.
pid_t ForkEchoClient(UniqueFd* server_sock, uint64_t rounds) {
  auto socks = SocketPair();
  pid_t pid = ::fork();
  if (pid == 0) {
    socks[0].Reset();
    auto client = ClientHandshake(socks[1].get(), {});
    if (!client.ok()) ::_exit(2);
    for (uint64_t i = 0; rounds == 0 || i < rounds; ++i) {
      uint64_t value;
      if (!ReadU64(*client->channel, &value).ok()) ::_exit(3);
      if (!WriteU64(*client->channel, value + 1).ok()) ::_exit(4);
    }
    ::_exit(0);
  }
  *server_sock = std::move(socks[0]);
  return pid;
}

int WaitExit(pid_t pid) {
  int wstatus = 0;
  EXPECT_EQ(::waitpid(pid, &wstatus, 0), pid);
  return wstatus;
}

TEST(ShmForkTest, ClientInAnotherProcess) {
  UniqueFd sock;
  pid_t pid = ForkEchoClient(&sock, 1000);
  ASSERT_GT(pid, 0);
  auto server = ServerHandshake(sock.get(), {64 << 10, 2 << 20}, {});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(WriteU64(*server->channel, i * 3).ok());
    uint64_t value = 0;
    ASSERT_TRUE(ReadU64(*server->channel, &value).ok());
    ASSERT_EQ(value, i * 3 + 1);
  }
  int wstatus = WaitExit(pid);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << wstatus;
  // The client exited: the server learns it from the socket.
  uint64_t value;
  EXPECT_EQ(ReadU64(*server->channel, &value).code(), StatusCode::kUnavailable);
}

TEST(ShmForkTest, KilledClientIsNoticed) {
  UniqueFd sock;
  pid_t pid = ForkEchoClient(&sock, 0);
  ASSERT_GT(pid, 0);
  auto server = ServerHandshake(sock.get(), {64 << 10, 0}, {});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  for (uint64_t i = 0; i < 500; ++i) {
    ASSERT_TRUE(WriteU64(*server->channel, i).ok());
    uint64_t value = 0;
    ASSERT_TRUE(ReadU64(*server->channel, &value).ok());
    ASSERT_EQ(value, i + 1);
  }
  // Kill it mid-run: a request on its way, the reply never comes.
  ASSERT_TRUE(WriteU64(*server->channel, 7).ok());
  uint64_t value = 0;
  ASSERT_TRUE(ReadU64(*server->channel, &value).ok());
  ASSERT_TRUE(WriteU64(*server->channel, 8).ok());
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  Clock::time_point start = Clock::now();
  Status status;
  // The reply to 8 may or may not have been written before the kill.
  do {
    status = ReadU64(*server->channel, &value);
  } while (status.ok());
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  int wstatus = WaitExit(pid);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << wstatus;
}

}  // namespace
}  // namespace flyt::remote
