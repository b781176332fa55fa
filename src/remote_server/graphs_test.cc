// CUDA graphs on the server, simulated backend, driven through the real client Connection: an
// instantiated graph is sent once and launched with one message; its kernels are recorded as
// launches, its copies and memsets are byte-exact; every hostile graph is refused, never run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "cuda/fatbin.h"
#include "remote_client/client.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"
#include "remote_server/test_sim_server.h"

namespace flyt::remote {
namespace {

class GraphsTest : public testing::SimServerTest {
 protected:
  GraphsTest() : SimServerTest("graphs") {}
  void SetUp() override { StartServer(0, /*launch_log=*/true); }
  // Loads tests/data/cuda/many_params.fatbin as module 1, its first kernel as function 2.
  cuda::KernelInfo LoadKernel(Connection& conn) {
    std::ifstream in(std::string(FLYT_SOURCE_DIR) + "/tests/data/cuda/many_params.fatbin",
                     std::ios::binary);
    Bytes image;
    for (char c; in.get(c);) image.push_back(static_cast<std::byte>(c));
    auto fatbin = cuda::ParseFatbin(image);
    EXPECT_TRUE(fatbin.ok());
    auto kernels = cuda::KernelsOf(*fatbin);
    EXPECT_TRUE(kernels.ok() && !kernels->empty());
    EXPECT_TRUE(conn.ModuleLoad({1, image.size(), "many_params"}, image).ok());
    EXPECT_TRUE(conn.ModuleGetFunction({1, 2, kernels->front().name}).ok());
    return kernels->front();
  }
  // The code of the first error of posted work, kSuccess when none.
  static CudaError PostedError(Connection& conn) {
    EXPECT_TRUE(conn.Sync({}).ok());
    auto error = conn.TakeAsyncError();
    return error ? error->status.code() : CudaError::kSuccess;
  }
  uint64_t Launches(Connection& conn) {
    auto stats = conn.DebugStats({});
    EXPECT_TRUE(stats.ok());
    for (const ClientStats& c : stats->clients) {
      if (c.connected && c.label == "graphs_test") return c.launches;
    }
    return 0;
  }

};

GraphNode Kernel(const cuda::KernelInfo& k, std::vector<uint32_t> deps, uint8_t fill) {
  GraphNode n;
  n.kind = 1;
  n.deps = std::move(deps);
  n.function = 2;
  n.grid = {4, 1, 1};
  n.block = {64, 1, 1};
  n.params = Bytes(k.param_bytes, std::byte{fill});
  return n;
}
GraphNode Copy(uint64_t dst, uint64_t src, uint64_t bytes, std::vector<uint32_t> deps) {
  GraphNode n;
  n.kind = 2;
  n.deps = std::move(deps);
  n.dst = dst;
  n.src = src;
  n.bytes = bytes;
  return n;
}
GraphNode Memset(uint64_t dst, uint32_t value, uint32_t element_size, uint64_t width,
                 uint64_t height, uint64_t pitch, std::vector<uint32_t> deps) {
  GraphNode n;
  n.kind = 3;
  n.deps = std::move(deps);
  n.dst = dst;
  n.value = value;
  n.element_size = element_size;
  n.width = width;
  n.height = height;
  n.pitch = pitch;
  return n;
}

TEST_P(GraphsTest, ALaunchRunsTheWholeGraphInOrderFromOneMessage) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  cuda::KernelInfo kernel = LoadKernel(*conn);
  auto a = conn->Malloc({4096});
  auto b = conn->Malloc({4096});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(conn->StreamCreate({3, 0, 0}).ok());
  ASSERT_TRUE(conn->EventCreate({4, 0}).ok());
  // memset a (32-bit pattern) -> kernel -> copy a to b -> 16-bit memset of a 2D block of a ->
  // event record; a second kernel beside them.
  std::vector<GraphNode> nodes;
  nodes.push_back(Memset(a->ptr, 0xA1B2C3D4, 4, 1024, 1, 0, {}));
  nodes.push_back(Kernel(kernel, {0}, 1));
  nodes.push_back(Copy(b->ptr, a->ptr, 4096, {1}));
  nodes.push_back(Memset(a->ptr, 0xBEEF, 2, 8, 3, 64, {2}));
  GraphNode record;
  record.kind = 4;
  record.deps = {3};
  record.event = 4;
  nodes.push_back(record);
  nodes.push_back(Kernel(kernel, {}, 2));
  ASSERT_TRUE(conn->GraphExecCreate({9, nodes}).ok());
  const uint64_t before = Launches(*conn);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(conn->GraphLaunch({9, 3}).ok());
  ASSERT_TRUE(conn->StreamSynchronize({3}).ok());
  EXPECT_EQ(PostedError(*conn), CudaError::kSuccess);
  EXPECT_EQ(Launches(*conn) - before, 6u) << "each launch counts as its two kernels";

