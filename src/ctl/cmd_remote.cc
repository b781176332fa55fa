// `flytctl remote alloc|renew|release|show|list`, `clients` and `servers`: shares of GPUs that
// client nodes use through a GPU server the cluster manager had started for them.
#include <chrono>
#include <string>

#include "ctl/commands.h"
#include "ctl/render.h"

namespace flyt::ctl {

namespace {

// A manager of a version without remote leases answers "no such endpoint": say that, rather than
// asking whether it is a flyt cluster manager at all.
bool PredatesRemoteLeases(const Result<nlohmann::json>& answer) {
  return !answer.ok() && ApiReason(answer.status()) == "not_found" &&
         ApiMessage(answer.status()).rfind("no such endpoint", 0) == 0;
}

int PrintRemote(Manager& m, const Result<nlohmann::json>& answer, const std::string& doing,
                const char* list, const std::function<std::string(const nlohmann::json&)>& render) {
  if (PredatesRemoteLeases(answer)) {
    return Fail(doing + ": the cluster manager at " + m.url() +
                    " has no remote-GPU API (a flyt version before remote leases; upgrade it)",
                kExitNotFound);
  }
  return m.Print(answer, doing, list, render);
}

std::string ShareText(const RemoteLeaseFlags& f) {
  std::string share = std::to_string(f.memory_mb) + " MiB";
  if (f.sm_count) share = std::to_string(*f.sm_count) + " SMs, " + share;
  if (f.sm_percent) share = std::to_string(*f.sm_percent) + "% of the SMs, " + share;
  return share;
}

}  // namespace

int RunRemoteAlloc(const GlobalFlags& g, const RemoteLeaseFlags& flags) {
  auto body = RemoteLeaseBody(flags);
  if (!body.ok()) return Fail(body.status().message(), kExitUsage);
  return WithManager(g, [&](Manager& m) {
    auto lease = PostIdempotent(m, "/api/v1/remote-leases", *body);
    const std::string doing = "cannot get a remote GPU (" + ShareText(flags) + ")";
    // 503 here is the node that did not start the lease's server (the lease is already given
    // back): the node's reason is the news, not "the cluster manager is unavailable".
    if (!lease.ok() && ApiReason(lease.status()) == "unavailable") {
      return Fail(doing + ": " + ApiMessage(lease.status()), kExitUnavailable);
    }
    return PrintRemote(m, lease, doing, nullptr,
                       [](const nlohmann::json& l) { return RenderRemoteLease(l, true); });
  });
}

int RunRemoteRenew(const GlobalFlags& g, const std::string& id, std::optional<int64_t> ttl_s) {
  if (BadId(id, "remote lease")) return kExitUsage;
  nlohmann::json body = nlohmann::json::object();
  if (ttl_s) body["ttl_seconds"] = *ttl_s;
  return WithManager(g, [&](Manager& m) {
    return PrintRemote(m, m.client().Post("/api/v1/remote-leases/" + id + "/renew", body),
                       "cannot renew " + id, nullptr,
                       [](const nlohmann::json& l) { return RenderRemoteLease(l, false); });
  });
}

int RunRemoteRelease(const GlobalFlags& g, const std::string& id) {
  if (BadId(id, "remote lease")) return kExitUsage;
  return WithManager(g, [&](Manager& m) {
    return PrintRemote(
        m, m.client().Delete("/api/v1/remote-leases/" + id), "cannot release " + id, nullptr,
        [&](const nlohmann::json&) { return "released " + id + "; its GPU server drains\n"; });
  });
}

int RunRemoteShow(const GlobalFlags& g, const std::string& id, bool secret) {
  if (BadId(id, "remote lease")) return kExitUsage;
  return WithManager(g, [&](Manager& m) {
    Result<nlohmann::json> lease = m.client().Get("/api/v1/remote-leases/" + id);
    // The secret only with --secret, in JSON as in the table.
    if (lease.ok() && !secret && lease->is_object()) lease->erase("secret");
    return PrintRemote(m, lease, "cannot show " + id, nullptr,
                       [&](const nlohmann::json& l) { return RenderRemoteLease(l, secret); });
  });
}

int RunRemoteMigrate(const GlobalFlags& g, const std::string& id, const std::string& to,
                     int64_t timeout_s) {
  if (BadId(id, "remote lease")) return kExitUsage;
  // NODE or NODE:GPU.
  nlohmann::json body = {{"timeout_s", timeout_s}};
  std::string node = to;
  if (const size_t colon = to.rfind(':'); colon != std::string::npos) {
    node = to.substr(0, colon);
    const std::string gpu = to.substr(colon + 1);
    if (gpu.empty() || gpu.size() > 4 || gpu.find_first_not_of("0123456789") != std::string::npos) {
      return Fail("--to " + to + ": give NODE or NODE:GPU (GPU: its index on the node)",
                  kExitUsage);
    }
    body["gpu"] = std::stoi(gpu);
  }
  if (BadId(node, "node")) return kExitUsage;
  body["node"] = node;
  return WithManager(g, [&](Manager& m) {
    // A move waits for the target's server and for the clients' transfer.
    m.client().SetTimeouts(std::chrono::seconds(10), std::chrono::seconds(timeout_s * 2 + 90));
    return PrintRemote(m, m.client().Post("/api/v1/remote-leases/" + id + "/migrate", body),
                       "cannot move " + id + " to " + to, nullptr, RenderRemoteMigration);
  });
}

int RunRemoteResize(const GlobalFlags& g, const std::string& id, std::optional<uint32_t> sm_count,
                    std::optional<double> sm_percent, std::optional<int64_t> memory_mb,
                    int64_t timeout_s) {
  if (BadId(id, "remote lease")) return kExitUsage;
  if (!sm_count && !sm_percent && !memory_mb) {
    return Fail("give --sm, --sm-percent and/or --memory (MiB)", kExitUsage);
  }
  nlohmann::json body = {{"timeout_s", timeout_s}};
  if (sm_count) body["sm_count"] = *sm_count;
  if (sm_percent) body["sm_percent"] = *sm_percent;
  if (memory_mb) body["memory_mb"] = *memory_mb;
  return WithManager(g, [&](Manager& m) {
    m.client().SetTimeouts(std::chrono::seconds(10), std::chrono::seconds(timeout_s + 60));
    return PrintRemote(m, m.client().Post("/api/v1/remote-leases/" + id + "/resize", body),
                       "cannot resize " + id, nullptr, RenderRemoteResize);
  });
}

int RunRemoteList(const GlobalFlags& g, const std::string& node, const std::string& client) {
  const std::string path = WithQuery("/api/v1/remote-leases", {{"node", node}, {"client", client}});
  return WithManager(g, [&](Manager& m) {
    return PrintRemote(m, m.client().Get(path), "cannot list the remote leases", "remote_leases",
                       RenderRemoteLeases);
  });
}

int RunClients(const GlobalFlags& g) {
  return WithManager(g, [&](Manager& m) {
    return m.Print(m.client().Get("/api/v1/clients"), "cannot list the clients", "clients",
                   [](const nlohmann::json& answer) {
                     return RenderClients(answer, std::chrono::system_clock::now());
                   });
  });
}

int RunServers(const GlobalFlags& g, const std::string& node) {
  const std::string path = WithQuery("/api/v1/gpu-servers", {{"node", node}});
  return WithManager(g, [&](Manager& m) {
    return PrintRemote(m, m.client().Get(path), "cannot list the GPU servers", "servers",
                       RenderGpuServers);
  });
}

}  // namespace flyt::ctl
