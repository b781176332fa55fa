// The pure parts: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER as CUDA reads them, the environment
// from /proc and setenv records, container ids from cgroup paths (and the resolver on a fake
// cgroup tree), error names, demangling.
#include <gtest/gtest.h>

#include "trace/aggregator_testing.h"
#include "trace/containers.h"
#include "trace/devices.h"
#include "trace/error_names.h"
#include "trace/kernel_names.h"

namespace flyt::trace {
namespace {

std::vector<GpuIdentity> ThreeGpus() {
  std::vector<GpuIdentity> gpus(3);
  gpus[0].index = 0;
  gpus[0].uuid = "GPU-1111aaaa";
  gpus[0].cores = 4096;
  gpus[1].index = 1;
  gpus[1].uuid = "GPU-1111bbbb";
  gpus[1].cores = 16384;
  gpus[1].mig_uuids = {"MIG-77770000", "MIG-77771111"};
  gpus[2].index = 2;
  gpus[2].uuid = "GPU-2222cccc";
  gpus[2].cores = 4096;
  return gpus;
}

std::vector<std::string> Uuids(std::optional<std::string> visible,
                               std::optional<std::string> order = std::nullopt,
                               std::vector<GpuIdentity> gpus = ThreeGpus()) {
  CudaEnv env;
  env.visible_devices = std::move(visible);
  env.device_order = std::move(order);
  std::vector<std::string> out;
  for (const VisibleGpu& g : VisibleGpus(env, gpus)) {
    out.push_back(g.mig_uuid.empty() ? g.uuid : g.uuid + "/" + g.mig_uuid);
  }
  return out;
}

using V = std::vector<std::string>;

TEST(DeviceOrderTest, FastestFirstByCoresThenPciOrder) {
  EXPECT_EQ(Uuids(std::nullopt), (V{"GPU-1111bbbb", "GPU-1111aaaa", "GPU-2222cccc"}));
  EXPECT_EQ(Uuids(std::nullopt, "FASTEST_FIRST"),
            (V{"GPU-1111bbbb", "GPU-1111aaaa", "GPU-2222cccc"}));
  EXPECT_EQ(Uuids(std::nullopt, "PCI_BUS_ID"), (V{"GPU-1111aaaa", "GPU-1111bbbb", "GPU-2222cccc"}));
  // Multiprocessors when cores are not known for every GPU; PCI order when neither is.
  std::vector<GpuIdentity> gpus = ThreeGpus();
  gpus[0].cores.reset();
  gpus[0].multiprocessors = 10;
  gpus[1].multiprocessors = 10;
  gpus[2].multiprocessors = 80;
  EXPECT_EQ(Uuids(std::nullopt, std::nullopt, gpus),
            (V{"GPU-2222cccc", "GPU-1111aaaa", "GPU-1111bbbb"}));
  gpus[2].multiprocessors.reset();
  EXPECT_EQ(Uuids(std::nullopt, std::nullopt, gpus),
            (V{"GPU-1111aaaa", "GPU-1111bbbb", "GPU-2222cccc"}));
}

TEST(VisibleDevicesTest, IndicesFollowTheDeviceOrder) {
  EXPECT_EQ(Uuids("0"), (V{"GPU-1111bbbb"}));
  EXPECT_EQ(Uuids("0", "PCI_BUS_ID"), (V{"GPU-1111aaaa"}));
  EXPECT_EQ(Uuids("2,0", "PCI_BUS_ID"), (V{"GPU-2222cccc", "GPU-1111aaaa"}));
  EXPECT_EQ(Uuids(" 1 , 2 ", "PCI_BUS_ID"), (V{"GPU-1111bbbb", "GPU-2222cccc"}));
}

TEST(VisibleDevicesTest, InvalidEntryEndsTheList) {
  EXPECT_EQ(Uuids("0,7,1", "PCI_BUS_ID"), (V{"GPU-1111aaaa"}));
  EXPECT_EQ(Uuids("1,x,0", "PCI_BUS_ID"), (V{"GPU-1111bbbb"}));
  EXPECT_EQ(Uuids("1,1,0", "PCI_BUS_ID"), (V{"GPU-1111bbbb"}));  // a repeat is invalid
  EXPECT_EQ(Uuids("-1,0"), V{});
  EXPECT_EQ(Uuids(""), V{});  // empty: no device at all
}

TEST(VisibleDevicesTest, UuidsFullOrUniquePrefix) {
  EXPECT_EQ(Uuids("GPU-2222cccc,GPU-1111a"), (V{"GPU-2222cccc", "GPU-1111aaaa"}));
  EXPECT_EQ(Uuids("GPU-1111,0"), V{});  // ambiguous prefix
  EXPECT_EQ(Uuids("GPU-9"), V{});
  EXPECT_EQ(Uuids("MIG-77771111"), (V{"GPU-1111bbbb/MIG-77771111"}));
  EXPECT_EQ(Uuids("MIG-7777"), V{});  // ambiguous
}

TEST(EnvironTest, ProcEnvironAndSetenv) {
  static const char kEnviron[] =
      "PATH=/bin\0CUDA_VISIBLE_DEVICES=1,0\0CUDA_DEVICE_ORDER=PCI_BUS_ID\0FLYT_SERVER=h:1\0junk";
  std::string environ(kEnviron, sizeof(kEnviron));
  CudaEnv env = ParseEnviron(environ);
  EXPECT_EQ(env.visible_devices, std::optional<std::string>("1,0"));
  EXPECT_EQ(env.device_order, std::optional<std::string>("PCI_BUS_ID"));
  EXPECT_EQ(env.flyt_server, std::optional<std::string>("h:1"));
  EXPECT_TRUE(ApplySetenv(&env, "CUDA_VISIBLE_DEVICES=2", false));
  EXPECT_EQ(env.visible_devices, std::optional<std::string>("2"));
  EXPECT_FALSE(ApplySetenv(&env, "HOME=/root", false));
  EXPECT_TRUE(ApplySetenv(&env, "CUDA_VISIBLE_DEVICES=0,1,GPU-12", true));  // cut: last one out
  EXPECT_EQ(env.visible_devices, std::optional<std::string>("0,1"));
  EXPECT_FALSE(ApplySetenv(&env, "CUDA_DEVICE_ORDER=PCI_B", true));
  EXPECT_TRUE(ApplySetenv(&env, "CUDA_DEVICE_ORDER", false));  // putenv("NAME") unsets
  EXPECT_FALSE(env.device_order.has_value());
}

TEST(ContainersTest, IdFromCgroupPath) {
  const std::string id(64, 'f');
  const std::string id2 = std::string(32, '0') + std::string(32, '9');
  EXPECT_EQ(ContainerIdFromCgroupPath("/system.slice/docker-" + id + ".scope"), id);
  EXPECT_EQ(ContainerIdFromCgroupPath("/kubepods.slice/kubepods-burstable.slice/"
                                      "kubepods-burstable-pod1234_5678.slice/cri-containerd-" +
                                      id + ".scope"),
            id);
  EXPECT_EQ(ContainerIdFromCgroupPath("/kubepods.slice/kubepods-pod1.slice/crio-" + id2 + ".scope"),
            id2);
  EXPECT_EQ(ContainerIdFromCgroupPath("/machine.slice/libpod-" + id + ".scope/container"), id);
  EXPECT_EQ(ContainerIdFromCgroupPath("/docker/" + id), id);
  EXPECT_EQ(ContainerIdFromCgroupPath("/kubepods/besteffort/pod0a1b-2c/" + id2), id2);
  EXPECT_EQ(ContainerIdFromCgroupPath("/user.slice/user-1000.slice/session-3.scope"), "");
  EXPECT_EQ(ContainerIdFromCgroupPath("/system.slice/docker-abc.scope"), "");  // not an id
  EXPECT_EQ(ContainerIdFromCgroupPath("/" + id), "");  // a bare id has no known parent
  EXPECT_EQ(ContainerIdFromCgroupPath(""), "");
}

TEST(ContainersTest, ResolverWalksOncePerId) {
  testing::TempTree tree;
  const std::string id(64, 'c');
  uint64_t in = tree.AddCgroup("kubepods/burstable/podabc/" + id);
  uint64_t out = tree.AddCgroup("system.slice/cron.service");
  CgroupResolver resolver(tree.cgroup());
  EXPECT_EQ(resolver.ContainerId(in), id);
  EXPECT_EQ(resolver.ContainerId(in), id);
  EXPECT_EQ(resolver.ContainerId(out), "");
  EXPECT_EQ(resolver.ContainerId(123456789), "");
  EXPECT_EQ(resolver.walks(), 3u);
  CgroupResolver small(tree.cgroup(), /*max_cached=*/1);
  EXPECT_EQ(small.ContainerId(in), id);
  EXPECT_EQ(small.ContainerId(out), "");
  EXPECT_EQ(small.ContainerId(in), id);
  EXPECT_EQ(small.walks(), 3u);
  CgroupResolver missing("/nonexistent/cgroup");
  EXPECT_EQ(missing.ContainerId(in), "");
}

TEST(ErrorNamesTest, RuntimeAndDriverNames) {
  EXPECT_EQ(CudaErrorName(2, false), "cudaErrorMemoryAllocation");
  EXPECT_EQ(CudaErrorName(35, false), "cudaErrorInsufficientDriver");
  EXPECT_EQ(CudaErrorName(2, true), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(CudaErrorName(100, true), "CUDA_ERROR_NO_DEVICE");
  EXPECT_EQ(CudaErrorName(-5, false), "error -5");
  EXPECT_EQ(CudaErrorName(4242, true), "error 4242");
}

TEST(DemangleTest, DemanglesOrKeepsTheText) {
  EXPECT_EQ(Demangle("_Z5scalePfi"), "scale(float*, int)");
  EXPECT_EQ(Demangle("_ZN5flash7forwardILi128EEEvPKf"), "void flash::forward<128>(float const*)");
  EXPECT_EQ(Demangle("_Z6sca"), "_Z6sca");  // cut short
  EXPECT_EQ(Demangle("vector_add"), "vector_add");
  EXPECT_EQ(Demangle("bad\xff"), "bad\xef\xbf\xbd");
}

}  // namespace
}  // namespace flyt::trace
