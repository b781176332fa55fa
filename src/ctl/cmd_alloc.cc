// `flytctl alloc`, `release`, `renew` and `allocations`: leases of GPUs from the cluster manager.
#include <cstdio>
#include <string>

#include "ctl/commands.h"
#include "ctl/render.h"

namespace flyt::ctl {

int RunAlloc(const GlobalFlags& g, const AllocationFlags& flags, bool quiet) {
  auto body = AllocationBody(flags);
  if (!body.ok()) return Fail(body.status().message(), kExitUsage);
  return WithManager(g, [&](Manager& m) {
    auto lease = PostIdempotent(m, "/api/v1/allocations", *body);
    const std::string doing = "cannot allocate " + std::to_string(flags.gpus) + " GPU(s)";
    if (quiet && lease.ok() && !g.json) {
      if (!lease->is_object() || !(*lease)["id"].is_string()) {
        return Fail(doing + ": unexpected answer from " + m.url() + " (no lease id)");
      }
      std::printf("%s\n", Printable((*lease)["id"].get<std::string>()).c_str());
      return kExitOk;
    }
    return m.Print(lease, doing, "gpus", RenderLease);
  });
}

int RunRelease(const GlobalFlags& g, const std::string& id) {
  if (BadId(id, "lease")) return kExitUsage;
  return WithManager(g, [&](Manager& m) {
    return m.Print(m.client().Delete("/api/v1/allocations/" + id), "cannot release " + id, nullptr,
                   [&](const nlohmann::json&) { return "released " + id + "\n"; });
  });
}

int RunRenew(const GlobalFlags& g, const std::string& id, std::optional<int64_t> ttl_s) {
  if (BadId(id, "lease")) return kExitUsage;
  nlohmann::json body = nlohmann::json::object();
  if (ttl_s) body["ttl_seconds"] = *ttl_s;
  return WithManager(g, [&](Manager& m) {
    return m.Print(m.client().Post("/api/v1/allocations/" + id + "/renew", body),
                   "cannot renew " + id, "gpus", RenderLease);
  });
}

int RunAllocations(const GlobalFlags& g) {
  return WithManager(g, [&](Manager& m) {
    return m.Print(m.client().Get("/api/v1/allocations"), "cannot list the leases", "allocations",
                   RenderAllocations);
  });
}

}  // namespace flyt::ctl
