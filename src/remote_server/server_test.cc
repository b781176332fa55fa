// The server core on the simulated backend, driven through the real client Connection over real
// sockets: data round trips, pipelining and deferred errors, handle isolation between clients,
// the memory limit, cleanup when a client vanishes, and hostile input.
#include "remote_server/server.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include "cuda/fatbin.h"
#include "remote_client/client.h"
#include "remote_sim/sim_backend.h"

namespace flyt::remote {
namespace {

// Every test runs twice: clients served by threads of this process, and by processes forked
// for each (what flyt-gpu-server runs).
class ServerTest : public ::testing::TestWithParam<Isolation> {
 protected:
  void SetUp() override { StartServer(0); }
  void TearDown() override {
    if (server_) server_->Stop();
    std::filesystem::remove_all(dir_);
  }

  void StartServer(uint64_t memory_limit_bytes) {
    if (server_) server_->Stop();
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-server-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ServerOptions options;
    options.listen.push_back(*ParseEndpoint("unix:" + (dir_ / "s.sock").string()));
    options.listen.push_back(*ParseEndpoint("127.0.0.1:0"));
    options.memory_limit_bytes = memory_limit_bytes;
    options.launch_log_path = (dir_ / "launches.jsonl").string();
    if (GetParam() == Isolation::kThread) {
      backend_ = MakeSimBackend();
      server_ = std::make_unique<Server>(*backend_, options);
    } else {
      server_ = std::make_unique<Server>(
          []() -> Result<std::unique_ptr<Backend>> { return MakeSimBackend(); }, options);
    }
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  std::unique_ptr<Connection> Open(size_t endpoint = 0) {
    ClientOptions options;
    options.label = "server_test";
    options.pid = static_cast<uint32_t>(::getpid());
    // The TCP endpoint stays TCP (a client on this host would otherwise move to the Unix socket
    // and shared memory), so that tests mixing the two keep both transports.
    options.shared_memory = endpoint == 0;
    auto conn = Connection::Open(server_->endpoints()[endpoint], options);
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return conn.ok() ? std::move(conn).value() : nullptr;
  }

  // Polls the server's stats until `pred` holds (bounded).
  template <typename Pred>
  bool WaitForStats(Pred pred) {
    for (int i = 0; i < 200; ++i) {
      if (pred(server_->Stats())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Server> server_;
};

std::vector<std::byte> Pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937 rng(seed);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

TEST_P(ServerTest, HelloSaysWhatTheServerIs) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  EXPECT_EQ(conn->server().backend, "sim");
  EXPECT_TRUE(conn->server().simulated);
  EXPECT_EQ(conn->server().version, kProtocolVersion);
  EXPECT_EQ(conn->server().device_count, 1);
  auto props = conn->GetDeviceProperties({0});
  ASSERT_TRUE(props.ok()) << props.status().ToString();
  EXPECT_NE(props->name.find("H100"), std::string::npos);
  bool saw_sms = false;
  for (const NamedValue& v : props->values) {
    if (v.name == "multiProcessorCount") saw_sms = v.value == 132;
  }
  EXPECT_TRUE(saw_sms);
  EXPECT_EQ(conn->GetDeviceProperties({1}).status().code(), CudaError::kInvalidDevice);
  auto attr = conn->DeviceGetAttribute({0, 75});  // compute capability major
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->value, 9);
}

TEST_P(ServerTest, CopiesRoundTripByteExactOverBothTransports) {
  for (size_t endpoint = 0; endpoint < 2; ++endpoint) {
    auto conn = Open(endpoint);
    ASSERT_TRUE(conn);
    for (size_t size : {size_t{1}, size_t{4096}, size_t{(5 << 20) + 3}}) {
      auto ptr = conn->Malloc({size});
      ASSERT_TRUE(ptr.ok()) << ptr.status().ToString();
      std::vector<std::byte> in = Pattern(size, static_cast<uint32_t>(size));
      ASSERT_TRUE(conn->MemcpyHtoD({ptr->ptr, size, 0}, in).ok());
      std::vector<std::byte> out(size);
      ASSERT_TRUE(conn->MemcpyDtoH({ptr->ptr, size, 0}, out).ok());
      EXPECT_EQ(in, out) << "size " << size;
      // Device-to-device and memset, checked through a copy back.
      auto other = conn->Malloc({size});
      ASSERT_TRUE(other.ok());
      ASSERT_TRUE(conn->MemcpyDtoD({other->ptr, ptr->ptr, size, 0}).ok());
      ASSERT_TRUE(conn->Memset({ptr->ptr, 0x5A, size, 0}).ok());
      std::vector<std::byte> copy(size), set(size);
      ASSERT_TRUE(conn->MemcpyDtoH({other->ptr, size, 0}, copy).ok());
      ASSERT_TRUE(conn->MemcpyDtoH({ptr->ptr, size, 0}, set).ok());
      EXPECT_EQ(copy, in);
      EXPECT_EQ(set, std::vector<std::byte>(size, std::byte{0x5A}));
      ASSERT_TRUE(conn->Free({ptr->ptr}).ok());
      ASSERT_TRUE(conn->Free({other->ptr}).ok());
    }
    ASSERT_TRUE(conn->Sync({}).ok());
    EXPECT_FALSE(conn->TakeAsyncError());
  }
}

TEST_P(ServerTest, AsyncCopiesLandAtTheNextSynchronisingCall) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->StreamCreate({11, kStreamNonBlocking, 0}).ok());
  const size_t size = (3 << 20) + 17;
  auto ptr = conn->Malloc({size});
  ASSERT_TRUE(ptr.ok());
  std::vector<std::byte> in = Pattern(size, 7);
  std::vector<std::byte> out(size);
  ASSERT_TRUE(conn->MemcpyHtoDAsync({ptr->ptr, size, 11}, in).ok());
  ASSERT_TRUE(conn->MemcpyDtoHAsync({ptr->ptr, size, 11}, out).ok());
  ASSERT_TRUE(conn->EventCreate({21, 0}).ok());
  ASSERT_TRUE(conn->EventRecord({21, 11}).ok());
  // Nothing waited so far: the posts are pipelined, and the data cannot have arrived.
  EXPECT_TRUE(conn->HasUnacknowledgedPosts());
  EXPECT_EQ(conn->pending_downloads(), 1u);
  ASSERT_TRUE(conn->StreamSynchronize({11}).ok());
  EXPECT_EQ(conn->pending_downloads(), 0u);
  EXPECT_EQ(in, out);
  EXPECT_TRUE(conn->EventQuery({21}).ok());
  EXPECT_FALSE(conn->TakeAsyncError());
}

TEST_P(ServerTest, ErrorsOfPostedWorkComeBackWithTheNextReply) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  auto ptr = conn->Malloc({64});
  ASSERT_TRUE(ptr.ok());
  // Out of bounds: the post itself succeeds locally.
  ASSERT_TRUE(conn->Memset({ptr->ptr, 0, 65, 0}).ok());
  ASSERT_TRUE(conn->Memset({ptr->ptr + 1000, 0, 1, 0}).ok());  // a second error: not reported
  ASSERT_TRUE(conn->Sync({}).ok());
  std::optional<AsyncError> error = conn->TakeAsyncError();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->status.code(), CudaError::kInvalidValue);
  EXPECT_EQ(error->call, CallId::kMemset);
  EXPECT_NE(error->status.message().find("not inside"), std::string::npos);
  EXPECT_FALSE(conn->TakeAsyncError());
  ASSERT_TRUE(conn->Sync({}).ok());
  EXPECT_FALSE(conn->TakeAsyncError());
}

