#include "trace/attacher.h"

#include "common/unique_fd.h"

#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace flyt::trace {
namespace {

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "uprobe: ENOENT"-style keys keep the failure map small and stable.
std::string FailureReason(const char* what, int err) {
  const char* name = strerrorname_np(err);
  return std::string(what) + ": " + (name != nullptr ? name : std::to_string(err).c_str());
}

}  // namespace

Attacher::Attacher(bpf_program* entry, bpf_program* ret, bpf_program* env)
    : entry_(entry), ret_(ret), env_(env) {}

Attacher::~Attacher() {
  // Entry probes first, so no call is left open by a return probe going away before it.
  for (auto it = links_.rbegin(); it != links_.rend(); ++it) bpf_link__destroy(*it);
}

Result<AttachOutcome> Attacher::ProbeFile(const std::string& path,
                                          const std::string& display_path) {
  // The file is held open while it is read and probed, and named through that descriptor: a
  // path under /proc/<pid>/root vanishes when that process exits, which a short-lived program
  // does while its probes are being attached; the inode stays.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    int err = errno;
    spdlog::debug("trace: {} is gone before it could be examined ({})", display_path,
                 std::strerror(err));
    return ErrnoError("open " + display_path, err);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + display_path, errno);
  const std::string open_path = "/proc/self/fd/" + std::to_string(fd.get());
  auto key = std::make_pair(st.st_dev, st.st_ino);
  if (auto it = files_.find(key); it != files_.end()) {
    AttachOutcome seen = it->second.outcome;
    seen.newly_probed = false;
    return seen;
  }
  Result<ElfInfo> info = ReadElfInfo(open_path);
  if (!info.ok()) {
    // Not remembered when the file vanished (it may come back); a malformed file is.
    if (info.status().code() == StatusCode::kInvalidArgument) files_[key] = {};
    spdlog::info("trace: not probing {}: {}", display_path, info.status().message());
    return info.status();
  }
  Classification c = Classify(Basename(display_path), *info);
  AttachOutcome outcome;
  outcome.unprobeable_reason = c.unprobeable_reason;
  if (!c.library || (*c.library == LibraryClass::kLibc && env_ == nullptr)) {
    files_[key].outcome = outcome;
    return outcome;
  }
  outcome.library = c.library;
  size_t attached = 0;
  for (const ProbePoint& p : c.probes) {
    bpf_uprobe_opts opts{};  // LIBBPF_OPTS uses C extensions that -Wpedantic refuses in C++
    opts.sz = sizeof(opts);
    opts.bpf_cookie = AttachCookie(p.func, *c.library);
    if (*c.library == LibraryClass::kLibc) {
      bpf_link* link = bpf_program__attach_uprobe_opts(env_, -1, open_path.c_str(), p.offset,
                                                      &opts);
      if (link == nullptr) {
        CountFailure(FailureReason("uprobe", errno));
        continue;
      }
      links_.push_back(link);
      ++attached;
      continue;
    }
    opts.retprobe = true;
    bpf_link* ret = bpf_program__attach_uprobe_opts(ret_, -1, open_path.c_str(), p.offset, &opts);
    if (ret == nullptr) {
      int err = errno;
      CountFailure(FailureReason("uretprobe", err));
      if (err == ENOENT) {
        spdlog::info("trace: {} disappeared while its probes were attached", display_path);
        break;
      }
      continue;
    }
    opts.retprobe = false;
    bpf_link* entry =
        bpf_program__attach_uprobe_opts(entry_, -1, open_path.c_str(), p.offset, &opts);
    if (entry == nullptr) {
      CountFailure(FailureReason("uprobe", errno));
      bpf_link__destroy(ret);
      continue;
    }
    links_.push_back(ret);
    links_.push_back(entry);
    ++attached;
  }
  if (attached == 0) {
    spdlog::info("trace: no probe could be attached to {}", display_path);
    files_[key].outcome = outcome;
    return outcome;
  }
  outcome.cuda = true;
  outcome.newly_probed = true;
  files_[key].outcome = outcome;
  ++stats_.libraries_probed;
  stats_.libraries.push_back(display_path);
  spdlog::debug("trace: probed {} ({}, {} functions)", display_path,
                LibraryClassName(static_cast<uint16_t>(*c.library)), attached);
  return outcome;
}

}  // namespace flyt::trace
