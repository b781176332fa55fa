// flytctl's remote-GPU commands (`remote alloc|renew|release|show|list`, `clients`, `servers`)
// as a user runs them: the flytctl program against a fake cluster manager on loopback that answers
// in the shapes of docs/api.md ("Remote leases"). Asserts the requests it sends (path, query,
// body, token, Idempotency-Key), what it prints and its exit status for each kind of answer.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/http.h"
#include "common/mutex.h"
#include "ctl/ctl_testing.h"

extern char** environ;

namespace flyt::ctl {
namespace {

using nlohmann::json;
using test::FakeManager;
using test::Flytctl;
using test::Outcome;

json Lease(const std::string& state = "ready") {
  return json::parse(R"({
    "id": "rlease-3f9a1c2b7d10", "kind": "remote", "owner": "alice", "client": "client-1",
    "node": "node-b", "gpu": {"uuid": "GPU-7ed34953", "index": 3, "name": "NVIDIA H100 80GB HBM3"},
    "sm_count": 64, "sm_count_asked": 60, "memory_mb": 40000, "state": ")" +
                     state + R"(",
    "server": {"address": "127.0.0.2:12503", "state": "running", "pid": 4242},
    "secret": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0", "granted_at": "2026-11-22T06:00:00.000Z",
    "expires_at": "2026-11-22T06:01:00.000Z", "ttl_seconds": 60, "expires_in_seconds": 60,
    "labels": {}})");
}

TEST(RemoteCommandTest, AllocSendsTheShareWithAKeyAndPrintsTheServerAndSecret) {
  FakeManager m([](const httplib::Request&) { return FakeManager::Answer{201, Lease()}; });
  Outcome o = Flytctl({"remote", "alloc", "--sm-count", "60", "--memory-mb", "40000", "--node",
                       "node-b", "--ttl", "120", "--server", m.url(), "--token", "tok-alice"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("remote lease rlease-3f9a1c2b7d10: 64 SMs (asked 60) and 40000 MiB of "
                       "GPU 3 (H100) on node-b"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("FLYT_SERVER=127.0.0.2:12503 FLYT_SERVER_SECRET="
                       "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"),
            std::string::npos)
      << o.out;
  auto seen = m.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].path, "/api/v1/remote-leases");
  EXPECT_EQ(json::parse(seen[0].body),
            json::parse(R"({"sm_count":60,"memory_mb":40000,"node":"node-b","ttl_seconds":120})"));
  EXPECT_EQ(seen[0].token, "Bearer tok-alice");
  // A key of this invocation's own: a retry after a lost answer cannot lease twice.
  EXPECT_EQ(seen[0].idempotency_key.rfind("flytctl-", 0), 0u) << seen[0].idempotency_key;
  EXPECT_GT(seen[0].idempotency_key.size(), 16u);

  Outcome again = Flytctl(
      {"remote", "alloc", "--sm-percent", "25", "--memory-mb", "1024", "--server", m.url()});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  seen = m.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(json::parse(seen[1].body), json::parse(R"({"sm_percent":25,"memory_mb":1024})"));
  EXPECT_NE(seen[1].idempotency_key, seen[0].idempotency_key);
}

TEST(RemoteCommandTest, AllocAsJsonPrintsTheAnswerAsItCame) {
  FakeManager m([](const httplib::Request&) { return FakeManager::Answer{201, Lease()}; });
  for (const char* flag : {"--json", "-o"}) {
    std::vector<std::string> args = {"remote",   "alloc", "--memory-mb", "1",
                                     "--server", m.url(), flag};
    if (std::string(flag) == "-o") args.push_back("json");
    Outcome o = Flytctl(args);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    EXPECT_EQ(json::parse(o.out), Lease()) << o.out;
  }
}

TEST(RemoteCommandTest, EachRefusalHasItsExitStatusAndTheManagersReasons) {
  struct Case {
    int http;
    json body;
    int exit_code;
    const char* says;
  };
  const std::vector<Case> cases = {
      {409,
       test::ErrorBody("insufficient_gpus",
             "no GPU has room for 64 SMs and 40000 MiB; node-b: 2 without room for 64 SMs, 1 "
             "not shared and in use"),
       6, "node-b: 2 without room for 64 SMs, 1 not shared and in use"},
      {409, test::ErrorBody("never_fits", "no GPU of this cluster has 200 SMs"), 8,
       "no GPU of this cluster has 200 SMs"},
      {401, test::ErrorBody("unauthenticated", "missing or unknown bearer token"), 5, "--token"},
      {403, test::ErrorBody("permission_denied", "a viewer token may not POST /api/v1/remote-leases"), 5,
       "not allowed"},
      {400, test::ErrorBody("invalid_argument", "memory_mb: must be at least 1"), 2, "memory_mb"},
  };
  for (const Case& c : cases) {
    FakeManager m([&](const httplib::Request&) { return FakeManager::Answer{c.http, c.body}; });
    Outcome o = Flytctl(
        {"remote", "alloc", "--sm-count", "64", "--memory-mb", "40000", "--server", m.url()});
    EXPECT_EQ(o.exit_code, c.exit_code) << c.http << ": " << o.err;
    EXPECT_EQ(o.err.rfind("flytctl: cannot get a remote GPU (64 SMs, 40000 MiB): ", 0), 0u)
        << o.err;
    EXPECT_NE(o.err.find(c.says), std::string::npos) << o.err;
    EXPECT_EQ(o.out, "");
  }
}

TEST(RemoteCommandTest, AServerThatDidNotStartIsTheNodesReasonExitNine) {
  FakeManager m([](const httplib::Request&) {
    return FakeManager::Answer{
        503, test::ErrorBody("unavailable",
                   "node-b did not start the GPU server for rlease-3f9a1c2b7d10: exited with "
                   "status 1: cannot open /dev/nvidia0")};
  });
  Outcome o = Flytctl({"remote", "alloc", "--memory-mb", "100", "--server", m.url()});
  EXPECT_EQ(o.exit_code, 9) << o.err;
  EXPECT_EQ(o.err,
            "flytctl: cannot get a remote GPU (100 MiB): node-b did not start the GPU server for "
            "rlease-3f9a1c2b7d10: exited with status 1: cannot open /dev/nvidia0\n");
}

TEST(RemoteCommandTest, RenewReleaseAndShowUseTheLeasesPath) {
  FakeManager m([](const httplib::Request& req) {
    if (req.method == "DELETE") {
      return FakeManager::Answer{200, {{"released", "rlease-3f9a1c2b7d10"}}};
    }
    return FakeManager::Answer{200, Lease()};
  });
  Outcome renew =
      Flytctl({"remote", "renew", "rlease-3f9a1c2b7d10", "--ttl", "300", "--server", m.url()});
  EXPECT_EQ(renew.exit_code, 0) << renew.err;
  EXPECT_NE(renew.out.find("renew with: flytctl remote renew rlease-3f9a1c2b7d10"),
            std::string::npos);
  EXPECT_EQ(renew.out.find("c2VjcmV0"), std::string::npos) << "renew never prints the secret";
  Outcome release = Flytctl({"remote", "release", "rlease-3f9a1c2b7d10", "--server", m.url()});
  EXPECT_EQ(release.exit_code, 0) << release.err;
  EXPECT_EQ(release.out, "released rlease-3f9a1c2b7d10; its GPU server drains\n");
  Outcome show = Flytctl({"remote", "show", "rlease-3f9a1c2b7d10", "--server", m.url()});
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(show.out.find("c2VjcmV0"), std::string::npos) << "only with --secret";
  Outcome secret =
      Flytctl({"remote", "show", "rlease-3f9a1c2b7d10", "--secret", "--server", m.url()});
  EXPECT_NE(secret.out.find("c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"), std::string::npos);
  Outcome as_json =
      Flytctl({"remote", "show", "rlease-3f9a1c2b7d10", "--json", "--server", m.url()});
  EXPECT_EQ(as_json.exit_code, 0) << as_json.err;
  EXPECT_EQ(as_json.out.find("c2VjcmV0"), std::string::npos) << "JSON too: only with --secret";
  EXPECT_NE(as_json.out.find("rlease-3f9a1c2b7d10"), std::string::npos);
  auto seen = m.seen();
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0].method + " " + seen[0].path,
            "POST /api/v1/remote-leases/rlease-3f9a1c2b7d10/renew");
  EXPECT_EQ(json::parse(seen[0].body), json::parse(R"({"ttl_seconds":300})"));
  EXPECT_EQ(seen[1].method + " " + seen[1].path,
            "DELETE /api/v1/remote-leases/rlease-3f9a1c2b7d10");
  EXPECT_EQ(seen[2].method + " " + seen[2].path, "GET /api/v1/remote-leases/rlease-3f9a1c2b7d10");
}

