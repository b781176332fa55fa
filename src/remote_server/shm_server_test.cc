// The shared-memory transport at the server (sim backend), with a thread and a process per client:
// a client over a Unix socket moves onto the rings, copies through its arena round-trip, a TCP
// client on this host moves to the Unix socket, and hostile clients (arena ranges out of bounds, a
// corrupt ring, attempts to shrink or reseal the memfd, a refusal of the offer) are refused without
// harm to the server or to other clients.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "remote_client/debug_stats.h"
#include "remote/shm_channel.h"
#include "remote_server/test_sim_server.h"

namespace flyt::remote {
namespace {

class ShmServerTest : public testing::SimServerTest {
 protected:
  ShmServerTest() : SimServerTest("shm") {}

  // A client that does the bootstrap by hand: hello with kCapSharedMemory, the reply and its
  // descriptors, then the region mapped. The ShmAck is the caller's to send.
  struct RawClient {
    UniqueFd sock;
    std::vector<UniqueFd> fds;
    std::unique_ptr<ShmRegion> region;
    HelloReply reply;
  };
  RawClient Bootstrap() {
    RawClient c;
    Result<UniqueFd> fd = Connect(server_->endpoints()[0]);
    EXPECT_TRUE(fd.ok());
    c.sock = std::move(fd).value();
    HelloRequest hello{kHelloMagic, kMinProtocolVersion, kProtocolVersion, kAllCapabilities,
                       "hostile", 1, 13000, ""};
    Bytes out;
    AppendFrame(out, FrameKind::kHello, CallId::kNone, 7, hello);
    EXPECT_TRUE(WriteAll(c.sock.get(), out).ok());
    std::byte raw[kFrameHeaderBytes];
    EXPECT_TRUE(ReadWithFds(c.sock.get(), raw, &c.fds, kShmFdCount).ok());
    Result<FrameHeader> header = DecodeFrameHeader(raw);
    EXPECT_TRUE(header.ok());
    Bytes payload(header->payload_bytes);
    EXPECT_TRUE(ReadWithFds(c.sock.get(), payload, &c.fds, kShmFdCount).ok());
    EXPECT_TRUE(DecodeExactly(payload, c.reply));
    EXPECT_EQ(c.fds.size(), kShmFdCount);
    if (c.fds.size() == kShmFdCount) {
      auto region = ShmRegion::MapClient(c.fds[0].get());
      EXPECT_TRUE(region.ok()) << region.status().ToString();
      if (region.ok()) c.region = std::move(region).value();
    }
    return c;
  }
  static void SendAck(RawClient& c, bool accepted) {
    Bytes out;
    AppendFrame(out, FrameKind::kHello, CallId::kNone, 7, ShmAck{accepted, "test"});
    ASSERT_TRUE(WriteAll(c.sock.get(), out).ok());
  }
  // Whether the server closed the raw client's socket within a few seconds.
  static bool ClosedByServer(const RawClient& c) {
    timeval tv{5, 0};
    ::setsockopt(c.sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::byte b[64];
    return ::recv(c.sock.get(), b, sizeof b, 0) == 0;
  }
  // A healthy client still gets served.
  void ExpectOthersServed() {
    auto other = Open();
    ASSERT_TRUE(other);
    EXPECT_EQ(other->transport(), "shm");
    auto ptr = other->Malloc({1 << 20});
    ASSERT_TRUE(ptr.ok()) << ptr.status().ToString();
    EXPECT_TRUE(other->Free({ptr->ptr}).ok());
    EXPECT_TRUE(other->Sync({}).ok());
  }
};

std::vector<std::byte> Pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937 rng(seed);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

TEST_P(ShmServerTest, UnixClientMovesOntoSharedMemoryAndStatsSaySo) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->transport(), "shm");
  EXPECT_EQ(conn->arena().bytes, ShmLayout{}.arena_bytes);
  // Pageable data larger than a ring streams through it both ways, byte-exact.
  auto ptr = conn->Malloc({9 << 20});
  ASSERT_TRUE(ptr.ok());
  std::vector<std::byte> in = Pattern(9 << 20, 1), back(9 << 20);
  ASSERT_TRUE(conn->MemcpyHtoD({ptr->ptr, in.size(), 0}, in).ok());
  ASSERT_TRUE(conn->MemcpyDtoH({ptr->ptr, back.size(), 0}, back).ok());
  EXPECT_EQ(in, back);
  Result<ServerStats> stats = FetchStats(server_->endpoints()[0]);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  bool seen = false;
  for (const ClientTransport& t : stats->transports) {
    if (t.client_id != conn->server().client_id) continue;
    seen = true;
    EXPECT_EQ(t.transport, "shm");
    EXPECT_EQ(t.peer_pid, static_cast<uint32_t>(::getpid()));
    EXPECT_EQ(t.peer_uid, ::getuid());
    EXPECT_EQ(t.arena_bytes, ShmLayout{}.arena_bytes);
  }
  EXPECT_TRUE(seen);
  EXPECT_NE(StatsToJson(*stats).find("\"transport\":\"shm\""), std::string::npos);
}

TEST_P(ShmServerTest, CopiesThroughTheArenaRoundTripSyncAndAsync) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  SharedArena arena = conn->arena();
  ASSERT_GE(arena.bytes, 8u << 20);
  constexpr uint64_t kBytes = 3 << 20;
  auto dev = conn->Malloc({kBytes});
  ASSERT_TRUE(dev.ok());
  std::vector<std::byte> in = Pattern(kBytes, 2);
  std::memcpy(arena.base, in.data(), kBytes);
  ASSERT_TRUE(conn->MemcpyHtoDShared({dev->ptr, 0, kBytes, 0}).ok());
  ASSERT_TRUE(conn->MemcpyDtoHShared({4 << 20, dev->ptr, kBytes, 0}).ok());
  EXPECT_EQ(std::memcmp(arena.base + (4 << 20), in.data(), kBytes), 0);
  // Async both ways on a stream, seen after a synchronising call.
  ASSERT_TRUE(conn->StreamCreate({5, 0, 0}).ok());
  std::vector<std::byte> in2 = Pattern(kBytes, 3);
  std::memcpy(arena.base, in2.data(), kBytes);
  ASSERT_TRUE(conn->MemcpyHtoDSharedAsync({dev->ptr + 1, 0, kBytes - 1, 5}).ok());
  ASSERT_TRUE(conn->MemcpyDtoHSharedAsync({4 << 20, dev->ptr + 1, kBytes - 1, 5}).ok());
  ASSERT_TRUE(conn->StreamSynchronize({5}).ok());
  EXPECT_EQ(std::memcmp(arena.base + (4 << 20), in2.data(), kBytes - 1), 0);
  Result<ServerStats> stats = FetchStats(server_->endpoints()[0]);
  ASSERT_TRUE(stats.ok());
  for (const ClientTransport& t : stats->transports) {
    if (t.client_id == conn->server().client_id) {
      EXPECT_EQ(t.arena_copy_bytes, 2 * kBytes + 2 * (kBytes - 1));
    }
  }
}

