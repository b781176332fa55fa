// The driver backend's CUDA graphs.
//  - Everywhere (DriverGraphsLoaderTest, label unit): the graph entry points bind by name from a
//    fake driver, and a driver that fails while a graph is captured gives an error, never a
//    crash or a leak of half-built objects.
//  - On a real GPU (DriverGraphsGpuTest, label gpu; skipped where no driver opens): a graph of
//    memset, kernel, device copy and event nodes is captured into a real CUgraph and replayed;
//    its results are the kernels' own; update re-instantiates with new parameters.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "remote_driver/driver_backend.h"
#include "remote_driver/driver_internal.h"

namespace flyt::remote {
namespace {

namespace fs = std::filesystem;
using driver_impl::DriverGraphNode;
using Kind = Session::GraphNodeKind;

#ifdef FLYT_FAKE_DRIVER
TEST(DriverGraphsLoaderTest, EntryPointsBindAndAFailingDriverIsAnErrorNotACrash) {
  auto library = cuda_driver::Library::Load(FLYT_FAKE_DRIVER);
  ASSERT_TRUE(library.ok()) << library.status().ToString();
  std::shared_ptr<const cuda_driver::Library> driver = std::move(library).value();
  const cuda_driver::FunctionTable& fn = driver->api();
  EXPECT_NE(fn.StreamBeginCapture, nullptr);
  EXPECT_NE(fn.StreamEndCapture, nullptr);
  EXPECT_NE(fn.GraphInstantiateWithFlags, nullptr);
  EXPECT_NE(fn.GraphLaunch, nullptr);
  EXPECT_NE(fn.GraphExecDestroy, nullptr);
  EXPECT_NE(fn.GraphDestroy, nullptr);
  EXPECT_NE(fn.EventRecordWithFlags, nullptr);
  EXPECT_NE(fn.MemsetD2D32Async, nullptr);
  std::vector<DriverGraphNode> nodes(2);
  nodes[1].kind = Kind::kMemset;
  nodes[1].width = 16;
  auto graph = driver_impl::InstantiateDriverGraph(*driver, nodes);
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().code(), CudaError::kSuccess);
  driver_impl::DriverGraph empty;
  driver_impl::DestroyDriverGraph(*driver, empty);  // nothing to destroy: no call, no crash
}
#endif

std::vector<std::byte> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  if (!chars.empty()) std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}
template <typename T>
void Put(std::vector<std::byte>& buffer, size_t offset, const T& value) {
  if (buffer.size() < offset + sizeof(T)) buffer.resize(offset + sizeof(T));
  std::memcpy(buffer.data() + offset, &value, sizeof(T));
}

TEST(DriverGraphsGpuTest, ACapturedGraphReplaysWithTheKernelsResults) {
  auto backend = MakeDriverBackend({});
  if (!backend.ok()) GTEST_SKIP() << "no usable CUDA driver here: " << backend.status().message();
  auto opened = (*backend)->OpenSession("driver_graphs_test");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Session& session = **opened;
  auto module = session.ModuleLoad(
      ReadFile(fs::path(FLYT_SOURCE_DIR) / "tests/data/remote/driver_kernels.fatbin"));
  ASSERT_TRUE(module.ok()) << module.status().ToString();
  auto axpy = session.ModuleGetFunction(*module, "flyt_axpy");
  auto scale = session.ModuleGetGlobal(*module, "flyt_scale", 4);
  ASSERT_TRUE(axpy.ok() && scale.ok());
  const std::vector<float> one = {1.0f};
  ASSERT_TRUE(session.MemcpyHtoD(scale->ptr, std::as_bytes(std::span(one)), kDefaultStream).ok());

  constexpr int kN = 1024;
  auto dx = session.Malloc(kN * sizeof(float));
  auto dy = session.Malloc(kN * sizeof(float));
  auto dz = session.Malloc(kN * sizeof(float));
  ASSERT_TRUE(dx.ok() && dy.ok() && dz.ok());
  auto stream = session.StreamCreate(1, 0);
  auto done = session.EventCreate(0);
  ASSERT_TRUE(stream.ok() && done.ok());

  // x = 1.0f, y = 2.0f (32-bit memsets), then y = a*x + y (flyt_axpy, scaled by 1), z = y.
  auto node_params = [&](float a) {
    std::vector<std::byte> params;
    Put(params, 0, a);
    Put(params, 8, uint64_t{*dx});
    Put(params, 16, uint64_t{*dy});
    Put(params, 24, int32_t{kN});
    return params;
  };
  float one_f = 1.0f, two_f = 2.0f;
  uint32_t one_bits = 0, two_bits = 0;
  std::memcpy(&one_bits, &one_f, 4);
  std::memcpy(&two_bits, &two_f, 4);
  std::vector<Session::GraphNodeSpec> nodes(5);
  nodes[0].kind = Kind::kMemset;
  nodes[0].dst = *dx;
  nodes[0].value = one_bits;
  nodes[0].element_size = 4;
  nodes[0].width = kN;
  nodes[1] = nodes[0];
  nodes[1].dst = *dy;
  nodes[1].value = two_bits;
  nodes[2].kind = Kind::kKernel;
  nodes[2].deps = {0, 1};
  nodes[2].function = *axpy;
  nodes[2].grid = {kN / 256, 1, 1};
  nodes[2].block = {256, 1, 1};
  nodes[2].params = node_params(3.0f);
  nodes[3].kind = Kind::kCopy;
  nodes[3].deps = {2};
  nodes[3].dst = *dz;
  nodes[3].src = *dy;
  nodes[3].bytes = kN * sizeof(float);
  nodes[4].kind = Kind::kEventRecord;
  nodes[4].deps = {3};
  nodes[4].event = *done;
  auto exec = session.GraphInstantiate(nodes);
  ASSERT_TRUE(exec.ok()) << exec.status().ToString();
  std::vector<float> z(kN);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(session.GraphLaunch(*exec, *stream).ok());
  }
  ASSERT_TRUE(session.EventSynchronize(*done).ok());
  ASSERT_TRUE(session.MemcpyDtoH(std::as_writable_bytes(std::span(z)), *dz, *stream).ok());
  for (int i = 0; i < kN; ++i) ASSERT_FLOAT_EQ(z[i], 5.0f) << i;  // 3 * 1 + 2, each round

  nodes[2].params = node_params(10.0f);
  ASSERT_TRUE(session.GraphUpdate(*exec, nodes).ok());
  ASSERT_TRUE(session.GraphLaunch(*exec, *stream).ok());
  ASSERT_TRUE(session.MemcpyDtoH(std::as_writable_bytes(std::span(z)), *dz, *stream).ok());
  for (int i = 0; i < kN; ++i) ASSERT_FLOAT_EQ(z[i], 12.0f) << i;

  EXPECT_TRUE(session.GraphDestroy(*exec).ok());
  EXPECT_EQ(session.GraphLaunch(*exec, *stream).code(), CudaError::kInvalidResourceHandle);
}

}  // namespace
}  // namespace flyt::remote