TEST(RemoteCommandTest, AFailedOrEndedLeaseExitsSevenAndAnUnknownOneFour) {
  const std::vector<std::tuple<int, json, int>> cases = {
      {409, test::ErrorBody("lease_failed", "rlease-1's GPU server failed: exited with signal 9"), 7},
      {409, test::ErrorBody("already_ended", "rlease-1 was released"), 7},
      {404, test::ErrorBody("not_found", "no remote lease rlease-1"), 4},
  };
  for (const auto& c : cases) {
    const auto& [http, body, exit_code] = c;
    FakeManager m([&c](const httplib::Request&) {
      return FakeManager::Answer{std::get<0>(c), std::get<1>(c)};
    });
    Outcome o = Flytctl({"remote", "renew", "rlease-1", "--server", m.url()});
    EXPECT_EQ(o.exit_code, exit_code) << o.err;
    EXPECT_EQ(o.err, "flytctl: cannot renew rlease-1: " + body["error"].get<std::string>() + "\n");
  }
  Outcome bad = Flytctl({"remote", "release", "../nodes", "--server", "http://127.0.0.1:9"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

TEST(RemoteCommandTest, ListFiltersByNodeAndClientAndNeverShowsASecret) {
  FakeManager m([](const httplib::Request&) {
    json lease = Lease();  // a manager that (wrongly) sent a secret in a list
    return FakeManager::Answer{200, {{"remote_leases", {lease}}}};
  });
  Outcome o =
      Flytctl({"remote", "list", "--node", "node-b", "--client", "client 1", "--server", m.url()});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("rlease-3f9a1c2b7d10"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("127.0.0.2:12503"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("c2VjcmV0"), std::string::npos) << o.out;
  auto seen = m.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/api/v1/remote-leases");
  EXPECT_EQ(seen[0].query, "client=client 1&node=node-b");  // decoded by the server
  Outcome all = Flytctl({"remote", "list", "--server", m.url()});
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(m.seen().back().query, "");
}

TEST(RemoteCommandTest, ClientsAndServersPrintTheirTables) {
  FakeManager m([](const httplib::Request& req) {
    if (req.path == "/api/v1/clients") {
      return FakeManager::Answer{
          200, json::parse(R"({"clients": [{"name": "client-1", "address": "10.0.0.7",
              "leases": 0, "remote_leases": ["rlease-3f9a1c2b7d10"],
              "last_seen": "2026-11-22T06:00:00.000Z"}]})")};
    }
    return FakeManager::Answer{
        200, json::parse(R"({"servers": [{"node": "node-b", "lease_id": "rlease-3f9a1c2b7d10",
            "gpu_index": 3, "state": "running", "address": "127.0.0.2:12503", "pid": 4242,
            "sm_count": 60, "sm_count_granted": 64, "memory_mb": 40000,
            "started_at": "2026-11-22T06:00:00.100Z"}]})")};
  });
  Outcome clients = Flytctl({"clients", "--server", m.url()});
  EXPECT_EQ(clients.exit_code, 0) << clients.err;
  EXPECT_NE(clients.out.find("client-1"), std::string::npos) << clients.out;
  EXPECT_NE(clients.out.find("rlease-3f9a1c2b7d10"), std::string::npos) << clients.out;
  Outcome servers = Flytctl({"servers", "--node", "node-b", "--server", m.url()});
  EXPECT_EQ(servers.exit_code, 0) << servers.err;
  EXPECT_NE(servers.out.find("127.0.0.2:12503"), std::string::npos) << servers.out;
  EXPECT_NE(servers.out.find("1 GPU server(s): 1 running"), std::string::npos) << servers.out;
  auto seen = m.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].path, "/api/v1/gpu-servers");
  EXPECT_EQ(seen[1].query, "node=node-b");
  // --node before the command is a node manager's URL: a usage error that says where it goes.
  Outcome misplaced = Flytctl({"--node", "node-b", "servers", "--server", m.url()});
  EXPECT_EQ(misplaced.exit_code, 2);
  EXPECT_NE(misplaced.err.find("flytctl servers --node NAME"), std::string::npos) << misplaced.err;
}

TEST(RemoteCommandTest, AnOlderManagerOrAStrangersAnswerIsSaidPlainly) {
  FakeManager old([](const httplib::Request& req) {
    return FakeManager::Answer{
        404, test::ErrorBody("not_found", "no such endpoint: " + req.path + " (see docs/api.md)")};
  });
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"remote", "list"}, {"servers"}, {"remote", "alloc", "--memory-mb", "1"}}) {
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--server", old.url()});
    Outcome o = Flytctl(full);
    EXPECT_EQ(o.exit_code, 4) << o.err;
    EXPECT_NE(o.err.find("has no remote-GPU API"), std::string::npos) << o.err;
  }
  FakeManager stranger([](const httplib::Request&) {
    return FakeManager::Answer{200, {{"hello", "world"}}};
  });
  Outcome o = Flytctl({"remote", "list", "--server", stranger.url()});
  EXPECT_EQ(o.exit_code, 1) << o.err;
  EXPECT_NE(o.err.find("no \"remote_leases\" list"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace flyt::ctl
