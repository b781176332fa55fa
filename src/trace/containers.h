// From a record's cgroup id to the container the process runs in.
//
// A cgroup v2 id is the inode number of the cgroup's directory under the cgroup root; the
// resolver finds that directory (one walk of the tree per new id, cached, bounded) and reads the
// container id from its path: systemd scopes (docker-<id>.scope, cri-containerd-<id>.scope,
// crio-<id>.scope, libpod-<id>.scope), cgroupfs layouts (/docker/<id>, kubepods' pod<uid>/<id>).
// Outside a container the id is empty.
//
// ContainerIdFromCgroupPath is pure. CgroupResolver is not thread-safe: the aggregator uses it from
// its drain thread only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace flyt::trace {

// The container id (64 hex digits) in a cgroup path, the deepest one; "" when there is none.
std::string ContainerIdFromCgroupPath(std::string_view path);

class CgroupResolver {
 public:
  // `max_cached` ids are remembered (then the cache starts over); a walk visits at most
  // `max_directories` directories.
  explicit CgroupResolver(std::string cgroup_root, size_t max_cached = 4096,
                          size_t max_directories = 200000)
      : root_(std::move(cgroup_root)), max_cached_(max_cached), max_directories_(max_directories) {}

  // The container id of the cgroup with this id ("" outside a container or when not found).
  const std::string& ContainerId(uint64_t cgroup_id);

  // Walks so far (tests check the cache).
  uint64_t walks() const { return walks_; }

 private:
  std::string root_;
  size_t max_cached_;
  size_t max_directories_;
  std::unordered_map<uint64_t, std::string> cache_;
  uint64_t walks_ = 0;
};

}  // namespace flyt::trace
