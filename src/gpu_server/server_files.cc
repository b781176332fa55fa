#include "gpu_server/server_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/unique_fd.h"

namespace flyt::gpu_server {

Result<std::string> ReadSecretFile(const std::string& path) {
  const std::string what = "secret file " + path;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) {
    if (errno == ELOOP) return InvalidArgument(what + " is a symbolic link; give the file itself");
    return ErrnoError("open " + what, errno);
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + what, errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(what + " is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status(StatusCode::kPermissionDenied,
                  what + " has mode " + mode +
                      ": others than its owner may read or write it; chmod 600 it")
        .WithReason("secret_file_mode");
  }
  if (st.st_size > static_cast<off_t>(kMaxSecretChars + 2)) {
    return InvalidArgument(what + " is " + std::to_string(st.st_size) +
                           " bytes; a secret is 32 to 128 characters");
  }
  std::string secret(kMaxSecretChars + 3, '\0');
  size_t got = 0;
  while (got < secret.size()) {
    ssize_t n = ::read(fd.get(), secret.data() + got, secret.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + what, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  secret.resize(got);
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  if (secret.empty()) return InvalidArgument(what + " is empty");
  if (secret.size() < kMinSecretChars || secret.size() > kMaxSecretChars) {
    return InvalidArgument(what + " holds " + std::to_string(secret.size()) +
                           " characters; a secret is 32 to 128");
  }
  for (char c : secret) {
    if (c < 0x21 || c > 0x7e) {
      return InvalidArgument(what + " holds a character that is not printable ASCII (or a space)");
    }
  }
  return secret;
}

std::string ReadyJson(const ReadyInfo& info) {
  nlohmann::json j = {{"address", info.address},
                      {"pid", info.pid},
                      {"sm_count_total", info.device.sm_count_total},
                      {"sm_count_granted", info.device.sm_count_granted},
                      {"memory_total_mb", info.device.total_memory_bytes >> 20},
                      {"memory_limit_mb", nullptr},
                      {"backend", info.backend},
                      {"simulated", info.device.simulated},
                      {"mps", info.device.mps}};
  if (info.memory_limit_mb) j["memory_limit_mb"] = *info.memory_limit_mb;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ProbeJson(const remote::DeviceIdentity& device, const std::string& backend) {
  nlohmann::json j = {{"sm_count_total", device.sm_count_total},
                      {"sm_granularity", device.sm_granularity},
                      {"sm_granularity_measured", device.sm_granularity_measured},
                      {"memory_total_mb", device.total_memory_bytes >> 20},
                      {"name", device.name},
                      {"backend", backend},
                      {"simulated", device.simulated},
                      {"mps", device.mps}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status WriteFileAtomically(const std::string& path, const std::string& content, unsigned mode) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                     static_cast<mode_t>(mode)));
  if (!fd.valid()) return ErrnoError("create " + tmp, errno);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = ErrnoError("write " + tmp, errno);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0 || ::close(fd.Release()) != 0) {
    Status s = ErrnoError("write " + tmp, errno);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = ErrnoError("rename " + tmp + " to " + path, errno);
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::Ok();
}

}  // namespace flyt::gpu_server
