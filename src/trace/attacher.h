// Puts the tracer's uprobes on files: once per inode (device, inode), whatever processes map the
// file and under whatever path, with pid = -1 so every process that maps it is traced. The
// uretprobes are attached before the uprobes (an entry without its return would leave a call
// open); probes that fail are counted by reason and skipped. A file that
// is not CUDA (an executable without the runtime) is remembered by inode too, so an exec of
// /bin/sh is examined once. A file that is gone (a library deleted mid-attach, a process that
// exited) gives one log line and an error the caller may ignore.
//
// Owns the bpf_links it creates (destroyed with it). Not thread-safe: the tracer calls it from
// its start-up and then from its drain thread only; Snapshot() copies are guarded by the tracer.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "trace/elf_symbols.h"

struct bpf_program;
struct bpf_link;

namespace flyt::trace {

struct AttachOutcome {
  bool cuda = false;           // the file carries probes (now or from before)
  bool newly_probed = false;   // this call attached them
  std::optional<LibraryClass> library;
  std::string unprobeable_reason;  // a CUDA program that cannot be probed
};

struct AttacherStats {
  uint64_t libraries_probed = 0;
  std::vector<std::string> libraries;
  std::map<std::string, uint64_t> attach_failures;
};

// Attaches `program` (loaded with expected attach type BPF_TRACE_UPROBE_MULTI) at every offset of
// the file at `path`, in every process, each offset with its cookie: one multi-uprobe link
// (Linux 6.6). NotFound when the file is gone; InvalidArgument with the errno name otherwise.
Result<UniqueFd> UprobeMultiLink(bpf_program* program, const std::string& path,
                                 const std::vector<uint64_t>& offsets,
                                 const std::vector<uint64_t>& cookies, bool is_return);

// The BPF programs probes are attached to; they belong to the caller's BPF object and outlive the
// Attacher.
struct AttachPrograms {
  bpf_program* entry = nullptr;     // the generic entry + return pair
  bpf_program* ret = nullptr;
  bpf_program* env = nullptr;       // setenv/putenv, entry (null: libc is not probed)
  bpf_program* launch = nullptr;    // kernel launches, entry only (null: the generic pair, and
                                    // their results)
  bpf_program* register_ = nullptr; // __cudaRegisterFunction, sleepable entry (null: the pair)
};

class Attacher {
 public:
  explicit Attacher(const AttachPrograms& programs);
  ~Attacher();
  Attacher(const Attacher&) = delete;
  Attacher& operator=(const Attacher&) = delete;

  // Examines `path` (a path this process can open: /proc/<pid>/root/..., /proc/<pid>/exe) and
  // probes it unless its inode was seen; `display_path` names it in logs and health. The file is
  // opened once and read and probed through that descriptor, so the process that named it may
  // exit meanwhile.
  Result<AttachOutcome> ProbeFile(const std::string& path, const std::string& display_path);

  const AttacherStats& stats() const { return stats_; }

 private:
  struct FileState {
    AttachOutcome outcome;
  };
  void CountFailure(const std::string& reason) { ++stats_.attach_failures[reason]; }

  AttachPrograms programs_;
  std::map<std::pair<dev_t, ino_t>, FileState> files_;
  std::vector<std::pair<UniqueFd, bool>> links_;  // (multi-uprobe link, is a return probe)
  AttacherStats stats_;
};

}  // namespace flyt::trace
