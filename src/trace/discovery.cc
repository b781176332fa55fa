#include "trace/discovery.h"

#include <glob.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>

#include "common/strings.h"

namespace flyt::trace {
namespace {

constexpr size_t kMaxUnprobeable = 256;

bool IsCudaLibraryName(const std::string& basename) {
  std::optional<LibraryClass> c = ClassByName(basename);
  return c && *c != LibraryClass::kLibc;
}

// The file paths a process maps (the sixth column of /proc/<pid>/maps), without duplicates.
std::vector<std::string> MappedFiles(const std::string& maps_path) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::ifstream in(maps_path);
  std::string line;
  while (std::getline(in, line)) {
    size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (path.size() > 10 && path.ends_with(" (deleted)")) continue;
    if (seen.insert(path).second) out.push_back(path);
  }
  return out;
}

void AddLoaderConfigDirs(const std::string& conf, int depth, std::vector<std::string>* dirs,
                         std::set<std::string>* seen) {
  if (depth > 8) return;
  std::ifstream in(conf);
  std::string line;
  const std::string folder = std::filesystem::path(conf).parent_path().string();
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos) continue;
    line = line.substr(begin, line.find_last_not_of(" \t\r") + 1 - begin);
    if (line.starts_with("include") && line.size() > 7 && (line[7] == ' ' || line[7] == '\t')) {
      std::string pattern = line.substr(line.find_first_not_of(" \t", 7));
      if (pattern[0] != '/') pattern = folder + "/" + pattern;
      glob_t g{};
      if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i) {
          AddLoaderConfigDirs(g.gl_pathv[i], depth + 1, dirs, seen);
        }
      }
      ::globfree(&g);
      continue;
    }
    if (line[0] != '/') continue;  // hwcap lines and the like
    // Old loaders allowed "dir=TYPE" and several directories on a line.
    for (size_t at = 0; at < line.size();) {
      size_t end = line.find_first_of(" \t,:", at);
      if (end == std::string::npos) end = line.size();
      std::string dir = line.substr(at, end - at);
      dir = dir.substr(0, dir.find('='));
      if (!dir.empty() && dir[0] == '/' && seen->insert(dir).second) dirs->push_back(dir);
      at = end + 1;
    }
  }
}

}  // namespace

std::vector<std::string> LoaderConfigDirs(const std::string& conf) {
  std::vector<std::string> dirs;
  std::set<std::string> seen;
  AddLoaderConfigDirs(conf, 0, &dirs, &seen);
  return dirs;
}

Discovery::Discovery(const TraceOptions& options, Attacher* attacher, RecordSink* sink)
    : options_(options), attacher_(attacher), sink_(sink),
      self_pid_(static_cast<uint32_t>(::getpid())) {}

void Discovery::InitialScan() {
  std::set<std::string> scanned;
  for (const std::string& dir : options_.library_dirs) {
    if (scanned.insert(dir).second) ScanLibraryDir(dir);
  }
  if (!options_.ld_so_conf.empty()) {
    for (const std::string& dir : LoaderConfigDirs(options_.ld_so_conf)) {
      if (scanned.insert(dir).second) ScanLibraryDir(dir);
    }
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.proc_root, ec)) {
    std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    uint32_t pid = static_cast<uint32_t>(std::stoul(name));
    if (pid == self_pid_) continue;
    ScanProcess(pid, /*at_start=*/true);
  }
  if (ec) spdlog::warn("trace: cannot list {}: {}", options_.proc_root, ec.message());
}

void Discovery::ScanLibraryDir(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string base = entry.path().filename().string();
    std::optional<LibraryClass> c = ClassByName(base);
    if (!c) continue;
    // Only libcuda.so.1 of the driver (libcuda.so is its development link).
    if (*c == LibraryClass::kDriver && base != "libcuda.so.1") continue;
    if (*c == LibraryClass::kLibc && (base != "libc.so.6" || !options_.watch_setenv)) continue;
    (void)attacher_->ProbeFile(entry.path().string(), entry.path().string());
  }
}

std::string Discovery::ProcPath(uint32_t pid, const std::string& path) const {
  std::string proc = options_.proc_root + "/" + std::to_string(pid);
  if (!path.empty() && path[0] == '/') return proc + "/root" + path;
  return proc + "/cwd/" + path;
}

