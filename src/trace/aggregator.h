// The aggregator: turns the tracer's ring-buffer records (bpf/events.h) into per process × GPU
// statistics (ProcessCuda) and its share of the tracer's health.
//
// Records arrive through RecordSink on the tracer's one drain thread; Processes() and FillHealth()
// may be called from any thread. One lock guards the tables; /proc and the cgroup tree are read
// without it (only the drain thread reads them), so readers never wait on the file system.
//
// What it keeps, all bounded by TraceOptions: max_processes processes (live ones, and exited ones
// for exited_keep_seconds to show their leaks; the oldest exited one makes room first; beyond that
// new processes are dropped and counted), per process max_streams_per_process streams,
// max_allocations_per_process live allocations and max_kernel_names_per_process kernel names
// (what does not fit is counted in TracerHealth's dropped_* fields). A record that is shorter
// than its kind's struct, or of an unknown kind or function, is counted as malformed and dropped.
// A process is created on its first record. Its comm, environment (CUDA_VISIBLE_DEVICES,
// FLYT_SERVER...) and container are read from options.proc_root as soon as it opens a CUDA library
// (the LIBRARY_OPEN record wakes the drain thread at once, while the loader is still running), and
// kept aside until that first record: read only at the first record (drained up to a drain
// interval later), a program shorter than the interval would be gone, its environment with it.
// Even at the LIBRARY_OPEN the drain can come late (a loaded machine): the program may be gone,
// or a zombie whose environ reads empty. So the environment comes from the ENVIRON record the BPF
// side writes just before the LIBRARY_OPEN, copied from the process's memory while it opens the
// library; /proc is read for it only where that record is missing or was cut and /proc still
// has it. Likewise the name falls back to the exec's (exec_names_).
// Without a LIBRARY_OPEN (a static build, a late attachment) they are read at the first record.
// What is kept aside is bounded by max_processes and forgotten when the process execs or is gone.
// Kernel names of a process attached late (its __cudaRegisterFunction calls ran before the probes)
// are looked up by address: /proc/<pid>/maps is read when the late attachment is reported, and a
// launch's unnamed host stub is resolved to the symbol of the file mapped there (StubSymbolizer).
// A process ends on its EXIT record, or when it is gone from proc_root (checked every ~2 s at the
// end of a drain pass; ended so, it has no exit code).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "trace/containers.h"
#include "trace/process.h"
#include "trace/service.h"
#include "trace/sink.h"
#include "trace/stats.h"

namespace flyt::trace {

class Aggregator : public RecordSink {
 public:
  explicit Aggregator(const TraceOptions& options, const Clock& clock = SystemClock::Instance());
  ~Aggregator() override;
  Aggregator(const Aggregator&) = delete;
  Aggregator& operator=(const Aggregator&) = delete;

  // The node's GPUs (NVML order) for the device → GPU mapping and the cores of core usage.
  void SetGpus(std::vector<GpuIdentity> gpus) FLYT_EXCLUDES(mu_);
  // NVML's process list (pid → GPU or MIG UUIDs), the cross-check of the traced selection.
  void SetNvmlProcesses(std::map<uint32_t, std::set<std::string>> processes) FLYT_EXCLUDES(mu_);

  // Every process × GPU: live processes, then the exited ones still kept.
  std::vector<ProcessCuda> Processes() const FLYT_EXCLUDES(mu_);
  // processes_traced/tracked, dropped_*, malformed_records, nvml_mismatches; the rest of
  // `health` (the tracer's own fields) is left as it is.
  void FillHealth(TracerHealth* health) const FLYT_EXCLUDES(mu_);

  // RecordSink (the drain thread).
  void OnRecord(const void* data, size_t bytes) override FLYT_EXCLUDES(mu_);
  void OnAttachedLate(uint32_t pid, const std::string& library) override FLYT_EXCLUDES(mu_);
  void OnDrainEnd() override FLYT_EXCLUDES(mu_);

 private:
  struct Exited {
    uint32_t pid = 0;
    uint64_t exit_ns = 0;     // CLOCK_MONOTONIC
    uint64_t expires_ns = 0;
    std::vector<ProcessCuda> entries;
  };
  // The environment an ENVIRON record carried (complete: not cut).
  struct CapturedEnv {
    CudaEnv env;
    bool complete = false;
  };
  struct NewProcess {
    std::string comm;
    CudaEnv env;
    std::string container_id;
    uint64_t cgroup_id = 0;
  };
  // What a process that opened a CUDA library but has no record yet will start with.
  struct Pending {
    NewProcess info;
    std::string library;  // the CUDA library it opened (libcudart preferred)
  };