  std::vector<uint32_t> words(1024);
  ASSERT_TRUE(conn->MemcpyDtoH({b->ptr, 4096, 0}, std::as_writable_bytes(std::span(words))).ok());
  for (uint32_t w : words) ASSERT_EQ(w, 0xA1B2C3D4u);
  std::vector<uint16_t> halves(2048);
  ASSERT_TRUE(conn->MemcpyDtoH({a->ptr, 4096, 0}, std::as_writable_bytes(std::span(halves))).ok());
  for (size_t i = 0; i < halves.size(); ++i) {
    const size_t row = i / 32, col = i % 32;
    const bool in_block = row < 3 && col < 8;
    ASSERT_EQ(halves[i], in_block ? 0xBEEF : (i % 2 ? 0xA1B2 : 0xC3D4)) << i;
  }
  EXPECT_TRUE(conn->EventQuery({4}).ok());

  // Every kernel node is in the launch log, with its parameters.
  std::ifstream log(dir_ / "launches.jsonl");
  int lines = 0, twos = 0;
  for (std::string line; std::getline(log, line);) {
    ++lines;
    EXPECT_NE(line.find("\"kernel\":\"" + kernel.name + "\""), std::string::npos) << line;
    twos += line.find("\"params\":\"0202") != std::string::npos;
  }
  EXPECT_EQ(lines, 6);
  EXPECT_EQ(twos, 3);

  // Update: same topology, other values. A changed topology is refused.
  nodes[0].value = 0x01010101;
  ASSERT_TRUE(conn->GraphExecUpdate({9, nodes}).ok());
  ASSERT_TRUE(conn->GraphLaunch({9, 3}).ok());
  ASSERT_TRUE(conn->MemcpyDtoH({b->ptr, 4096, 3}, std::as_writable_bytes(std::span(words))).ok());
  for (uint32_t w : words) ASSERT_EQ(w, 0x01010101u);
  EXPECT_EQ(PostedError(*conn), CudaError::kSuccess);
  auto changed = nodes;
  changed[2].deps = {0};
  ASSERT_TRUE(conn->GraphExecUpdate({9, changed}).ok());
  EXPECT_EQ(PostedError(*conn), CudaError::kGraphExecUpdateFailure);
  changed = nodes;
  changed.pop_back();
  ASSERT_TRUE(conn->GraphExecUpdate({9, changed}).ok());
  EXPECT_EQ(PostedError(*conn), CudaError::kGraphExecUpdateFailure);