// A copy staged in the arena for memory outside it (what the runtime does for cudaHostRegister'd
// ranges): the bytes land in the arena, and the program's memory gets them when a later reply
// brings the word that they landed, not before.
TEST_P(ShmServerTest, StagedDownloadsLandInTheProgramsMemoryAtTheNextReply) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  SharedArena arena = conn->arena();
  constexpr uint64_t kBytes = 2 << 20;
  auto dev = conn->Malloc({kBytes});
  ASSERT_TRUE(dev.ok());
  std::vector<std::byte> in = Pattern(kBytes, 4);
  ASSERT_TRUE(conn->MemcpyHtoD({dev->ptr, kBytes, 0}, in).ok());
  ASSERT_TRUE(conn->StreamCreate({5, 0, 0}).ok());
  std::vector<std::byte> program(kBytes, std::byte{0x5A});
  ASSERT_TRUE(conn->MemcpyDtoHStagedAsync({1 << 20, dev->ptr, kBytes, 5}, program).ok());
  EXPECT_EQ(conn->pending_downloads(), 1u);
  EXPECT_EQ(conn->pending_download_bytes(), 0u);  // none of the server's memory is held
  EXPECT_EQ(program[0], std::byte{0x5A});         // nothing landed before a reply
  ASSERT_TRUE(conn->StreamSynchronize({5}).ok());
  EXPECT_EQ(conn->pending_downloads(), 0u);
  EXPECT_EQ(program, in);
  EXPECT_EQ(std::memcmp(arena.base + (1 << 20), in.data(), kBytes), 0);
  // A staged copy the server refuses (the device range is not the client's) is abandoned: the
  // program's memory stays as it was, the error comes with the next reply, nothing waits.
  std::vector<std::byte> untouched(64, std::byte{0x11});
  ASSERT_TRUE(conn->MemcpyDtoHStagedAsync({0, dev->ptr + kBytes, 64, 5}, untouched).ok());
  CudaStatus next = conn->StreamSynchronize({5}).status();
  std::optional<AsyncError> error = conn->TakeAsyncError();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->status.code(), CudaError::kInvalidValue);
  EXPECT_EQ(error->call, CallId::kMemcpyDtoHStagedAsync);
  EXPECT_EQ(conn->pending_downloads(), 0u);
  EXPECT_EQ(untouched, std::vector<std::byte>(64, std::byte{0x11}));
  (void)next;
  // A range outside the arena is refused before anything is sent.
  EXPECT_EQ(conn->MemcpyDtoHStagedAsync({arena.bytes - 10, dev->ptr, 64, 5}, untouched).code(),
            CudaError::kInvalidValue);
  EXPECT_TRUE(conn->Sync({}).ok());
  EXPECT_FALSE(conn->broken());
}

