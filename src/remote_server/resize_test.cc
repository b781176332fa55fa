// Resizing a running server (ResizeServer, RequestResize) on the simulated device, with a thread
// and a process per client: a connected client with memory and a module sees its new SM share at
// its next call (multiProcessorCount, device properties, the launch log) with its memory
// untouched; memory limits are refused below what is held and hold for the next allocation
// otherwise; TCP, bad values and an idle client.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cuda/fatbin.h"
#include "remote_client/debug_stats.h"
#include "remote_server/test_sim_server.h"

namespace flyt::remote {
namespace {

constexpr uint32_t kMultiProcessorCount = 16;

class ResizeTest : public testing::SimServerTest {
 protected:
  ResizeTest() : SimServerTest("resize") {}

  void SetUp() override {
    StartServer(/*memory_limit_bytes=*/0, /*launch_log=*/true);
  }

  Endpoint Unix() const { return server_->endpoints()[0]; }

  static Bytes Image() {
    std::ifstream in(std::string(FLYT_SOURCE_DIR) + "/tests/data/cuda/many_params.fatbin",
                     std::ios::binary);
    Bytes image;
    for (char c; in.get(c);) image.push_back(static_cast<std::byte>(c));
    return image;
  }

  static int32_t Sms(Connection& conn) {
    auto v = conn.DeviceGetAttribute({0, kMultiProcessorCount});
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? v->value : -1;
  }
  static int64_t PropSms(Connection& conn) {
    auto props = conn.GetDeviceProperties({0});
    EXPECT_TRUE(props.ok());
    if (!props.ok()) return -1;
    for (const NamedValue& v : props->values) {
      if (v.name == "multiProcessorCount") return v.value;
    }
    return -1;
  }

  // The sm_count of each logged launch, in order.
  std::vector<int64_t> LoggedSmCounts() {
    std::vector<int64_t> out;
    std::ifstream in(dir_ / "launches.jsonl");
    for (std::string line; std::getline(in, line);) {
      out.push_back(nlohmann::json::parse(line).value("sm_count", int64_t{-1}));
    }
    return out;
  }
};

TEST_P(ResizeTest, AConnectedClientRunsOnItsNewShareWithItsMemoryUntouched) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  EXPECT_EQ(Sms(*conn), 132);
  auto p = conn->Malloc({1 << 20});
  ASSERT_TRUE(p.ok());
  Bytes pattern(1 << 20);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::byte>(i * 13 + 1);
  ASSERT_TRUE(conn->MemcpyHtoD({p->ptr, pattern.size(), 0}, pattern).ok());
  Bytes image = Image();
  auto kernels = cuda::KernelsOf(*cuda::ParseFatbin(image));
  ASSERT_TRUE(kernels.ok() && !kernels->empty());
  ASSERT_TRUE(conn->ModuleLoad({1, image.size(), "many_params"}, image).ok());
  ASSERT_TRUE(conn->ModuleGetFunction({1, 2, kernels->front().name}).ok());
  Bytes params(kernels->front().param_bytes);
  ASSERT_TRUE(conn->LaunchKernel({2, {1, 1, 1}, {32, 1, 1}, 0, 0, params}).ok());
  ASSERT_TRUE(conn->Sync({}).ok());

  // The client keeps making calls while the operator asks: it applies the share at one of them.
  auto answer = std::async(std::launch::async, [this] {
    return RequestResize(Unix(), "", 60, std::nullopt, 20'000);
  });
  while (answer.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready) {
    ASSERT_TRUE(conn->MemGetInfo({}).ok());
  }
  Result<ResizeOutcome> outcome = answer.get();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_EQ(outcome->sm_count_total, 132u);
  EXPECT_EQ(outcome->sm_count_asked, 60u);
  EXPECT_EQ(outcome->sm_count_granted, 64u);  // in steps of 8
  EXPECT_EQ(outcome->clients, 1u);
  EXPECT_EQ(outcome->clients_applied, 1u) << outcome->message;
  EXPECT_EQ(outcome->clients_pending, 0u);
  EXPECT_GE(outcome->allocated_bytes, uint64_t{1} << 20);

  EXPECT_EQ(Sms(*conn), 64);
  EXPECT_EQ(PropSms(*conn), 64);
  ASSERT_TRUE(conn->LaunchKernel({2, {1, 1, 1}, {32, 1, 1}, 0, 0, params}).ok());
  ASSERT_TRUE(conn->Sync({}).ok());
  EXPECT_FALSE(conn->TakeAsyncError());
  Bytes back(pattern.size());
  ASSERT_TRUE(conn->MemcpyDtoH({p->ptr, back.size(), 0}, back).ok());
  EXPECT_EQ(back, pattern);
  EXPECT_EQ(LoggedSmCounts(), (std::vector<int64_t>{132, 64}));

  // stats shows the client's share; a client that connects now starts with it.
  Result<ServerStats> stats = FetchStats(Unix());
  ASSERT_TRUE(stats.ok());
  std::string json = StatsToJson(*stats);
  EXPECT_NE(json.find("\"sm_count_granted\":64"), std::string::npos) << json;
  auto late = Open();
  ASSERT_TRUE(late);
  EXPECT_EQ(Sms(*late), 64);

  // Back to every SM.
  answer = std::async(std::launch::async, [this] {
    return RequestResize(Unix(), "", 132, std::nullopt, 20'000);
  });
  while (answer.wait_for(std::chrono::milliseconds(2)) != std::future_status::ready) {
    ASSERT_TRUE(conn->MemGetInfo({}).ok());
    ASSERT_TRUE(late->MemGetInfo({}).ok());
  }
  outcome = answer.get();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_EQ(outcome->clients_applied, 2u) << outcome->message;
  EXPECT_EQ(Sms(*conn), 132);
  EXPECT_EQ(Sms(*late), 132);
}

TEST_P(ResizeTest, ALimitBelowWhatIsHeldIsRefusedAndNothingChanges) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->Malloc({64ull << 20}).ok());
  Result<ResizeOutcome> outcome = RequestResize(Unix(), "", 40, 32, 1000);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outcome.status().message().find("32 MiB"), std::string::npos)
      << outcome.status().message();
  EXPECT_NE(outcome.status().message().find("64 MiB"), std::string::npos)
      << outcome.status().message();
  Result<ServerStats> stats = FetchStats(Unix());
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->clients.memory_limit_bytes, 0u);
  EXPECT_EQ(Sms(*conn), 132);  // the SM share was not changed either
  EXPECT_TRUE(conn->Malloc({256ull << 20}).ok());
}

