// Finding the programs to trace: at start, the CUDA libraries of TraceOptions.library_dirs and a
// scan of /proc (every process's maps for libcudart*/libcuda.so*, its executable for a static
// runtime); afterwards the EXEC and LIBRARY_OPEN control records of the BPF side (that process's
// executable, the library it opened). Paths of other mount namespaces are opened through
// /proc/<pid>/root. A process whose library was probed after it mapped it is reported to the
// sink (OnAttachedLate); a CUDA program that cannot be probed is listed with the reason. An
// executable is read through /proc/<pid>/exe, or, once that process is gone, through the path its
// EXEC record names (under /proc/<pid>/root while that is there, else as given): a short-lived
// static program is then probed for its next run (the inode is remembered) and a stripped one is
// still reported, with its pid.
//
// Not thread-safe: used from the tracer's start-up, then from its drain thread only. Holds
// pointers to the attacher and the sink, which outlive it.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "trace/attacher.h"
#include "trace/service.h"
#include "trace/sink.h"
#include "trace/stats.h"

namespace flyt::trace {

// The library directories a dynamic loader configuration file names, its `include` lines (glob
// patterns, relative to the file's folder when not absolute) followed to a depth of 8, in order,
// without duplicates. A missing or unreadable file names none.
std::vector<std::string> LoaderConfigDirs(const std::string& conf);

class Discovery {
 public:
  Discovery(const TraceOptions& options, Attacher* attacher, RecordSink* sink);

  // library_dirs, the loader's configured directories, then /proc.
  void InitialScan();
  // An EXEC or LIBRARY_OPEN record (other kinds are ignored).
  void OnControlRecord(const void* data, size_t bytes);

  // The last unprobeable processes found (bounded).
  const std::deque<UnprobeableProcess>& unprobeable() const { return unprobeable_; }

 private:
  void ScanLibraryDir(const std::string& dir);
  void ScanProcess(uint32_t pid, bool at_start);
  // `exec_path` (the EXEC record's path; empty from the /proc scan) stands in for
  // /proc/<pid>/exe when the process is already gone, as a short program is by the time its
  // EXEC record is read.
  void ExamineExecutable(uint32_t pid, bool report_late, const std::string& exec_path = "");
  // Probes `path` as process `pid` names it; reports `pid` as late when `report_late`.
  void ExamineLibrary(uint32_t pid, const std::string& path, bool report_late);
  std::string ProcPath(uint32_t pid, const std::string& path) const;
  void AddUnprobeable(uint32_t pid, const std::string& executable, const std::string& reason);

  TraceOptions options_;
  Attacher* attacher_;
  RecordSink* sink_;
  uint32_t self_pid_;
  std::deque<UnprobeableProcess> unprobeable_;
};

}  // namespace flyt::trace
