// What the commands share: error lines, --watch, the cluster manager's connection.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <random>
#include <cstdio>
#include <thread>

#include "common/json.h"
#include "ctl/commands.h"
#include "ctl/render.h"

namespace flyt::ctl {

namespace {
std::atomic<bool> g_interrupted{false};  // set by SIGINT/SIGTERM during --watch
}  // namespace

int Fail(const std::string& line, int exit_code) {
  std::fprintf(stderr, "flytctl: %s\n", Printable(line).c_str());
  return exit_code;
}

int Fail(const Status& status) { return Fail(status.message(), ExitCode(status)); }

int Repeat(std::optional<double> watch_s, bool json,
           const std::function<Result<std::string>()>& frame) {
  if (watch_s) {
    // Only while watching: otherwise Ctrl-C must end a stuck request at once.
    std::signal(SIGINT, [](int) { g_interrupted = true; });
    std::signal(SIGTERM, [](int) { g_interrupted = true; });
  }
  while (true) {
    auto out = frame();
    if (!out.ok()) return Fail(out.status());
    if (watch_s && !json && isatty(STDOUT_FILENO)) std::fputs("\033[H\033[2J", stdout);
    std::fputs(out->c_str(), stdout);
    std::fflush(stdout);
    if (!watch_s) return kExitOk;
    auto until = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(static_cast<int64_t>(*watch_s * 1000));
    while (!g_interrupted && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (g_interrupted) return kExitOk;
  }
}

Result<Manager> Manager::Open(const std::string& server, const std::string& token, bool json) {
  Manager m;
  m.json_ = json;
  m.url_ = server;
  FLYT_ASSIGN_OR_RETURN(m.client_, http::JsonClient::Connect(server, token, "the cluster manager"));
  m.url_ = m.client_->url();
  return m;
}

int Manager::Fail(const Status& s, std::string_view doing) const {
  return ctl::Fail(Explained(s, doing, url_));
}

int Manager::Print(const Result<nlohmann::json>& answer, std::string_view doing, const char* list,
                   const std::function<std::string(const nlohmann::json&)>& render) const {
  if (!answer.ok()) return Fail(answer.status(), doing);
  if (json_) {
    std::printf("%s\n", DumpJson(*answer, 2).c_str());
    return kExitOk;
  }
  if (!answer->is_object() ||
      (list != nullptr && !(answer->contains(list) && (*answer)[list].is_array()))) {
    return ctl::Fail(std::string(doing) + ": unexpected answer from " + url_ +
                     (list != nullptr ? std::string(" (no \"") + list + "\" list)" : "") +
                     "; is it a flyt cluster manager?");
  }
  std::fputs(render(*answer).c_str(), stdout);
  return kExitOk;
}

Result<nlohmann::json> PostIdempotent(Manager& m, const std::string& path,
                                      const nlohmann::json& body) {
  std::random_device random;
  std::string key = "flytctl-";
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 8; ++i) {
    const unsigned v = random();
    for (int k = 0; k < 4; ++k) key += kHex[(v >> (k * 4)) & 15];
  }
  const std::vector<std::pair<std::string, std::string>> headers = {{"Idempotency-Key", key}};
  auto answer = m.client().Post(path, body, headers);
  // No answer at all (not an HTTP error): the request may have been done; ask again, same key.
  if (!answer.ok() && answer.status().code() == StatusCode::kUnavailable &&
      answer.status().reason().empty() &&
      answer.status().message().find("cannot reach") != std::string::npos) {
    answer = m.client().Post(path, body, headers);
  }
  return answer;
}

int WithManager(const GlobalFlags& g, const std::function<int(Manager&)>& run) {
  const std::string server = ClusterManagerUrl(g.server, std::getenv("FLYT_CLUSTER_MANAGER"));
  auto m = Manager::Open(server, g.token, g.json);
  if (!m.ok()) {
    // A URL JsonClient cannot use is the user's to fix.
    const int code =
        m.status().code() == StatusCode::kInvalidArgument ? kExitUsage : ExitCode(m.status());
    return Fail(ExplainError(m.status(), "", server), code);
  }
  return run(*m);
}

bool BadId(const std::string& id, std::string_view what) {
  Status s = CheckId(id, what);
  if (s.ok()) return false;
  Fail(s.message(), kExitUsage);
  return true;
}

}  // namespace flyt::ctl
