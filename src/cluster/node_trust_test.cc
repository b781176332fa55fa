// Trusting nodes no further than needed (issue 13, point 4): the manager calls a node's API only
// at the heartbeat's source address (or an advertised host inside [nodes] api_networks), one GPU
// UUID belongs to one node name, and an admin can remove a node.
#include <gtest/gtest.h>

#include "cluster/cluster_internal.h"
#include "cluster/cluster_testing.h"
#include "cluster/node_address.h"

namespace flyt::cluster {
namespace {

using nlohmann::json;
using test::Heartbeat;
using test::Task;

class NodeTrustTest : public test::ClusterFixture {
 protected:
  void SetUp() override {
    ClusterFixture::SetUp();
    Open();
  }
  // A node token's heartbeat as the server passes it on: with the connection's source address.
  Result<json> Beat(const std::string& name, const std::string& api_url,
                    const std::string& from = "127.0.0.2", const std::string& token = "node") {
    return cluster_->Heartbeat(Caller{token, Role::kNode, from}, Heartbeat(name, 1, api_url));
  }
  json NodeView(const std::string& name) {
    auto n = cluster_->Node(name);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : json();
  }
};

TEST(NodeAddressTest, NetworksAndUrls) {
  auto net = ParseIpNetwork("10.20.0.0/16");
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  EXPECT_TRUE(NetworkContains(*net, *ParseIp("10.20.3.4")));
  EXPECT_TRUE(NetworkContains(*net, *ParseIp("::ffff:10.20.3.4")));  // a dual-stack peer
  EXPECT_FALSE(NetworkContains(*net, *ParseIp("10.21.0.1")));
  auto v6 = ParseIpNetwork("fd00::/8");
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE(NetworkContains(*v6, *ParseIp("fd12::1")));
  EXPECT_FALSE(NetworkContains(*v6, *ParseIp("fe80::1")));
  EXPECT_FALSE(ParseIpNetwork("10.0.0.1/8").ok());  // host bits past the prefix
  EXPECT_FALSE(ParseIpNetwork("10.0.0.0/33").ok());
  EXPECT_FALSE(ParseIpNetwork("gpu-nodes").ok());
  EXPECT_TRUE(ParseIpNetwork("192.168.1.7").ok());

  auto url = ParseAdvertisedUrl("http://[::1]:12401/");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 12401);
  for (const char* bad : {"https://a:1", "http://a:1/api", "http://u@10.0.0.1:1", "http://a:0",
                          "http://a:99999", "http://", "http://a b:1", "http://a:1?x", "http://[zz]:1"}) {
    EXPECT_FALSE(ParseAdvertisedUrl(bad).ok()) << bad;
  }
  EXPECT_EQ(UrlHost(*ParseIp("::ffff:127.0.0.2")), "127.0.0.2");
  EXPECT_EQ(UrlHost(*ParseIp("fd00::1")), "[fd00::1]");
}

TEST_F(NodeTrustTest, AnApiUrlOfAnotherHostIsReplacedByTheSourceAddress) {
  // The advertised host is the source address: taken as it is.
  ASSERT_TRUE(Beat("a", "http://127.0.0.2:12401").ok());
  EXPECT_EQ(*cluster_->NodeApiUrl("a"), "http://127.0.0.2:12401");
  EXPECT_EQ(NodeView("a")["api_url_source"], "advertised");
  // Another host (here "evil", 127.0.0.3): the manager calls the source address on that port.
  auto r = Beat("a", "http://127.0.0.3:8080");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*cluster_->NodeApiUrl("a"), "http://127.0.0.2:8080");
  json view = NodeView("a");
  EXPECT_EQ(view["api_url"], "http://127.0.0.2:8080");
  EXPECT_EQ(view["advertised_api_url"], "http://127.0.0.3:8080");
  EXPECT_EQ(view["api_url_source"], "source_address");
  EXPECT_NE(view["api_url_note"].get<std::string>().find("127.0.0.3"), std::string::npos);
  // A host name is never resolved: the source address again.
  ASSERT_TRUE(Beat("a", "http://metadata.internal:80").ok());
  EXPECT_EQ(*cluster_->NodeApiUrl("a"), "http://127.0.0.2:80");
  // IPv6, and an IPv4 peer seen on a dual-stack socket.
  ASSERT_TRUE(Beat("b", "http://[::1]:9000", "::1").ok());
  EXPECT_EQ(*cluster_->NodeApiUrl("b"), "http://[::1]:9000");
  ASSERT_TRUE(Beat("c", "http://127.0.0.4:9000", "::ffff:127.0.0.4").ok());
  EXPECT_EQ(*cluster_->NodeApiUrl("c"), "http://127.0.0.4:9000");
  // No source address known (not through the server): no call at all.
  ASSERT_TRUE(Beat("d", "http://127.0.0.3:9000", "").ok());
  EXPECT_EQ(cluster_->NodeApiUrl("d").status().code(), StatusCode::kNotFound);
  // Paths and user info are refused outright.
  EXPECT_EQ(Beat("a", "http://127.0.0.2:1/redirect").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Beat("a", "http://x@127.0.0.2:1").status().code(), StatusCode::kInvalidArgument);
  // The trusted address survives a restart; so does the reason.
  Open();
  EXPECT_EQ(*cluster_->NodeApiUrl("b"), "http://[::1]:9000");
}

