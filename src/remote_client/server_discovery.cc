#include "remote_client/server_discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <spdlog/spdlog.h>

#include "common/json.h"

namespace flyt::remote {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

constexpr size_t kMaxLineBytes = 64 << 10;

// An integer environment variable in [min, max]; nullopt when unset or empty.
CudaResult<std::optional<int64_t>> IntVar(const std::function<const char*(const char*)>& getenv,
                                          const char* name, int64_t min, int64_t max) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return std::optional<int64_t>();
  int64_t value = 0;
  const char* end = text + std::strlen(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end || value < min || value > max) {
    return CudaStatus(CudaError::kInitializationError,
                      std::string(name) + "=" + text + ": expected an integer from " +
                          std::to_string(min) + " to " + std::to_string(max));
  }
  return std::optional<int64_t>(value);
}

std::string NoManager(const std::string& path, const std::string& why) {
  return "no GPU server: FLYT_SERVER is not set and no flyt-client-manager listens on " + path +
         " (" + why +
         "); set FLYT_SERVER=HOST:PORT, or run flyt-client-manager (FLYT_CLIENT_MANAGER names "
         "its socket)";
}

std::string Str(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

std::optional<int64_t> Int(const json& j, const char* key) {
  if (j.contains(key) && j[key].is_number_integer()) return j[key].get<int64_t>();
  return std::nullopt;
}

}  // namespace

