// Live migration between two in-process servers on the simulated device (each its own backend,
// standing for two GPU servers): a client with memory, a device-side linked list, a module and
// its global, streams, events and a graph is moved while connected and goes on at the same
// device addresses; a move that cannot be made leaves it where it was; an idle client is not
// moved; the calls of an import link are refused on any other connection. With a thread and a
// process per client.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda/fatbin.h"
#include "remote_client/client.h"
#include "remote_client/debug_stats.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"

namespace flyt::remote {
namespace {

struct TestServer {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Server> server;
  std::filesystem::path log;
};

class LiveMigrationTest : public ::testing::TestWithParam<Isolation> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-live-migration-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    a_ = Start("a");
    b_ = Start("b");
  }
  void TearDown() override {
    if (a_.server) a_.server->Stop();
    if (b_.server) b_.server->Stop();
    std::filesystem::remove_all(dir_);
  }

  TestServer Start(const std::string& name, uint64_t memory_limit = 0,
                   std::chrono::milliseconds claim_timeout = std::chrono::milliseconds(60'000),
                   std::string local_path = "") {
    TestServer out;
    ServerOptions options;
    options.local_path = local_path;
    options.label = "server-" + name;
    options.listen.push_back(*ParseEndpoint("unix:" + (dir_ / (name + ".sock")).string()));
    options.listen.push_back(*ParseEndpoint("127.0.0.1:0"));
    options.memory_limit_bytes = memory_limit;
    options.claim_timeout = claim_timeout;
    out.log = dir_ / (name + ".jsonl");
    options.launch_log_path = out.log.string();
    if (GetParam() == Isolation::kThread) {
      out.backend = MakeSimBackend();
      out.server = std::make_unique<Server>(*out.backend, options);
    } else {
      out.server = std::make_unique<Server>(
          []() -> Result<std::unique_ptr<Backend>> { return MakeSimBackend(); }, options);
    }
    Status s = out.server->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }

  std::string EndpointOf(const TestServer& s) { return s.server->endpoints()[0].ToString(); }

  std::unique_ptr<Connection> Open(const TestServer& s, uint64_t capabilities = kAllCapabilities,
                                   bool shared_memory = false) {
    ClientOptions options;
    options.label = "live_migration_test";
    options.pid = static_cast<uint32_t>(::getpid());
    options.capabilities = capabilities;
    options.shared_memory = shared_memory;
    options.note = [this](bool failed, const std::string& line) {
      notes_.push_back((failed ? "failed: " : "") + line);
    };
    auto conn = Connection::Open(s.server->endpoints()[0], options);
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return conn.ok() ? std::move(conn).value() : nullptr;
  }

  // Asks server `from` to move `client` to `to` (its Unix socket, or `to_endpoint`), in the
  // background (the answer comes once the client has made a call).
  std::future<Result<MigrateClientReply>> Ask(const TestServer& from, uint64_t client,
                                              const TestServer& to, uint32_t timeout_ms = 20'000,
                                              std::string to_endpoint = "") {
    Endpoint endpoint = from.server->endpoints()[0];
    std::string target = to_endpoint.empty() ? EndpointOf(to) : to_endpoint;
    return std::async(std::launch::async, [=] {
      return RequestMigration(endpoint, "", client, target, "", timeout_ms);
    });
  }

  // Makes calls until the server has seen the order (a call answered after it carries the
  // notice; the client moves once that call returns).
  void CallUntil(Connection& conn, std::future<Result<MigrateClientReply>>& answer) {
    for (int i = 0; i < 2000; ++i) {
      if (answer.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready) return;
      ASSERT_TRUE(conn.MemGetInfo({}).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // Moves the client connected to a_ to b_ (its Unix socket, or `to_endpoint`) and checks that
  // the server says it moved.
  void MoveToB(Connection& conn, const std::string& to_endpoint = "") {
    auto answer = Ask(a_, conn.server().client_id, b_, 20'000, to_endpoint);
    CallUntil(conn, answer);
    Result<MigrateClientReply> reply = answer.get();
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    ASSERT_EQ(reply->outcome, "moved") << reply->message;
  }

  static Bytes Image() {
    std::ifstream in(std::string(FLYT_SOURCE_DIR) + "/tests/data/cuda/many_params.fatbin",
                     std::ios::binary);
    Bytes image;
    for (char c; in.get(c);) image.push_back(static_cast<std::byte>(c));
    return image;
  }

  std::filesystem::path dir_;
  TestServer a_, b_;
  std::vector<std::string> notes_;
};

struct Node {
  uint64_t next;
  uint64_t value;
};

TEST_P(LiveMigrationTest, AClientMovesWithItsStateAtTheSameDeviceAddresses) {
  auto conn = Open(a_);
  ASSERT_TRUE(conn);
  const uint64_t id_on_a = conn->server().client_id;
  // A linked list across separate allocations, each node holding the next one's device address
  // (an interior pointer: 64 bytes into the allocation).
  constexpr int kNodes = 6;
  std::vector<uint64_t> bases;
  for (int i = 0; i < kNodes; ++i) {
    auto p = conn->Malloc({4096 + 4096 * static_cast<uint64_t>(i)});
    ASSERT_TRUE(p.ok());
    bases.push_back(p->ptr);
  }
  for (int i = 0; i < kNodes; ++i) {
    Node node{i + 1 < kNodes ? bases[i + 1] + 64 : 0, 1000u + i};
    ASSERT_TRUE(conn->MemcpyHtoD({bases[i] + 64, sizeof node, 0},
                                 std::as_bytes(std::span(&node, 1)))
                    .ok());
  }
  // A big allocation with a pattern, a module with a global, a stream, an event, a graph.
  const uint64_t big_bytes = 24u << 20;
  auto big = conn->Malloc({big_bytes});
  ASSERT_TRUE(big.ok());
  Bytes pattern(big_bytes);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::byte>(i * 7 + 3);
  ASSERT_TRUE(conn->MemcpyHtoD({big->ptr, big_bytes, 0}, pattern).ok());
  Bytes image = Image();
  ASSERT_FALSE(image.empty());
  auto kernels = cuda::KernelsOf(*cuda::ParseFatbin(image));
  ASSERT_TRUE(kernels.ok() && !kernels->empty());
  ASSERT_TRUE(conn->ModuleLoad({1, image.size(), "many_params"}, image).ok());
  ASSERT_TRUE(conn->ModuleGetFunction({1, 2, kernels->front().name}).ok());
  ASSERT_TRUE(conn->FuncSetAttribute({2, 8, 1024}).ok());  // max dynamic shared memory
  auto global = conn->ModuleGetGlobal({1, "flyt_test_global", 256});
  ASSERT_TRUE(global.ok());
  Bytes global_bytes(256, std::byte{0x5A});
  ASSERT_TRUE(conn->MemcpyHtoD({global->ptr, 256, 0}, global_bytes).ok());
  ASSERT_TRUE(conn->StreamCreate({7, 1, 0}).ok());
  ASSERT_TRUE(conn->EventCreate({9, 0}).ok());
  GraphNode memset;
  memset.kind = 3;  // kMemset
  memset.dst = bases[0];
  memset.bytes = 64;
  memset.value = 0xEE;
  memset.element_size = 1;
  memset.width = 64;
  memset.height = 1;
  memset.pitch = 64;
  ASSERT_TRUE(conn->GraphExecCreate({11, {memset}}).ok());
  Bytes params(kernels->front().param_bytes);
  ASSERT_TRUE(conn->LaunchKernel({2, {1, 1, 1}, {32, 1, 1}, 0, 7, params}).ok());
  ASSERT_TRUE(conn->Sync({}).ok());
  ASSERT_FALSE(conn->TakeAsyncError());

  auto answer = Ask(a_, id_on_a, b_);
  CallUntil(*conn, answer);
  Result<MigrateClientReply> reply = answer.get();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_EQ(reply->outcome, "moved") << reply->message;
  EXPECT_EQ(reply->new_client_id, conn->server().client_id);
  EXPECT_EQ(conn->server().label, "server-b");
  EXPECT_GE(reply->bytes, big_bytes);
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_NE(notes_[0].find("moved from server-a"), std::string::npos) << notes_[0];

  // The list, followed from device memory by the addresses stored in it, on the new server.
  uint64_t at = bases[0] + 64;
  for (int i = 0; i < kNodes; ++i) {
    Node node{};
    ASSERT_NE(at, 0u);
    ASSERT_TRUE(conn->MemcpyDtoH({at, sizeof node, 0}, std::as_writable_bytes(std::span(&node, 1)))
                    .ok());
    EXPECT_EQ(node.value, 1000u + i);
    at = node.next;
  }
  EXPECT_EQ(at, 0u);
  Bytes back(big_bytes);
  ASSERT_TRUE(conn->MemcpyDtoH({big->ptr, big_bytes, 0}, back).ok());
  EXPECT_TRUE(back == pattern);
  Bytes global_back(256);
  ASSERT_TRUE(conn->MemcpyDtoH({global->ptr, 256, 0}, global_back).ok());
  EXPECT_TRUE(global_back == global_bytes);
  auto same_global = conn->ModuleGetGlobal({1, "flyt_test_global", 256});
  ASSERT_TRUE(same_global.ok());
  EXPECT_EQ(same_global->ptr, global->ptr);
  // Streams, events, the function and its attribute, the graph: all there under their numbers.
  ASSERT_TRUE(conn->EventRecord({9, 7}).ok());
  ASSERT_TRUE(conn->StreamSynchronize({7}).ok());
  ASSERT_TRUE(conn->EventQuery({9}).ok());
  ASSERT_TRUE(conn->LaunchKernel({2, {2, 1, 1}, {64, 1, 1}, 1024, 7, params}).ok());
  ASSERT_TRUE(conn->GraphLaunch({11, 7}).ok());
  ASSERT_TRUE(conn->StreamSynchronize({7}).ok());
  ASSERT_FALSE(conn->TakeAsyncError());
  Bytes head(64);
  ASSERT_TRUE(conn->MemcpyDtoH({bases[0], 64, 0}, head).ok());
  EXPECT_TRUE(head == Bytes(64, std::byte{0xEE}));
  // A new allocation on the new server overlaps none of the moved ones.
  auto fresh = conn->Malloc({1 << 20});
  ASSERT_TRUE(fresh.ok());
  for (uint64_t base : bases) EXPECT_NE(fresh->ptr, base);

  // The old server released everything; the new one holds it; the launch logs say where each
  // launch ran.
  ASSERT_TRUE(conn->Sync({}).ok());
  for (int i = 0; i < 500 && a_.server->Stats().allocated_bytes != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(a_.server->Stats().allocated_bytes, 0u);
  EXPECT_GE(b_.server->Stats().allocated_bytes, big_bytes);
  auto launches = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.find("\"grid\":[") != std::string::npos;
    return n;
  };
  EXPECT_EQ(launches(a_.log), 1);
  EXPECT_EQ(launches(b_.log), 1);  // the kernel launch after the move (graph launches are not logged per kernel)
}

// A client on shared memory, moved to a server on this host given by its TCP address: it goes
// there over that server's Unix socket and is on shared memory again (new rings); its pinned
// memory stays where it was (the first server's arena, still mapped), its copies work.
TEST_P(LiveMigrationTest, AClientOnSharedMemoryIsOnSharedMemoryAgainAfterAMoveOnThisHost) {
  auto conn = Open(a_, kAllCapabilities, /*shared_memory=*/true);
  ASSERT_TRUE(conn);
  ASSERT_EQ(conn->transport(), "shm");
  SharedArena arena = conn->arena();
  constexpr uint64_t kBytes = 1 << 20;
  auto dev = conn->Malloc({kBytes});
  ASSERT_TRUE(dev.ok());
  for (uint64_t i = 0; i < kBytes; ++i) arena.base[i] = static_cast<std::byte>(i * 7);
  ASSERT_TRUE(conn->MemcpyHtoDShared({dev->ptr, 0, kBytes, 0}).ok());
  const std::string b_tcp = b_.server->endpoints()[1].ToString();
  ASSERT_NO_FATAL_FAILURE(MoveToB(*conn, b_tcp));
  ASSERT_TRUE(conn->MemGetInfo({}).ok());
  EXPECT_EQ(conn->server().label, "server-b");
  EXPECT_EQ(conn->transport(), "shm");
  ASSERT_FALSE(notes_.empty());
  EXPECT_NE(notes_.back().find("over shm"), std::string::npos) << notes_.back();
  EXPECT_NE(notes_.back().find(b_tcp), std::string::npos) << notes_.back();
  // The pinned memory of the first arena: its copies are ordinary ones now, and exact.
  EXPECT_EQ(conn->arena().base, arena.base);
  ASSERT_TRUE(conn->MemcpyDtoHShared({2 * kBytes, dev->ptr, kBytes, 0}).ok());
  EXPECT_EQ(std::memcmp(arena.base + 2 * kBytes, arena.base, kBytes), 0);
  Result<ServerStats> stats = FetchStats(b_.server->endpoints()[0]);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  bool seen = false;
  for (const ClientTransport& t : stats->transports) {
    if (t.client_id == conn->server().client_id) {
      seen = true;
      EXPECT_EQ(t.transport, "shm");
    }
  }
  EXPECT_TRUE(seen);
}

// A client with memory pools: its own pool (limit and release threshold), a pool it destroyed
// while a block of it is live, and the default pool. Their blocks move at their addresses with
// their bytes, stay blocks of their pools (used and reserved bytes), free back to them, and the
// pools go on allocating on the new server.
// The Unix socket the new server names is, where the client is, another server's (containers
// with their own mounts): that server refuses the resume hello, and the client goes on to the
// address the move was given.
TEST_P(LiveMigrationTest, AResumeRefusedOnTheNamedSocketFallsBackToTheGivenAddress) {
  b_.server->Stop();
  b_ = Start("b", 0, std::chrono::milliseconds(60'000), (dir_ / "a.sock").string());
  auto conn = Open(a_, kAllCapabilities, /*shared_memory=*/true);
  ASSERT_TRUE(conn);
  auto p = conn->Malloc({1u << 20});
  ASSERT_TRUE(p.ok());
  Bytes pattern(1u << 20, std::byte{0x5C});
  ASSERT_TRUE(conn->MemcpyHtoD({p->ptr, pattern.size(), 0}, pattern).ok());
  const std::string b_tcp = b_.server->endpoints()[1].ToString();
  ASSERT_NO_FATAL_FAILURE(MoveToB(*conn, b_tcp));
  ASSERT_TRUE(conn->MemGetInfo({}).ok()) << (notes_.empty() ? "" : notes_.back());
  EXPECT_FALSE(conn->broken());
  EXPECT_EQ(conn->server().label, "server-b");
  EXPECT_EQ(conn->transport(), "tcp");
  Bytes back(pattern.size());
  ASSERT_TRUE(conn->MemcpyDtoH({p->ptr, back.size(), 0}, back).ok());
  EXPECT_TRUE(back == pattern);
}

TEST_P(LiveMigrationTest, MemoryPoolsAndTheirBlocksMoveWithTheClient) {
  constexpr uint32_t kReleaseThreshold = 4, kUsedMemCurrent = 7;
  auto conn = Open(a_);
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->StreamCreate({1, 0, 0}).ok());
  ASSERT_TRUE(conn->MemPoolCreate({7, 64u << 20}).ok());
  ASSERT_TRUE(conn->MemPoolSetAttribute({7, kReleaseThreshold, 8u << 20}).ok());
  ASSERT_TRUE(conn->MemPoolCreate({8, 0}).ok());
  auto own = conn->MallocAsync({7, 1u << 20, 1});
  auto doomed = conn->MallocAsync({8, 4096, 1});
  auto dflt = conn->MallocAsync({0, 3u << 20, 1});
  ASSERT_TRUE(own.ok() && doomed.ok() && dflt.ok());
  ASSERT_TRUE(conn->MemPoolDestroy({8}).ok());  // its block stays valid, as in CUDA
  Bytes a(1u << 20, std::byte{0x17}), b(4096, std::byte{0x28}), c(3u << 20, std::byte{0x39});
  ASSERT_TRUE(conn->MemcpyHtoD({own->ptr, a.size(), 1}, a).ok());
  ASSERT_TRUE(conn->MemcpyHtoD({doomed->ptr, b.size(), 1}, b).ok());
  ASSERT_TRUE(conn->MemcpyHtoD({dflt->ptr, c.size(), 1}, c).ok());

  ASSERT_NO_FATAL_FAILURE(MoveToB(*conn));
  ASSERT_TRUE(conn->MemGetInfo({}).ok());
  ASSERT_EQ(conn->server().label, "server-b");

  Bytes back(a.size());
  ASSERT_TRUE(conn->MemcpyDtoH({own->ptr, back.size(), 1}, back).ok());
  EXPECT_TRUE(back == a);
  back.resize(b.size());
  ASSERT_TRUE(conn->MemcpyDtoH({doomed->ptr, back.size(), 1}, back).ok());
  EXPECT_TRUE(back == b);
  back.resize(c.size());
  ASSERT_TRUE(conn->MemcpyDtoH({dflt->ptr, back.size(), 1}, back).ok());
  EXPECT_TRUE(back == c);
  auto attr = [&](uint64_t pool, uint32_t which) {
    auto v = conn->MemPoolGetAttribute({pool, which});
    return v.ok() ? v->value : ~uint64_t{0};
  };
  EXPECT_EQ(attr(7, kUsedMemCurrent), 1u << 20);
  EXPECT_EQ(attr(7, kReleaseThreshold), 8u << 20);
  EXPECT_EQ(attr(0, kUsedMemCurrent), 3u << 20);
  // Freed back to their pools; the destroyed pool goes with its last block.
  ASSERT_TRUE(conn->FreeAsync({own->ptr, 1}).ok());
  ASSERT_TRUE(conn->FreeAsync({doomed->ptr, 1}).ok());
  ASSERT_TRUE(conn->StreamSynchronize({1}).ok());
  EXPECT_EQ(attr(7, kUsedMemCurrent), 0u);
  EXPECT_EQ(conn->MemPoolGetAttribute({8, kUsedMemCurrent}).status().code(),
            CudaError::kInvalidValue);
  auto again = conn->MallocAsync({7, 1u << 20, 1});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ptr, own->ptr);  // the cached block, reused
  EXPECT_EQ(a_.server->Stats().allocated_bytes, 0u);
}

TEST_P(LiveMigrationTest, AMoveThatCannotBeMadeLeavesTheClientWhereItWas) {
  // The new server's memory limit is below what the client holds: it refuses MallocAt.
  b_.server->Stop();
  b_ = Start("b", 8u << 20);
  auto conn = Open(a_);
  ASSERT_TRUE(conn);
  auto p = conn->Malloc({16u << 20});
  ASSERT_TRUE(p.ok());
  Bytes pattern(16u << 20, std::byte{0x42});
  ASSERT_TRUE(conn->MemcpyHtoD({p->ptr, pattern.size(), 0}, pattern).ok());
  auto answer = Ask(a_, conn->server().client_id, b_);
  CallUntil(*conn, answer);
  auto reply = answer.get();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->outcome, "failed");
  EXPECT_NE(reply->message.find("memory limit"), std::string::npos) << reply->message;
  EXPECT_EQ(conn->server().label, "server-a");
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_NE(notes_[0].find("failed: stays on server-a"), std::string::npos) << notes_[0];
  Bytes back(pattern.size());
  ASSERT_TRUE(conn->MemcpyDtoH({p->ptr, back.size(), 0}, back).ok());
  EXPECT_TRUE(back == pattern);
  // The new server kept nothing of the attempt.
  for (int i = 0; i < 500 && b_.server->Stats().allocated_bytes != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(b_.server->Stats().allocated_bytes, 0u);

  // A server that is not there: the same.
  std::string nowhere = "unix:" + (dir_ / "nowhere.sock").string();
  auto again = std::async(std::launch::async, [&] {
    return RequestMigration(a_.server->endpoints()[0], "", conn->server().client_id, nowhere, "",
                            20'000);
  });
  CallUntil(*conn, again);
  auto second = again.get();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->outcome, "failed");
  EXPECT_NE(second->message.find("cannot reach"), std::string::npos) << second->message;
  ASSERT_TRUE(conn->MemcpyDtoH({p->ptr, back.size(), 0}, back).ok());
  EXPECT_TRUE(back == pattern);
}

TEST_P(LiveMigrationTest, AnIdleClientIsNotMovedAndTheRequestIsWithdrawn) {
  auto conn = Open(a_);
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->Malloc({1 << 20}).ok());
  auto reply = RequestMigration(a_.server->endpoints()[0], "", conn->server().client_id,
                                EndpointOf(b_), "", 300);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->outcome, "pending");
  // Its later calls are answered where it was, and no notice comes.
  ASSERT_TRUE(conn->MemGetInfo({}).ok());
  ASSERT_TRUE(conn->MemGetInfo({}).ok());
  EXPECT_EQ(conn->server().label, "server-a");
  EXPECT_TRUE(notes_.empty());
}

TEST_P(LiveMigrationTest, AClientWithoutMigrationIsNotMoved) {
  auto conn = Open(a_, kAllCapabilities & ~uint64_t{kCapMigration});
  ASSERT_TRUE(conn);
  auto answer = Ask(a_, conn->server().client_id, b_);
  CallUntil(*conn, answer);
  auto reply = answer.get();
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->outcome, "failed");
  EXPECT_NE(reply->message.find("cannot move"), std::string::npos) << reply->message;
  EXPECT_TRUE(conn->MemGetInfo({}).ok());
}

TEST_P(LiveMigrationTest, OnlyTheServersOwnUserMayMoveClientsOverItsUnixSocket) {
  auto conn = Open(a_);
  ASSERT_TRUE(conn);
  // Over TCP, whoever holds the server's secret: refused (a move sends the client's memory
  // wherever the request says).
  auto reply = RequestMigration(a_.server->endpoints()[1], "", conn->server().client_id,
                                EndpointOf(b_), "", 1000);
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("only the server's own user"), std::string::npos)
      << reply.status().ToString();
  EXPECT_TRUE(conn->MemGetInfo({}).ok());
  EXPECT_EQ(conn->server().label, "server-a");
}

TEST_P(LiveMigrationTest, ImportCallsAreRefusedOutsideAnImportLinkAndTokensAreChecked) {
  auto conn = Open(b_);
  ASSERT_TRUE(conn);
  auto placed = conn->MallocAt({0x900000000000ull, 4096});
  EXPECT_FALSE(placed.ok());
  EXPECT_TRUE(conn->broken());  // a protocol violation closes the connection
  auto pooled = Open(b_);
  ASSERT_TRUE(pooled);
  auto block = pooled->Malloc({4096});
  ASSERT_TRUE(block.ok());
  EXPECT_FALSE(pooled->PoolBlockAt({0, block->ptr}).ok());  // no turning memory into pool blocks
  EXPECT_TRUE(pooled->broken());

  // A hello with a token nobody handed out is refused.
  ClientOptions options;
  options.label = "forger";
  auto fd = Connect(b_.server->endpoints()[0]);
  ASSERT_TRUE(fd.ok());
  HelloRequest hello;
  hello.magic = kHelloMagic;
  hello.min_version = 1;
  hello.max_version = kProtocolVersion;
  hello.capabilities = kAllCapabilities;
  hello.resume = "1-00112233445566778899aabbccddeeff";
  Bytes out;
  AppendFrame(out, FrameKind::kHello, CallId::kNone, 0, hello);
  ASSERT_EQ(::write(fd->get(), out.data(), out.size()), static_cast<ssize_t>(out.size()));
  std::byte raw[kFrameHeaderBytes];
  ASSERT_EQ(::read(fd->get(), raw, sizeof raw), static_cast<ssize_t>(sizeof raw));
  auto header = DecodeFrameHeader(raw);
  ASSERT_TRUE(header.ok());
  Bytes payload(header->payload_bytes);
  size_t got = 0;
  while (got < payload.size()) {
    ssize_t n = ::read(fd->get(), payload.data() + got, payload.size() - got);
    ASSERT_GT(n, 0);
    got += static_cast<size_t>(n);
  }
  HelloReply reply;
  ASSERT_TRUE(DecodeExactly(payload, reply));
  EXPECT_EQ(reply.version, 0);
  EXPECT_NE(reply.error.find("no migrated client waits here"), std::string::npos) << reply.error;
}

INSTANTIATE_TEST_SUITE_P(Isolation, LiveMigrationTest,
                         ::testing::Values(Isolation::kThread, Isolation::kProcess),
                         [](const auto& param_info) {
                           return param_info.param == Isolation::kThread ? "Thread" : "Process";
                         });

}  // namespace
}  // namespace flyt::remote
