#include "gpu/proc.h"

#include <pwd.h>
#include <sys/stat.h>

#include <vector>

#include "common/status.h"
#include "common/strings.h"

namespace flyt::gpu {
namespace {

bool IsHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Finds a run of exactly 64 lowercase hex digits in `s` that stands alone (not part of a longer
// hex run): the id docker, containerd, cri-o and podman put in cgroup paths.
std::optional<std::string> FindContainerId(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && IsHex(s.substr(j, 1))) ++j;
    if (j - i == 64) return std::string(s.substr(i, 64));
    i = (j == i) ? i + 1 : j;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ProcReader::ContainerIdFromCgroup(std::string_view cgroup_text) {
  // Lines look like "0::/system.slice/docker-<id>.scope" (cgroup v2) or
  // "12:memory:/kubepods/burstable/pod<uid>/<id>" (v1). Take the first id found.
  for (std::string_view line : Split(cgroup_text, '\n')) {
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    colon = line.find(':', colon + 1);
    if (colon == std::string_view::npos) continue;
    std::string_view path = line.substr(colon + 1);
    if (auto id = FindContainerId(path)) return id;
  }
  return std::nullopt;
}

std::optional<std::string> ProcReader::UserName(uint32_t uid) const {
  {
    MutexLock lock(mu_);
    auto it = users_.find(uid);
    if (it != users_.end()) return it->second;
  }
  std::string name = std::to_string(uid);
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      found->pw_name != nullptr) {
    name = found->pw_name;
  }
  MutexLock lock(mu_);
  users_.emplace(uid, name);
  return name;
}

std::optional<ProcReader::Entry> ProcReader::Read(uint32_t pid) const {
  const std::string dir = root_ + "/" + std::to_string(pid);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return std::nullopt;  // gone, or not in this PID namespace
  Entry e;
  e.user = UserName(st.st_uid);
  if (auto comm = ReadFile(dir + "/comm"); comm.ok()) {
    std::string_view name = Trim(*comm);
    if (!name.empty()) e.name = std::string(name);
  }
  if (auto cmdline = ReadFile(dir + "/cmdline"); cmdline.ok() && !cmdline->empty()) {
    std::string command = *cmdline;
    while (!command.empty() && command.back() == '\0') command.pop_back();
    for (char& c : command) {
      if (c == '\0') c = ' ';
    }
    if (!command.empty()) e.command = std::move(command);
  }
  if (auto cgroup = ReadFile(dir + "/cgroup"); cgroup.ok()) {
    e.container_id = ContainerIdFromCgroup(*cgroup);
  }
  return e;
}

void ProcReader::BeginSample() const {
  MutexLock lock(mu_);
  for (auto it = processes_.begin(); it != processes_.end();) {
    it = it->second.sample < sample_ ? processes_.erase(it) : std::next(it);
  }
  ++sample_;
}

void ProcReader::Fill(ProcessInfo& process) const {
  const auto now = clock_.SteadyNow();
  std::optional<Entry> entry;
  uint64_t sample = 0;
  {
    MutexLock lock(mu_);
    sample = sample_;
    auto it = processes_.find(process.pid);
    // Reusable only if filled in this sample or the previous one (the PID stayed on a GPU).
    if (it != processes_.end() && it->second.sample + 1 >= sample_ &&
        now - it->second.read_at < ttl_) {
      it->second.sample = sample_;
      entry = it->second;
    }
  }
  if (!entry) {
    entry = Read(process.pid);
    if (!entry) return;
    entry->read_at = now;
    entry->sample = sample;
    MutexLock lock(mu_);
    processes_[process.pid] = *entry;
  }
  if (entry->name) process.name = entry->name;
  if (entry->command) process.command = entry->command;
  if (entry->user) process.user = entry->user;
  if (entry->container_id) process.container_id = entry->container_id;
}

}  // namespace flyt::gpu