TEST_P(ServerTest, AClientCanNameOnlyItsOwnObjects) {
  auto a = Open();
  auto b = Open(1);
  ASSERT_TRUE(a && b);
  auto ptr = a->Malloc({4096});
  ASSERT_TRUE(ptr.ok());
  ASSERT_TRUE(a->StreamCreate({5, 0, 0}).ok());
  ASSERT_TRUE(a->EventCreate({6, 0}).ok());
  ASSERT_TRUE(a->Sync({}).ok());
  ASSERT_FALSE(a->TakeAsyncError());

  std::vector<std::byte> out(16);
  EXPECT_EQ(b->MemcpyDtoH({ptr->ptr, 16, 0}, out).status().code(), CudaError::kInvalidValue);
  EXPECT_EQ(b->MemcpyHtoD({ptr->ptr, 16, 0}, out).status().code(), CudaError::kInvalidValue);
  EXPECT_EQ(b->StreamSynchronize({5}).status().code(), CudaError::kInvalidResourceHandle);
  EXPECT_EQ(b->EventSynchronize({6}).status().code(), CudaError::kInvalidResourceHandle);
  ASSERT_TRUE(b->Free({ptr->ptr}).ok());
  ASSERT_TRUE(b->Sync({}).ok());
  auto error = b->TakeAsyncError();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->status.code(), CudaError::kInvalidValue);
  // B may use the same numbers for its own objects.
  ASSERT_TRUE(b->StreamCreate({5, 0, 0}).ok());
  ASSERT_TRUE(b->StreamSynchronize({5}).ok());
  // A's memory is untouched and still A's.
  std::vector<std::byte> in = Pattern(16, 3);
  ASSERT_TRUE(a->MemcpyHtoD({ptr->ptr, 16, 5}, in).ok());
  ASSERT_TRUE(a->MemcpyDtoH({ptr->ptr, 16, 5}, out).ok());
  EXPECT_EQ(in, out);
}

