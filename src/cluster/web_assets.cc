#include "cluster/web_assets.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "common/strings.h"

namespace flyt::cluster {

namespace {

constexpr size_t kMaxFiles = 64;
constexpr size_t kMaxBytes = 32u << 20;

std::string ContentType(const std::string& name) {
  auto ends = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js") || ends(".mjs")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".json") || ends(".map")) return "application/json";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".ico")) return "image/x-icon";
  if (ends(".woff2")) return "font/woff2";
  if (ends(".txt")) return "text/plain; charset=utf-8";
  return "application/octet-stream";
}

// FNV-1a, 64 bits: a change detector for the ETag, not a security property.
std::string Etag(const std::string& body) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : body) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  char buf[40];
  std::snprintf(buf, sizeof(buf), "\"%016llx-%zx\"", static_cast<unsigned long long>(h),
                body.size());
  return buf;
}

}  // namespace

Result<WebAssets> WebAssets::Load(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound("no dashboard directory " + dir);
  WebAssets assets;
  assets.dir_ = dir;
  size_t total = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (assets.files_.size() == kMaxFiles) {
      return InvalidArgument("dashboard directory " + dir + " holds more than " +
                             std::to_string(kMaxFiles) + " files");
    }
    FLYT_ASSIGN_OR_RETURN(std::string body, ReadFile(e.path().string(), kMaxBytes));
    total += body.size();
    if (total > kMaxBytes) {
      return InvalidArgument("dashboard directory " + dir + " holds more than 32 MiB");
    }
    File f;
    f.content_type = ContentType(name);
    f.etag = Etag(body);
    f.body = std::move(body);
    assets.files_.emplace(name, std::move(f));
  }
  if (ec) return Unavailable("cannot read " + dir + ": " + ec.message());
  if (!assets.files_.count("index.html")) return NotFound("no index.html in " + dir);
  return assets;
}

std::string WebAssets::FindDefaultDir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  // The build tree has the same layout as an installed one.
  const fs::path dir = (exe.parent_path() / "../share/flyt/web").lexically_normal();
  return fs::exists(dir / "index.html", ec) ? dir.string() : "";
}

const WebAssets::File* WebAssets::Find(const std::string& name) const {
  auto it = files_.find(name.empty() ? "index.html" : name);
  return it == files_.end() ? nullptr : &it->second;
}

}  // namespace flyt::cluster