// Staged copies posted without a call to take them are bounded: past kMaxDownloads they are
// refused (and abandoned, so that nothing waits); a client that posts on past twice that is
// closed, and the server goes on serving others.
TEST_P(ShmServerTest, StagedCopiesInFlightAreBounded) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  auto dev = conn->Malloc({4096});
  ASSERT_TRUE(dev.ok());
  std::vector<std::byte> sink(1);
  const size_t limit = size_t{1} << 16;
  for (size_t i = 0; i < limit + 100; ++i) {
    ASSERT_TRUE(conn->MemcpyDtoHStagedAsync({0, dev->ptr, 1, 0}, sink).ok());
  }
  EXPECT_TRUE(conn->Sync({}).ok());
  std::optional<AsyncError> error = conn->TakeAsyncError();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->status.code(), CudaError::kMemoryAllocation);
  EXPECT_NE(error->status.message().find("synchronise before posting more"), std::string::npos)
      << error->status.message();
  EXPECT_EQ(conn->pending_downloads(), 0u);
  EXPECT_FALSE(conn->broken());
  for (size_t i = 0; i < 2 * limit + 1; ++i) {
    if (!conn->MemcpyDtoHStagedAsync({0, dev->ptr, 1, 0}, sink).ok()) break;
  }
  EXPECT_FALSE(conn->Sync({}).ok());
  EXPECT_TRUE(conn->broken());
  ExpectOthersServed();
}

