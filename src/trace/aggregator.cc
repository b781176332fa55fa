#include "trace/aggregator.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>

#include "common/status.h"
#include "common/strings.h"
#include "trace/devices.h"
#include "trace/raw_record.h"

namespace flyt::trace {
namespace {

constexpr uint64_t kNsPerSecond = 1000000000ull;
constexpr uint64_t kLivenessIntervalNs = 2 * kNsPerSecond;
constexpr uint64_t kStragglerNs = kNsPerSecond;  // records of a pid this soon after its EXIT
constexpr size_t kMaxRefused = 65536;
constexpr size_t kMaxCommBytes = 4096;
constexpr size_t kMaxEnvironBytes = 4u << 20;

// The struct a kind's record must hold at least.
size_t RecordSize(uint16_t kind) {
  switch (kind) {
    case FLYT_EV_LAUNCH: return sizeof(flyt_trace_launch);
    case FLYT_EV_ALLOC: return sizeof(flyt_trace_alloc);
    case FLYT_EV_FREE: return sizeof(flyt_trace_free);
    case FLYT_EV_COPY:
    case FLYT_EV_MEMSET: return sizeof(flyt_trace_copy);
    case FLYT_EV_SYNC: return sizeof(flyt_trace_sync);
    case FLYT_EV_EVENT_RECORD: return sizeof(flyt_trace_event_record);
    case FLYT_EV_STREAM_CREATE:
    case FLYT_EV_STREAM_DESTROY: return sizeof(flyt_trace_stream);
    case FLYT_EV_SET_DEVICE: return sizeof(flyt_trace_set_device);
    case FLYT_EV_REGISTER_FUNCTION:
    case FLYT_EV_MODULE_FUNCTION: return sizeof(flyt_trace_name);
    case FLYT_EV_GET_KERNEL: return sizeof(flyt_trace_get_kernel);
    case FLYT_EV_SETENV: return sizeof(flyt_trace_env);
    case FLYT_EV_EXEC:
    case FLYT_EV_LIBRARY_OPEN: return sizeof(flyt_trace_path);
    case FLYT_EV_EXIT: return sizeof(flyt_trace_header);
    default: return 0;
  }
}

bool IsControl(uint16_t kind) {
  return kind == FLYT_EV_EXEC || kind == FLYT_EV_LIBRARY_OPEN || kind == FLYT_EV_EXIT;
}

// Every record fits here, aligned, whatever the alignment of the ring buffer's bytes.
union RecordBuffer {
  flyt_trace_header header;
  flyt_trace_launch launch;
  flyt_trace_alloc alloc;
  flyt_trace_free free;
  flyt_trace_copy copy;
  flyt_trace_sync sync;
  flyt_trace_event_record event_record;
  flyt_trace_stream stream;
  flyt_trace_set_device set_device;
  flyt_trace_get_kernel get_kernel;
  flyt_trace_name name;
  flyt_trace_env env;
  flyt_trace_path path;
};

// The record in `buffer`, or false when it is malformed.
bool Validate(const void* data, size_t bytes, RecordBuffer* buffer) {
  if (data == nullptr || bytes < sizeof(flyt_trace_header)) return false;
  std::memcpy(&buffer->header, data, sizeof(flyt_trace_header));
  const flyt_trace_header& h = buffer->header;
  size_t need = RecordSize(h.kind);
  if (need == 0 || bytes < need || h.pid == 0) return false;
  std::memcpy(buffer, data, need);
  if (!IsControl(h.kind) && flyt_trace_kind_of(h.func) != h.kind) return false;
  switch (h.kind) {
    case FLYT_EV_ALLOC: return buffer->alloc.memory <= FLYT_MEM_HOST_PINNED;
    case FLYT_EV_FREE: return buffer->free.memory <= FLYT_MEM_HOST_PINNED;
    case FLYT_EV_COPY:
    case FLYT_EV_MEMSET: return buffer->copy.copy_kind <= FLYT_COPY_DEFAULT;
    default: return true;
  }
}

}  // namespace

Aggregator::Aggregator(const TraceOptions& options, const Clock& clock)
    : options_(options), clock_(clock), cgroups_(options.cgroup_root) {}

Aggregator::~Aggregator() = default;

uint64_t Aggregator::NowNs() const {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   clock_.SteadyNow().time_since_epoch())
                                   .count());
}

