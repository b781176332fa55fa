// Remote leases on a shared GPU whose node reports its MPS control daemon down (the node's MPS
// watch, src/node/mps_watch.h): the GPU is not shared then, so no new lease lands beside the
// running one until the node reports MPS running again; the lease already there is kept.
#include <gtest/gtest.h>

#include "cluster/cluster_testing.h"
#include "cluster/fake_node_testing.h"
#include "cluster/server.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;
using test::FakeNode;
using test::kNodeToken;

class RemoteMpsTest : public test::ClusterFixture {
 protected:
  void SetUp() override {
    ClusterFixture::SetUp();
    config_.node_api_token = kNodeToken;
    config_.remote_server_start_timeout = std::chrono::seconds(5);
    Open();
    cluster_->Start();
  }
  // A heartbeat of node "a" (1 GPU, in [gpu-servers] shared) with MPS `mps` as its node reports
  // it, and the servers it runs.
  Result<json> Beat(const std::string& mps, json servers = json::array()) {
    json hb = test::Heartbeat("a", 1, node_api_.url());
    hb["gpu_servers"] = test::GpuServers("a", 1, mps == "running", std::move(servers));
    json& gpu = hb["gpu_servers"]["gpus"][0];
    gpu["mps"] = mps;
    if (mps == "down") {
      gpu["mps_reason"] =
          "the MPS control daemon stopped answering at 2026-01-01T00:00:00Z: /tmp/nvidia-mps/"
          "control refuses connections; GPU 0 takes one server at a time";
      gpu["mps_servers"] = servers.empty() ? json::array() : json::array({servers[0]["lease_id"]});
    }
    return cluster_->Heartbeat(node_, hb);
  }

  FakeNode node_api_;
};

TEST_F(RemoteMpsTest, NoNewLeaseLandsBesideARunningOneWhileMpsIsDown) {
  ASSERT_TRUE(Beat("running").ok());
  auto first = cluster_->CreateRemoteLease(alice_, {{"sm_count", 64}, {"memory_mb", 1000}});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string id = (*first)["id"];
  const json server = {{"lease_id", id},
                       {"gpu_uuid", (*first)["gpu"]["uuid"]},
                       {"gpu_index", 0},
                       {"state", "running"},
                       {"address", "127.0.0.1:12500"},
                       {"pid", 4242},
                       {"sm_count", 64},
                       {"sm_count_granted", 64},
                       {"memory_mb", 1000},
                       {"started_at", "2026-01-01T00:00:00Z"}};

  auto down = Beat("down", json::array({server}));
  ASSERT_TRUE(down.ok()) << down.status().ToString();
  auto refused = cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 100}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "insufficient_gpus");
  EXPECT_NE(refused.status().message().find("a: 1 not shared and in use"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(node_api_.puts().size(), 1u);  // nothing was asked of the node
  // The lease already there is kept, and the GPU's MPS state is shown with its reason.
  EXPECT_EQ((*cluster_->RemoteLease(alice_, id))["state"], "ready");
  auto node = cluster_->Node("a");
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)["gpu_servers"]["gpus"][0]["mps"], "down");
  EXPECT_NE((*node)["gpu_servers"]["gpus"][0]["mps_reason"].get<std::string>().find(
                "refuses connections"),
            std::string::npos);

  ASSERT_TRUE(Beat("running", json::array({server})).ok());
  auto placed = cluster_->CreateRemoteLease(alice_, {{"sm_count", 8}, {"memory_mb", 100}});
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  EXPECT_EQ((*placed)["gpu"]["uuid"], (*first)["gpu"]["uuid"]);
}

}  // namespace
}  // namespace flyt::cluster
