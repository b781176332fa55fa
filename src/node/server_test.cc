// NodeServer's request bodies: POST /api/v1/monitoring/sessions refuses every field of the wrong
// type or out of range with a 400 that names the field, over a fake two-GPU backend on loopback.
#include "node/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/clock.h"
#include "gpu/monitor.h"

namespace flyt::node {
namespace {

using nlohmann::json;

// Two GPUs, indexes 0 and 1, always readable.
class TwoGpus final : public gpu::Backend {
 public:
  gpu::Source source() const override { return gpu::Source::kNvml; }
  Result<gpu::GpuSnapshot> Snapshot() override {
    gpu::GpuSnapshot snap;
    snap.source = gpu::Source::kNvml;
    for (uint32_t i = 0; i < 2; ++i) {
      gpu::GpuInfo g;
      g.index = i;
      g.uuid = "GPU-" + std::to_string(i);
      snap.gpus.push_back(g);
    }
    return snap;
  }
};

class NodeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(monitor_.SampleOnce().ok());
    NodeConfig config;
    config.listen_port = 0;
    server_ = std::make_unique<NodeServer>(monitor_, config, clock_, "test");
    ASSERT_TRUE(server_->Start().ok());
  }

  // The status and parsed body of POST /api/v1/monitoring/sessions with `body`.
  std::pair<int, json> Post(const std::string& body) {
    httplib::Client client("127.0.0.1", server_->port());
    auto res = client.Post("/api/v1/monitoring/sessions", body, "application/json");
    if (!res) return {0, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }

  FakeClock clock_;
  gpu::Monitor monitor_{std::make_unique<TwoGpus>(), clock_};
  std::unique_ptr<NodeServer> server_;
};

TEST_F(NodeServerTest, SessionFieldsOfTheWrongTypeOrRangeNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"([1])", "the body must be an object"},
      {R"({"gpu": [0]})", "unknown field 'gpu'"},
      {R"({"gpus": "all"})", "gpus must be a non-empty array"},
      {R"({"gpus": []})", "gpus must be a non-empty array"},
      {R"({"gpus": [0, 1, 0]})", "gpus must be a non-empty array"},
      {R"({"gpus": [-1]})", "gpus[0] must be an integer from 0 to 4294967295"},
      {R"({"gpus": [0, 1.5]})", "gpus[1] must be an integer"},
      {R"({"gpus": [0, null]})", "gpus[1] is missing"},
      {R"({"gpus": [18446744073709551615]})", "gpus[0] must be an integer"},
      {R"({"gpus": [4294967296]})", "gpus[0] must be an integer"},
      {R"({"gpus": [7]})", "no GPU 7 on this node"},
      {R"({"gpus": [1, 1]})", "GPU 1 is listed twice"},
      {R"({"interval_seconds": "1"})", "interval_seconds must be a number in (0, 86400]"},
      {R"({"interval_seconds": 0})", "interval_seconds must be a number in (0, 86400]"},
      {R"({"interval_seconds": 86401})", "interval_seconds must be a number in (0, 86400]"},
  };
  for (const auto& [body, expected] : cases) {
    auto [status, reply] = Post(body);
    EXPECT_EQ(status, 400) << body;
    const std::string error = reply.value("error", "");
    EXPECT_NE(error.find(expected), std::string::npos) << body << ": " << error;
    EXPECT_EQ(reply.value("code", ""), "invalid_argument") << body;
  }
  EXPECT_TRUE(monitor_.SessionIds().empty());
}

TEST_F(NodeServerTest, ValidSessionBodiesStartSessions) {
  for (const char* body : {"", "{}", R"({"gpus": [1, 0], "interval_seconds": 2.5})",
                           R"({"gpus": null, "interval_seconds": null})"}) {
    auto [status, reply] = Post(body);
    EXPECT_EQ(status, 201) << body << ": " << reply.dump();
  }
  EXPECT_EQ(monitor_.SessionIds().size(), 4u);
}

}  // namespace
}  // namespace flyt::node
