#include "cluster/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "cluster/cluster.h"
#include "common/http.h"
#include "common/strings.h"
#include "common/unique_fd.h"

namespace flyt::cluster {
namespace {

Result<std::string> RandomToken() {
  UniqueFd fd(open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open /dev/urandom", errno);
  unsigned char bytes[24];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = read(fd.get(), bytes + got, sizeof(bytes) - got);
    if (n <= 0) return ErrnoError("read /dev/urandom", errno);
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out = "flyt-";
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace

Result<Auth::Built> Auth::Build(const ClusterConfig& config, const std::string& env_admin_token) {
  Built built;
  built.auth.tokens_ = config.tokens;
  built.auth.anonymous_read_ = config.anonymous_read;
  if (!env_admin_token.empty()) {
    if (env_admin_token.size() < 16) {
      return InvalidArgument("FLYT_ADMIN_TOKEN must be at least 16 characters");
    }
    built.auth.tokens_.push_back({"admin", env_admin_token, Role::kAdmin});
  }
  if (!built.auth.tokens_.empty()) return built;

  // No token anywhere: never run open by accident. Reuse the generated token, or make one.
  const std::string path = config.var_dir + "/admin.token";
  built.generated_token_path = std::filesystem::absolute(path).string();
  auto existing = ReadFile(path, 4096);
  std::string token;
  if (existing.ok()) {
    token = std::string(Trim(*existing));
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      return InvalidArgument(path + " is readable by others (mode " +
                             std::to_string(st.st_mode & 0777) + "); chmod 600 it");
    }
  }
  if (token.size() < 16) {
    std::error_code ec;
    std::filesystem::create_directories(config.var_dir, ec);
    if (ec) return InvalidArgument("cannot create " + config.var_dir + ": " + ec.message());
    FLYT_ASSIGN_OR_RETURN(token, RandomToken());
    const std::string tmp = path + ".tmp";
    UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd.valid()) return ErrnoError("create " + tmp, errno);
    const std::string line = token + "\n";
    if (write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
        fsync(fd.get()) != 0) {
      return ErrnoError("write " + tmp, errno);
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename to " + path, errno);
    built.generated_now = true;
  }
  built.auth.tokens_.push_back({"admin", token, Role::kAdmin});
  return built;
}

std::optional<Caller> Auth::Identify(const std::optional<std::string>& token) const {
  if (!token) {
    if (anonymous_read_) return Caller{"anonymous", Role::kViewer};
    return std::nullopt;
  }
  std::optional<Caller> found;
  for (const TokenEntry& t : tokens_) {  // no early exit: the time does not tell which matched
    if (http::TokenEquals(*token, t.token)) found = Caller{t.name, t.role};
  }
  return found;
}

}  // namespace flyt::cluster
