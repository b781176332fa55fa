#include "trace/containers.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/strings.h"

namespace flyt::trace {
namespace {

bool IsContainerId(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// "<prefix><id>.scope" → id.
std::string_view ScopeId(std::string_view component) {
  static constexpr std::string_view kPrefixes[] = {"docker-", "cri-containerd-", "crio-",
                                                   "libpod-"};
  static constexpr std::string_view kSuffix = ".scope";
  if (component.size() <= kSuffix.size() ||
      component.substr(component.size() - kSuffix.size()) != kSuffix) {
    return {};
  }
  std::string_view stem = component.substr(0, component.size() - kSuffix.size());
  for (std::string_view prefix : kPrefixes) {
    if (StartsWith(stem, prefix)) {
      std::string_view id = stem.substr(prefix.size());
      if (IsContainerId(id)) return id;
    }
  }
  return {};
}

}  // namespace

std::string ContainerIdFromCgroupPath(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::string_view p : Split(path, '/')) {
    if (!p.empty()) parts.push_back(p);
  }
  for (size_t i = parts.size(); i-- > 0;) {
    if (std::string_view id = ScopeId(parts[i]); !id.empty()) return std::string(id);
    if (IsContainerId(parts[i]) && i > 0) {
      std::string_view parent = parts[i - 1];
      // cgroupfs: /docker/<id>, /kubepods/<qos>/pod<uid>/<id>, /libpod_parent/.../<id>.
      if (parent == "docker" || StartsWith(parent, "pod") || StartsWith(parent, "kubepods") ||
          StartsWith(parent, "libpod")) {
        return std::string(parts[i]);
      }
    }
  }
  return "";
}

const std::string& CgroupResolver::ContainerId(uint64_t cgroup_id) {
  if (auto it = cache_.find(cgroup_id); it != cache_.end()) return it->second;
  if (cache_.size() >= max_cached_) cache_.clear();
  std::string id;
  ++walks_;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::recursive_directory_iterator it(root_, fs::directory_options::skip_permission_denied, ec);
  size_t visited = 0;
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (++visited > max_directories_) break;
    std::error_code type_ec;
    if (!it->is_directory(type_ec) || it->is_symlink(type_ec)) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    if (static_cast<uint64_t>(st.st_ino) == cgroup_id) {
      std::string relative = it->path().lexically_relative(root_).generic_string();
      id = ContainerIdFromCgroupPath(relative);
      break;
    }
  }
  return cache_.emplace(cgroup_id, std::move(id)).first->second;
}

}  // namespace flyt::trace