void Discovery::ScanProcess(uint32_t pid, bool at_start) {
  std::string maps = options_.proc_root + "/" + std::to_string(pid) + "/maps";
  bool cuda = false;
  std::vector<std::string> libc;
  for (const std::string& path : MappedFiles(maps)) {
    std::string base = Basename(path);
    if (IsCudaLibraryName(base)) {
      cuda = true;
      ExamineLibrary(pid, path, at_start);
    } else if (ClassByName(base) == LibraryClass::kLibc) {
      libc.push_back(path);
    }
  }
  // setenv/putenv of the libc this CUDA program uses (a container's own libc, too).
  if (cuda && options_.watch_setenv) {
    for (const std::string& path : libc) (void)attacher_->ProbeFile(ProcPath(pid, path), path);
  }
  ExamineExecutable(pid, at_start);
}

void Discovery::ExamineExecutable(uint32_t pid, bool report_late, const std::string& exec_path) {
  std::string exe = options_.proc_root + "/" + std::to_string(pid) + "/exe";
  std::error_code ec;
  std::string target = std::filesystem::read_symlink(exe, ec).string();
  Result<AttachOutcome> outcome = NotFound("no executable");
  if (!ec) outcome = attacher_->ProbeFile(exe, target);
  if (!outcome.ok() && !exec_path.empty()) {
    // The process is gone (or going): its EXEC record's path names the same file, as that
    // process saw it (its root), else as this process sees it.
    std::string root = options_.proc_root + "/" + std::to_string(pid) + "/root";
    bool root_there = ::access(root.c_str(), F_OK) == 0;
    target = exec_path;
    outcome = attacher_->ProbeFile(root_there ? ProcPath(pid, exec_path) : exec_path, exec_path);
    if (!outcome.ok() && root_there && ::access(root.c_str(), F_OK) != 0) {
      outcome = attacher_->ProbeFile(exec_path, exec_path);  // it went meanwhile
    }
  }
  if (!outcome.ok()) return;  // a kernel thread, or the process and its file are gone
  if (!outcome->unprobeable_reason.empty()) {
    AddUnprobeable(pid, target, outcome->unprobeable_reason);
    return;
  }
  if (outcome->cuda && (report_late || outcome->newly_probed)) {
    sink_->OnAttachedLate(pid, target);
  }
}

void Discovery::ExamineLibrary(uint32_t pid, const std::string& path, bool report_late) {
  Result<AttachOutcome> outcome = attacher_->ProbeFile(ProcPath(pid, path), path);
  if (!outcome.ok() || !outcome->cuda) return;
  if (report_late || outcome->newly_probed) sink_->OnAttachedLate(pid, path);
}

void Discovery::OnControlRecord(const void* data, size_t bytes) {
  if (bytes < sizeof(flyt_trace_path)) return;
  flyt_trace_path record;
  std::memcpy(&record, data, sizeof(record));
  record.path[sizeof(record.path) - 1] = '\0';
  uint32_t pid = record.h.pid;
  if (pid == self_pid_) return;
  switch (record.h.kind) {
    case FLYT_EV_EXEC:
      // Its libraries are not mapped yet: they come as LIBRARY_OPEN records.
      ExamineExecutable(pid, /*report_late=*/false, record.path);
      break;
    case FLYT_EV_LIBRARY_OPEN: {
      std::string path = record.path;
      if (!IsCudaLibraryName(Basename(path))) return;
      // A tracer's own examination (see cuda_trace.bpf.c's on_open): never followed.
      if (path.rfind("/proc/", 0) == 0) return;
      ExamineLibrary(pid, path, /*report_late=*/false);
      if (options_.watch_setenv) {
        std::string maps = options_.proc_root + "/" + std::to_string(pid) + "/maps";
        for (const std::string& mapped : MappedFiles(maps)) {
          if (ClassByName(Basename(mapped)) == LibraryClass::kLibc) {
            (void)attacher_->ProbeFile(ProcPath(pid, mapped), mapped);
          }
        }
      }
      break;
    }
    default:
      break;
  }
}

void Discovery::AddUnprobeable(uint32_t pid, const std::string& executable,
                               const std::string& reason) {
  for (const UnprobeableProcess& p : unprobeable_) {
    if (p.pid == pid && p.executable == executable) return;
  }
  spdlog::warn("trace: process {} ({}) runs CUDA but cannot be traced: {}", pid, executable,
               reason);
  unprobeable_.push_back({pid, executable, reason});
  if (unprobeable_.size() > kMaxUnprobeable) unprobeable_.pop_front();
}

}  // namespace flyt::trace