TEST_F(NodeTrustTest, AnAdvertisedHostInsideApiNetworksIsTaken) {
  config_.node_api_networks = {*ParseIpNetwork("10.20.0.0/16"), *ParseIpNetwork("fd00::/8")};
  Open();
  ASSERT_TRUE(Beat("a", "http://10.20.3.4:12401").ok());
  EXPECT_EQ(*cluster_->NodeApiUrl("a"), "http://10.20.3.4:12401");
  EXPECT_EQ(NodeView("a")["api_url_source"], "api_networks");
  ASSERT_TRUE(Beat("b", "http://[fd00::5]:12401").ok());
  EXPECT_EQ(*cluster_->NodeApiUrl("b"), "http://[fd00::5]:12401");
  ASSERT_TRUE(Beat("a", "http://10.21.0.1:12401").ok());  // outside: the source address
  EXPECT_EQ(*cluster_->NodeApiUrl("a"), "http://127.0.0.2:12401");
}

TEST(NodeTrustConfigTest, ApiNetworksAreCidrs) {
  auto c = ParseClusterConfig("[nodes]\napi_networks = [\"10.0.0.0/8\", \"fd00::/8\"]\n", "t.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->node_api_networks.size(), 2u);
  EXPECT_TRUE(ParseClusterConfig("", "t.toml")->node_api_networks.empty());
  auto bad = ParseClusterConfig("[nodes]\napi_networks = [\"10.0.0.1/8\"]\n", "t.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.toml:2: nodes.api_networks"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(ParseClusterConfig("[nodes]\napi_networks = \"10.0.0.0/8\"\n", "t.toml").ok());
}

TEST_F(NodeTrustTest, AGpuOfOneNodeCannotBeRegisteredUnderAnotherName) {
  const Caller token_a{"node-a-token", Role::kNode, "127.0.0.2"};
  const Caller token_b{"node-b-token", Role::kNode, "127.0.0.3"};
  ASSERT_TRUE(cluster_->Heartbeat(token_a, Heartbeat("a", 2)).ok());
  // Token b registers "b" with a's GPUs (one of them suffices).
  json stolen = Heartbeat("a", 2);
  stolen["name"] = "b";
  stolen["snapshot"]["gpus"][0]["uuid"] = "GPU-b-0";
  auto r = cluster_->Heartbeat(token_b, stolen);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().reason(), "gpu_claimed_by_other_node");
  EXPECT_NE(r.status().message().find("GPU-a-1"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("node a"), std::string::npos);
  EXPECT_NE(r.status().message().find("node b"), std::string::npos);
  EXPECT_EQ(cluster_->Nodes()["nodes"].size(), 1u);
  EXPECT_EQ(cluster_->Gpus()["gpus"].size(), 2u);
  // Counted every time; an event (and a log line) once per node per 10 minutes.
  ASSERT_FALSE(cluster_->Heartbeat(token_b, stolen).ok());
  EXPECT_EQ(Metric("flyt_cluster_gpu_conflicts_total"), "2");
  auto kinds = EventKinds();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "node.gpu_conflict"), 1);
  // The first reporter keeps it, and so does an existing node that reports one more GPU.
  ASSERT_TRUE(cluster_->Heartbeat(token_a, Heartbeat("a", 2)).ok());
  // A second manager on the same store refuses it too.
  auto other_store = store::Store::Open(config_.store);
  ASSERT_TRUE(other_store.ok());
  Cluster other(std::move(other_store).value(), config_, clock_);
  ASSERT_TRUE(other.Load().ok());
  EXPECT_EQ(other.Heartbeat(token_b, stolen).status().reason(), "gpu_claimed_by_other_node");
  // Placeholders of GPUs lost before their UUID was read are no identity: no conflict.
  json lost_a = Heartbeat("c", 1), lost_b = Heartbeat("d", 1);
  for (json* j : {&lost_a, &lost_b}) {
    (*j)["snapshot"]["gpus"][0]["uuid"] = "";
    (*j)["snapshot"]["gpus"][0]["lost"] = true;
  }
  ASSERT_TRUE(cluster_->Heartbeat(admin_, lost_a).ok());
  ASSERT_TRUE(cluster_->Heartbeat(admin_, lost_b).ok());
  // Once a is removed, its GPUs may be reported under another name.
  ASSERT_TRUE(cluster_->RemoveNode(admin_, "a", false).ok());
  auto moved = cluster_->Heartbeat(token_b, stolen);
  EXPECT_TRUE(moved.ok()) << moved.status().ToString();
}