CudaResult<DiscoveryOptions> DiscoveryOptions::FromEnvironment(
    const std::function<const char*(const char*)>& getenv) {
  DiscoveryOptions o;
  if (const char* path = getenv("FLYT_CLIENT_MANAGER"); path != nullptr && *path != '\0') {
    o.socket_path = path;
  }
  if (o.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return CudaStatus(CudaError::kInitializationError,
                      "FLYT_CLIENT_MANAGER=" + o.socket_path + ": longer than a socket path may be");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(auto timeout,
                             IntVar(getenv, "FLYT_CLIENT_MANAGER_TIMEOUT_MS", 1, 3600000));
  if (timeout) o.timeout = milliseconds(*timeout);
  FLYT_CUDA_ASSIGN_OR_RETURN(auto sm_count, IntVar(getenv, "FLYT_REMOTE_SM_COUNT", 1, 1 << 20));
  FLYT_CUDA_ASSIGN_OR_RETURN(auto sm_percent, IntVar(getenv, "FLYT_REMOTE_SM_PERCENT", 1, 100));
  FLYT_CUDA_ASSIGN_OR_RETURN(auto memory_mb,
                             IntVar(getenv, "FLYT_REMOTE_MEMORY_MB", 1, int64_t{1} << 30));
  if (sm_count && sm_percent) {
    return CudaStatus(CudaError::kInitializationError,
                      "FLYT_REMOTE_SM_COUNT and FLYT_REMOTE_SM_PERCENT exclude each other; set one");
  }
  json profile = json::object();
  if (sm_count) profile["sm_count"] = *sm_count;
  if (sm_percent) profile["sm_percent"] = *sm_percent;
  if (memory_mb) profile["memory_mb"] = *memory_mb;
  if (const char* model = getenv("FLYT_REMOTE_GPU_MODEL"); model != nullptr && *model != '\0') {
    profile["gpu_model"] = std::string(model).substr(0, 256);
  }
  if (!profile.empty()) o.profile = std::move(profile);
  return o;
}

CudaResult<std::unique_ptr<ManagerSession>> ManagerSession::Acquire(
    const DiscoveryOptions& options) {
  const std::string& path = options.socket_path;
  const auto deadline = Steady::now() + options.timeout;
  const std::string timeout_text = std::to_string(options.timeout.count()) + " ms";
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return CudaStatus(CudaError::kNoDevice, NoManager(path, std::strerror(errno)));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), std::min(path.size(), sizeof addr.sun_path - 1));
  // Non-blocking: a manager whose backlog is full must not hold the program past the deadline.
  for (;;) {
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN && Steady::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
      continue;
    }
    if (errno == EAGAIN) {
      return CudaStatus(CudaError::kDevicesUnavailable,
                        "the flyt-client-manager on " + path + " did not accept within " +
                            timeout_text + " (FLYT_CLIENT_MANAGER_TIMEOUT_MS)");
    }
    return CudaStatus(CudaError::kNoDevice, NoManager(path, std::string("connect: ") +
                                                                std::strerror(errno)));
  }
  json request{{"op", "acquire"},
               {"pid", options.pid},
               {"program", options.program},
               {"version", 1}};
  if (!options.profile.is_null()) request["profile"] = options.profile;
  const std::string line = DumpJson(request) + "\n";
  if (::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(line.size())) {
    return CudaStatus(CudaError::kDevicesUnavailable,
                      "the flyt-client-manager on " + path + " took no request: " +
                          std::strerror(errno));
  }
  std::string in;
  size_t nl = std::string::npos;
  while ((nl = in.find('\n')) == std::string::npos) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
    if (left.count() <= 0) {
      return CudaStatus(CudaError::kDevicesUnavailable,
                        "the flyt-client-manager on " + path + " gave no GPU server within " +
                            timeout_text + " (FLYT_CLIENT_MANAGER_TIMEOUT_MS)");
    }
    pollfd p{fd.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n <= 0) continue;  // timeout or EINTR: the loop checks the deadline
    char buf[4096];
    ssize_t got = ::recv(fd.get(), buf, sizeof buf, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      return CudaStatus(CudaError::kDevicesUnavailable,
                        "the flyt-client-manager on " + path +
                            " closed the connection without an answer (see its log)");
    }
    in.append(buf, static_cast<size_t>(got));
    if (in.size() > kMaxLineBytes) {
      return CudaStatus(CudaError::kNoDevice,
                        "the flyt-client-manager on " + path + " answered more than 64 KiB");
    }
  }
  auto answer = ParseJson(in.substr(0, nl), "the flyt-client-manager's answer", kMaxLineBytes, 16);
  if (!answer.ok() || !answer->is_object() || !answer->contains("ok") ||
      !(*answer)["ok"].is_boolean()) {
    return CudaStatus(CudaError::kNoDevice, "the flyt-client-manager on " + path +
                                                " answered something this runtime does not read");
  }
  const json& a = *answer;
  if (!a["ok"].get<bool>()) {
    const std::string code = Str(a, "code").empty() ? "internal" : Str(a, "code");
    const std::string message = "no remote GPU from the flyt-client-manager on " + path + ": " +
                                Str(a, "error") + " (" + code + ")";
    // Not now (no room, the cluster manager out of reach, overloaded): busy, and worth another
    // try later. Never here (never_fits, refused, misconfigured): no device.
    const bool transient = code == "insufficient_gpus" || code == "unavailable" ||
                           code == "resource_exhausted" || code == "too_many_queued";
    return CudaStatus(transient ? CudaError::kDevicesUnavailable : CudaError::kNoDevice, message);
  }
  std::unique_ptr<ManagerSession> session(new ManagerSession());
  LeasedServer& s = session->server_;
  s.address = Str(a, "server");
  s.secret = Str(a, "secret");
  s.lease_id = Str(a, "lease_id");
  s.node = Str(a, "node");
  s.gpu_uuid = Str(a, "gpu_uuid");
  s.sm_count = Int(a, "sm_count");
  s.memory_mb = Int(a, "memory_mb");
  if (s.address.empty()) {
    return CudaStatus(CudaError::kNoDevice,
                      "the flyt-client-manager on " + path + " granted a lease without a server");
  }
  session->pending_ = in.substr(nl + 1);
  session->socket_path_ = path;
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  session->fd_ = std::move(fd);
  return session;
}

ManagerSession::~ManagerSession() {
  closing_->store(true);
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
  if (watcher_.joinable()) watcher_.join();
}

bool ServerOutOfReach(const std::string& connect_error) {
  if (connect_error.find("connect to ") == std::string::npos) return false;
  for (int e : {ECONNREFUSED, ENOENT, EHOSTUNREACH, ENETUNREACH}) {
    if (connect_error.find(std::strerror(e)) != std::string::npos) return true;
  }
  return false;
}