// A hostile client on its socket (no arena) posts a staged copy: refused, abandoned so that no
// client would wait, and the server goes on serving it and others.
TEST_P(ShmServerTest, StagedCopyWithoutAnArenaIsAbandoned) {
  RawClient c = Bootstrap();
  SendAck(c, false);
  SocketReader reader(c.sock.get());
  std::byte raw[kFrameHeaderBytes];
  // Device memory of its own, so that only the arena is wrong.
  Bytes out;
  AppendFrame(out, FrameKind::kCall, CallId::kMalloc, 7, MallocRequest{4096});
  ASSERT_TRUE(WriteAll(c.sock.get(), out).ok());
  ASSERT_TRUE(reader.Read(raw).ok());
  Result<FrameHeader> header = DecodeFrameHeader(raw);
  ASSERT_TRUE(header.ok());
  Bytes malloc_reply(header->payload_bytes);
  ASSERT_TRUE(reader.Read(malloc_reply).ok());
  Reader mr(malloc_reply);
  ReplyStatus malloc_status;
  MallocReply allocated;
  ASSERT_TRUE(Decode(mr, malloc_status) && Decode(mr, allocated));
  out.clear();
  AppendFrame(out, FrameKind::kPost, CallId::kMemcpyDtoHStagedAsync, 8,
              MemcpyDtoHStagedAsyncRequest{0, allocated.ptr, 4096, 0});
  AppendFrame(out, FrameKind::kCall, CallId::kSync, 9, SyncRequest{});
  ASSERT_TRUE(WriteAll(c.sock.get(), out).ok());
  ASSERT_TRUE(reader.Read(raw).ok());
  header = DecodeFrameHeader(raw);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->kind, FrameKind::kData);
  EXPECT_EQ(header->seq, 8u);
  ASSERT_EQ(header->payload_bytes, 8u);
  Bytes offset(8);
  ASSERT_TRUE(reader.Read(offset).ok());
  Reader r(offset);
  uint64_t value = 0;
  ASSERT_TRUE(r.Get(value));
  EXPECT_EQ(value, kDataAbandoned);
  ASSERT_TRUE(reader.Read(raw).ok());
  header = DecodeFrameHeader(raw);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->kind, FrameKind::kReply);
  EXPECT_EQ(header->seq, 9u);
  Bytes payload(header->payload_bytes);
  ASSERT_TRUE(reader.Read(payload).ok());
  Reader pr(payload);
  ReplyStatus status;
  ASSERT_TRUE(Decode(pr, status));
  EXPECT_EQ(status.async_code, static_cast<uint32_t>(CudaError::kInvalidValue));
  EXPECT_NE(status.async_message.find("no shared-memory arena"), std::string::npos)
      << status.async_message;
  ExpectOthersServed();
}

TEST_P(ShmServerTest, ArenaRangesOutsideTheArenaAreRefused) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  const uint64_t size = conn->arena().bytes;
  auto dev = conn->Malloc({1 << 20});
  ASSERT_TRUE(dev.ok());
  for (auto [offset, bytes] : std::vector<std::pair<uint64_t, uint64_t>>{
           {size, 1}, {size - 10, 11}, {UINT64_MAX - 5, 100}}) {
    // The device range is the client's whenever it fits its allocation; the arena's is not.
    uint64_t n = std::min<uint64_t>(bytes, 1 << 20);
    CudaStatus up = conn->MemcpyHtoDShared({dev->ptr, offset, n, 0}).status();
    EXPECT_EQ(up.code(), CudaError::kInvalidValue) << offset << "+" << bytes;
    CudaStatus down = conn->MemcpyDtoHShared({offset, dev->ptr, n, 0}).status();
    EXPECT_EQ(down.code(), CudaError::kInvalidValue);
  }
  // A device range that is not the client's is refused too, whatever the arena range.
  EXPECT_EQ(conn->MemcpyHtoDShared({dev->ptr + (1 << 20), 0, 16, 0}).status().code(),
            CudaError::kInvalidValue);
  // The connection goes on.
  EXPECT_TRUE(conn->Sync({}).ok());
  EXPECT_FALSE(conn->broken());
}

TEST_P(ShmServerTest, ArenaCopiesWithoutSharedMemoryAreRefused) {
  ClientOptions options;
  options.label = "no_shm";
  options.pid = static_cast<uint32_t>(::getpid());
  options.shared_memory = false;
  auto conn = Connection::Open(server_->endpoints()[0], options);
  ASSERT_TRUE(conn.ok());
  EXPECT_EQ((*conn)->transport(), "unix");
  EXPECT_EQ((*conn)->arena().bytes, 0u);
  auto dev = (*conn)->Malloc({4096});
  ASSERT_TRUE(dev.ok());
  CudaStatus s = (*conn)->MemcpyHtoDShared({dev->ptr, 0, 16, 0}).status();
  EXPECT_EQ(s.code(), CudaError::kInvalidValue);
  EXPECT_NE(s.message().find("no shared-memory arena"), std::string::npos) << s.message();
}

