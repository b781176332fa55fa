// `flytctl submit`, `jobs`, `job`, `cancel`, `complete` and `queue`: the cluster manager's job
// queue, and `submit --wait`'s wait for the jobs to leave it.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "common/strings.h"
#include <limits>

#include "ctl/commands.h"
#include "ctl/render.h"

namespace flyt::ctl {

int RunSubmit(const GlobalFlags& g, const SubmitArgs& s) {
  auto text = ReadFile(s.file, 16 << 20);
  if (!text.ok()) return Fail(text.status());
  auto task = ParseJson(*text, s.file);
  if (!task.ok()) return Fail(task.status().message(), kExitUsage);
  auto body = SubmissionBody(*task, s.flags);
  if (!body.ok()) return Fail(s.file + ": " + body.status().message(), kExitUsage);
  return WithManager(g, [&](Manager& m) {
    const std::string doing = "cannot submit " + s.file;
    auto submitted = PostIdempotent(m, "/api/v1/jobs", *body);
    if (!s.wait || !submitted.ok()) {
      return m.Print(submitted, doing, "jobs", RenderSubmission);
    }
    if (!submitted->is_object() || !(*submitted)["jobs"].is_array()) {
      return Fail(doing + ": unexpected answer from " + m.url() + " (no \"jobs\" list)");
    }
    std::vector<std::string> ids;
    for (const nlohmann::json& j : (*submitted)["jobs"]) {
      if (!j.is_object() || !j.contains("id") || !j["id"].is_string() ||
          !CheckId(j["id"].get<std::string>(), "job").ok()) {
        return Fail(doing + ": unexpected answer from " + m.url() + " (a job without a valid id)");
      }
      ids.push_back(j["id"].get<std::string>());
    }
    if (!g.json) {
      std::fputs(RenderSubmission(*submitted).c_str(), stdout);
      std::printf("waiting for %zu job(s) to leave the queue...\n", ids.size());
      std::fflush(stdout);
    }
    JobSource source;
    source.queued_ids = [&]() -> Result<std::vector<std::string>> {
      FLYT_ASSIGN_OR_RETURN(nlohmann::json q, m.client().Get("/api/v1/queue"));
      std::vector<std::string> out;
      if (!q.is_object() || !q.contains("queue") || !q["queue"].is_array()) {
        return Internal("unexpected answer from " + m.url() + " (no \"queue\" list)");
      }
      for (const nlohmann::json& e : q["queue"]) {
        if (e.is_object() && e.contains("job_id") && e["job_id"].is_string()) {
          out.push_back(e["job_id"].get<std::string>());
        }
      }
      return out;
    };
    source.job = [&](const std::string& id) { return m.client().Get("/api/v1/jobs/" + id); };
    WaitOptions options;
    if (s.wait_timeout_s) {
      options.timeout = std::chrono::milliseconds(static_cast<int64_t>(*s.wait_timeout_s * 1000));
    }
    auto waited = WaitUntilPlaced(
        ids, source, SystemClock::Instance(),
        [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }, options,
        [&](const nlohmann::json& job) {
          if (g.json) return;
          std::fputs(RenderJobOutcome(job).c_str(), stdout);
          std::fflush(stdout);
        });
    if (!waited.ok()) return m.Fail(waited.status(), "stopped waiting");
    size_t failed = 0, queued = 0;
    std::map<std::string, size_t> by_status;
    for (const nlohmann::json& j : waited->jobs) {
      const std::string status = JobStatus(j);
      ++by_status[status];
      if (status == "queued") {
        ++queued;
      } else if (!JobSucceeded(j)) {
        ++failed;
      }
    }
    if (g.json) {
      std::printf("%s\n", DumpJson({{"submission", (*submitted)["submission"]},
                                    {"timed_out", waited->timed_out},
                                    {"jobs", waited->jobs}},
                                   2)
                              .c_str());
    } else {
      std::string summary;
      for (const auto& [status, n] : by_status) {
        summary += (summary.empty() ? "" : ", ") + std::to_string(n) + " " + status;
      }
      std::printf("%zu job(s): %s\n", waited->jobs.size(), summary.c_str());
    }
    if (waited->timed_out) {
      return Fail(
          fmt::format("gave up waiting after {}; {} job(s) still queued (they stay queued: "
                      "flytctl cancel ID withdraws one)",
                      HumanDuration(*s.wait_timeout_s), queued));
    }
    if (failed > 0) return Fail(fmt::format("{} of {} job(s) did not start", failed, ids.size()));
    return 0;
  });
}

int RunJobs(const GlobalFlags& g, const std::string& status, std::optional<int64_t> limit,
            bool all) {
  // The manager answers pages of at most 1000 jobs; this fetches as many as asked for (--limit,
  // default 500) or every page (--all), and says so when more remain.
  constexpr int64_t kPage = 1000;
  const int64_t want = all ? std::numeric_limits<int64_t>::max() : limit.value_or(500);
  return WithManager(g, [&](Manager& m) {
    nlohmann::json merged;
    std::string cursor;
    int64_t have = 0;
    bool more = false;
    for (;;) {
      std::string query = "limit=" + std::to_string(std::min(kPage, want - have));
      if (!status.empty()) query += "&status=" + status;
      if (!cursor.empty()) query += "&continue=" + cursor;
      auto page = m.client().Get("/api/v1/jobs?" + query);
      if (!page.ok() || !page->is_object() || !(*page)["jobs"].is_array()) {
        return m.Print(page, "cannot list the jobs", "jobs",
                       [&](const nlohmann::json& j) { return RenderJobs(j, status); });
      }
      if (merged.is_null()) {
        merged = *page;
      } else {
        for (nlohmann::json& j : (*page)["jobs"]) merged["jobs"].push_back(std::move(j));
      }
      have = static_cast<int64_t>(merged["jobs"].size());
      more = page->value("more", false);
      const nlohmann::json next = page->value("continue", nlohmann::json());
      if (!more || !next.is_string() || have >= want) break;
      cursor = next.get<std::string>();
    }
    merged["more"] = more;
    if (!more) merged["continue"] = nullptr;
    const int code = m.Print(Result<nlohmann::json>(merged), "cannot list the jobs", "jobs",
                             [&](const nlohmann::json& j) { return RenderJobs(j, status); });
    if (more && !g.json) {
      std::fprintf(stderr, "(the newest %lld of %lld jobs; --limit N or --all for more)\n",
                   static_cast<long long>(have), merged.value("total", 0LL));
    }
    return code;
  });
}

int RunJob(const GlobalFlags& g, const std::string& id) {
  if (BadId(id, "job")) return kExitUsage;
  return WithManager(g, [&](Manager& m) {
    return m.Print(
        m.client().Get("/api/v1/jobs/" + id), "cannot show job " + id, nullptr,
        [](const nlohmann::json& j) { return RenderJob(j, std::chrono::system_clock::now()); });
  });
}

int RunCancel(const GlobalFlags& g, const std::string& id) {
  if (BadId(id, "job")) return kExitUsage;
  return WithManager(g, [&](Manager& m) {
    return m.Print(m.client().Delete("/api/v1/jobs/" + id), "cannot cancel " + id, nullptr,
                   RenderJobOutcome);
  });
}

int RunComplete(const GlobalFlags& g, const std::string& id, bool failed,
                const std::string& message) {
  if (BadId(id, "job")) return kExitUsage;
  nlohmann::json body = {{"status", failed ? "failed" : "completed"}};
  if (!message.empty()) body["message"] = message;
  return WithManager(g, [&](Manager& m) {
    return m.Print(
        m.client().Post("/api/v1/jobs/" + id + "/complete", body), "cannot complete " + id, nullptr,
        [](const nlohmann::json& j) { return RenderJob(j, std::chrono::system_clock::now()); });
  });
}

int RunQueue(const GlobalFlags& g) {
  return WithManager(g, [&](Manager& m) {
    return m.Print(m.client().Get("/api/v1/queue"), "cannot show the queue", "queue", RenderQueue);
  });
}

}  // namespace flyt::ctl