TEST_P(ServerTest, MemoryLimitIsTheServersOwnAccounting) {
  StartServer(1 << 20);
  auto conn = Open();
  ASSERT_TRUE(conn);
  auto big = conn->Malloc({(1 << 20) + 1});
  EXPECT_EQ(big.status().code(), CudaError::kMemoryAllocation);
  auto half = conn->Malloc({600 << 10});
  ASSERT_TRUE(half.ok());
  auto other = Open(1);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->Malloc({600 << 10}).status().code(), CudaError::kMemoryAllocation);
  auto info = other->MemGetInfo({});
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->total_bytes, 1u << 20);
  EXPECT_EQ(info->free_bytes, (1u << 20) - (600u << 10));
  // The device a client is shown is its share: totalGlobalMem is the limit.
  auto props = other->GetDeviceProperties({0});
  ASSERT_TRUE(props.ok());
  bool saw_total = false;
  for (const NamedValue& v : props->values) {
    if (v.name == "totalGlobalMem") saw_total = v.value == (1 << 20);
  }
  EXPECT_TRUE(saw_total);
  ASSERT_TRUE(conn->Free({half->ptr}).ok());
  ASSERT_TRUE(conn->Sync({}).ok());
  EXPECT_TRUE(other->Malloc({600 << 10}).ok());
}

TEST_P(ServerTest, EverythingIsFreedWhenAClientVanishes) {
  auto survivor = Open(1);
  ASSERT_TRUE(survivor);
  uint64_t gone_id = 0;
  {
    auto conn = Open();
    ASSERT_TRUE(conn);
    gone_id = conn->server().client_id;
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(conn->Malloc({1 << 20}).ok());
    ASSERT_TRUE(conn->StreamCreate({1, 0, 0}).ok());
    ASSERT_TRUE(conn->EventCreate({2, 0}).ok());
    std::vector<std::byte> big(8 << 20);
    auto ptr = conn->Malloc({big.size()});
    ASSERT_TRUE(ptr.ok());
    // Leaves mid-stream: a large copy posted, never synchronised.
    ASSERT_TRUE(conn->MemcpyHtoDAsync({ptr->ptr, big.size(), 1}, big).ok());
    auto stats = conn->DebugStats({});
    ASSERT_TRUE(stats.ok());
    bool found = false;
    for (const ClientStats& c : stats->clients) {
      if (c.client_id == gone_id) {
        found = true;
        EXPECT_EQ(c.allocations, 11u);
        EXPECT_EQ(c.streams, 1u);
      }
    }
    EXPECT_TRUE(found);
  }
  EXPECT_TRUE(WaitForStats([&](const DebugStatsReply& stats) {
    for (const ClientStats& c : stats.clients) {
      if (c.client_id == gone_id) {
        return !c.connected && c.allocations == 0 && c.allocated_bytes == 0 && c.streams == 0 &&
               c.events == 0;
      }
    }
    return false;
  }));
  EXPECT_EQ(server_->Stats().allocated_bytes, 0u);
  // The other client never noticed.
  auto ptr = survivor->Malloc({128});
  ASSERT_TRUE(ptr.ok());
  ASSERT_TRUE(survivor->Sync({}).ok());
}

