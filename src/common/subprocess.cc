#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

#include "common/strings.h"
#include "common/unique_fd.h"

extern char** environ;

namespace flyt {
namespace {

Status MakePipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe2", errno);
  read_end.Reset(fds[0]);
  write_end.Reset(fds[1]);
  return Status::Ok();
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int WaitChild(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return DecodeStatus(status);
}

// After SIGKILL a child stuck in an uninterruptible driver call (nvidia-smi after an XID 79) may
// not die for a long time. Wait briefly; if it is still there, leave the reaping to a detached
// thread so that the caller's deadline holds.
void ReapKilled(pid_t pid) {
  for (int i = 0; i < 100; ++i) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return;
    usleep(10000);
  }
  std::thread([pid] { WaitChild(pid); }).detach();
}

}  // namespace

std::string FindOnPath(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    return access(program.c_str(), X_OK) == 0 ? program : std::string();
  }
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  for (std::string_view dir : Split(path, ':')) {
    if (dir.empty()) continue;
    std::string candidate = std::string(dir) + "/" + program;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return {};
}

Result<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                 const CommandOptions& options) {
  if (argv.empty()) return InvalidArgument("RunCommand: empty argv");
  std::string program = FindOnPath(argv[0]);
  if (program.empty()) return NotFound(argv[0] + ": not found on PATH");

  UniqueFd out_r, out_w, err_r, err_w;
  FLYT_RETURN_IF_ERROR(MakePipe(out_r, out_w));
  FLYT_RETURN_IF_ERROR(MakePipe(err_r, err_w));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), 2);

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  // The child starts with no signal blocked and default handlers: a daemon that blocks SIGTERM
  // for sigwait, or ignores SIGPIPE, must not pass that on (a hung child must stay killable).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, program.c_str(), &actions, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return ErrnoError("cannot start " + program, rc);
  out_w.Reset();
  err_w.Reset();

  CommandOutput output;
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  pollfd fds[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
  std::string* sinks[2] = {&output.stdout_text, &output.stderr_text};
  int open_streams = 2;
  Status failure;
  char buf[65536];
  while (open_streams > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      failure =
          Status(StatusCode::kTimeout, argv[0] + " did not finish within " +
                                           std::to_string(options.timeout.count()) + " ms; killed");
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0) {
      if (errno == EINTR) continue;
      failure = ErrnoError("poll", errno);
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
        if (sinks[i]->size() > options.max_output_bytes) {
          failure = Status(StatusCode::kResourceExhausted,
                           argv[0] + " printed more than " +
                               std::to_string(options.max_output_bytes) + " bytes; killed");
        }
      } else if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
        fds[i].fd = -1;
        --open_streams;
      }
    }
    if (!failure.ok()) break;
  }
  if (!failure.ok()) {
    kill(pid, SIGKILL);
    ReapKilled(pid);
    return failure;
  }
  output.exit_code = WaitChild(pid);
  return output;
}

}  // namespace flyt