TEST_F(NodeTrustTest, RemovingANodeWithLeasesNeedsForceAndFailsTheirJobs) {
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("a", 1)).ok());
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat("b", 1)).ok());
  auto sub = cluster_->Submit(alice_, Task({1}));
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  ASSERT_TRUE(cluster_->Tick().ok());
  const std::string job_id = (*sub)["jobs"][0]["id"];
  auto job = cluster_->GetJob(job_id);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ((*job)["status"], "running");
  const std::string busy = (*job)["gpu_info"]["node"];
  const std::string idle = busy == "a" ? "b" : "a";
  // A second replica on the same store, to see the removal through the change feed.
  auto other_store = store::Store::Open(config_.store);
  ASSERT_TRUE(other_store.ok());
  Cluster other(std::move(other_store).value(), config_, clock_);
  ASSERT_TRUE(other.Load().ok());
  ASSERT_EQ(other.Nodes()["nodes"].size(), 2u);

  EXPECT_EQ(cluster_->RemoveNode(alice_, idle, false).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(cluster_->RemoveNode(admin_, "nope", false).status().code(), StatusCode::kNotFound);
  auto refused = cluster_->RemoveNode(admin_, busy, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().reason(), "conflict");
  EXPECT_EQ(cluster_->Nodes()["nodes"].size(), 2u);
  EXPECT_EQ(cluster_->Allocations()["allocations"].size(), 1u);

  // Without leases: removed at once.
  auto removed = cluster_->RemoveNode(admin_, idle, false);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_TRUE((*removed)["leases_released"].empty());
  // With force: its lease is released (node_removed) and its job fails.
  removed = cluster_->RemoveNode(admin_, busy, true);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  ASSERT_EQ((*removed)["leases_released"].size(), 1u);
  EXPECT_TRUE(cluster_->Nodes()["nodes"].empty());
  EXPECT_TRUE(cluster_->Gpus()["gpus"].empty());
  EXPECT_TRUE(cluster_->Allocations()["allocations"].empty());
  job = cluster_->GetJob(job_id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["status"], "failed");
  EXPECT_NE((*job)["message"].get<std::string>().find("removed"), std::string::npos);
  auto events = cluster_->Events(0, 1000);
  ASSERT_TRUE(events.ok());
  int removals = 0, node_removed_releases = 0;
  for (const json& e : (*events)["events"]) {
    if (e["kind"] == "node.removed") ++removals;
    if (e["kind"] == "lease.released" && e.value("reason", "") == "node_removed") {
      ++node_removed_releases;
    }
  }
  EXPECT_EQ(removals, 2);
  EXPECT_EQ(node_removed_releases, 1);
  EXPECT_EQ(Metric("flyt_cluster_nodes_removed_total"), "2");

  // The other replica catches up; a restart does not bring the nodes back.
  ASSERT_TRUE(other.Tick().ok());
  EXPECT_TRUE(other.Nodes()["nodes"].empty());
  EXPECT_TRUE(other.Allocations()["allocations"].empty());
  Open();
  EXPECT_TRUE(cluster_->Nodes()["nodes"].empty());
  // The node's next heartbeat registers it again.
  ASSERT_TRUE(cluster_->Heartbeat(node_, Heartbeat(busy, 1)).ok());
  EXPECT_EQ(cluster_->Nodes()["nodes"].size(), 1u);
}

}  // namespace
}  // namespace flyt::cluster