CudaStatus ManagerSession::ReportDeadServer(milliseconds timeout) {
  const std::string& path = socket_path_;
  if (!fd_.valid() || watcher_.joinable()) {
    return CudaStatus(CudaError::kDevicesUnavailable, "no connection to the manager to report on");
  }
  const std::string line = DumpJson(json{{"op", "server_dead"},
                                         {"lease_id", server_.lease_id},
                                         {"server", server_.address}}) +
                           "\n";
  if (::send(fd_.get(), line.data(), line.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(line.size())) {
    return CudaStatus(CudaError::kDevicesUnavailable,
                      "the flyt-client-manager on " + path + " took no report: " +
                          std::strerror(errno));
  }
  const auto deadline = Steady::now() + timeout;
  std::string& in = pending_;
  for (;;) {
    // Events (the lease_failed of the lease being replaced) come before the answer.
    for (size_t nl = in.find('\n'); nl != std::string::npos; nl = in.find('\n')) {
      auto answer = ParseJson(in.substr(0, nl), "the flyt-client-manager's answer", kMaxLineBytes, 16);
      in.erase(0, nl + 1);
      if (!answer.ok() || !answer->is_object() || !answer->contains("ok") ||
          !(*answer)["ok"].is_boolean()) {
        continue;
      }
      if ((*answer)["ok"].get<bool>()) return CudaStatus::Ok();
      return CudaStatus(CudaError::kDevicesUnavailable,
                        "the flyt-client-manager on " + path + " keeps lease " + server_.lease_id +
                            ": " + Str(*answer, "error") + " (" + Str(*answer, "code") + ")");
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
    if (left.count() <= 0 || in.size() > kMaxLineBytes) {
      return CudaStatus(CudaError::kDevicesUnavailable,
                        "the flyt-client-manager on " + path + " did not answer the report within " +
                            std::to_string(timeout.count()) + " ms");
    }
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t got = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      return CudaStatus(CudaError::kDevicesUnavailable,
                        "the flyt-client-manager on " + path +
                            " closed the connection without answering the report");
    }
    in.append(buf, static_cast<size_t>(got));
  }
}

CudaResult<std::unique_ptr<ManagerSession>> ManagerSession::ReplaceDeadServer(
    std::unique_ptr<ManagerSession> dead, const DiscoveryOptions& options) {
  FLYT_CUDA_RETURN_IF_ERROR(dead->ReportDeadServer(options.timeout));
  dead.reset();  // the old lease's connection goes before the new acquire
  return Acquire(options);
}

void ManagerSession::Watch(std::shared_ptr<spdlog::logger> log) {
  if (watcher_.joinable() || !fd_.valid()) return;
  watcher_ = std::thread([fd = fd_.get(), in = pending_, log = std::move(log),
                          path = socket_path_, lease = server_.lease_id, closing = closing_]() mutable {
    char buf[4096];
    for (;;) {
      size_t nl;
      while ((nl = in.find('\n')) != std::string::npos) {
        auto event = ParseJson(in.substr(0, nl), "an event", kMaxLineBytes, 16);
        in.erase(0, nl + 1);
        if (!event.ok() || !event->is_object()) continue;
        if (Str(*event, "event") == "lease_failed") {
          log->error("the flyt-client-manager on {} says lease {} ended ({}: {}); CUDA calls on "
                     "its GPU server fail from now on",
                     path, Str(*event, "lease_id"), Str(*event, "code"), Str(*event, "error"));
        } else {
          log->info("the flyt-client-manager on {} says: {}", path, DumpJson(*event));
        }
      }
      if (in.size() > kMaxLineBytes) in.clear();
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (closing->load()) return;
        log->warn("the flyt-client-manager on {} closed its connection; lease {} is no longer "
                  "renewed and ends at the cluster manager when its ttl runs out",
                  path, lease);
        return;
      }
      in.append(buf, static_cast<size_t>(n));
    }
  });
}

}  // namespace flyt::remote