void Aggregator::SetGpus(std::vector<GpuIdentity> gpus) {
  MutexLock lock(mu_);
  gpus_.gpus = std::move(gpus);
  ++gpus_.version;
}

void Aggregator::SetNvmlProcesses(std::map<uint32_t, std::set<std::string>> processes) {
  MutexLock lock(mu_);
  nvml_ = std::move(processes);
}

SnapshotContext Aggregator::Context() const {
  SnapshotContext ctx;
  ctx.gpus = &gpus_;
  ctx.nvml = &nvml_;
  ctx.now_ns = NowNs();
  ctx.wall_at_now = clock_.WallNow();
  return ctx;
}

std::vector<ProcessCuda> Aggregator::ProcessesLocked() const {
  SnapshotContext ctx = Context();
  std::vector<uint32_t> pids;
  pids.reserve(live_.size());
  for (const auto& [pid, p] : live_) pids.push_back(pid);
  std::sort(pids.begin(), pids.end());
  std::vector<ProcessCuda> out;
  for (uint32_t pid : pids) {
    std::vector<ProcessCuda> entries = live_.at(pid)->Snapshot(ctx);
    std::move(entries.begin(), entries.end(), std::back_inserter(out));
  }
  for (const Exited& e : exited_) {
    if (e.expires_ns > ctx.now_ns) out.insert(out.end(), e.entries.begin(), e.entries.end());
  }
  return out;
}

std::vector<ProcessCuda> Aggregator::Processes() const {
  MutexLock lock(mu_);
  return ProcessesLocked();
}

void Aggregator::FillHealth(TracerHealth* health) const {
  MutexLock lock(mu_);
  health->processes_traced = processes_traced_;
  health->processes_tracked = live_.size() + exited_.size();
  health->dropped_processes = dropped_processes_;
  health->dropped_streams = drops_.streams;
  health->dropped_allocations = drops_.allocations;
  health->dropped_kernel_names = drops_.kernel_names;
  health->malformed_records = malformed_records_;
  uint64_t mismatches = 0;
  if (!nvml_.empty()) {
    for (const ProcessCuda& p : ProcessesLocked()) mismatches += p.nvml_mismatch ? 1 : 0;
  }
  health->nvml_mismatches = mismatches;
}

Aggregator::NewProcess Aggregator::ReadNewProcess(uint32_t pid, uint64_t cgroup_id,
                                                  const CapturedEnv* captured) {
  NewProcess out;
  std::string dir = options_.proc_root + "/" + std::to_string(pid);
  if (Result<std::string> comm = ReadFile(dir + "/comm", kMaxCommBytes); comm.ok()) {
    out.comm = SanitizeUtf8(Trim(*comm));
  } else if (auto it = exec_names_.find(pid); it != exec_names_.end()) {
    out.comm = it->second;  // gone already: the name its exec gave it
  }
  // The environment copied while the process opened the library is what /proc showed then; /proc
  // now may show nothing (gone, or a zombie: its environ reads empty).
  if (captured != nullptr && captured->complete) {
    out.env = captured->env;
  } else if (Result<std::string> env_text = ReadFile(dir + "/environ", kMaxEnvironBytes);
             env_text.ok() && !env_text->empty()) {
    out.env = ParseEnviron(*env_text);
  } else if (captured != nullptr) {
    out.env = captured->env;  // cut, but what there is
  }
  if (cgroup_id == 0) {
    // No record yet (a late attachment found by the /proc scan): the cgroup v2 line of
    // /proc/<pid>/cgroup ("0::/path") names the directory.
    if (Result<std::string> cgroup = ReadFile(dir + "/cgroup", kMaxCommBytes); cgroup.ok()) {
      for (std::string_view line : Split(*cgroup, '\n')) {
        if (!StartsWith(line, "0::")) continue;
        std::string path(line.substr(3));
        struct stat st {};
        if (::stat((options_.cgroup_root + path).c_str(), &st) == 0) {
          out.cgroup_id = static_cast<uint64_t>(st.st_ino);
        }
        out.container_id = ContainerIdFromCgroupPath(path);
      }
    }
    return out;
  }
  out.cgroup_id = cgroup_id;
  out.container_id = cgroups_.ContainerId(cgroup_id);
  return out;
}

