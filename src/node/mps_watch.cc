#include "node/mps_watch.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/strings.h"
#include "common/unique_fd.h"
#include "gpu/json.h"

namespace flyt::node {

namespace {

// Whether the pid file the daemon keeps in its pipe directory names a live process of that
// program (its comm, cut to 15 characters: "nvidia-cuda-mps"). False tells nothing: the file may
// be missing, the daemon may live in another pid namespace, the pid may have been reused.
bool PidFileNamesALiveDaemon(const std::string& pipe_dir) {
  auto text = ReadFile(pipe_dir + "/nvidia-cuda-mps-control.pid", 64);
  if (!text.ok()) return false;
  auto pid = ParseUint(Trim(*text));
  if (!pid || *pid == 0 || *pid > 0x3fffffff) return false;
  auto comm = ReadFile("/proc/" + std::to_string(*pid) + "/comm", 64);
  return comm.ok() && StartsWith(*comm, "nvidia-cuda-mps");
}

}  // namespace

MpsReading ProbeMpsControl(const std::string& pipe_dir) {
  const std::string path = pipe_dir + "/control";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {false, "no pipe or socket " + path};
  // The daemon's own pid file naming it alive is enough: no connection to log on its side.
  if (PidFileNamesALiveDaemon(pipe_dir)) return {true, ""};
  if (S_ISSOCK(st.st_mode)) {
    sockaddr_un addr{};
    if (path.size() >= sizeof(addr.sun_path)) return {false, path + " is too long for a socket"};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return {false, "cannot make a socket: " + std::string(strerror(errno))};
    int rc;
    do {
      rc = connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    } while (rc != 0 && errno == EINTR);
    // EAGAIN: a full backlog, the daemon is there but busy.
    if (rc == 0 || errno == EAGAIN || errno == EINPROGRESS) return {true, ""};
    if (errno == ECONNREFUSED) {
      return {false, path + " refuses connections (the daemon that made it has exited)"};
    }
    return {false, "cannot connect to " + path + ": " + strerror(errno)};
  }
  if (S_ISFIFO(st.st_mode)) {
    // Opening a pipe for writing without blocking fails with ENXIO when nobody reads it.
    UniqueFd fd(open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    if (fd.valid()) return {true, ""};
    if (errno == ENXIO)
      return {false, "nobody reads the pipe " + path + " (the daemon has exited)"};
    return {false, "cannot open " + path + ": " + strerror(errno)};
  }
  return {false, path + " is neither a pipe nor a socket"};
}

MpsWatch::MpsWatch(MpsProbe probe, std::function<Status()> start, Clock& clock, Options options)
    : probe_(std::move(probe)),
      start_(std::move(start)),
      clock_(clock),
      options_(options),
      backoff_(options.restart_backoff) {}

MpsStatus MpsWatch::Check() {
  MpsReading reading = probe_();
  const auto now = clock_.SteadyNow();
  if (!reading.answers && start_ && now >= next_start_) {
    ++starts_;
    Status s = start_();
    reading = probe_();
    if (!reading.answers) {
      last_start_error_ = s.ok() ? "it was started and still does not answer" : s.message();
      next_start_ = now + backoff_;
      backoff_ = std::min(backoff_ * 2, options_.max_restart_backoff);
    }
  }
  const std::string was = status_.state;
  std::string state;
  if (reading.answers) {
    state = "running";
    backoff_ = options_.restart_backoff;
    next_start_ = {};
    last_start_error_.clear();
  } else {
    state = was == "running" || was == "down" ? "down" : "not_running";
  }
  status_.changed = !checked_ || state != was;
  if (status_.changed) status_.since = clock_.WallNow();
  status_.state = state;
  std::string hint;
  if (!start_) {
    hint = " (start it with nvidia-cuda-mps-control -d, or set [gpu-servers] mps_start = true)";
  } else if (!last_start_error_.empty()) {
    const auto retry =
        clock_.WallNow() +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(next_start_ - now);
    hint =
        "; starting it failed (" + last_start_error_ + "), next try at " + gpu::FormatTime(retry);
  }
  if (state == "running") {
    status_.reason.clear();
  } else if (state == "down") {
    status_.reason = "the MPS control daemon stopped answering at " +
                     gpu::FormatTime(status_.since) + ": " + reading.detail + hint;
  } else {
    status_.reason = "no MPS control daemon: " + reading.detail + hint;
  }
  checked_ = true;
  return status_;
}

}  // namespace flyt::node