// Sends raw bytes as a client would, returns whether the server closed the connection.
bool ServerClosesAfter(const Endpoint& endpoint, const Bytes& bytes) {
  auto fd = Connect(endpoint);
  if (!fd.ok()) return false;
  (void)WriteAll(fd->get(), bytes);
  ::shutdown(fd->get(), SHUT_WR);
  char buf[4096];
  timeval timeout{5, 0};
  ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  while (true) {
    ssize_t n = ::recv(fd->get(), buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

Bytes HelloBytes() {
  Bytes out;
  AppendFrame(out, FrameKind::kHello, CallId::kNone, 0,
              HelloRequest{kHelloMagic, 1, 1, kAllCapabilities, "hostile", 1, 0});
  return out;
}

TEST_P(ServerTest, HostileClientsCannotHurtTheServerOrOthers) {
  auto good = Open();
  ASSERT_TRUE(good);
  auto ptr = good->Malloc({256});
  ASSERT_TRUE(ptr.ok());
  const Endpoint& endpoint = server_->endpoints()[1];

  std::vector<Bytes> attacks;
  attacks.push_back(Bytes(100, std::byte{0x41}));  // garbage instead of a hello
  Bytes oversized = HelloBytes();
  oversized.resize(oversized.size() + kFrameHeaderBytes);
  EncodeFrameHeader({kMaxFramePayload + 1, CallId::kMalloc, FrameKind::kCall, 1},
                    oversized.data() + oversized.size() - kFrameHeaderBytes);
  attacks.push_back(oversized);
  Bytes lying = HelloBytes();  // a copy whose data does not match its header
  AppendFrame(lying, FrameKind::kPost, CallId::kMemcpyHtoDAsync, 1,
              MemcpyHtoDAsyncRequest{ptr->ptr, 1 << 20, 0});
  AppendFrame(lying, FrameKind::kPost, CallId::kFree, 2, FreeRequest{ptr->ptr});
  attacks.push_back(lying);
  Bytes wrong_kind = HelloBytes();  // a call sent as a post
  AppendFrame(wrong_kind, FrameKind::kPost, CallId::kMalloc, 1, MallocRequest{16});
  attacks.push_back(wrong_kind);
  Bytes truncated = HelloBytes();  // a launch whose params blob claims more than the frame
  AppendFrame(truncated, FrameKind::kPost, CallId::kLaunchKernel, 1,
              LaunchKernelRequest{1, {}, {}, 0, 0, Bytes(8)});
  truncated[truncated.size() - 9] = std::byte{0x7F};
  attacks.push_back(truncated);
  Bytes stray_data = HelloBytes();
  AppendFrame(stray_data, FrameKind::kData, CallId::kMemcpyHtoD, 9, uint64_t{0});
  attacks.push_back(stray_data);
  Bytes reply_from_client = HelloBytes();
  AppendFrame(reply_from_client, FrameKind::kReply, CallId::kSync, 1, ReplyStatus{});
  attacks.push_back(reply_from_client);
  // Random bytes after a valid hello.
  std::mt19937 rng(99);
  for (int i = 0; i < 20; ++i) {
    Bytes random = HelloBytes();
    for (int j = 0; j < 200; ++j) random.push_back(static_cast<std::byte>(rng()));
    attacks.push_back(random);
  }
  for (size_t i = 0; i < attacks.size(); ++i) {
    EXPECT_TRUE(ServerClosesAfter(endpoint, attacks[i])) << "attack " << i;
  }
  // The honest client's memory is intact and it carries on.
  std::vector<std::byte> in = Pattern(256, 1), out(256);
  ASSERT_TRUE(good->MemcpyHtoD({ptr->ptr, 256, 0}, in).ok());
  ASSERT_TRUE(good->MemcpyDtoH({ptr->ptr, 256, 0}, out).ok());
  EXPECT_EQ(in, out);
  EXPECT_TRUE(WaitForStats([](const DebugStatsReply& stats) {
    size_t connected = 0;
    for (const ClientStats& c : stats.clients) connected += c.connected;
    return connected == 1;
  }));
}

TEST_P(ServerTest, ModulesFunctionsAndLaunchesAreRecorded) {
  std::ifstream in(std::string(FLYT_SOURCE_DIR) + "/tests/data/cuda/many_params.fatbin",
                   std::ios::binary);
  ASSERT_TRUE(in) << "tests/data/cuda/many_params.fatbin missing";
  Bytes image;
  for (char c; in.get(c);) image.push_back(static_cast<std::byte>(c));
  auto fatbin = cuda::ParseFatbin(image);
  ASSERT_TRUE(fatbin.ok()) << fatbin.status().ToString();
  auto kernels = cuda::KernelsOf(*fatbin);
  ASSERT_TRUE(kernels.ok() && !kernels->empty());
  const cuda::KernelInfo& kernel = kernels->front();

  auto conn = Open();
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->ModuleLoad({1, image.size(), "many_params"}, image).ok());
  ASSERT_TRUE(conn->ModuleGetFunction({1, 2, kernel.name}).ok());
  ASSERT_TRUE(conn->ModuleGetFunction({1, 3, "no_such_kernel"}).ok());
  Bytes params(kernel.param_bytes);
  std::iota(reinterpret_cast<uint8_t*>(params.data()),
            reinterpret_cast<uint8_t*>(params.data()) + params.size(), uint8_t{1});
  ASSERT_TRUE(conn->LaunchKernel({2, {3, 2, 1}, {128, 1, 1}, 0, 0, params}).ok());
  ASSERT_TRUE(conn->Sync({}).ok());
  auto error = conn->TakeAsyncError();
  ASSERT_TRUE(error);  // the unknown kernel
  EXPECT_EQ(error->status.code(), CudaError::kInvalidDeviceFunction);
  // A wrong-size parameter buffer is refused.
  ASSERT_TRUE(conn->LaunchKernel({2, {1, 1, 1}, {1, 1, 1}, 0, 0, Bytes(params.size() + 4)}).ok());
  ASSERT_TRUE(conn->Sync({}).ok());
  error = conn->TakeAsyncError();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->status.code(), CudaError::kInvalidValue);
  auto attrs = conn->FuncGetAttributes({2});
  ASSERT_TRUE(attrs.ok());
  EXPECT_FALSE(attrs->values.empty());

  std::ifstream log(dir_ / "launches.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(log, line));
  EXPECT_NE(line.find("\"kernel\":\"" + kernel.name + "\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"grid\":[3,2,1]"), std::string::npos) << line;
  EXPECT_NE(line.find("\"block\":[128,1,1]"), std::string::npos) << line;
  EXPECT_NE(line.find("\"params\":\"010203"), std::string::npos) << line;
  EXPECT_NE(line.find("\"args\":["), std::string::npos) << line;
  EXPECT_FALSE(std::getline(log, line)) << "refused launches must not be logged";
}

// ---- a process per client ----

TEST_P(ServerTest, AClientProcessThatDiesGivesBackWhatItHeldAndHurtsNoOne) {
  if (GetParam() != Isolation::kProcess) GTEST_SKIP() << "a process per client only";
  auto victim = Open();
  auto neighbour = Open(1);
  ASSERT_TRUE(victim && neighbour);
  ASSERT_TRUE(victim->Malloc({64 << 20}).ok());
  auto kept = neighbour->Malloc({1 << 20});
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(server_->Stats().allocated_bytes, (65u << 20));
  // Each sees the other's memory as taken, though each process has a sim device of its own.
  auto info = neighbour->MemGetInfo({});
  ASSERT_TRUE(info.ok());
  EXPECT_LE(info->free_bytes, info->total_bytes - (65u << 20));

  pid_t pid = server_->ClientProcess(victim->server().client_id);
  ASSERT_GT(pid, 0);
  EXPECT_NE(pid, server_->ClientProcess(neighbour->server().client_id));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);  // as a segfault in the driver would end it

  // Its 64 MiB go back to the account; its row says it has gone.
  EXPECT_TRUE(WaitForStats([&](const DebugStatsReply& s) {
    for (const ClientStats& c : s.clients) {
      if (c.client_id == victim->server().client_id && c.connected) return false;
    }
    return s.allocated_bytes == (1u << 20);
  }));
  EXPECT_EQ(server_->ClientProcess(victim->server().client_id), 0);
  // The victim's own program sees its connection end (an error, not a hang).
  EXPECT_FALSE(victim->MemGetInfo({}).ok());
  // The neighbour goes on, with its memory intact.
  std::vector<std::byte> in = Pattern(4096, 9), out(4096);
  ASSERT_TRUE(neighbour->MemcpyHtoD({kept->ptr, 4096, 0}, in).ok());
  ASSERT_TRUE(neighbour->MemcpyDtoH({kept->ptr, 4096, 0}, out).ok());
  EXPECT_EQ(in, out);
  EXPECT_TRUE(neighbour->Malloc({8 << 20}).ok());
  // And new clients are served.
  auto next = Open();
  ASSERT_TRUE(next);
  EXPECT_TRUE(next->MemGetInfo({}).ok());
}

TEST_P(ServerTest, StopEndsEveryClientProcess) {
  if (GetParam() != Isolation::kProcess) GTEST_SKIP() << "a process per client only";
  auto a = Open();
  auto b = Open(1);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Malloc({1 << 20}).ok());
  pid_t pa = server_->ClientProcess(a->server().client_id);
  pid_t pb = server_->ClientProcess(b->server().client_id);
  ASSERT_GT(pa, 0);
  ASSERT_GT(pb, 0);
  server_->Stop();
  // Reaped, not left as zombies or orphans.
  EXPECT_EQ(::kill(pa, 0), -1);
  EXPECT_EQ(::kill(pb, 0), -1);
  EXPECT_EQ(server_->Stats().allocated_bytes, 0u);
  EXPECT_FALSE(a->MemGetInfo({}).ok());
}

