#include "trace/attacher.h"

#include "common/unique_fd.h"

#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

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

// Closes the links' descriptors, each on a thread of its own: removing a link waits for the
// kernel's uprobe grace period, and the waits of several links overlap.
void CloseConcurrently(std::vector<UniqueFd>& links) {
  std::vector<std::thread> threads;
  for (UniqueFd& link : links) threads.emplace_back([&link] { link.Reset(); });
  for (std::thread& thread : threads) thread.join();
}

// BPF_LINK_CREATE for a multi-uprobe link (Linux 6.6): the layout of union bpf_attr's
// link_create.uprobe_multi, which the installed UAPI headers may predate.
constexpr int kBpfLinkCreate = 28;
constexpr uint32_t kBpfTraceUprobeMulti = 48;
constexpr uint32_t kBpfFUprobeMultiReturn = 1;
struct UprobeMultiAttr {
  uint32_t prog_fd;
  uint32_t target_fd;
  uint32_t attach_type;
  uint32_t flags;
  uint64_t path;
  uint64_t offsets;
  uint64_t ref_ctr_offsets;
  uint64_t cookies;
  uint32_t cnt;
  uint32_t multi_flags;
  uint32_t pid;
  uint32_t pad;
};

}  // namespace

Result<UniqueFd> UprobeMultiLink(bpf_program* program, const std::string& path,
                                 const std::vector<uint64_t>& offsets,
                                 const std::vector<uint64_t>& cookies, bool is_return) {
  UprobeMultiAttr attr{};
  attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(program));
  attr.attach_type = kBpfTraceUprobeMulti;
  attr.path = reinterpret_cast<uint64_t>(path.c_str());
  attr.offsets = reinterpret_cast<uint64_t>(offsets.data());
  attr.cookies = reinterpret_cast<uint64_t>(cookies.data());
  attr.cnt = static_cast<uint32_t>(offsets.size());
  attr.multi_flags = is_return ? kBpfFUprobeMultiReturn : 0;
  const long fd = ::syscall(SYS_bpf, kBpfLinkCreate, &attr, sizeof(attr));
  if (fd < 0) {
    const int err = errno;
    const char* name = strerrorname_np(err);
    return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                  name != nullptr ? name : std::to_string(err));
  }
  return UniqueFd(static_cast<int>(fd));
}

namespace {

}  // namespace

Attacher::Attacher(bpf_program* entry, bpf_program* ret, bpf_program* env)
    : entry_(entry), ret_(ret), env_(env) {}

Attacher::~Attacher() {
  // Entry probes first, so no call is left open by a return probe going away before it.
  std::vector<UniqueFd> entries;
  std::vector<UniqueFd> returns;
  for (auto& [link, is_return] : links_) (is_return ? returns : entries).push_back(std::move(link));
  CloseConcurrently(entries);
  CloseConcurrently(returns);
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
  // One multi-uprobe link per file and program (entry, return; libc's setenv/putenv: entry),
  // carrying every offset with its cookie: a file costs two links, not two per function, and
  // removing a link waits for the kernel's uprobe grace period once, not once per function.
  // The return link goes first, so no entry is recorded without its return probe in place.
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> cookies;
  for (const ProbePoint& p : c.probes) {
    offsets.push_back(p.offset);
    cookies.push_back(AttachCookie(p.func, *c.library));
  }
  size_t attached = 0;
  if (!offsets.empty()) {
    if (*c.library == LibraryClass::kLibc) {
      Result<UniqueFd> link = UprobeMultiLink(env_, open_path, offsets, cookies, false);
      if (link.ok()) {
        links_.emplace_back(std::move(*link), false);
        attached = offsets.size();
      } else {
        CountFailure(FailureReason("uprobe", link.status().code() == StatusCode::kNotFound
                                                 ? ENOENT : EINVAL));
      }
    } else {
      Result<UniqueFd> ret = UprobeMultiLink(ret_, open_path, offsets, cookies, true);
      if (!ret.ok()) {
        CountFailure("uretprobe: " + ret.status().message());
      } else {
        Result<UniqueFd> entry = UprobeMultiLink(entry_, open_path, offsets, cookies, false);
        if (!entry.ok()) {
          CountFailure("uprobe: " + entry.status().message());
        } else {
          links_.emplace_back(std::move(*ret), true);
          links_.emplace_back(std::move(*entry), false);
          attached = offsets.size();
        }
      }
    }
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
