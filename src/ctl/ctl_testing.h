// Test helpers for flytctl's command tests: a fake API server on loopback that records what it
// was asked, and a runner of the built flytctl program that captures its output and exit status.
// Test-only. FakeManager's record is guarded by its own lock; the rest is single-threaded.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/http.h"
#include "common/mutex.h"

extern char** environ;

namespace flyt::ctl::test {

using nlohmann::json;

// What the fake manager saw of one request.
struct Seen {
  std::string method, path, query, body, token, idempotency_key;
};

// An httplib server on 127.0.0.1 that answers every request with `answer(request)` and records
// it. Stopped and joined on destruction.
class FakeManager {
 public:
  struct Answer {
    int status = 200;
    json body;
  };
  using Handler = std::function<Answer(const httplib::Request&)>;

  explicit FakeManager(Handler handler) : handler_(std::move(handler)) {
    auto serve = [this](const httplib::Request& req, httplib::Response& res) {
      std::string query;
      for (const auto& [k, v] : req.params) query += (query.empty() ? "" : "&") + k + "=" + v;
      {
        MutexLock lock(mu_);
        seen_.push_back({req.method, req.path, query, req.body,
                         req.get_header_value("Authorization"),
                         req.get_header_value("Idempotency-Key")});
      }
      Answer a = handler_(req);
      res.status = a.status;
      res.set_content(a.body.dump(), "application/json");
    };
    server_.Get(".*", serve);
    server_.Post(".*", serve);
    server_.Delete(".*", serve);
    auto port = http::Listen(server_, "127.0.0.1", 0, thread_);
    EXPECT_TRUE(port.ok()) << port.status().ToString();
    port_ = port.ok() ? *port : 0;
  }
  ~FakeManager() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Seen> seen() const {
    MutexLock lock(mu_);
    return seen_;
  }

 private:
  Handler handler_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable Mutex mu_;
  std::vector<Seen> seen_ FLYT_GUARDED_BY(mu_);
};

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

// An error answer's body, as both managers write it.
inline nlohmann::json ErrorBody(const std::string& code, const std::string& text) {
  return {{"error", text}, {"code", code}};
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs build/bin/flytctl with `args`, FLYT_* variables of the caller's environment removed.
inline Outcome Flytctl(const std::vector<std::string>& args) {
  const std::string program = std::string(FLYT_BINARY_DIR) + "/bin/flytctl";
  char dir_template[] = "/tmp/flytctl-test-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  EXPECT_NE(dir, nullptr);
  const std::string out_path = std::string(dir) + "/out", err_path = std::string(dir) + "/err";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("FLYT_", 0) != 0) env_strings.emplace_back(*e);
  }
  std::vector<char*> argv = {const_cast<char*>(program.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0) _exit(126);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  Outcome o;
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.out = ReadAll(out_path);
  o.err = ReadAll(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  rmdir(dir);
  return o;
}

}  // namespace flyt::ctl::test