void Aggregator::NoteExecName(uint32_t pid, const flyt_trace_path& r) {
  constexpr size_t kCommBytes = 15;  // TASK_COMM_LEN - 1: what /proc/<pid>/comm holds
  std::string_view path(r.path, strnlen(r.path, sizeof(r.path)));
  const size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  // Every exec on the machine comes here; only the recent ones can still be asked for.
  if (exec_names_.size() >= 4 * static_cast<size_t>(options_.max_processes)) exec_names_.clear();
  exec_names_[pid] = SanitizeUtf8(std::string(base.substr(0, kCommBytes)));
}

bool Aggregator::MakeRoom() {
  if (live_.size() + exited_.size() < options_.max_processes) return true;
  if (exited_.empty()) return false;
  exited_.pop_front();
  return true;
}

bool Aggregator::JustExited(uint32_t pid, uint64_t ts_ns) const {
  return std::any_of(exited_.begin(), exited_.end(), [&](const Exited& e) {
    return e.pid == pid && ts_ns <= e.exit_ns + kStragglerNs;
  });
}

TracedProcess* Aggregator::FindOrCreate(uint32_t pid, uint64_t cgroup_id, uint64_t ts_ns) {
  {
    MutexLock lock(mu_);
    if (auto it = live_.find(pid); it != live_.end()) return it->second.get();
    if (refused_.count(pid) > 0 || JustExited(pid, ts_ns)) return nullptr;
  }
  // Only this (the drain) thread adds processes, so the pid is still absent after the unlock.
  NewProcess info;
  std::string library;
  if (auto it = pending_.find(pid); it != pending_.end()) {
    info = std::move(it->second.info);
    library = std::move(it->second.library);
    pending_.erase(it);
  } else {
    info = ReadNewProcess(pid, cgroup_id);
  }
  MutexLock lock(mu_);
  if (!MakeRoom()) {
    ++dropped_processes_;
    if (refused_.size() < kMaxRefused) refused_.insert(pid);
    return nullptr;
  }
  ++processes_traced_;
  auto process = std::make_unique<TracedProcess>(pid, std::move(info.comm), std::move(info.env),
                                                 info.cgroup_id, std::move(info.container_id),
                                                 options_, ts_ns);
  if (!library.empty()) process->NoteLibrary(library);
  return live_.emplace(pid, std::move(process)).first->second.get();
}

void Aggregator::NoteEnviron(const void* data, size_t bytes) {
  flyt_trace_header h;
  std::memcpy(&h, data, sizeof(h));  // the caller checked the size
  std::optional<std::string_view> text = EnvironText(data, bytes);
  if (!text || h.pid == 0) {
    MutexLock lock(mu_);
    ++malformed_records_;
    return;
  }
  // Taken by the LIBRARY_OPEN right behind it: only a lost one leaves an entry behind.
  if (environs_.size() >= static_cast<size_t>(options_.max_processes)) environs_.clear();
  const bool cut = (h.flags & FLYT_F_TRUNCATED) != 0;
  environs_[h.pid] = CapturedEnv{ParseEnviron(*text, cut), !cut};
}

void Aggregator::KeepAside(const flyt_trace_header& h, const flyt_trace_path& r,
                           const CapturedEnv* captured) {
  std::string path(r.path, strnlen(r.path, sizeof(r.path)));
  if (auto it = pending_.find(h.pid); it != pending_.end()) {
    if (it->second.library.empty() || path.find("cudart") != std::string::npos) {
      it->second.library = std::move(path);
    }
    return;
  }
  {
    MutexLock lock(mu_);
    if (refused_.count(h.pid) > 0) return;
  }
  if (pending_.size() >= options_.max_processes) return;  // read at its first record instead
  Pending p;
  p.info = ReadNewProcess(h.pid, h.cgroup_id, captured);
  p.library = std::move(path);
  pending_.emplace(h.pid, std::move(p));
}

