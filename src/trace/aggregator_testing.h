// Helpers for the aggregator's tests: records built by hand (as the BPF program writes them), a
// fake /proc and cgroup tree in a temporary directory, and the lookup of one ProcessCuda entry.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <optional>
#include <fstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "trace/aggregator.h"
#include "trace/bpf/events.h"

namespace flyt::trace::testing {

inline constexpr uint64_t kSecond = 1000000000ull;

inline flyt_trace_header Header(uint16_t kind, uint16_t func, uint32_t pid, uint64_t ts_ns,
                                int32_t rc = 0, uint32_t tid = 0) {
  flyt_trace_header h{};
  h.ts_ns = ts_ns;
  h.pid = pid;
  h.tid = tid == 0 ? pid : tid;
  h.kind = kind;
  h.func = func;
  h.library = FLYT_LIB_NVIDIA_RUNTIME;
  h.rc = rc;
  return h;
}

template <typename T>
void Feed(RecordSink& sink, const T& record) {
  sink.OnRecord(&record, sizeof(record));
}

inline flyt_trace_launch Launch(uint32_t pid, uint64_t ts, uint64_t function, uint64_t stream = 0,
                                std::array<uint32_t, 3> grid = {1, 1, 1},
                                std::array<uint32_t, 3> block = {1, 1, 1}, uint32_t tid = 0,
                                uint16_t func = FLYT_FN_cudaLaunchKernel, int32_t rc = 0) {
  flyt_trace_launch r{};
  r.h = Header(FLYT_EV_LAUNCH, func, pid, ts, rc, tid);
  r.function = function;
  r.stream = stream;
  std::copy(grid.begin(), grid.end(), r.grid);
  std::copy(block.begin(), block.end(), r.block);
  return r;
}

inline flyt_trace_alloc Alloc(uint32_t pid, uint64_t ts, uint64_t ptr, uint64_t bytes,
                              uint32_t memory = FLYT_MEM_DEVICE, int32_t rc = 0,
                              uint16_t func = FLYT_FN_cudaMalloc, uint32_t tid = 0) {
  flyt_trace_alloc r{};
  r.h = Header(FLYT_EV_ALLOC, func, pid, ts, rc, tid);
  r.ptr = rc == 0 ? ptr : 0;
  r.bytes = bytes;
  r.memory = memory;
  return r;
}

inline flyt_trace_free Free(uint32_t pid, uint64_t ts, uint64_t ptr, int32_t rc = 0,
                            uint16_t func = FLYT_FN_cudaFree) {
  flyt_trace_free r{};
  r.h = Header(FLYT_EV_FREE, func, pid, ts, rc);
  r.ptr = ptr;
  r.memory = func == FLYT_FN_cudaFreeHost ? FLYT_MEM_HOST_PINNED : FLYT_MEM_DEVICE;
  return r;
}

inline flyt_trace_copy Copy(uint32_t pid, uint64_t ts, uint64_t dst, uint64_t src, uint64_t bytes,
                            uint32_t kind, uint64_t stream = 0,
                            uint16_t func = FLYT_FN_cudaMemcpyAsync, uint32_t tid = 0) {
  flyt_trace_copy r{};
  bool memset = func >= FLYT_FN_cudaMemset && func <= FLYT_FN_cudaMemsetAsync_ptsz;
  r.h = Header(memset ? FLYT_EV_MEMSET : FLYT_EV_COPY, func, pid, ts, 0, tid);
  r.dst = dst;
  r.src = src;
  r.bytes = bytes;
  r.stream = stream;
  r.copy_kind = kind;
  r.async = (func == FLYT_FN_cudaMemcpyAsync || func == FLYT_FN_cudaMemcpyAsync_ptsz ||
             func == FLYT_FN_cudaMemsetAsync || func == FLYT_FN_cudaMemsetAsync_ptsz)
                ? 1
                : 0;
  return r;
}

inline flyt_trace_sync Sync(uint32_t pid, uint64_t ts, uint16_t func, uint64_t object = 0,
                            uint32_t tid = 0, int32_t rc = 0) {
  flyt_trace_sync r{};
  r.h = Header(FLYT_EV_SYNC, func, pid, ts, rc, tid);
  r.object = object;
  return r;
}

inline flyt_trace_stream StreamCreate(uint32_t pid, uint64_t ts, uint64_t stream, uint32_t flags,
                                      bool create = true) {
  flyt_trace_stream r{};
  r.h = Header(create ? FLYT_EV_STREAM_CREATE : FLYT_EV_STREAM_DESTROY,
               create ? FLYT_FN_cudaStreamCreateWithFlags : FLYT_FN_cudaStreamDestroy, pid, ts);
  r.stream = stream;
  r.flags = flags;
  return r;
}

inline flyt_trace_event_record EventRecord(uint32_t pid, uint64_t ts, uint64_t event,
                                           uint64_t stream) {
  flyt_trace_event_record r{};
  r.h = Header(FLYT_EV_EVENT_RECORD, FLYT_FN_cudaEventRecord, pid, ts);
  r.event = event;
  r.stream = stream;
  return r;
}

inline flyt_trace_set_device SetDevice(uint32_t pid, uint64_t ts, int32_t device, uint32_t tid = 0,
                                       int32_t rc = 0) {
  flyt_trace_set_device r{};
  r.h = Header(FLYT_EV_SET_DEVICE, FLYT_FN_cudaSetDevice, pid, ts, rc, tid);
  r.device = device;
  return r;
}

inline flyt_trace_name Name(uint32_t pid, uint64_t ts, uint64_t address, const std::string& name,
                            bool module = false) {
  flyt_trace_name r{};
  r.h = Header(module ? FLYT_EV_MODULE_FUNCTION : FLYT_EV_REGISTER_FUNCTION,
               module ? FLYT_FN_cuModuleGetFunction : FLYT_FN___cudaRegisterFunction, pid, ts);
  r.address = address;
  std::strncpy(r.name, name.c_str(), sizeof(r.name) - 1);
  return r;
}

inline flyt_trace_get_kernel GetKernel(uint32_t pid, uint64_t ts, uint64_t handle, uint64_t stub) {
  flyt_trace_get_kernel r{};
  r.h = Header(FLYT_EV_GET_KERNEL, FLYT_FN___cudaGetKernel, pid, ts);
  r.handle = handle;
  r.stub = stub;
  return r;
}

inline flyt_trace_env Setenv(uint32_t pid, uint64_t ts, const std::string& text) {
  flyt_trace_env r{};
  r.h = Header(FLYT_EV_SETENV, FLYT_FN_setenv, pid, ts);
  r.h.library = FLYT_LIB_LIBC;
  std::strncpy(r.text, text.c_str(), sizeof(r.text) - 1);
  return r;
}

// An ENVIRON record as the BPF side writes it; `cut_at`: only that many bytes of
// the environment were copied (flagged truncated).
inline std::vector<unsigned char> Environ(uint32_t pid, uint64_t ts,
                                          const std::vector<std::string>& env,
                                          std::optional<size_t> cut_at = std::nullopt) {
  std::string text;
  for (const std::string& e : env) text += e + '\0';
  flyt_trace_environ fixed{};
  fixed.h = Header(FLYT_EV_ENVIRON, FLYT_FN_NONE, pid, ts);
  fixed.h.library = 0;
  if (cut_at && *cut_at < text.size()) {
    text.resize(*cut_at);
    fixed.h.flags |= FLYT_F_TRUNCATED;
  }
  fixed.bytes = static_cast<uint32_t>(std::min<size_t>(text.size(), FLYT_TRACE_ENVIRON_BYTES));
  // As long as its environment, like the BPF side's.
  std::vector<unsigned char> out(offsetof(flyt_trace_environ, text) + fixed.bytes);
  std::memcpy(out.data(), &fixed, offsetof(flyt_trace_environ, text));
  std::memcpy(out.data() + offsetof(flyt_trace_environ, text), text.data(), fixed.bytes);
  return out;
}

inline void Feed(RecordSink& sink, const std::vector<unsigned char>& record) {
  sink.OnRecord(record.data(), record.size());
}

inline flyt_trace_path LibraryOpen(uint32_t pid, uint64_t ts, const std::string& path) {
  flyt_trace_path r{};
  r.h = Header(FLYT_EV_LIBRARY_OPEN, FLYT_FN_NONE, pid, ts);
  r.h.library = 0;
  std::strncpy(r.path, path.c_str(), sizeof(r.path) - 1);
  return r;
}

inline flyt_trace_header Exit(uint32_t pid, uint64_t ts, int32_t code) {
  return Header(FLYT_EV_EXIT, FLYT_FN_NONE, pid, ts, code);
}

// A temporary directory with a fake /proc (proc/<pid>/{comm,environ}) and cgroup tree.
class TempTree {
 public:
  TempTree() {
    char tmpl[] = "/tmp/flyt-trace-test-XXXXXX";
    root_ = mkdtemp(tmpl);
    std::filesystem::create_directories(root_ + "/proc");
    std::filesystem::create_directories(root_ + "/cgroup");
  }
  ~TempTree() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  std::string proc() const { return root_ + "/proc"; }
  std::string cgroup() const { return root_ + "/cgroup"; }
  void AddProcess(uint32_t pid, const std::string& comm, const std::vector<std::string>& env = {}) {
    std::string dir = proc() + "/" + std::to_string(pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/comm") << comm << "\n";
    std::ofstream out(dir + "/environ", std::ios::binary);
    for (const std::string& e : env) out << e << '\0';
  }
  void RemoveProcess(uint32_t pid) {
    std::filesystem::remove_all(proc() + "/" + std::to_string(pid));
  }
  // Makes cgroup/<path> and returns its inode number (the cgroup id).
  uint64_t AddCgroup(const std::string& path) {
    std::string dir = cgroup() + "/" + path;
    std::filesystem::create_directories(dir);
    return std::filesystem::exists(dir) ? Inode(dir) : 0;
  }
  static uint64_t Inode(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  }

 private:
  std::string root_;
};

inline TraceOptions Options(const TempTree& tree) {
  TraceOptions o;
  o.proc_root = tree.proc();
  o.cgroup_root = tree.cgroup();
  return o;
}

// The entry of `pid` on `device` (fails the test when there is none).
inline ProcessCuda Find(const std::vector<ProcessCuda>& all, uint32_t pid, int32_t device = 0) {
  for (const ProcessCuda& p : all) {
    if (p.pid == pid && p.device == device) return p;
  }
  ADD_FAILURE() << "no entry for pid " << pid << " device " << device;
  return {};
}

inline const StreamStats* FindStream(const ProcessCuda& p, uint64_t handle, bool per_thread = false,
                                     uint32_t thread = 0) {
  for (const StreamStats& s : p.streams) {
    if (s.handle == handle && s.per_thread == per_thread && s.thread == thread) return &s;
  }
  return nullptr;
}

}  // namespace flyt::trace::testing
