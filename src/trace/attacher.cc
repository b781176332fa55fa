#include "trace/attacher.h"

#include "common/strings.h"
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

Attacher::Attacher(const AttachPrograms& programs) : programs_(programs) {}

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
  if (!c.library || (*c.library == LibraryClass::kLibc && programs_.env == nullptr)) {
    files_[key].outcome = outcome;
    return outcome;
  }
  outcome.library = c.library;
  // One multi-uprobe link per file and program (entry, return, launch, register; libc's
  // setenv/putenv: entry), carrying every offset with its cookie: a file costs a few links, not
  // two per function, and removing a link waits for the kernel's uprobe grace period once, not
  // once per function. The return link goes before the entry link, so no entry is recorded
  // without its return probe in place. Kernel launches and __cudaRegisterFunction go to their
  // entry-only programs when there are — not a runtime linked into the executable's launches:
  // its code range is the program's too, so only the depth count of the generic pair tells its
  // own nested launches apart. Points whose entry-only link fails fall back to the generic pair.
  struct Points {
    std::vector<uint64_t> offsets;
    std::vector<uint64_t> cookies;
    void Add(uint64_t offset, uint64_t cookie) {
      offsets.push_back(offset);
      cookies.push_back(cookie);
    }
    void AddAll(const Points& other) {
      for (size_t i = 0; i < other.offsets.size(); ++i) Add(other.offsets[i], other.cookies[i]);
    }
  };
  Points generic;
  Points launches;
  Points registers;
  for (const ProbePoint& p : c.probes) {
    const uint64_t cookie = AttachCookie(p.func, *c.library, p.code_before, p.code_after);
    if (programs_.launch != nullptr && IsKernelLaunch(p.func) &&
        *c.library != LibraryClass::kStaticRuntime) {
      launches.Add(p.offset, cookie);
    } else if (programs_.register_ != nullptr && p.func == FLYT_FN___cudaRegisterFunction) {
      registers.Add(p.offset, cookie);
    } else {
      generic.Add(p.offset, cookie);
    }
  }
  // One link; counts the failure by `what` and returns false when it cannot be made.
  auto link = [&](bpf_program* program, const Points& points, bool is_return, const char* what) {
    if (points.offsets.empty()) return false;
    Result<UniqueFd> made =
        UprobeMultiLink(program, open_path, points.offsets, points.cookies, is_return);
    if (!made.ok()) {
      CountFailure(std::string(what) + ": " + made.status().message());
      return false;
    }
    links_.emplace_back(std::move(*made), is_return);
    return true;
  };
  size_t attached = 0;
  if (*c.library == LibraryClass::kLibc) {
    if (link(programs_.env, generic, false, "uprobe")) attached += generic.offsets.size();
  } else {
    if (link(programs_.launch, launches, false, "uprobe")) {
      attached += launches.offsets.size();
    } else {
      generic.AddAll(launches);
    }
    if (link(programs_.register_, registers, false, "uprobe")) {
      attached += registers.offsets.size();
    } else {
      generic.AddAll(registers);
    }
    if (link(programs_.ret, generic, true, "uretprobe")) {
      if (link(programs_.entry, generic, false, "uprobe")) {
        attached += generic.offsets.size();
      } else {
        // A return probe without its entry would only cost a trap on every call: dropped.
        links_.pop_back();
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
