// Device query: the properties and attributes a program reads first, and that they agree.
#include "program.h"

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  if (count < 1) FAIL("no device");
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (sms != prop.multiProcessorCount) FAIL("SM count %d != %d", sms, prop.multiProcessorCount);
  if (prop.major < 3 || prop.totalGlobalMem == 0) FAIL("implausible device %s", prop.name);
  int driver = 0, runtime = 0;
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  if (driver <= 0 || runtime <= 0) FAIL("versions %d %d", driver, runtime);
  std::printf("%s: cc %d.%d, %d SMs, %zu MiB\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem >> 20);
  PASS();
}