TEST_P(ServerTest, AClientProcessThatCannotOpenTheDeviceIsToldWhy) {
  if (GetParam() != Isolation::kProcess) GTEST_SKIP() << "a process per client only";
  server_->Stop();
  ServerOptions options;
  options.listen.push_back(*ParseEndpoint("unix:" + (dir_ / "broken.sock").string()));
  server_ = std::make_unique<Server>(
      []() -> Result<std::unique_ptr<Backend>> {
        return Unavailable("cuInit: CUDA_ERROR_NO_DEVICE");
      },
      options);
  ASSERT_TRUE(server_->Start().ok());
  ClientOptions client;
  client.label = "server_test";
  auto conn = Connection::Open(server_->endpoints()[0], client);
  ASSERT_FALSE(conn.ok());
  EXPECT_NE(conn.status().message().find("cuInit: CUDA_ERROR_NO_DEVICE"), std::string::npos)
      << conn.status().ToString();
}

// Loads tests/data/cuda/sim_fault.fatbin as module 1, its fault-injection kernel as function 2.
void LoadFaultModule(Connection& conn) {
  std::ifstream in(std::string(FLYT_SOURCE_DIR) + "/tests/data/cuda/sim_fault.fatbin",
                   std::ios::binary);
  ASSERT_TRUE(in) << "tests/data/cuda/sim_fault.fatbin missing";
  Bytes image;
  for (char c; in.get(c);) image.push_back(static_cast<std::byte>(c));
  ASSERT_TRUE(conn.ModuleLoad({1, image.size(), "sim_fault"}, image).ok());
  ASSERT_TRUE(conn.ModuleGetFunction({1, 2, "_Z20flyt_sim_fault_storePi"}).ok());
}