  ASSERT_TRUE(conn->GraphExecDestroy({9}).ok());
  EXPECT_EQ(PostedError(*conn), CudaError::kSuccess);
  ASSERT_TRUE(conn->GraphLaunch({9, 3}).ok());
  EXPECT_EQ(PostedError(*conn), CudaError::kInvalidValue);
}

TEST_P(GraphsTest, HostileGraphsAreRefusedAndNeverRun) {
  auto conn = Open();
  auto other = Open();
  ASSERT_TRUE(conn && other);
  cuda::KernelInfo kernel = LoadKernel(*conn);
  auto mine = conn->Malloc({256});
  auto theirs = other->Malloc({256});
  ASSERT_TRUE(mine.ok() && theirs.ok());
  ASSERT_TRUE(other->Memset({theirs->ptr, 0x77, 256, 0}).ok());

  struct Case {
    const char* what;
    uint64_t exec;
    std::vector<GraphNode> nodes;
    CudaError expected;
  };
  GraphNode self = Kernel(kernel, {0}, 1);
  GraphNode unknown_kind;
  unknown_kind.kind = 99;
  GraphNode no_function = Kernel(kernel, {}, 1);
  no_function.function = 77;
  GraphNode zero_grid = Kernel(kernel, {}, 1);
  zero_grid.grid.y = 0;
  GraphNode no_event;
  no_event.kind = 5;
  no_event.event = 1234;
  const std::vector<Case> cases = {
      {"exec 0", 0, {}, CudaError::kInvalidValue},
      {"depends on itself", 10, {self}, CudaError::kInvalidValue},
      {"unknown kind", 11, {unknown_kind}, CudaError::kInvalidValue},
      {"function not held", 12, {no_function}, CudaError::kInvalidDeviceFunction},
      {"zero grid", 13, {zero_grid}, CudaError::kInvalidConfiguration},
      {"copy from another client",
       14,
       {Copy(mine->ptr, theirs->ptr, 256, {})},
       CudaError::kInvalidValue},
      {"copy past the end",
       15,
       {Copy(mine->ptr, mine->ptr + 1, 256, {})},
       CudaError::kInvalidValue},
      {"memset into another client",
       16,
       {Memset(theirs->ptr, 0, 1, 16, 1, 0, {})},
       CudaError::kInvalidValue},
      {"memset element size 3",
       17,
       {Memset(mine->ptr, 0, 3, 16, 1, 0, {})},
       CudaError::kInvalidValue},
      {"memset pitch past the end",
       18,
       {Memset(mine->ptr, 0, 1, 16, 2, 1ull << 40, {})},
       CudaError::kInvalidValue},
      {"memset pitch below the row",
       19,
       {Memset(mine->ptr, 0, 4, 16, 2, 8, {})},
       CudaError::kInvalidValue},
      {"unknown event", 20, {no_event}, CudaError::kInvalidResourceHandle},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(conn->GraphExecCreate({c.exec, c.nodes}).ok()) << c.what;
    EXPECT_EQ(PostedError(*conn), c.expected) << c.what;
    ASSERT_TRUE(conn->GraphLaunch({c.exec, 0}).ok());
    EXPECT_EQ(PostedError(*conn), CudaError::kInvalidValue) << c.what << ": no such exec";
  }
  // A taken number; a launch on a stream the client does not hold.
  ASSERT_TRUE(conn->GraphExecCreate({30, {}}).ok());
  ASSERT_TRUE(conn->GraphExecCreate({30, {}}).ok());
  EXPECT_NE(PostedError(*conn), CudaError::kSuccess);
  ASSERT_TRUE(conn->GraphLaunch({30, 555}).ok());
  EXPECT_EQ(PostedError(*conn), CudaError::kInvalidResourceHandle);
  // A graph whose memory was freed after instantiation is refused at launch, not run.
  ASSERT_TRUE(conn->GraphExecCreate({31, {Memset(mine->ptr, 0, 1, 256, 1, 0, {})}}).ok());
  ASSERT_TRUE(conn->Free({mine->ptr}).ok());
  ASSERT_TRUE(conn->GraphLaunch({31, 0}).ok());
  EXPECT_EQ(PostedError(*conn), CudaError::kInvalidValue);
  // An event destroyed and made again under the same number is another object: a graph that
  // recorded the old one is refused at launch, not run on a destroyed handle.
  ASSERT_TRUE(conn->EventCreate({40, 0}).ok());
  GraphNode record;
  record.kind = 4;
  record.event = 40;
  ASSERT_TRUE(conn->GraphExecCreate({32, {record}}).ok());
  ASSERT_EQ(PostedError(*conn), CudaError::kSuccess);
  ASSERT_TRUE(conn->EventDestroy({40}).ok());
  ASSERT_TRUE(conn->EventCreate({40, 0}).ok());
  ASSERT_TRUE(conn->GraphLaunch({32, 0}).ok());
  EXPECT_EQ(PostedError(*conn), CudaError::kInvalidResourceHandle);
  // A memset node whose pitch × height overflows 64 bits is refused at instantiation.
  ASSERT_TRUE(conn->EventCreate({41, 0}).ok());
  auto small = conn->Malloc({4096});
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE(
      conn->GraphExecCreate({33, {Memset(small->ptr, 0, 1, 16, 65537, 1ull << 48, {})}}).ok());
  EXPECT_EQ(PostedError(*conn), CudaError::kInvalidValue);
  // A client's graphs are bounded in server memory: a graph past the budget is refused.
  std::vector<GraphNode> big(30000);  // empty nodes: about 3.3 MB on the wire, one frame
  bool refused = false;
  for (uint64_t exec = 100; exec < 200 && !refused; ++exec) {
    ASSERT_TRUE(conn->GraphExecCreate({exec, big}).ok());
    refused = PostedError(*conn) == CudaError::kMemoryAllocation;
  }
  EXPECT_TRUE(refused) << "256 MiB of graphs accepted";
  // Another client's exec numbers are not this one's.
  ASSERT_TRUE(other->GraphLaunch({30, 0}).ok());
  EXPECT_EQ(PostedError(*other), CudaError::kInvalidValue);
  std::vector<std::byte> out(256);
  ASSERT_TRUE(other->MemcpyDtoH({theirs->ptr, 256, 0}, out).ok());
  EXPECT_EQ(out, std::vector<std::byte>(256, std::byte{0x77}));
}

TEST_P(GraphsTest, ExecsAreReleasedWhenTheClientGoes) {
  {
    auto conn = Open();
    ASSERT_TRUE(conn);
    LoadKernel(*conn);
    ASSERT_TRUE(conn->GraphExecCreate({5, {}}).ok());
    ASSERT_TRUE(conn->Sync({}).ok());
  }
  auto probe = Open();
  ASSERT_TRUE(probe);
  EXPECT_TRUE(probe->GraphExecCreate({5, {}}).ok());
  EXPECT_EQ(PostedError(*probe), CudaError::kSuccess);
}

INSTANTIATE_TEST_SUITE_P(Isolation, GraphsTest,
                         ::testing::Values(Isolation::kThread, Isolation::kProcess),
                         [](const auto& param_info) {
                           return param_info.param == Isolation::kThread ? "Thread" : "Process";
                         });

}  // namespace
}  // namespace flyt::remote
