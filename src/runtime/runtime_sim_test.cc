// flyt's libcudart against an in-process server on the simulated device, loaded as a program
// loads it (dlopen of the built library; FLYT_SERVER names the server).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "remote/debug_stats.h"
#include "remote/server.h"
#include "remote/sim_backend.h"

namespace flyt::remote {
namespace {

constexpr int kMultiProcessorCount = 16;  // cudaDevAttrMultiProcessorCount

// The runtime caches device facts; after a resize the server tells it (a kNotice with the reply
// of the call at which the client applied the new share), and the next query asks again.
TEST(RuntimeSim, ADeviceQueryAfterAResizeShowsTheNewShare) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("flyt-runtime-sim-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ServerOptions options;
  options.listen.push_back(*ParseEndpoint("unix:" + (dir / "s.sock").string()));
  std::unique_ptr<Backend> backend = MakeSimBackend();
  Server server(*backend, options);
  ASSERT_TRUE(server.Start().ok());
  ::setenv("FLYT_SERVER", server.endpoints()[0].ToString().c_str(), 1);
  ::setenv("FLYT_SHM", "0", 1);

  void* lib = ::dlopen(FLYT_CUDART_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  using GetAttribute = int (*)(int*, int, int);
  using Synchronize = int (*)();
  auto get = reinterpret_cast<GetAttribute>(::dlsym(lib, "cudaDeviceGetAttribute"));
  auto sync = reinterpret_cast<Synchronize>(::dlsym(lib, "cudaDeviceSynchronize"));
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

  server.Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flyt::remote