void Aggregator::End(uint32_t pid, std::optional<int32_t> exit_code, uint64_t ts_ns) {
  auto it = live_.find(pid);
  if (it == live_.end()) return;
  SnapshotContext ctx = Context();
  ctx.exited = true;
  ctx.exit_code = exit_code;
  Exited e;
  e.pid = pid;
  e.exit_ns = ts_ns;
  e.expires_ns = ctx.now_ns + static_cast<uint64_t>(options_.exited_keep_seconds) * kNsPerSecond;
  e.entries = it->second->Snapshot(ctx);
  live_.erase(it);
  if (options_.exited_keep_seconds > 0) exited_.push_back(std::move(e));
}

void Aggregator::OnRecord(const void* data, size_t bytes) {
  if (data != nullptr && bytes >= sizeof(flyt_trace_header)) {
    uint16_t kind = 0;
    std::memcpy(&kind, static_cast<const char*>(data) + offsetof(flyt_trace_header, kind),
                sizeof(kind));
    // Larger than every other record together: read in place, not copied into RecordBuffer.
    if (kind == FLYT_EV_ENVIRON) return NoteEnviron(data, bytes);
  }
  RecordBuffer record;
  if (!Validate(data, bytes, &record)) {
    MutexLock lock(mu_);
    ++malformed_records_;
    return;
  }
  const flyt_trace_header& h = record.header;
  // The environment written just before this open, taken whatever happens to the open.
  std::optional<CapturedEnv> captured;
  if (h.kind == FLYT_EV_LIBRARY_OPEN) {
    if (auto it = environs_.find(h.pid); it != environs_.end()) {
      captured = std::move(it->second);
      environs_.erase(it);
    }
  }
  if (IsControl(h.kind)) {
    MutexLock lock(mu_);
    if (h.kind == FLYT_EV_EXIT) {
      End(h.pid, h.rc, h.ts_ns);
      exec_names_.erase(h.pid);
      refused_.erase(h.pid);
      pending_.erase(h.pid);
      environs_.erase(h.pid);
      return;
    }
    if (h.kind == FLYT_EV_EXEC) {
      // The program image is replaced: the CUDA state of the old one is gone with it.
      NoteExecName(h.pid, record.path);
      End(h.pid, std::nullopt, h.ts_ns);
      refused_.erase(h.pid);
      pending_.erase(h.pid);
      environs_.erase(h.pid);
      return;
    }
    if (auto it = live_.find(h.pid); it != live_.end()) {
      it->second->Apply(h, &record, gpus_, &drops_);
      return;
    }
  }
  if (h.kind == FLYT_EV_LIBRARY_OPEN) {
    KeepAside(h, record.path, captured ? &*captured : nullptr);
    return;
  }
  const bool unread_name = h.kind == FLYT_EV_REGISTER_FUNCTION && record.name.name[0] == 0;
  TracedProcess* process = nullptr;
  {
    // The common case, one lock: a process already tracked.
    MutexLock lock(mu_);
    if (auto it = live_.find(h.pid); it != live_.end()) {
      process = it->second.get();
      if ((h.kind != FLYT_EV_LAUNCH || !process->HasMappings()) && !unread_name) {
        process->Apply(h, &record, gpus_, &drops_);
        return;
      }
    }
  }
  // Only this (the drain) thread adds or ends processes: `process` stays valid without the lock.
  if (process == nullptr) process = FindOrCreate(h.pid, h.cgroup_id, h.ts_ns);
  if (process == nullptr) return;
  if (h.kind == FLYT_EV_LAUNCH) NameLateStub(process, record.launch);
  if (unread_name) NameUnreadStub(process, h.pid, record.name.address);
  MutexLock lock(mu_);
  process->Apply(h, &record, gpus_, &drops_);
}

void Aggregator::NameLateStub(TracedProcess* process, const flyt_trace_launch& r) {
  std::optional<uint64_t> stub;
  std::vector<FileMapping> mappings;
  {
    MutexLock lock(mu_);
    if (!process->HasMappings()) return;
    stub = process->StubToLookUp(r);
    if (!stub) return;
    mappings = process->mappings();
  }
  std::optional<std::string> mangled = symbols_.Lookup(mappings, *stub);
  MutexLock lock(mu_);
  process->NameStub(*stub, mangled, &drops_);
}

