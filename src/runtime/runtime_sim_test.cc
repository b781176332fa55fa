// flyt's libcudart against an in-process server on the simulated device, loaded as a program
// loads it (dlopen of the built library; FLYT_SERVER names the server).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "remote_client/debug_stats.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"

namespace flyt::remote {
namespace {

constexpr int kMultiProcessorCount = 16;  // cudaDevAttrMultiProcessorCount

// An in-process sim server on a Unix socket in a directory of its own, named to the runtime by
// FLYT_SERVER (FLYT_SHM as `shm` says), and flyt's libcudart loaded as a program loads it. One
// per test process: the library keeps its connection for the process's life.
class RuntimeAgainstServer {
 public:
  RuntimeAgainstServer(bool shm, uint64_t arena_bytes = ShmLayout{}.arena_bytes)
      : dir_(std::filesystem::temp_directory_path() /
             ("flyt-runtime-sim-test-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    ServerOptions options;
    options.listen.push_back(*ParseEndpoint("unix:" + (dir_ / "s.sock").string()));
    options.shm_layout.arena_bytes = arena_bytes;
    server_ = std::make_unique<Server>(*backend_, options);
    started_ = server_->Start().ok();
    ::setenv("FLYT_SERVER", server_->endpoints()[0].ToString().c_str(), 1);
    ::setenv("FLYT_SHM", shm ? "1" : "0", 1);
    lib_ = ::dlopen(FLYT_CUDART_PATH, RTLD_NOW | RTLD_LOCAL);
  }
  ~RuntimeAgainstServer() {
    server_->Stop();
    std::filesystem::remove_all(dir_);
  }
  bool ready() const { return started_ && lib_ != nullptr; }
  Server& server() { return *server_; }
  template <typename F>
  F* Sym(const char* name) {
    return reinterpret_cast<F*>(::dlsym(lib_, name));
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_ = MakeSimBackend();
  std::unique_ptr<Server> server_;
  bool started_ = false;
  void* lib_ = nullptr;
};

// The runtime caches device facts; after a resize the server tells it (a kNotice with the reply
// of the call at which the client applied the new share), and the next query asks again.
TEST(RuntimeSim, ADeviceQueryAfterAResizeShowsTheNewShare) {
  RuntimeAgainstServer rt(/*shm=*/false);
  ASSERT_TRUE(rt.ready()) << ::dlerror();
  Server& server = rt.server();
  auto get = rt.Sym<int(int*, int, int)>("cudaDeviceGetAttribute");
  auto sync = rt.Sym<int()>("cudaDeviceSynchronize");
  ASSERT_TRUE(get != nullptr && sync != nullptr);

  int sms = 0;
  ASSERT_EQ(get(&sms, kMultiProcessorCount, 0), 0);
  EXPECT_EQ(sms, 132);
  auto answer = std::async(std::launch::async, [&] {
    return RequestResize(server.endpoints()[0], "", 40, std::nullopt, 20'000);
  });
  while (answer.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready) {
    ASSERT_EQ(sync(), 0);
  }
  Result<ResizeOutcome> outcome = answer.get();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  ASSERT_EQ(outcome->clients_applied, 1u) << outcome->message;
  ASSERT_EQ(get(&sms, kMultiProcessorCount, 0), 0);
  EXPECT_EQ(sms, 40);
}

// The arena bytes of this process's client in the server's stats.
uint64_t ArenaCopyBytes(const Server& server) {
  Result<ServerStats> stats = FetchStats(server.endpoints()[0]);
  if (!stats.ok()) return ~uint64_t{0};
  for (const ClientTransport& t : stats->transports) {
    if (t.peer_pid == static_cast<uint32_t>(::getpid()) && t.transport == "shm") {
      return t.arena_copy_bytes;
    }
  }
  return ~uint64_t{0};
}

// cudaHostRegister'd memory over shared memory: its copies go through the arena (the server
// reads and writes the shared pages, by DMA on a GPU), sync and async, byte-exact, also when a
// device-to-host copy into the range is followed on the stream by a copy out of it; a range the
// arena has no room for, and one unregistered again, go the ordinary way and stay exact.
TEST(RuntimeSim, RegisteredHostMemoryIsStagedThroughTheArena) {
  RuntimeAgainstServer rt(/*shm=*/true, /*arena_bytes=*/16 << 20);
  ASSERT_TRUE(rt.ready()) << ::dlerror();
  Server& server = rt.server();
  auto malloc_ = rt.Sym<int(void**, size_t)>("cudaMalloc");
  auto reg = rt.Sym<int(void*, size_t, unsigned)>("cudaHostRegister");
  auto unreg = rt.Sym<int(void*)>("cudaHostUnregister");
  auto copy = rt.Sym<int(void*, const void*, size_t, int)>("cudaMemcpy");
  auto copy_async = rt.Sym<int(void*, const void*, size_t, int, void*)>("cudaMemcpyAsync");
  auto stream_create = rt.Sym<int(void**)>("cudaStreamCreate");
  auto stream_sync = rt.Sym<int(void*)>("cudaStreamSynchronize");
  auto event_create = rt.Sym<int(void**)>("cudaEventCreate");
  auto event_record = rt.Sym<int(void*, void*)>("cudaEventRecord");
  auto event_sync = rt.Sym<int(void*)>("cudaEventSynchronize");
  ASSERT_TRUE(malloc_ && reg && unreg && copy && copy_async && stream_create && stream_sync &&
              event_create && event_record && event_sync);
  constexpr int kHtoD = 1, kDtoH = 2;
  constexpr size_t kBytes = 4 << 20;
  auto pattern = [](size_t n, unsigned seed) {
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
    return v;
  };
  auto* a = static_cast<unsigned char*>(std::aligned_alloc(4096, kBytes));
  auto* b = static_cast<unsigned char*>(std::aligned_alloc(4096, kBytes));
  std::vector<unsigned char> c(kBytes);
  void* dev = nullptr;
  void* dev2 = nullptr;
  void* stream = nullptr;
  void* event = nullptr;
  ASSERT_EQ(malloc_(&dev, kBytes), 0);
  ASSERT_EQ(malloc_(&dev2, kBytes), 0);
  ASSERT_EQ(stream_create(&stream), 0);
  ASSERT_EQ(event_create(&event), 0);
  ASSERT_EQ(reg(a, kBytes, 0), 0);
  ASSERT_EQ(reg(b, kBytes, 0), 0);
  const uint64_t before = ArenaCopyBytes(server);
  ASSERT_NE(before, ~uint64_t{0}) << "the client is not on shared memory";

  // Sync both ways.
  std::vector<unsigned char> one = pattern(kBytes, 1);
  std::memcpy(a, one.data(), kBytes);
  ASSERT_EQ(copy(dev, a, kBytes, kHtoD), 0);
  ASSERT_EQ(copy(b, dev, kBytes, kDtoH), 0);
  EXPECT_EQ(std::memcmp(b, one.data(), kBytes), 0);
  // Async both ways, seen after an event recorded behind them.
  std::vector<unsigned char> two = pattern(kBytes, 2);
  std::memcpy(a, two.data(), kBytes);
  ASSERT_EQ(copy_async(dev, a, kBytes, kHtoD, stream), 0);
  ASSERT_EQ(copy_async(b + 4096, dev, kBytes - 4096, kDtoH, stream), 0);
  ASSERT_EQ(event_record(event, stream), 0);
  ASSERT_EQ(event_sync(event), 0);
  EXPECT_EQ(std::memcmp(b + 4096, two.data(), kBytes - 4096), 0);
  // Down into b, then up out of b on the same stream: the upload carries what came down.
  std::vector<unsigned char> three = pattern(kBytes, 3);
  ASSERT_EQ(copy(dev2, three.data(), kBytes, kHtoD), 0);  // pageable: not through the arena
  ASSERT_EQ(copy_async(b, dev2, kBytes, kDtoH, stream), 0);
  // A pageable upload sends what was posted; the server does the download meanwhile, so its
  // bytes are in the arena before b has them.
  ASSERT_EQ(copy_async(dev2, three.data(), kBytes, kHtoD, stream), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(copy_async(dev, b, kBytes, kHtoD, stream), 0);
  ASSERT_EQ(stream_sync(stream), 0);
  ASSERT_EQ(copy(c.data(), dev, kBytes, kDtoH), 0);
  EXPECT_TRUE(c == three);
  EXPECT_EQ(std::memcmp(b, three.data(), kBytes), 0);
  // Every copy from or into a and b went through the arena (2 + 2 + 2 of them).
  EXPECT_EQ(ArenaCopyBytes(server) - before, 5 * kBytes + (kBytes - 4096));

  // Larger than the arena: no copy there; ordinary copies, exact.
  constexpr size_t kLarge = 24 << 20;
  auto* large = static_cast<unsigned char*>(std::aligned_alloc(4096, kLarge));
  void* dev_large = nullptr;
  ASSERT_EQ(malloc_(&dev_large, kLarge), 0);
  ASSERT_EQ(reg(large, kLarge, 0), 0);
  std::vector<unsigned char> four = pattern(kLarge, 4);
  std::memcpy(large, four.data(), kLarge);
  const uint64_t mid = ArenaCopyBytes(server);
  ASSERT_EQ(copy_async(dev_large, large, kLarge, kHtoD, stream), 0);
  std::memset(large, 0, kLarge);
  ASSERT_EQ(stream_sync(stream), 0);
  ASSERT_EQ(copy_async(large, dev_large, kLarge, kDtoH, stream), 0);
  ASSERT_EQ(stream_sync(stream), 0);
  EXPECT_EQ(std::memcmp(large, four.data(), kLarge), 0);
  EXPECT_EQ(ArenaCopyBytes(server), mid);
  // Unregistered again: its block is free, a's copies go the ordinary way.
  ASSERT_EQ(unreg(a), 0);
  ASSERT_EQ(copy(dev, a, kBytes, kHtoD), 0);
  ASSERT_EQ(copy(c.data(), dev, kBytes, kDtoH), 0);
  EXPECT_EQ(std::memcmp(c.data(), a, kBytes), 0);
  EXPECT_EQ(ArenaCopyBytes(server), mid);
  ASSERT_EQ(unreg(b), 0);
  ASSERT_EQ(unreg(large), 0);
  std::free(a);
  std::free(b);
  std::free(large);
}

}  // namespace
}  // namespace flyt::remote