// Loads it and launches the kernel; the fault shows at the next synchronising call.
void LaunchFault(Connection& conn) {
  LoadFaultModule(conn);
  Bytes params(8);
  ASSERT_TRUE(conn.LaunchKernel({2, {1, 1, 1}, {1, 1, 1}, 0, 0, params}).ok());
}

TEST_P(ServerTest, OccupancyOfAnyBlockSizeIsAnAnswerNotACrash) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  LoadFaultModule(*conn);
  for (int32_t block : {1, 256, 1024, 1025, 1 << 26, 134217728, INT32_MAX}) {
    auto occupancy = conn->OccupancyMaxActiveBlocks({2, block, 0, 0});
    ASSERT_TRUE(occupancy.ok()) << block << ": " << occupancy.status().ToString();
    EXPECT_GE(occupancy->blocks, 0) << block;
    if (block > 1024) {
      EXPECT_EQ(occupancy->blocks, 0) << block;
    }
  }
  EXPECT_GT(conn->OccupancyMaxActiveBlocks({2, 256, 0, 0})->blocks, 0);
  for (uint64_t shared : {uint64_t{1} << 20, ~uint64_t{0} - 1023, ~uint64_t{0}}) {
    auto occupancy = conn->OccupancyMaxActiveBlocks({2, 256, shared, 0});
    ASSERT_TRUE(occupancy.ok()) << shared;
    EXPECT_EQ(occupancy->blocks, 0) << shared;
  }
}

