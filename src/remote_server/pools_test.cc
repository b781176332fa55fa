// The pools family on the server (handlers_pools.cc) over the sim backend, driven through the
// real client Connection: stream-ordered allocation counted against the memory limit, cached
// blocks released at the limit, by trim and by the release threshold, freed blocks no longer a
// copy range, hostile pool handles and pointers refused, and everything released when the client
// goes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "remote_client/client.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"

namespace flyt::remote {
namespace {

constexpr uint32_t kReleaseThreshold = 4;
constexpr uint32_t kReservedMemCurrent = 5;
constexpr uint32_t kUsedMemCurrent = 7;
constexpr uint32_t kUsedMemHigh = 8;

class PoolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("flyt-pools-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ServerOptions options;
    options.listen.push_back(*ParseEndpoint("unix:" + (dir_ / "s.sock").string()));
    options.memory_limit_bytes = 1 << 20;
    backend_ = MakeSimBackend();
    server_ = std::make_unique<Server>(*backend_, options);
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
    conn_ = Open();
    ASSERT_TRUE(conn_);
  }
  void TearDown() override {
    conn_.reset();
    if (server_) server_->Stop();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<Connection> Open() {
    ClientOptions options;
    options.label = "pools_test";
    options.pid = static_cast<uint32_t>(::getpid());
    auto conn = Connection::Open(server_->endpoints()[0], options);
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return conn.ok() ? std::move(conn).value() : nullptr;
  }
  uint64_t Attr(uint64_t pool, uint32_t attr) {
    auto reply = conn_->MemPoolGetAttribute({pool, attr});
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? reply->value : ~0ull;
  }
  // The first deferred error since the last call (after a Sync).
  CudaError DeferredError() {
    EXPECT_TRUE(conn_->Sync({}).ok());
    auto error = conn_->TakeAsyncError();
    return error ? error->status.code() : CudaError::kSuccess;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Connection> conn_;
};

TEST_F(PoolsTest, PoolMemoryCountsAgainstTheLimitAndIsReleasedInStreamOrder) {
  auto a = conn_->MallocAsync({0, 768 << 10, 0});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // The pool's block holds the memory: a plain cudaMalloc past the limit fails.
  EXPECT_EQ(conn_->Malloc({512 << 10}).status().code(), CudaError::kMemoryAllocation);
  EXPECT_EQ(Attr(0, kUsedMemCurrent), 768u << 10);
  ASSERT_TRUE(conn_->FreeAsync({a->ptr, 0}).ok());
  // Release threshold 0 (the default): the freed block goes back at once.
  EXPECT_EQ(Attr(0, kReservedMemCurrent), 0u);
  auto b = conn_->Malloc({512 << 10});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(conn_->Free({b->ptr}).ok());
  EXPECT_EQ(DeferredError(), CudaError::kSuccess);
}

TEST_F(PoolsTest, CachedBlocksAreReusedAndReleasedAtTheLimit) {
  ASSERT_TRUE(conn_->MemPoolSetAttribute({0, kReleaseThreshold, ~0ull}).ok());
  auto a = conn_->MallocAsync({0, 512 << 10, 0});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(conn_->FreeAsync({a->ptr, 0}).ok());
  EXPECT_EQ(Attr(0, kReservedMemCurrent), 512u << 10);
  EXPECT_EQ(Attr(0, kUsedMemCurrent), 0u);
  // Same size: the cached block comes back.
  auto again = conn_->MallocAsync({0, 512 << 10, 0});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ptr, a->ptr);
  ASSERT_TRUE(conn_->FreeAsync({again->ptr, 0}).ok());
  // Another size that fits only without the cached block: the pool lets it go first.
  auto big = conn_->MallocAsync({0, 768 << 10, 0});
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(Attr(0, kReservedMemCurrent), 768u << 10);
  EXPECT_EQ(Attr(0, kUsedMemHigh), 768u << 10);
  ASSERT_TRUE(conn_->FreeAsync({big->ptr, 0}).ok());
  ASSERT_TRUE(conn_->MemPoolTrimTo({0, 0}).ok());
  EXPECT_EQ(Attr(0, kReservedMemCurrent), 0u);
  // Past the limit with nothing to release.
  EXPECT_EQ(conn_->MallocAsync({0, (1 << 20) + 1, 0}).status().code(),
            CudaError::kMemoryAllocation);
}

TEST_F(PoolsTest, AFreedBlockIsNoLongerACopyRange) {
  auto a = conn_->MallocAsync({0, 4096, 0});
  ASSERT_TRUE(a.ok());
  std::vector<std::byte> out(16);
  ASSERT_TRUE(conn_->MemcpyDtoH({a->ptr, 16, 0}, out).ok());
  ASSERT_TRUE(conn_->FreeAsync({a->ptr, 0}).ok());
  EXPECT_EQ(conn_->MemcpyDtoH({a->ptr, 16, 0}, out).status().code(), CudaError::kInvalidValue);
  ASSERT_TRUE(conn_->FreeAsync({a->ptr, 0}).ok());  // twice: refused, deferred
  EXPECT_EQ(DeferredError(), CudaError::kInvalidValue);
}

TEST_F(PoolsTest, HostilePoolsAndPointersAreRefused) {
  EXPECT_EQ(conn_->MallocAsync({12345, 64, 0}).status().code(), CudaError::kInvalidValue);
  EXPECT_EQ(conn_->MallocAsync({0, 64, 999}).status().code(), CudaError::kInvalidResourceHandle);
  EXPECT_EQ(conn_->MemPoolGetAttribute({0, 99}).status().code(), CudaError::kInvalidValue);
  EXPECT_EQ(conn_->MemPoolSetAttribute({0, kUsedMemCurrent, 0}).status().code(),
            CudaError::kInvalidValue);
  EXPECT_EQ(conn_->MemPoolSetAttribute({0, kUsedMemHigh, 5}).status().code(),
            CudaError::kInvalidValue);
  ASSERT_TRUE(conn_->FreeAsync({0xdead0000, 0}).ok());
  EXPECT_EQ(DeferredError(), CudaError::kInvalidValue);
  ASSERT_TRUE(conn_->MemPoolCreate({0, 0}).ok());
  EXPECT_EQ(DeferredError(), CudaError::kInvalidValue);
  ASSERT_TRUE(conn_->MemPoolDestroy({0}).ok());
  EXPECT_EQ(DeferredError(), CudaError::kInvalidValue);
  ASSERT_TRUE(conn_->MemPoolCreate({7, 4096}).ok());
  ASSERT_TRUE(conn_->MemPoolCreate({7, 0}).ok());  // the handle is taken
  EXPECT_EQ(DeferredError(), CudaError::kInvalidValue);
  // Its maximum size holds.
  EXPECT_EQ(conn_->MallocAsync({7, 8192, 0}).status().code(), CudaError::kMemoryAllocation);
  ASSERT_TRUE(conn_->MemPoolDestroy({7}).ok());
  EXPECT_EQ(conn_->MallocAsync({7, 64, 0}).status().code(), CudaError::kInvalidValue);
  // Another client cannot name this one's pools.
  ASSERT_TRUE(conn_->MemPoolCreate({8, 0}).ok());
  ASSERT_TRUE(conn_->Sync({}).ok());
  auto other = Open();
  ASSERT_TRUE(other);
  EXPECT_EQ(other->MallocAsync({8, 64, 0}).status().code(), CudaError::kInvalidValue);
}

TEST_F(PoolsTest, EverythingIsReleasedWhenTheClientGoes) {
  ASSERT_TRUE(conn_->MemPoolSetAttribute({0, kReleaseThreshold, ~0ull}).ok());
  ASSERT_TRUE(conn_->MemPoolCreate({3, 0}).ok());
  auto live = conn_->MallocAsync({3, 256 << 10, 0});
  ASSERT_TRUE(live.ok());
  auto cached = conn_->MallocAsync({0, 256 << 10, 0});
  ASSERT_TRUE(cached.ok());
  ASSERT_TRUE(conn_->FreeAsync({cached->ptr, 0}).ok());
  ASSERT_TRUE(conn_->MemPoolDestroy({3}).ok());  // with `live` outstanding
  ASSERT_TRUE(conn_->Sync({}).ok());
  EXPECT_GT(server_->Stats().allocated_bytes, 0u);
  conn_.reset();
  bool released = false;
  for (int i = 0; i < 200 && !released; ++i) {
    released = server_->Stats().allocated_bytes == 0;
    if (!released) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(released);
  // The memory is there for the next client.
  auto next = Open();
  ASSERT_TRUE(next);
  EXPECT_TRUE(next->Malloc({1 << 20}).ok());
}

}  // namespace
}  // namespace flyt::remote