TEST_P(ShmServerTest, ClientThatRefusesTheOfferStaysOnItsSocket) {
  RawClient c = Bootstrap();
  ASSERT_NE(c.reply.capabilities & kCapSharedMemory, 0u);
  SendAck(c, false);
  // A plain call over the socket is answered over the socket.
  Bytes out;
  AppendFrame(out, FrameKind::kCall, CallId::kMemGetInfo, 8, MemGetInfoRequest{});
  ASSERT_TRUE(WriteAll(c.sock.get(), out).ok());
  SocketReader reader(c.sock.get());
  std::byte raw[kFrameHeaderBytes];
  ASSERT_TRUE(reader.Read(raw).ok());
  Result<FrameHeader> header = DecodeFrameHeader(raw);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->kind, FrameKind::kReply);
  EXPECT_EQ(header->seq, 8u);
}

TEST_P(ShmServerTest, TheMemfdCannotBeShrunkGrownOrResealed) {
  RawClient c = Bootstrap();
  ASSERT_TRUE(c.region);
  SendAck(c, true);
  const int memfd = c.fds[0].get();
  EXPECT_NE(::ftruncate(memfd, 4096), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(memfd, static_cast<off_t>(c.region->size()) * 2), 0);
  EXPECT_NE(::fcntl(memfd, F_ADD_SEALS, F_SEAL_WRITE), 0);
  EXPECT_EQ(errno, EPERM);
  ExpectOthersServed();
}

TEST_P(ShmServerTest, CorruptRingClosesOnlyThatClient) {
  auto bystander = Open();
  ASSERT_TRUE(bystander);
  auto kept = bystander->Malloc({1 << 20});
  ASSERT_TRUE(kept.ok());
  RawClient c = Bootstrap();
  ASSERT_TRUE(c.region);
  SendAck(c, true);
  // The client->server ring's head far past its tail: more bytes than the ring holds.
  shm_internal::RingControl* ring = c.region->control(shm_internal::kClientToServer);
  ring->head.store(ring->tail.load() + 3 * c.region->ring_bytes());
  uint64_t one = 1;
  ASSERT_EQ(::write(c.fds[1].get(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
  EXPECT_TRUE(ClosedByServer(c));
  // The bystander's allocation and connection are untouched.
  EXPECT_TRUE(bystander->Sync({}).ok());
  ExpectOthersServed();
}

TEST_P(ShmServerTest, GarbageOnTheSocketAfterTheSwitchClosesTheConnection) {
  RawClient c = Bootstrap();
  ASSERT_TRUE(c.region);
  SendAck(c, true);
  ASSERT_EQ(::send(c.sock.get(), "x", 1, MSG_NOSIGNAL), 1);
  EXPECT_TRUE(ClosedByServer(c));
  ExpectOthersServed();
}

INSTANTIATE_TEST_SUITE_P(Isolation, ShmServerTest,
                         ::testing::Values(Isolation::kThread, Isolation::kProcess),
                         [](const auto& param_info) {
                           return param_info.param == Isolation::kThread ? "Thread" : "Process";
                         });

// A client connected over TCP to a server on this host moves to the server's Unix socket (and so
// to shared memory); with FLYT_SHM=0's option off, or a server without a Unix socket, it stays.
TEST(ShmLocalEndpointTest, TcpClientOnThisHostMovesToTheUnixSocket) {
  auto dir = std::filesystem::temp_directory_path() / ("flyt-shm-local-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::unique_ptr<Backend> backend = MakeSimBackend();
  for (bool with_unix : {true, false}) {
    ServerOptions options;
    options.listen.push_back(*ParseEndpoint("127.0.0.1:0"));
    if (with_unix) options.listen.push_back(*ParseEndpoint("unix:" + (dir / "s.sock").string()));
    Server server(*backend, options);
    ASSERT_TRUE(server.Start().ok());
    ClientOptions client;
    client.label = "local";
    client.pid = static_cast<uint32_t>(::getpid());
    auto moved = Connection::Open(server.endpoints()[0], client);
    ASSERT_TRUE(moved.ok()) << moved.status().ToString();
    EXPECT_EQ((*moved)->transport(), with_unix ? "shm" : "tcp");
    client.shared_memory = false;
    auto stayed = Connection::Open(server.endpoints()[0], client);
    ASSERT_TRUE(stayed.ok());
    EXPECT_EQ((*stayed)->transport(), "tcp");
    server.Stop();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flyt::remote