TEST_P(ServerTest, AKernelFaultReachesEveryClientOfAProcess) {
  // What the H100 does (docs/hardware-verification.md), and the sim models: a fault corrupts the
  // device state of the whole process. With a process per client that is one client's.
  auto faulty = Open();
  auto neighbour = Open(1);
  ASSERT_TRUE(faulty && neighbour);
  LaunchFault(*faulty);
  EXPECT_EQ(faulty->DeviceSynchronize({}).status().code(), CudaError::kIllegalAddress);
  EXPECT_EQ(faulty->Malloc({16}).status().code(), CudaError::kIllegalAddress);  // sticky
  CudaStatus seen = neighbour->DeviceSynchronize({}).status();
  if (GetParam() == Isolation::kThread) {
    EXPECT_EQ(seen.code(), CudaError::kIllegalAddress) << "one process, one device state";
    // And cudaDeviceReset cannot clear it in that process.
    EXPECT_EQ(faulty->DeviceReset({}).status().code(), CudaError::kIllegalAddress);
    return;
  }
  EXPECT_TRUE(seen.ok()) << seen.ToString();
  auto kept = neighbour->Malloc({4096});
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();

  // cudaDeviceReset goes on in a fresh process: same connection, same client, clean state.
  pid_t before = server_->ClientProcess(faulty->server().client_id);
  auto reset = faulty->DeviceReset({});
  ASSERT_TRUE(reset.ok()) << reset.status().ToString();
  pid_t after = server_->ClientProcess(faulty->server().client_id);
  EXPECT_GT(after, 0);
  EXPECT_NE(after, before);
  auto fresh = faulty->Malloc({1 << 20});
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  std::vector<std::byte> in = Pattern(1 << 20, 5), out(1 << 20);
  ASSERT_TRUE(faulty->MemcpyHtoD({fresh->ptr, in.size(), 0}, in).ok());
  ASSERT_TRUE(faulty->MemcpyDtoH({fresh->ptr, out.size(), 0}, out).ok());
  EXPECT_EQ(in, out);
  EXPECT_TRUE(faulty->DeviceSynchronize({}).ok());
  // The account holds exactly what the two clients hold now; stats still know the client.
  EXPECT_EQ(server_->Stats().allocated_bytes, (1u << 20) + 4096u);
  bool listed = false;
  for (const ClientStats& c : server_->Stats().clients) {
    if (c.client_id == faulty->server().client_id) {
      listed = c.connected && c.label == "server_test" && c.allocated_bytes == (1u << 20);
    }
  }
  EXPECT_TRUE(listed);
  // A second fault and reset work the same way.
  LaunchFault(*faulty);
  EXPECT_EQ(faulty->DeviceSynchronize({}).status().code(), CudaError::kIllegalAddress);
  ASSERT_TRUE(faulty->DeviceReset({}).ok());
  EXPECT_TRUE(faulty->MemGetInfo({}).ok());
  EXPECT_EQ(server_->Stats().allocated_bytes, 4096u);
}

