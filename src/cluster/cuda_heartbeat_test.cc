// The CUDA tracer's figures from a node manager's heartbeat to the cluster manager's GPU detail:
// the node's own encoder (node/heartbeat.h CudaHeartbeatJson) builds the "cuda" array, the
// manager keeps it in memory and puts it on the GPU detail's processes.
#include <gtest/gtest.h>

#include <filesystem>

#include "cluster/cluster.h"
#include "cluster/cluster_testing.h"
#include "gpu/json.h"
#include "node/heartbeat.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;

class CudaHeartbeatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flyt-cuda-hb-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    config_.var_dir = dir_.string();
    config_.store = "sqlite:" + (dir_ / "flyt.db").string();
    auto store = store::Store::Open(config_.store);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    cluster_ = std::make_unique<Cluster>(std::move(store).value(), config_, clock_);
    ASSERT_TRUE(cluster_->Load().ok());
  }
  void TearDown() override {
    cluster_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Node "a": two GPUs, NVML lists pid 100 on GPU 0.
  json Beat(const std::vector<trace::ProcessCuda>& traced) {
    json j = test::Heartbeat("a", 2);
    gpu::ProcessInfo p;
    p.pid = 100;
    p.name = "train";
    j["snapshot"]["gpus"][0]["processes"] = json::array({gpu::ToJson(p)});
    json cuda = node::CudaHeartbeatJson(traced);
    if (!cuda.empty()) j["cuda"] = cuda;
    return j;
  }

  std::filesystem::path dir_;
  FakeClock clock_;
  ClusterConfig config_;
  std::unique_ptr<Cluster> cluster_;
  const Caller node_{"node", Role::kNode, "127.0.0.1"};
};

TEST_F(CudaHeartbeatTest, TracedFiguresReachTheGpuDetail) {
  trace::ProcessCuda a;
  a.pid = 100;
  a.comm = "train";
  a.gpu_uuid = "GPU-a-0";
  a.launches = 5000;
  a.launches_per_second = 250.5;
  a.device_memory_bytes = 1 << 20;
  a.device_memory_peak_bytes = 3 << 20;
  a.busy_seconds = 1.5;
  a.core_usage = 64;
  trace::ProcessCuda leak;  // exited: NVML lists it no more
  leak.pid = 200;
  leak.comm = "leaky";
  leak.gpu_uuid = "GPU-a-0";
  leak.exited = true;
  leak.leaked_bytes = 4096;
  trace::ProcessCuda other;  // on GPU 1
  other.pid = 300;
  other.gpu_uuid = "GPU-a-1";
  auto beat = cluster_->Heartbeat(node_, Beat({a, leak, other}));
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  auto gpu = cluster_->Gpu("a", 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const json& procs = (*gpu)["processes"];
  ASSERT_EQ(procs.size(), 2u) << procs;
  EXPECT_EQ(procs[0]["pid"], 100);
  EXPECT_EQ(procs[0]["source"], "nvml");
  EXPECT_EQ(procs[0]["cuda"]["launches"], 5000);
  EXPECT_EQ(procs[0]["cuda"]["launches_per_second"], 250.5);
  EXPECT_EQ(procs[0]["cuda"]["device_memory_peak_bytes"], 3 << 20);
  EXPECT_EQ(procs[0]["cuda"]["busy_seconds"], 1.5);
  EXPECT_EQ(procs[1]["pid"], 200);
  EXPECT_EQ(procs[1]["source"], "trace");
  EXPECT_EQ(procs[1]["cuda"]["leaked_bytes"], 4096);
  EXPECT_EQ(procs[1]["cuda"]["exited"], true);
  // The node's detail lists them all (flytctl processes --cuda reads them there).
  auto node = cluster_->Node("a");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)["cuda"].size(), 3u);
  EXPECT_EQ((*node)["cuda"][2]["gpu_uuid"], "GPU-a-1");
  // The GPU list stays as it was (no processes there).
  EXPECT_FALSE(cluster_->Gpus()["gpus"][0].contains("processes"));
  // The next heartbeat without traced processes clears them.
  ASSERT_TRUE(cluster_->Heartbeat(node_, Beat({})).ok());
  gpu = cluster_->Gpu("a", 0);
  ASSERT_TRUE(gpu.ok());
  ASSERT_EQ((*gpu)["processes"].size(), 1u);
  EXPECT_TRUE((*gpu)["processes"][0]["cuda"].is_null());
}

TEST_F(CudaHeartbeatTest, ABadCudaArrayIsRefusedWithThePath) {
  json j = test::Heartbeat("a", 1);
  j["cuda"] = json::array({{{"pid", -1}}});
  auto r = cluster_->Heartbeat(node_, j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cuda[0].pid"), std::string::npos) << r.status().message();
  j["cuda"] = json::array({{{"pid", 1}, {"launches", "many"}}});
  r = cluster_->Heartbeat(node_, j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cuda[0].launches"), std::string::npos);
  j["cuda"] = json::array();
  for (size_t i = 0; i <= node::kMaxCudaPerHeartbeat; ++i) j["cuda"].push_back({{"pid", i}});
  EXPECT_FALSE(cluster_->Heartbeat(node_, j).ok());
  // Fields a newer node may add are ignored.
  j["cuda"] = json::array({{{"pid", 1}, {"gpu_uuid", "GPU-a-0"}, {"new_field", 1}}});
  EXPECT_TRUE(cluster_->Heartbeat(node_, j).ok());
}

}  // namespace
}  // namespace flyt::cluster