TEST_P(ResizeTest, ANewLimitHoldsForTheNextAllocation) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->Malloc({16ull << 20}).ok());
  Result<ResizeOutcome> outcome = RequestResize(Unix(), "", std::nullopt, 48, 1000);
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_EQ(outcome->memory_limit_bytes, 48ull << 20);
  EXPECT_EQ(outcome->sm_count_asked, 0u);
  EXPECT_NE(ResizeToJson(*outcome).find("\"memory_limit_mb\":48"), std::string::npos);

  auto past = conn->Malloc({40ull << 20});
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), CudaError::kMemoryAllocation);
  EXPECT_TRUE(conn->Malloc({24ull << 20}).ok());  // 40 of 48 MiB
  Result<ServerStats> stats = FetchStats(Unix());
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->clients.memory_limit_bytes, 48ull << 20);

  // Raised: the allocation refused before fits now. Then no limit at all.
  ASSERT_TRUE(RequestResize(Unix(), "", std::nullopt, 128, 1000).ok());
  EXPECT_TRUE(conn->Malloc({40ull << 20}).ok());
  outcome = RequestResize(Unix(), "", std::nullopt, 0, 1000);
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(outcome->memory_limit_bytes, 0u);
  EXPECT_TRUE(conn->Malloc({1ull << 30}).ok());
}

TEST_P(ResizeTest, AnIdleClientIsPendingAndAppliesItAtItsNextCall) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  ASSERT_TRUE(conn->Malloc({4096}).ok());
  Result<ResizeOutcome> outcome = RequestResize(Unix(), "", 20, std::nullopt, 50);
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_EQ(outcome->clients, 1u);
  EXPECT_EQ(outcome->clients_applied, 0u);
  EXPECT_EQ(outcome->clients_pending, 1u);
  EXPECT_EQ(outcome->sm_count_granted, 24u);
  EXPECT_NE(outcome->message.find("next call"), std::string::npos) << outcome->message;
  EXPECT_NE(ResizeToJson(*outcome).find("\"clients_pending\":1"), std::string::npos);
  EXPECT_EQ(Sms(*conn), 24);  // its next call
  Result<ServerStats> stats = FetchStats(Unix());
  ASSERT_TRUE(stats.ok());
  EXPECT_NE(StatsToJson(*stats).find("\"sm_count_granted\":24"), std::string::npos);
}

TEST_P(ResizeTest, BadValuesAreRefused) {
  auto conn = Open();
  ASSERT_TRUE(conn);
  Result<ResizeOutcome> zero = RequestResize(Unix(), "", 0, std::nullopt, 1000);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  Result<ResizeOutcome> nothing = RequestResize(Unix(), "", std::nullopt, std::nullopt, 1000);
  EXPECT_FALSE(nothing.ok());
  Result<ResizeOutcome> too_many = RequestResize(Unix(), "", 133, std::nullopt, 1000);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("outside 1..132"), std::string::npos)
      << too_many.status().message();
  EXPECT_EQ(Sms(*conn), 132);
}

TEST_P(ResizeTest, OverTcpItIsRefused) {
  // The same server with a TCP listener besides its socket.
  server_->Stop();
  ServerOptions options;
  options.listen.push_back(*ParseEndpoint("unix:" + (dir_ / "t.sock").string()));
  options.listen.push_back(*ParseEndpoint("127.0.0.1:0"));
  if (GetParam() == Isolation::kThread) {
    backend_ = MakeSimBackend();
    server_ = std::make_unique<Server>(*backend_, options);
  } else {
    server_ = std::make_unique<Server>(
        []() -> Result<std::unique_ptr<Backend>> { return MakeSimBackend(); }, options);
  }
  ASSERT_TRUE(server_->Start().ok());
  auto conn = Open();
  ASSERT_TRUE(conn);
  Result<ResizeOutcome> outcome =
      RequestResize(server_->endpoints()[1], "", 40, uint64_t{1024}, 1000);
  ASSERT_FALSE(outcome.ok());
  EXPECT_NE(outcome.status().message().find("only the server's own user or root may resize"),
            std::string::npos)
      << outcome.status().ToString();
  EXPECT_EQ(Sms(*conn), 132);
  Result<ServerStats> stats = FetchStats(server_->endpoints()[0]);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->clients.memory_limit_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Isolation, ResizeTest,
                         ::testing::Values(Isolation::kThread, Isolation::kProcess),
                         [](const auto& param_info) {
                           return param_info.param == Isolation::kThread ? "Thread" : "Process";
                         });

}  // namespace
}  // namespace flyt::remote