void Aggregator::NameUnreadStub(TracedProcess* process, uint32_t pid, uint64_t stub) {
  std::vector<FileMapping> mappings;
  bool reread = false;
  {
    MutexLock lock(mu_);
    // Each stub once, within the per-process bound on names: a library registering thousands
    // of kernels costs one lookup each, not one per record.
    mappings = process->mappings();
    const bool covered = std::any_of(mappings.begin(), mappings.end(), [&](const FileMapping& m) {
      return stub >= m.start && stub < m.end;
    });
    // Not mapped when last read (a library loaded since), or never read (traced from its
    // start): the mappings are read again, at most once per drain. Otherwise the stub waits
    // (unclaimed) for its first launch, named then through the mappings it has.
    reread = !covered && process->maps_read_drain() != drains_;
    if (!covered && !reread) return;
    if (!process->ClaimStubLookUp(stub)) return;
    if (reread) process->set_maps_read_drain(drains_);
  }
  if (reread) {
    std::vector<FileMapping> fresh = ReadMappings(pid);
    if (!fresh.empty()) {
      mappings = fresh;
      MutexLock lock(mu_);
      process->SetMappings(std::move(fresh));
    }
  }
  std::optional<std::string> mangled = symbols_.Lookup(mappings, stub);
  MutexLock lock(mu_);
  process->NameStub(stub, mangled, &drops_);
}

std::vector<FileMapping> Aggregator::ReadMappings(uint32_t pid) {
  std::string dir = options_.proc_root + "/" + std::to_string(pid);
  Result<std::string> maps = ReadFile(dir + "/maps", kMaxEnvironBytes);
  if (!maps.ok()) return {};
  std::vector<FileMapping> out = ParseMaps(*maps);
  // A process in another mount namespace names its files from its own root.
  std::error_code ec;
  std::filesystem::path root = std::filesystem::read_symlink(dir + "/root", ec);
  if (!ec && root != "/") {
    for (FileMapping& m : out) m.path = dir + "/root" + m.path;
  }
  return out;
}

void Aggregator::OnAttachedLate(uint32_t pid, const std::string& library) {
  if (pid == 0) return;
  // No record carries the cgroup id here: ReadNewProcess reads /proc/<pid>/cgroup instead.
  TracedProcess* process = FindOrCreate(pid, 0, NowNs());
  if (process == nullptr) return;
  std::vector<FileMapping> mappings = ReadMappings(pid);
  MutexLock lock(mu_);
  process->SetAttachedLate(library);
  if (!process->HasMappings()) process->SetMappings(std::move(mappings));
}

void Aggregator::OnDrainEnd() {
  uint64_t now = NowNs();
  std::vector<uint32_t> pids;
  {
    MutexLock lock(mu_);
    ++drains_;
    while (!exited_.empty() && exited_.front().expires_ns <= now) exited_.pop_front();
    if (now < next_liveness_check_ns_) return;
    next_liveness_check_ns_ = now + kLivenessIntervalNs;
    for (const auto& [pid, p] : live_) pids.push_back(pid);
  }
  std::vector<uint32_t> gone;
  std::unordered_set<uint32_t> missing;
  for (uint32_t pid : pids) {
    struct stat st {};
    std::string path = options_.proc_root + "/" + std::to_string(pid);
    if (::stat(path.c_str(), &st) == 0 || errno != ENOENT) continue;
    // Gone twice in a row: its EXIT record, if it had one, would have been drained by now.
    if (missing_once_.count(pid) > 0) {
      gone.push_back(pid);
    } else {
      missing.insert(pid);
    }
  }
  missing_once_ = std::move(missing);
  // What was kept aside for a process that never made a CUDA call and is gone (twice in a row, as
  // above: its records, if any, have been drained).
  std::unordered_set<uint32_t> pending_missing;
  for (auto it = pending_.begin(); it != pending_.end();) {
    struct stat st {};
    std::string path = options_.proc_root + "/" + std::to_string(it->first);
    if (::stat(path.c_str(), &st) == 0 || errno != ENOENT) {
      ++it;
    } else if (pending_missing_once_.count(it->first) > 0) {
      it = pending_.erase(it);
    } else {
      pending_missing.insert(it->first);
      ++it;
    }
  }
  pending_missing_once_ = std::move(pending_missing);
  if (gone.empty()) return;
  MutexLock lock(mu_);
  for (uint32_t pid : gone) End(pid, std::nullopt, now);
}

}  // namespace flyt::trace