  uint64_t NowNs() const;
  SnapshotContext Context() const FLYT_REQUIRES(mu_);
  // Reads what a new process needs from /proc and the cgroup tree (drain thread, no lock); the
  // environment from `captured` where there is one (complete, or /proc has none).
  NewProcess ReadNewProcess(uint32_t pid, uint64_t cgroup_id,
                            const CapturedEnv* captured = nullptr);
  // An ENVIRON record: kept until the LIBRARY_OPEN that follows it (drain thread).
  void NoteEnviron(const void* data, size_t bytes) FLYT_EXCLUDES(mu_);
  // The process's table entry, created when there is room (nullptr: dropped).
  TracedProcess* FindOrCreate(uint32_t pid, uint64_t cgroup_id, uint64_t ts_ns)
      FLYT_EXCLUDES(mu_);
  void NoteExecName(uint32_t pid, const flyt_trace_path& record);  // drain thread
  bool MakeRoom() FLYT_REQUIRES(mu_);
  // A LIBRARY_OPEN of a process not tracked yet: reads what it will start with (drain thread).
  void KeepAside(const flyt_trace_header& h, const flyt_trace_path& r,
                 const CapturedEnv* captured) FLYT_EXCLUDES(mu_);
  // A launch of a process attached late whose kernel is not named yet: the host stub's symbol,
  // looked up in the file mapped there (drain thread; files read without the lock).
  void NameLateStub(TracedProcess* process, const flyt_trace_launch& r) FLYT_EXCLUDES(mu_);
  // A __cudaRegisterFunction whose name the BPF side could not read (the string's page not yet
  // in memory: the runtime stores the pointer without touching it): the host stub's symbol, looked
  // up in the file mapped there, the mappings re-read when they do not cover it (drain thread).
  void NameUnreadStub(TracedProcess* process, uint32_t pid, uint64_t stub) FLYT_EXCLUDES(mu_);
  // The executable mappings of a process (read while it runs).
  std::vector<FileMapping> ReadMappings(uint32_t pid);
  void End(uint32_t pid, std::optional<int32_t> exit_code, uint64_t ts_ns) FLYT_REQUIRES(mu_);
  // A record of `pid` just after its exit (another thread's last calls): not a new process.
  bool JustExited(uint32_t pid, uint64_t ts_ns) const FLYT_REQUIRES(mu_);
  std::vector<ProcessCuda> ProcessesLocked() const FLYT_REQUIRES(mu_);

  const TraceOptions options_;
  const Clock& clock_;

  mutable Mutex mu_;
  GpuTable gpus_ FLYT_GUARDED_BY(mu_);
  std::map<uint32_t, std::set<std::string>> nvml_ FLYT_GUARDED_BY(mu_);
  std::unordered_map<uint32_t, std::unique_ptr<TracedProcess>> live_ FLYT_GUARDED_BY(mu_);
  std::deque<Exited> exited_ FLYT_GUARDED_BY(mu_);  // oldest first
  uint64_t drains_ FLYT_GUARDED_BY(mu_) = 0;        // OnDrainEnd calls so far
  std::unordered_set<uint32_t> refused_ FLYT_GUARDED_BY(mu_);  // dropped for lack of room
  DropCounters drops_ FLYT_GUARDED_BY(mu_);
  uint64_t processes_traced_ FLYT_GUARDED_BY(mu_) = 0;
  uint64_t dropped_processes_ FLYT_GUARDED_BY(mu_) = 0;
  uint64_t malformed_records_ FLYT_GUARDED_BY(mu_) = 0;

  // Drain thread only.
  CgroupResolver cgroups_;
  StubSymbolizer symbols_;
  uint64_t next_liveness_check_ns_ = 0;
  std::unordered_set<uint32_t> missing_once_;  // gone at the last check: ended at the next
  std::unordered_map<uint32_t, Pending> pending_;  // by pid, at most max_processes
  // The program each pid last exec'd, as its comm would read (the basename, 15 bytes): the name of
  // a process already gone from /proc when it is first read. Drain thread only; bounded.
  std::unordered_map<uint32_t, std::string> exec_names_;
  std::unordered_set<uint32_t> pending_missing_once_;
  // The environment of each pid's last ENVIRON record not yet taken by its LIBRARY_OPEN. Drain
  // thread only; bounded like exec_names_.
  std::unordered_map<uint32_t, CapturedEnv> environs_;
};

}  // namespace flyt::trace