// A backend without a host view (a GPU) gets copies in chunks through MemcpyHtoD/MemcpyDtoH.
TEST(StagedCopyTest, CopiesWithoutAHostViewRoundTripByteExact) {
  SimOptions sim;
  sim.host_view = false;
  std::unique_ptr<Backend> backend = MakeSimBackend(sim);
  ServerOptions options;
  std::string path = (std::filesystem::temp_directory_path() /
                      ("flyt-staged-" + std::to_string(::getpid()) + ".sock"))
                         .string();
  options.listen.push_back(*ParseEndpoint("unix:" + path));
  Server server(*backend, options);
  ASSERT_TRUE(server.Start().ok());
  ClientOptions client;
  client.label = "server_test";
  auto conn = Connection::Open(server.endpoints()[0], client);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  for (size_t size : {size_t{1}, size_t{3 << 20} + 7}) {
    auto ptr = (*conn)->Malloc({size});
    ASSERT_TRUE(ptr.ok());
    std::vector<std::byte> in = Pattern(size, 11), out(size), async_out(size);
    ASSERT_TRUE((*conn)->MemcpyHtoD({ptr->ptr, size, 0}, in).ok());
    ASSERT_TRUE((*conn)->MemcpyDtoH({ptr->ptr, size, 0}, out).ok());
    EXPECT_EQ(in, out);
    ASSERT_TRUE((*conn)->MemcpyHtoDAsync({ptr->ptr, size, 0}, Pattern(size, 12)).ok());
    ASSERT_TRUE((*conn)->MemcpyDtoHAsync({ptr->ptr, size, 0}, async_out).ok());
    ASSERT_TRUE((*conn)->Sync({}).ok());
    EXPECT_EQ(async_out, Pattern(size, 12));
  }
  EXPECT_GT(server.Stats().clients.at(0).bytes_to_device, 0u);
  server.Stop();
}

TEST(SmShareTest, GrantsRoundUpToTheGranularityAndStopAtTheDevice) {
  EXPECT_EQ(GrantedSmCount(33, 132, 8), 40);
  EXPECT_EQ(GrantedSmCount(40, 132, 8), 40);
  EXPECT_EQ(GrantedSmCount(1, 132, 8), 8);
  EXPECT_EQ(GrantedSmCount(129, 132, 8), 132);
  EXPECT_EQ(GrantedSmCount(5, 132, 1), 5);
  EXPECT_EQ(GrantedSmCount(0, 132, 8), 8);
}

// A client of a sim server with an SM share sees the granted SMs as the device's, in the
// properties and the attribute, and the probe reports total and grant.
TEST(SmShareTest, ASimClientSeesItsGrantedSms) {
  SimOptions sim;
  sim.sm_share = 33;
  BackendFactory factory = [sim]() -> Result<std::unique_ptr<Backend>> {
    return MakeSimBackend(sim);
  };
  auto probe = ProbeBackend(factory);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_EQ(probe->identity.sm_count_total, 132);
  EXPECT_EQ(probe->identity.sm_count_granted, 40);
  EXPECT_EQ(probe->identity.sm_granularity, 8);
  EXPECT_EQ(probe->identity.total_memory_bytes, SimOptions{}.memory_bytes);

  ServerOptions options;
  options.listen.push_back(*ParseEndpoint("127.0.0.1:0"));
  Server server(factory, options);
  ASSERT_TRUE(server.Start().ok());
  auto conn = Connection::Open(server.endpoints()[0], ClientOptions{});
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto props = (*conn)->GetDeviceProperties({0});
  ASSERT_TRUE(props.ok());
  int sms = 0;
  for (const NamedValue& v : props->values) {
    if (v.name == "multiProcessorCount") sms = static_cast<int>(v.value);
  }
  EXPECT_EQ(sms, 40);
  auto attr = (*conn)->DeviceGetAttribute({0, 16});  // cudaDevAttrMultiProcessorCount
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->value, 40);
}

TEST(ProbeBackendTest, ReportsWhatTheBackendIsOrWhyItCannotBeOpened) {
  auto probe = ProbeBackend([]() -> Result<std::unique_ptr<Backend>> { return MakeSimBackend(); });
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_EQ(probe->name, "sim");
  EXPECT_TRUE(probe->simulated);
  EXPECT_NE(probe->description.find("H100"), std::string::npos);
  auto failed = ProbeBackend([]() -> Result<std::unique_ptr<Backend>> {
    return Unavailable("no CUDA-capable device is detected");
  });
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "no CUDA-capable device is detected");
}

INSTANTIATE_TEST_SUITE_P(Isolation, ServerTest,
                         ::testing::Values(Isolation::kThread, Isolation::kProcess),
                         [](const ::testing::TestParamInfo<Isolation>& param) {
                           return param.param == Isolation::kThread ? "Thread" : "Process";
                         });

}  // namespace
}  // namespace flyt::remote
