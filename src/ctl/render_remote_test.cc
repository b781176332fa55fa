// The tables of remote GPUs (render_remote.cc) from answers in the shapes of docs/api.md's
// "Remote leases": what a person reads, that a secret never shows in a list, and that answers of
// another shape or version render dashes instead of throwing.
#include <gtest/gtest.h>

#include <chrono>

#include "ctl/profile_testing.h"
#include "ctl/render.h"

namespace flyt::ctl {
namespace {

using nlohmann::json;

json RemoteLease() {
  return json::parse(R"({
    "id": "rlease-3f9a1c2b7d10", "kind": "remote", "owner": "alice", "client": "client-1",
    "node": "node-b", "gpu": {"uuid": "GPU-7ed34953", "index": 3, "name": "NVIDIA H100 80GB HBM3"},
    "sm_count": 64, "sm_count_asked": 60, "memory_mb": 40000, "state": "ready",
    "server": {"address": "127.0.0.2:12503", "state": "running", "pid": 4242},
    "secret": "Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0", "granted_at": "2026-11-22T06:00:00.000Z",
    "expires_at": "2026-11-22T06:01:00.000Z", "ttl_seconds": 60, "expires_in_seconds": 59.6,
    "labels": {"team": "infer"}})");
}

TEST(RemoteRenderTest, AGrantedLeaseShowsItsShareServerExpiryAndSecretOnce) {
  const std::string out = RenderRemoteLease(RemoteLease(), true);
  EXPECT_EQ(out.rfind("remote lease rlease-3f9a1c2b7d10: 64 SMs (asked 60) and 40000 MiB of GPU 3 "
                      "(H100) on node-b\n",
                      0),
            0u)
      << out;
  EXPECT_NE(out.find("state ready; client client-1, owner alice\n"), std::string::npos) << out;
  EXPECT_NE(out.find("gpu GPU-7ed34953\n"), std::string::npos) << out;
  EXPECT_NE(out.find("server 127.0.0.2:12503 (running, pid 4242)\n"), std::string::npos) << out;
  EXPECT_NE(out.find("expires 2026-11-22T06:01:00.000Z (in 59s); renew with: flytctl remote "
                     "renew rlease-3f9a1c2b7d10\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("labels: team=infer\n"), std::string::npos) << out;
  EXPECT_NE(out.find("secret Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0 (shown once"), std::string::npos);
  EXPECT_NE(out.find("FLYT_SERVER=127.0.0.2:12503 FLYT_SERVER_SECRET="
                     "Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0 <program>\n"),
            std::string::npos)
      << out;
}

TEST(RemoteRenderTest, ARenewedLeaseNeverShowsTheSecretEvenWhenSent) {
  const std::string out = RenderRemoteLease(RemoteLease(), false);
  EXPECT_EQ(out.find("Zm9vYmFy"), std::string::npos) << out;
  EXPECT_EQ(out.find("secret"), std::string::npos) << out;
  EXPECT_NE(out.find("server 127.0.0.2:12503"), std::string::npos) << out;
}

TEST(RemoteRenderTest, AFailedLeaseSaysWhyAndOffersNoRenewal) {
  json lease = RemoteLease();
  lease["state"] = "failed";
  lease["reason"] = "GPU server exited with signal 9";
  lease["server"] = {{"address", "127.0.0.2:12503"}, {"state", "failed"}};
  lease.erase("sm_count_asked");
  lease["sm_percent"] = 50;
  const std::string out = RenderRemoteLease(lease, false);
  EXPECT_NE(out.find("64 SMs (50%)"), std::string::npos) << out;
  EXPECT_NE(out.find("state failed — GPU server exited with signal 9;"), std::string::npos) << out;
  EXPECT_NE(out.find("server 127.0.0.2:12503 (failed)\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("renew with"), std::string::npos) << out;
}

TEST(RemoteRenderTest, TheListHasOneRowPerLeaseNoSecretAndWhyEachFailed) {
  json failed = RemoteLease();
  failed["id"] = "rlease-000000000002";
  failed["state"] = "failed";
  failed["reason"] = "exited with signal 9";
  failed["client"] = "client-2";
  json starting = RemoteLease();
  starting["id"] = "rlease-000000000003";
  starting["state"] = "starting";
  starting.erase("server");
  json answer = {{"remote_leases", {RemoteLease(), failed, starting}}};
  const std::string out = RenderRemoteLeases(answer);
  EXPECT_EQ(out.find("Zm9vYmFy"), std::string::npos) << out;
  const std::string header = out.substr(0, out.find('\n'));
  std::string::size_type at = 0;
  for (const char* col :
       {"ID", "CLIENT", "NODE", "GPU", "SMS", "MEMORY", "STATE", "SERVER", "EXPIRES"}) {
    at = header.find(col, at);
    EXPECT_NE(at, std::string::npos) << col << " in " << header;
  }
  const std::string row = test::LineWith(out, "rlease-3f9a1c2b7d10");
  for (const char* want : {"client-1", "node-b", "3 (H100)", " 64 ", "40000 MiB", "ready",
                           "127.0.0.2:12503", "in 59s"}) {
    EXPECT_NE(row.find(want), std::string::npos) << want << " in " << out;
  }
  // A failed lease has no countdown: it no longer runs, whatever its expiry.
  EXPECT_EQ(test::LineWith(out, "rlease-000000000002 ").find("in 59s"), std::string::npos) << out;
  EXPECT_NE(out.find("rlease-000000000002 failed: exited with signal 9\n"), std::string::npos)
      << out;
  EXPECT_NE(test::LineWith(out, "rlease-000000000003").find("starting"), std::string::npos) << out;
  EXPECT_NE(out.find("3 remote lease(s): 1 failed, 1 ready, 1 starting\n"), std::string::npos)
      << out;
  EXPECT_EQ(RenderRemoteLeases({{"remote_leases", json::array()}}), "No remote leases.\n");
}

TEST(RemoteRenderTest, ClientsShowTheirLeasesAndWhenLastSeen) {
  const auto now = std::chrono::system_clock::time_point(std::chrono::milliseconds(1795326900000));
  json answer = json::parse(R"({"clients": [
    {"name": "client-1", "address": "10.0.0.7", "labels": {"rack": "r2"},
     "registered_at": "2026-11-22T05:00:00.000Z", "last_seen": "2026-11-22T06:34:48.000Z",
     "last_seen_ms": 1795326888000, "leases": 0,
     "remote_leases": ["rlease-3f9a1c2b7d10", "rlease-000000000002"]},
    {"name": "client-2", "address": "10.0.0.8", "last_seen": "2026-11-22T06:00:00.000Z",
     "leases": 2}]})");
  const std::string out = RenderClients(answer, now);
  const std::string one = test::LineWith(out, "client-1");
  for (const char* want :
       {"10.0.0.7", "rlease-3f9a1c2b7d10,rlease-000000000002", "12s ago", "rack=r2"}) {
    EXPECT_NE(one.find(want), std::string::npos) << want << " in " << out;
  }
  // An older manager: no remote_leases, no last_seen_ms.
  const std::string two = test::LineWith(out, "client-2");
  EXPECT_NE(two.find(" 2 "), std::string::npos) << out;
  EXPECT_NE(two.find("2026-11-22T06:00:00.000Z"), std::string::npos) << out;
  EXPECT_NE(RenderClients({{"clients", json::array()}}, now).find("No client has registered"),
            std::string::npos);
}

TEST(RemoteRenderTest, ServersShowNodeLeaseStateAddressGrantedSmsAndWhyTheyStopped) {
  json answer = json::parse(R"({"servers": [
    {"node": "node-b", "lease_id": "rlease-3f9a1c2b7d10", "gpu_uuid": "GPU-7ed34953",
     "gpu_index": 3, "state": "running", "address": "127.0.0.2:12503", "pid": 4242,
     "sm_count": 60, "sm_count_granted": 64, "memory_mb": 40000,
     "started_at": "2026-11-22T06:00:00.100Z"},
    {"node": "node-b", "lease_id": "rlease-000000000002", "gpu_uuid": "GPU-5ec3", "gpu_index": 4,
     "state": "failed", "address": "127.0.0.2:12504", "pid": 4250, "sm_count": 32,
     "memory_mb": 8000, "started_at": 1795326000000, "ended_at": "2026-11-22T06:20:00.000Z",
     "reason": "exited with signal 9"}]})");
  const std::string out = RenderGpuServers(answer);
  const std::string header = out.substr(0, out.find('\n'));
  std::string::size_type at = 0;
  for (const char* col :
       {"NODE", "LEASE", "GPU", "STATE", "ADDRESS", "PID", "SMS", "MEMORY", "STARTED", "REASON"}) {
    at = header.find(col, at);
    EXPECT_NE(at, std::string::npos) << col << " in " << header;
  }
  const std::string running = test::LineWith(out, "rlease-3f9a1c2b7d10");
  for (const char* want : {"node-b", "  3  ", "running", "127.0.0.2:12503", "4242", " 64 ",
                           "40000 MiB", "2026-11-22T06:00:00.100Z"}) {
    EXPECT_NE(running.find(want), std::string::npos) << want << " in " << out;
  }
  EXPECT_EQ(running.find(" 60 "), std::string::npos) << "the granted count, not the asked one";
  const std::string failed = test::LineWith(out, "rlease-000000000002");
  EXPECT_NE(failed.find(" 32 "), std::string::npos) << out;  // no grant reported: the asked one
  EXPECT_NE(failed.find("2026-11-22T05:40:00.000Z"), std::string::npos) << out;  // ms → time
  EXPECT_NE(failed.find("exited with signal 9"), std::string::npos) << out;
  EXPECT_NE(out.find("2 GPU server(s): 1 failed, 1 running\n"), std::string::npos) << out;
  EXPECT_EQ(RenderGpuServers({{"servers", json::array()}}), "No GPU servers.\n");
}

TEST(RemoteRenderTest, AnswersOfTheWrongShapeRenderDashesInsteadOfThrowing) {
  for (
      const char* text :
      {"[]", "3", "null", R"({"remote_leases": [3, null, {"gpu": 7, "server": "x"}]})",
       R"({"servers": [{"gpu_index": "three", "pid": -1e300}], "clients": [{"remote_leases": 5}]})",
       R"({"id": 5, "gpu": [], "server": {"pid": "x"}, "labels": [1], "secret": 9})"}) {
    json j = json::parse(text);
    EXPECT_NO_THROW(RenderRemoteLease(j, true)) << text;
    EXPECT_NO_THROW(RenderRemoteLeases(j)) << text;
    EXPECT_NO_THROW(RenderClients(j, std::chrono::system_clock::now())) << text;
    EXPECT_NO_THROW(RenderGpuServers(j)) << text;
  }
}

TEST(RemoteRenderTest, EscapeSequencesFromTheManagerDoNotReachTheTerminal) {
  json lease = RemoteLease();
  lease["reason"] = "boom \033[2J";
  lease["client"] = "c\033]52;c;eA==\007";
  lease["secret"] = "s\033[31m";
  const std::string one = RenderRemoteLease(lease, true);
  const std::string list = RenderRemoteLeases({{"remote_leases", {lease}}});
  const std::string servers = RenderGpuServers({{"servers",
                                                 {{{"node", "n\033[1m"},
                                                   {"reason",
                                                    "\xc2\x9b"
                                                    "31m"}}}}});
  for (const std::string& out : {one, list, servers}) {
    EXPECT_EQ(out.find('\033'), std::string::npos) << out;
    EXPECT_EQ(out.find('\007'), std::string::npos) << out;
    EXPECT_EQ(out.find("\xc2\x9b"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace flyt::ctl
