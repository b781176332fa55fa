// The driver backend's managed family on a real GPU (label gpu; skips without a usable driver):
// managed memory is plain device memory there, at an address of the device's choosing, and
// copies through it are byte-exact. Not run on a GPU when written (none was lent to issue 17).
#include <gtest/gtest.h>

#include <vector>

#include "remote_driver/driver_backend.h"

namespace flyt::remote {
namespace {

TEST(DriverManagedGpuTest, ManagedMemoryIsDeviceMemoryThatCopiesRoundTrip) {
  auto backend = MakeDriverBackend({});
  if (!backend.ok()) GTEST_SKIP() << "no usable CUDA driver here: " << backend.status().message();
  auto session = (*backend)->OpenSession("driver_managed_test");
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  // The hint is a client's host address; the driver backend ignores it.
  auto ptr = (*session)->MallocManaged(1 << 20, 0x100000000000ull);
  ASSERT_TRUE(ptr.ok()) << ptr.status().ToString();
  EXPECT_NE(*ptr, 0u);
  std::vector<std::byte> in(1 << 20), out(1 << 20);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::byte>(i * 31);
  ASSERT_TRUE((*session)->MemcpyHtoD(*ptr, in, kDefaultStream).ok());
  ASSERT_TRUE((*session)->MemcpyDtoH(out, *ptr, kDefaultStream).ok());
  EXPECT_EQ(in, out);
  EXPECT_TRUE((*session)->Free(*ptr).ok());
}

}  // namespace
}  // namespace flyt::remote
