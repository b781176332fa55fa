// The managed family at the server (sim backend, real client Connection over a Unix socket):
// managed memory placed at the client's mirror address, byte-exact copies through it, the memory
// limit, cleanup when a client vanishes, and hostile requests (bad hints, flags, sizes, handles).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "remote_client/client.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"
#include "remote_server/test_sim_server.h"

namespace flyt::remote {
namespace {

constexpr uint64_t kHint = 0x100000000000ull;  // a page-aligned host address (2^44)
constexpr uint32_t kAttachGlobal = 1;

class ManagedServerTest : public testing::SimServerTest {
 protected:
  ManagedServerTest() : SimServerTest("managed") {}
};

INSTANTIATE_TEST_SUITE_P(Isolation, ManagedServerTest,
                         ::testing::Values(Isolation::kThread, Isolation::kProcess));

TEST_P(ManagedServerTest, PlacedAtTheHintAndCopiesAreByteExact) {
  auto c = Open();
  ASSERT_NE(c, nullptr);
  auto m = c->MallocManaged({10000, kHint, kAttachGlobal});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->ptr, kHint);
  std::vector<std::byte> in(10000), out(10000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::byte>(i * 13);
  ASSERT_TRUE(c->MemcpyHtoD({kHint, in.size(), 0}, in).ok());
  ASSERT_TRUE(c->Memset({kHint + 100, 0x7F, 50, 0}).ok());
  ASSERT_TRUE(c->MemcpyDtoH({kHint, out.size(), 0}, out).ok());
  for (size_t i = 0; i < in.size(); ++i) {
    std::byte want = (i >= 100 && i < 150) ? std::byte{0x7F} : in[i];
    ASSERT_EQ(out[i], want) << i;
  }
  // A device allocation copies into and out of managed memory.
  auto d = c->Malloc({10000});
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(c->MemcpyDtoD({d->ptr, kHint, 10000, 0}).ok());
  ASSERT_TRUE(c->MemcpyDtoH({d->ptr + 5000, 10, 0}, std::span(out.data(), 10)).ok());
  EXPECT_EQ(out[0], in[5000]);
  // Past its end is not inside it.
  EXPECT_EQ(c->MemcpyDtoH({kHint + 9990, 20, 0}, std::span(out.data(), 20)).status().code(),
            CudaError::kInvalidValue);
  auto stats = c->DebugStats({});
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->allocated_bytes, 20000u);
  ASSERT_TRUE(c->Free({kHint}).ok());
  ASSERT_TRUE(c->Sync({}).ok());
  stats = c->DebugStats({});
  EXPECT_EQ(stats->allocated_bytes, 10000u);
  // The address is free again.
  EXPECT_TRUE(c->MallocManaged({4096, kHint, kAttachGlobal}).ok());
}

TEST_P(ManagedServerTest, TheSimDeviceSaysManagedMemoryWithoutConcurrentAccess) {
  auto c = Open();
  ASSERT_NE(c, nullptr);
  auto managed = c->DeviceGetAttribute({0, 83});
  auto concurrent = c->DeviceGetAttribute({0, 89});
  ASSERT_TRUE(managed.ok() && concurrent.ok());
  EXPECT_EQ(managed->value, 1);
  EXPECT_EQ(concurrent->value, 0);
}

TEST_P(ManagedServerTest, HostileRequestsAreRefused) {
  auto c = Open();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->MallocManaged({0, kHint, kAttachGlobal}).status().code(), CudaError::kInvalidValue);
  EXPECT_EQ(c->MallocManaged({64, kHint, 0}).status().code(), CudaError::kInvalidValue);
  EXPECT_EQ(c->MallocManaged({64, kHint, 3}).status().code(), CudaError::kInvalidValue);
  EXPECT_EQ(c->MallocManaged({64, kHint, 0x80}).status().code(), CudaError::kInvalidValue);
  EXPECT_EQ(c->MallocManaged({64, kHint + 12, kAttachGlobal}).status().code(),
            CudaError::kInvalidValue);
  // Inside the sim's device address space, at 0, and wrapping around.
  EXPECT_EQ(c->MallocManaged({64, 1ull << 47, kAttachGlobal}).status().code(),
            CudaError::kInvalidValue);
  EXPECT_EQ(c->MallocManaged({64, 0, kAttachGlobal}).status().code(), CudaError::kInvalidValue);
  EXPECT_EQ(c->MallocManaged({8192, ~uint64_t{4095}, kAttachGlobal}).status().code(),
            CudaError::kInvalidValue);
  // Overlapping a managed allocation already there.
  ASSERT_TRUE(c->MallocManaged({8192, kHint, kAttachGlobal}).ok());
  EXPECT_FALSE(c->MallocManaged({4096, kHint + 4096, kAttachGlobal}).ok());
  EXPECT_FALSE(c->MallocManaged({8192, kHint - 4096, kAttachGlobal}).ok());
  // A managed variable of a module this client never loaded.
  EXPECT_EQ(c->ModuleGetManagedGlobal({99, "x", 4, kHint + (1 << 20)}).status().code(),
            CudaError::kInvalidResourceHandle);
  // Nothing of that took the server down or leaked accounting.
  auto stats = c->DebugStats({});
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->allocated_bytes, 8192u);
}

TEST_P(ManagedServerTest, CountedAgainstTheMemoryLimitAndReleasedWithTheClient) {
  StartServer(1 << 20);
  {
    auto c = Open();
    ASSERT_NE(c, nullptr);
    auto big = c->MallocManaged({2 << 20, kHint, kAttachGlobal});
    EXPECT_EQ(big.status().code(), CudaError::kMemoryAllocation);
    ASSERT_TRUE(c->MallocManaged({600 << 10, kHint, kAttachGlobal}).ok());
    EXPECT_EQ(c->Malloc({600 << 10}).status().code(), CudaError::kMemoryAllocation);
  }
  // The client went away holding its managed memory: the server frees it.
  bool released = false;
  for (int i = 0; i < 200 && !released; ++i) {
    released = server_->Stats().allocated_bytes == 0;
    if (!released) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(released);
  auto c = Open();
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->MallocManaged({600 << 10, kHint, kAttachGlobal}).ok());
}

}  // namespace
}  // namespace flyt::remote
