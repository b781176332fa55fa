// `flytctl profile` and the STATE column of `flytctl gpus --node` as a user runs them: the flytctl
// program against a fake node manager (and a fake cluster manager) on loopback that answers with
// profiles in the node's JSON (profile/json.h ToJson and SummaryJson). Asserts the paths asked,
// what is printed and the exit status for each kind of answer.
#include <gtest/gtest.h>

#include <string>

#include "ctl/ctl_testing.h"
#include "ctl/profile_testing.h"

namespace flyt::ctl {
namespace {

using nlohmann::json;
using test::FakeManager;
using test::Flytctl;
using test::Outcome;

// A node manager of three GPUs (test::SampleProfiles) with profiles on, or off (503).
FakeManager::Answer Node(const httplib::Request& req, bool profiles_on = true) {
  const auto profiles = test::SampleProfiles();
  if (req.path == "/api/v1/gpus") {
    json gpus = json::array();
    for (const auto& p : profiles) {
      gpus.push_back({{"index", p.index},
                      {"uuid", p.uuid},
                      {"name", p.name},
                      {"gpu_util_percent", 50},
                      {"processes", json::array()},
                      {"profile", profiles_on ? profile::SummaryJson(p) : json(nullptr)}});
    }
    return {200, {{"source", "nvml"}, {"gpus", gpus}}};
  }
  if (!profiles_on) {
    return {503, test::ErrorBody("unavailable", "profiles are off ([profile] enabled = false)")};
  }
  if (req.path == "/api/v1/profiles") {
    json list = json::array();
    for (const auto& p : profiles) list.push_back(profile::ToJson(p));
    return {200, {{"profiles", list}, {"footprint_bytes_per_gpu", 180000}}};
  }
  for (const auto& p : profiles) {
    if (req.path == "/api/v1/gpus/" + std::to_string(p.index) + "/profile") {
      return {200, profile::ToJson(p)};
    }
  }
  return {404, test::ErrorBody("not_found", "no GPU 7")};
}

TEST(ProfileCommandTest, EveryGpuOfANode) {
  FakeManager node([](const httplib::Request& r) { return Node(r); });
  Outcome o = Flytctl({"profile", "--node", node.url()});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("Source: node manager " + node.url()), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("cyclic 12.0s"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("held by python (alice, pid 4242, 30.0 GiB)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("no samples yet"), std::string::npos) << o.out;
  ASSERT_EQ(node.seen().size(), 1u);
  EXPECT_EQ(node.seen()[0].path, "/api/v1/profiles");
  // --json: the node's answer as it is.
  o = Flytctl({"profile", "--node", node.url(), "--json"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  const json printed = json::parse(o.out);
  EXPECT_EQ(printed["footprint_bytes_per_gpu"], 180000);
  EXPECT_EQ(printed["profiles"][0]["cycle"]["period_s"], 12.0);
}

TEST(ProfileCommandTest, OneGpuInFull) {
  FakeManager node([](const httplib::Request& r) { return Node(r); });
  Outcome o = Flytctl({"--node", node.url(), "profile", "0"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("GPU 0 (NVIDIA H100 80GB HBM3, GPU-00000000): cyclic 12.0s for 5m10s"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("cycle: period 12.0 s, confidence 0.87"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("WINDOW"), std::string::npos) << o.out;
  EXPECT_EQ(node.seen().back().path, "/api/v1/gpus/0/profile");
  o = Flytctl({"profile", "1", "--node", node.url(), "-o", "json"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(json::parse(o.out)["allocated_idle"]["processes"][0]["user"], "alice");
}

TEST(ProfileCommandTest, ErrorsHaveTheirExitStatus) {
  FakeManager node([](const httplib::Request& r) { return Node(r); });
  Outcome o = Flytctl({"profile", "7", "--node", node.url()});
  EXPECT_EQ(o.exit_code, 4) << o.out << o.err;
  EXPECT_NE(o.err.find("cannot read the profile of GPU 7"), std::string::npos) << o.err;
  FakeManager off([](const httplib::Request& r) { return Node(r, /*profiles_on=*/false); });
  o = Flytctl({"profile", "--node", off.url()});
  EXPECT_EQ(o.exit_code, 9) << o.err;
  EXPECT_NE(o.err.find("profiles are off ([profile] enabled = false)"), std::string::npos)
      << o.err;
  o = Flytctl({"profile", "--node", "http://127.0.0.1:1"});
  EXPECT_EQ(o.exit_code, 3) << o.err;
  o = Flytctl({"profile", "--server", node.url()});
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("--node-name"), std::string::npos) << o.err;
  o = Flytctl({"profile", "--node", node.url(), "--server", node.url(), "--node-name", "a"});
  EXPECT_EQ(o.exit_code, 2) << o.err;
  o = Flytctl({"profile", "--node-name", "a", "--node", node.url()});
  EXPECT_EQ(o.exit_code, 2) << o.err;
}

// The cluster manager's GPUs of node-a (GPU 0 cyclic, GPU 1 allocated-idle) and node-b (none).
FakeManager::Answer Cluster(const httplib::Request& req) {
  const auto profiles = test::SampleProfiles();
  if (req.path == "/api/v1/gpus") {
    return {200,
            {{"gpus",
              {{{"node", "node-a"}, {"index", 0}, {"profile", profile::ToJson(profiles[0])}},
               {{"node", "node-a"}, {"index", 1}, {"profile", profile::ToJson(profiles[1])}},
               {{"node", "node-b"}, {"index", 0}, {"profile", nullptr}}}}}};
  }
  if (req.path == "/api/v1/nodes/node-a/gpus/1") {
    return {200, {{"node", "node-a"}, {"index", 1}, {"profile", profile::ToJson(profiles[1])}}};
  }
  if (req.path == "/api/v1/nodes/node-b/gpus/0") {
    return {200, {{"node", "node-b"}, {"index", 0}, {"profile", nullptr}}};
  }
  return {404, test::ErrorBody("not_found", "no node x")};
}

TEST(ProfileCommandTest, ANodeAsTheClusterManagerHasIt) {
  FakeManager manager(Cluster);
  Outcome o = Flytctl({"profile", "--server", manager.url(), "--node-name", "node-a"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("node node-a (as of its last heartbeat)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("cyclic 12.0s"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("allocated-idle 12m05s"), std::string::npos) << o.out;
  o = Flytctl({"profile", "1", "--server", manager.url(), "--node-name", "node-a"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("allocated but idle for 12m05s, 30.0 GiB held by:"), std::string::npos)
      << o.out;
  EXPECT_EQ(manager.seen().back().path, "/api/v1/nodes/node-a/gpus/1");
  o = Flytctl({"profile", "1", "--server", manager.url(), "--node-name", "node-a", "--json"});
  EXPECT_EQ(json::parse(o.out)["state"], "allocated-idle");
  // A node that sends none: unavailable (9); a node the manager does not know: not found (4).
  o = Flytctl({"profile", "--server", manager.url(), "--node-name", "node-b"});
  EXPECT_EQ(o.exit_code, 9) << o.err;
  EXPECT_NE(o.err.find("node node-b sends no GPU profiles"), std::string::npos) << o.err;
  o = Flytctl({"profile", "0", "--server", manager.url(), "--node-name", "node-b"});
  EXPECT_EQ(o.exit_code, 9) << o.err;
  o = Flytctl({"profile", "--server", manager.url(), "--node-name", "node-z"});
  EXPECT_EQ(o.exit_code, 4) << o.err;
  o = Flytctl({"profile", "3", "--server", manager.url(), "--node-name", "node-z"});
  EXPECT_EQ(o.exit_code, 4) << o.err;
}

TEST(ProfileCommandTest, GpusFromANodeShowTheStateColumn) {
  FakeManager node([](const httplib::Request& r) { return Node(r); });
  Outcome o = Flytctl({"gpus", "--node", node.url()});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("PROCS  STATE"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("0  cyclic 12.0s"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("0  allocated-idle 12m05s"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("0  unknown"), std::string::npos) << o.out;
  FakeManager off([](const httplib::Request& r) { return Node(r, /*profiles_on=*/false); });
  o = Flytctl({"gpus", "--node", off.url()});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("PROCS  STATE"), std::string::npos) << o.out;  // "-" for each GPU
  EXPECT_EQ(o.out.find("cyclic"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace flyt::ctl
